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

The per-second scores time each sampler alone (the median of 3 runs), minutes apart on a
shared core. ``--costs`` (also ``--costs-only``: on the stored results) times the transitions
again with the samplers interleaved (``interleaved_medians``: 32 chains,
``COST_TRANSITIONS`` scanned transitions a call, ``--cost-repeats`` rounds), L2HMC with the
mixture's within-mode whitening and the exact-rotation step sizes at the cap (a transition's
cost does not depend on the values), blackjax HMC at each measured K with its tuned step.
Every setting the committed rows were measured with is spelled out
(``l2hmc_posteriors.MEASURED_CONFIG``: no jitter of the step sizes, among others).

    taskset -c 0 python benchmarks/l2hmc_mixture_dkd.py --costs --out benchmarks/results
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
import jax.numpy as jnp
import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _report  # pylint: disable=g-import-not-at-top,wrong-import-position
import l2hmc_posteriors  # pylint: disable=g-import-not-at-top,wrong-import-position
from metaoptax import l2hmc  # pylint: disable=g-import-not-at-top,wrong-import-position

#: The files under benchmarks/results/ that this script writes (glob patterns;
#: tests/integration/test_repository_shape.py checks every committed result against them).
OUTPUTS = ("l2hmc_mixture_dkd.json", "l2hmc_mixture_dkd.md",)

OBJECTIVE = "squares_coordinates"
_REFLECTION = dict(l2hmc_posteriors.VARIANTS["step sizes only"], reflection=True)
#: label -> L2HMCConfig fields (the reflection sampler, step sizes only)
ROWS = {
    f"reflection, {name}, K = {steps}": dict(_REFLECTION, num_steps=steps, integrator=integrator)
    for name, integrator, steps in (("velocity Verlet", "velocity_verlet", 1),
                                    ("position Verlet", "position_verlet", 1),
                                    ("position Verlet", "position_verlet", 2))}
COST_TRANSITIONS = 1000  # scanned transitions per timed call


def interleaved_medians(calls: dict, repeats: int) -> dict:
  """``{name: median seconds}`` of ``calls[name]()``, the calls interleaved per repeat."""
  times = {name: [] for name in calls}
  for _ in range(repeats):
    for name, call in calls.items():
      start = time.perf_counter()
      jax.block_until_ready(call())
      times[name].append(time.perf_counter() - start)
  return {name: float(np.median(t)) for name, t in times.items()}


def compiled(fn, *args):
  """``fn`` compiled for ``args`` and run once, as a call without arguments."""
  executable = jax.jit(fn).lower(*args).compile()
  jax.block_until_ready(executable(*args))
  return lambda: executable(*args)


def scanned(sampler, chains: int, transitions: int):
  """``run(key, states) -> states``: ``transitions`` vmapped transitions of ``chains`` chains in
  one ``lax.scan``."""
  def run(key, states):
    def one(states, key):
      return jax.vmap(sampler.step)(jax.random.split(key, chains), states)[0], None

    return jax.lax.scan(one, states, jax.random.split(key, transitions))[0]

  return run


