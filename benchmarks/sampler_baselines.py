"""What a user would run instead of L2HMC: blackjax NUTS with window adaptation, and tuned HMC.

On each target of the L2HMC paper (``metaoptax.l2hmc.targets.all_targets()``):

* **NUTS** (Hoffman and Gelman 2014, `arXiv:1111.4246 <https://arxiv.org/abs/1111.4246>`_)
  with ``blackjax.window_adaptation`` (Stan's windowed adaptation of the step
  size and a diagonal mass matrix), run for ``burn_in`` adaptation steps on each
  chain, then ``samples`` transitions with the adapted parameters. Its
  gradient evaluations per transition are ``info.num_integration_steps``,
  averaged over chains and transitions.
* **HMC** (Neal 2011, `arXiv:1206.1901 <https://arxiv.org/abs/1206.1901>`_) with
  the same number of leapfrog steps K as L2HMC and an identity mass matrix, at
  every step size of a grid, ``burn_in`` transitions then ``samples``; the best
  step size is the one with the largest min(ESS of x, ESS of x^2) per gradient
  (a criterion of x alone would reward antithetic chains, which reflect x -> -x).

Chains (200 by default) start from exact draws of the target where it can be
sampled, else from a standard normal; they are vmapped and the sampling is
jit-compiled and timed after compilation (``_sampler_metrics``). Scores: Geyer's
ESS (min over dimensions) per gradient of x and of x^2, mode crossings, wall
time per effective sample.

    python benchmarks/sampler_baselines.py                 # the four targets, ~15 min
    python benchmarks/sampler_baselines.py --quick         # smoke run
    python benchmarks/sampler_baselines.py --out benchmarks/results   # the committed table

``run_baselines(target, key, ...)`` returns one target's figures for other
benchmarks (``l2hmc_ess.py`` sets L2HMC beside them). On any log density and the
chains' start positions ``(chains, dim)``: ``nuts(...)`` (as above) and
``chees_hmc(...)``, ChEES-HMC (Hoffman, Radul and Sountsov 2021) as blackjax's own tests
set it up; both also return the gradients their warm-up spent per chain.
"""

from __future__ import annotations

import functools
import json
import pathlib
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _report  # pylint: disable=g-import-not-at-top,wrong-import-position
import _sampler_metrics  # pylint: disable=g-import-not-at-top,wrong-import-position
from metaoptax import l2hmc  # pylint: disable=g-import-not-at-top,wrong-import-position

OUT = HERE / "out" / "sampler_baselines"  # git-ignored; the committed table: --out results
# HMC step sizes (geometric, x1.5), up to where the leapfrog is unstable on every
# target (beyond twice the smallest standard deviation: 0.1 on the ill-conditioned
# Gaussian, 0.32 on the correlated Gaussian and the mixture's modes).
HMC_GRID = (0.02, 0.03, 0.045, 0.07, 0.1, 0.15, 0.22, 0.33, 0.5, 0.75)


def sample_nuts(target, key, chains: int, adaptation: int, samples: int) -> dict:
  """:func:`nuts` on a ``Target``, its chains started by ``_sampler_metrics.start_positions``."""
  k_start, k_adapt, k_run = jax.random.split(key, 3)
  positions = _sampler_metrics.start_positions(target, k_start, chains)
  return _nuts(target.logdensity_fn, k_adapt, k_run, positions, adaptation, samples)


#: NUTS's metrics: Stan's window adaptation with a diagonal or a dense mass matrix, and
#: nutpie's low-rank Fisher metric (Seyboldt, Carlson and Carpenter 2026) in the same windows.
NUTS_METRICS = ("diagonal", "dense", "low_rank")


