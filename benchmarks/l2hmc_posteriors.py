"""L2HMC against NUTS and tuned HMC on real posteriors, per gradient and per second.

Targets (``metaoptax.l2hmc.posteriors``): Neal's funnel (10-d), eight schools
centered and non-centered (10-d), Bayesian logistic regression on scikit-learn's
breast-cancer data (31-d, ``_breast_cancer.py``), and the paper's mixture of two Gaussians
(the objective ablation); and the paper's other toys (``TOYS``: the strongly correlated 2-d
Gaussian, the rough well, the 50-d ill-conditioned Gaussian) with their own L2HMC settings
(``TOY_SETTINGS``, ``toy_runs``; ``--toy-variants`` adds ``VARIANTS`` rows). For each target:

* **reference**: the funnel's and the centered eight schools' exact moments (the latter by
  quadrature over log tau, ``_schools_exact.py``; before `6bc8aa5` from the
  non-centered NUTS run, mapped by :math:`\\theta = \\mu + \\tau\\tilde\\theta`); for the
  others a long blackjax NUTS run (``--reference-chains`` x ``--reference-samples`` after
  1,000 steps of window adaptation).
  Every sampler's draws are checked against it: the largest error of a mean in
  reference standard deviations, and the ratio of the standard deviation of x[0]
  (the funnel's v, the schools' mu, the regression's intercept).
* **NUTS** (window adaptation, diagonal mass matrix, adapted per chain) and
  **HMC** (K = 10, identity mass matrix, the best step size of a grid) from
  ``sampler_baselines.run_baselines``.
* **L2HMC** variants (``VARIANTS``), each trained from 3 seeds: a warm-up of
  HMC transitions gives the whitening and the initial step size, then training
  (``esjd_squares`` unless the row says otherwise) of per-step per-coordinate
  step sizes alone (the networks off: HMC's cost per transition), or with S, Q, T
  networks of width 10 or 50, or step sizes that follow the position (Gibbs self-tuning:
  log-linear, saturating, and saturating with the scale move or with interweaving moves of
  the target's declared hierarchy, ``HIERARCHIES``: the centered schools). Every setting
  the committed rows were measured with is spelled out (``MEASURED_CONFIG``, ``train``), so
  the library's defaults (the recipe for an unseen posterior: jittered step sizes among
  them) do not change what a rerun measures.

Scores (``_sampler_metrics.score``): Geyer's ESS (min over dimensions) of x and
x^2 per gradient and per second of sampling (jitted, chains vmapped, compiled
before the clock; training and adaptation not counted), split R-hat (max over
dimensions), divergences (NUTS, HMC: blackjax's ``is_divergent``; L2HMC: the
share of proposals with acceptance probability exactly 0, i.e. non-finite or an
energy error beyond ~100) and, on the mixture, the share of transitions that
cross between the modes.

At NUTS's gradient budget: every trained L2HMC sampler also runs, in a run of its own,
NUTS's transitions times its gradients per transition over its own gradients per transition
(K, plus one for the reflection or the scale move and one per interweaving move; 5,117 on the
funnel at K = 10; rows before `a599f14` divided by K alone, so the scale move's rows spent
1.1x NUTS's gradients), and is scored alike (a table of its own; ``--no-budget`` skips it; ``--budget-factor F``: F times
NUTS's gradients, the rows labelled so). ``--keep-baselines`` reuses the
stored reference, NUTS and HMC of each target and the rows of the variants not run (each
row keeps its commit, shown in the table where it differs from the target's).

``--transfer``: a sampler trained on a 200-row subsample of the breast-cancer
data runs without retraining on the full data and on another 200-row subsample,
with its own whitening and after a new warm-up's whitening (HMC adaptation, no
training).

    taskset -c 0 python benchmarks/l2hmc_posteriors.py --quick     # smoke run
    taskset -c 0 python benchmarks/l2hmc_posteriors.py --out benchmarks/results
    python benchmarks/l2hmc_posteriors.py --targets correlated rough_well ill_conditioned \
        --no-budget --out benchmarks/results --stem l2hmc_posteriors_toys
"""

from __future__ import annotations

import argparse
import functools
import json
import pathlib
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _breast_cancer import breast_cancer  # pylint: disable=g-import-not-at-top,wrong-import-position
import _report  # pylint: disable=g-import-not-at-top,wrong-import-position
import _sampler_metrics  # pylint: disable=g-import-not-at-top,wrong-import-position
import _schools_exact  # pylint: disable=g-import-not-at-top,wrong-import-position
import sampler_baselines  # pylint: disable=g-import-not-at-top,wrong-import-position
from metaoptax import l2hmc  # pylint: disable=g-import-not-at-top,wrong-import-position

#: The files under benchmarks/results/ that this script writes (glob patterns;
#: tests/integration/test_repository_shape.py checks every committed result against them):
#: the posteriors and the mixture (the default), the toys (``--targets correlated rough_well
#: ill_conditioned --no-budget --stem l2hmc_posteriors_toys``) and the centered schools at 4x
#: NUTS's gradients (``--targets schools_centered --budget-factor 4 --out
#: benchmarks/results/l2hmc_posteriors_schools_long``).
OUTPUTS = ("l2hmc_posteriors.json", "l2hmc_posteriors.md", "l2hmc_posteriors.png",
           "l2hmc_posteriors_toys.json", "l2hmc_posteriors_toys.md", "l2hmc_posteriors_toys.png",
           "l2hmc_posteriors_schools_long/l2hmc_posteriors.*",)

