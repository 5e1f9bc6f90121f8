"""One method on one problem: a jitted ``lax.scan`` over steps, ``vmap`` over seeds.

The scan is cut into chunks (``chunk`` steps per jitted call); between chunks the
runner evaluates every seed's params (train loss on fixed data, test metric),
records the learned step sizes and advances a progress bar. Minibatches are drawn
inside the scan from the device-resident dataset, so a chunk never leaves XLA.
"""

from __future__ import annotations

import json
import pathlib
import time
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

import metaoptax


class Method(NamedTuple):
  """An optimizer to benchmark (or a family of them, one per value of ``values``).

  Attributes:
    name: label in tables and plots.
    family: group for tables/plots (``"adamw"``, ``"metaoptax"``, ``"contrib"``, ...).
    make: ``h -> optax.GradientTransformation``; ``h`` is one entry of ``values``
      (a traced scalar: every value runs in the same compiled program) or ``None``.
    needs_obj: pass ``obj_fn`` (the minibatch loss) to ``update`` (exact variants).
    eval_params: ``(opt_state, params) -> params`` evaluated (schedule-free's average);
      ``None`` for the params themselves.
    learned_step_size: log the step sizes (``step_sizes_of``, by default
      ``metaoptax.step_sizes``: the state holds a ``MetaOptimizeState``).
    info: free text for the table (e.g. the rate or the start).
    values: hyper-parameter values run side by side (``vmap``), e.g. a rate grid.
    prepare: ``(opt_state, h) -> opt_state`` applied after ``init`` (e.g. to set the
      initial log step size to ``log h``, which ``metaoptimize`` takes as a Python float).
    names: per-value (name, info) pairs when ``values`` is set.
    step_sizes_of: ``opt_state -> step sizes`` of a state without a
      ``MetaOptimizeState`` (with ``learned_step_size``).
    needs_validation_loss: pass ``validation_loss``, the loss on a minibatch of the
      problem's validation split (``problem.val_batch``), to ``update`` at every step.
    needs_validation_grads: pass ``meta_grads``, the gradient of the loss on a minibatch
      of the validation split (the held-out meta-gradient of
      :func:`metaoptax.metaoptimize`), to ``update`` at every step.
  """

  name: str
  family: str
  make: Callable[[Any], Any]
  needs_obj: bool = False
  eval_params: Callable[[Any, Any], Any] | None = None
  learned_step_size: bool = False
  info: str = ""
  values: tuple | None = None
  prepare: Callable[[Any, Any], Any] | None = None
  names: tuple | None = None
  step_sizes_of: Callable[[Any], Any] | None = None
  needs_validation_loss: bool = False
  needs_validation_grads: bool = False


class RunLog(NamedTuple):
  """Curves of one method over seeds; arrays have a leading seed axis."""

  method: Method
  steps: np.ndarray  # (n,) step at each record, starting at 0
  train_loss: np.ndarray  # (seeds, n)
  test: np.ndarray  # (seeds, n)
  step_sizes: np.ndarray | None  # (seeds, n, m) or None
  seconds: float  # wall time of the training steps for all seeds (compile excluded)
  val: np.ndarray | None = None  # (seeds, n): the validation metric, where the problem has one
  test_loss: np.ndarray | None = None  # (seeds, n): the test loss, where the problem gives one
  val_loss: np.ndarray | None = None  # (seeds, n): the validation loss, likewise


#: The :class:`RunLog` fields of optional metrics: recorded where ``problem.evaluate``
#: gives them (a classifier's losses beside its accuracies).
OPTIONAL_METRICS = ("test_loss", "val_loss")


