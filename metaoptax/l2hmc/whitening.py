r"""A fixed diagonal preconditioner: the sampler moves :math:`z = (x - \mu)/\sigma`.

With :math:`x = \mu + \sigma \odot z`, the target in :math:`z` is
:math:`\log p_z(z) = \log p(\mu + \sigma \odot z) + \text{const}` and
:math:`\nabla_z \log p_z = \sigma \odot \nabla_x \log p`. The map is linear and the
same before and after a transition, so its Jacobian cancels in the
Metropolis-Hastings ratio: running the generalized leapfrog in :math:`z` is a
valid sampler of :math:`p`. With the networks off and step size :math:`h`, it is
HMC with the inverse mass matrix :math:`\mathrm{diag}(\sigma^2)` (what window
adaptation tunes for NUTS); with the networks on, they see standardized
positions and forces (the same scale in every coordinate), and
``per_coordinate`` step sizes are multipliers on top of :math:`\sigma`.
:math:`\mu, \sigma` come from :func:`metaoptax.l2hmc.warmup`.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax

__all__ = ("Whitening",)


class Whitening(NamedTuple):
  """:math:`x = \\mu + \\sigma \\odot z`."""

  location: jax.Array  # (dim,) mu
  scale: jax.Array  # (dim,) sigma > 0


def to_whitened(whitening: Whitening, x: jax.Array) -> jax.Array:
  return (x - whitening.location) / whitening.scale


def from_whitened(whitening: Whitening, z: jax.Array) -> jax.Array:
  return whitening.location + whitening.scale * z


def whitened_logdensity(logdensity_fn: Callable, whitening: Whitening) -> Callable:
  """:math:`z \\mapsto \\log p(\\mu + \\sigma \\odot z)`."""
  return lambda z: logdensity_fn(from_whitened(whitening, z))
