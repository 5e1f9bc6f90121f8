r"""Target distributions of the L2HMC paper, as energies :math:`U(x) = -\log p(x)`.

Each :class:`Target` carries its dimension, the (unnormalised) log density, the
exact mean and covariance where known (for checking samples and for the
truncated ESS estimator's scale) and the initial distribution chains start from
(a standard normal, as in the paper's code).
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

__all__ = ("Target", "gaussian", "ill_conditioned_gaussian", "strongly_correlated_gaussian",
           "mixture_of_gaussians", "rough_well", "all_targets")


class Target(NamedTuple):
  """A distribution to sample: ``logdensity_fn(x) = -U(x)`` up to a constant.

  Attributes:
    name: the target's name (reports and tables).
    dim: the number of coordinates of ``x``.
    logdensity_fn: ``x (dim,) -> log p(x)`` up to a constant.
    mean: the exact mean ``(dim,)``, if known; else ``None``.
    covariance: the exact covariance ``(dim, dim)``, if known; else ``None``.
    sample: ``(rng_key, n) -> (n, dim)`` exact draws, if known; else ``None``.
  """

  name: str
  dim: int
  logdensity_fn: Callable[[jax.Array], jax.Array]
  mean: jax.Array | None = None
  covariance: jax.Array | None = None
  sample: Callable[[jax.Array, int], jax.Array] | None = None


def gaussian(covariance: jax.Array, mean: jax.Array | None = None, name: str = "gaussian"
             ) -> Target:
  r""":math:`\mathcal N(\mu, \Sigma)`: :math:`U(x) = \tfrac12 (x-\mu)^\top \Sigma^{-1} (x-\mu)`.

  Args:
    covariance: :math:`\Sigma`, ``(dim, dim)``, symmetric positive definite.
    mean: :math:`\mu`, ``(dim,)``; ``None``: 0.
    name: the target's name.

  Returns:
    A :class:`Target` with its exact mean, covariance and draws (float32).
  """
  covariance = jnp.asarray(covariance, jnp.float32)
  dim = covariance.shape[0]
  mean = jnp.zeros(dim) if mean is None else jnp.asarray(mean, jnp.float32)
  precision = jnp.linalg.inv(covariance)

  def logdensity_fn(x):
    d = x - mean
    return -0.5 * d @ precision @ d

  def sample(key, n):
    return jax.random.multivariate_normal(key, mean, covariance, (n,))

  return Target(name, dim, logdensity_fn, mean, covariance, sample)


def ill_conditioned_gaussian(dim: int = 50) -> Target:
  """A ``dim``-dimensional Gaussian, diagonal, its variances log-spaced from 1e-2 to 1e2.

  Args:
    dim: the number of coordinates.

  Returns:
    A :class:`Target` with its exact mean, covariance and draws.
  """
  return gaussian(jnp.diag(jnp.logspace(-2.0, 2.0, dim)), name=f"ill-conditioned Gaussian ({dim}-d)")


def strongly_correlated_gaussian() -> Target:
  """2-d Gaussian with variances 100 and 0.1 along axes rotated by pi/4.

  Returns:
    A :class:`Target` with its exact mean, covariance and draws.
  """
  c, s = math.cos(math.pi / 4), math.sin(math.pi / 4)
  rotation = jnp.array([[c, -s], [s, c]])
  covariance = rotation @ jnp.diag(jnp.array([100.0, 0.1])) @ rotation.T
  return gaussian(covariance, name="strongly correlated Gaussian (2-d)")


def mixture_of_gaussians(distance: float = 4.0, variance: float = 0.1) -> Target:
  r"""Equal mixture of two isotropic 2-d Gaussians ``distance`` apart.

  Args:
    distance: the distance between the two means, placed at :math:`(\pm d/2, 0)`.
    variance: the variance of each component along each axis.

  Returns:
    A :class:`Target` with its exact draws.
  """
  means = jnp.array([[-distance / 2, 0.0], [distance / 2, 0.0]])

  def logdensity_fn(x):
    sq = jnp.sum((x - means) ** 2, axis=-1)
    return jax.nn.logsumexp(-0.5 * sq / variance) - math.log(2.0)

  def sample(key, n):
    k_component, k_noise = jax.random.split(key)
    component = jax.random.bernoulli(k_component, shape=(n,)).astype(jnp.int32)
    return means[component] + jnp.sqrt(variance) * jax.random.normal(k_noise, (n, 2))

  covariance = jnp.diag(jnp.array([variance + distance**2 / 4, variance]))
  return Target("mixture of two Gaussians (2-d)", 2, logdensity_fn, jnp.zeros(2), covariance,
                sample)


def rough_well(dim: int = 2, eta: float = 1e-2) -> Target:
  r""":math:`U(x) = \tfrac12 x^\top x + \eta \sum_i \cos(x_i/\eta)`: a well with fine ripples.

  Args:
    dim: the number of coordinates.
    eta: :math:`\eta`, the ripples' amplitude and period.

  Returns:
    A :class:`Target` (mean 0; no exact covariance or draws).
  """

  def logdensity_fn(x):
    return -(0.5 * x @ x + eta * jnp.sum(jnp.cos(x / eta)))

  return Target(f"rough well ({dim}-d)", dim, logdensity_fn, jnp.zeros(dim), None)


def all_targets() -> dict[str, Target]:
  """The paper's four test targets by name.

  Returns:
    ``{"ill_conditioned": ..., "correlated": ..., "mixture": ..., "rough_well": ...}``,
    each a :class:`Target` with its default arguments.
  """
  return {"ill_conditioned": ill_conditioned_gaussian(),
          "correlated": strongly_correlated_gaussian(),
          "mixture": mixture_of_gaussians(),
          "rough_well": rough_well()}
