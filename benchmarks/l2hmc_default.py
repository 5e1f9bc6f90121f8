"""The default sampler, with no per-target argument, against NUTS, ChEES-HMC and MCLMC.

``metaoptax.l2hmc.adapt(logdensity_fn).run(key, positions, num_steps)`` (the default recipe:
networks off, per-step and per-coordinate step sizes with a jittered trajectory, the
warm-up that finds the typical set, training, then a check) against blackjax's NUTS with
window adaptation on every chain, blackjax's ChEES-HMC set up as its tests do and the other
anchors of ``sampler_baselines.ANCHORS`` (each suite's set: ``default_samplers``), from the
same starts:

* **posteriordb** (``_posteriordb``): the tuning half (``--suite tuning``, what the default
  is chosen on) or the held-out half (``--suite held_out``, run once, at the end), started
  from Stan's inits (uniform(-2, 2) on the unconstrained scale); references: posteriordb's
  gold-standard means and sds (constrained scale, Stan's names); every anchor of
  ``SAMPLERS_TUNINGFORK``, as on tuningfork's classes;
* **the eight** earlier targets (``--suite eight``: the funnel, eight schools centered and
  non-centered, the breast-cancer regression, the mixture, the correlated Gaussian, the
  rough well, the 50-d ill-conditioned Gaussian), started from a standard normal;
  references: the targets' exact moments where known (``l2hmc_posteriors.exact_moments``),
  else the committed ones of ``l2hmc_posteriors.py`` (the centered schools' quadrature, or a
  long NUTS run).

* **tuningfork's classes** (``_tuningfork``; ``--suite tuningfork_tuning``, what defaults may
  be tuned on, or ``--suite tuningfork_held_out``, run once, at the end), started from
  uniform(-2, 2); references: exact moments or long NUTS runs
  (``results/tuningfork_reference.json``). Beside L2HMC run every anchor of
  ``SAMPLERS_TUNINGFORK``: NUTS with a diagonal, dense and nutpie's low-rank metric,
  ChEES-HMC with a diagonal metric, adjusted MCLMC (``--samplers`` picks among
  ``sampler_baselines.ANCHORS``).
* **scale** (``--suite scale``): tuningfork's 503-d stochastic volatility and a 1,006-d
  and a 10,006-d (``multilevel_regression_10k``)
  non-centered multilevel regression (``_multilevel_regression``, no reference: its rows
  check R-hat, ESS and divergences only), against NUTS with a diagonal and nutpie's
  low-rank metric.
* **multi-scale** posteriors (``--suite multiscale``): the funnel and the centered eight
  schools of the eight, and three of this script's own definitions, a horseshoe regression
  non-centered as users write it (``horseshoe``: 103 coordinates), the same centered
  (``horseshoe_centered``: fifty funnels) and a centered stochastic volatility model
  (``stochastic_volatility_centered``: 103), all on the unconstrained scale, with controls
  that need no non-centering (the non-centered schools, the breast-cancer regression, the
  50-d ill-conditioned and the correlated Gaussian); the three new ones have no reference
  moments (their moments' errors are NaN: R-hat, ESS and divergences judge them). NUTS
  (diagonal) is the anchor here.

The headline every sampler row shares (``_sampler_metrics.headline``, tuningfork's): min
bulk ESS over coordinates (arviz, rank-normalized) per chain over the *total* gradient
evaluations per chain (warm-up, screens, training, check and sampling; L2HMC: its
``info.num_gradient_evaluations`` plus the sampling), at 1,000 draws per chain, with its gate
(R-hat < 1.01, bulk ESS >= 400, no divergence; L2HMC's divergences: its draws' proposals
that are not finite, ``L2HMCInfo.is_divergent``). Beside it, per sampler: the adaptation's
gradients per chain and its wall seconds (compilation included, as a user waits for it; all
chains at once). Every suite's report leads with this table (the default and each anchor,
NUTS with a diagonal metric among them); the Geyer ESS per sampling gradient and the
checks below follow it.

Seeds run in the outer loop (``--seeds 3``: seed 0 on every target, then seed 1, ...), the
results file rewritten after each target, so a run cut short keeps whole seeds first; a
rerun with the same settings keeps the other seeds' and targets' rows (``--first-seed``
resumes).

Per target and seed: ESS per gradient (Geyer, min over coordinates) of x and x² of the
draws, the gradients of the adaptation (warm-up and training for L2HMC, window adaptation
for NUTS, the ChEES adaptation) reported beside, ESS per second of sampling, split R-hat,
the largest error of a mean in reference sds and of an sd relative to the reference, and
whether the run warned (L2HMC: ``info.converged``). Where L2HMC's draws miss R-hat < 1.01,
every mean within 0.1 sd or every sd within 10 %, it runs again from its adapted states to
NUTS's sampling gradients (the issue's check "at NUTS's gradient budget"). A run is
**silently wrong** where it misses them there (NUTS, ChEES: at their 1,000 draws) and did not
warn.

    python benchmarks/l2hmc_default.py --suite tuning --quick        # smoke run
    python benchmarks/l2hmc_default.py --suite tuning --out benchmarks/results
"""