OUT = HERE / "out" / "l2hmc_posteriors"  # git-ignored; the committed table: --out results
#: The sampler's settings the committed rows were measured with, beside each variant's own
#: (``VARIANTS``): per-step per-coordinate step sizes from 0.1, no jitter of the step sizes.
MEASURED_CONFIG = dict(step_sizes="per_step", per_coordinate=True, init_step_size=0.1,
                       jitter=0.0)
HMC_GRID = (0.02, 0.045, 0.1, 0.22, 0.5)
# --hmc-steps: tuned HMC at the short trajectories of the mixture's K = 1-3 rows, a finer grid
# around a quarter period of a mode (sd 0.32: sqrt(2) 0.32 = 0.45 at K = 1 with equal steps)
SHORT_HMC_GRID = (0.1, 0.16, 0.22, 0.32, 0.45, 0.6)

# label -> L2HMCConfig fields; width 50 (the paper benchmark's) only where ABLATION runs
ABLATION = ("logistic",)
VARIANTS = {
    "step sizes only": dict(use_networks=False, hidden=1),
    "networks, width 10": dict(use_networks=True, hidden=10),
    "networks, width 50": dict(use_networks=True, hidden=50),
    # per-coordinate step sizes that follow the position (Gibbs self-tuning, networks off)
    # log-linear in the position (TrainingConfig.local_fit="curvature")
    "local step sizes": dict(use_networks=False, hidden=1, local_step_sizes=True,
                             local_fit="curvature"),
    # with a cap on each coordinate's step size, off where they hardly vary (the default)
    "local step sizes, saturating": dict(use_networks=False, hidden=1, local_step_sizes=True,
                                         local_fit="saturating"),
    # the same with a Metropolis scale move along the local model (L2HMCConfig.scale_move)
    "local step sizes, scale move": dict(use_networks=False, hidden=1, local_step_sizes=True,
                                         local_fit="saturating", scale_move=1.0),
    "local step sizes, scale move 2": dict(use_networks=False, hidden=1, local_step_sizes=True,
                                           local_fit="saturating", scale_move=2.0),
    # with the interweaving move of the target's declared hierarchy (HIERARCHIES): (mu,
    # log tau) at fixed non-centered members, Metropolis (L2HMCConfig.interweaving); the
    # rows run only on the targets that declare one
    "local step sizes, saturating, interweaving": dict(
        use_networks=False, hidden=1, local_step_sizes=True, local_fit="saturating",
        interweaving=dict(num_moves=1)),
    "local step sizes, saturating, interweaving x3": dict(
        use_networks=False, hidden=1, local_step_sizes=True, local_fit="saturating",
        interweaving=dict(num_moves=3)),
    "local step sizes, saturating, interweaving x5": dict(
        use_networks=False, hidden=1, local_step_sizes=True, local_fit="saturating",
        interweaving=dict(num_moves=5)),
    # half the leapfrog steps: more transitions, so more interweaving moves, per gradient
    "local step sizes, saturating, interweaving x3, K = 5": dict(
        use_networks=False, hidden=1, local_step_sizes=True, local_fit="saturating",
        interweaving=dict(num_moves=3), num_steps=5),
}
# the 50-d Gaussian, whitened: at K = 10 the trained step sizes turn each coordinate by about
# 2 pi (back to its start: R-hat 2.4 with the networks off, measured); a short trajectory
# turns it by about pi / 2 (``--toy-variants``)
VARIANTS.update({f"step sizes only, K = {steps}": dict(VARIANTS["step sizes only"],
                                                       num_steps=steps) for steps in (2, 3)})
TRAINING_FIELDS = ("local_fit", "differentiate_force")  # variant keys that are TrainingConfig's
#: the hierarchies the targets declare (by name), for the interweaving rows
HIERARCHIES = {l2hmc.posteriors.eight_schools(centered=True).name: l2hmc.interweaving.Interweaving(
    location=0, log_scale=1, members=tuple(range(2, 10)))}


# the paper's toys (``l2hmc.targets``) but the mixture: one L2HMC row each, with width-50
# networks and the settings of ``TOY_SETTINGS``
TOYS = ("correlated", "rough_well", "ill_conditioned")
_TOY_TRAINING = dict(aux_weight=0.0, objective="esjd_squares", warmup_iterations=500,
                     drop_nonfinite_chains=True)
#: Per toy: (training iterations, TrainingConfig fields) of its row.
TOY_SETTINGS = {
    "ill_conditioned": (600, _TOY_TRAINING),
    "correlated": (2000, _TOY_TRAINING),
    # no gradient through the ripples' curvature (~1/eta): exact gradients explode
    "rough_well": (1500, dict(_TOY_TRAINING, differentiate_force=False)),
}


def toy_runs(name: str, quick: bool) -> tuple[list, int]:
  """``(runs, iterations)`` of a toy (``TOYS``): its ``TOY_SETTINGS`` as rows of ``main``'s
  ``(label, variant, objective, anneal, warmup, aux_weight)``."""
  iterations, options = TOY_SETTINGS[name]
  options = dict(options)
  variant = dict(VARIANTS["networks, width 50"],
                 **{k: options.pop(k) for k in TRAINING_FIELDS if k in options})
  warmup = 40 if quick else options.pop("warmup_iterations")
  label = "networks, width 50 (the toys' settings)" + (
      "" if variant.get("differentiate_force", True) else ", first-order force gradients")
  runs = [(label, variant, options["objective"], None, warmup, options["aux_weight"])]
  return runs, 10 if quick else iterations


def runs_on(target, variant: dict) -> bool:
  """Whether a variant applies to ``target`` (interweaving needs a declared hierarchy)."""
  return "interweaving" not in variant or target.name in HIERARCHIES


