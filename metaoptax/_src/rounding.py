r"""Stochastic rounding of float32 state to bfloat16: unbiased storage at half the bytes.

A quantity that moves by small increments, such as a trace :math:`h' = c\,h + \Delta`
summing the weight changes, loses every increment below half a unit in the last place
when stored rounded to nearest. bfloat16 keeps 8 significant bits, so any increment under
:math:`2^{-9}|h|` is lost. Rounding :math:`x` up with probability
:math:`(x - \lfloor x\rfloor) / (\lceil x\rceil - \lfloor x\rfloor)` and down otherwise
makes the stored value unbiased, :math:`\mathbb E[\mathrm{round}(x)] = x`, so the sum of
many increments is kept on average.

The random bits come from a hash of each element's index and a per-step ``seed``,
computed inside the kernel that writes the value: no random array is written or read,
so the rounding adds arithmetic but no memory traffic. The derivative is the identity's:
forward and reverse mode see a plain cast.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

#: Storage dtypes that :func:`stochastic_round` writes.
DTYPES = (jnp.dtype(jnp.bfloat16),)


def check_storage_dtype(name: str, dtype) -> jnp.dtype | None:
  """``None``, or ``dtype`` as a ``jnp.dtype`` if it is one of :data:`DTYPES`."""
  if dtype is None:
    return None
  try:
    dtype = jnp.dtype(dtype)
  except TypeError as error:
    raise ValueError(f"{name}={dtype!r} is not a dtype; use None (float32) or "
                     "jnp.bfloat16.") from error
  if dtype not in DTYPES:
    raise ValueError(f"{name}={dtype} is not supported; use None (float32) or jnp.bfloat16.")
  return dtype


def _hash(x: jax.Array) -> jax.Array:
  """A 32-bit integer hash with good avalanche (C. Wellons' "lowbias32")."""
  x = x ^ (x >> 16)
  x = x * jnp.uint32(0x7FEB352D)
  x = x ^ (x >> 15)
  x = x * jnp.uint32(0x846CA68B)
  return x ^ (x >> 16)


def _index(shape: tuple[int, ...]) -> jax.Array:
  """Each element's flat index (wrapping at 2**32), from one iota per axis: elementwise,
  so XLA computes it inside the kernel that uses it."""
  index = jnp.zeros(shape, jnp.uint32)
  stride = 1
  for axis in reversed(range(len(shape))):
    index = index + lax.broadcasted_iota(jnp.uint32, shape, axis) * jnp.uint32(stride % 2**32)
    stride *= shape[axis]
  return index


@functools.partial(jax.custom_jvp, nondiff_argnums=(1,))
def stochastic_round(x: jax.Array, dtype, seed: jax.Array) -> jax.Array:
  """``x`` (float32) rounded to ``dtype`` (bfloat16) up or down at random, unbiased.

  Args:
    x: a float32 array.
    dtype: ``jnp.bfloat16``.
    seed: a ``uint32`` scalar; a different one each step (and each array) draws new bits.

  Returns:
    ``x`` in ``dtype``: the representable neighbour above or below, with probabilities
    that make the mean ``x``. NaN and inf stay NaN and inf.
  """
  x = jnp.asarray(x, jnp.float32)
  bits = lax.bitcast_convert_type(x, jnp.uint32)
  noise = _hash(_index(x.shape) * jnp.uint32(0x9E3779B1) + _hash(seed.astype(jnp.uint32)))
  # Adding 16 random bits to the magnitude's low half, then dropping that half, rounds the
  # magnitude up with probability (its low half) / 2**16: unbiased for either sign.
  rounded = lax.bitcast_convert_type((bits + (noise >> 16)) & jnp.uint32(0xFFFF0000),
                                     jnp.float32)
  return jnp.where(jnp.isfinite(x), rounded, x).astype(dtype)


@stochastic_round.defjvp
def _stochastic_round_jvp(dtype, primals, tangents):
  x, seed = primals
  return stochastic_round(x, dtype, seed), jnp.asarray(tangents[0], jnp.float32).astype(dtype)


def stochastic_round_tree(tree: Any, dtype, step: jax.Array, salt: int = 0) -> Any:
  """:func:`stochastic_round` of every leaf of ``tree``, with bits of its own for each leaf
  and each ``step`` (an integer scalar); ``salt`` gives another state other bits."""
  leaves, treedef = jax.tree.flatten(tree)
  first = step.astype(jnp.uint32) * jnp.uint32(len(leaves)) ^ jnp.uint32(salt)
  return jax.tree.unflatten(treedef, [stochastic_round(x, dtype, first + jnp.uint32(i))
                                      for i, x in enumerate(leaves)])