def nuts(logdensity_fn, key, positions, num_warmup: int, num_samples: int,
         metric: str = "diagonal") -> dict:
  """NUTS after a windowed adaptation, one adaptation per chain.

  Every chain adapts its own step size and metric from its own start (the adaptations
  vmapped), then draws ``num_samples`` with them. ``metric``:

  * ``"diagonal"``, ``"dense"``: ``blackjax.window_adaptation(blackjax.nuts, logdensity_fn,
    is_mass_matrix_diagonal=...)``, Stan's warm-up;
  * ``"low_rank"``: ``blackjax.window_adaptation_low_rank(blackjax.nuts, logdensity_fn,
    gradient_based_init=True)``, nutpie's metric: diagonal plus a correction of rank at
    most 10 that minimises a Fisher divergence from the draws and their gradients, the
    diagonal seeded from the first gradient as nutpie does.

  Args:
    logdensity_fn: a flat ``(dim,)`` position -> log density.
    key: PRNG key.
    positions: the chains' starts, ``(chains, dim)``.
    num_warmup: adaptation steps.
    num_samples: transitions after the adaptation.
    metric: one of ``NUTS_METRICS``.

  Returns:
    ``draws`` ``(num_samples, chains, dim)``; ``grads_per_transition`` (the mean of
    ``info.num_integration_steps``); ``warmup_grads`` ``(chains,)`` (the sum of the
    integration steps during the adaptation); ``total_grads_per_chain`` (warm-up and
    sampling, the mean over chains); ``seconds`` (the sampling, compiled, after the
    adaptation); ``acceptance``; ``divergent`` (the share of divergent transitions) and
    ``divergences`` (their count); ``adaptation_seconds`` (the adaptation's wall time,
    compilation included, all chains at once); ``step_size`` ``(chains,)``.

  Raises:
    ValueError: for a metric outside ``NUTS_METRICS``.
  """
  if metric not in NUTS_METRICS:
    raise ValueError(f"metric must be one of {NUTS_METRICS}, got {metric!r}")
  k_adapt, k_run = jax.random.split(key)
  return _nuts(logdensity_fn, k_adapt, k_run, jnp.asarray(positions), num_warmup, num_samples,
               metric)


def _nuts(logdensity_fn, k_adapt, k_run, positions, adaptation: int, samples: int,
          metric: str = "diagonal") -> dict:
  import blackjax  # pylint: disable=g-import-not-at-top
  chains = positions.shape[0]
  # keep the gradients spent (and the low-rank run's final translation, which it reads)
  info_fn = blackjax.adaptation.base.get_filter_adapt_info_fn(
      info_keys={"num_integration_steps"}, adapt_state_keys={"mu_star"})

  def adapt(key, position):
    if metric == "low_rank":
      warmup = blackjax.window_adaptation_low_rank(
          blackjax.nuts, logdensity_fn, gradient_based_init=True, adaptation_info_fn=info_fn)
    else:
      warmup = blackjax.window_adaptation(
          blackjax.nuts, logdensity_fn, is_mass_matrix_diagonal=metric == "diagonal",
          adaptation_info_fn=info_fn)
    (state, parameters), info = warmup.run(key, position, num_steps=adaptation)
    return state, parameters, jnp.sum(info.info.num_integration_steps)

  start = time.perf_counter()
  states, parameters, warmup_grads = jax.block_until_ready(jax.jit(jax.vmap(adapt))(
      jax.random.split(k_adapt, chains), positions))
  adaptation_seconds = time.perf_counter() - start

  (draws, steps, acceptance, divergent), seconds = _each_chain_draws(
      lambda parameters: blackjax.nuts(logdensity_fn, **parameters).step, k_run, states,
      parameters, samples)
  warmup_grads = np.asarray(warmup_grads)
  return dict(draws=np.swapaxes(np.asarray(draws), 0, 1),
              grads_per_transition=float(np.mean(steps)), warmup_grads=warmup_grads,
              total_grads_per_chain=float(np.mean(warmup_grads) + np.mean(steps) * samples),
              seconds=seconds, acceptance=float(np.mean(acceptance)),
              divergent=float(np.mean(divergent)), divergences=int(np.sum(divergent)),
              adaptation_seconds=adaptation_seconds,
              step_size=np.asarray(parameters["step_size"]))


