"""A hierarchical posterior of over a thousand coordinates, for the sampler's scale check.

:func:`multilevel_regression`: a non-centered varying-intercept linear regression with
``groups`` groups, ``per_group`` observations each and ``num_features`` fixed effects on
uncentred predictors, on the unconstrained scale, with synthetic data from a fixed seed.
Coordinates ``(alpha, beta_1..beta_F, log(tau), log(sigma), eta_1..eta_J)``: 1,006 at the
defaults. (The scale check's other posterior, the 503-d stochastic volatility, is
tuningfork's: ``_tuningfork.load("stochastic_volatility")``.)
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from metaoptax import l2hmc


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
