r"""Posteriors of posteriordb as plain JAX log densities, with their gold-standard moments.

posteriordb (Magnusson et al. 2024, `arXiv:2407.04967 <https://arxiv.org/abs/2407.04967>`_;
github.com/stan-dev/posteriordb, BSD-3: ``posteriordb/LICENSE``) pairs Stan models with
data and, for many, reference draws: 10 chains of 1,000 thinned Stan draws that passed its
checks (R-hat, ESS, E-BFMI). This module writes each model's density anew from its
mathematics (``posterior_database/models/stan/MODEL.stan``); the data and the reference
moments travel in ``posteriordb/data/NAME.json`` and ``posteriordb/reference/NAME.json``.

The density lives where Stan samples: on the unconstrained scale, a flat float32 vector
:math:`u`, with every constrained block :math:`x = T(u)` and its log-Jacobian,

.. math::
   \log p(u) = \log \pi(T(u)) + \log\lvert\det J_T(u)\rvert,

where :math:`\pi` is the model's joint density of parameters and data up to a constant
(Stan's improper flat priors where a parameter has no statement). The blocks are laid out
in the order of the model's ``parameters`` block, and the transforms are Stan's:

* ``real<lower=0>``: :math:`x = e^u`, log-Jacobian :math:`u`;
* ``real<lower=a, upper=b>``: :math:`x = a + (b - a)\,\sigma(u)`, log-Jacobian
  :math:`\log(b - a) + \log\sigma(u) + \log\sigma(-u)` (``b`` may be another
  parameter's function, as ``beta1 < 1 - alpha1`` in garch11);
* ``ordered[K]``: :math:`x_1 = u_1`, :math:`x_k = x_{k-1} + e^{u_k}`, log-Jacobian
  :math:`\sum_{k \ge 2} u_k`; ``positive_ordered[K]``: :math:`x_k = \sum_{j \le k} e^{u_j}`,
  log-Jacobian :math:`\sum_k u_k`;
* ``simplex[K]`` (stick-breaking, ``K - 1`` free): :math:`z_k = \sigma(u_k - \log(K - k))`,
  :math:`x_k = (1 - \sum_{j<k} x_j)\, z_k`, :math:`x_K = 1 - \sum_{j<K} x_j`, log-Jacobian
  :math:`\sum_k \log z_k + \log(1 - z_k) + \log(1 - \sum_{j<k} x_j)`.

Every Gaussian linear regression (``y ~ normal(X b, sigma)``) evaluates its likelihood
through the identity

.. math::
   \lVert y - X b \rVert^2 = \lVert y - X \hat b \rVert^2 + \lVert R (b - \hat b) \rVert^2,
   \qquad X = Q R,\ \hat b = R^{-1} Q^\top y,

with :math:`R`, :math:`\hat b` and the least-squares residual computed once in float64:
exact, a gradient in :math:`O(K^2)` instead of :math:`O(NK)` (diamonds has
N = 5,000), and free of float32 cancellation.

``load(name)`` returns a :class:`Posterior`. ``constrain(u)`` maps back to the names of
posteriordb's reference draws (Stan's: ``"beta[1]"``, ``"sigma"``, transformed parameters
such as eight schools' ``"theta[1]"`` included), whose means and sds (over all 10 chains)
are ``reference_mean`` and ``reference_sd``.

One deviation, forced by float32: the Gaussian-process covariances of gp_pois_regr add
:math:`10^{-6}\alpha^2` to their diagonal (Stan adds :math:`10^{-10}` in float64, where
the Cholesky factor exists; in float32 it does not near the posterior's length scales).
It adds independent noise of sd :math:`10^{-3}\alpha` to the latent function, beside a
posterior sd of it many times larger.
"""

from __future__ import annotations

import functools
import json
import math
import pathlib
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy import stats

__all__ = ("NAMES_TUNING", "NAMES_HELD_OUT", "NAMES", "Posterior", "load")

DIRECTORY = pathlib.Path(__file__).resolve().parent / "posteriordb"

