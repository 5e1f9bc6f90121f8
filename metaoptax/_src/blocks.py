"""Block layouts: which learned step size each weight uses.

A layout is the block map ``b: {1..n} -> {1..m}`` of the paper: weight ``i`` is
scaled by ``alpha[b(i)]``. The meta-parameters ``beta`` live in a *beta tree*:

* labels, one per array or one per weight (a pytree of integer arrays, or a
  callable ``params -> labels``): ``beta.shape == (m,)`` with
  ``m = max(label) + 1``. ``"scalar"`` (one step size, ``beta.shape == (1,)``)
  labels every array 0 and ``"per_leaf"`` (layer-wise, ``beta.shape == (L,)``)
  labels the ``k``-th array ``k``;
* ``"per_param"``: weight-wise, ``beta`` is a params-shaped pytree (so it is
  sharded like the params).

Two operations connect weights and blocks:

* ``expand(beta)`` gives each weight its block's value (a params-shaped tree of
  broadcastable arrays);
* ``reduce(x)`` sums a params-shaped tree over each block:
  ``reduce(x)[j] = sum_{i: b(i) = j} x[i]``; with ``x = h * g`` this is the
  Hessian-free meta-gradient ``s = H^T g``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from metaoptax._src import sharding, tree_utils

BLOCK_NAMES = ("scalar", "per_leaf", "per_param")


def validate_blocks_spec(blocks: Any) -> None:
  """Raises ``ValueError`` for a block specification that can never be valid."""
  if isinstance(blocks, str):
    if blocks not in BLOCK_NAMES:
      raise ValueError(
          f"Unknown blocks={blocks!r}; expected one of {BLOCK_NAMES}, a pytree "
          "of integer labels matching params, or a callable params -> labels."
      )
  elif blocks is None:
    raise ValueError(
        "blocks=None is not a layout; use 'scalar', 'per_leaf', 'per_param', "
        "labels or a callable."
    )


@dataclasses.dataclass(frozen=True, eq=False)
class BlockLayout:
  """A resolved block map for one params structure (static, not a pytree).

  Two kinds. With ``labels`` (one ``int32`` numpy array per params leaf, either
  0-d: one label for the whole array, or of the leaf's shape: one label per
  weight), ``beta`` is a vector of ``num_blocks`` entries; ``"scalar"`` labels
  every array 0 and ``"per_leaf"`` labels array ``k`` with ``k``. Without
  (``labels=None``, ``"per_param"``), every weight is its own block and ``beta``
  is a params-shaped tree (sharded like the params).
  """

  treedef: Any
  shapes: tuple
  labels: tuple[np.ndarray, ...] | None
  num_blocks: int

  # beta trees ---------------------------------------------------------------
  def init_beta(self, value: float, params: Any) -> Any:
    """A beta tree filled with ``value`` (float32 or wider, per leaf; real for
    complex params: complex64 -> float32).

    Weight-wise, each leaf is made ``full_like`` its params leaf, so it is
    sharded like it (eagerly too, not only under ``jit``).
    """
    dtypes = [tree_utils.real_dtype(d) for d in state_dtypes(params)]
    if self.labels is None:
      leaves = [jnp.full_like(p, value, d) for p, d in zip(jax.tree.leaves(params), dtypes)]
      return jax.tree.unflatten(self.treedef, leaves)
    return jnp.full((self.num_blocks,), value, _widest(dtypes))

  def expand(self, beta: Any, like: Any = None) -> Any:
    """Per-weight values: a params-shaped tree of arrays broadcastable to params.

    A per-array label gives its array one entry of ``beta`` (a scalar);
    per-weight labels gather ``beta[labels]``, laid out like the params leaf of
    ``like`` under explicit sharding.
    """
    if self.labels is None:
      return beta
    leaves = [beta[lab] for lab in self.labels]
    if like is not None:
      leaves = [x if lab.ndim == 0 else sharding.reshard_like(x, p)
                for x, lab, p in zip(leaves, self.labels, jax.tree.leaves(like))]
    return jax.tree.unflatten(self.treedef, leaves)

  def reduce(self, tree: Any) -> Any:
    """Per-block sums ``r[j] = sum_{i: b(i)=j} x[i]`` of a params-shaped tree."""
    if self.labels is None:
      return tree
    leaves = jax.tree.leaves(tree)
    dtype = jnp.result_type(jnp.float32, *leaves)
    # Arrays with one label each: their sums added in leaf order, block by block
    # (the labels are static, so this is a fixed sequence of scalar additions).
    block_sums: dict[int, jax.Array] = {}
    for x, lab in zip(leaves, self.labels):
      if lab.ndim == 0:
        j = int(lab)
        block_sums[j] = jnp.sum(x) if j not in block_sums else block_sums[j] + jnp.sum(x)
    zero = jnp.zeros((), dtype)
    total = jnp.stack([block_sums.get(j, zero) for j in range(self.num_blocks)]).astype(dtype)
    for x, lab in zip(leaves, self.labels):  # one label per weight: segment sums
      if lab.ndim:
        total = total + sharding.segment_sum(x, lab, self.num_blocks)
    return total


def resolve(blocks: Any, params: Any) -> BlockLayout:
  """Resolves a block specification against a params pytree."""
  leaves, treedef = jax.tree.flatten(params)
  shapes = tuple(jnp.shape(x) for x in leaves)
  if isinstance(blocks, str):
    if blocks == "scalar":
      return BlockLayout(treedef, shapes, tuple(np.int32(0) for _ in leaves), 1)
    if blocks == "per_leaf":
      if not leaves:
        raise ValueError("blocks='per_leaf' needs at least one parameter array.")
      return BlockLayout(treedef, shapes, tuple(np.int32(k) for k in range(len(leaves))),
                         len(leaves))
    if blocks == "per_param":
      return BlockLayout(treedef, shapes, None, sum(int(np.prod(s)) for s in shapes))
    validate_blocks_spec(blocks)
  labels = blocks(params) if callable(blocks) else blocks
  return _labels_layout(labels, treedef, shapes)


def _labels_layout(labels, treedef, shapes) -> BlockLayout:
  label_leaves, label_treedef = jax.tree.flatten(labels)
  if label_treedef != treedef:
    hint = ""
    if label_treedef.num_nodes == 1 and label_treedef.num_leaves == 1 and treedef.num_nodes > 1:
      hint = (
          "\nA single label for a tree of params: if this transformation is wrapped in "
          "optax.inject_hyperparams, it called a callable blocks= as a schedule of the "
          "step count. Pass static_args=('blocks',) to inject_hyperparams.")
    raise ValueError(
        "blocks labels do not match the params structure:\n"
        f"  labels: {label_treedef}\n  params: {treedef}{hint}"
    )
  out = []
  for k, (lab, shape) in enumerate(zip(label_leaves, shapes)):
    try:
      lab = np.asarray(lab)
    except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError) as e:
      raise ValueError(
          "blocks labels must be concrete integers (computed from shapes, not "
          "from traced parameter values)."
      ) from e
    if not np.issubdtype(lab.dtype, np.integer):
      raise ValueError(f"blocks labels must be integers; leaf {k} has dtype {lab.dtype}.")
    if lab.ndim and lab.shape != tuple(shape):
      raise ValueError(
          f"blocks labels leaf {k} has shape {lab.shape}, params leaf has shape "
          f"{tuple(shape)}; give one label per weight or one scalar label per array."
      )
    if lab.size and lab.min() < 0:
      raise ValueError(f"blocks labels must be >= 0; leaf {k} has {lab.min()}.")
    out.append(lab.astype(np.int32))
  num_blocks = 1 + max((int(lab.max()) for lab in out if lab.size), default=0)
  return BlockLayout(treedef, shapes, tuple(out), num_blocks)


def _widest(dtypes) -> jnp.dtype:
  return jnp.result_type(jnp.float32, *dtypes) if dtypes else jnp.dtype(jnp.float32)


def state_dtypes(params: Any) -> list:
  """Dtype of the meta state for each leaf: float32, or wider if params are wider."""
  return [jnp.result_type(jnp.float32, jnp.asarray(x).dtype) for x in jax.tree.leaves(params)]


Labels = Any
BlockSpec = str | Labels | Callable[[Any], Labels]