def chees_hmc(logdensity_fn, key, positions, num_warmup: int, num_samples: int,
              step_size: float = 0.1, learning_rate: float = 0.5,
              mass_matrix_estimation: str | None = None) -> dict:
  """ChEES-HMC: jittered HMC whose step size and trajectory length are tuned across chains.

  Hoffman, Radul and Sountsov (2021), "An adaptive MCMC scheme for setting trajectory
  lengths in Hamiltonian Monte Carlo" (AISTATS, proceedings.mlr.press/v130/hoffman21a):
  the trajectory length follows the gradient of the ChEES criterion (the change in
  the chains' centred squared distance) with Adam, the step size dual averaging
  toward blackjax's target acceptance, over all chains at once. Set up as blackjax's
  own tests do: ``chees_adaptation(logdensity_fn, chains).run(key, positions,
  step_size=0.1, optim=optax.adam(0.5, b1=0.0, b2=0.95), num_steps=num_warmup)``, then
  ``dynamic_hmc(logdensity_fn, **parameters)`` for every chain with the same parameters.

  Args:
    logdensity_fn: a flat ``(dim,)`` position -> log density.
    key: PRNG key.
    positions: the chains' starts, ``(chains, dim)`` (the ensemble the adaptation uses).
    num_warmup: adaptation steps.
    num_samples: transitions after the adaptation.
    step_size: the adaptation's initial step size.
    learning_rate: Adam's learning rate on the log trajectory length.
    mass_matrix_estimation: ``None`` (identity, as blackjax's tests) or ``"diagonal"``.

  Returns:
    ``draws`` ``(num_samples, chains, dim)``; ``grads_per_transition`` (the mean of
    ``info.num_integration_steps``); ``warmup_grads`` ``(chains,)`` (the sum of the
    integration steps during the adaptation); ``seconds`` (the sampling, compiled,
    after the adaptation); ``acceptance``; ``divergent`` and ``divergences``;
    ``total_grads_per_chain`` and ``adaptation_seconds`` as :func:`nuts`; the adapted
    ``step_size`` and ``num_leapfrog_steps`` (the mean before jitter).
  """
  import blackjax  # pylint: disable=g-import-not-at-top
  import optax  # pylint: disable=g-import-not-at-top
  positions = jnp.asarray(positions)
  chains = positions.shape[0]
  k_adapt, k_run = jax.random.split(key)
  warmup = blackjax.chees_adaptation(
      logdensity_fn, chains, mass_matrix_estimation=mass_matrix_estimation,
      adaptation_info_fn=blackjax.adaptation.base.get_filter_adapt_info_fn(
          info_keys={"num_integration_steps"}))
  # Not under jit: ``parameters`` holds the jitter's functions (the adaptation's scan is
  # compiled all the same).
  start = time.perf_counter()
  (states, parameters), info = jax.block_until_ready(warmup.run(
      k_adapt, positions, step_size=step_size, optim=optax.adam(learning_rate, b1=0.0, b2=0.95),
      num_steps=num_warmup, max_sampling_steps=num_samples))
  adaptation_seconds = time.perf_counter() - start
  warmup_grads = jnp.sum(info.info.num_integration_steps, axis=0)
  step = blackjax.dynamic_hmc(logdensity_fn, **parameters).step

  def run(key, states):
    def one(states, key):
      states, info = jax.vmap(step)(jax.random.split(key, chains), states)
      return states, (states.position, info.num_integration_steps, info.acceptance_rate,
                      info.is_divergent)

    return jax.lax.scan(one, states, jax.random.split(key, num_samples))[1]

  (draws, steps, acceptance, divergent), seconds = _sampler_metrics.compiled_and_timed(
      run, k_run, states)
  warmup_grads = np.asarray(warmup_grads)
  return dict(draws=np.asarray(draws), grads_per_transition=float(np.mean(steps)),
              warmup_grads=warmup_grads,
              total_grads_per_chain=float(np.mean(warmup_grads) + np.mean(steps) * num_samples),
              seconds=seconds, acceptance=float(np.mean(acceptance)),
              divergent=float(np.mean(divergent)), divergences=int(np.sum(divergent)),
              adaptation_seconds=adaptation_seconds, step_size=float(parameters["step_size"]),
              num_leapfrog_steps=float(parameters["integration_steps_params"][0]))