#: Posteriors a sampler's defaults may be tuned on.
NAMES_TUNING = (
    "kidiq-kidscore_momhsiq",
    "earnings-logearn_interaction",
    "mesquite-logmesquite_logvas",
    "arK-arK",
    "eight_schools-eight_schools_noncentered",
    "gp_pois_regr-gp_pois_regr",
    "low_dim_gauss_mix-low_dim_gauss_mix",
)
#: Posteriors kept out of any tuning. ``gp_pois_regr-gp_regr`` stands in for
#: ``mcycle_gp-accel_gp``, whose reference draws are absent from the posteriordb snapshot
#: this suite was built from.
NAMES_HELD_OUT = (
    "nes2000-nes",
    "diamonds-diamonds",
    "sblrc-blr",
    "kilpisjarvi_mod-kilpisjarvi",
    "arma-arma11",
    "garch-garch11",
    "gp_pois_regr-gp_regr",
    "hmm_example-hmm_example",
)
NAMES = NAMES_TUNING + NAMES_HELD_OUT

#: Relative jitter of the float32 Gaussian-process covariances (see the module docstring).
GP_JITTER = 1e-6


class Posterior(NamedTuple):
  """One posteriordb posterior on Stan's unconstrained scale, with its reference moments."""
  name: str
  dim: int
  split: str  # "tuning" or "held_out"
  logdensity_fn: Callable  # (dim,) float32 -> scalar, jit/vmap/grad-able
  constrain: Callable  # (dim,) -> {Stan name: constrained scalar}
  parameter_names: tuple  # the reference's names, in its order
  reference_mean: dict
  reference_sd: dict
  initial_positions: Callable  # (key, num_chains) -> (num_chains, dim): Stan's uniform(-2, 2)


# --------------------------------------------------------------------------- transforms
# A transform maps a block of the unconstrained vector (and the blocks constrained
# before it) to its constrained value and log-Jacobian.


def _real(u, _):
  return u, 0.0


def _positive(u, _):
  return jnp.exp(u), jnp.sum(u)


def _logit_jacobian(u):
  return jax.nn.log_sigmoid(u) + jax.nn.log_sigmoid(-u)


def _interval(lower, upper):
  """``real<lower, upper>``; ``upper`` is a number or a function of the earlier blocks."""

  def transform(u, earlier):
    top = upper(earlier) if callable(upper) else upper
    width = top - lower
    return lower + width * jax.nn.sigmoid(u), jnp.sum(jnp.log(width) + _logit_jacobian(u))

  return transform


def _ordered(u, _):
  steps = jnp.concatenate([u[:1], jnp.exp(u[1:])])
  return jnp.cumsum(steps), jnp.sum(u[1:])


def _positive_ordered(u, _):
  return jnp.cumsum(jnp.exp(u)), jnp.sum(u)


def _simplex(u, _):
  free = u.shape[0]
  shifted = u - jnp.log(free - jnp.arange(free))  # u_k - log(K - k), k = 1 .. K - 1
  z = jax.nn.sigmoid(shifted)

  def stick(left, z_k):
    return left * (1 - z_k), (left * z_k, left)

  remaining, (broken, lefts) = jax.lax.scan(stick, jnp.ones((), u.dtype), z)
  log_jacobian = jnp.sum(jnp.log(lefts) + _logit_jacobian(shifted))
  return jnp.concatenate([broken, remaining[None]]), log_jacobian


class _Block(NamedTuple):
  """One entry of the Stan ``parameters`` block."""
  name: str
  shape: tuple  # constrained shape; () for a scalar
  free: int  # unconstrained size
  transform: Callable


def _block(name, size=None, transform=_real):
  """A scalar (``size`` None) or vector block; a simplex has one free coordinate fewer."""
  shape = () if size is None else (size,)
  free = 1 if size is None else size - (transform is _simplex)
  return _Block(name, shape, free, transform)


def _constrain_blocks(blocks, u):
  """The constrained blocks ``{name: value}`` and the total log-Jacobian."""
  values, log_jacobian, start = {}, 0.0, 0
  for block in blocks:
    x, log_det = block.transform(u[start: start + block.free], values)
    values[block.name] = x.reshape(block.shape)
    log_jacobian = log_jacobian + log_det
    start += block.free
  return values, log_jacobian


def _stan_names(values: dict) -> dict:
  """``{"beta": [b1, b2]}`` -> ``{"beta[1]": b1, "beta[2]": b2}`` (Stan's 1-based names)."""
  named = {}
  for name, value in values.items():
    value = jnp.asarray(value)
    if value.ndim == 0:
      named[name] = value
    else:
      for index in np.ndindex(value.shape):
        named[f"{name}[{','.join(str(i + 1) for i in index)}]"] = value[index]
  return named