def gradients_per_transition(config) -> int:
  """The gradients a transition evaluates (``l2hmc.gradient_evaluations``): K, plus, with
  velocity Verlet, the reflected point's, the scale move's and the interweaving moves'."""
  return l2hmc.gradient_evaluations(config)
# the mixture, annealed from T = 10: (label, objective, warm-up (None: --warmup), weight of
# the fresh-sample term); the last two rows are the paper's setting (no warm-up and
# whitening, fresh standard-normal samples in the loss), where its ESJD crosses by reflection
MIXTURE_RUNS = (("esjd_squares", "esjd_squares", None, 0.0),
                ("esjd_coordinates", "esjd_coordinates", None, 0.0),
                ("esjd (paper's)", "esjd", None, 0.0),
                ("esjd_and_coordinates", "esjd_and_coordinates", None, 0.0),
                ("esjd_and_coordinates, no warm-up, fresh samples", "esjd_and_coordinates", 0,
                 1.0),
                ("esjd_coordinates, no warm-up, fresh samples", "esjd_coordinates", 0, 1.0),
                ("esjd (paper's), no warm-up, fresh samples", "esjd", 0, 1.0))
# not annealed: step sizes alone (networks off) and the reflection step through the warm-up's
# mean (L2HMCConfig(reflection=True): the warm-up's within-chain scales, a trajectory of at
# most a quarter period): label -> (objective, variant)
MIXTURE_REFLECTION = {
    f"reflection, step sizes only, {objective}":
    (objective, dict(VARIANTS["step sizes only"], reflection=True))
    for objective in ("esjd_squares", "squares_coordinates")}
# fewer leapfrog steps: x^2 decorrelates at a quarter period whatever K is (ESS <= 1 a draw),
# so the gradients per transition are what is left to cut
MIXTURE_REFLECTION.update({
    f"reflection, step sizes only, squares_coordinates, K = {steps}":
    ("squares_coordinates", dict(VARIANTS["step sizes only"], reflection=True, num_steps=steps))
    for steps in (1, 2, 3, 5, 10)})


def targets() -> dict:
  found = dict(l2hmc.posteriors.all_posteriors())
  found["logistic"] = breast_cancer()
  toys = l2hmc.targets.all_targets()
  found["mixture"] = toys["mixture"]
  found.update({name: toys[name] for name in TOYS})
  return found


def exact_moments(target) -> dict | None:
  """The target's exact mean and sd per dimension where it has them (its ``mean`` and
  ``covariance``), else ``None``. The funnel's sds of x come from heavy tails: 10^6 exact
  draws estimate them 5 % off."""
  if target.mean is None or target.covariance is None:
    return None
  sd = np.sqrt(np.diag(np.asarray(target.covariance, np.float64)))
  return dict(mean=np.asarray(target.mean, np.float64).tolist(), sd=sd.tolist(),
              source="exact (the target's mean and covariance)")


def reference(name, target, key, chains, samples) -> dict:
  """Per-dimension mean and sd of x: exact (the target's moments, the centered schools by
  quadrature), else exact draws or a long NUTS run."""
  if name == "schools_centered":  # exact: a quadrature over log tau
    exact = _schools_exact.moments()
    return dict(mean=exact["mean"].tolist(), sd=exact["sd"].tolist(),
                source="exact (quadrature over log tau, `_schools_exact`)")
  exact = exact_moments(target)
  if exact is not None:
    return exact
  if target.sample is not None:
    draws = np.asarray(target.sample(key, 1_000_000), np.float64)[:, None]
    source = "exact draws (10^6)"
  else:
    run = sampler_baselines.sample_nuts(target, key, chains, 1000, samples)
    draws = np.asarray(run["draws"], np.float64)
    source = (f"NUTS, {chains} chains x {samples} after 1,000 adaptation steps, divergent "
              f"{run['divergent']:.4f}, R-hat {_sampler_metrics.split_rhat(draws):.4f}")
  flat = draws.reshape(-1, draws.shape[-1])
  return dict(mean=flat.mean(0).tolist(), sd=flat.std(0).tolist(), source=source)


def checked(scores: dict, draws, ref: dict) -> dict:
  """Adds the moment checks against the reference."""
  flat = np.asarray(draws, np.float64).reshape(-1, np.shape(draws)[-1])
  mean, sd = np.asarray(ref["mean"]), np.asarray(ref["sd"])
  scores["mean_error"] = float(np.max(np.abs(flat.mean(0) - mean) / sd))
  scores["sd_ratio_x0"] = float(flat[:, 0].std() / sd[0])
  return scores


@functools.lru_cache(maxsize=None)
def annealing(initial: float, until: int):
  """Geometric temperature schedule (the public code's form): ``initial`` times a
  constant factor every 50 iterations, reaching 1 at iteration ``until``; one object per
  schedule (seeds share the compiled step)."""
  return optax.exponential_decay(initial, 50, (1.0 / initial) ** (50 / until), staircase=True,
                                 end_value=1.0)


@functools.lru_cache(maxsize=None)
def optimizer(learning_rate: float):
  """The paper's Adam schedule (``l2hmc.default_optimizer``) from ``learning_rate``; one
  object per rate (seeds share the compiled step)."""
  if learning_rate == 1e-3:
    return l2hmc.default_optimizer()
  return optax.adam(optax.exponential_decay(learning_rate, 1000, 0.96, staircase=True))


