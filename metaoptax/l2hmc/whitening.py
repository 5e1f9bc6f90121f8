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
one matrix product, or diagonal plus low rank (``vectors`` and ``eigenvalues``, for
thousands of coordinates):

.. math::

  L = \operatorname{diag}(\sigma)\,\big(I + U(\Lambda^{1/2} - I)U^\top\big), \qquad
  L L^\top = \operatorname{diag}(\sigma)\,\big(I + U(\Lambda - I)U^\top\big)
  \operatorname{diag}(\sigma),

with :math:`U` ``(dim, k)`` orthonormal columns and :math:`\Lambda` their ``k`` eigenvalues
(an eigenvalue of 1 leaves its column without effect), applied in :math:`O(\text{dim}\,k)`:
:math:`L^{-1}` is :math:`\Lambda^{-1/2}` in place of :math:`\Lambda^{1/2}`, and
:math:`\log|\det L| = \sum_i\log\sigma_i + \tfrac12\sum_j\log\lambda_j`
(:func:`metaoptax.l2hmc.low_rank.fisher_low_rank` fits it). :math:`\mu, \sigma`,
:math:`\Sigma` and :math:`U, \Lambda` come from :func:`metaoptax.l2hmc.warmup`.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

__all__ = ("Whitening", "dense_whitening", "log_det_jacobian")


class Whitening(NamedTuple):
  r""":math:`x = \mu + L z`, :math:`L = \operatorname{diag}(\sigma)`, ``cholesky``, or
  :math:`\operatorname{diag}(\sigma)(I + U(\Lambda^{1/2} - I)U^\top)` (module docstring).

  Attributes:
    location: ``(dim,)``, :math:`\mu`.
    scale: ``(dim,)``, :math:`\sigma > 0`, the standard deviation of each coordinate
      (dense: of :math:`\Sigma`; low rank: the diagonal factor).
    cholesky: ``(dim, dim)``, the lower-triangular :math:`L` with :math:`L L^\top =
      \Sigma`; ``None``: diagonal or low rank.
    inverse_cholesky: ``(dim, dim)``, :math:`L^{-1}`; ``None`` when not dense.
    vectors: ``(dim, k)``, the orthonormal :math:`U` of the low-rank part; ``None``: none.
    eigenvalues: ``(k,)``, :math:`\Lambda > 0`, the variances along :math:`U`'s columns
      in the scaled space; ``None``: none.
  """

  location: jax.Array
  scale: jax.Array
  cholesky: jax.Array | None = None
  inverse_cholesky: jax.Array | None = None
  vectors: jax.Array | None = None
  eigenvalues: jax.Array | None = None


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


def _low_rank(whitening: Whitening, v: jax.Array, power: float) -> jax.Array:
  """:math:`(I + U(\\Lambda^{p} - I)U^\\top) v` (``v``: ``(..., dim)``; identity without a
  low-rank part)."""
  if whitening.vectors is None:
    return v
  factors = whitening.eigenvalues**power - 1.0
  return v + ((v @ whitening.vectors) * factors) @ whitening.vectors.T


def to_whitened(whitening: Whitening, x: jax.Array) -> jax.Array:
  """:math:`z = L^{-1}(x - \\mu)` (``x``: one position or a batch, ``(..., dim)``)."""
  if whitening.cholesky is None:
    return _low_rank(whitening, (x - whitening.location) / whitening.scale, -0.5)
  return (x - whitening.location) @ whitening.inverse_cholesky.T


def from_whitened(whitening: Whitening, z: jax.Array) -> jax.Array:
  """:math:`x = \\mu + L z`."""
  if whitening.cholesky is None:
    return whitening.location + whitening.scale * _low_rank(whitening, z, 0.5)
  return whitening.location + z @ whitening.cholesky.T


def gradient_to_whitened(whitening: Whitening, grad: jax.Array) -> jax.Array:
  """:math:`\\nabla_z = L^\\top \\nabla_x`."""
  if whitening.cholesky is None:
    return _low_rank(whitening, grad * whitening.scale, 0.5)
  return grad @ whitening.cholesky


def gradient_from_whitened(whitening: Whitening, grad: jax.Array) -> jax.Array:
  """:math:`\\nabla_x = L^{-\\top} \\nabla_z`."""
  if whitening.cholesky is None:
    return _low_rank(whitening, grad, -0.5) / whitening.scale
  return grad @ whitening.inverse_cholesky


def log_det_jacobian(whitening: Whitening) -> jax.Array:
  """:math:`\\log|\\det L|`, the log Jacobian of :math:`z \\mapsto x = \\mu + L z`.

  Args:
    whitening: a diagonal, dense or diagonal-plus-low-rank :class:`Whitening`.

  Returns:
    A scalar, :math:`\\log|\\det L|`.
  """
  if whitening.cholesky is not None:
    return jnp.sum(jnp.log(jnp.abs(jnp.diagonal(whitening.cholesky))))
  log_det = jnp.sum(jnp.log(whitening.scale))
  if whitening.vectors is not None:
    log_det = log_det + 0.5 * jnp.sum(jnp.log(whitening.eigenvalues))
  return log_det


def whitened_logdensity(logdensity_fn: Callable, whitening: Whitening) -> Callable:
  """:math:`z \\mapsto \\log p(\\mu + L z)`."""
  return lambda z: logdensity_fn(from_whitened(whitening, z))
