"""The exact 2x2 (AdamW, Adam) scalar on the digits MLP (suite task 1), alone.

The suite's configuration (the default preset, ``approximation="2x2"``, scalar
step size from best / 100 = 3e-6, the paper's meta settings, gamma = 1), run by
the suite's runner for ``--steps`` steps and ``--seeds`` seeds; prints the train
loss − floor (mean ± std over seeds) and the step size every 4000 steps, and the
wall time. Output committed as ``results/suite/exact_2x2_digits.txt``.

    python benchmarks/exact_2x2_digits.py [--steps 48000] [--seeds 3]
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from suite_tasks import digits  # pylint: disable=g-import-not-at-top,wrong-import-position
from suite_tasks import methods  # pylint: disable=g-import-not-at-top,wrong-import-position
from suite_tasks import runner  # pylint: disable=g-import-not-at-top,wrong-import-position

START, CHUNK, EVERY = 3e-6, 500, 4000


class _Progress:
  """Prints the mean loss every ``EVERY`` steps (the runner's progress bar)."""

  def __init__(self, total, desc):
    self.step, self.desc = 0, desc

  def update(self, n):
    self.step += n

  def set_postfix_str(self, text):
    if self.step % EVERY == 0:
      print(f"{self.desc} step {self.step}: {text}", flush=True)

  def close(self):
    pass


def main(argv=None):
  parser = argparse.ArgumentParser()
  parser.add_argument("--steps", type=int, default=digits.CONFIG.steps)
  parser.add_argument("--seeds", type=int, default=3)
  args = parser.parse_args(argv)
  problem = digits.make_problem()
  method = methods.preset(methods.DEFAULT, START, approximation="2x2")
  (log,) = runner.train(problem, method, steps=args.steps, seeds=args.seeds, chunk=CHUNK,
                        progress=_Progress)
  loss = log.train_loss - problem.train_loss_floor
  print(f"{method.name}, start {START:g}, {args.seeds} seeds, {args.steps} steps, "
        f"wall {log.seconds:.0f} s (all seeds, compile excluded)")
  print("step | train loss − floor (mean ± std) | alpha per seed")
  for i, step in enumerate(log.steps):
    if step % EVERY == 0 and step:
      alphas = " ".join(f"{a:.3g}" for a in log.step_sizes[:, i, 0])
      print(f"{step} | {np.mean(loss[:, i]):.3g} ± {np.std(loss[:, i]):.1g} | {alphas}")


if __name__ == "__main__":
  main()
