"""A bias-corrected exponential average of a scalar loss that skips non-finite values."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def exponential_average(average: jax.Array, weight: jax.Array, value: jax.Array,
                        decay: float) -> tuple[jax.Array, jax.Array]:
  """One step of ``average`` and its bias correction ``weight`` (``1 - decay^k``);
  a non-finite ``value`` leaves both as they are."""
  finite = jnp.isfinite(value)
  return (jnp.where(finite, decay * average + (1 - decay) * value, average),
          jnp.where(finite, decay * weight + (1 - decay), weight))


def bias_corrected(average: jax.Array, weight: jax.Array) -> jax.Array:
  """``average / weight`` (the average before any finite value: 0)."""
  return average / jnp.maximum(weight, 1e-30)
