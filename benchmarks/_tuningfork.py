r"""tuningfork's 14 model classes as flat JAX log densities, with their reference moments.

tuningfork (github.com/blackjax-devs/tuningfork, Apache-2.0) is blackjax's benchmark of
samplers: 14 model classes, from a 10-d Gaussian to a 503-d stochastic volatility. This
module writes each class anew from its mathematics (the priors, likelihoods and sizes of
tuningfork's models); no code is taken from there. Where tuningfork reads a data file that
no installed package ships (radon_all, German credit, the IRT responses, the volatility
returns, the Lotka–Volterra and GP observations), the data are synthetic, drawn once with a
fixed seed from the same generative story and of the same shape.

Every density lives on the unconstrained scale, a flat float32 vector :math:`u`: a positive
parameter is :math:`e^{u}` with log-Jacobian :math:`u`; an interval :math:`(a, b)` is
:math:`a + (b - a)\sigma(u)` with log-Jacobian :math:`\log\sigma(u) + \log\sigma(-u)` (a
constant dropped), as numpyro's ``biject_to`` and Stan do. Densities are up to a constant.

The reference moments are those of the coordinates of :math:`u` themselves (``x[i]``):

* exact where a closed form exists (the two Gaussians, the funnel, the banana, the
  mixture);
* elsewhere, the means and sds of long NUTS runs, written by
  ``python benchmarks/posteriordb_check.py --suite tuningfork --out benchmarks/results``
  into ``results/tuningfork_reference.json`` and checked there (split R-hat, ESS, MCSE).

Deviations from tuningfork, each for the 2-core machine this suite runs on:

* radon evaluates its Gaussian likelihood through per-county sufficient statistics
  (exact; :math:`O(J)` instead of :math:`O(N)`);
* the stochastic volatility's AR(1) recursion is a ``lax.associative_scan`` (the same
  values as the sequential recursion, in :math:`O(\log T)` depth);
* Lotka–Volterra integrates with a fixed-step RK4 (8 steps between observations) and a
  plain Gaussian likelihood, not tuningfork's probabilistic solver;
* the GP regression is a Hilbert-space approximate GP (Solin and Särkkä 2020; Riutort-Mayol
  et al. 2023): :math:`f = \Phi\,(\sqrt{S_\theta(\sqrt{\lambda_j})} \odot z)` with 200
  Laplacian eigenfunctions on :math:`[-L, L]`, :math:`L = 1.5`, of the centred inputs, in
  place of the Cholesky factor of the 200 x 200 kernel (one float32 Cholesky per gradient
  costs ~10 ms per chain here). Same dimension (203), same priors, same non-centred role
  of :math:`z`.

``load(name)`` returns a :class:`Model`; ``NAMES_TUNING`` and ``NAMES_HELD_OUT`` split the
14 classes (fixed before any run: the held-out half is run once, at the end).
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

import _posteriordb  # pylint: disable=g-bad-import-order

__all__ = ("NAMES_TUNING", "NAMES_HELD_OUT", "NAMES", "EXACT", "Model", "load", "REFERENCE")

#: Classes a sampler's defaults may be tuned on (one of each kind where there are two).
NAMES_TUNING = ("mvn_10", "eight_schools_ncp", "neals_funnel", "gmm_25", "german_credit",
                "irt_2pl", "stochastic_volatility")
#: Classes kept out of any tuning, run once at the end.
NAMES_HELD_OUT = ("gaussian_50", "banana", "radon", "logistic", "horseshoe",
                  "gp_regression", "lotka_volterra")
NAMES = NAMES_TUNING + NAMES_HELD_OUT
#: Classes whose reference moments are exact.
EXACT = ("mvn_10", "gaussian_50", "neals_funnel", "banana", "gmm_25")

#: The committed reference moments of the other classes (written by posteriordb_check.py).
REFERENCE = pathlib.Path(__file__).resolve().parent / "results" / "tuningfork_reference.json"


class Model(NamedTuple):
  """One tuningfork class on the unconstrained scale, with its reference moments."""
  name: str
  dim: int
  split: str  # "tuning" or "held_out"
  logdensity_fn: Callable  # (dim,) float32 -> scalar; jit/vmap/grad-able
  coordinate_names: tuple  # what each coordinate of u is, e.g. "log_tau", "theta_raw[3]"
  reference_mean: np.ndarray | None  # (dim,); None until the reference run exists
  reference_sd: np.ndarray | None
  exact: bool  # the reference moments are exact (else a long NUTS run's)
  initial_positions: Callable  # (key, num_chains) -> (num_chains, dim): uniform(-2, 2)


# --------------------------------------------------------------------------- helpers


def _normal(x, loc, scale):
  """Gaussian log density, summed, up to the constant."""
  return jnp.sum(-0.5 * jnp.square((x - loc) / scale) - jnp.log(scale))


def _names(*blocks) -> tuple:
  """Coordinate names of blocks ``(name, size or None)``."""
  out = []
  for name, size in blocks:
    out += [name] if size is None else [f"{name}[{i}]" for i in range(size)]
  return tuple(out)


def _log_positive(u, log_pdf_of_value):
  """The log density of ``exp(u)`` under ``log_pdf_of_value`` plus the log-Jacobian u."""
  return log_pdf_of_value(jnp.exp(u)) + u


def _half_normal(x, scale):
  return -0.5 * jnp.square(x / scale)


def _half_cauchy(x, scale):
  return -jnp.log1p(jnp.square(x / scale))


# --------------------------------------------------------------------------- Gaussians


def _mvn_10():
  dim = 10
  return (lambda u: -0.5 * jnp.sum(u * u), _names(("x", dim)), np.zeros(dim), np.ones(dim))


def gaussian_50_covariance() -> np.ndarray:
  """U diag(logspace(0, 3, 50)) U^T, U the Q of a seeded Gaussian matrix: condition 1000."""
  q, _ = np.linalg.qr(np.random.default_rng(42).standard_normal((50, 50)))
  covariance = q @ np.diag(np.logspace(0.0, 3.0, 50)) @ q.T
  return (covariance + covariance.T) / 2


def _gaussian_50():
  covariance = gaussian_50_covariance()
  precision = jnp.asarray(np.linalg.inv(covariance), jnp.float32)
  return (lambda u: -0.5 * u @ precision @ u, _names(("x", 50)), np.zeros(50),
          np.sqrt(np.diag(covariance)))


# --------------------------------------------------------------------------- pathological

FUNNEL_SCALE = 3.0


def _neals_funnel():
  """v ~ N(0, 3^2), theta_i | v ~ N(0, e^v), i = 1..9 (centred: the hard geometry)."""

  def logdensity(u):
    v, theta = u[0], u[1:]
    return _normal(v, 0.0, FUNNEL_SCALE) + _normal(theta, 0.0, jnp.exp(v / 2))

  # E[theta_i^2] = E[e^v] = exp(9 / 2)
  sd = np.r_[FUNNEL_SCALE, np.full(9, math.exp(FUNNEL_SCALE**2 / 4))]
  return logdensity, ("v",) + _names(("theta", 9)), np.zeros(10), sd


BANANA_VARIANCE = 8.0


def _banana():
  """x1 ~ N(0, 8), x2 | x1 ~ N(x1^2 / 4, 1)."""

  def logdensity(u):
    return (_normal(u[0], 0.0, math.sqrt(BANANA_VARIANCE))
            + _normal(u[1], u[0] ** 2 / 4, 1.0))

  # E[x2] = E[x1^2] / 4 = 2; Var[x2] = 1 + Var[x1^2] / 16 = 1 + 2 * 64 / 16 = 9
  return (logdensity, ("x1", "x2"), np.array([0.0, BANANA_VARIANCE / 4]),
          np.array([math.sqrt(BANANA_VARIANCE), math.sqrt(1 + 2 * BANANA_VARIANCE**2 / 16)]))


GMM_SCALE = 0.3
GMM_GRID = (-4.0, -2.0, 0.0, 2.0, 4.0)


def _gmm_25():
  """Equal mixture of N(mu_k, 0.3^2 I), mu_k on the 5 x 5 grid {-4, -2, 0, 2, 4}^2."""
  grid = np.array(GMM_GRID)
  locations = jnp.asarray(np.stack(np.meshgrid(grid, grid, indexing="ij"), -1).reshape(25, 2),
                          jnp.float32)

  def logdensity(u):
    return jax.nn.logsumexp(-0.5 * jnp.sum(jnp.square(u - locations), -1) / GMM_SCALE**2)

  sd = math.sqrt(GMM_SCALE**2 + np.mean(grid**2))
  return logdensity, ("x1", "x2"), np.zeros(2), np.full(2, sd)


# --------------------------------------------------------------------------- hierarchical

SCHOOLS_Y = np.array([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0])
SCHOOLS_SIGMA = np.array([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0])


def _eight_schools_ncp():
  """mu ~ N(0, 5), tau ~ half-Cauchy(5), theta_raw ~ N(0, 1)^8, y ~ N(mu + tau theta_raw,
  sigma). u = (mu, log tau, theta_raw)."""
  y, sigma = jnp.asarray(SCHOOLS_Y, jnp.float32), jnp.asarray(SCHOOLS_SIGMA, jnp.float32)

  def logdensity(u):
    mu, log_tau, raw = u[0], u[1], u[2:]
    return (_normal(mu, 0.0, 5.0) + _log_positive(log_tau, lambda t: _half_cauchy(t, 5.0))
            + _normal(raw, 0.0, 1.0) + _normal(y, mu + jnp.exp(log_tau) * raw, sigma))

  return logdensity, ("mu", "log_tau") + _names(("theta_raw", 8)), None, None


RADON_COUNTIES, RADON_OBSERVATIONS = 386, 12573


def radon_data(seed: int = 20260508) -> dict:
  """Synthetic radon_all: 12,573 houses in 386 counties of very unequal sizes (a log-normal
  share each, every county at least one house), a floor indicator (1 in 6 on the first
  floor), log radon from mu_a = 1.3, sigma_a = 0.35, beta = -0.6, sigma_y = 0.8."""
  rng = np.random.default_rng(seed)
  shares = rng.lognormal(0.0, 1.3, RADON_COUNTIES)
  extra = rng.multinomial(RADON_OBSERVATIONS - RADON_COUNTIES, shares / shares.sum())
  county = np.repeat(np.arange(RADON_COUNTIES), extra + 1)
  floor = (rng.random(RADON_OBSERVATIONS) < 1 / 6).astype(np.float64)
  alpha = 1.3 + 0.35 * rng.standard_normal(RADON_COUNTIES)
  log_radon = alpha[county] - 0.6 * floor + 0.8 * rng.standard_normal(RADON_OBSERVATIONS)
  return dict(county=county, floor=floor, log_radon=log_radon)


def _radon():
  """mu_a ~ N(0, 10), sigma_a ~ half-N(5), alpha_raw ~ N(0, 1)^386, beta ~ N(0, 10),
  sigma_y ~ half-N(5); y_i ~ N(mu_a + sigma_a alpha_raw[c_i] + beta floor_i, sigma_y).
  u = (mu_a, log sigma_a, beta, log sigma_y, alpha_raw)."""
  data = radon_data()
  county, x, y = data["county"], data["floor"], data["log_radon"]
  count = np.bincount(county, minlength=RADON_COUNTIES).astype(np.float64)
  x_bar = np.bincount(county, x, RADON_COUNTIES) / count
  y_bar = np.bincount(county, y, RADON_COUNTIES) / count
  dx, dy = x - x_bar[county], y - y_bar[county]
  # sum_i (y_i - a_c - b x_i)^2 = Syy - 2 b Sxy + b^2 Sxx + sum_c n_c (ybar_c - a_c - b xbar_c)^2
  syy, sxy, sxx = float(dy @ dy), float(dx @ dy), float(dx @ dx)
  count_, x_bar_, y_bar_ = (jnp.asarray(a, jnp.float32) for a in (count, x_bar, y_bar))

  def logdensity(u):
    mu_a, log_sigma_a, beta, log_sigma_y, raw = u[0], u[1], u[2], u[3], u[4:]
    alpha = mu_a + jnp.exp(log_sigma_a) * raw
    squares = (syy - 2 * beta * sxy + beta**2 * sxx
               + jnp.sum(count_ * jnp.square(y_bar_ - alpha - beta * x_bar_)))
    likelihood = -0.5 * squares * jnp.exp(-2 * log_sigma_y) - RADON_OBSERVATIONS * log_sigma_y
    return (_normal(mu_a, 0.0, 10.0) + _log_positive(log_sigma_a, lambda s: _half_normal(s, 5.0))
            + _normal(beta, 0.0, 10.0)
            + _log_positive(log_sigma_y, lambda s: _half_normal(s, 5.0))
            + _normal(raw, 0.0, 1.0) + likelihood)

  names = ("mu_a", "log_sigma_a", "beta", "log_sigma_y") + _names(("alpha_raw", RADON_COUNTIES))
  return logdensity, names, None, None


IRT_STUDENTS, IRT_ITEMS = 100, 20


def irt_data(seed: int = 20260509) -> np.ndarray:
  """Synthetic 0/1 responses (100 students x 20 items): abilities N(0, 1), difficulties
  N(0, 1), log discriminations N(0, 0.3^2)."""
  rng = np.random.default_rng(seed)
  theta = rng.standard_normal(IRT_STUDENTS)
  b = rng.standard_normal(IRT_ITEMS)
  a = np.exp(0.3 * rng.standard_normal(IRT_ITEMS))
  logits = a[None, :] * (theta[:, None] - b[None, :])
  return (rng.random((IRT_STUDENTS, IRT_ITEMS)) < 1 / (1 + np.exp(-logits))).astype(np.float32)


def _irt_2pl():
  """sigma_theta, sigma_b, sigma_a ~ half-Cauchy(2), mu_b ~ N(0, 5), theta = sigma_theta
  theta_raw, b = mu_b + sigma_b b_raw, a = exp(sigma_a log_a_raw), raws N(0, 1);
  y_ji ~ Bernoulli(logit a_i (theta_j - b_i)). u = (log sigma_theta, theta_raw (100),
  log sigma_a, log_a_raw (20), mu_b, log sigma_b, b_raw (20))."""
  y = jnp.asarray(irt_data())
  j, i = IRT_STUDENTS, IRT_ITEMS

  def logdensity(u):
    log_s_theta, theta_raw = u[0], u[1:1 + j]
    log_s_a, log_a_raw = u[1 + j], u[2 + j:2 + j + i]
    mu_b, log_s_b, b_raw = u[2 + j + i], u[3 + j + i], u[4 + j + i:]
    theta = jnp.exp(log_s_theta) * theta_raw
    a = jnp.exp(jnp.exp(log_s_a) * log_a_raw)
    b = mu_b + jnp.exp(log_s_b) * b_raw
    logits = a[None, :] * (theta[:, None] - b[None, :])
    likelihood = jnp.sum(y * logits - jax.nn.softplus(logits))
    prior = sum(_log_positive(s, lambda v: _half_cauchy(v, 2.0))
                for s in (log_s_theta, log_s_a, log_s_b))
    return (prior + _normal(mu_b, 0.0, 5.0) + _normal(theta_raw, 0.0, 1.0)
            + _normal(log_a_raw, 0.0, 1.0) + _normal(b_raw, 0.0, 1.0) + likelihood)

  names = (("log_sigma_theta",) + _names(("theta_raw", j)) + ("log_sigma_a",)
           + _names(("log_a_raw", i)) + ("mu_b", "log_sigma_b") + _names(("b_raw", i)))
  return logdensity, names, None, None


# --------------------------------------------------------------------------- GLMs


def logistic_data(seed: int = 42) -> tuple[np.ndarray, np.ndarray]:
  """50 points of a 2-d bicluster: 25 around (-1.5, -1.5) labelled 0, 25 around (1.5, 1.5)
  labelled 1, each coordinate's sd 1.5 (not separable)."""
  rng = np.random.default_rng(seed)
  x = np.concatenate([rng.normal(-1.5, 1.5, (25, 2)), rng.normal(1.5, 1.5, (25, 2))])
  return x, np.r_[np.zeros(25), np.ones(25)]


