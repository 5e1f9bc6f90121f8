"""The exact variants on Sutton's (1992) continual tracking task, gamma = 1.

Runs ``suite_tasks.continual``'s MetaOptimize learners (SGD base, weight-wise
step sizes, from alpha_0 = 0.05) for the 2x2 and L approximations with meta SGD,
Adam and Lion over their eta grids, on the task's streams (250k examples,
3 seeds), and prints per eta the MSE over the last 10k examples (mean ± std over
seeds), the number of unstable seeds and the final relevant step size. Output
committed as ``results/suite/exact_2x2_continual.txt``.

    python benchmarks/exact_2x2_continual.py [--examples 250000] [--seeds 3]
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import jax
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from suite_tasks import continual, continual_methods  # pylint: disable=g-import-not-at-top,wrong-import-position

from metaoptax._src import exact  # pylint: disable=g-import-not-at-top,wrong-import-position

RUNS = (("2x2", "Adam"), ("2x2", "SGD"), ("2x2", "Lion"), ("l_approx", "Adam"))


def main(argv=None):
  parser = argparse.ArgumentParser()
  parser.add_argument("--examples", type=int, default=continual.FULL_EXAMPLES)
  parser.add_argument("--seeds", type=int, default=3)
  parser.add_argument("--radius", type=float, default=exact.DEFAULT_SENSITIVITY_RADIUS)
  args = parser.parse_args(argv)
  keys = jax.random.split(jax.random.PRNGKey(1992), args.seeds)  # the task's streams
  streams = jax.vmap(lambda k: continual.make_stream(k, args.examples))(keys)
  last = args.examples // continual.BIN_SIZE - continual.FINAL_WINDOW // continual.BIN_SIZE
  print(f"{args.examples} examples, {args.seeds} seeds, gamma = 1, alpha_0 = "
        f"{continual.INIT_STEP_SIZE}, trust radius {args.radius:g}")
  print("method | eta | MSE last 10k (mean ± std) | unstable seeds | final relevant alpha")
  for approximation, kind in RUNS:
    method = continual_methods._metaoptimize(  # pylint: disable=protected-access
        approximation, kind, sensitivity_radius=args.radius)
    result = continual.run_method(method, streams)
    errors = np.asarray(result.squared_error)  # (seeds, grid, bins)
    sizes = np.asarray(result.step_sizes)  # (seeds, grid, bins, inputs)
    unstable = continual._unstable_seeds(errors)  # pylint: disable=protected-access
    for j, eta in enumerate(method.grid):
      mse = errors[:, j, last:].mean(-1)
      relevant = sizes[:, j, -1, :continual.NUM_RELEVANT].mean()
      print(f"{method.name} | {eta:g} | {np.mean(mse):.3f} ± {np.std(mse):.3f} | "
            f"{unstable[j]} | {relevant:.3g}", flush=True)


if __name__ == "__main__":
  main()
