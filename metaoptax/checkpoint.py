"""Saving and restoring any metaoptax state (optimizer, meta-training, sampler) with orbax.

A checkpoint is an orbax ``StandardCheckpointer`` directory holding the leaves of
one pytree. :func:`restore` rebuilds the pytree of ``like`` (a state of the same
structure, e.g. a freshly initialised one): same tree, shapes, dtypes and, for
``jax.Array`` leaves, the same shardings, so a state sharded over a
``jax.sharding.Mesh`` comes back sharded the same way. Values are stored
exactly, so a run resumed from a checkpoint continues bit for bit.

What is handled beyond plain arrays:

* typed PRNG keys (``jax.random.key``) are stored as their ``key_data`` and
  re-wrapped with the implementation of the key in ``like``;
* zero-size arrays (which orbax refuses) are not written; they come back as
  empty arrays of ``like``'s shape, dtype and sharding;
* Python and NumPy scalars come back as the type of the leaf in ``like``;
* ``jax.ShapeDtypeStruct`` leaves in ``like`` (no key arrays) restore to
  ``jax.Array`` with the struct's sharding (the default device if none).

The tree paths, shapes and dtypes are recorded with the checkpoint; restoring
into a ``like`` that differs in any of them raises ``ValueError`` naming the
first differing leaf (nothing is silently cast or reshaped).

Examples:
  >>> import os, tempfile, jax, jax.numpy as jnp, metaoptax
  >>> from metaoptax import checkpoint
  >>> optimizer = metaoptax.presets.adamw_adam(1e-3)
  >>> state = (optimizer.init({"w": jnp.ones(3)}), jax.random.key(0))
  >>> path = os.path.join(tempfile.mkdtemp(), "100")
  >>> checkpoint.save(path, state)
  >>> restored = checkpoint.restore(path, like=state)
  >>> jax.tree.structure(restored) == jax.tree.structure(state)
  True
"""

from __future__ import annotations

import os
from typing import Any

import jax
import numpy as np

from metaoptax._src import multihost

__all__ = ("save", "restore", "latest_step")

_FORMAT = 1
_COUNT = "num_leaves"  # always written, so even an empty tree makes a valid checkpoint


def _describe(path, leaf) -> list:
  """``[path, kind, shape, dtype]`` of one leaf, as recorded in the checkpoint."""
  if multihost.is_prng_key(leaf):
    kind = "key"
  elif isinstance(leaf, (jax.Array, jax.ShapeDtypeStruct)):
    kind = "array"
  elif isinstance(leaf, (np.ndarray, np.generic)):
    kind = "numpy"
  elif isinstance(leaf, (bool, int, float, complex)):
    kind = "python"
    leaf = np.asarray(leaf)
  else:
    raise TypeError(f"Cannot checkpoint the leaf at {jax.tree_util.keystr(path)} of type "
                    f"{type(leaf).__name__}: leaves must be arrays, PRNG keys or numbers.")
  return [jax.tree_util.keystr(path), kind, list(leaf.shape), str(leaf.dtype)]


def _name(i: int) -> str:
  return f"leaf_{i:06d}"


def save(directory: str | os.PathLike, pytree: Any, *, overwrite: bool = False) -> None:
  """Writes ``pytree`` to ``directory`` (synchronously; created, must not exist).

  Args:
    directory: the checkpoint directory (one per saved state, e.g. ``ckpt/100``).
    pytree: any pytree of arrays (``jax.Array``, sharded or not, typed PRNG
      keys, NumPy arrays) and Python or NumPy scalars.
    overwrite: replace an existing checkpoint at ``directory``.

  Raises:
    ValueError: if ``directory`` exists and ``overwrite`` is False.
  """
  import orbax.checkpoint as ocp  # heavy import, only when checkpointing

  leaves = jax.tree_util.tree_flatten_with_path(pytree)[0]
  layout = [_describe(path, leaf) for path, leaf in leaves]
  arrays = {_COUNT: np.asarray(len(leaves), np.int32)}  # 0-d: orbax 0.11.20 rejected np.int32
  several = jax.process_count() > 1
  for i, ((_, leaf), (_, kind, shape, _)) in enumerate(zip(leaves, layout)):
    if kind == "key":
      leaf = jax.random.key_data(leaf)
    elif kind == "python":
      leaf = np.asarray(leaf)
    if several and isinstance(leaf, jax.Array) and leaf.is_fully_addressable:
      leaf = np.asarray(leaf)  # a process-local array (the same on every process)
    if int(np.prod(shape)) > 0:
      arrays[_name(i)] = leaf
  with ocp.StandardCheckpointer() as checkpointer:
    try:
      checkpointer.save(os.path.abspath(directory), arrays, force=overwrite,
                        custom_metadata={"metaoptax_checkpoint": _FORMAT, "leaves": layout})
    except ValueError as error:
      if overwrite or "already exists" not in str(error):
        raise
      raise ValueError(f"A checkpoint already exists at {os.fspath(directory)!r}; pass "
                       "overwrite=True to replace it.") from error