GERMAN_NUMERIC, GERMAN_LEVELS = 7, (4, 5, 5, 5, 4)


def german_credit_data(seed: int = 20260510) -> tuple[np.ndarray, np.ndarray]:
  """German credit's shape, synthetic: 1,000 borrowers, 7 numeric attributes (a skewed,
  correlated duration and amount, small counts, an age) and 5 categorical ones of 4, 5, 5,
  5 and 4 levels one-hot coded without their first level (18 columns), every column
  standardised; labels 1 for about 70 % of the borrowers."""
  rng = np.random.default_rng(seed)
  n = 1000
  duration = rng.lognormal(2.9, 0.55, n)
  amount = np.exp(6.5 + 0.8 * np.log(duration) + 0.5 * rng.standard_normal(n))
  numeric = [duration, amount, rng.integers(1, 5, n), rng.integers(1, 5, n),
             19 + rng.gamma(3.0, 5.5, n), rng.integers(1, 4, n), rng.integers(1, 3, n)]
  columns = [np.asarray(c, np.float64) for c in numeric]
  for levels in GERMAN_LEVELS:
    share = rng.dirichlet(np.full(levels, 2.0))
    draw = rng.choice(levels, n, p=share)
    columns += [(draw == level).astype(np.float64) for level in range(1, levels)]
  x = np.stack(columns, 1)
  x = (x - x.mean(0)) / x.std(0)
  beta = 0.5 * rng.standard_normal(x.shape[1])
  logits = x @ beta
  low, high = -5.0, 5.0  # the intercept of a 70/30 balance, by bisection
  for _ in range(50):
    intercept = (low + high) / 2
    low, high = ((intercept, high) if np.mean(1 / (1 + np.exp(-(intercept + logits)))) < 0.7
                 else (low, intercept))
  y = (rng.random(n) < 1 / (1 + np.exp(-(intercept + logits)))).astype(np.float64)
  return x, y


