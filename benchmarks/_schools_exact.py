r"""The eight schools posterior, exactly: one-dimensional quadrature over :math:`\log\tau`.

Eight schools (:func:`metaoptax.l2hmc.posteriors.eight_schools`) is Gaussian given
:math:`\tau` (Gelman et al., BDA3 5.4), so every posterior moment is a one-dimensional
integral. Integrating the effects out, :math:`y_j \mid \mu, \tau \sim \mathcal N(\mu,
V_j)` with :math:`V_j = \sigma_j^2 + \tau^2`; integrating :math:`\mu \sim \mathcal N(0,
s_\mu^2)` out,

.. math::

  p(\log\tau \mid y) \propto p_\tau(\tau)\,\tau\,\sqrt{\frac{V_\mu}{s_\mu^2}}
  \prod_j V_j^{-1/2} \exp\Big(-\sum_j \frac{y_j^2}{2V_j} + \frac{\hat\mu^2}{2V_\mu}\Big),
  \qquad V_\mu^{-1} = s_\mu^{-2} + \sum_j V_j^{-1},\quad
  \hat\mu = V_\mu \sum_j \frac{y_j}{V_j},

with :math:`p_\tau` the half-Cauchy(5) prior and :math:`\tau` the Jacobian of
:math:`\tau = e^{\log\tau}`. Given :math:`\tau`: :math:`\mu \sim \mathcal N(\hat\mu,
V_\mu)` and :math:`\theta_j \mid \mu \sim \mathcal N((1-b_j)y_j + b_j\mu, v_j)` with
:math:`b_j = \sigma_j^2/V_j`, :math:`v_j = (\sigma_j^{-2} + \tau^{-2})^{-1}`, so
:math:`\theta_j \mid \tau \sim \mathcal N((1-b_j)y_j + b_j\hat\mu,\ v_j + b_j^2V_\mu)`.

:func:`moments` integrates the conditional moments (Gaussian: :math:`E x^4 = m^4 +
6m^2s^2 + 3s^4`) against the marginal on a grid of :math:`\log\tau` (trapezoid rule, in
float64); :func:`sample` draws exactly (the grid's inverse CDF, linear between nodes,
then the Gaussians). The coordinates are the centered ones, :math:`(\mu, \log\tau,
\theta_{1..8})`; the non-centered :math:`\tilde\theta_j = (\theta_j - \mu)/\tau`.

Reference: Gelman, Carlin, Stern, Dunson, Vehtari and Rubin, *Bayesian Data Analysis*,
3rd ed., 2013, section 5.4 (the marginal of :math:`\tau`) and 5.5 (the data).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from metaoptax.l2hmc.posteriors import EIGHT_SCHOOLS_SIGMA, EIGHT_SCHOOLS_Y

__all__ = ("GRID", "log_tau_density", "moments", "sample")

MU_SCALE = 5.0  # the prior sd of mu
TAU_SCALE = 5.0  # the half-Cauchy scale of tau
#: log tau nodes: the marginal is below 1e-12 of its peak outside (its left tail follows the
#: half-Cauchy prior's tau near 0, which decays like tau)
GRID = np.linspace(-30.0, 8.0, 20001)


def _conditionals(log_tau):
  """Per node: the unnormalised log marginal of log tau, mu-hat, V_mu, b (n, 8), v (n, 8)."""
  log_tau = np.asarray(log_tau, np.float64)[:, None]
  y, sigma2 = np.asarray(EIGHT_SCHOOLS_Y), np.square(EIGHT_SCHOOLS_SIGMA)
  tau2 = np.exp(2.0 * log_tau)
  v_total = sigma2 + tau2
  v_mu = 1.0 / (MU_SCALE**-2 + np.sum(1.0 / v_total, axis=1))
  mu_hat = v_mu * np.sum(y / v_total, axis=1)
  log_prior = (math.log(2.0 / (math.pi * TAU_SCALE)) - np.log1p(tau2[:, 0] / TAU_SCALE**2)
               + log_tau[:, 0])
  log_marginal = (log_prior + 0.5 * np.log(v_mu / MU_SCALE**2)
                  - 0.5 * np.sum(np.log(2 * np.pi * v_total), axis=1)
                  - 0.5 * np.sum(y**2 / v_total, axis=1) + 0.5 * mu_hat**2 / v_mu)
  b = sigma2 / v_total
  v = 1.0 / (1.0 / sigma2 + 1.0 / tau2)
  return log_marginal, mu_hat, v_mu, b, v


def log_tau_density(log_tau=GRID) -> np.ndarray:
  """The normalised posterior density of log tau at ``log_tau`` (normalised on ``GRID``)."""
  log_marginal, *_ = _conditionals(GRID)
  peak = log_marginal.max()
  norm = np.trapezoid(np.exp(log_marginal - peak), GRID)
  return np.exp(_conditionals(log_tau)[0] - peak) / norm


def _weights():
  log_marginal, *rest = _conditionals(GRID)
  w = np.exp(log_marginal - log_marginal.max())
  return w / np.trapezoid(w, GRID), rest


def moments() -> dict:
  """Exact posterior ``mean``, ``sd`` (of x) and ``mean2``, ``sd2`` (of x^2), each (10,)."""
  w, (mu_hat, v_mu, b, v) = _weights()
  y = np.asarray(EIGHT_SCHOOLS_Y)
  means = [mu_hat[:, None], GRID[:, None], (1 - b) * y + b * mu_hat[:, None]]
  variances = [v_mu[:, None], np.zeros_like(GRID)[:, None], v + b**2 * v_mu[:, None]]
  m = np.concatenate(means, axis=1)  # (n, 10): conditional means given log tau
  s2 = np.concatenate(variances, axis=1)
  first = np.trapezoid(w[:, None] * m, GRID, axis=0)
  second = np.trapezoid(w[:, None] * (m**2 + s2), GRID, axis=0)
  fourth = np.trapezoid(w[:, None] * (m**4 + 6 * m**2 * s2 + 3 * s2**2), GRID, axis=0)
  return dict(mean=first, sd=np.sqrt(second - first**2), mean2=second,
              sd2=np.sqrt(fourth - second**2))


def sample(key: jax.Array, n: int) -> jax.Array:
  """``n`` exact draws ``(n, 10)`` in the centered coordinates (float32)."""
  w, _ = _weights()
  cdf = np.concatenate([[0.0], np.cumsum(0.5 * (w[1:] + w[:-1]) * np.diff(GRID))])
  cdf /= cdf[-1]
  k_tau, k_mu, k_theta = jax.random.split(key, 3)
  log_tau = np.interp(np.asarray(jax.random.uniform(k_tau, (n,), jnp.float32), np.float64),
                      cdf, GRID)
  _, mu_hat, v_mu, b, v = _conditionals(log_tau)
  mu = mu_hat + np.sqrt(v_mu) * np.asarray(jax.random.normal(k_mu, (n,)), np.float64)
  y = np.asarray(EIGHT_SCHOOLS_Y)
  theta = ((1 - b) * y + b * mu[:, None]
           + np.sqrt(v) * np.asarray(jax.random.normal(k_theta, (n, 8)), np.float64))
  return jnp.asarray(np.concatenate([mu[:, None], log_tau[:, None], theta], 1), jnp.float32)