def train(target, variant: dict, objective: str, seed: int, iterations: int, chains: int,
          warmup: int, num_steps: int, anneal=None, aux_weight: float = 0.0,
          learning_rate: float = 1e-3):
  variant = dict(variant)
  options = {name: variant.pop(name) for name in TRAINING_FIELDS if name in variant}
  num_steps = variant.pop("num_steps", num_steps)  # a variant's own K (the mixture's)
  if "interweaving" in variant:  # the target's hierarchy with the variant's settings
    variant["interweaving"] = HIERARCHIES[target.name]._replace(**variant["interweaving"])
  config = l2hmc.L2HMCConfig(dim=target.dim, num_steps=num_steps, **MEASURED_CONFIG, **variant)
  # the warm-up the committed rows were measured with: one burn-in window, a diagonal
  # whitening (and, by MEASURED_CONFIG's jitter=0.0, unjittered transitions)
  options.update(num_chains=chains, aux_weight=aux_weight, objective=objective,
                 warmup_iterations=warmup, drop_nonfinite_chains=True, burn_in_windows=1,
                 metric="diagonal")
  if anneal is not None:
    options["temperature"] = annealing(anneal[0], max(1, int(anneal[1] * iterations)))
  training = l2hmc.TrainingConfig(**options)
  start = time.perf_counter()
  opt = optimizer(learning_rate)
  key = jax.random.key(seed)
  result = l2hmc.train(key, target, config, training, num_iterations=iterations, optimizer=opt,
                       init_state=l2hmc.init_training(key, target, config, training,
                                                      optimizer=opt),
                       progress=None)
  return config, result, time.perf_counter() - start


@functools.lru_cache(maxsize=None)
def _chains_runner(logdensity_fn, config, chains: int, length: int):
  """``run(params, masks, whitening, key, positions)``: ``length`` transitions of every
  chain (jitted once per target, configuration and shapes: the seeds share it)."""

  def run(params, masks, whitening, key, positions):
    sampler = l2hmc.l2hmc(logdensity_fn, config, params, masks, whitening)
    states = jax.vmap(sampler.init)(positions)

    def one(states, key):
      states, info = jax.vmap(sampler.step)(jax.random.split(key, chains), states)
      return states, (states.position, info.acceptance_rate)

    return jax.lax.scan(one, states, jax.random.split(key, length))

  return jax.jit(run)


_COMPILED = {}


def sample_l2hmc(target, config, params, masks, whitening, key, chains, burn_in, samples,
                 positions):
  """Draws of the sampler (after ``burn_in`` transitions from ``positions``, or from
  exact draws where the target has them), timed after compilation; acceptance and the
  share of proposals with acceptance probability 0."""
  k_start, k_burn, k_run = jax.random.split(key, 3)
  burn = _chains_runner(target.logdensity_fn, config, chains, burn_in)
  if target.sample is not None:
    positions = _sampler_metrics.start_positions(target, k_start, chains)
  states, _ = burn(params, masks, whitening, k_burn, positions)
  args = (params, masks, whitening, k_run, states.position)
  # the parameters' structure too: two variants of one config (local_fit is TrainingConfig's)
  # may fit local step sizes of different structures
  cache_key = (target.logdensity_fn, config, chains, samples, whitening is None,
               jax.tree.structure(params))
  if cache_key not in _COMPILED:
    _COMPILED[cache_key] = _chains_runner(target.logdensity_fn, config, chains,
                                          samples).lower(*args).compile()
  (_, (draws, acceptance)), seconds = _sampler_metrics.timed(_COMPILED[cache_key], *args)
  acceptance = np.asarray(acceptance)
  return dict(draws=np.asarray(draws), seconds=seconds, acceptance=float(acceptance.mean()),
              divergent=float(np.mean(acceptance == 0.0)))


def l2hmc_row(target, ref, label, variant, objective, seed, args, anneal=None,
              iterations=None, warmup=None, aux_weight=0.0, budget=0, commit=None):
  """One trained sampler's scores; with ``budget``, also those of a run of ``budget``
  gradient evaluations per chain (NUTS's gradient budget: its transitions times its gradients
  per transition; ``budget`` over the sampler's gradients per transition transitions), under
  ``"budget"``."""
  config, result, trained = train(target, variant, objective, seed,
                                  iterations or args.iterations, args.chains,
                                  args.warmup if warmup is None else warmup, args.num_steps,
                                  anneal, aux_weight, args.learning_rate)
  # from the training chains (burnt in by the warm-up and training), as NUTS's
  # measured chains continue from its adaptation
  run = sample_l2hmc(target, config, result.params, result.masks, result.whitening,
                     jax.random.key(1000 + seed), args.chains, args.burn_in, args.samples,
                     result.state.chains.position)
  grads = gradients_per_transition(config)
  scores = checked(_sampler_metrics.score(run["draws"], grads, run["seconds"]),
                   run["draws"], ref)
  if budget:  # NUTS's gradients: a run of its own (same start, another key), scored alike
    budget = int(round(budget / grads))  # transitions
    long = sample_l2hmc(target, config, result.params, result.masks, result.whitening,
                        jax.random.key(2000 + seed), args.chains, args.burn_in, budget,
                        result.state.chains.position)
    scores["budget"] = dict(checked(_sampler_metrics.score(long["draws"], grads,
                                                           long["seconds"]),
                                    long["draws"], ref),
                            samples=budget, budget_factor=args.budget_factor,
                            acceptance=long["acceptance"],
                            divergent=long["divergent"])
  eps = np.exp(np.asarray(result.params.log_step_size_x))
  scores.update(sampler=label, seed=seed, commit=commit, objective=objective, aux_weight=aux_weight,
                warmup=args.warmup if warmup is None else warmup, acceptance=run["acceptance"],
                divergent=run["divergent"], training_seconds=trained,
                skipped=result.skipped_updates,
                step_size=f"{eps.min():.3g}-{eps.max():.3g}")
  return scores, (config, result)


