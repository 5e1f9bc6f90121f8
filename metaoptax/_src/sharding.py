"""Keeping the state laid out like the params on meshes with *explicit* sharding.

On a ``jax.sharding.Mesh`` whose axes are ``AxisType.Auto`` (the default of
``Mesh(...)``) XLA propagates shardings through a jitted step and nothing here
is needed. With ``AxisType.Explicit`` axes (the default of ``jax.make_mesh``)
a sharding is part of an array's type: an elementwise op between a sharded and
an unsharded array of one shape, a scatter whose output sharding is ambiguous,
or a tangent whose sharding differs from its primal's are type errors. These
helpers make those three places explicit; each is a no-op unless its reference
array's type carries an explicit sharding.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import AxisType, PartitionSpec


def explicit_spec(x: Any) -> PartitionSpec | None:
  """``x``'s PartitionSpec if its type carries an explicit sharding, else ``None``."""
  sharding = getattr(jax.typeof(x), "sharding", None)
  mesh = getattr(sharding, "mesh", None)
  if mesh is None or AxisType.Explicit not in tuple(getattr(mesh, "axis_types", ())):
    return None
  return sharding.spec


def any_explicit(tree: Any) -> bool:
  """Whether any leaf of ``tree`` has an explicit sharding in its type."""
  return any(explicit_spec(x) is not None for x in jax.tree.leaves(tree))


def reshard_like(x: jax.Array, like: Any, leading: int = 0) -> jax.Array:
  """``x`` sharded as ``like``, with ``leading`` extra unsharded leading axes."""
  spec = explicit_spec(like)
  if spec is None:
    return x
  target = PartitionSpec(*([None] * leading), *spec)
  if explicit_spec(x) == target:
    return x
  return jax.sharding.reshard(x, target)


def replicated(tree: Any) -> Any:
  """Every leaf replicated (an all-gather) if its type carries an explicit sharding."""
  def leaf(x):
    spec = explicit_spec(x)
    return x if spec is None or all(a is None for a in spec) else (
        jax.sharding.reshard(x, PartitionSpec()))
  return jax.tree.map(leaf, tree)


def tree_reshard_like(tree: Any, like: Any, leading: int = 0) -> Any:
  return jax.tree.map(lambda x, y: reshard_like(x, y, leading), tree, like)


def segment_sum(data: jax.Array, segment_ids, num_segments: int) -> jax.Array:
  """``r[j] = sum_{i: ids[i] = j} data[i]`` over all entries, ``r`` replicated.

  ``segment_ids`` has ``data``'s shape (a concrete integer array). A scatter-add
  indexed by the ids in ``data``'s own shape (no flattening, which would
  regroup a leaf sharded over two mesh axes): each device sums its shard, then
  one all-reduce of ``num_segments`` numbers. Under explicit sharding the ids
  are laid out like the data and the output is declared replicated.
  """
  ids = jnp.asarray(segment_ids)
  out = jnp.zeros((num_segments,), data.dtype)
  spec = explicit_spec(data)
  if spec is None:
    return out.at[ids].add(data)
  return out.at[jax.sharding.reshard(ids, spec)].add(data, out_sharding=PartitionSpec())