#: Gradient evaluations per step of adjusted MCLMC's integrator (isokinetic McLachlan, a
#: two-stage scheme: two gradients per step).
MCLMC_GRADS_PER_STEP = 2
#: Adjusted MCLMC's target acceptance, as blackjax's documentation recommends.
MCLMC_TARGET_ACCEPTANCE = 0.9


def adjusted_mclmc(logdensity_fn, key, positions, num_samples: int) -> dict:
  """Adjusted MCLMC (MAMS; Robnik, Cohn-Gordon and Seljak 2025) with its documented tuning.

  As blackjax's sampling book sets it up: the dynamic kernel
  (``blackjax.mcmc.adjusted_mclmc_dynamic``, a trajectory of a random number of
  isokinetic McLachlan steps around ``L / step_size``), tuned per chain by
  ``blackjax.adjusted_mclmc_find_L_and_step_size`` at a target acceptance of 0.9 with
  ``frac_tune1 = frac_tune2 = frac_tune3 = 0.1`` of ``num_samples`` and a diagonal
  preconditioner, then ``num_samples`` transitions with the tuned step size, ``L`` and
  inverse mass matrix. Every chain tunes from its own start (vmapped).

  Args:
    logdensity_fn: a flat ``(dim,)`` position -> log density.
    key: PRNG key.
    positions: the chains' starts, ``(chains, dim)``.
    num_samples: transitions after the tuning (the tuning's length is a fraction of it).

  Returns:
    As :func:`nuts`; gradients count ``MCLMC_GRADS_PER_STEP`` per integrator step, in the
    tuning and in the sampling.
  """
  import blackjax  # pylint: disable=g-import-not-at-top
  from blackjax.mcmc import adjusted_mclmc_dynamic  # pylint: disable=g-import-not-at-top
  positions = jnp.asarray(positions)
  chains = positions.shape[0]
  k_init, k_tune, k_run = jax.random.split(key, 3)
  steps_fn = adjusted_mclmc_dynamic.make_random_trajectory_length_fn(True)
  kernel = adjusted_mclmc_dynamic.build_kernel(
      integration_steps_fn=steps_fn, integrator=blackjax.mcmc.integrators.isokinetic_mclachlan)

  def tune(key_init, key_tune, position):
    state = adjusted_mclmc_dynamic.init(position, logdensity_fn, key_init)
    state, params, tuning_steps = blackjax.adjusted_mclmc_find_L_and_step_size(
        mclmc_kernel=kernel, logdensity_fn=logdensity_fn, num_steps=num_samples, state=state,
        rng_key=key_tune, target=MCLMC_TARGET_ACCEPTANCE, frac_tune1=0.1, frac_tune2=0.1,
        frac_tune3=0.1, diagonal_preconditioning=True)
    return state, params, tuning_steps

  start = time.perf_counter()
  states, params, tuning_steps = jax.block_until_ready(jax.jit(jax.vmap(tune))(
      jax.random.split(k_init, chains), jax.random.split(k_tune, chains), positions))
  adaptation_seconds = time.perf_counter() - start

  def make_step(params):
    return lambda key, state: kernel(
        key, state, logdensity_fn, params.step_size,
        inverse_mass_matrix=params.inverse_mass_matrix,
        integration_steps_params=(params.L / params.step_size,))

  (draws, steps, acceptance, divergent), seconds = _each_chain_draws(
      make_step, k_run, states, params, num_samples)
  warmup_grads = MCLMC_GRADS_PER_STEP * np.asarray(tuning_steps, np.float64)
  grads = MCLMC_GRADS_PER_STEP * float(np.mean(steps))
  return dict(draws=np.swapaxes(np.asarray(draws), 0, 1), grads_per_transition=grads,
              warmup_grads=warmup_grads,
              total_grads_per_chain=float(np.mean(warmup_grads) + grads * num_samples),
              seconds=seconds, acceptance=float(np.mean(acceptance)),
              divergent=float(np.mean(divergent)), divergences=int(np.sum(divergent)),
              adaptation_seconds=adaptation_seconds, step_size=np.asarray(params.step_size),
              num_integration_steps=float(np.mean(np.asarray(params.L / params.step_size))))


