"""Pytree helpers that ``optax.tree_utils`` lacks: widening to float32, finiteness,
float-leaf splitting for forward-mode sensitivities, the real inner product of
complex params."""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax


def wide_dtype(dtype) -> jnp.dtype:
  """float32, or the dtype itself if it is wider (float64)."""
  return jnp.result_type(jnp.float32, dtype)


def real_dtype(dtype) -> jnp.dtype:
  """The real dtype of ``dtype``'s precision: complex64 -> float32, complex128 -> float64."""
  return jnp.finfo(dtype).dtype


def real_product(h: jax.Array, g: jax.Array, product: Any = jnp.multiply) -> jax.Array:
  r"""The terms :math:`\operatorname{Re}(\bar h \odot g)` of the real inner product of two
  params-shaped arrays; ``product(h, g)`` itself, unchanged, when both are real.

  A learned step size is real, and so is its meta-gradient
  :math:`s = \mathrm d f(w_{t+1}) / \mathrm d\beta` even when the weights are
  complex. Write :math:`w = a + ib` and the loss :math:`f(a, b)` (real). The
  trace is :math:`H = \mathrm dw/\mathrm d\beta = \mathrm da/\mathrm d\beta + i\,
  \mathrm db/\mathrm d\beta` (complex), and the gradient given to an optax
  optimizer for complex params is :math:`g = \partial f/\partial a + i\,\partial f/\partial b`:
  the conjugate of ``jax.grad(f)(w)``, which is
  :math:`\partial f/\partial a - i\,\partial f/\partial b`; descending along
  :math:`-g` is gradient descent on the real pair :math:`(a, b)` (optax's alias
  tests conjugate the gradient the same way). The chain rule over the real
  coordinates gives

  .. math::

    s = \sum_i \frac{\partial f}{\partial a_i}\frac{\mathrm d a_i}{\mathrm d\beta}
      + \frac{\partial f}{\partial b_i}\frac{\mathrm d b_i}{\mathrm d\beta}
      = \sum_i \operatorname{Re} h_i \operatorname{Re} g_i + \operatorname{Im} h_i
        \operatorname{Im} g_i
      = \operatorname{Re} \sum_i \bar h_i\, g_i,

  the real part of the conjugate inner product :math:`\langle h, g\rangle =
  h^{\mathsf H} g`: exactly the meta-gradient of the same problem written with
  separate real and imaginary float arrays. It is real-bilinear in
  :math:`(h, g)`, so forward mode differentiates it as it stands.

  Args:
    h: a trace leaf (or a batch of trace columns).
    g: a gradient leaf (or its tangent), broadcastable against ``h``.
    product: the elementwise product to use (e.g.
      :func:`product_with_finite_derivative`).

  Returns:
    The real elementwise terms, in the real dtype of ``h``'s precision.
  """
  if jnp.iscomplexobj(h) or jnp.iscomplexobj(g):
    return jnp.real(product(jnp.conj(h), g))
  return product(h, g)


def widen(tree: Any) -> Any:
  """Casts every floating leaf to float32 or wider (complex64 stays complex64)."""
  return jax.tree.map(lambda x: x.astype(wide_dtype(x.dtype)), tree)


def check_float_params(params: Any, transformation: str) -> None:
  """Raises a ``ValueError`` naming every params leaf that is not floating-point
  (real or complex).

  Integer and boolean leaves have no gradient to follow (``jax.grad`` refuses
  them, and any step size times an integer update rounds to nothing), so an
  optimizer given them would return zero updates forever without a word.
  """
  bad = _leaves_not_of(params, jnp.inexact)
  if bad:
    raise ValueError(
        f"{transformation} needs floating-point params; these leaves are not: "
        f"{', '.join(bad)}. Cast them (e.g. x.astype(jnp.float32)) or keep them "
        "out of the optimized tree (optax.masked / optax.partition).")


def check_real_params(params: Any, transformation: str, reason: str) -> None:
  """Raises a ``ValueError`` naming every complex params leaf, for a method
  derived for real weights only (``reason`` says why)."""
  bad = _leaves_not_of(params, jnp.floating)
  if bad:
    raise ValueError(
        f"{transformation} does not support complex params ({reason}); these leaves are "
        f"complex: {', '.join(bad)}. Use metaoptax.metaoptimize or a preset, which do.")


def _leaves_not_of(params: Any, kind) -> list[str]:
  """``"path (dtype)"`` of every params leaf whose dtype is not a ``kind``."""
  return [
      f"{jax.tree_util.keystr(path) or '<root>'} ({jnp.asarray(leaf).dtype})"
      for path, leaf in jax.tree_util.tree_leaves_with_path(params)
      if not jnp.issubdtype(jnp.asarray(leaf).dtype, kind)
  ]


def instances_of(tree: Any, kind: type) -> list:
  """The nodes of ``tree`` that are instances of ``kind`` (e.g. a state NamedTuple
  inside an ``optax.chain``'s state), in tree order."""
  is_kind = lambda x: isinstance(x, kind)
  return [x for x in jax.tree.leaves(tree, is_leaf=is_kind) if is_kind(x)]


def per_partition(state: Any, kind: type, read: Callable[[Any], Any], name: str) -> Any:
  """``read`` of the one ``kind`` node of ``state``; or, when ``state`` holds several, each
  in a partition of one ``optax.multi_transform``, ``{label: ...}`` of the partitions that
  hold one (the same rule inside each, so nested partitions give nested dicts)."""
  found = instances_of(state, kind)
  if len(found) == 1:
    return read(found[0])
  partitions = instances_of(state, optax.MultiTransformState)
  if found and len(partitions) == 1:
    held = {label: inner for label, inner in partitions[0].inner_states.items()
            if instances_of(inner, kind)}
    if sum(len(instances_of(inner, kind)) for inner in held.values()) == len(found):
      return {label: per_partition(inner, kind, read, name) for label, inner in held.items()}
  raise ValueError(f"{name}: expected exactly one {kind.__name__} in the optimizer state, or "
                   f"one in each partition of an optax.multi_transform, found {len(found)}.")


def all_finite(tree: Any) -> jax.Array:
  """True when every floating leaf of ``tree`` is finite."""
  # sum(x - x) is 0 when every entry of x is finite and NaN otherwise (x - x is exactly 0
  # for finite x; inf - inf and NaN are NaN, and NaN absorbs the sum, which cannot
  # overflow): one arithmetic reduction, which XLA:CPU fuses with the read of x, where
  # all(isfinite(x)) writes a boolean array first and reduces it in a second kernel.
  leaves = [
      jnp.isfinite(jnp.sum(x - x))
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


def nan_to_zero(tree: Any) -> Any:
  """NaN entries -> 0 (infinite ones kept): a tangent that is NaN where an update is not
  differentiable, e.g. ``sqrt(v)`` at ``v = 0`` times a zero tangent."""
  return jax.tree.map(lambda x: jnp.where(jnp.isnan(x), jnp.zeros_like(x), x), tree)


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
