"""The mixture's reflection sampler with position Verlet: one gradient a transition at K = 1.

With velocity Verlet (kick-drift-kick) the reflection sampler at K = 1 evaluates two
gradients a transition: its trajectory's end point's, and the reflected point's when the
reflection is accepted (the carried gradient is then not the chain's). Position Verlet
(drift-kick-drift, ``L2HMCConfig(integrator="position_verlet")``,
``metaoptax.l2hmc.integrators``) evaluates its gradient at the step's midpoint and none at the
end points: K gradients a transition with the reflection, plus evaluations of ``log p``
alone (the end point's and the reflected point's). Both start at their splitting's
exact-rotation step sizes (``l2hmc.rotation_step_sizes``) with the reflection through the
midpoint of the warm-up chains' means, trained from 3 seeds with the mixture's protocol of
``l2hmc_posteriors.py`` (32 chains, warm-up 300, 600 iterations of ``squares_coordinates``,
burn-in 300, 1,000 transitions; step sizes only). In the same process: the exact reference,
NUTS (window adaptation), HMC at K = 10 (``HMC_GRID``) and tuned HMC at short trajectories
(``SHORT_HMC_GRID``, ``--hmc-steps``).

    taskset -c 0 python benchmarks/l2hmc_mixture_dkd.py --out benchmarks/results
    python benchmarks/l2hmc_mixture_dkd.py --quick     # smoke run
"""

from __future__ import annotations

import argparse
import functools
import json
import pathlib
import sys
import time
import types

import jax
import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _report  # pylint: disable=g-import-not-at-top,wrong-import-position
import l2hmc_posteriors  # pylint: disable=g-import-not-at-top,wrong-import-position
from metaoptax import l2hmc  # pylint: disable=g-import-not-at-top,wrong-import-position

OBJECTIVE = "squares_coordinates"
_REFLECTION = dict(l2hmc_posteriors.VARIANTS["step sizes only"], reflection=True)
#: label -> L2HMCConfig fields (the reflection sampler, step sizes only)
ROWS = {
    f"reflection, {name}, K = {steps}": dict(_REFLECTION, num_steps=steps, integrator=integrator)
    for name, integrator, steps in (("velocity Verlet", "velocity_verlet", 1),
                                    ("position Verlet", "position_verlet", 1),
                                    ("position Verlet", "position_verlet", 2))}


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--seeds", type=int, default=3)
  parser.add_argument("--hmc-steps", type=int, nargs="*", default=[1, 2])
  parser.add_argument("--quick", action="store_true")
  parser.add_argument("--out", type=pathlib.Path, default=HERE / "out")
  args = parser.parse_args(argv)
  protocol = types.SimpleNamespace(
      chains=32, burn_in=300, samples=1000, iterations=600, warmup=300, num_steps=10,
      learning_rate=1e-3, quick=args.quick, hmc_steps=args.hmc_steps)
  if args.quick:
    args.seeds = 1
    protocol.chains, protocol.burn_in, protocol.samples = 8, 20, 100
    protocol.iterations, protocol.warmup = 10, 40
  start = time.perf_counter()
  progress = _report.progress_bars()
  target = l2hmc.targets.mixture_of_gaussians()
  ref = l2hmc_posteriors.reference("mixture", target, jax.random.key(99), 0, 0)
  key = jax.random.key(0)  # l2hmc_posteriors.py's baselines key
  found = l2hmc_posteriors.baselines(target, ref, protocol, key,
                                     functools.partial(progress, desc="NUTS, HMC grid"))
  hmc_short = l2hmc_posteriors.short_hmc(target, ref, protocol, key, functools.partial(
      progress, desc=f"HMC at K = {args.hmc_steps}"))
  rows = []
  jobs = [(label, seed) for label in ROWS for seed in range(args.seeds)]
  for label, seed in progress(jobs, desc="L2HMC rows x seeds"):
    scores, (config, _) = l2hmc_posteriors.l2hmc_row(target, ref, label, ROWS[label],
                                                     OBJECTIVE, seed, protocol,
                                                     iterations=protocol.iterations)
    scores["logdensity_evaluations"] = l2hmc.logdensity_evaluations(config)
    rows.append(scores)
  result = dict(reference=ref, nuts=found["nuts"], hmc=found["hmc"], hmc_short=hmc_short,
                rows=rows, commit=_report.git_commit(short=True), seeds=args.seeds,
                quick=args.quick, protocol=vars(protocol),
                seconds=time.perf_counter() - start)
  args.out.mkdir(parents=True, exist_ok=True)
  (args.out / "l2hmc_mixture_dkd.json").write_text(json.dumps(result, indent=1))
  return _report.write_table(report(result), str(args.out / "l2hmc_mixture_dkd.md"))


