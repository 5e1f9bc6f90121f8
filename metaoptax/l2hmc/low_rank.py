r"""A diagonal-plus-low-rank whitening from draws and their gradients, in the spirit of
nutpie's low-rank Fisher adaptation (Seyboldt, Carlson and Carpenter, 2026).

For a Gaussian :math:`\mathcal N(\mu, \Sigma)` the draws' covariance is :math:`\Sigma` and the
gradients' is :math:`\Sigma^{-1}`; the metric that minimises a Fisher divergence between the
whitened target and a standard normal is the one whose square :math:`M` solves
:math:`M\,\mathrm{Cov}(\nabla\log p)\,M = \mathrm{Cov}(x)`: the geometric mean of
:math:`\mathrm{Cov}(x)` and :math:`\mathrm{Cov}(\nabla\log p)^{-1}`, which uses both. Fitted
from :math:`n` draws of :math:`d` coordinates (:func:`fisher_low_rank`):

1. the diagonal :math:`\sigma_i = \sqrt{\mathrm{sd}(x_i)/\mathrm{sd}(\partial_i\log p)}` (the
   geometric mean per coordinate), and the scaled draws :math:`x_i/\sigma_i` and gradients
   :math:`\sigma_i\,\partial_i\log p`;
2. a subspace :math:`Q` of :math:`2(k + 5)` directions: the leading eigenvectors of the scaled
   draws' covariance and of the scaled gradients' (a randomized range finder with one power
   iteration: :math:`O(n d k)`, no :math:`d\times d` matrix), from half of the chains;
3. the geometric mean of the two covariances projected on :math:`Q`, from the *other* half of
   the chains (each shrunk towards the identity by :math:`5/(n+5)` as the dense metric), its
   eigen-decomposition, the eigenvalues within :math:`[1/c, c]` masked to 1 and the ``k``
   furthest from 1 (in log) kept.

With :math:`d` in the thousands and :math:`n` a few thousand correlated draws, the leading
eigenvectors of a sample covariance are mostly noise (a standard normal's sample covariance
has eigenvalues up to :math:`(1 + \sqrt{d/n})^2`); estimating the eigenvalues on chains that
did not choose the directions masks the noise's, so that a posterior without strong
correlations keeps the diagonal.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from metaoptax.l2hmc.whitening import Whitening

__all__ = ("MAX_RANK", "CUTOFF", "fisher_low_rank", "spd_geometric_mean")

#: :math:`k`, the most directions of the low-rank part.
MAX_RANK = 10
#: :math:`c`: eigenvalues within :math:`[1/c, c]` are masked to 1 (no correction there).
CUTOFF = 2.0
OVERSAMPLING = 5  # extra directions of the range finder per covariance


def spd_geometric_mean(a: jax.Array, b: jax.Array) -> jax.Array:
  r""":math:`A \# B^{-1} = B^{-1/2}(B^{1/2} A B^{1/2})^{1/2} B^{-1/2}` for symmetric positive
  definite ``a`` and ``b``: the symmetric positive definite :math:`M` with :math:`M B M = A`.

  Args:
    a: ``(k, k)`` symmetric positive definite.
    b: ``(k, k)`` symmetric positive definite.

  Returns:
    ``(k, k)``, :math:`M`, symmetrized.
  """
  values, vectors = jnp.linalg.eigh(b)
  root = (vectors * jnp.sqrt(values)) @ vectors.T
  inverse_root = (vectors / jnp.sqrt(values)) @ vectors.T
  inner_values, inner_vectors = jnp.linalg.eigh(root @ a @ root)
  inner = (inner_vectors * jnp.sqrt(jnp.maximum(inner_values, 0.0))) @ inner_vectors.T
  mean = inverse_root @ inner @ inverse_root
  return 0.5 * (mean + mean.T)


def _leading_subspace(key, data: jax.Array, width: int) -> jax.Array:
  """``(dim, width)`` orthonormal columns spanning the leading eigenvectors of
  ``data.T @ data`` (``data``: ``(n, dim)``), by a randomized range finder with one power
  iteration, never forming a ``dim x dim`` matrix."""
  probes = jax.random.normal(key, (data.shape[1], width), data.dtype)
  sketch = data.T @ (data @ probes)
  sketch = jnp.linalg.qr(sketch)[0]
  return jnp.linalg.qr(data.T @ (data @ sketch))[0]


def _shrunk_covariance(data: jax.Array) -> jax.Array:
  """The covariance of ``data`` ``(n, width)`` (centred already), shrunk towards the identity
  by ``5 / (n + 5)``."""
  n = data.shape[0]
  covariance = data.T @ data / max(n - 1, 1)
  eye = jnp.eye(data.shape[1], dtype=data.dtype)
  return n / (n + 5.0) * covariance + 5.0 / (n + 5.0) * eye


def fisher_low_rank(rng_key: jax.Array, positions: jax.Array, gradients: jax.Array,
                    location: jax.Array | None = None, *, max_rank: int = MAX_RANK,
                    cutoff: float = CUTOFF) -> Whitening:
  r"""The diagonal-plus-low-rank whitening of draws and their gradients (module docstring).

  Args:
    rng_key: PRNG key (the range finder's probes).
    positions: ``(draws, chains, dim)`` draws of at least 2 chains (the subspace from the
      even-numbered chains, the eigenvalues from the odd-numbered ones).
    gradients: ``(draws, chains, dim)`` :math:`\nabla\log p` at ``positions``.
    location: the whitening's :math:`\mu` (default: the draws' mean).
    max_rank: ``k``, the most directions kept.
    cutoff: ``c``; eigenvalues within :math:`[1/c, c]` become 1.

  Returns:
    A :class:`metaoptax.l2hmc.Whitening` with ``vectors`` ``(dim, min(k, width))`` and
    ``eigenvalues`` (1 where masked: the diagonal :math:`\sigma` alone where all are). Where
    the fit is not finite, the diagonal of the draws' standard deviations.

  Jit-able; :math:`O(n\,d\,k)`.
  """
  dim = positions.shape[-1]
  mean = jnp.mean(positions, (0, 1))
  location = mean if location is None else location
  x = positions - mean
  g = gradients - jnp.mean(gradients, (0, 1))
  sd_x, sd_g = jnp.std(x, (0, 1)), jnp.std(g, (0, 1))
  sigma = jnp.sqrt(sd_x / sd_g)
  sigma = jnp.where(jnp.isfinite(sigma) & (sigma > 0), sigma, sd_x)
  x, g = x / sigma, g * sigma
  fit, held_out = (a.reshape(-1, dim) for a in (x[:, 0::2], x[:, 1::2]))
  fit_g, held_out_g = (a.reshape(-1, dim) for a in (g[:, 0::2], g[:, 1::2]))
  width = min(max_rank + OVERSAMPLING, dim)
  k_x, k_g = jax.random.split(rng_key)
  subspace = jnp.concatenate([_leading_subspace(k_x, fit, width),
                              _leading_subspace(k_g, fit_g, width)], axis=1)
  subspace = jnp.linalg.qr(subspace)[0]
  projected_x = held_out @ subspace
  projected_g = held_out_g @ subspace
  metric = spd_geometric_mean(_shrunk_covariance(projected_x - projected_x.mean(0)),
                              _shrunk_covariance(projected_g - projected_g.mean(0)))
  eigenvalues, rotation = jnp.linalg.eigh(metric)
  outside = (eigenvalues > cutoff) | (eigenvalues < 1.0 / cutoff)
  eigenvalues = jnp.where(outside, eigenvalues, 1.0)
  keep = jnp.argsort(-jnp.abs(jnp.log(eigenvalues)))[:min(max_rank, eigenvalues.shape[0])]
  vectors = subspace @ rotation[:, keep]
  found = Whitening(location, sigma, vectors=vectors, eigenvalues=eigenvalues[keep])
  finite = jnp.all(jnp.array([jnp.all(jnp.isfinite(leaf)) for leaf in jax.tree.leaves(found)]))
  finite = finite & jnp.all(found.eigenvalues > 0)
  fallback = Whitening(location, sd_x, vectors=jnp.zeros_like(vectors),
                       eigenvalues=jnp.ones_like(found.eigenvalues))
  return jax.tree.map(lambda a, b: jnp.where(finite, a, b), found, fallback)