#: The anchors of a sampler with no per-target choice, each as its documentation sets it up.
ANCHORS = ("nuts", "nuts_dense", "nuts_low_rank", "chees", "chees_diag", "mclmc_adjusted")


def anchor(name: str, logdensity_fn, key, positions, num_warmup_nuts: int,
           num_warmup_chees: int, num_samples: int) -> dict:
  """The anchor ``name`` of ``ANCHORS`` on ``logdensity_fn`` from ``positions``: NUTS with a
  diagonal, dense or low-rank metric (``num_warmup_nuts`` adaptation steps), ChEES-HMC with
  an identity or a diagonal metric (``num_warmup_chees``), adjusted MCLMC (its tuning's own
  length)."""
  if name == "nuts":
    return nuts(logdensity_fn, key, positions, num_warmup_nuts, num_samples)
  if name in ("nuts_dense", "nuts_low_rank"):
    return nuts(logdensity_fn, key, positions, num_warmup_nuts, num_samples,
                metric=name.removeprefix("nuts_"))
  if name == "chees":
    return chees_hmc(logdensity_fn, key, positions, num_warmup_chees, num_samples)
  if name == "chees_diag":
    return chees_hmc(logdensity_fn, key, positions, num_warmup_chees, num_samples,
                     mass_matrix_estimation="diagonal")
  if name == "mclmc_adjusted":
    return adjusted_mclmc(logdensity_fn, key, positions, num_samples)
  raise ValueError(f"unknown anchor {name!r}; the anchors are {', '.join(ANCHORS)}")


def sample_hmc(target, key, chains: int, burn_in: int, samples: int, num_steps: int,
               step_size: float) -> dict:
  """HMC with ``num_steps`` leapfrog steps and an identity mass matrix.

  Returns draws ``(samples, chains, dim)``, the sampling's seconds (after the
  burn-in) and the mean acceptance.
  """
  import blackjax  # pylint: disable=g-import-not-at-top
  k_start, k_burn, k_run = jax.random.split(key, 3)
  hmc = blackjax.hmc(target.logdensity_fn, step_size, jnp.ones(target.dim), num_steps)
  states = jax.vmap(hmc.init)(_sampler_metrics.start_positions(target, k_start, chains))

  def run(key, states, length):
    def one(states, key):
      states, info = jax.vmap(hmc.step)(jax.random.split(key, chains), states)
      return states, (states.position, info.acceptance_rate, info.is_divergent)

    return jax.lax.scan(one, states, jax.random.split(key, length))

  states, _ = jax.jit(run, static_argnums=2)(k_burn, states, burn_in)
  (_, (draws, acceptance, divergent)), seconds = _sampler_metrics.compiled_and_timed(
      functools.partial(run, length=samples), k_run, states)
  return dict(draws=np.asarray(draws), grads_per_transition=float(num_steps), seconds=seconds,
              acceptance=float(np.mean(acceptance)), divergent=float(np.mean(divergent)))