def baselines(target, ref, args, key, progress):
  grid = HMC_GRID if not args.quick else HMC_GRID[1:3]
  found = sampler_baselines.run_baselines(target, key, args.chains, args.burn_in, args.samples,
                                          args.num_steps, grid, progress, keep_draws=True)
  for scores in [found["nuts"]] + found["hmc_grid"]:
    checked(scores, scores.pop("draws"), ref)
  return found


def short_hmc(target, ref, args, key, progress) -> list[dict]:
  """The best HMC of ``SHORT_HMC_GRID`` at each K of ``--hmc-steps`` (its scores, with
  ``num_steps``)."""
  grid = SHORT_HMC_GRID if not args.quick else SHORT_HMC_GRID[2:4]
  rows = []
  for steps in args.hmc_steps:
    found = sampler_baselines.run_baselines(target, key, args.chains, args.burn_in,
                                            args.samples, steps, grid, progress,
                                            keep_draws=True, include_nuts=False)
    for scores in found["hmc_grid"]:
      checked(scores, scores.pop("draws"), ref)
    rows.append(dict(found["hmc"], num_steps=steps))
  return rows


def transfer(args, key, progress) -> dict:
  """Train on one 200-row subsample; sample the full data and another subsample."""
  rows = 200 if not args.quick else 50
  source = breast_cancer(rows, seed=0)
  destinations = {"subsample 0 (trained on)": source,
                  "subsample 1": breast_cancer(rows, seed=1),
                  "full data (569 rows)": breast_cancer()}
  out = []
  for seed in progress(range(args.seeds), desc="transfer: training"):
    config, result, trained = train(source, VARIANTS[args.transfer_variant], args.objective,
                                    seed, args.iterations, args.chains, args.warmup,
                                    args.num_steps)
    for name, target in destinations.items():
      k_warm, k_run = jax.random.split(jax.random.fold_in(key, seed))
      # a new warm-up (HMC adaptation, no training) burns in the chains on the
      # destination and measures its scales; both rows start from its chains
      # the warm-up the committed rows had: one burn-in window, no jitter
      own = l2hmc.warmup(k_warm, target.logdensity_fn,
                         jax.random.normal(k_warm, (args.chains, target.dim)),
                         num_steps=args.num_steps, num_iterations=args.warmup,
                         max_burn_in_windows=1, jitter=0.0)
      for whitening_label, whitening in (("trained whitening", result.whitening),
                                         ("new warm-up's whitening", own.whitening)):
        run = sample_l2hmc(target, config, result.params, result.masks, whitening, k_run,
                           args.chains, args.burn_in, args.samples, own.positions)
        scores = _sampler_metrics.score(run["draws"], args.num_steps, run["seconds"])
        scores.update(destination=name, whitening=whitening_label, seed=seed,
                      acceptance=run["acceptance"], divergent=run["divergent"],
                      training_seconds=trained)
        out.append(scores)
  nuts = {}
  for name, target in destinations.items():
    run = sampler_baselines.sample_nuts(target, key, args.chains, args.burn_in, args.samples)
    nuts[name] = _sampler_metrics.score(run["draws"], run["grads_per_transition"],
                                        run["seconds"])
  return dict(rows=out, nuts=nuts, variant=args.transfer_variant, data_rows=rows)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  names = ["logistic", "funnel", "schools_centered", "mixture", "schools_noncentered",
           *TOYS]
  parser.add_argument("--targets", nargs="+", default=names, choices=names)
  parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
  parser.add_argument("--seeds", type=int, default=3)
  parser.add_argument("--chains", type=int, default=32)
  parser.add_argument("--burn-in", type=int, default=300)
  parser.add_argument("--samples", type=int, default=1000)
  parser.add_argument("--iterations", type=int, default=300, help="L2HMC training iterations")
  parser.add_argument("--warmup", type=int, default=300, help="L2HMC warm-up transitions")
  parser.add_argument("--num-steps", type=int, default=10)
  parser.add_argument("--learning-rate", type=float, default=1e-3,
                      help="Adam's initial rate (decayed 0.96 every 1000 it.)")
  parser.add_argument("--objective", default="esjd_squares", choices=l2hmc.OBJECTIVES)
  parser.add_argument("--toy-variants", nargs="*", default=[], choices=list(VARIANTS),
                      help="on the toys (TOYS), these VARIANTS too (their settings otherwise)")
  parser.add_argument("--mixture-iterations", type=int, default=600)
  parser.add_argument("--reference-chains", type=int, default=8)
  parser.add_argument("--reference-samples", type=int, default=4000)
  parser.add_argument("--transfer", action="store_true")
  parser.add_argument("--transfer-variant", default="step sizes only", choices=list(VARIANTS))
  parser.add_argument("--mixture-runs", nargs="+", default=None,
                      help="labels of the mixture's runs to do (default all)")
  parser.add_argument("--keep-baselines", action="store_true",
                      help="reuse the stored reference, NUTS and HMC of each target and the "
                      "rows of the variants not run (each row keeps its commit)")
  parser.add_argument("--rerun-baselines", action="store_true",
                      help="with --keep-baselines: run the reference, NUTS and HMC again "
                      "(the rows of the variants not run are still kept)")
  parser.add_argument("--hmc-steps", type=int, nargs="*", default=[],
                      help="also tuned HMC at these K (SHORT_HMC_GRID), as rows of their own")
  parser.add_argument("--budget-factor", type=float, default=1.0,
                      help="the budget runs' gradients over NUTS's (default 1)")
  parser.add_argument("--no-budget", action="store_true",
                      help="skip the runs at NUTS's gradient budget")
  parser.add_argument("--quick", action="store_true")
  parser.add_argument("--report-only", action="store_true")
  parser.add_argument("--out", type=pathlib.Path, default=OUT)
  parser.add_argument("--stem", default="l2hmc_posteriors",
                      help="the results' file names: STEM.json, STEM.md, STEM.png")
  args = parser.parse_args(argv)
  if args.quick:
    args.seeds, args.chains, args.burn_in, args.samples = 1, 8, 20, 100
    args.iterations, args.warmup, args.mixture_iterations = 10, 40, 10
    args.reference_chains, args.reference_samples = 4, 200
  args.out.mkdir(parents=True, exist_ok=True)
  path = args.out / f"{args.stem}.json"
  records = json.loads(path.read_text()) if path.exists() else {}
  progress = _report.progress_bars()
  if not args.report_only:
    commit = _report.git_commit(short=True)
    all_targets = targets()
    key = jax.random.key(0)
    for name in progress(args.targets, desc="targets"):
      target = all_targets[name]
      start = time.perf_counter()
      kept = records.get(name) if args.keep_baselines else None
      if kept is not None and not args.rerun_baselines:
        ref, found = kept["reference"], dict(nuts=kept["nuts"], hmc=kept["hmc"])
        found["hmc_short"] = kept.get("hmc_short", [])
      else:
        ref = reference(name, target, jax.random.key(99), args.reference_chains,
                        args.reference_samples)
        found = baselines(target, ref, args, key,
                          functools.partial(progress, desc=f"{name}: NUTS, HMC grid"))
        found["hmc_short"] = []
      if args.hmc_steps:
        found["hmc_short"] = short_hmc(target, ref, args, key, functools.partial(
            progress, desc=f"{name}: HMC at K = {args.hmc_steps}"))
      # NUTS's gradients per chain (each row runs them over its own gradients per transition)
      budget = 0.0 if args.no_budget or name == "mixture" else (
          args.budget_factor * args.samples * found["nuts"]["grads_per_transition"])
      rows = []
      if name == "mixture":
        runs = [(label, VARIANTS["networks, width 10"], objective, (10.0, 2 / 3), warmup,
                 aux_weight) for label, objective, warmup, aux_weight in MIXTURE_RUNS]
        runs += [(label, variant, objective, None, None, 0.0)
                 for label, (objective, variant) in MIXTURE_REFLECTION.items()]
        if args.mixture_runs:
          runs = [run for run in runs if run[0] in args.mixture_runs]
        iterations = args.mixture_iterations
      elif name in TOYS:
        runs, iterations = toy_runs(name, args.quick)
        # --toy-variants: more rows, same warm-up, training length and objective
        runs += [(label, VARIANTS[label], runs[0][2], None, runs[0][4], runs[0][5])
                 for label in args.toy_variants]
      else:
        runs = [(label, VARIANTS[label], args.objective, None, None, 0.0)
                for label in args.variants if (name in ABLATION or label != "networks, width 50")
                and runs_on(target, VARIANTS[label])]
        iterations = args.iterations
      jobs = [(run, seed) for run in runs for seed in range(args.seeds)]
      for (label, variant, objective, anneal, warmup, aux_weight), seed in progress(
          jobs, desc=f"{name}: L2HMC"):
        rows.append(l2hmc_row(target, ref, label, variant, objective, seed, args, anneal,
                              iterations, warmup, aux_weight, budget, commit)[0])
        # each variant compiles its own programs: drop them (XLA:CPU maps each executable's
        # code, and a run of every target and variant exhausts the process's memory maps)
        jax.clear_caches()
      if kept is not None:  # the variants not run keep their rows (and commits)
        ran = {row["sampler"] for row in rows}
        rows = [dict(row, commit=row.get("commit", kept["commit"])) for row in kept["l2hmc"]
                if row["sampler"] not in ran] + rows
      records[name] = dict(target=target.name, reference=ref, nuts=found["nuts"],
                           hmc=found["hmc"], hmc_short=found["hmc_short"], l2hmc=rows,
                           commit=(kept["commit"] if kept is not None
                                   and not args.rerun_baselines else commit),
                           quick=args.quick,
                           protocol=dict(chains=args.chains, burn_in=args.burn_in,
                                         samples=args.samples, iterations=iterations,
                                         warmup=runs[0][4] if name in TOYS
                                         else args.warmup,
                                         num_steps=args.num_steps,
                                         learning_rate=args.learning_rate),
                           seconds=(kept["seconds"] if kept is not None else 0.0)
                           + time.perf_counter() - start)
      path.write_text(json.dumps(records, indent=1))
    if args.transfer:
      start = time.perf_counter()
      records["transfer"] = dict(transfer(args, key, progress), commit=commit,
                                 quick=args.quick, seconds=time.perf_counter() - start)
      path.write_text(json.dumps(records, indent=1))
  records = json.loads(path.read_text())
  table = _report.write_table(report(records), str(args.out / f"{args.stem}.md"))
  plot(records, args.out / f"{args.stem}.png")
  return table