from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys
import time
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from tqdm.auto import tqdm

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _posteriordb  # pylint: disable=g-import-not-at-top,wrong-import-position
import _sampler_metrics  # pylint: disable=g-import-not-at-top,wrong-import-position
import _multilevel_regression  # pylint: disable=g-import-not-at-top,wrong-import-position
import _tuningfork  # pylint: disable=g-import-not-at-top,wrong-import-position
import sampler_baselines  # pylint: disable=g-import-not-at-top,wrong-import-position
from metaoptax import l2hmc  # pylint: disable=g-import-not-at-top,wrong-import-position

OUTPUTS = ("l2hmc_default_*.json", "l2hmc_default_*.md")
OUT = HERE / "out" / "l2hmc_default"  # git-ignored; the committed results: --out results
SUITES = ("tuning", "held_out", "eight", "tuningfork_tuning", "tuningfork_held_out", "scale",
          "multiscale")
#: The eight earlier targets' samplers (``--samplers`` overrides; ``default_samplers``).
SAMPLERS = ("l2hmc", "nuts", "chees")
#: posteriordb's and tuningfork's: the default against the issue's five anchors (ChEES-HMC with a
#: diagonal metric).
SAMPLERS_TUNINGFORK = ("l2hmc", "nuts", "nuts_dense", "nuts_low_rank", "chees_diag",
                       "mclmc_adjusted")
#: The scale check's: the default against NUTS with a diagonal and nutpie's low-rank metric.
SAMPLERS_SCALE = ("l2hmc", "nuts", "nuts_low_rank")
#: The multi-scale suite's: the default against NUTS with a diagonal metric.
SAMPLERS_MULTISCALE = ("l2hmc", "nuts")
MULTISCALE = ("funnel", "schools_centered", "horseshoe", "horseshoe_centered",
              "schools_noncentered", "logistic", "ill_conditioned", "correlated",
              "stochastic_volatility_centered")
EIGHT = ("funnel", "schools_centered", "schools_noncentered", "logistic", "mixture",
         "correlated", "rough_well", "ill_conditioned")
CHAINS = 32
#: the targets of issue 50 on every target: R-hat, bias of the means (reference sds) and sds
MAX_RHAT, MAX_MEAN_ERROR, MAX_SD_ERROR = 1.01, 0.1, 0.1
MAX_BUDGET_DRAWS = 20_000  # the most draws of the check at NUTS's gradient budget


class Problem:
  """A log density on a flat vector, the chains' starts, and reference moments of
  ``summary(draws)`` (a dict of named scalars per draw)."""

  def __init__(self, name, logdensity_fn, starts, summary, mean, sd):
    self.name, self.logdensity_fn, self.starts = name, logdensity_fn, starts
    self.summary, self.mean, self.sd = summary, mean, sd


def _posteriordb_problem(name) -> Problem:
  posterior = _posteriordb.load(name)
  return Problem(name, posterior.logdensity_fn, posterior.initial_positions,
                 posterior.constrain, posterior.reference_mean, posterior.reference_sd)


def _eight_problem(name) -> Problem:
  import l2hmc_posteriors  # pylint: disable=g-import-not-at-top
  target = l2hmc_posteriors.targets()[name]
  files = ("l2hmc_posteriors.json", "l2hmc_posteriors_toys.json")
  reference = l2hmc_posteriors.exact_moments(target) or next(
      json.loads((HERE / "results" / f).read_text())[name]["reference"]
      for f in files if name in json.loads((HERE / "results" / f).read_text()))
  names = [f"x[{i}]" for i in range(target.dim)]
  summary = lambda x: {n: x[i] for i, n in enumerate(names)}
  starts = lambda key, chains: jax.random.normal(key, (chains, target.dim))
  return Problem(name, target.logdensity_fn, starts, summary,
                 dict(zip(names, reference["mean"])), dict(zip(names, reference["sd"])))


def _tuningfork_problem(name) -> Problem:
  model = _tuningfork.load(name)
  if model.reference_mean is None:
    raise ValueError(f"{name} has no reference moments yet: run python benchmarks/"
                     f"posteriordb_check.py --suite tuningfork --names {name} --out "
                     "benchmarks/results")
  names = [f"x[{i}]" for i in range(model.dim)]
  summary = lambda x: {n: x[i] for i, n in enumerate(names)}
  return Problem(name, model.logdensity_fn, model.initial_positions, summary,
                 dict(zip(names, model.reference_mean)), dict(zip(names, model.reference_sd)))


def _multilevel_problem(groups: int = 1000) -> Problem:
  target = _multilevel_regression.multilevel_regression(groups)
  starts = lambda key, chains: jax.random.uniform(key, (chains, target.dim), minval=-2.0,
                                                  maxval=2.0)
  name = "multilevel_regression" + ("" if groups == 1000 else f"_{groups // 1000}k")
  return Problem(name, target.logdensity_fn, starts, lambda x: x, None, None)


def _horseshoe_data(num_data: int, num_features: int):
  """The horseshoe regressions' synthetic data (fixed seed): standard normal features, five
  nonzero coefficients (3, -2.5, 2, -1.5, 1) of ``num_features``, noise sd 0.5."""
  k_x, k_noise = jax.random.split(jax.random.key(20261128))
  features = jax.random.normal(k_x, (num_data, num_features))
  truth = jnp.zeros(num_features).at[:5].set(jnp.array([3.0, -2.5, 2.0, -1.5, 1.0]))
  return features, features @ truth + 0.5 * jax.random.normal(k_noise, (num_data,))