def _logistic_regression(x, y, prior_scale=5.0):
  """beta ~ N(0, 5^2) (intercept first), y ~ Bernoulli(logit beta_0 + x beta_1:)."""
  x, y = jnp.asarray(x, jnp.float32), jnp.asarray(y, jnp.float32)

  def logdensity(u):
    logits = u[0] + x @ u[1:]
    return _normal(u, 0.0, prior_scale) + jnp.sum(y * logits - jax.nn.softplus(logits))

  return logdensity, _names(("beta", x.shape[1] + 1)), None, None


HORSESHOE_N, HORSESHOE_M, HORSESHOE_M0 = 200, 100, 10.0
SLAB_SCALE, SLAB_DF = 3.0, 25.0


def horseshoe_data(seed: int = 42) -> tuple[np.ndarray, np.ndarray]:
  """200 x 100 standard normal design, about 5 % of the coefficients N(10, 1), the rest 0,
  noise sd 1."""
  rng = np.random.default_rng(seed)
  x = rng.standard_normal((HORSESHOE_N, HORSESHOE_M))
  beta = np.where(rng.random(HORSESHOE_M) < 0.05, 10.0 + rng.standard_normal(HORSESHOE_M), 0.0)
  return x, x @ beta + rng.standard_normal(HORSESHOE_N)


