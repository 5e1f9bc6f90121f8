r"""Posteriors to sample beyond the paper's toys: Neal's funnel, eight schools, logistic regression.

Each function returns a :class:`metaoptax.l2hmc.targets.Target` over unconstrained
coordinates, with the normalised log density (every constant kept, so it can be
checked against a reference implementation) and, where known in closed form, the
exact mean, covariance and draws.

* :func:`neals_funnel` (Neal 2003, `Slice sampling <https://arxiv.org/abs/physics/0009028>`_):
  :math:`v \sim \mathcal N(0, \sigma_v^2)`, :math:`x_i \mid v \sim \mathcal N(0, e^{v})`
  for :math:`i = 1..d-1`; coordinates :math:`(v, x_1, \dots, x_{d-1})`. Exact marginals:
  :math:`v \sim \mathcal N(0, \sigma_v^2)`, :math:`E x_i = 0`,
  :math:`E x_i^2 = E e^{v} = e^{\sigma_v^2/2}`. The neck (:math:`v \ll 0`) needs step
  sizes :math:`\sim e^{v/2}`: a sampler that never enters it still shows short
  autocorrelations, with too small a spread of :math:`v`.
* :func:`eight_schools` (Rubin 1981; Gelman et al., BDA3 5.5): :math:`y_j \sim
  \mathcal N(\theta_j, \sigma_j^2)`, :math:`\theta_j \sim \mathcal N(\mu, \tau^2)`,
  :math:`\mu \sim \mathcal N(0, 5^2)`, :math:`\tau \sim \mathrm{HalfCauchy}(5)`, in the
  coordinates :math:`(\mu, \log\tau, \theta_{1..8})` (centered) or
  :math:`(\mu, \log\tau, \tilde\theta_{1..8})` with :math:`\theta = \mu + \tau\tilde\theta`,
  :math:`\tilde\theta_j \sim \mathcal N(0, 1)` (non-centered); the density of
  :math:`\log\tau` includes the Jacobian :math:`\tau`. The centered posterior is a funnel
  in :math:`(\log\tau, \theta)`.
* :func:`logistic_regression`: :math:`\beta \sim \mathcal N(0, s^2 I)`,
  :math:`y_n \sim \mathrm{Bernoulli}(\sigma(\tilde x_n^\top\beta))` with
  :math:`\tilde x_n = (1, x_n)` (an intercept), so
  :math:`\log p(\beta \mid y) = \sum_n \big(y_n \log\sigma(\eta_n) + (1-y_n)\log\sigma(-\eta_n)\big)
  + \log\mathcal N(\beta; 0, s^2 I) + \text{const}`, :math:`\eta = \tilde X\beta`
  (the constant, the evidence, is left out).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax.scipy.stats import norm
import numpy as np

from metaoptax.l2hmc.targets import Target

__all__ = ("neals_funnel", "eight_schools", "EIGHT_SCHOOLS_Y", "EIGHT_SCHOOLS_SIGMA",
           "logistic_regression", "all_posteriors")

_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)

#: Eight schools: the estimated coaching effects (BDA3 table 5.2).
EIGHT_SCHOOLS_Y = (28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0)
#: Eight schools: the standard errors of the estimated effects (BDA3 table 5.2).
EIGHT_SCHOOLS_SIGMA = (15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0)


def neals_funnel(dim: int = 10, scale: float = 3.0) -> Target:
  r"""Neal's funnel in ``dim`` dimensions: :math:`(v, x_{1..d-1})`, :math:`\sigma_v` = ``scale``.

  :math:`\log p = \log\mathcal N(v; 0, \sigma_v^2) + \sum_i \log\mathcal N(x_i; 0, e^{v})`,
  normalised. Exact mean 0, covariance :math:`\mathrm{diag}(\sigma_v^2, e^{\sigma_v^2/2}, \dots)`
  (the coordinates are uncorrelated) and exact draws.

  Args:
    dim: the number of coordinates, :math:`v` and :math:`d - 1` of :math:`x` (at least 2).
    scale: :math:`\sigma_v`, the standard deviation of :math:`v`.

  Returns:
    A :class:`~metaoptax.l2hmc.Target` with its exact mean, covariance and draws.

  Raises:
    ValueError: ``dim < 2``.
  """
  if dim < 2:
    raise ValueError(f"dim must be >= 2, got {dim}.")

  def logdensity_fn(position):
    v, x = position[0], position[1:]
    return norm.logpdf(v, scale=scale) + jnp.sum(norm.logpdf(x, scale=jnp.exp(0.5 * v)))

  def sample(key, n):
    k_v, k_x = jax.random.split(key)
    v = scale * jax.random.normal(k_v, (n, 1))
    return jnp.concatenate([v, jnp.exp(0.5 * v) * jax.random.normal(k_x, (n, dim - 1))], -1)

  variance = jnp.concatenate([jnp.array([scale**2]),
                              jnp.full((dim - 1,), math.exp(scale**2 / 2))])
  return Target(f"Neal's funnel ({dim}-d)", dim, logdensity_fn, jnp.zeros(dim),
                jnp.diag(variance), sample)


def eight_schools(centered: bool = True) -> Target:
  r"""The eight schools hierarchical model, centered or non-centered (module docstring).

  Coordinates :math:`(\mu, \log\tau, \theta_{1..8})` or
  :math:`(\mu, \log\tau, \tilde\theta_{1..8})`; the normalised log density of the
  unconstrained coordinates (priors, the Jacobian of :math:`\tau = e^{\log\tau}`,
  the likelihood) up to the evidence. No closed-form moments.

  Args:
    centered: the centered parametrization (coordinates :math:`\theta_j`); else the
      non-centered one (:math:`\tilde\theta_j`, :math:`\theta_j = \mu + \tau\tilde\theta_j`).

  Returns:
    A 10-d :class:`~metaoptax.l2hmc.Target` (no exact moments or draws).
  """
  y = jnp.asarray(EIGHT_SCHOOLS_Y)
  sigma = jnp.asarray(EIGHT_SCHOOLS_SIGMA)
  half_cauchy_norm = math.log(2.0 / (math.pi * 5.0))

  def logdensity_fn(position):
    mu, log_tau, effects = position[0], position[1], position[2:]
    tau = jnp.exp(log_tau)
    prior = (norm.logpdf(mu, scale=5.0) + half_cauchy_norm - jnp.log1p((tau / 5.0) ** 2)
             + log_tau)  # + log tau: the Jacobian of tau = exp(log tau)
    if centered:
      theta = effects
      hierarchy = jnp.sum(-0.5 * ((theta - mu) / tau) ** 2 - log_tau - _LOG_SQRT_2PI)
    else:
      theta = mu + tau * effects
      hierarchy = jnp.sum(norm.logpdf(effects))
    return prior + hierarchy + jnp.sum(norm.logpdf(y, theta, sigma))

  name = "eight schools, " + ("centered" if centered else "non-centered") + " (10-d)"
  return Target(name, 10, logdensity_fn, None, None)


def logistic_regression(features, labels, prior_scale: float = 1.0,
                        name: str = "logistic regression") -> Target:
  r"""Bayesian logistic regression with an intercept (module docstring).

  Args:
    features: ``(n, p)`` covariates (an intercept column is prepended).
    labels: ``(n,)`` of 0/1.
    prior_scale: :math:`s`, the prior standard deviation of every coefficient.
    name: the target's name.

  Returns:
    A :class:`~metaoptax.l2hmc.targets.Target` of dimension ``p + 1``
    (coordinates: intercept, then the coefficients), no closed-form moments.
  """
  features = np.asarray(features, np.float32)
  labels = np.asarray(labels, np.float32)
  if features.ndim != 2 or labels.shape != features.shape[:1]:
    raise ValueError(f"features must be (n, p) and labels (n,), got {features.shape} and "
                     f"{labels.shape}.")
  design = jnp.asarray(np.concatenate([np.ones((len(features), 1), np.float32), features], 1))
  labels = jnp.asarray(labels)

  def logdensity_fn(beta):
    eta = design @ beta
    likelihood = jnp.sum(labels * jax.nn.log_sigmoid(eta)
                         + (1.0 - labels) * jax.nn.log_sigmoid(-eta))
    return likelihood + jnp.sum(norm.logpdf(beta, scale=prior_scale))

  return Target(f"{name} ({design.shape[1]}-d, {design.shape[0]} rows)", design.shape[1],
                logdensity_fn, None, None)


def all_posteriors() -> dict[str, Target]:
  """The funnel (10-d) and eight schools centered and non-centered, by short name.

  Returns:
    ``{"funnel": ..., "schools_centered": ..., "schools_noncentered": ...}``, each a
    :class:`~metaoptax.l2hmc.Target` with its default arguments.
  """
  return {"funnel": neals_funnel(),
          "schools_centered": eight_schools(centered=True),
          "schools_noncentered": eight_schools(centered=False)}
