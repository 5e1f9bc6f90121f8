"""Block layouts: which learned step size each weight uses.

A layout is the block map ``b: {1..n} -> {1..m}`` of the paper: weight ``i`` is
scaled by ``alpha[b(i)]``. The meta-parameters ``beta`` live in a *beta tree*:

* ``"scalar"``: one step size, ``beta.shape == (1,)``;
* ``"per_leaf"``: one per parameter array (layer-wise), ``beta.shape == (L,)``;
* labels (a pytree of integer arrays, or a callable ``params -> labels``):
  ``beta.shape == (m,)`` with ``m = max(label) + 1``;
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

from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from metaoptax._src import sharding

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


class BlockLayout:
  """A resolved block map for one params structure (static, not a pytree)."""

  def __init__(self, kind: str, treedef, shapes, labels=None, num_blocks=1):
    self.kind = kind
    self.treedef = treedef
    self.shapes = shapes
    self.labels = labels  # list of numpy int arrays (kind == "labels")
    self.num_blocks = num_blocks

  # beta trees ---------------------------------------------------------------
  def init_beta(self, value: float, params: Any) -> Any:
    """A beta tree filled with ``value`` (float32 or wider, per leaf).

    Weight-wise, each leaf is made ``full_like`` its params leaf, so it is
    sharded like it (eagerly too, not only under ``jit``).
    """
    dtypes = state_dtypes(params)
    if self.kind == "per_param":
      leaves = [jnp.full_like(p, value, d) for p, d in zip(jax.tree.leaves(params), dtypes)]
      return jax.tree.unflatten(self.treedef, leaves)
    return jnp.full((self.num_blocks,), value, _widest(dtypes))

  def expand(self, beta: Any, like: Any = None) -> Any:
    """Per-weight values: a params-shaped tree of arrays broadcastable to params.

    Per-weight labels gather ``beta[labels]``; with ``like`` (the params) the
    gathered leaves are laid out like the params under explicit sharding.
    """
    if self.kind == "per_param":
      return beta
    if self.kind == "scalar":
      leaves = [beta[0]] * len(self.shapes)
    elif self.kind == "per_leaf":
      leaves = [beta[k] for k in range(len(self.shapes))]
    else:
      leaves = [beta[lab] for lab in self.labels]
      if like is not None:
        leaves = [x if lab.ndim == 0 else sharding.reshard_like(x, p)
                  for x, lab, p in zip(leaves, self.labels, jax.tree.leaves(like))]
    return jax.tree.unflatten(self.treedef, leaves)

  def reduce(self, tree: Any) -> Any:
    """Per-block sums ``r[j] = sum_{i: b(i)=j} x[i]`` of a params-shaped tree."""
    if self.kind == "per_param":
      return tree
    leaves = jax.tree.leaves(tree)
    if self.kind == "scalar":
      return jnp.stack([sum(jnp.sum(x) for x in leaves)]) if leaves else jnp.zeros((1,))
    if self.kind == "per_leaf":
      return jnp.stack([jnp.sum(x) for x in leaves])
    total = None
    for x, lab in zip(leaves, self.labels):
      if lab.ndim == 0:
        part = jnp.zeros((self.num_blocks,), x.dtype).at[int(lab)].add(jnp.sum(x))
      else:
        part = sharding.segment_sum(x, lab, self.num_blocks)
      total = part if total is None else total + part
    return jnp.zeros((self.num_blocks,)) if total is None else total  # no params arrays


def resolve(blocks: Any, params: Any) -> BlockLayout:
  """Resolves a block specification against a params pytree."""
  leaves, treedef = jax.tree.flatten(params)
  shapes = [jnp.shape(x) for x in leaves]
  if isinstance(blocks, str):
    if blocks == "scalar":
      return BlockLayout("scalar", treedef, shapes, num_blocks=1)
    if blocks == "per_leaf":
      if not leaves:
        raise ValueError("blocks='per_leaf' needs at least one parameter array.")
      return BlockLayout("per_leaf", treedef, shapes, num_blocks=len(leaves))
    if blocks == "per_param":
      return BlockLayout(
          "per_param", treedef, shapes, num_blocks=sum(int(np.prod(s)) for s in shapes)
      )
    validate_blocks_spec(blocks)
  labels = blocks(params) if callable(blocks) else blocks
  return _labels_layout(labels, treedef, shapes)


def _labels_layout(labels, treedef, shapes) -> BlockLayout:
  label_leaves, label_treedef = jax.tree.flatten(labels)
  if label_treedef != treedef:
    raise ValueError(
        "blocks labels do not match the params structure:\n"
        f"  labels: {label_treedef}\n  params: {treedef}"
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
  return BlockLayout("labels", treedef, shapes, labels=out, num_blocks=num_blocks)


def _widest(dtypes) -> jnp.dtype:
  return jnp.result_type(jnp.float32, *dtypes) if dtypes else jnp.dtype(jnp.float32)


def state_dtypes(params: Any) -> list:
  """Dtype of the meta state for each leaf: float32, or wider if params are wider."""
  return [jnp.result_type(jnp.float32, jnp.asarray(x).dtype) for x in jax.tree.leaves(params)]


Labels = Any
BlockSpec = str | Labels | Callable[[Any], Labels]