def _horseshoe():
  """The regularised ("Finnish") horseshoe of Piironen and Vehtari (2017), non-centred:
  alpha ~ N(0, 2), sigma ~ half-N(2), tau_tilde ~ half-Cauchy(1), c2_tilde ~
  InvGamma(12.5, 12.5), lambda ~ half-Cauchy(1)^100, beta_tilde ~ N(0, 1)^100;
  tau = tau0 sigma tau_tilde with tau0 = m0 / (M - m0) / sqrt(N), c^2 = 9 c2_tilde,
  lambda_tilde = sqrt(c^2 lambda^2 / (c^2 + tau^2 lambda^2)), beta = tau lambda_tilde
  beta_tilde, y ~ N(alpha + X beta, sigma). u = (alpha, log sigma, log tau_tilde,
  log c2_tilde, log lambda (100), beta_tilde (100))."""
  x, y = (jnp.asarray(a, jnp.float32) for a in horseshoe_data())
  m = HORSESHOE_M
  tau0 = HORSESHOE_M0 / (m - HORSESHOE_M0) / math.sqrt(HORSESHOE_N)
  half_df = SLAB_DF / 2

  def inverse_gamma(v):
    return -(half_df + 1) * jnp.log(v) - half_df / v

  def logdensity(u):
    alpha, log_sigma, log_tau_t, log_c2_t = u[0], u[1], u[2], u[3]
    log_lambda, beta_t = u[4:4 + m], u[4 + m:]
    sigma, lam = jnp.exp(log_sigma), jnp.exp(log_lambda)
    tau = tau0 * sigma * jnp.exp(log_tau_t)
    c2 = SLAB_SCALE**2 * jnp.exp(log_c2_t)
    lam_tilde = jnp.sqrt(c2 * lam**2 / (c2 + tau**2 * lam**2))
    beta = tau * lam_tilde * beta_t
    return (_normal(alpha, 0.0, 2.0) + _log_positive(log_sigma, lambda s: _half_normal(s, 2.0))
            + _log_positive(log_tau_t, lambda t: _half_cauchy(t, 1.0))
            + _log_positive(log_c2_t, inverse_gamma)
            + jnp.sum(_log_positive(log_lambda, lambda v: _half_cauchy(v, 1.0)))
            + _normal(beta_t, 0.0, 1.0) + _normal(y, alpha + x @ beta, sigma))

  names = (("alpha", "log_sigma", "log_tau_tilde", "log_c2_tilde")
           + _names(("log_lambda", m), ("beta_tilde", m)))
  return logdensity, names, None, None