def _spread(values):
  values = np.asarray(values, np.float64)
  return f"{values.mean():.3g} ± {values.std():.2g}" if len(values) > 1 else f"{values[0]:.3g}"


def _rhat(value):
  return f"{value:.3f}" if value < 100 else "> 100"


def _per_second(scores, key):
  count = 1.0 / scores[f"seconds_per_ess_{key}"]
  return count


def grouped(rows, key: str = "sampler") -> dict:
  """``rows`` by their ``key``, in the order of first appearance."""
  groups = {}
  for row in rows:
    groups.setdefault(row[key], []).append(row)
  return groups


def spread_cells(rows, keys) -> str:
  """``mean ± std`` over ``rows`` of each of ``keys``, as table cells."""
  return " | ".join(_spread([r[k] for r in rows]) for k in keys)


def _groups(record):
  return grouped(record["l2hmc"])


def report(records) -> list[str]:
  lines = ["# L2HMC against NUTS and tuned HMC on real posteriors, per gradient and per second",
           "", "ESS: Geyer's, min over dimensions, as a fraction of the draws, per gradient "
           "evaluation (/grad) and effective samples per second of sampling (/s: jitted, "
           "chains vmapped, after compilation, the median of 3 runs in one process, on 1 "
           "pinned CPU core shared with other work: compare within a target). L2HMC rows: mean ± std over 3 training seeds; ratios: "
           "the seeds' mean over NUTS. R-hat: split, max over dimensions, of x and x^2 (worst "
           "seed). Diverg.: NUTS/HMC divergent transitions; L2HMC proposals with acceptance "
           "exactly 0 (worst seed). Mean err: largest |mean - reference| in reference sds; "
           "sd x0: sd of x[0] over the reference's (worst seed by |log|). Crossings: share of "
           "transitions changing the sign of x[0] (the mixture). L2HMC's measured chains continue "
           "from its training chains (exact draws where the target has them). ms/transition: wall time of one "
           "transition of all chains (vmapped).", ""]
  header = ("| target | sampler | ESS/grad x | ESS/grad x² | ESS/s x | ESS/s x² | "
            "/NUTS grad x, x² | /NUTS s x, x² | R-hat x, x² | diverg. | mean err | sd x0 | "
            "crossings | accept | ms/transition | train s |")
  lines += [header, "|" + "---|" * header.count("|")[:-1] if False else
            "|" + "|".join(["---"] * (header.count("|") - 1)) + "|"]
  for name, record in records.items():
    if name == "transfer":
      continue
    nuts = record["nuts"]
    samples = record["protocol"]["samples"]

    def ratio(rows, key, per):
      if per == "grad":
        ours = np.mean([r[f"ess_per_grad_{key}"] for r in rows])
        return ours / nuts[f"ess_per_grad_{key}"]
      ours = np.mean([_per_second(r, key) for r in rows])
      return ours / _per_second(nuts, key)

    def line(label, rows, train=True):
      worst_sd = max((r["sd_ratio_x0"] for r in rows), key=lambda v: abs(np.log(v)))
      return (f"| {record['target']} | {label} | "
              f"{_spread([r['ess_per_grad_x'] for r in rows])} | "
              f"{_spread([r['ess_per_grad_x2'] for r in rows])} | "
              f"{_spread([_per_second(r, 'x') for r in rows])} | "
              f"{_spread([_per_second(r, 'x2') for r in rows])} | "
              f"{ratio(rows, 'x', 'grad'):.2g}, {ratio(rows, 'x2', 'grad'):.2g} | "
              f"{ratio(rows, 'x', 's'):.2g}, {ratio(rows, 'x2', 's'):.2g} | "
              f"{_rhat(max(r['rhat_x'] for r in rows))}, "
              f"{_rhat(max(r['rhat_x2'] for r in rows))} | "
              f"{max(r['divergent'] for r in rows):.4f} | "
              f"{max(r['mean_error'] for r in rows):.2f} | {worst_sd:.2f} | "
              f"{_spread([r['crossings'] for r in rows])} | "
              f"{_spread([r['acceptance'] for r in rows])} | "
              f"{_spread([1e3 * r['seconds'] / samples for r in rows])} | "
              + (f"{np.mean([r['training_seconds'] for r in rows]):.0f} |" if train else " |"))

    lines.append(line("NUTS (window adaptation)", [nuts], False))
    lines.append(line(f"HMC (K = {record['protocol']['num_steps']}, step "
                      f"{record['hmc']['step_size']:.3g})", [record["hmc"]], False))
    for hmc in record.get("hmc_short", []):
      lines.append(line(f"HMC (K = {hmc['num_steps']}, step {hmc['step_size']:.3g})", [hmc],
                        False))
    for label, rows in _groups(record).items():
      at = rows[0].get("commit", record["commit"])
      lines.append(line(f"L2HMC, {label}" + (f" (at `{at}`)" if at != record["commit"] else ""),
                        rows))
  lines += ["", "| target | reference | NUTS grads/transition | protocol | commit | seconds |",
            "|---|---|---|---|---|---|"]
  for name, record in records.items():
    if name == "transfer":
      continue
    p = record["protocol"]
    lines.append(f"| {record['target']} | {record['reference']['source']} | "
                 f"{record['nuts']['grads_per_transition']:.1f} | {p['chains']} chains, burn-in "
                 f"{p['burn_in']}, {p['samples']} samples, L2HMC: warm-up {p['warmup']}, "
                 f"{p['iterations']} training it. (Adam {p.get('learning_rate', 1e-3):g}), "
                 f"K = {p['num_steps']} | `{record['commit']}`"
                 f"{' (--quick)' if record['quick'] else ''} | {record['seconds']:.0f} |")
  lines += budget_report(records)
  if "transfer" in records:
    t = records["transfer"]
    lines += ["", f"## Transfer: L2HMC ({t['variant']}) trained on {t['data_rows']} rows "
              "(subsample 0), used without retraining", "",
              "| destination | whitening | ESS/grad x | ESS/grad x² | / NUTS x, x² | R-hat x |"
              " accept | zero-acceptance share |", "|---|---|---|---|---|---|---|---|"]
    groups = {}
    for row in t["rows"]:
      groups.setdefault((row["destination"], row["whitening"]), []).append(row)
    for (destination, whitening), rows in groups.items():
      lines.append(f"| {destination} | {whitening} | "
                   f"{_per_grad_cells(rows, t['nuts'][destination])} | "
                   f"{_rhat(max(r['rhat_x'] for r in rows))} | "
                   f"{_spread([r['acceptance'] for r in rows])} | "
                   f"{max(r['divergent'] for r in rows):.4f} |")
    for destination, nuts in t["nuts"].items():
      lines.append(f"| {destination} | NUTS (window adaptation) | {nuts['ess_per_grad_x']:.3g} "
                   f"| {nuts['ess_per_grad_x2']:.3g} | 1, 1 | {_rhat(nuts['rhat_x'])} | | |")
    lines.append(f"\ncommit `{t['commit']}`{' (--quick)' if t['quick'] else ''}, "
                 f"{t['seconds']:.0f} s")
  return lines


