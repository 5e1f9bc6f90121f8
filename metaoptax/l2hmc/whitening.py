r"""A fixed linear preconditioner: the sampler moves :math:`z = L^{-1}(x - \mu)`.

With :math:`x = \mu + L z`, the target in :math:`z` is
:math:`\log p_z(z) = \log p(\mu + L z) + \text{const}` and
:math:`\nabla_z \log p_z = L^\top \nabla_x \log p`. The map is linear and the same before
and after a transition, so its Jacobian cancels in the Metropolis-Hastings ratio: running
the generalized leapfrog in :math:`z` is a valid sampler of :math:`p`. With the networks
off and step size :math:`h`, it is HMC with the inverse mass matrix :math:`L L^\top`
(what window adaptation tunes for NUTS); with the networks on, they see standardized
positions and forces, and ``per_coordinate`` step sizes are multipliers on top of
:math:`L`.

:math:`L` is diagonal, :math:`\operatorname{diag}(\sigma)` (``cholesky=None``), or dense:
the lower Cholesky factor of a covariance :math:`\Sigma = L L^\top` (a dense metric, for
posteriors whose coordinates are correlated), stored with its inverse so that each map is
one matrix product. :math:`\mu, \sigma` and :math:`\Sigma` come from
:func:`metaoptax.l2hmc.warmup`.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

__all__ = ("Whitening", "dense_whitening")


class Whitening(NamedTuple):
  r""":math:`x = \mu + L z`, :math:`L = \operatorname{diag}(\sigma)` or ``cholesky``.

  Attributes:
    location: ``(dim,)``, :math:`\mu`.
    scale: ``(dim,)``, :math:`\sigma > 0`, the standard deviation of each coordinate.
    cholesky: ``(dim, dim)``, the lower-triangular :math:`L` with :math:`L L^\top =
      \Sigma`; ``None``: diagonal, :math:`L = \operatorname{diag}(\sigma)`.
    inverse_cholesky: ``(dim, dim)``, :math:`L^{-1}`; ``None`` when diagonal.
  """

  location: jax.Array
  scale: jax.Array
  cholesky: jax.Array | None = None
  inverse_cholesky: jax.Array | None = None


def dense_whitening(location: jax.Array, covariance: jax.Array) -> Whitening:
  r"""The whitening of ``covariance`` (symmetric positive definite) around ``location``.

  Args:
    location: :math:`\mu`, ``(dim,)``.
    covariance: :math:`\Sigma`, ``(dim, dim)``, symmetric positive definite.

  Returns:
    A :class:`Whitening` with :math:`L` the Cholesky factor of :math:`\Sigma`, its
    inverse, and the standard deviations :math:`\sqrt{\Sigma_{ii}}` as ``scale``.
  """
  cholesky = jnp.linalg.cholesky(covariance)
  eye = jnp.eye(covariance.shape[0], dtype=covariance.dtype)
  inverse = jax.scipy.linalg.solve_triangular(cholesky, eye, lower=True)
  return Whitening(location, jnp.sqrt(jnp.diagonal(covariance)), cholesky, inverse)


def to_whitened(whitening: Whitening, x: jax.Array) -> jax.Array:
  """:math:`z = L^{-1}(x - \\mu)` (``x``: one position or a batch, ``(..., dim)``)."""
  if whitening.cholesky is None:
    return (x - whitening.location) / whitening.scale
  return (x - whitening.location) @ whitening.inverse_cholesky.T


def from_whitened(whitening: Whitening, z: jax.Array) -> jax.Array:
  """:math:`x = \\mu + L z`."""
  if whitening.cholesky is None:
    return whitening.location + whitening.scale * z
  return whitening.location + z @ whitening.cholesky.T


def gradient_to_whitened(whitening: Whitening, grad: jax.Array) -> jax.Array:
  """:math:`\\nabla_z = L^\\top \\nabla_x`."""
  if whitening.cholesky is None:
    return grad * whitening.scale
  return grad @ whitening.cholesky


def gradient_from_whitened(whitening: Whitening, grad: jax.Array) -> jax.Array:
  """:math:`\\nabla_x = L^{-\\top} \\nabla_z`."""
  if whitening.cholesky is None:
    return grad / whitening.scale
  return grad @ whitening.inverse_cholesky


def whitened_logdensity(logdensity_fn: Callable, whitening: Whitening) -> Callable:
  """:math:`z \\mapsto \\log p(\\mu + L z)`."""
  return lambda z: logdensity_fn(from_whitened(whitening, z))
