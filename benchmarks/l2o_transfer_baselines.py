"""The baselines of ``l2o_transfer.py`` alone, at this commit: ``optax.adam`` at every rate
of the grid (the best per network and budget) and ``metaoptax.adamw()``, on the three
unseen networks, 3 seeds, 5,000 steps, reported at 1,000 and 5,000.

The learned-only runs (``l2o_transfer.py --learned-only``) are compared with these
(``l2o_transfer_seeds.py --baseline``): they do not depend on meta-training, but a table's
baselines measured at the commit of its learned optimizer share its code and versions.

With ``--cosine`` it runs instead ``optax.adam`` on ``optax.cosine_decay_schedule`` over
each budget (one run per budget, its schedule ending there) at every rate of the grid: the
start of the tenth attempt (``l2o_transfer.py --cosine-decay``, Adam with the cosine of its
budget at the base rate) and the per-budget tuned cosine a user could pick.

    python benchmarks/l2o_transfer_baselines.py --name l2o_transfer_baselines_COMMIT
    python benchmarks/l2o_transfer_baselines.py --cosine --name l2o_transfer_cosine_COMMIT
"""

from __future__ import annotations

import argparse
import json
import pathlib

import jax
import numpy as np
import optax

import _report
import l2o_transfer
from suite_tasks import runner


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--name", required=True, help="file name (without suffix) in --dir")
  parser.add_argument("--dir", type=pathlib.Path, default=l2o_transfer.RESULTS)
  parser.add_argument("--chunk", type=int, default=250)
  parser.add_argument("--cosine", action="store_true",
                      help="Adam with a cosine over each budget, at every rate of the grid")
  parser.add_argument("--rates", type=float, nargs="+", default=l2o_transfer.ADAM_GRID,
                      help="the rates of --cosine (default: the Adam grid)")
  args = parser.parse_args(argv)
  commit = _report.git_commit(short=True)
  if args.cosine:
    return cosine(args, commit)
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


def cosine(args, commit):
  """Per network and budget, Adam with a cosine over that budget at every rate of ``--rates``:
  ``rows["<network> @ <budget>"]["cosine lr <rate>"] = {"train_loss": [...], "test": [...],
  "non_finite": n}`` (train loss above the problem's floor, at the budget's last step)."""
  grid = tuple(args.rates)
  rows = {}
  for name, problem in l2o_transfer.problems().items():
    for budget in l2o_transfer.BUDGETS:
      method = runner.Method(
          f"Adam, cosine over {budget}", "adam",
          lambda rate, budget=budget: optax.adam(optax.cosine_decay_schedule(rate, budget)),
          values=grid, names=tuple((f"Adam cosine {r:g}", f"lr {r:g}") for r in grid))
      logs = runner.train(problem, method, steps=budget, seeds=l2o_transfer.SEEDS,
                          chunk=args.chunk, progress=_report.progress_bars())
      rows[f"{name} @ {budget}"] = {
          f"cosine {log.method.info}": {
              "train_loss": (log.train_loss[:, -1] - problem.train_loss_floor).tolist(),
              "test": log.test[:, -1].tolist(),
              "non_finite": int(np.sum(~np.isfinite(log.train_loss[:, -1])))}
          for log in logs}
  record = {"commit": commit, "jax": jax.__version__, "rows": rows}
  args.dir.mkdir(parents=True, exist_ok=True)
  (args.dir / f"{args.name}.json").write_text(json.dumps(record, indent=1))
  print(f"wrote {args.dir / args.name}.json")


if __name__ == "__main__":
  main()