def _per_grad_cells(rows, nuts) -> str:
  """``ESS/grad x | ESS/grad x² | x, x² over NUTS's`` of a group of seeds' rows."""
  gx = np.mean([r["ess_per_grad_x"] for r in rows]) / nuts["ess_per_grad_x"]
  gx2 = np.mean([r["ess_per_grad_x2"] for r in rows]) / nuts["ess_per_grad_x2"]
  return (f"{_spread([r['ess_per_grad_x'] for r in rows])} | "
          f"{_spread([r['ess_per_grad_x2'] for r in rows])} | {gx:.2g}, {gx2:.2g}")


def budget_report(records) -> list[str]:
  """The L2HMC runs at NUTS's gradient budget (rows that have them)."""
  lines = []
  for name, record in records.items():
    if name == "transfer":
      continue
    nuts = record["nuts"]
    for label, rows in _groups(record).items():
      runs = [r["budget"] for r in rows if "budget" in r]
      if not runs:
        continue
      if not lines:
        lines = ["", "## At NUTS's gradient budget", "",
                 "The measured runs above use the same number of transitions (1,000) for "
                 "every sampler, so NUTS spends 5-50x L2HMC's gradients. Here each trained "
                 "L2HMC sampler runs NUTS's budget instead: NUTS's transitions x its gradients "
                 "per transition over the sampler's gradients per transition (K, + 1 for a reflection or "
                 "scale move, + 1 per interweaving move; rows before `a599f14`: over K) "
                 "transitions (a run of its own, from the same start as "
                 "the 1,000-transition run, another key); NUTS's row is its 1,000-transition "
                 "run. Same scores, R-hat and mean err of the worst seed.", "",
                 "| target | sampler | transitions | ESS/grad x | ESS/grad x² | /NUTS grad x, "
                 "x² | R-hat x, x² | diverg. | mean err | sd x0 | crossings |",
                 "|---|---|---|---|---|---|---|---|---|---|---|"]
      worst_sd = max((r["sd_ratio_x0"] for r in runs), key=lambda v: abs(np.log(v)))
      factor = runs[0].get("budget_factor", 1.0)
      label += f", {factor:g}x NUTS's gradients" if factor != 1.0 else ""
      lines.append(f"| {record['target']} | L2HMC, {label} | {runs[0]['samples']} | "
                   f"{_per_grad_cells(runs, nuts)} | {_rhat(max(r['rhat_x'] for r in runs))}, "
                   f"{_rhat(max(r['rhat_x2'] for r in runs))} | "
                   f"{max(r['divergent'] for r in runs):.4f} | "
                   f"{max(r['mean_error'] for r in runs):.2f} | {worst_sd:.2f} | "
                   f"{_spread([r['crossings'] for r in runs])} |")
    if lines and any("budget" in r for r in record["l2hmc"]):
      lines.append(f"| {record['target']} | NUTS (window adaptation) | "
                   f"{record['protocol']['samples']} | {nuts['ess_per_grad_x']:.3g} | "
                   f"{nuts['ess_per_grad_x2']:.3g} | 1, 1 | {_rhat(nuts['rhat_x'])}, "
                   f"{_rhat(nuts['rhat_x2'])} | {nuts['divergent']:.4f} | "
                   f"{nuts['mean_error']:.2f} | {nuts['sd_ratio_x0']:.2f} | "
                   f"{nuts['crossings']:.3g} |")
  return lines


