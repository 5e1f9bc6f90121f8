"""Data parallelism for the training loops: a batch axis sharded over a device mesh.

The batch (tasks of meta-training, chains of the sampler) is split along its
leading axis over the devices of the mesh axes ``data_axis``; everything else
(network weights, optimizer state, PRNG key, counters) is replicated. Inside
``jax.jit`` the shardings are imposed with ``jax.lax.with_sharding_constraint``
and XLA turns means over the batch into all-reduces: no host round trip.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Sequence

import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from metaoptax._src import multihost


def on_local_device(tree: Any) -> Any:
  """``tree`` committed to this process's first device (the default device).

  JAX compiles a jitted function apart for committed and uncommitted arguments,
  so the initial states are committed as the training loops place them: a
  hand-written loop over a built step and a library loop share one compilation.
  """
  return jax.device_put(tree, jax.local_devices()[0])


class DataParallel(NamedTuple):
  """Where batched and replicated arrays live (``None`` fields: one device, no constraint)."""

  batch: NamedSharding | None
  replicated: NamedSharding | None

  def shard_batch(self, tree: Any) -> Any:
    """Constrains (inside jit) every leaf of ``tree`` to be split along its leading axis."""
    if self.batch is None:
      return tree
    return jax.lax.with_sharding_constraint(tree, self.batch)

  def replicate(self, tree: Any) -> Any:
    """Constrains (inside jit) every leaf of ``tree`` to be replicated."""
    if self.replicated is None:
      return tree
    return jax.lax.with_sharding_constraint(tree, self.replicated)

  def place(self, tree: Any) -> Any:
    """Puts ``tree`` replicated on every device of the mesh, outside jit.

    Without a mesh, commits it to this process's first device (:func:`on_local_device`), so a fresh state and one
    restored from a checkpoint (committed) share one compiled step. On a mesh
    spanning several processes, every process passes the same ``tree``.
    """
    if self.replicated is None:
      return on_local_device(tree)
    return multihost.put(tree, self.replicated)

  def place_batch(self, tree: Any) -> Any:
    """Puts ``tree`` split along its leading axis over the mesh, outside jit (without a
    mesh: committed to the default device). On a mesh spanning several
    processes, every process passes the same (whole) ``tree`` and keeps its
    devices' part."""
    if self.batch is None:
      return on_local_device(tree)
    return multihost.put(tree, self.batch)


def hashable_axis(axis: str | Sequence[str] | None) -> str | tuple[str, ...] | None:
  """A mesh axis name or names in a hashable form (part of a jit cache key)."""
  return axis if axis is None or isinstance(axis, str) else tuple(axis)


def data_parallel(mesh: Mesh | None, data_axis: str | Sequence[str] | None,
                  batch_size: int, what: str) -> DataParallel:
  """The shardings of a batch of ``batch_size`` over ``mesh`` (all its axes by default).

  Raises ``ValueError`` if an axis is not in the mesh or ``batch_size`` (named
  ``what`` in the message) does not split evenly over the devices of the axes.
  """
  if mesh is None:
    if data_axis is not None:
      raise ValueError("data_axis is given but mesh is None.")
    return DataParallel(None, None)
  axes = tuple(mesh.axis_names) if data_axis is None else (
      (data_axis,) if isinstance(data_axis, str) else tuple(data_axis))
  unknown = [a for a in axes if a not in mesh.axis_names]
  if unknown:
    raise ValueError(f"data_axis {unknown} not among the mesh axes {mesh.axis_names}.")
  devices = 1
  for a in axes:
    devices *= mesh.shape[a]
  if batch_size % devices:
    raise ValueError(f"{what} ({batch_size}) must be a multiple of the {devices} devices "
                     f"of the mesh axes {axes}.")
  return DataParallel(NamedSharding(mesh, PartitionSpec(axes)),
                      NamedSharding(mesh, PartitionSpec()))