def transition_costs(target, rows: dict, hmc: list, chains: int, repeats: int) -> dict:
  """Seconds per transition of all ``chains`` (vmapped, scanned), the samplers interleaved:
  ``{label: seconds}`` for each L2HMC configuration of ``rows`` and each HMC of ``hmc``."""
  import blackjax  # pylint: disable=g-import-not-at-top
  whitening = l2hmc.Whitening(jnp.zeros(target.dim), jnp.full((target.dim,), 0.32))
  samplers = {}
  for label, variant in rows.items():
    config = l2hmc.L2HMCConfig(dim=target.dim, **l2hmc_posteriors.MEASURED_CONFIG, **variant)
    eps_x, eps_v = l2hmc.rotation_step_sizes(jnp.full((target.dim,), 2.0), config.num_steps,
                                             config.integrator)
    params = l2hmc.init_params(jax.random.key(0), config, step_size=eps_x)
    params = params._replace(log_step_size_v=jnp.broadcast_to(jnp.log(eps_v),
                                                              params.log_step_size_v.shape))
    samplers[f"L2HMC, {label}"] = l2hmc.l2hmc(target.logdensity_fn, config, params,
                                              l2hmc.make_masks(jax.random.key(1), config),
                                              whitening)
  for row in hmc:
    samplers[f"HMC (K = {row['num_steps']}, step {row['step_size']:.3g})"] = blackjax.hmc(
        target.logdensity_fn, row["step_size"], jnp.ones(target.dim), row["num_steps"])
  positions = jax.random.normal(jax.random.key(2), (chains, target.dim))

  calls = {label: compiled(scanned(sampler, chains, COST_TRANSITIONS), jax.random.key(3),
                           jax.vmap(sampler.init)(positions))
           for label, sampler in samplers.items()}
  medians = interleaved_medians(calls, repeats)
  return {label: seconds / COST_TRANSITIONS for label, seconds in medians.items()}


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--seeds", type=int, default=3)
  parser.add_argument("--hmc-steps", type=int, nargs="*", default=[1, 2])
  parser.add_argument("--costs", action="store_true",
                      help="also time the transitions with the samplers interleaved")
  parser.add_argument("--costs-only", action="store_true",
                      help="only the interleaved timing, added to the stored results")
  parser.add_argument("--cost-repeats", type=int, default=21)
  parser.add_argument("--quick", action="store_true")
  parser.add_argument("--out", type=pathlib.Path, default=HERE / "out")
  args = parser.parse_args(argv)
  path = args.out / "l2hmc_mixture_dkd.json"
  target = l2hmc.targets.mixture_of_gaussians()
  if args.costs_only:
    result = json.loads(path.read_text())
  else:
    result = sample(args, target)
  if args.costs or args.costs_only:
    start = time.perf_counter()
    hmc = [dict(result["hmc"], num_steps=result["protocol"]["num_steps"])]
    seconds = transition_costs(target, ROWS, hmc + result["hmc_short"],
                               result["protocol"]["chains"], 3 if args.quick else args.cost_repeats)
    result["costs"] = dict(seconds_per_transition=seconds, commit=_report.git_commit(short=True),
                           repeats=3 if args.quick else args.cost_repeats,
                           transitions=COST_TRANSITIONS, seconds=time.perf_counter() - start)
  args.out.mkdir(parents=True, exist_ok=True)
  path.write_text(json.dumps(result, indent=1))
  return _report.write_table(report(result), str(args.out / "l2hmc_mixture_dkd.md"))


def sample(args, target) -> dict:
  """The reference, NUTS, HMC and the L2HMC rows (trained, sampled and scored)."""
  protocol = types.SimpleNamespace(
      chains=32, burn_in=300, samples=1000, iterations=600, warmup=300, num_steps=10,
      learning_rate=1e-3, quick=args.quick, hmc_steps=args.hmc_steps)
  if args.quick:
    args.seeds = 1
    protocol.chains, protocol.burn_in, protocol.samples = 8, 20, 100
    protocol.iterations, protocol.warmup = 10, 40
  start = time.perf_counter()
  progress = _report.progress_bars()
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
  return dict(reference=ref, nuts=found["nuts"], hmc=found["hmc"], hmc_short=hmc_short,
              rows=rows, commit=_report.git_commit(short=True), seeds=args.seeds,
              quick=args.quick, protocol=vars(protocol), seconds=time.perf_counter() - start)


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
  if "costs" in result:
    lines += cost_report(result)
  return lines


def cost_report(result) -> list[str]:
  """The interleaved timing: ms per transition and the ESS of x² per second it gives."""
  costs, chains = result["costs"], result["protocol"]["chains"]
  ess = {f"HMC (K = {r['num_steps']}, step {r['step_size']:.3g})": [r["ess_x2"]]
         for r in [dict(result["hmc"], num_steps=result["protocol"]["num_steps"])]
         + result["hmc_short"]}
  ess.update({f"L2HMC, {label}": [r["ess_x2"] for r in rows]
              for label, rows in l2hmc_posteriors.grouped(result["rows"]).items()})
  per_second = {label: chains * np.mean(ess[label]) / seconds
                for label, seconds in costs["seconds_per_transition"].items()}
  hmc_1 = max((label for label in per_second if label.startswith("HMC")),
              key=lambda label: per_second[label])
  lines = ["", f"Transition costs, the samplers interleaved ({costs['repeats']} rounds of "
           f"{costs['transitions']} scanned transitions of the {chains} chains, medians; commit "
           f"`{costs['commit']}`, {costs['seconds']:.0f} s). ESS of x² per second: the ESS "
           "per transition above (the seeds' mean) over this cost.", "",
           f"| sampler | ms / transition | ESS x² / transition | ESS/s x² | over {hmc_1} |",
           "|---|---|---|---|---|"]
  for label, seconds in costs["seconds_per_transition"].items():
    lines.append(f"| {label} | {1e3 * seconds:.4f} | {np.mean(ess[label]):.3f} | "
                 f"{per_second[label]:.3g} | {per_second[label] / per_second[hmc_1]:.2f} |")
  return lines


if __name__ == "__main__":
  main()