# --------------------------------------------------------------------------- latent Gaussians

SV_LENGTH = 500
SV_MU, SV_PHI, SV_SIGMA = -10.0, 0.95, 0.25


def ar1(mu, phi, sigma, raw):
  """h_0 = mu + sigma / sqrt(1 - phi^2) raw_0, h_t = mu + phi (h_{t-1} - mu) + sigma raw_t,
  as an associative scan of the affine maps d -> phi d + sigma raw_t (d = h - mu)."""
  first = sigma / jnp.sqrt(1 - phi**2) * raw[0]
  scale = jnp.full(raw.shape, phi).at[0].set(0.0)
  shift = (sigma * raw).at[0].set(first)

  def compose(earlier, later):  # apply earlier, then later
    return later[0] * earlier[0], later[0] * earlier[1] + later[1]

  return mu + jax.lax.associative_scan(compose, (scale, shift))[1]


def stochastic_volatility_data(seed: int = 20260508) -> np.ndarray:
  """500 returns of the model at mu = -10, phi = 0.95, sigma = 0.25."""
  rng = np.random.default_rng(seed)
  h = np.empty(SV_LENGTH)
  h[0] = SV_MU + SV_SIGMA / math.sqrt(1 - SV_PHI**2) * rng.standard_normal()
  for t in range(1, SV_LENGTH):
    h[t] = SV_MU + SV_PHI * (h[t - 1] - SV_MU) + SV_SIGMA * rng.standard_normal()
  return np.exp(h / 2) * rng.standard_normal(SV_LENGTH)