# --------------------------------------------------------------------------- densities


def _half(logpdf, *args):
  """A density truncated to x > 0 by a ``<lower=0>`` constraint: the same up to a constant."""
  return lambda x: jnp.sum(logpdf(x, *args))


def _normal(x, loc, scale):
  return jnp.sum(stats.norm.logpdf(x, loc, scale))


def _cauchy(x, loc, scale):
  return jnp.sum(stats.cauchy.logpdf(x, loc, scale))


def _student_t(x, df, loc, scale):
  return jnp.sum(stats.t.logpdf(x, df, loc, scale))


def _gamma(x, shape, rate):
  return jnp.sum(stats.gamma.logpdf(x, shape, scale=1.0 / rate))


def _beta(x, a, b):
  return jnp.sum(stats.beta.logpdf(x, a, b))


def _gaussian_linear(design, y):
  """``sum(normal_lpdf(y | design @ coef, sigma))`` as a function of ``(coef, sigma)``,
  through the least-squares identity of the module docstring (set up in float64)."""
  design, y = np.asarray(design, np.float64), np.asarray(y, np.float64)
  q, r = np.linalg.qr(design)
  fit = np.linalg.solve(r, q.T @ y)
  residual = float(np.sum((y - design @ fit) ** 2))
  count = y.shape[0]
  r, fit = jnp.asarray(r, jnp.float32), jnp.asarray(fit, jnp.float32)

  def loglik(coef, sigma):
    squares = residual + jnp.sum((r @ (coef - fit)) ** 2)
    return -count * jnp.log(sigma) - 0.5 * squares / sigma**2 - 0.5 * count * math.log(2 * math.pi)

  return loglik


def _squared_exponential(x, alpha, rho):
  """Stan's ``gp_exp_quad_cov(x, alpha, rho)``."""
  return alpha**2 * jnp.exp(-0.5 * (x[:, None] - x[None, :]) ** 2 / rho**2)


class _Model(NamedTuple):
  blocks: tuple  # of _Block, in the order of the ``parameters`` block
  log_joint: Callable  # constrained blocks -> log density of parameters and data
  reported: Callable  # constrained blocks -> {name: value} as the reference names them


def _identity(values):
  return values


def _regression(design, y, sigma_prior=None, coef_prior=None, coef_name="beta"):
  """``coef ~ coef_prior; sigma ~ sigma_prior; y ~ normal(design @ coef, sigma)``
  (flat where a prior is None)."""
  loglik = _gaussian_linear(design, y)

  def log_joint(v):
    total = loglik(v[coef_name], v["sigma"])
    if coef_prior is not None:
      total += coef_prior(v[coef_name])
    if sigma_prior is not None:
      total += sigma_prior(v["sigma"])
    return total

  blocks = (_block(coef_name, design.shape[1]), _block("sigma", transform=_positive))
  return _Model(blocks, log_joint, _identity)


def _kidscore_momhsiq(d):
  design = np.stack([np.ones(d["N"]), d["mom_hs"], d["mom_iq"]], axis=1)
  return _regression(design, d["kid_score"], sigma_prior=_half(_cauchy, 0.0, 2.5))


def _logearn_interaction(d):
  height, male = np.asarray(d["height"]), np.asarray(d["male"])
  design = np.stack([np.ones(d["N"]), height, male, height * male], axis=1)
  return _regression(design, np.log(d["earn"]))


def _logmesquite_logvas(d):
  diam1, diam2 = np.asarray(d["diam1"]), np.asarray(d["diam2"])
  design = np.stack([
      np.ones(d["N"]), np.log(diam1 * diam2 * np.asarray(d["canopy_height"])),
      np.log(diam1 * diam2), np.log(diam1 / diam2), np.log(d["total_height"]),
      np.log(d["density"]), np.asarray(d["group"])], axis=1)
  return _regression(design, np.log(d["weight"]))


def _nes(d):
  age = np.asarray(d["age_discrete"])
  design = np.stack([
      np.ones(d["N"]), d["real_ideo"], d["race_adj"], age == 2, age == 3, age == 4,
      d["educ1"], d["gender"], d["income"]], axis=1).astype(np.float64)
  return _regression(design, d["partyid7"])


def _blr(d):
  return _regression(np.asarray(d["X"]), d["y"], sigma_prior=_half(_normal, 0.0, 10.0),
                     coef_prior=functools.partial(_normal, loc=0.0, scale=10.0))