def _target(leaf) -> Any:
  """What orbax should restore for one leaf of ``like`` (a shape, dtype and sharding)."""
  if multihost.is_prng_key(leaf):
    leaf = jax.random.key_data(leaf)
  if isinstance(leaf, jax.Array):
    return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=leaf.sharding)
  if isinstance(leaf, jax.ShapeDtypeStruct):
    # no sharding given: this process's first device (jax.devices()[0] belongs to
    # process 0 on a multi-host run)
    sharding = leaf.sharding or jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
    return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=sharding)
  leaf = np.asarray(leaf)
  return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype)  # restored as np.ndarray


def _empty(target) -> Any:
  if target.sharding is None:
    return np.zeros(target.shape, target.dtype)
  return multihost.put(np.zeros(target.shape, target.dtype), target.sharding)


def _rebuild(like_leaf, kind: str, value) -> Any:
  if kind == "key":
    return jax.random.wrap_key_data(value, impl=jax.random.key_impl(like_leaf))
  if kind == "numpy" and isinstance(like_leaf, np.generic):
    return np.asarray(value)[()]
  if kind == "python":
    return type(like_leaf)(np.asarray(value).item())
  return value


def _first_difference(saved: list, wanted: list) -> str | None:
  """What differs at the first leaf (in tree order) where two layouts of ``_describe`` differ."""
  saved_paths = {leaf[0] for leaf in saved}
  wanted_paths = {leaf[0] for leaf in wanted}
  for i in range(max(len(saved), len(wanted))):
    have = saved[i] if i < len(saved) else None
    want = wanted[i] if i < len(wanted) else None
    if have is not None and have[0] not in wanted_paths:
      return f"the checkpoint has a leaf {have[0]} that `like` lacks"
    if want is not None and want[0] not in saved_paths:
      return f"`like` has a leaf {want[0]} that the checkpoint lacks"
    if have[0] != want[0]:
      return (f"leaf {i} is {have[0]} in the checkpoint but {want[0]} in `like` (the same "
              "keys in another order)")
    for field, index in (("shape", 2), ("dtype", 3)):
      if have[index] != want[index]:
        show = tuple if field == "shape" else str
        return (f"the leaf {have[0]} has {field} {show(have[index])} in the checkpoint, "
                f"{field} {show(want[index])} in `like`")
  return None


def restore(directory: str | os.PathLike, like: Any) -> Any:
  """Reads the checkpoint at ``directory`` into the structure of ``like``.

  Args:
    directory: a directory written by :func:`save`.
    like: a pytree of the saved structure (e.g. a fresh state from ``init``);
      its values are ignored, its shapes, dtypes and shardings are used.

  Returns:
    The saved pytree, with ``like``'s structure, dtypes and shardings.

  Raises:
    FileNotFoundError: if ``directory`` does not exist.
    ValueError: if ``directory`` is not a metaoptax checkpoint, or ``like``
      differs from the saved tree in paths, shapes or dtypes.
  """
  import orbax.checkpoint as ocp

  directory = os.path.abspath(directory)
  if not os.path.isdir(directory):
    raise FileNotFoundError(f"No checkpoint at {directory}.")
  leaves, treedef = jax.tree_util.tree_flatten_with_path(like)
  layout = [_describe(path, leaf) for path, leaf in leaves]
  with ocp.StandardCheckpointer() as checkpointer:
    metadata = checkpointer.metadata(directory).custom_metadata or {}
    if metadata.get("metaoptax_checkpoint") != _FORMAT:
      raise ValueError(f"{directory} is not a metaoptax checkpoint (written by "
                       "metaoptax.checkpoint.save).")
    difference = _first_difference(metadata["leaves"], layout)
    if difference:
      raise ValueError(f"`like` does not match the checkpoint at {directory}: {difference} "
                       f"(the checkpoint has {len(metadata['leaves'])} leaves, `like` has "
                       f"{len(layout)}).")
    targets = [_target(leaf) for _, leaf in leaves]
    request = {_COUNT: jax.ShapeDtypeStruct((), np.int32)}
    request.update({_name(i): t for i, t in enumerate(targets) if int(np.prod(t.shape)) > 0})
    values = checkpointer.restore(directory, request)
  out = [
      _rebuild(leaf, kind, values[_name(i)] if _name(i) in values else _empty(target))
      for i, ((_, leaf), (_, kind, _, _), target) in enumerate(zip(leaves, layout, targets))
  ]
  return jax.tree.unflatten(treedef, out)


def latest_step(directory: str | os.PathLike) -> int | None:
  """The largest integer-named checkpoint in ``directory`` (``None`` if there is none).

  Loops that checkpoint every few steps write ``directory/<step>``; orbax
  writes to a temporary name and renames when complete, so only finished
  checkpoints count.

  Args:
    directory: the folder the loop saves its checkpoints in.

  Returns:
    The largest ``step`` with a folder ``directory/<step>``, or ``None`` when the folder
    does not exist or holds none.
  """
  if not os.path.isdir(directory):
    return None
  steps = [int(name) for name in os.listdir(directory) if name.isdigit()
           and os.path.isdir(os.path.join(directory, name))]
  return max(steps) if steps else None