def _log_half_cauchy(log_x):
  """The log density of ``exp(log_x) ~ half-Cauchy(0, 1)`` with its Jacobian (softplus:
  finite for any finite ``log_x``)."""
  return jnp.log(2.0 / jnp.pi) - jax.nn.softplus(2.0 * log_x) + log_x


def horseshoe_regression(num_data: int = 100, num_features: int = 50):
  r"""A regression with a horseshoe prior, non-centered as users write it (the Stan user
  guide's, numpyro's example, Piironen and Vehtari 2017), on the unconstrained scale:
  ``(alpha, log sigma, log tau, log lambda_1..p, z_1..p)``, :math:`\beta_j = \tau\lambda_j
  z_j`, :math:`z_j \sim \mathcal N(0, 1)`, :math:`y \sim \mathcal N(\alpha + X\beta,
  \sigma^2)`, :math:`\tau, \lambda_j \sim` half-Cauchy(0, 1), :math:`\sigma \sim`
  half-normal(0, 1), :math:`\alpha \sim \mathcal N(0, 5^2)`; data: ``_horseshoe_data``.
  A log density of a flat vector and its dimension."""
  features, y = _horseshoe_data(num_data, num_features)
  norm = jax.scipy.stats.norm

  def logdensity_fn(theta):
    alpha, log_sigma, log_tau = theta[0], theta[1], theta[2]
    log_lambda, z = theta[3:3 + num_features], theta[3 + num_features:]
    sigma = jnp.exp(log_sigma)
    beta = z * jnp.exp(log_tau + log_lambda)
    prior = (norm.logpdf(alpha, scale=5.0) + norm.logpdf(sigma) + log_sigma
             + _log_half_cauchy(log_tau) + jnp.sum(_log_half_cauchy(log_lambda))
             + jnp.sum(norm.logpdf(z)))
    return prior + jnp.sum(norm.logpdf(y, alpha + features @ beta, sigma))

  return logdensity_fn, 3 + 2 * num_features


def horseshoe_regression_centered(num_data: int = 100, num_features: int = 50):
  r""":func:`horseshoe_regression` centered: ``(alpha, log sigma, log tau, log
  lambda_1..p, beta_1..p)``, :math:`\beta_j \sim \mathcal N(0, \tau^2\lambda_j^2)`: each
  null coefficient and its scales form a funnel (the learned non-centering's test). A log
  density of a flat vector and its dimension."""
  features, y = _horseshoe_data(num_data, num_features)
  norm = jax.scipy.stats.norm

  def logdensity_fn(theta):
    alpha, log_sigma, log_tau = theta[0], theta[1], theta[2]
    log_lambda, beta = theta[3:3 + num_features], theta[3 + num_features:]
    sigma = jnp.exp(log_sigma)
    prior = (norm.logpdf(alpha, scale=5.0) + norm.logpdf(sigma) + log_sigma
             + _log_half_cauchy(log_tau) + jnp.sum(_log_half_cauchy(log_lambda))
             + jnp.sum(norm.logpdf(beta, scale=jnp.exp(log_tau + log_lambda))))
    return prior + jnp.sum(norm.logpdf(y, alpha + features @ beta, sigma))

  return logdensity_fn, 3 + 2 * num_features


def stochastic_volatility(num_times: int = 100):
  r"""A centered stochastic volatility model, on the unconstrained scale: ``(mu, log sigma,
  atanh phi, h_1..T)``, :math:`h_1 \sim \mathcal N(\mu, \sigma^2/(1-\phi^2))`,
  :math:`h_t \sim \mathcal N(\mu + \phi(h_{t-1} - \mu), \sigma^2)`,
  :math:`y_t \sim \mathcal N(0, e^{h_t})`; :math:`\mu \sim \mathcal N(0, 2^2)`,
  :math:`\sigma \sim` half-normal(0, 1), :math:`\phi \sim` uniform(-1, 1); synthetic data
  (fixed seed) from :math:`\mu = -1, \phi = 0.95, \sigma = 0.3`. A log density of a flat
  vector and its dimension."""
  k_h, k_y = jax.random.split(jax.random.key(20261129))
  mu, phi, sigma = -1.0, 0.95, 0.3

  def simulate(h, eps):
    h = mu + phi * (h - mu) + sigma * eps
    return h, h

  _, h = jax.lax.scan(simulate, mu, jax.random.normal(k_h, (num_times,)))
  y = jnp.exp(0.5 * h) * jax.random.normal(k_y, (num_times,))
  norm = jax.scipy.stats.norm

  def logdensity_fn(theta):
    mu, log_sigma, phi = theta[0], theta[1], jnp.tanh(theta[2])
    h, sigma = theta[3:], jnp.exp(theta[1])
    prior = (norm.logpdf(mu, scale=2.0) + norm.logpdf(sigma) + log_sigma
             + jnp.log1p(-phi**2) - jnp.log(2.0))
    states = (norm.logpdf(h[0], mu, sigma / jnp.sqrt(1.0 - phi**2))
              + jnp.sum(norm.logpdf(h[1:], mu + phi * (h[:-1] - mu), sigma)))
    return prior + states + jnp.sum(norm.logpdf(y, scale=jnp.exp(0.5 * h)))

  return logdensity_fn, 3 + num_times


