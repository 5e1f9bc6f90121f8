r"""Meta-training learned optimizers (Algorithm 1, Chen et al. 2022) and evaluation.

For each meta step, ``tasks_per_step`` tasks and starting points are sampled;
the optimizee runs ``horizon`` steps in truncations of ``unroll`` steps
(``jax.lax.scan``, ``jax.vmap`` over tasks). After each truncation the network
takes one meta-optimizer step on the gradient of the weighted loss
:math:`L = \tfrac1T \sum_t w_t\, \ell(f(x_t))` (truncated back-propagation: no
gradient crosses truncations). Non-finite meta-gradients are skipped and
counted; the run is deterministic under ``seed``.

The loop is explicit for long runs: :func:`init_meta_training` gives a
:class:`MetaTrainingState` (network, meta-optimizer state, PRNG key, counters)
and :func:`build_meta_step` the jit-able ``meta_step(state) -> (state, info)``
of one task batch. :func:`meta_train` drives them, with tasks sharded over a
``jax.sharding.Mesh`` (``mesh=``) and orbax checkpoints (``checkpoint_dir=``)
from which a run resumes bit for bit.

By default the optimizee's gradient is treated as an input that does not depend
on the network (``second_order=False``, Andrychowicz et al. 2016), which drops
second derivatives of ``f`` from the meta-gradient.
"""

from __future__ import annotations

import functools
import os
import time
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from metaoptax import checkpoint
from metaoptax._training_loop import check_schedule, hashable_axis
from metaoptax._data_parallel import data_parallel
from metaoptax.l2o.network import L2OConfig, init_network
from metaoptax.l2o.optimizer import init_state, step
from metaoptax.l2o.tasks import TaskFamily
from metaoptax._src import tree_utils as _tree


class MetaTrainingState(NamedTuple):
  """Everything a meta-training run carries from one task batch to the next."""

  network_params: Any
  opt_state: Any  # the meta-optimizer's state
  key: jax.Array  # typed PRNG key of the next task batches
  meta_step: jax.Array  # int32 task batches done
  skipped_updates: jax.Array  # int32 meta updates skipped (non-finite meta-gradient or loss)


class MetaStepInfo(NamedTuple):
  """What one task batch (:func:`build_meta_step`) reports."""

  losses: jax.Array  # (horizon // unroll,) meta-loss of each truncation
  finite: jax.Array  # (horizon // unroll,) bool; False where the update was skipped
  task_losses: jax.Array  # (tasks_per_step,) loss of each task at the horizon


class MetaTrainingResult(NamedTuple):
  """What :func:`meta_train` returns."""

  network_params: Any
  meta_losses: np.ndarray  # one per meta update (truncation) of this call
  skipped_updates: int  # meta updates skipped for non-finite meta-gradients (whole run)
  seconds: float
  updates_per_second: float
  state: MetaTrainingState  # to continue (``init_state=``) or checkpoint


def _unroll(config, family, network_params, task, params, state, length, second_order,
            log_loss):
  act = lambda theta, p: family.act(task, theta, p)

  def body(carry, _):
    x, st = carry
    g = jax.grad(family.loss, argnums=1)(task, x)
    if not second_order:
      g = jax.lax.stop_gradient(g)
    x, st, _ = step(network_params, config, st, x, g, act)
    value = family.loss(task, x)
    return (x, st), jnp.log(value + 1e-12) if log_loss else value

  (params, state), losses = jax.lax.scan(body, (params, state), None, length=length)
  return losses, (params, state)


def sample_problems(config: L2OConfig, family: TaskFamily, key: jax.Array, count: int):
  """``count`` tasks, starting points and fresh optimizer states (vmapped)."""
  k_task, k_init = jax.random.split(key)
  tasks = jax.vmap(family.sample_task)(jax.random.split(k_task, count))
  params = jax.vmap(family.init_params)(jax.random.split(k_init, count), tasks)
  states = jax.vmap(lambda p: init_state(config, p))(params)
  return tasks, params, states