def run_baselines(target, key, chains: int = 200, burn_in: int = 1000, samples: int = 2000,
                  num_steps: int = 10, grid=HMC_GRID, progress=None,
                  keep_draws: bool = False, include_nuts: bool = True) -> dict:
  """NUTS and the best HMC of ``grid`` on ``target``: their scores (``_sampler_metrics.score``).

  Args:
    target: a ``metaoptax.l2hmc.targets.Target``.
    key: PRNG key (NUTS and every HMC run use the same one).
    chains, burn_in, samples: the protocol; ``burn_in`` is NUTS's adaptation.
    num_steps: HMC's leapfrog steps per transition (L2HMC's K).
    grid: HMC step sizes.
    progress: wraps the iterable of runs (e.g. ``tqdm.tqdm``), or None.
    keep_draws: also return every run's draws (``"draws"`` in its scores' dict).
    include_nuts: False: the HMC grid alone (no ``"nuts"`` in the result).

  Returns:
    ``{"nuts": scores, "hmc": scores of the best step size, "hmc_grid": [scores...]}``;
    each has ``acceptance``, ``step_size`` (NUTS: the median of its chains') and
    ``divergent`` (the share of divergent transitions, blackjax's ``is_divergent``).
  """
  runs = [("nuts", None)] * include_nuts + [("hmc", eps) for eps in grid]
  result = {"hmc_grid": []}
  for name, eps in (progress or iter)(runs):
    if name == "nuts":
      run = sample_nuts(target, key, chains, burn_in, samples)
      step_size = float(np.median(run["step_size"]))
    else:
      run = sample_hmc(target, key, chains, burn_in, samples, num_steps, eps)
      step_size = eps
    scores = _sampler_metrics.score(run["draws"], run["grads_per_transition"], run["seconds"])
    scores.update(acceptance=run["acceptance"], step_size=step_size,
                  divergent=run["divergent"])
    if keep_draws:
      scores["draws"] = run["draws"]
    if name == "nuts":
      result["nuts"] = scores
    else:
      result["hmc_grid"].append(scores)
  result["hmc"] = max(result["hmc_grid"], key=_criterion)
  return result


def _criterion(scores):
  """min(ESS of x, ESS of x^2) per gradient, ties (to 3 digits: e.g. no step size
  crosses the mixture's modes) broken by the other of the two."""
  pair = sorted((scores["ess_per_grad_x"], scores["ess_per_grad_x2"]))
  return float(f"{pair[0]:.3g}"), pair[1]


def report(records: list[dict], quick: bool) -> list[str]:
  """Markdown lines: one row per target and sampler, then every HMC step size."""
  first = records[0]
  lines = [
      "# What a user would run instead: blackjax NUTS and tuned HMC\n",
      f"{first['chains']} chains (exact draws of the target where available, else a standard "
      f"normal), {first['burn_in']} steps of burn-in (NUTS: window adaptation, diagonal mass "
      f"matrix), {first['samples']} samples; blackjax {first['blackjax']}, commit "
      f"`{first['commit']}`{' (--quick)' if quick else ''}. ESS: Geyer's estimator "
      "(metaoptax.l2hmc.ess.geyer_ess), min over dimensions, as a fraction of the samples; "
      "per gradient: divided by the gradient evaluations per transition. HMC: K = "
      f"{first['num_steps']}, the step size of the grid with the best min(ESS of x, ESS of "
      "x^2) per gradient. Crossings: fraction of transitions changing the sign of x[0]. "
      "Seconds per ESS: wall time of the sampling (jitted, after compilation, the chains "
      "vmapped) per effective sample. (cap): Geyer's estimate at its ceiling "
      "log10(samples x chains) (antithetic chains).", "",
      "| target | sampler | step size | acceptance | grads/transition | ESS/grad of x |"
      " ESS/grad of x^2 | crossings | sampling (s) | s per ESS of x | s per ESS of x^2 |",
      "|---|---|---|---|---|---|---|---|---|---|---|"]
  for record in records:
    for sampler in ("nuts", "hmc"):
      s = record[sampler]
      capped = " (cap)" if s["ess_x"] >= 0.999 * s["ess_cap"] else ""
      label = "NUTS (window adaptation)" if sampler == "nuts" else f"HMC (K = {record['num_steps']})"
      lines.append(
          f"| {record['target']} | {label} | {s['step_size']:.3g} | {s['acceptance']:.3f} |"
          f" {s['grads_per_transition']:.1f} | {s['ess_per_grad_x']:.3g}{capped} |"
          f" {s['ess_per_grad_x2']:.3g} | {s['crossings']:.4f} | {s['seconds']:.2f} |"
          f" {s['seconds_per_ess_x']:.2e} | {s['seconds_per_ess_x2']:.2e} |")
  lines += ["", "HMC grid: step size (acceptance, ESS/grad of x, ESS/grad of x^2)", "",
            "| target | grid |", "|---|---|"]
  for record in records:
    grid = "; ".join(f"{s['step_size']:.3g} ({s['acceptance']:.2f}, {s['ess_per_grad_x']:.3g},"
                     f" {s['ess_per_grad_x2']:.3g})" for s in record["hmc_grid"])
    lines.append(f"| {record['target']} | {grid} |")
  return lines