def _own_problem(name, builder) -> Problem:
  """One of this script's posteriors; its reference moments from
  ``results/l2hmc_default_multiscale_reference.json`` where that holds them (else none: the
  moments' errors are NaN, and R-hat, ESS and divergences judge the run)."""
  logdensity_fn, dim = builder()
  path = HERE / "results" / "l2hmc_default_multiscale_reference.json"
  references = json.loads(path.read_text()) if path.exists() else {}
  names = [f"x[{i}]" for i in range(dim)]
  summary = lambda x: {n: x[i] for i, n in enumerate(names)}
  starts = lambda key, chains: jax.random.normal(key, (chains, dim))
  reference = references.get(name, dict(mean=[np.nan] * dim, sd=[np.nan] * dim))
  return Problem(name, logdensity_fn, starts, summary, dict(zip(names, reference["mean"])),
                 dict(zip(names, reference["sd"])))


def suite_names(suite: str) -> tuple[str, ...]:
  """The suite's targets, in the order its reports list them."""
  if suite == "scale":
    return ("stochastic_volatility", "multilevel_regression", "multilevel_regression_10k")
  if suite.startswith("tuningfork"):
    return tuple(_tuningfork.NAMES_TUNING if suite == "tuningfork_tuning"
                 else _tuningfork.NAMES_HELD_OUT)
  if suite == "eight":
    return EIGHT
  if suite == "multiscale":
    return MULTISCALE
  return tuple(_posteriordb.NAMES_TUNING if suite == "tuning" else _posteriordb.NAMES_HELD_OUT)


def _problem(suite: str, name: str) -> Problem:
  """One of the suite's problems, built."""
  if suite == "scale":
    if name.startswith("multilevel_regression"):
      return _multilevel_problem(10_000 if name.endswith("_10k") else 1000)
    return _tuningfork_problem(name)
  if suite.startswith("tuningfork"):
    return _tuningfork_problem(name)
  own = {"horseshoe": horseshoe_regression, "horseshoe_centered": horseshoe_regression_centered,
         "stochastic_volatility_centered": stochastic_volatility}
  if suite == "multiscale" and name in own:
    return _own_problem(name, own[name])
  if suite in ("eight", "multiscale"):
    return _eight_problem(name)
  return _posteriordb_problem(name)


def problems(suite: str, names=None) -> list[Problem]:
  """The suite's problems, or those of them in ``names`` (in the suite's order)."""
  return [_problem(suite, name) for name in suite_names(suite) if not names or name in names]


def ordered(results: dict, suite: str) -> dict:
  """``results`` with its targets in the suite's order (others after them) and, per target,
  L2HMC's rows first, then the anchors' in ``sampler_baselines.ANCHORS``'s order."""
  order = {name: i for i, name in enumerate(suite_names(suite))}
  samplers = {name: i for i, name in enumerate(("l2hmc",) + sampler_baselines.ANCHORS)}
  return {name: {k: rows[k] for k in sorted(rows, key=lambda k: samplers.get(k, len(samplers)))}
          for name, rows in sorted(results.items(),
                                   key=lambda item: order.get(item[0], len(order)))}


def with_row_commits(results: dict, commit: str | None) -> dict:
  """``results`` whose every row carries the commit it was measured at: a row without one
  gets its target's ``baseline_commit`` (the former record of reused anchor rows) if it is an
  anchor's, else ``commit`` (its file's); ``baseline_commit`` itself is dropped."""
  out = {}
  for name, rows in results.items():
    anchor_commit = rows.get("baseline_commit", commit)
    out[name] = {k: [dict(row, commit=row.get("commit") or (commit if k == "l2hmc"
                                                            else anchor_commit))
                     for row in r]
                 for k, r in rows.items() if k != "baseline_commit"}
  return out


def moments_errors(problem: Problem, draws) -> dict:
  """The largest |mean - reference| in reference sds and |sd / reference - 1| (``None``
  where the problem has no reference)."""
  if problem.mean is None:
    return dict(mean_error=None, sd_error=None)
  summarized = jax.jit(jax.vmap(jax.vmap(problem.summary)))(jnp.asarray(draws))
  mean_errors, sd_errors = [], []
  for name, ref_mean in problem.mean.items():
    values = np.asarray(summarized[name], np.float64)
    ref_sd = max(problem.sd[name], 1e-12)
    mean_errors.append(abs(values.mean() - ref_mean) / ref_sd)
    sd_errors.append(abs(values.std() / ref_sd - 1.0))
  return dict(mean_error=float(np.max(mean_errors)), sd_error=float(np.max(sd_errors)))


