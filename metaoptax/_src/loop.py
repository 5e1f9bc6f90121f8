"""The host loop of the training drivers: any jitted ``step(state) -> (state, info)``,
run for a number of iterations with progress, checkpoints and resumption.

L2O meta-training and L2HMC training are each an ``init`` (the state), a
``build_*_step`` (a pure, jit-able step) and a thin ``train`` over :func:`run`,
which

* places the state on the devices (``place``, e.g. a batch split over a mesh);
* resumes from the latest checkpoint in ``checkpoint_dir`` (``metaoptax.checkpoint``)
  and writes one every ``checkpoint_every`` iterations and at the end, so that
  re-running an interrupted call finishes the run bit for bit;
* reports every ``log_every`` iterations and at the end, as a :class:`Progress`
  (to a tqdm bar by default, to a callback, or nowhere). The host waits for the
  devices only there and at checkpoints; the step itself never syncs.

A run is a pure function of its starting state: neither the report schedule nor
an interruption changes a bit of it.

Several processes (``jax.distributed``, a mesh spanning every process's
devices): every process calls :func:`run` with the same arguments, as the
program is SPMD. The reports are computed on every process from the global
values (the skipped updates are counted in the replicated state; infos sharded
over processes are gathered) and shown by process 0 only; each checkpoint is
one orbax checkpoint written collectively, every process saving its own shards
(``checkpoint_dir`` on a file system all processes share).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import time
from typing import Any, Callable, NamedTuple, Sequence

import jax
import numpy as np

from metaoptax import checkpoint
from metaoptax._src import multihost
from metaoptax._src.multihost import is_main_process
from metaoptax._src.progress import Bar, Progress, ProgressFn

_START_FILE = "start.json"  # fingerprint of the state the run in a checkpoint_dir started from


class LoopResult(NamedTuple):
  """What :func:`run` returns."""

  state: Any  # the state after the last iteration
  infos: Any  # the step's infos of this call, stacked along a new leading axis (host arrays)
  seconds: float  # wall time of the iterations of this call


def check_schedule(log_every: int, checkpoint_every: int,
                   checkpoint_dir: str | os.PathLike | None) -> None:
  """Raises ``ValueError`` unless ``log_every >= 1``, ``checkpoint_every >= 0``, and a
  ``checkpoint_dir`` is given when ``checkpoint_every`` is."""
  if log_every < 1 or checkpoint_every < 0:
    raise ValueError(f"log_every ({log_every}) must be >= 1 and checkpoint_every "
                     f"({checkpoint_every}) >= 0.")
  if checkpoint_every and checkpoint_dir is None:
    raise ValueError("checkpoint_every needs a checkpoint_dir.")


def _cache_key(build: Callable, args: tuple, kwargs: dict) -> tuple | None:
  key = (build, args, tuple(sorted(kwargs.items())))
  try:
    hash(key)
  except TypeError:
    return None
  return key


@functools.lru_cache(maxsize=64)
def _cached_build(build: Callable, args: tuple, kwargs: tuple) -> Callable:
  return build(*args, **dict(kwargs))


@functools.lru_cache(maxsize=64)
def _cached_jit(build: Callable, args: tuple, kwargs: tuple) -> Callable:
  return jax.jit(_cached_build(build, args, kwargs))


def built(build: Callable[..., Callable], *args, **kwargs) -> Callable:
  """``build(*args, **kwargs)``, the same object for equal arguments.

  ``jax.jit`` keeps its traces and executables per function object, so every
  ``jax.jit`` of the returned step (a driver's run, its resumption, a user's own
  loop over ``jax.jit(build_*_step(...))``) shares one compilation. With an
  unhashable argument the step is built for this call only.
  """
  key = _cache_key(build, args, kwargs)
  return build(*args, **kwargs) if key is None else _cached_build(*key)


def jitted(build: Callable[..., Callable], *args, **kwargs) -> Callable:
  """``jax.jit(build(*args, **kwargs))``, one compiled step for equal arguments (the
  jit of :func:`built`'s step, so it shares its compilations)."""
  key = _cache_key(build, args, kwargs)
  return jax.jit(build(*args, **kwargs)) if key is None else _cached_jit(*key)


def _fingerprint(tree: Any) -> str:
  """sha256 of a pytree's structure and leaf bits (typed keys as their key data).

  A collective if a leaf is sharded over several processes (see :func:`run`)."""
  digest = hashlib.sha256(str(jax.tree.structure(tree)).encode())
  for leaf in jax.tree.leaves(multihost.gathered(tree)):
    if multihost.is_prng_key(leaf):
      leaf = jax.random.key_data(leaf)
    leaf = np.asarray(leaf)
    digest.update(f"{leaf.dtype}{leaf.shape}".encode())
    digest.update(np.ascontiguousarray(leaf).tobytes())
  return digest.hexdigest()


def _start(state: Any, chosen: bool, checkpoint_dir: str | os.PathLike | None) -> Any:
  """The state to run from: ``state``, or the latest checkpoint in ``checkpoint_dir``.

  The fingerprint of the state a run started from is kept next to its
  checkpoints. Resuming is a conflict, and an error, if the caller ``chosen`` a
  starting state that is neither the one the checkpointed run started from nor
  its latest checkpoint.
  """
  if checkpoint_dir is None:
    return state
  record = os.path.join(checkpoint_dir, _START_FILE)
  latest = checkpoint.latest_step(checkpoint_dir)
  if latest is None:
    fingerprint = _fingerprint(state)  # on every process: it may gather
    if is_main_process():
      os.makedirs(checkpoint_dir, exist_ok=True)
      with open(record, "w") as f:
        json.dump({"sha256": fingerprint}, f)
    multihost.barrier("metaoptax start record")
    return state
  restored = checkpoint.restore(os.path.join(checkpoint_dir, str(latest)), like=state)
  if chosen and os.path.exists(record):
    with open(record) as f:
      started_from = json.load(f)["sha256"]
    given = _fingerprint(state)
    if given not in (started_from, _fingerprint(restored)):
      raise ValueError(
          f"checkpoint_dir {os.fspath(checkpoint_dir)!r} holds a run (latest checkpoint: "
          f"iteration {latest}) that did not start from the given init_state. Pass no "
          "init_state to resume that run, or another checkpoint_dir to start afresh.")
  return restored


def stack(infos: Sequence[Any], empty_like: Callable[[], Any]) -> Any:
  """Per-iteration infos stacked along a new leading axis, as host arrays.

  Infos sharded over several processes are gathered (a collective).
  ``empty_like()`` gives the structure (e.g. ``jax.eval_shape`` of the step)
  used when there are no infos: zero-length arrays of its shapes and dtypes.
  """
  if not infos:
    return jax.tree.map(lambda x: np.zeros((0,) + tuple(x.shape), x.dtype), empty_like())
  return jax.tree.map(lambda *x: np.stack([np.asarray(v) for v in x]),
                      *multihost.gathered(list(infos)))


def run(step: Callable[[Any], tuple[Any, Any]], state: Any, *, num_iterations: int,
        count: Callable[[Any], Any], summarize: Callable[[Any], tuple[float, dict]],
        label: str, chosen: bool = False, place: Callable[[Any], Any] = lambda s: s,
        progress: str | ProgressFn | None = "bar", log_every: int = 10,
        checkpoint_dir: str | os.PathLike | None = None,
        checkpoint_every: int = 0,
        callback: Callable[[int, Any], None] | None = None) -> LoopResult:
  """Runs ``step`` from ``state`` (or the latest checkpoint) until ``num_iterations``.

  Args:
    step: a jitted ``step(state) -> (state, info)``.
    state: the starting state (placed with ``place``; also the structure a
      checkpoint is restored into).
    num_iterations: iterations of the whole run; a resumed run does the rest.
    count: ``count(state)``, the iterations the state has done.
    summarize: ``summarize(infos)`` of the infos since the previous report,
      stacked along a leading axis: ``(mean loss, {metric: mean})``.
    label: names the loop in the reports.
    chosen: whether the caller chose ``state`` (an ``init_state``): resuming
      a checkpointed run that started elsewhere is then an error.
    place: puts the state on the devices (e.g. a batch split over a mesh).
    progress: ``"bar"`` (a tqdm bar), a callable taking a :class:`Progress`,
      or ``None`` (silence). Reports come from the main process only.
    log_every: iterations between reports.
    checkpoint_dir: where ``<iteration>`` checkpoints are written and resumed from.
    checkpoint_every: iterations between checkpoints (0: only at the end).
    callback: ``callback(iteration, state)`` on the host with the starting
      state (its iteration count) and after every iteration; it decides
      itself when to read the state (reading waits for the devices).

  Returns:
    A :class:`LoopResult`.
  """
  check_schedule(log_every, checkpoint_every, checkpoint_dir)
  if not (progress is None or progress == "bar" or callable(progress)):
    raise ValueError(f"progress must be 'bar', a callable or None, got {progress!r}.")
  state = _start(place(state), chosen, checkpoint_dir)
  first = int(count(state))
  if callback is not None:
    callback(first, state)
  report = None  # shown by process 0 only; every process computes it (it may gather)
  if progress is not None and is_main_process():
    report = Bar(label, first, num_iterations) if progress == "bar" else progress

  infos, reported, last_time = [], 0, time.perf_counter()
  start = last_time
  try:
    for done in range(first + 1, num_iterations + 1):
      state, info = step(state)
      infos.append(info)  # stays on the device until a report
      if callback is not None:
        callback(done, state)
      if progress is not None and (done % log_every == 0 or done == num_iterations):
        loss, metrics = summarize(stack(infos[reported:], lambda: None))
        now = time.perf_counter()
        skipped = getattr(state, "skipped_updates", 0)  # replicated: the global count
        if report is not None:
          report(Progress(label, done, num_iterations, loss, int(skipped),
                          (len(infos) - reported) / max(now - last_time, 1e-12), metrics))
        reported, last_time = len(infos), now
      if checkpoint_dir is not None and (
          (checkpoint_every and done % checkpoint_every == 0) or done == num_iterations):
        checkpoint.save(os.path.join(checkpoint_dir, str(done)), state, overwrite=True)
  finally:
    if isinstance(report, Bar):
      report.close()
  stacked = stack(infos, lambda: jax.eval_shape(step, state)[1])
  return LoopResult(state, stacked, time.perf_counter() - start)


def finite_mean(values: Any) -> float:
  """The mean of the finite entries of ``values`` (NaN if there is none)."""
  values = np.asarray(values)
  finite = np.isfinite(values)
  return float(np.mean(values[finite])) if finite.any() else float("nan")
