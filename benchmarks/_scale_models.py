"""Two posteriors of hundreds to thousands of coordinates, for the sampler's scale checks.

Both on the unconstrained scale, with synthetic data drawn from a fixed seed:

* :func:`stochastic_volatility`: the non-centered stochastic-volatility model of daily
  returns (Kim, Shephard and Chib 1998; Stan's users' guide), ``T`` latent log volatilities.
  Coordinates ``(mu, atanh(phi), log(sigma), z_1..z_T)``: 503 at ``T = 500``;
* :func:`multilevel_regression`: a non-centered varying-intercept linear regression with
  ``groups`` groups, ``per_group`` observations each and ``num_features`` fixed effects on
  uncentred predictors. Coordinates ``(alpha, beta_1..beta_F, log(tau), log(sigma),
  eta_1..eta_J)``: 1,006 at the defaults.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from metaoptax import l2hmc


def _ar1(phi, innovations):
  """``h_t = phi h_{t-1} + innovations_t`` from ``h_0 = innovations_0`` (an associative scan:
  log-depth, not a loop of ``T`` steps)."""
  coefficients = jnp.full_like(innovations, phi).at[0].set(0.0)

  def combine(left, right):
    return left[0] * right[0], right[0] * left[1] + right[1]

  return jax.lax.associative_scan(combine, (coefficients, innovations))[1]


def stochastic_volatility(num_times: int = 500, seed: int = 0) -> l2hmc.Target:
  r"""Non-centered stochastic volatility: :math:`y_t \sim \mathcal N(0, e^{h_t})`,
  :math:`h_1 = \mu + \sigma z_1/\sqrt{1-\phi^2}`,
  :math:`h_t = \mu + \phi(h_{t-1}-\mu) + \sigma z_t`, :math:`z_t \sim \mathcal N(0, 1)`;
  priors :math:`\mu \sim \mathrm{Cauchy}(0, 10)`, :math:`\phi \sim \mathcal U(-1, 1)`,
  :math:`\sigma \sim \mathrm{Cauchy}^+(0, 5)` (Stan's users' guide), sampled as
  :math:`(\mu, \operatorname{atanh}\phi, \log\sigma, z)` with the log Jacobians. The returns
  are simulated with :math:`\mu = -1, \phi = 0.95, \sigma = 0.25` from
  ``numpy.random.default_rng(seed)``."""
  rng = np.random.default_rng(seed)
  h = np.empty(num_times)
  h[0] = -1.0 + 0.25 * rng.standard_normal() / np.sqrt(1 - 0.95**2)
  for t in range(1, num_times):
    h[t] = -1.0 + 0.95 * (h[t - 1] + 1.0) + 0.25 * rng.standard_normal()
  returns = jnp.asarray(np.exp(h / 2) * rng.standard_normal(num_times), jnp.float32)

  def logdensity_fn(x):
    mu, phi_raw, log_sigma, z = x[0], x[1], x[2], x[3:]
    phi, sigma = jnp.tanh(phi_raw), jnp.exp(log_sigma)
    scaled = sigma * z
    scaled = scaled.at[0].divide(jnp.sqrt(1.0 - phi**2))
    h = mu + _ar1(phi, scaled)
    loglik = jnp.sum(-0.5 * h - 0.5 * returns**2 * jnp.exp(-h))
    prior = (-jnp.log1p((mu / 10.0) ** 2) - jnp.log1p((sigma / 5.0) ** 2) + log_sigma
             + jnp.log1p(-phi**2) - 0.5 * jnp.sum(z**2))
    return loglik + prior

  return l2hmc.Target(f"stochastic volatility (non-centered, T={num_times})", num_times + 3,
                      logdensity_fn)


def multilevel_regression(groups: int = 1000, per_group: int = 5, num_features: int = 3,
                          seed: int = 0) -> l2hmc.Target:
  r"""Non-centered varying intercepts: :math:`y_{ij} \sim \mathcal N(\alpha + x_{ij}^\top\beta
  + \tau\eta_j, \sigma^2)`, :math:`\eta_j \sim \mathcal N(0, 1)`, :math:`\alpha, \beta_k \sim
  \mathcal N(0, 5^2)`, :math:`\tau, \sigma \sim \mathcal N^+(0, 1)`, sampled as
  :math:`(\alpha, \beta, \log\tau, \log\sigma, \eta)` with the log Jacobians. The predictors
  are :math:`\mathcal N(1, 1)` (uncentred: :math:`\alpha` and :math:`\beta` correlate) and the
  data are simulated with :math:`\alpha = 1, \beta_k = 0.5, \tau = 0.5, \sigma = 1` from
  ``numpy.random.default_rng(seed)``."""
  rng = np.random.default_rng(seed)
  group = np.repeat(np.arange(groups), per_group)
  features = 1.0 + rng.standard_normal((groups * per_group, num_features))
  effects = 0.5 * rng.standard_normal(groups)
  y = 1.0 + features @ np.full(num_features, 0.5) + effects[group] + rng.standard_normal(
      groups * per_group)
  group, features, y = jnp.asarray(group), jnp.asarray(features, jnp.float32), jnp.asarray(
      y, jnp.float32)
  k = num_features

  def logdensity_fn(x):
    alpha, beta, log_tau, log_sigma, eta = x[0], x[1:1 + k], x[1 + k], x[2 + k], x[3 + k:]
    tau, sigma = jnp.exp(log_tau), jnp.exp(log_sigma)
    residual = y - alpha - features @ beta - tau * eta[group]
    loglik = -y.shape[0] * log_sigma - 0.5 * jnp.sum(residual**2) / sigma**2
    prior = (-0.5 * (alpha**2 + jnp.sum(beta**2)) / 25.0 - 0.5 * (tau**2 + sigma**2)
             + log_tau + log_sigma - 0.5 * jnp.sum(eta**2))
    return loglik + prior

  return l2hmc.Target(f"multilevel regression (non-centered, {groups} groups)",
                      groups + k + 3, logdensity_fn)


MODELS = {"stochastic_volatility": stochastic_volatility,
          "multilevel_regression": multilevel_regression}