def run_l2hmc(problem: Problem, key, positions, num_steps: int, num_samples: int,
              budget_grads: float | None) -> dict:
  """The default's adaptation, ``num_samples`` draws, and, where those draws are off the
  reference (:func:`right`), a second run from the adapted states to ``budget_grads``
  gradients per chain (NUTS's sampling budget; at most ``MAX_BUDGET_DRAWS`` draws), whose
  R-hat and moments are the acceptance's "at NUTS's gradient budget" (``None``: no NUTS row,
  no second run)."""
  k_adapt, k_run, k_budget = jax.random.split(key, 3)
  start = time.perf_counter()
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always", l2hmc.ConvergenceWarning)
    (states, sampler), info = l2hmc.adapt(problem.logdensity_fn, progress=None).run(
        k_adapt, positions, num_steps=num_steps)
    jax.block_until_ready(states)
  adaptation_seconds = time.perf_counter() - start
  run = lambda k, s: l2hmc.sample_chains(k, sampler, s, num_samples)
  (draws, (acceptance, divergent, used)), seconds = _sampler_metrics.compiled_and_timed(
      run, k_run, states)
  grads = l2hmc.gradient_evaluations(info.config)
  # the retries of divergent trajectories included (L2HMCInfo.num_gradient_evaluations)
  sampling_grads = float(np.mean(np.sum(np.asarray(used, np.float64), axis=0)))
  warmup_grads = float(np.mean(info.num_gradient_evaluations))
  found = dict(draws=np.asarray(draws), grads_per_transition=float(grads),
               warmup_grads=warmup_grads, seconds=seconds,
               total_grads_per_chain=warmup_grads + sampling_grads,
               divergences=int(np.sum(divergent)), adaptation_seconds=adaptation_seconds,
               # sample_chains called as the README calls it warns of divergent draws
               acceptance=float(np.mean(acceptance)),
               warned=bool(caught) or bool(np.any(divergent)),
               adaptation_rhat=info.rhat, messages=list(info.messages),
               num_steps=info.config.num_steps, divergent=float(info.divergent_rate),
               noncentering=info.noncentering is not None,
               local_step_sizes=bool(info.config.local_step_sizes),
               reflection=bool(info.config.reflection))
  if budget_grads is not None and not right(_checks(problem, found["draws"])):
    count = int(min(max(np.ceil(budget_grads / grads), num_samples), MAX_BUDGET_DRAWS))
    budget_draws, _ = jax.jit(lambda k, s: l2hmc.sample_chains(k, sampler, s, count))(
        k_budget, states)
    found["at_budget"] = dict(_checks(problem, np.asarray(budget_draws)), draws=count)
  return found


def _checks(problem: Problem, draws) -> dict:
  """Split R-hat of x and x² and the moments' errors of ``draws``."""
  draws64 = np.asarray(draws, np.float64)
  return dict(rhat_x=_sampler_metrics.split_rhat(draws64),
              rhat_x2=_sampler_metrics.split_rhat(draws64**2), **moments_errors(problem, draws))


def right(checks: dict) -> bool:
  """R-hat < 1.01 for x and x², every mean within 0.1 reference sd, every sd within 10 %
  (R-hat alone where the problem has no reference: its errors are ``None`` or NaN)."""
  moments = checks["mean_error"] is None or (not checks["mean_error"] >= MAX_MEAN_ERROR
                                             and not checks["sd_error"] >= MAX_SD_ERROR)
  return bool(max(checks["rhat_x"], checks["rhat_x2"]) < MAX_RHAT and moments)



def score(problem: Problem, run: dict) -> dict:
  found = _sampler_metrics.score(run["draws"], run["grads_per_transition"], run["seconds"])
  found.update(moments_errors(problem, run["draws"]))
  found["warmup_grads"] = float(np.mean(run["warmup_grads"]))
  found["divergent"] = float(run.get("divergent", 0.0))
  found["warned"] = bool(run.get("warned", False))
  found["acceptance"] = run["acceptance"]
  found.update(_sampler_metrics.headline(run["draws"], run["total_grads_per_chain"],
                                         run.get("divergences")))
  found["right"] = right(found)
  if "at_budget" in run:  # off at 1,000 draws: the acceptance's check at NUTS's budget
    found["at_budget"] = dict(run["at_budget"], right=right(run["at_budget"]))
  right_at_budget = found.get("at_budget", found)["right"]
  found["silently_wrong"] = bool(not right_at_budget and not found["warned"])
  for key in ("adaptation_rhat", "messages", "num_steps", "local_step_sizes", "reflection",
              "adaptation_seconds", "noncentering"):
    if key in run:
      found[key] = run[key]
  return found


def run_target(problem: Problem, seeds, num_steps, num_warmup_nuts, num_warmup_chees,
               num_samples, baselines: dict | None = None, samplers=SAMPLERS) -> dict:
  """Every sampler's rows per seed, all from the same starts; with ``baselines`` (an earlier
  run's rows, same settings and starts, each row with its ``seed``), an anchor's row of a
  seed found there is reused and the others run. NUTS (diagonal) runs first: its sampling
  gradients are L2HMC's budget."""
  rows = {name: [] for name in samplers}
  for index, seed in enumerate(seeds):
    k_start, k_l2hmc, k_nuts, k_chees = jax.random.split(jax.random.key(seed), 4)
    positions = problem.starts(k_start, CHAINS)
    for name in samplers:
      if name == "l2hmc":
        continue
      stored = [row for row in (baselines or {}).get(name, ()) if row.get("seed") == seed]
      if stored:  # the same settings, seed and starts: reused
        rows[name].append(stored[0])
      else:
        key = {"nuts": k_nuts, "chees": k_chees}.get(name)
        if key is None:
          key = jax.random.fold_in(k_nuts, sampler_baselines.ANCHORS.index(name))
        rows[name].append(dict(score(problem, sampler_baselines.anchor(
            name, problem.logdensity_fn, key, positions, num_warmup_nuts, num_warmup_chees,
            num_samples)), seed=seed))
    if "l2hmc" in samplers:
      budget = (rows["nuts"][index]["grads_per_transition"] * num_samples if "nuts" in rows
                else None)
      rows["l2hmc"].append(dict(score(problem, run_l2hmc(problem, k_l2hmc, positions,
                                                         num_steps, num_samples, budget)),
                                seed=seed))
  return rows