def _beta_log_density(p, a, b):
  return (a - 1) * jnp.log(p) + (b - 1) * jnp.log1p(-p)


def _stochastic_volatility():
  """mu ~ N(-10, 5), (phi + 1) / 2 ~ Beta(20, 1.5), sigma ~ half-N(0.5), h_raw ~ N(0, 1)^500,
  h the AR(1) of :func:`ar1`, r_t ~ N(0, exp(h_t / 2)). u = (mu, logit((phi + 1) / 2),
  log sigma, h_raw)."""
  returns = jnp.asarray(stochastic_volatility_data(), jnp.float32)

  def logdensity(u):
    mu, phi_u, log_sigma, raw = u[0], u[1], u[2], u[3:]
    p = jax.nn.sigmoid(phi_u)
    h = ar1(mu, 2 * p - 1, jnp.exp(log_sigma), raw)
    phi_prior = (_beta_log_density(p, 20.0, 1.5)
                 + jax.nn.log_sigmoid(phi_u) + jax.nn.log_sigmoid(-phi_u))
    return (_normal(mu, -10.0, 5.0) + phi_prior
            + _log_positive(log_sigma, lambda s: _half_normal(s, 0.5))
            + _normal(raw, 0.0, 1.0) + _normal(returns, 0.0, jnp.exp(h / 2)))

  names = ("mu", "logit_phi", "log_sigma") + _names(("h_raw", SV_LENGTH))
  return logdensity, names, None, None


GP_POINTS, GP_BASIS, GP_BOUNDARY = 200, 200, 1.5


