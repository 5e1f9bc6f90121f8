"""The baselines of ``l2o_transfer.py`` alone, at this commit: ``optax.adam`` at every rate
of the grid (the best per network and budget) and ``metaoptax.adamw()``, on the three
unseen networks, 3 seeds, 5,000 steps, reported at 1,000 and 5,000.

The learned-only runs (``l2o_transfer.py --learned-only``) are compared with these
(``l2o_transfer_seeds.py --baseline``): they do not depend on meta-training, but a table's
baselines measured at the commit of its learned optimizer share its code and versions.

    python benchmarks/l2o_transfer_baselines.py --name l2o_transfer_baselines_COMMIT
"""

from __future__ import annotations

import argparse
import json
import pathlib

import jax

import _report
import l2o_transfer
from suite_tasks import runner


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--name", required=True, help="file name (without suffix) in --dir")
  parser.add_argument("--dir", type=pathlib.Path, default=l2o_transfer.RESULTS)
  parser.add_argument("--chunk", type=int, default=250)
  args = parser.parse_args(argv)
  commit = _report.git_commit(short=True)
  adam, drop_in = l2o_transfer.methods(None, None)[:2]
  results = {}
  for name, problem in l2o_transfer.problems().items():
    logs = []
    for method in (adam, drop_in):
      logs += runner.train(problem, method, steps=l2o_transfer.STEPS, seeds=l2o_transfer.SEEDS,
                           chunk=args.chunk, progress=_report.progress_bars())
    results[name] = (problem, logs)
  rows = l2o_transfer.summary(results, l2o_transfer.BUDGETS)
  record = {"commit": commit, "jax": jax.__version__,
            "rows": {f"{name} @ {budget}": row for (name, budget), row in rows.items()}}
  args.dir.mkdir(parents=True, exist_ok=True)
  (args.dir / f"{args.name}.json").write_text(json.dumps(record, indent=1))
  print(f"wrote {args.dir / args.name}.json")


if __name__ == "__main__":
  main()
