"""Arrays that span several processes (``jax.distributed``, one process per host).

In a multi-process run every process executes the same program (SPMD) and
addresses only its own devices; a ``jax.sharding.Mesh`` over ``jax.devices()``
spans all of them. Two host operations then need care:

* putting a value on such a mesh (``jax.device_put`` accepts only shardings
  whose devices are all local): :func:`put` builds the global array from the
  value every process holds, each process filling its own shards;
* reading a sharded array back (each process holds only its shards):
  :func:`gathered` replicates it, a collective that every process must call at the
  same point of the program.

In a single process they are ``jax.device_put`` and nothing.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec, Sharding


def is_main_process() -> bool:
  """Whether this is process 0 (the one that reports progress and writes small files)."""
  return jax.process_index() == 0


def is_prng_key(x: Any) -> bool:
  """Whether ``x`` is an array of typed PRNG keys (stored and moved as its key data)."""
  return isinstance(x, jax.Array) and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)


def _put_leaf(x: Any, sharding: Sharding) -> jax.Array:
  if is_prng_key(x):
    return jax.random.wrap_key_data(_put_leaf(jax.random.key_data(x), sharding),
                                    impl=jax.random.key_impl(x))
  if isinstance(x, jax.Array) and not x.is_fully_addressable:
    return jax.device_put(x, sharding)  # already global: a reshard between global layouts
  value = np.asarray(x)
  return jax.make_array_from_callback(value.shape, sharding, lambda index: value[index])


def put(tree: Any, sharding: Sharding) -> Any:
  """``jax.device_put(tree, sharding)``, also when ``sharding`` spans other processes.

  Then every process must pass the same values (e.g. a state initialised from
  the same seed): each fills its own devices' shards from its copy. Typed PRNG
  keys are placed as their key data and re-wrapped.
  """
  if sharding.is_fully_addressable:
    return jax.device_put(tree, sharding)
  return jax.tree.map(lambda x: _put_leaf(x, sharding), tree)


def _spread(x: Any) -> bool:
  """Whether ``x`` is an array whose value no single process holds."""
  return (isinstance(x, jax.Array) and not x.is_fully_addressable
          and not x.is_fully_replicated)


def _gather_leaf(x: jax.Array) -> Any:
  """A leaf whose sharding is not a NamedSharding: gathered to a host array."""
  from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
  if is_prng_key(x):
    return jax.random.wrap_key_data(
        np.asarray(multihost_utils.process_allgather(jax.random.key_data(x), tiled=True)),
        impl=jax.random.key_impl(x))
  return np.asarray(multihost_utils.process_allgather(x, tiled=True))


@functools.lru_cache(maxsize=32)
def _replicate(shardings: tuple[NamedSharding, ...]):
  """A jitted identity whose outputs are replicated as ``shardings`` (an all-gather)."""
  return jax.jit(lambda *arrays: arrays, out_shardings=shardings)


def gathered(tree: Any) -> Any:
  """``tree`` with every array sharded over other processes replicated everywhere.

  Then every leaf can be read on each process (``np.asarray``); leaves already
  readable (local or fully replicated arrays, NumPy values, scalars) are
  returned as they are. A collective (one all-gather program for the whole
  tree) when some leaf is sharded over several processes: every process must
  call it at the same point.
  """
  leaves, treedef = jax.tree.flatten(tree)
  spread = [i for i, x in enumerate(leaves) if _spread(x)]
  named = [i for i in spread if isinstance(leaves[i].sharding, NamedSharding)]
  if named:
    replicated = tuple(NamedSharding(leaves[i].sharding.mesh, PartitionSpec()) for i in named)
    arrays = _replicate(replicated)(*(leaves[i] for i in named))
    for i, x in zip(named, arrays):
      leaves[i] = x
  for i in spread:
    if i not in named:
      leaves[i] = _gather_leaf(leaves[i])
  return jax.tree.unflatten(treedef, leaves)


def barrier(name: str) -> None:
  """Waits until every process reaches the barrier ``name`` (nothing with one process)."""
  if jax.process_count() > 1:
    from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
    multihost_utils.sync_global_devices(name)