def _arK(d):
  """``y[t] ~ normal(alpha + sum_k beta[k] y[t-k], sigma)`` for t > K: a regression on lags."""
  order, y = d["K"], np.asarray(d["y"], np.float64)
  count = d["T"]
  lags = np.stack([y[order - k: count - k] for k in range(1, order + 1)], axis=1)
  loglik = _gaussian_linear(np.concatenate([np.ones((count - order, 1)), lags], axis=1),
                            y[order:])

  def log_joint(v):
    return (loglik(jnp.concatenate([v["alpha"][None], v["beta"]]), v["sigma"])
            + _normal(v["alpha"], 0.0, 10.0) + _normal(v["beta"], 0.0, 10.0)
            + _cauchy(v["sigma"], 0.0, 2.5))

  blocks = (_block("alpha"), _block("beta", order), _block("sigma", transform=_positive))
  return _Model(blocks, log_joint, _identity)


def _diamonds(d):
  """brms: centred predictors, ``b ~ normal(0, 1)``, ``Intercept ~ student_t(3, 8, 10)``,
  ``sigma ~ student_t(3, 0, 10)`` (half), ``Y ~ normal(Intercept + Xc b, sigma)``."""
  x = np.asarray(d["X"], np.float64)[:, 1:]
  centred = x - x.mean(axis=0)
  loglik = _gaussian_linear(np.concatenate([np.ones((d["N"], 1)), centred], axis=1), d["Y"])

  def log_joint(v):
    total = _normal(v["b"], 0.0, 1.0) + _student_t(v["Intercept"], 3.0, 8.0, 10.0)
    total += _student_t(v["sigma"], 3.0, 0.0, 10.0)
    if not d["prior_only"]:
      total += loglik(jnp.concatenate([v["Intercept"][None], v["b"]]), v["sigma"])
    return total

  blocks = (_block("b", d["K"] - 1), _block("Intercept"), _block("sigma", transform=_positive))
  return _Model(blocks, log_joint, _identity)


def _kilpisjarvi(d):
  loglik = _gaussian_linear(np.stack([np.ones(d["N"]), d["x"]], axis=1), d["y"])

  def log_joint(v):
    return (loglik(jnp.stack([v["alpha"], v["beta"]]), v["sigma"])
            + _normal(v["alpha"], d["pmualpha"], d["psalpha"])
            + _normal(v["beta"], d["pmubeta"], d["psbeta"]))

  blocks = (_block("alpha"), _block("beta"), _block("sigma", transform=_positive))
  return _Model(blocks, log_joint, _identity)


def _eight_schools_noncentered(d):
  y, sigma = jnp.asarray(d["y"], jnp.float32), jnp.asarray(d["sigma"], jnp.float32)

  def reported(v):
    return dict(theta=v["theta_trans"] * v["tau"] + v["mu"], mu=v["mu"], tau=v["tau"])

  def log_joint(v):
    return (_normal(v["theta_trans"], 0.0, 1.0) + _normal(y, reported(v)["theta"], sigma)
            + _normal(v["mu"], 0.0, 5.0) + _cauchy(v["tau"], 0.0, 5.0))

  blocks = (_block("theta_trans", d["J"]), _block("mu"), _block("tau", transform=_positive))
  return _Model(blocks, log_joint, reported)


def _gp_pois_regr(d):
  x, k = jnp.asarray(d["x"], jnp.float32), jnp.asarray(d["k"], jnp.float32)
  size = d["N"]

  def reported(v):
    cov = _squared_exponential(x, v["alpha"], v["rho"])
    cov += (1e-10 + GP_JITTER * v["alpha"] ** 2) * jnp.eye(size)
    return dict(rho=v["rho"], alpha=v["alpha"], f=jnp.linalg.cholesky(cov) @ v["f_tilde"])

  def log_joint(v):
    f = reported(v)["f"]
    return (_gamma(v["rho"], 25.0, 4.0) + _normal(v["alpha"], 0.0, 2.0)
            + _normal(v["f_tilde"], 0.0, 1.0)
            + jnp.sum(k * f - jnp.exp(f) - jax.scipy.special.gammaln(k + 1)))  # poisson_log

  blocks = (_block("rho", transform=_positive), _block("alpha", transform=_positive),
            _block("f_tilde", size))
  return _Model(blocks, log_joint, reported)