def _seed_of(rows: list, index: int) -> int:
  """A row's seed (rows written before rows carried it: seeds 0, 1, ... in order)."""
  return rows[index].get("seed", index)


def merge_rows(earlier: dict, later: dict) -> dict:
  """``later``'s rows of one target, with ``earlier``'s rows of the seeds ``later`` lacks
  (per sampler, sorted by seed)."""
  merged = dict(earlier)
  for sampler, rows in later.items():
    seeds = {_seed_of(rows, i) for i in range(len(rows))}
    old = earlier.get(sampler, [])
    kept = [dict(row, seed=_seed_of(old, i)) for i, row in enumerate(old)
            if _seed_of(old, i) not in seeds]
    merged[sampler] = sorted(kept + rows, key=lambda row: row["seed"])
  return merged


def _rhat_cell(rows) -> str:
  """The worst seed's R-hat at 1,000 draws, and where a seed was checked at NUTS's gradient
  budget, the worst R-hat there."""
  cell = f"{max(max(row['rhat_x'], row['rhat_x2']) for row in rows):.3f}"
  budget = [row["at_budget"] for row in rows if "at_budget" in row]
  if budget:
    cell += f" ({max(max(b['rhat_x'], b['rhat_x2']) for b in budget):.3f} at NUTS's budget)"
  return cell


def _mean(rows, key):
  return float(np.mean([row[key] for row in rows]))


def _best_anchor(rows: dict) -> float | None:
  """The best headline among the anchors (not L2HMC) that pass the gate on every seed."""
  passing = [_mean(r, "min_bulk_ess_per_grad") for k, r in rows.items()
             if k != "l2hmc" and r and all("gate" in x for x in r)
             and all(x["gate"] for x in r)]
  return max(passing) if passing else None


def _measured(rows: list) -> bool:
  """Whether every row carries the headline (rows measured before it do not)."""
  return all("min_bulk_ess_per_grad" in row for row in rows)


def _headline_cells(r: list, best: float | None) -> str:
  """Total gradients per chain, the headline, its ratio to the best anchor and the gate."""
  if not _measured(r):  # rows measured before the metric
    return "— | — | — | — |"
  value = _mean(r, "min_bulk_ess_per_grad")
  ratio = f"{value / best:.2f}" if best else "—"
  return (f"{_mean(r, 'total_grads_per_chain'):.3g} | {value:.3g} | {ratio} | "
          f"{sum(row['gate'] for row in r)}/{len(r)} |")