def train(problem, method: Method, *, steps: int, seeds: int, chunk: int,
          progress: Callable[..., Any], seed_per_value: bool = False) -> list[RunLog]:
  """Trains ``seeds`` runs of ``method`` (per value of ``method.values``) for ``steps`` steps.

  Returns one :class:`RunLog` per value (one in all if ``values`` is None). With
  several values every run shares one compiled program and the wall time of the
  whole batch is split evenly between the values. With ``seed_per_value``, value
  ``i`` runs with seed ``i`` only (``len(values) == seeds``, e.g. one trained
  optimizer per seed) and the one :class:`RunLog` has a row per seed.
  """
  if steps % chunk:
    raise ValueError(f"steps ({steps}) must be a multiple of chunk ({chunk}).")
  if (method.needs_validation_loss or method.needs_validation_grads) and problem.val_batch is None:
    raise ValueError(f"{method.name} needs a validation batch, and {problem.name} has no "
                     "validation split (Problem.val_batch is None).")
  values = method.values
  if seed_per_value and (values is None or len(values) != seeds):
    raise ValueError(f"seed_per_value needs one value per seed ({seeds}), got {values}.")
  k = 1 if values is None or seed_per_value else len(values)
  # Run r = value r // seeds, seed r % seeds: the same seeds for every value.
  hs = jnp.repeat(jnp.asarray(values if values is not None else [0.0], jnp.float32),
                  1 if seed_per_value else seeds)
  base_keys = jnp.tile(jax.random.split(jax.random.key(1000), seeds), (k,))
  init_keys = jax.vmap(lambda key: jax.random.fold_in(key, 0))(base_keys)
  data_keys = jax.vmap(lambda key: jax.random.fold_in(key, 1))(base_keys)
  eval_params = method.eval_params or (lambda s, p: p)

  def optimizer(h):
    return method.make(None if values is None else h)

  def record(p, s):
    metrics = problem.evaluate(eval_params(s, p))
    sizes = (jnp.atleast_1d((method.step_sizes_of or metaoptax.step_sizes)(s))
             if method.learned_step_size
             else jnp.zeros((0,)))
    return (metrics["train_loss"], metrics["test"], sizes, metrics.get("val", metrics["test"]),
            {k: metrics[k] for k in OPTIONAL_METRICS if k in metrics})

  def init(key, h):
    p = problem.init(key)
    s = optimizer(h).init(p)
    if method.prepare is not None:
      s = method.prepare(s, h)
    return p, s, record(p, s)

  def one_run(p, s, key, h):
    opt = optimizer(h)

    def body(carry, key):
      p, s = carry
      batch = problem.batch(key)
      loss_fn = lambda q: problem.loss(q, batch)
      grads = jax.grad(loss_fn)(p)
      extra = {"obj_fn": loss_fn} if method.needs_obj else {}
      held_out = lambda: problem.val_batch(jax.random.fold_in(key, 1))
      if method.needs_validation_loss:
        extra["validation_loss"] = problem.loss(p, held_out())
      if method.needs_validation_grads:
        extra["meta_grads"] = jax.grad(problem.loss)(p, held_out())
      updates, s = opt.update(grads, s, p, **extra)
      return (optax.apply_updates(p, updates), s), None

    (p, s), _ = jax.lax.scan(body, (p, s), jax.random.split(key, chunk))
    return p, s, record(p, s)

  params, state, first = jax.jit(jax.vmap(init))(init_keys, hs)
  keys = jax.vmap(lambda key: jax.random.split(key, steps // chunk))(data_keys)  # (runs, n)
  compiled = jax.jit(jax.vmap(one_run)).lower(params, state, keys[:, 0], hs).compile()

  records = [jax.device_get(first)]
  bar = progress(total=steps, desc=method.name)
  start = time.perf_counter()
  for i in range(steps // chunk):
    params, state, rec = compiled(params, state, keys[:, i], hs)
    records.append(jax.device_get(rec))  # waits for the chunk: the wall time is honest
    bar.update(chunk)
    bar.set_postfix_str(f"loss {np.nanmean(rec[0]):.4g}")
  seconds = time.perf_counter() - start
  bar.close()
  losses, tests, sizes, vals = (np.stack([np.asarray(r[j]) for r in records], 1)
                                for j in range(4))
  optional = {k: np.stack([np.asarray(r[4][k]) for r in records], 1) for k in records[0][4]}
  logs = []
  for v in range(k):
    rows = slice(v * seeds, (v + 1) * seeds)
    m = method
    if method.names is not None and not seed_per_value:
      m = method._replace(name=method.names[v][0], info=method.names[v][1], values=None)
    logs.append(RunLog(
        method=m, steps=np.arange(steps // chunk + 1) * chunk, train_loss=losses[rows],
        test=tests[rows], step_sizes=sizes[rows] if method.learned_step_size else None,
        seconds=seconds / k, val=vals[rows], **{k: v[rows] for k, v in optional.items()}))
  return logs


def train_cached(cache: pathlib.Path | None, key: str, problem, method: Method, *,
                 cached_only: bool = False, **kwargs) -> list[RunLog] | None:
  """:func:`train`, whose logs are saved to ``cache/<key>.npz`` and read back from there
  on a later call with the same ``key`` (a long benchmark resumed after a time limit).
  ``cache=None`` trains every time; with ``cached_only``, a method not in the cache
  is not trained and ``None`` is returned (a report of what a run got to)."""
  if cache is None:
    return train(problem, method, **kwargs)
  path = pathlib.Path(cache) / f"{key}.npz"
  if cached_only and not path.exists():
    return None
  if path.exists():
    with np.load(path) as f:
      meta = json.loads(str(f["meta"]))
      logs = []
      for i, (name, info) in enumerate(meta["names"]):
        get = lambda field, i=i: f[f"{i}_{field}"] if f"{i}_{field}" in f else None
        logs.append(RunLog(method=method._replace(name=name, info=info, values=None),
                           steps=f["steps"], train_loss=get("train_loss"), test=get("test"),
                           step_sizes=get("step_sizes"), seconds=meta["seconds"][i],
                           val=get("val"), **{k: get(k) for k in OPTIONAL_METRICS}))
      return logs
  logs = train(problem, method, **kwargs)
  path.parent.mkdir(parents=True, exist_ok=True)
  arrays = {f"{i}_{field}": getattr(log, field) for i, log in enumerate(logs)
            for field in ("train_loss", "test", "step_sizes", "val", *OPTIONAL_METRICS)
            if getattr(log, field) is not None}
  meta = {"names": [(log.method.name, log.method.info) for log in logs],
          "seconds": [log.seconds for log in logs]}
  np.savez(path, steps=logs[0].steps, meta=json.dumps(meta), **arrays)
  return logs