def _gp_regr(d):
  """``y ~ multi_normal(0, gp_exp_quad_cov(x, alpha, rho) + sigma I)`` (sigma, as written)."""
  x, y = jnp.asarray(d["x"], jnp.float32), jnp.asarray(d["y"], jnp.float32)
  size = d["N"]

  def log_joint(v):
    cov = _squared_exponential(x, v["alpha"], v["rho"]) + v["sigma"] * jnp.eye(size)
    cholesky = jnp.linalg.cholesky(cov)
    whitened = jax.scipy.linalg.solve_triangular(cholesky, y, lower=True)
    loglik = (-jnp.sum(jnp.log(jnp.diag(cholesky))) - 0.5 * jnp.sum(whitened**2)
              - 0.5 * size * math.log(2 * math.pi))
    return (loglik + _gamma(v["rho"], 25.0, 4.0) + _normal(v["alpha"], 0.0, 2.0)
            + _normal(v["sigma"], 0.0, 1.0))

  blocks = tuple(_block(name, transform=_positive) for name in ("rho", "alpha", "sigma"))
  return _Model(blocks, log_joint, _identity)


def _low_dim_gauss_mix(d):
  y = jnp.asarray(d["y"], jnp.float32)

  def log_joint(v):
    mu, sigma, theta = v["mu"], v["sigma"], v["theta"]
    mixture = jnp.logaddexp(jnp.log(theta) + stats.norm.logpdf(y, mu[0], sigma[0]),
                            jnp.log1p(-theta) + stats.norm.logpdf(y, mu[1], sigma[1]))
    return (_normal(sigma, 0.0, 2.0) + _normal(mu, 0.0, 2.0) + _beta(theta, 5.0, 5.0)
            + jnp.sum(mixture))

  blocks = (_block("mu", 2, _ordered), _block("sigma", 2, _positive),
            _block("theta", transform=_interval(0.0, 1.0)))
  return _Model(blocks, log_joint, _identity)


def _arma11(d):
  y = jnp.asarray(d["y"], jnp.float32)

  def log_joint(v):
    mu, phi, theta = v["mu"], v["phi"], v["theta"]
    first = y[0] - (mu + phi * mu)  # err[0] taken as 0

    def step(err, pair):
      previous, current = pair
      err = current - (mu + phi * previous + theta * err)
      return err, err

    _, rest = jax.lax.scan(step, first, (y[:-1], y[1:]))
    errors = jnp.concatenate([first[None], rest])
    return (_normal(errors, 0.0, v["sigma"]) + _normal(mu, 0.0, 10.0) + _normal(phi, 0.0, 2.0)
            + _normal(theta, 0.0, 2.0) + _cauchy(v["sigma"], 0.0, 2.5))

  blocks = (_block("mu"), _block("phi"), _block("theta"), _block("sigma", transform=_positive))
  return _Model(blocks, log_joint, _identity)


def _garch11(d):
  y = jnp.asarray(d["y"], jnp.float32)

  def log_joint(v):
    mu, alpha0, alpha1, beta1 = v["mu"], v["alpha0"], v["alpha1"], v["beta1"]

    def step(variance, previous):
      variance = alpha0 + alpha1 * (previous - mu) ** 2 + beta1 * variance
      return variance, variance

    first = jnp.asarray(d["sigma1"], jnp.float32) ** 2
    _, rest = jax.lax.scan(step, first, y[:-1])
    sigma = jnp.sqrt(jnp.concatenate([first[None], rest]))
    return _normal(y, mu, sigma)

  blocks = (_block("mu"), _block("alpha0", transform=_positive),
            _block("alpha1", transform=_interval(0.0, 1.0)),
            _block("beta1", transform=_interval(0.0, lambda v: 1.0 - v["alpha1"])))
  return _Model(blocks, log_joint, _identity)


def _hmm_example(d):
  """Two-state Gaussian HMM, the forward algorithm in log space; ``theta[j, k]`` is the
  probability of moving from state j to state k."""
  y = jnp.asarray(d["y"], jnp.float32)
  states = d["K"]

  def log_joint(v):
    mu = v["mu"]
    log_transition = jnp.log(jnp.stack([v["theta1"], v["theta2"]]))  # (j, k)
    emission = stats.norm.logpdf(y[:, None], mu[None, :], 1.0)  # (N, K)

    def forward(gamma, emission_t):
      gamma = jax.nn.logsumexp(gamma[:, None] + log_transition, axis=0) + emission_t
      return gamma, None

    gamma, _ = jax.lax.scan(forward, emission[0], emission[1:])
    return (stats.norm.logpdf(mu[0], 3.0, 1.0) + stats.norm.logpdf(mu[1], 10.0, 1.0)
            + jax.nn.logsumexp(gamma))

  blocks = (_block("theta1", states, _simplex), _block("theta2", states, _simplex),
            _block("mu", states, _positive_ordered))
  return _Model(blocks, log_joint, _identity)