def report(results: dict, suite: str, commit: str, settings: dict) -> list[str]:
  lines = [f"# The default L2HMC sampler against NUTS and ChEES-HMC: {suite}", "",
           f"`python benchmarks/l2hmc_default.py --suite {suite}` at `{commit}`; settings: "
           + ", ".join(f"{k}={v}" for k, v in settings.items()) + ". Means over seeds; R-hat "
           "and the moments' errors: the worst seed. ESS/grad: Geyer's ESS (min over "
           "coordinates) per gradient of sampling; adaptation gradients per chain beside; K: the "
           "leapfrog steps adapt chose, per seed, and on how many seeds it turned local step "
           "sizes or the reflection on. Where L2HMC's 1,000 draws miss R-hat < 1.01 or "
           "the moments, it runs again to NUTS's sampling gradients (R-hat there in brackets); "
           "silently wrong: off there without a warning. Headline (tuningfork's): min bulk ESS "
           "(arviz) per chain over the total gradients per chain, warm-up included, the mean "
           "over seeds; × best anchor: over the best anchor's headline among those that pass "
           "the gate on every seed; gate: seeds passing R-hat < 1.01, bulk ESS >= 400, no "
           "divergence.", "",
           "| target | sampler | ESS/grad x | ESS/grad x² | × NUTS (x / x²) | ESS/s x | "
           "adaptation grads | R-hat | mean err (sd) | sd err | warned | silently wrong | "
           "total grads/chain | min bulk ESS / total grad | × best anchor | gate |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
  if suite.startswith("tuningfork") or suite in ("scale", "multiscale"):
    return _headline_report(results, suite, commit, settings)
  # the headline leads every suite's report; the Geyer ESS and the checks follow
  headline = _headline_report(results, suite, commit, settings)
  lines = headline + ["", "## Details", ""] + lines[2:]
  for name, rows in results.items():
    nuts_x, nuts_x2 = _mean(rows["nuts"], "ess_per_grad_x"), _mean(rows["nuts"],
                                                                    "ess_per_grad_x2")
    best = _best_anchor(rows)
    for sampler in rows:
      r = rows[sampler]
      ratio = (f"{_mean(r, 'ess_per_grad_x') / nuts_x:.2f} / "
               f"{_mean(r, 'ess_per_grad_x2') / nuts_x2:.2f}")
      ess_per_second = float(np.mean([1.0 / row["seconds_per_ess_x"] for row in r]))
      label = sampler
      if sampler == "l2hmc" and all("num_steps" in row for row in r):
        label += " (K = " + ", ".join(str(row["num_steps"]) for row in r)
        for option in ("local step sizes", "reflection"):
          on = sum(row.get(option.replace(" ", "_"), False) for row in r)
          label += f"; {option} on {on} of {len(r)} seeds" if on else ""
        label += ")"
      lines.append(
          f"| {name} | {label} | {_mean(r, 'ess_per_grad_x'):.3g} | "
          f"{_mean(r, 'ess_per_grad_x2'):.3g} | {ratio} | {ess_per_second:.3g} | "
          f"{_mean(r, 'warmup_grads'):.3g} | "
          f"{_rhat_cell(r)} | "
          f"{max(row['mean_error'] for row in r):.3f} | "
          f"{max(row['sd_error'] for row in r):.3f} | "
          f"{sum(row['warned'] for row in r)}/{len(r)} | "
          f"{sum(row['silently_wrong'] for row in r)}/{len(r)} | {_headline_cells(r, best)}")
  return lines + ["", "Rows measured at other commits (the anchors' reused with "
                   "`--reuse-baselines` or joined with `--merge`, same settings, seeds and "
                   "starts): " + _commits(results, commit) + "."]


def _commits(results: dict, commit: str) -> str:
  """Which rows were measured at a commit other than ``commit`` (none: "none")."""
  where = {}
  for name, rows in results.items():
    for sampler, r in rows.items():
      for row in r:
        if row.get("commit", commit) != commit:
          where.setdefault(row["commit"], set()).add(f"{name}/{sampler}")
  return "; ".join(f"`{c}`: {', '.join(sorted(names))}" for c, names in sorted(where.items())
                   ) or "none"


def _worst(errors) -> str:
  """The largest of the seeds' errors, or — where there is no reference."""
  errors = [e for e in errors if e is not None]
  return f"{max(errors):.3f}" if errors else "—"


def _headline_report(results: dict, suite: str, commit: str, settings: dict) -> list[str]:
  """tuningfork's table: per class and sampler the gate, the headline and its ratios to the
  best anchor and to NUTS (diagonal), and the adaptation's cost."""
  lines = [f"# The default L2HMC sampler against the anchors: {suite}", "",
           f"`python benchmarks/l2hmc_default.py --suite {suite} --out benchmarks/results` at "
           f"`{commit}` (the rows' commits in the JSON); settings: "
           + ", ".join(f"{k}={v}" for k, v in settings.items()) + ". Every sampler from the "
           "same starts (uniform(-2, 2)) per seed; means over the seeds run (column seeds). "
           "Headline (tuningfork's): min bulk ESS over coordinates (arviz, rank-normalized, "
           "all chains) per chain over the total gradients per chain (adaptation and "
           f"{settings['samples']:,} draws). Gate: seeds with R-hat (rank-normalized) < 1.01, min bulk ESS >= 400 and "
           "no divergent transition. × best anchor: over the best headline among the anchors "
           "that pass the gate on every seed (— where none does); × NUTS: over NUTS (diagonal)'s "
           "headline. Adaptation: gradients per chain, and wall seconds (compilation "
           "included, all chains at once). Mean err: the largest error of a mean in reference "
           "sds (worst seed).", "",
           "| class | sampler | seeds | gate | max R-hat | min bulk ESS | divergences | "
           "adaptation grads/chain | adaptation s | total grads/chain | headline | "
           "× best anchor | × NUTS | mean err (sd) |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
  for name, rows in results.items():
    best = _best_anchor(rows)
    nuts = (_mean(rows["nuts"], "min_bulk_ess_per_grad")
            if rows.get("nuts") and _measured(rows["nuts"]) else None)
    for sampler in rows:
      r = rows[sampler]
      if not _measured(r):  # rows measured before the headline
        continue
      value = _mean(r, "min_bulk_ess_per_grad")
      seconds = [row["adaptation_seconds"] for row in r if "adaptation_seconds" in row]
      divergences = [row["divergences"] for row in r if row.get("divergences") is not None]
      lines.append(
          f"| {name} | {sampler} | {len(r)} | {sum(row['gate'] for row in r)}/{len(r)} | "
          f"{max(row['max_rank_rhat'] for row in r):.3f} | {_mean(r, 'min_bulk_ess'):.0f} | "
          f"{sum(divergences) if divergences else '—'} | {_mean(r, 'warmup_grads'):.3g} | "
          f"{f'{np.mean(seconds):.0f}' if seconds else '—'} | "
          f"{_mean(r, 'total_grads_per_chain'):.3g} | "
          f"{value:.3g} | {f'{value / best:.2f}' if best else '—'} | "
          f"{f'{value / nuts:.2f}' if nuts else '—'} | "
          f"{_worst(row['mean_error'] for row in r)} |")
  return lines


def default_samplers(suite: str) -> tuple[str, ...]:
  """The samplers ``suite`` runs without ``--samplers``: every anchor of
  ``SAMPLERS_TUNINGFORK`` on posteriordb's and tuningfork's halves, fewer on the others."""
  if suite == "scale":
    return SAMPLERS_SCALE
  if suite == "multiscale":
    return SAMPLERS_MULTISCALE
  if suite.startswith("tuningfork") or suite in ("tuning", "held_out"):
    return SAMPLERS_TUNINGFORK
  return SAMPLERS


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--suite", choices=SUITES, default="tuning")
  parser.add_argument("--names", nargs="*", help="a subset of the suite's targets")
  parser.add_argument("--seeds", type=int, default=3, help="how many seeds")
  parser.add_argument("--first-seed", type=int, default=0)
  parser.add_argument("--num-steps", type=int, default=1000, help="adapt's transitions")
  parser.add_argument("--nuts-warmup", type=int, default=1000)
  parser.add_argument("--chees-warmup", type=int, default=500)
  parser.add_argument("--samples", type=int, default=1000)
  parser.add_argument("--samplers", nargs="+", choices=("l2hmc",) + sampler_baselines.ANCHORS,
                      help="default: every anchor on posteriordb's and tuningfork's halves "
                      "(default_samplers)")
  parser.add_argument("--without-nuts", action="store_true",
                      help="with --samplers l2hmc: no NUTS run for L2HMC's check at NUTS's "
                      "gradient budget (its rows then have none; the anchors' rows of other "
                      "seeds stay)")
  parser.add_argument("--quick", action="store_true")
  parser.add_argument("--out", type=pathlib.Path, default=OUT)
  parser.add_argument("--reuse-baselines", action="store_true",
                      help="take the NUTS and ChEES rows of the results file already in --out "
                      "(same settings, seeds and starts) and rerun only L2HMC's")
  parser.add_argument("--merge", nargs="*", type=pathlib.Path, default=(),
                      help="results files of other processes (same settings, other seeds or "
                      "targets) whose rows join this file's before the run (--seeds 0: only "
                      "merge)")
  args = parser.parse_args(argv)
  if args.quick:
    args.seeds, args.num_steps, args.nuts_warmup, args.chees_warmup, args.samples = (
        1, 100, 50, 50, 20)
  samplers = tuple(args.samplers or default_samplers(args.suite))
  if "l2hmc" in samplers and "nuts" not in samplers and not args.without_nuts:
    samplers += ("nuts",)  # L2HMC's check at NUTS's gradient budget
  chosen = [p for p in problems(args.suite, args.names) if not args.names or p.name in args.names]
  if args.quick:
    chosen = chosen[:1]
  commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True, cwd=HERE, check=False).stdout.strip() or "unknown"
  settings = dict(chains=CHAINS, num_steps=args.num_steps, nuts_warmup=args.nuts_warmup,
                  chees_warmup=args.chees_warmup, samples=args.samples)
  args.out.mkdir(parents=True, exist_ok=True)
  stem = f"l2hmc_default_{args.suite}"
  path = args.out / f"{stem}.json"
  results = {}  # a rerun with the same settings keeps the other targets' and seeds' rows
  if path.exists():
    stored = json.loads(path.read_text())
    if {k: v for k, v in stored.get("settings", {}).items() if k != "seeds"} == settings:
      results = with_row_commits(stored["results"], stored.get("commit"))
  for other in args.merge:
    stored = json.loads(other.read_text())
    if {k: v for k, v in stored["settings"].items() if k != "seeds"} != settings:
      raise ValueError(f"{other} was run with {stored['settings']}, not {settings}")
    for name, rows in with_row_commits(stored["results"], stored.get("commit")).items():
      results[name] = merge_rows(results.get(name, {}), rows)
  previous = {name: {k: [dict(row, seed=_seed_of(r, i)) for i, row in enumerate(r)]
                     for k, r in rows.items()} for name, rows in results.items()}
  seeds = range(args.first_seed, args.first_seed + args.seeds)
  for seed, problem in tqdm([(s, p) for s in seeds for p in chosen],
                            desc=f"l2hmc_default {args.suite}"):
    reused = previous.get(problem.name) if args.reuse_baselines else None
    rows = run_target(problem, [seed], args.num_steps, args.nuts_warmup,
                      args.chees_warmup, args.samples, baselines=reused, samplers=samplers)
    for sampler_rows in rows.values():
      for row in sampler_rows:
        row.setdefault("commit", commit)
    results[problem.name] = merge_rows(results.get(problem.name, {}), rows)
    _write(args.out, stem, results, args.suite, commit, settings, args.quick)
  if args.merge:
    _write(args.out, stem, results, args.suite, commit, settings, args.quick)
  print((args.out / f"{stem}.md").read_text())


def _write(out: pathlib.Path, stem: str, results: dict, suite: str, commit: str,
           settings: dict, quick: bool):
  """The results file and its report, ``seeds`` the most seeds of any row."""
  results = ordered(results, suite)
  counts = {len(r) for rows in results.values() for r in rows.values()}
  file_settings = dict(settings, seeds=max(counts, default=0))
  (out / f"{stem}.json").write_text(json.dumps(dict(commit=commit, settings=file_settings,
                                                    quick=quick, results=results), indent=1))
  (out / f"{stem}.md").write_text(
      "\n".join(report(results, suite, commit, file_settings)) + "\n")


if __name__ == "__main__":
  main()
