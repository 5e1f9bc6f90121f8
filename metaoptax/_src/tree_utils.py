"""Pytree helpers that ``optax.tree_utils`` lacks: widening to float32, finiteness,
float-leaf splitting for forward-mode sensitivities."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp


def wide_dtype(dtype) -> jnp.dtype:
  """float32, or the dtype itself if it is wider (float64)."""
  return jnp.result_type(jnp.float32, dtype)


def widen(tree: Any) -> Any:
  """Casts every floating leaf to float32 or wider."""
  return jax.tree.map(lambda x: x.astype(wide_dtype(x.dtype)), tree)


def check_float_params(params: Any, transformation: str) -> None:
  """Raises a ``ValueError`` naming every params leaf that is not floating-point.

  Integer and boolean leaves have no gradient to follow (``jax.grad`` refuses
  them, and any step size times an integer update rounds to nothing), so an
  optimizer given them would return zero updates forever without a word.
  """
  bad = [
      f"{jax.tree_util.keystr(path) or '<root>'} ({jnp.asarray(leaf).dtype})"
      for path, leaf in jax.tree_util.tree_leaves_with_path(params)
      if not jnp.issubdtype(jnp.asarray(leaf).dtype, jnp.inexact)
  ]
  if bad:
    raise ValueError(
        f"{transformation} needs floating-point params; these leaves are not: "
        f"{', '.join(bad)}. Cast them (e.g. x.astype(jnp.float32)) or keep them "
        "out of the optimized tree (optax.masked / optax.partition).")


def all_finite(tree: Any) -> jax.Array:
  """True when every floating leaf of ``tree`` is finite."""
  leaves = [
      jnp.all(jnp.isfinite(x))
      for x in jax.tree.leaves(tree)
      if jnp.issubdtype(jnp.asarray(x).dtype, jnp.inexact)
  ]
  return jnp.all(jnp.stack(leaves)) if leaves else jnp.asarray(True)


def finite_or_zero(x: jax.Array) -> jax.Array:
  """``x`` where it is finite, 0 elsewhere."""
  return jnp.where(jnp.isfinite(x), x, jnp.zeros_like(x))


@jax.custom_jvp
def product_with_finite_derivative(a: jax.Array, b: jax.Array) -> jax.Array:
  r"""``a * b``, whose derivative reads the non-finite entries of ``a`` and ``b`` as 0.

  :math:`d(ab) = da\, b + a\, db` wherever both factors are finite (the usual
  derivative). Where one is not, the guard discards the product, so the
  cotangent arriving is 0, and ``0 * inf = nan`` would otherwise carry NaN into
  the gradient of everything upstream (the "double where" problem of
  ``jnp.where`` with a non-finite branch): the factors are replaced by 0 inside
  the derivative instead. Costs nothing when not differentiated.
  """
  return a * b


@product_with_finite_derivative.defjvp
def _product_with_finite_derivative_jvp(primals, tangents):
  (a, b), (a_dot, b_dot) = primals, tangents
  return a * b, a_dot * finite_or_zero(b) + finite_or_zero(a) * b_dot


def zeros_unless(pred: jax.Array, tree: Any) -> Any:
  """``tree`` where ``pred`` holds, zeros of the same shapes otherwise."""
  return jax.tree.map(lambda x: jnp.where(pred, x, jnp.zeros_like(x)), tree)


class FloatSplit(NamedTuple):
  """Where the floating leaves of a tree sit, to rebuild it from them."""

  treedef: Any
  leaves: list
  float_index: tuple


def split_floats(tree: Any) -> tuple[tuple, FloatSplit]:
  """The floating leaves of ``tree`` (widened to float32+) and how to put them back.

  Integer leaves (step counters) carry no sensitivities, so only the floating
  leaves of an optimizer state are differentiated.
  """
  leaves, treedef = jax.tree.flatten(tree)
  index = tuple(
      i for i, x in enumerate(leaves) if jnp.issubdtype(jnp.asarray(x).dtype, jnp.inexact)
  )
  floats = tuple(widen(leaves[i]) for i in index)
  return floats, FloatSplit(treedef, leaves, index)


def merge_floats(floats: tuple, split: FloatSplit) -> Any:
  """Inverse of :func:`split_floats` (floats cast back to the original dtypes)."""
  leaves = list(split.leaves)
  for i, x in zip(split.float_index, floats):
    leaves[i] = x.astype(jnp.asarray(leaves[i]).dtype)
  return jax.tree.unflatten(split.treedef, leaves)