def default_meta_optimizer() -> optax.GradientTransformation:
  """Adam 1e-3 with global-norm clipping at 1."""
  return optax.chain(optax.clip_by_global_norm(1.0), optax.adam(1e-3))


def init_meta_training(config: L2OConfig, *, meta_optimizer: optax.GradientTransformation
                       | None = None, seed: int = 0,
                       network_params: Any = None) -> MetaTrainingState:
  """The state before the first task batch.

  Args:
    config: the learned optimizer's configuration.
    meta_optimizer: optax optimizer of the network (default
      :func:`default_meta_optimizer`); the same one must go to :func:`build_meta_step`.
    seed: PRNG seed (network init, then the task batches).
    network_params: start from these weights instead of a fresh init.
  """
  meta_optimizer = meta_optimizer or default_meta_optimizer()
  key, init_key = jax.random.split(jax.random.key(seed))
  net = init_network(init_key, config) if network_params is None else network_params
  zero = jnp.zeros([], jnp.int32)
  return MetaTrainingState(net, meta_optimizer.init(net), key, zero, zero)


def build_meta_step(
    config: L2OConfig,
    family: TaskFamily,
    *,
    tasks_per_step: int = 32,
    horizon: int = 100,
    unroll: int = 10,
    meta_optimizer: optax.GradientTransformation | None = None,
    second_order: bool = False,
    log_loss: bool = False,
    loss_weights: jax.Array | None = None,
    mesh: jax.sharding.Mesh | None = None,
    batch_axis: str | Sequence[str] | None = None,
) -> Callable[[MetaTrainingState], tuple[MetaTrainingState, MetaStepInfo]]:
  """``meta_step(state) -> (state, info)``: one task batch, all its truncations.

  Samples ``tasks_per_step`` tasks with the state's key, runs ``horizon``
  optimizee steps as ``horizon // unroll`` truncations (``jax.lax.scan``), and
  after each takes a meta-optimizer step, or skips it (counted) when the
  meta-gradient or the meta-loss is not finite. Pure and jit-able.

  With ``mesh``, the tasks (and the optimizees' params and states) are split
  over the devices of ``batch_axis`` (default: every axis of the mesh) and the
  network and meta-optimizer state are replicated; the batch mean becomes an
  all-reduce. Arguments as in :func:`meta_train`.
  """
  if horizon % unroll:
    raise ValueError(f"horizon ({horizon}) must be a multiple of unroll ({unroll}).")
  parallel = data_parallel(mesh, batch_axis, tasks_per_step, "tasks_per_step")
  meta_optimizer = meta_optimizer or default_meta_optimizer()
  weights = jnp.ones(unroll) if loss_weights is None else jnp.asarray(loss_weights)
  if weights.shape != (unroll,):
    raise ValueError(f"loss_weights must have shape ({unroll},), got {weights.shape}.")

  def batch_loss(net, tasks, params, states):
    losses, carry = jax.vmap(
        lambda t, p, s: _unroll(config, family, net, t, p, s, unroll, second_order, log_loss)
    )(tasks, params, states)
    return jnp.mean(losses * weights), carry

  def truncation(carry, _):
    net, opt_state, skipped, tasks, params, states = carry
    (loss, (params, states)), grads = jax.value_and_grad(batch_loss, has_aux=True)(
        net, tasks, params, states)
    finite = _tree.all_finite(grads) & jnp.isfinite(loss)
    updates, new_opt_state = meta_optimizer.update(grads, opt_state, net)
    net, opt_state = parallel.replicate(_tree.select(
        finite, (optax.apply_updates(net, updates), new_opt_state), (net, opt_state)))
    params, states = parallel.shard_batch((params, states))
    skipped = skipped + (~finite).astype(jnp.int32)
    return (net, opt_state, skipped, tasks, params, states), (loss, finite)

  def meta_step(state: MetaTrainingState):
    key, sub = jax.random.split(state.key)
    tasks, params, states = parallel.shard_batch(
        sample_problems(config, family, sub, tasks_per_step))
    carry = (state.network_params, state.opt_state, state.skipped_updates, tasks, params,
             states)
    (net, opt_state, skipped, tasks, params, _), (losses, finite) = jax.lax.scan(
        truncation, carry, None, length=horizon // unroll)
    task_losses = parallel.shard_batch(jax.vmap(family.loss)(tasks, params))
    new_state = MetaTrainingState(net, opt_state, key, state.meta_step + 1, skipped)
    return parallel.replicate(new_state), MetaStepInfo(losses, finite, task_losses)

  return meta_step


class _MetaStepSettings(NamedTuple):
  """The static arguments of :func:`build_meta_step` (hashable, so compiles are reused)."""

  config: L2OConfig
  family: TaskFamily
  tasks_per_step: int
  horizon: int
  unroll: int
  meta_optimizer: optax.GradientTransformation
  second_order: bool
  log_loss: bool
  loss_weights: tuple | None
  mesh: jax.sharding.Mesh | None
  batch_axis: str | tuple | None


@functools.partial(jax.jit, static_argnames="settings")
def _jitted_meta_step(state: MetaTrainingState, settings: _MetaStepSettings):
  """One compile per distinct settings: calls of :func:`meta_train` with the same
  family, meta-optimizer and sizes (a resumed run, say) reuse it."""
  return build_meta_step(**settings._asdict())(state)


def meta_train(
    config: L2OConfig,
    family: TaskFamily,
    *,
    meta_steps: int = 100,
    tasks_per_step: int = 32,
    horizon: int = 100,
    unroll: int = 10,
    meta_optimizer: optax.GradientTransformation | None = None,
    seed: int = 0,
    second_order: bool = False,
    log_loss: bool = False,
    loss_weights: jax.Array | None = None,
    network_params: Any = None,
    progress: Callable[[int, float, int], None] | None = print,
    log_every: int = 10,
    mesh: jax.sharding.Mesh | None = None,
    batch_axis: str | Sequence[str] | None = None,
    init_state: MetaTrainingState | None = None,
    checkpoint_dir: str | os.PathLike | None = None,
    checkpoint_every: int = 0,
) -> MetaTrainingResult:
  """Trains the network of a learned optimizer on a task family.

  The run is a pure function of its arguments: the same ``seed`` gives the
  same result bit for bit, and so does a run interrupted and resumed from a
  checkpoint (or from ``init_state``). The host only waits for the devices
  every ``log_every`` meta steps (progress) and at checkpoints.

  Args:
    config: the learned optimizer's configuration (heads, sizes).
    family: the task family to train on.
    meta_steps: number of task batches in the whole run (a resumed run does
      the remaining ones); each gives ``horizon // unroll`` updates.
    tasks_per_step: tasks per batch (vmapped).
    horizon: optimizee steps per task.
    unroll: truncation length T.
    meta_optimizer: optax optimizer of the network (default
      :func:`default_meta_optimizer`: Adam 1e-3 with global-norm clipping at 1).
    seed: PRNG seed (network init and tasks).
    second_order: differentiate through the optimizee's gradient too.
    log_loss: use ``log f`` in the meta-loss (robust across task scales).
    loss_weights: ``(unroll,)`` weights ``w_t`` (default: all ones).
    network_params: start from these weights instead of a fresh init.
    progress: called as ``progress(meta_step, mean_loss, skipped)`` every
      ``log_every`` meta steps (default: a printed line); ``None`` for silence.
    log_every: how often to report.
    mesh: shard the tasks over this ``jax.sharding.Mesh`` (data parallel; see
      :func:`build_meta_step`). Same results as on one device up to the order
      of float32 sums over tasks.
    batch_axis: the mesh axis (or axes) the tasks are split over (default all).
    init_state: continue from this state (e.g. ``result.state`` of an earlier
      call) instead of ``seed`` / ``network_params``.
    checkpoint_dir: write the state to ``checkpoint_dir/<meta_step>`` (orbax,
      :mod:`metaoptax.checkpoint`) every ``checkpoint_every`` meta steps and at
      the end. If it already holds checkpoints, the run resumes from the
      latest (taking precedence over ``init_state`` and ``network_params``),
      so re-running the same call after an interruption finishes the run.
    checkpoint_every: meta steps between checkpoints (0: only at the end).

  Returns:
    A :class:`MetaTrainingResult`.
  """
  check_schedule(log_every, checkpoint_every, checkpoint_dir)
  meta_optimizer = meta_optimizer or default_meta_optimizer()
  settings = _MetaStepSettings(
      config, family, tasks_per_step, horizon, unroll, meta_optimizer, second_order, log_loss,
      None if loss_weights is None else tuple(np.asarray(loss_weights, np.float32).tolist()),
      mesh, hashable_axis(batch_axis))
  try:
    hash(settings)
    meta_step = functools.partial(_jitted_meta_step, settings=settings)
  except TypeError:  # an unhashable setting: compile for this call only
    meta_step = jax.jit(build_meta_step(**settings._asdict()))
  parallel = data_parallel(mesh, batch_axis, tasks_per_step, "tasks_per_step")
  state = init_state if init_state is not None else init_meta_training(
      config, meta_optimizer=meta_optimizer, seed=seed, network_params=network_params)
  state = parallel.place(state)
  latest = checkpoint.latest_step(checkpoint_dir) if checkpoint_dir is not None else None
  if latest is not None:
    state = checkpoint.restore(os.path.join(checkpoint_dir, str(latest)), like=state)

  first = int(state.meta_step)
  losses = []
  start = time.perf_counter()
  for done in range(first + 1, meta_steps + 1):
    state, info = meta_step(state)
    losses.append(info.losses)  # stays on the device until a report
    if progress is not None and done % log_every == 0:
      recent = np.concatenate([np.asarray(x) for x in losses[-log_every:]])
      mean = float(np.mean(recent[np.isfinite(recent)])) if np.isfinite(recent).any() else np.nan
      progress(done, mean, int(state.skipped_updates))
    if checkpoint_dir is not None and (
        (checkpoint_every and done % checkpoint_every == 0) or done == meta_steps):
      checkpoint.save(os.path.join(checkpoint_dir, str(done)), state, overwrite=True)
  losses = np.concatenate([np.asarray(x) for x in losses]) if losses else np.zeros(0)
  seconds = time.perf_counter() - start
  return MetaTrainingResult(state.network_params, losses, int(state.skipped_updates), seconds,
                            losses.size / seconds, state)


def evaluate(config: L2OConfig, network_params, family: TaskFamily, key: jax.Array,
             num_tasks: int, steps: int) -> jax.Array:
  """Losses ``(num_tasks, steps + 1)`` of the learned optimizer on unseen tasks."""
  tasks, params, states = sample_problems(config, family, key, num_tasks)

  def run(task, p, s):
    losses, _ = _unroll(config, family, network_params, task, p, s, steps, False, False)
    return jnp.concatenate([family.loss(task, p)[None], losses])

  return jax.jit(jax.vmap(run))(tasks, params, states)


def evaluate_optax(optimizer: optax.GradientTransformation, family: TaskFamily,
                   key: jax.Array, num_tasks: int, steps: int) -> jax.Array:
  """Losses ``(num_tasks, steps + 1)`` of an optax optimizer on the same tasks.

  Uses the same keys as :func:`evaluate`, so both see identical tasks and starts.
  """
  tasks, params, _ = sample_problems(L2OConfig(), family, key, num_tasks)

  def run(task, p):
    def body(carry, _):
      x, s = carry
      u, s = optimizer.update(jax.grad(family.loss, argnums=1)(task, x), s, x)
      x = optax.apply_updates(x, u)
      return (x, s), family.loss(task, x)

    _, losses = jax.lax.scan(body, (p, optimizer.init(p)), None, length=steps)
    return jnp.concatenate([family.loss(task, p)[None], losses])

  return jax.jit(jax.vmap(run))(tasks, params)