def _per_second(row, key):
  return 1.0 / row[f"seconds_per_ess_{key}"]


def _cells(rows) -> str:
  """The score cells of one sampler's rows (seeds): mean ± std where there are several."""
  spread = l2hmc_posteriors.spread_cells
  per_second = [dict(x=_per_second(r, "x"), x2=_per_second(r, "x2")) for r in rows]
  evaluations = [dict(e=r["ess_x2"] / (r["grads_per_transition"]
                                       + r.get("logdensity_evaluations", 0))) for r in rows]
  return (f"{rows[0]['grads_per_transition']:.3g} | {rows[0].get('logdensity_evaluations', 0)} | "
          f"{spread(rows, ('ess_per_grad_x', 'ess_per_grad_x2'))} | "
          f"{spread(per_second, ('x', 'x2'))} | {spread(evaluations, ('e',))} | "
          f"{spread(rows, ('crossings', 'acceptance'))} | "
          f"{max(r['rhat_x'] for r in rows):.3f}, {max(r['rhat_x2'] for r in rows):.3f} | "
          f"{max(r['mean_error'] for r in rows):.3f} |")


def report(result) -> list[str]:
  p = result["protocol"]
  lines = ["# The mixture's reflection sampler with position Verlet", "",
           f"Step sizes only, `{OBJECTIVE}`, exact-rotation start, reflection through the "
           f"midpoint of the warm-up chains' means; {result['seeds']} training seeds, mean ± "
           f"std; {p['chains']} chains, warm-up {p['warmup']}, {p['iterations']} training "
           f"iterations, burn-in {p['burn_in']}, {p['samples']} transitions. NUTS and HMC rerun "
           f"in the same process (one run each; HMC: the best step of its grid at each K). "
           f"ESS: Geyer's, min over the 2 dimensions, per gradient evaluation and per second of "
           f"sampling (the chains vmapped, compiled; median of 3 runs on a shared CPU core). "
           f"grads: gradients a transition evaluates; log p only: evaluations of log p "
           f"without a gradient (position Verlet's end points); ESS x² / eval.: per gradient "
           f"or log p evaluation, the conservative count. Commit `{result['commit']}`"
           f"{' (--quick)' if result['quick'] else ''}, {result['seconds']:.0f} s.", "",
           "| sampler | grads | log p only | ESS/grad x | ESS/grad x² | ESS/s x | ESS/s x² | "
           "ESS x² / eval. | crossings | acceptance | R-hat x, x² | mean err |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
  nuts, hmc = result["nuts"], result["hmc"]
  lines.append(f"| NUTS (window adaptation) | {_cells([nuts])}")
  lines.append(f"| HMC (K = {p['num_steps']}, step {hmc['step_size']:.3g}) | {_cells([hmc])}")
  for row in result["hmc_short"]:
    lines.append(f"| HMC (K = {row['num_steps']}, step {row['step_size']:.3g}) | "
                 f"{_cells([row])}")
  for label, rows in l2hmc_posteriors.grouped(result["rows"]).items():
    lines.append(f"| L2HMC, {label} | {_cells(rows)}")
  best = max([hmc] + result["hmc_short"], key=lambda r: r["ess_per_grad_x2"])
  lines += ["", "| L2HMC sampler | ESS/grad x² over the best tuned HMC's | over NUTS's | "
            "crossings >= 50 % | ESS x² >= HMC |", "|---|---|---|---|---|"]
  for label, rows in l2hmc_posteriors.grouped(result["rows"]).items():
    ours = np.mean([r["ess_per_grad_x2"] for r in rows])
    crossings = np.mean([r["crossings"] for r in rows])
    lines.append(f"| {label} | {ours / best['ess_per_grad_x2']:.2f} (HMC K = "
                 f"{best.get('num_steps', p['num_steps'])}: {best['ess_per_grad_x2']:.3g}) | "
                 f"{ours / nuts['ess_per_grad_x2']:.2f} | "
                 f"{'met' if crossings >= 0.5 else 'missed'} | "
                 f"{'met' if ours >= best['ess_per_grad_x2'] else 'missed'} |")
  return lines


if __name__ == "__main__":
  main()