def plot(records, path):
  plt = _report.pyplot()
  names = [n for n in records if n != "transfer"]
  if not names:
    return
  fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
  for ax, per, title in ((axes[0], "grad", "ESS of x² per gradient / NUTS's"),
                         (axes[1], "s", "ESS of x² per second / NUTS's")):
    labels = []
    for name in names:
      for label in ["HMC"] + list(_groups(records[name])):
        if label not in labels:
          labels.append(label)
    width = 0.8 / len(labels)
    for i, label in enumerate(labels):
      values = []
      for name in names:
        record = records[name]
        rows = [record["hmc"]] if label == "HMC" else _groups(record).get(label)
        if not rows:
          values.append(np.nan)
          continue
        if per == "grad":
          values.append(np.mean([r["ess_per_grad_x2"] for r in rows])
                        / record["nuts"]["ess_per_grad_x2"])
        else:
          values.append(np.mean([_per_second(r, "x2") for r in rows])
                        / _per_second(record["nuts"], "x2"))
      ax.bar(np.arange(len(names)) + i * width, values, width, label=label)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(np.arange(len(names)) + 0.4 - width / 2, names, fontsize=8)
    ax.set(yscale="log", title=title)
    ax.legend(fontsize=7)
  _report.save_figure(fig, path)


if __name__ == "__main__":
  main()