def gp_data(seed: int = 42) -> tuple[np.ndarray, np.ndarray]:
  """200 inputs uniform on [0, 1], outputs sin(2 pi x) + N(0, 0.1^2)."""
  rng = np.random.default_rng(seed)
  x = rng.random(GP_POINTS)
  return x, np.sin(2 * np.pi * x) + 0.1 * rng.standard_normal(GP_POINTS)


def gp_basis(x) -> tuple[np.ndarray, np.ndarray]:
  """The Laplacian's eigenfunctions on [-L, L] at the centred inputs, ``(points, basis)``,
  and the square roots of its eigenvalues (the frequencies), ``(basis,)``."""
  centred = np.asarray(x, np.float64) - 0.5
  frequency = np.pi * np.arange(1, GP_BASIS + 1) / (2 * GP_BOUNDARY)
  phi = np.sin(frequency[None, :] * (centred[:, None] + GP_BOUNDARY)) / math.sqrt(GP_BOUNDARY)
  return phi, frequency


def squared_exponential_log_spectral_density(frequency, log_kernel_scale, log_lengthscale):
  """log S(w) of k(r) = s^2 exp(-r^2 / (2 l^2)) in one dimension, S(w) = s^2 sqrt(2 pi) l
  exp(-l^2 w^2 / 2) (in logs: its square root underflows, with an infinite gradient, at
  long length scales)."""
  return (2 * log_kernel_scale + 0.5 * jnp.log(2 * jnp.pi) + log_lengthscale
          - 0.5 * jnp.square(jnp.exp(log_lengthscale) * frequency))


def _gp_regression():
  """log l ~ N(0, 1), log s ~ N(0, 1), log noise ~ N(-2, 1), z ~ N(0, 1)^200,
  f = Phi (sqrt(S(w)) z), y ~ N(f, noise). u = (log l, log s, log noise, z)."""
  x, y = gp_data()
  phi, frequency = gp_basis(x)
  phi_, frequency_, y_ = (jnp.asarray(a, jnp.float32) for a in (phi, frequency, y))

  def logdensity(u):
    log_l, log_s, log_noise, z = u[0], u[1], u[2], u[3:]
    weights = jnp.exp(0.5 * squared_exponential_log_spectral_density(frequency_, log_s, log_l))
    f = phi_ @ (weights * z)
    return (_normal(log_l, 0.0, 1.0) + _normal(log_s, 0.0, 1.0) + _normal(log_noise, -2.0, 1.0)
            + _normal(z, 0.0, 1.0) + _normal(y_, f, jnp.exp(log_noise)))

  names = ("log_lengthscale", "log_kernel_scale", "log_noise_scale") + _names(("z", GP_BASIS))
  return logdensity, names, None, None


# --------------------------------------------------------------------------- ODE

LV_TRUTH = dict(alpha=0.5, beta=0.05, gamma=0.5, delta=0.05, u0=10.0, v0=5.0, sigma=0.5)
LV_PRIOR = dict(alpha=(math.log(0.5), 0.5), beta=(math.log(0.05), 0.5),
                gamma=(math.log(0.5), 0.5), delta=(math.log(0.05), 0.5),
                u0=(math.log(10.0), 0.3), v0=(math.log(5.0), 0.3))
LV_OBSERVATIONS, LV_END, LV_SUBSTEPS = 40, 20.0, 8


def lotka_volterra_solution(rates, start, times, substeps: int = LV_SUBSTEPS):
  """Prey and predators ``(len(times), 2)`` at ``times`` (``times[0]`` the start): RK4 with
  ``substeps`` equal steps between consecutive times (uniform times)."""
  alpha, beta, gamma, delta = rates
  dt = (times[1] - times[0]) / substeps

  def field(state):
    prey, predators = state[0], state[1]
    return jnp.stack([alpha * prey - beta * prey * predators,
                      delta * prey * predators - gamma * predators])

  def rk4(state, _):
    k1 = field(state)
    k2 = field(state + dt / 2 * k1)
    k3 = field(state + dt / 2 * k2)
    k4 = field(state + dt * k3)
    return state + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4), None

  def interval(state, _):
    state = jax.lax.scan(rk4, state, None, length=substeps)[0]
    return state, state

  start = jnp.asarray(start)
  return jnp.concatenate([start[None], jax.lax.scan(interval, start, None,
                                                    length=len(times) - 1)[1]])


