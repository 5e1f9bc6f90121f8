"""The mixture's reflection sampler at K = 1: what each part of its start buys.

``init_training(..., L2HMCConfig(reflection=True))`` starts the sampler at the exact-rotation
step sizes (``l2hmc.rotation_step_sizes``) with the whitening's location at the midpoint of
the warm-up chains' means (``l2hmc.warmup(location="midpoint")``). This ablation puts back
the earlier start, one part at a time: equal step sizes capped at a quarter period over K
(``QUARTER_PERIOD / K``, commit ``73c9b9b``'s), and the chains' pooled mean as the location,
by replacing those two functions of ``metaoptax.l2hmc.training`` for the run (nothing else
changes). Each of the 4 starts is trained from 3 seeds and scored as the mixture's rows of
``l2hmc_posteriors.py`` (same protocol: 32 chains, warm-up 300, 600 iterations of
``squares_coordinates``, burn-in 300, 1,000 transitions; step sizes only).

    taskset -c 0 python benchmarks/l2hmc_mixture_start.py --out benchmarks/results
"""

from __future__ import annotations

import argparse
import contextlib
import json
import pathlib
import sys
import types

import jax
import jax.numpy as jnp
import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _report  # pylint: disable=g-import-not-at-top,wrong-import-position
import l2hmc_posteriors  # pylint: disable=g-import-not-at-top,wrong-import-position
from metaoptax import l2hmc  # pylint: disable=g-import-not-at-top,wrong-import-position
from metaoptax.l2hmc import training  # pylint: disable=g-import-not-at-top,wrong-import-position

LABEL = "reflection, step sizes only, squares_coordinates, K = 1"
STARTS = {  # label -> (exact rotation, midpoint location)
    "equal step sizes, pooled mean (73c9b9b's start)": (False, False),
    "exact rotation, pooled mean": (True, False),
    "equal step sizes, midpoint": (False, True),
    "exact rotation, midpoint (the library's)": (True, True),
}


def _equal_step_sizes(step_size, num_steps, integrator="velocity_verlet"):
  """73c9b9b's start: both step sizes the warm-up's, capped at a quarter period over K."""
  del integrator  # equal step sizes whatever the splitting
  capped = jnp.minimum(jnp.asarray(step_size), training.QUARTER_PERIOD / num_steps)
  return capped, capped


@contextlib.contextmanager
def start(rotation: bool, midpoint: bool):
  saved = training.rotation_step_sizes, training._jitted_warmup  # pylint: disable=protected-access
  if not rotation:
    training.rotation_step_sizes = _equal_step_sizes
  if not midpoint:
    warmup = saved[1]
    training._jitted_warmup = lambda *a: warmup(*a[:-1], "mean")  # pylint: disable=protected-access
  try:
    yield
  finally:
    training.rotation_step_sizes, training._jitted_warmup = saved  # pylint: disable=protected-access


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--seeds", type=int, default=3)
  parser.add_argument("--out", type=pathlib.Path, default=HERE / "out")
  args = parser.parse_args(argv)
  protocol = types.SimpleNamespace(
      chains=32, burn_in=300, samples=1000, iterations=600, warmup=300, num_steps=1,
      learning_rate=1e-3)
  target = l2hmc.targets.mixture_of_gaussians()
  objective, variant = l2hmc_posteriors.MIXTURE_REFLECTION[LABEL]
  ref = l2hmc_posteriors.reference("mixture", target, jax.random.key(99), 0, 0)
  rows = []
  jobs = [(label, seed) for label in STARTS for seed in range(args.seeds)]
  for label, seed in _report.progress_bars()(jobs, desc="starts x seeds"):
    with start(*STARTS[label]):
      scores, (_, result) = l2hmc_posteriors.l2hmc_row(target, ref, label, variant, objective,
                                                       seed, protocol)
    scores["location_x0"] = float(result.whitening.location[0])
    rows.append(scores)
  result = dict(rows=rows, commit=_report.git_commit(short=True), seeds=args.seeds)
  args.out.mkdir(parents=True, exist_ok=True)
  (args.out / "l2hmc_mixture_start.json").write_text(json.dumps(result, indent=1))
  return _report.write_table(report(result), str(args.out / "l2hmc_mixture_start.md"))


def report(result) -> list[str]:
  lines = ["# The mixture's reflection sampler at K = 1: what each part of its start buys", "",
           f"{LABEL}; {result['seeds']} seeds, mean ± std; the mixture's protocol of "
           f"`l2hmc_posteriors.py`. Commit `{result['commit']}`.", "",
           "| start | ESS/grad x | ESS/grad x² | crossings | acceptance | |location x0| (max) |"
           " R-hat x, x² |", "|---|---|---|---|---|---|---|"]
  for label, rows in l2hmc_posteriors.grouped(result["rows"]).items():
    cells = l2hmc_posteriors.spread_cells(rows, ("ess_per_grad_x", "ess_per_grad_x2",
                                                 "crossings", "acceptance"))
    lines.append(f"| {label} | {cells} | {max(abs(r['location_x0']) for r in rows):.3f} | "
                 f"{max(r['rhat_x'] for r in rows):.3f}, {max(r['rhat_x2'] for r in rows):.3f} |")
  return lines


if __name__ == "__main__":
  main()
