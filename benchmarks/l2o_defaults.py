"""Which meta-training settings should be the defaults: log meta-loss on or off, and the
ellipse family's training sampler.

The README's learned optimizer (LSTM(lr, tele, momentum), ``tasks_per_step=64,
horizon=20, unroll=10``, the default meta-optimizer: Adam 1e-3 with clipping) is
meta-trained per setting, ``log_loss`` in {False, True} x the training sampler
of ``l2o.tasks.ellipse`` in ``ELLIPSE_SAMPLERS``, for ``--iterations`` task batches
from each of ``--seeds`` training seeds, and evaluated on 200 unseen tasks of each evaluation
distribution (det-bounded, the paper code's unbounded draw, ill-conditioned):
median loss at step 11, as in ``benchmarks/l2o_teleport.py``. The geometric mean
of the three medians ranks the settings.

    taskset -c 1 python benchmarks/l2o_defaults.py             # 12 min on 2 busy cores
    python benchmarks/l2o_defaults.py --quick                  # smoke run
    python benchmarks/l2o_defaults.py --results                # write benchmarks/results/

Writes ``l2o_defaults.md`` into ``--out`` (default ``benchmarks/out/``, git-ignored).
"""

from __future__ import annotations

import argparse
import itertools
import pathlib
import time

import jax
import numpy as np

import _report
from metaoptax import l2o

EVALUATION = {"det-bounded": "det_bounded", "reference": "reference",
              "ill-conditioned": "ill_conditioned"}
STEPS, AT = 20, 11
OUT = pathlib.Path(__file__).resolve().parent / "out"
RESULTS = pathlib.Path(__file__).resolve().parent / "results"


def median_at(optimizer, sampler, num_tasks):
  losses = np.asarray(l2o.evaluate(jax.random.key(4242), l2o.tasks.ellipse(sampler=sampler),
                                   optimizer, num_tasks, STEPS))[:, AT]
  return float(np.median(np.where(np.isfinite(losses), losses, np.inf)))


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--iterations", type=int, default=300)
  parser.add_argument("--num-tasks", type=int, default=200)
  parser.add_argument("--seeds", type=int, default=1, help="training seeds per setting")
  parser.add_argument("--out", type=pathlib.Path, default=OUT)
  parser.add_argument("--results", action="store_true",
                      help="write into benchmarks/results/ instead of --out")
  parser.add_argument("--quick", action="store_true")
  args = parser.parse_args(argv)
  if args.quick:
    args.iterations, args.num_tasks = 3, 20
  commit = _report.git_commit(short=True)
  start = time.perf_counter()
  config = l2o.L2OConfig(heads=("learning_rate", "teleport", "momentum"), group_dim=1)
  rows = []
  for log_loss, sampler in itertools.product((False, True), l2o.tasks.ELLIPSE_SAMPLERS):
    training = l2o.TrainingConfig(tasks_per_step=64, horizon=20, unroll=10,
                                  log_loss=log_loss)
    print(f"log_loss={log_loss}, sampler={sampler}", flush=True)
    per_seed, seconds, skipped = [], 0.0, 0
    for seed in range(args.seeds):
      result = l2o.train(jax.random.key(seed), l2o.tasks.ellipse(sampler=sampler), config,
                         training, num_iterations=args.iterations,
                         log_every=max(1, args.iterations // 10))
      opt = config.transformation(result.params)
      per_seed.append([median_at(opt, s, args.num_tasks) for s in EVALUATION.values()])
      seconds, skipped = seconds + result.seconds, skipped + result.skipped_updates
    rows.append((log_loss, sampler, np.asarray(per_seed), seconds, skipped))
  score = lambda row: float(np.exp(np.mean(np.log(row[2]))))
  best = min(rows, key=score)
  lines = ["# Meta-training defaults: log meta-loss and the ellipse sampler", "",
           f"measured at commit `{commit}`, jax {jax.__version__}"
           + (" (--quick)" if args.quick else "")
           + f"; {time.perf_counter() - start:.0f} s on 2 CPU cores shared with other jobs.",
           "",
           f"LSTM(lr, tele, momentum) of the README, {args.iterations} task batches of 64 "
           "tasks, horizon 20 / unroll 10, default meta-optimizer, training seeds "
           f"{' / '.join(map(str, range(args.seeds)))}. Median loss at step "
           f"{AT} on {args.num_tasks} unseen tasks of each evaluation distribution (per seed); "
           "score: the geometric mean over distributions and seeds (lower is better).", "",
           "| log_loss | training sampler | " + " | ".join(EVALUATION) +
           " | score | meta-training s (all seeds) | skipped |",
           "|---|---|---|---|---|---|---|---|"]
  for row in rows:
    mark = " **(best)**" if row is best else ""
    lines.append(f"| {row[0]} | {row[1]}{mark} | "
                 + " | ".join(" / ".join(f"{m:.3g}" for m in column) for column in row[2].T)
                 + f" | {score(row):.3g} | {row[3]:.0f} | {row[4]} |")
  out = RESULTS if args.results else args.out
  out.mkdir(parents=True, exist_ok=True)
  _report.write_table(lines, str(out / "l2o_defaults.md"))


if __name__ == "__main__":
  main()