def lotka_volterra_data(seed: int = 1234) -> tuple[np.ndarray, np.ndarray]:
  """40 times on [0, 20] and the solution at tuningfork's truth (RK4 with 64 steps per
  interval) plus N(0, 0.5^2) noise."""
  times = np.linspace(0.0, LV_END, LV_OBSERVATIONS)
  t = LV_TRUTH
  exact = np.asarray(lotka_volterra_solution(
      (t["alpha"], t["beta"], t["gamma"], t["delta"]), np.array([t["u0"], t["v0"]]),
      jnp.asarray(times), substeps=64), np.float64)
  rng = np.random.default_rng(seed)
  return times, exact + t["sigma"] * rng.standard_normal(exact.shape)


def _lotka_volterra():
  """log alpha ~ N(log 0.5, 0.5), log beta ~ N(log 0.05, 0.5), log gamma ~ N(log 0.5, 0.5),
  log delta ~ N(log 0.05, 0.5), log u0 ~ N(log 10, 0.3), log v0 ~ N(log 5, 0.3) (log-normal
  priors, on the log scale), sigma ~ half-N(1); observations ~ N(solution, sigma).
  u = (log alpha, log beta, log gamma, log delta, log u0, log v0, log sigma)."""
  times, observed = lotka_volterra_data()
  times_, observed_ = jnp.asarray(times, jnp.float32), jnp.asarray(observed, jnp.float32)
  loc = jnp.asarray([LV_PRIOR[k][0] for k in LV_PRIOR], jnp.float32)
  scale = jnp.asarray([LV_PRIOR[k][1] for k in LV_PRIOR], jnp.float32)

  def logdensity(u):
    values = jnp.exp(u[:6])
    solution = lotka_volterra_solution(values[:4], values[4:6], times_)
    return (_normal(u[:6], loc, scale) + _log_positive(u[6], lambda s: _half_normal(s, 1.0))
            + _normal(observed_, solution, jnp.exp(u[6])))

  names = tuple(f"log_{k}" for k in LV_PRIOR) + ("log_sigma",)
  return logdensity, names, None, None


# --------------------------------------------------------------------------- the suite

_MODELS = {
    "mvn_10": _mvn_10,
    "gaussian_50": _gaussian_50,
    "eight_schools_ncp": _eight_schools_ncp,
    "neals_funnel": _neals_funnel,
    "banana": _banana,
    "radon": _radon,
    "logistic": lambda: _logistic_regression(*logistic_data()),
    "german_credit": lambda: _logistic_regression(*german_credit_data()),
    "horseshoe": _horseshoe,
    "irt_2pl": _irt_2pl,
    "gmm_25": _gmm_25,
    "stochastic_volatility": _stochastic_volatility,
    "lotka_volterra": _lotka_volterra,
    "gp_regression": _gp_regression,
}

def read_reference() -> dict:
  """The committed NUTS reference moments, ``{name: {"mean": [...], "sd": [...]}}``, or {}."""
  if not REFERENCE.exists():
    return {}
  return json.loads(REFERENCE.read_text())["reference"]


@functools.cache
def load(name: str) -> Model:
  """The class ``name`` (one of ``NAMES``) as a :class:`Model`.

  Raises:
    ValueError: for a name outside the suite.
  """
  if name not in _MODELS:
    raise ValueError(f"unknown tuningfork class {name!r}; the suite is {', '.join(NAMES)}")
  logdensity_fn, names, mean, sd = _MODELS[name]()
  exact = mean is not None
  if not exact:
    found = read_reference().get(name)
    if found is not None:
      mean, sd = np.asarray(found["mean"]), np.asarray(found["sd"])
  dim = len(names)
  value_and_grad = jax.jit(jax.vmap(jax.value_and_grad(logdensity_fn)))
  return Model(
      name=name, dim=dim, split="tuning" if name in NAMES_TUNING else "held_out",
      logdensity_fn=logdensity_fn, coordinate_names=names,
      reference_mean=None if mean is None else np.asarray(mean, np.float64),
      reference_sd=None if sd is None else np.asarray(sd, np.float64), exact=exact,
      initial_positions=lambda key, n: _posteriordb.stan_initial_positions(key, n, dim, value_and_grad))