def main(argv=None):
  parser = _sampler_metrics.argument_parser(__doc__, OUT)
  parser.add_argument("--burn-in", type=int, default=1000,
                      help="HMC burn-in and NUTS adaptation steps")
  parser.add_argument("--samples", type=int, default=2000)
  parser.add_argument("--seed", type=int, default=0)
  args = parser.parse_args(argv)
  targets = l2hmc.targets.all_targets()
  import blackjax  # pylint: disable=g-import-not-at-top
  import tqdm  # pylint: disable=g-import-not-at-top
  chains, burn_in, samples = args.chains, args.burn_in, args.samples
  grid = HMC_GRID
  if args.quick:
    chains, burn_in, samples, grid = 8, 50, 100, HMC_GRID[3:6]
  args.out.mkdir(parents=True, exist_ok=True)
  commit = _report.git_commit(short=True)
  records = []
  for name in args.targets:
    start = time.perf_counter()
    progress = functools.partial(tqdm.tqdm, desc=name, leave=False, dynamic_ncols=True)
    result = run_baselines(targets[name], jax.random.key(args.seed), chains, burn_in, samples,
                           args.num_steps, grid, progress)
    records.append(dict(result, name=name, target=targets[name].name, chains=chains,
                        burn_in=burn_in, samples=samples, num_steps=args.num_steps,
                        seed=args.seed, commit=commit, blackjax=blackjax.__version__,
                        quick=args.quick, seconds=time.perf_counter() - start))
    print(f"{name}: NUTS ESS/grad x {result['nuts']['ess_per_grad_x']:.3g}, x^2 "
          f"{result['nuts']['ess_per_grad_x2']:.3g}; HMC (eps {result['hmc']['step_size']}) "
          f"x {result['hmc']['ess_per_grad_x']:.3g}, x^2 {result['hmc']['ess_per_grad_x2']:.3g}"
          f" ({records[-1]['seconds']:.0f} s)", flush=True)
  (args.out / "sampler_baselines.json").write_text(json.dumps(records, indent=1))
  table = _report.write_table(report(records, args.quick), str(args.out / "sampler_baselines.md"))
  return table


if __name__ == "__main__":
  main()


def _each_chain_draws(make_step, key, states, parameters, num_samples):
  """``num_samples`` transitions of every chain by its own kernel, ``make_step(parameters)``
  of the chain's adapted parameters (a ``step(key, state) -> (state, info)``), all chains
  vmapped, compiled and then timed: ``((positions, integration steps, acceptance,
  divergent), seconds)``, each ``(chains, num_samples, ...)``."""
  def run(keys, states, parameters):
    def chain(key, state, parameters):
      step = make_step(parameters)

      def one(state, key):
        state, info = step(key, state)
        return state, (state.position, info.num_integration_steps, info.acceptance_rate,
                       info.is_divergent)

      return jax.lax.scan(one, state, jax.random.split(key, num_samples))[1]

    return jax.vmap(chain)(keys, states, parameters)

  chains = jax.tree_util.tree_leaves(states)[0].shape[0]
  return _sampler_metrics.compiled_and_timed(run, jax.random.split(key, chains), states,
                                             parameters)