_MODELS = {
    "kidiq-kidscore_momhsiq": _kidscore_momhsiq,
    "earnings-logearn_interaction": _logearn_interaction,
    "mesquite-logmesquite_logvas": _logmesquite_logvas,
    "arK-arK": _arK,
    "eight_schools-eight_schools_noncentered": _eight_schools_noncentered,
    "gp_pois_regr-gp_pois_regr": _gp_pois_regr,
    "low_dim_gauss_mix-low_dim_gauss_mix": _low_dim_gauss_mix,
    "nes2000-nes": _nes,
    "diamonds-diamonds": _diamonds,
    "sblrc-blr": _blr,
    "kilpisjarvi_mod-kilpisjarvi": _kilpisjarvi,
    "arma-arma11": _arma11,
    "garch-garch11": _garch11,
    "gp_pois_regr-gp_regr": _gp_regr,
    "hmm_example-hmm_example": _hmm_example,
}


#: Stan's tries at a finite initial point per chain.
INIT_TRIES = 100


def stan_initial_positions(key, num_chains, dim, value_and_grad):
  """Stan's default initialisation: uniform(-2, 2) on the unconstrained scale, each chain's
  draw repeated until its log density and gradient are finite (at most ``INIT_TRIES``)."""
  positions = np.zeros((num_chains, dim), np.float32)
  pending = np.ones(num_chains, bool)
  for key in jax.random.split(key, INIT_TRIES):
    draws = np.asarray(jax.random.uniform(key, (num_chains, dim), jnp.float32, -2.0, 2.0))
    value, grad = value_and_grad(draws)
    finite = np.isfinite(np.asarray(value)) & np.isfinite(np.asarray(grad)).all(axis=1)
    take = pending & finite
    positions[take] = draws[take]
    pending &= ~take
    if not pending.any():
      return jnp.asarray(positions)
  raise RuntimeError(f"no finite initial point in {INIT_TRIES} tries for {pending.sum()} chains")


def read_data(name: str) -> dict:
  """The posterior's data (the fields its model uses), as posteriordb gives them."""
  return json.loads((DIRECTORY / "data" / f"{name}.json").read_text())


def read_reference(name: str) -> dict:
  """The reference file: moments of every constrained parameter and how the draws were made."""
  return json.loads((DIRECTORY / "reference" / f"{name}.json").read_text())


def load(name: str) -> Posterior:
  """The posterior ``name`` (one of ``NAMES``) as a :class:`Posterior`.

  Args:
    name: posteriordb's posterior name, ``"DATA-MODEL"``.

  Returns:
    A :class:`Posterior` whose ``logdensity_fn`` takes a flat float32 vector on Stan's
    unconstrained scale.

  Raises:
    ValueError: for a name outside the suite.
  """
  if name not in _MODELS:
    raise ValueError(f"unknown posterior {name!r}; the suite is {', '.join(NAMES)}")
  model = _MODELS[name](read_data(name))
  reference = read_reference(name)["parameters"]
  names = tuple(reference)
  dim = sum(block.free for block in model.blocks)

  def logdensity_fn(position):
    values, log_jacobian = _constrain_blocks(model.blocks, position)
    return model.log_joint(values) + log_jacobian

  def constrain(position):
    return _stan_names(model.reported(_constrain_blocks(model.blocks, position)[0]))

  value_and_grad = jax.jit(jax.vmap(jax.value_and_grad(logdensity_fn)))

  def initial_positions(key, num_chains):
    return stan_initial_positions(key, num_chains, dim, value_and_grad)

  return Posterior(
      name=name, dim=dim, split="tuning" if name in NAMES_TUNING else "held_out",
      logdensity_fn=logdensity_fn, constrain=constrain, parameter_names=names,
      reference_mean={p: reference[p]["mean"] for p in names},
      reference_sd={p: reference[p]["sd"] for p in names},
      initial_positions=initial_positions)
