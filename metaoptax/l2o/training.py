r"""Meta-training learned optimizers (Algorithm 1, Chen et al. 2022).

For each iteration, ``tasks_per_step`` tasks and starting points are sampled;
the optimizee runs ``horizon`` steps in truncations of ``unroll`` steps
(``jax.lax.scan``, ``jax.vmap`` over tasks). After each truncation the network
takes one meta-optimizer step on the gradient of the weighted loss
:math:`L = \tfrac1T \sum_t w_t\, \ell(f(x_t))` (truncated back-propagation: no
gradient crosses truncations). With ``TrainingConfig(pes=...)`` the
meta-gradient is instead the persistent-evolution-strategies estimate
(:mod:`metaoptax.l2o.pes`, Vicol et al. 2021) of the gradient of each truncation's
loss through the whole run so far. Non-finite meta-gradients are skipped and
counted; the run is a pure function of its starting state.

:func:`init_training` gives a :class:`TrainingState` (network,
meta-optimizer state, PRNG key, counters) and :func:`build_training_step` the
jit-able ``step(state) -> (state, info)`` of one task batch.
:func:`train` runs them, with progress, tasks sharded over a
``jax.sharding.Mesh`` (``mesh=``) and orbax checkpoints (``checkpoint_dir=``)
from which a run resumes bit for bit.

By default the optimizee's gradient is treated as an input that does not depend
on the network (``second_order=False``, Andrychowicz et al. 2016), which drops
second derivatives of ``f`` from the meta-gradient.
"""

from __future__ import annotations

import os
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from metaoptax._src import loop, tree_utils
from metaoptax._src.data_parallel import data_parallel, hashable_axis, on_local_device
from metaoptax._src.finite_update import apply_if_finite
from metaoptax._src.progress import Progress
from metaoptax.l2o.tasks import gradient as task_gradient
from metaoptax.l2o import pes as pes_estimator
from metaoptax.l2o.network import L2OConfig
from metaoptax.l2o.pes import PES
from metaoptax.l2o.problems import sample_problems
from metaoptax.l2o.tasks import TaskFamily
from metaoptax.l2o.validation import Selection as validation_selection
from metaoptax.l2o.validation import Validation

__all__ = ("TrainingConfig", "TrainingState", "TrainingInfo", "TrainingResult",
           "default_optimizer", "init_training", "build_training_step", "train")


class TrainingConfig(NamedTuple):
  """How each task batch of meta-training is run and scored.

  The meta-training of a learned optimizer (:class:`metaoptax.l2hmc.TrainingConfig`
  configures the sampler's training).

  Attributes:
    tasks_per_step: tasks per batch (vmapped; split over the mesh's data axis).
    horizon: optimizee steps per task.
    unroll: truncation length T: a meta update every ``unroll`` optimizee steps.
    second_order: differentiate through the optimizee's gradient too.
    log_loss: use ``log f`` in the meta-loss (robust across task scales).
    loss_weights: ``(unroll,)`` weights ``w_t`` of the meta-loss (default: all ones).
    truncation_weights: ``(horizon // unroll,)`` weights ``c_k`` of the meta-loss of
      each truncation of the run (default: all ones). Truncation ``k``'s meta-gradient
      is multiplied by ``c_k`` before the meta-optimizer (so ``c_k = 0`` runs the
      optimizee without a meta step): with weights that grow along the run, the
      meta-objective counts the end of each run most, e.g. the loss after a decay. The
      reported meta-losses stay unweighted.
    mask_diverged_tasks: when the batch's meta-loss or meta-gradient is not
      finite, take the meta step on the tasks whose own meta-loss and
      meta-gradient are finite (their mean), and restart the others from their
      starting point with a fresh optimizer state; the step is skipped only when
      no task is finite. Without it (the default) one diverged task vetoes the
      meta step of its truncation and, carrying non-finite parameters, of every
      later truncation of its batch. Batches where every task is finite are
      computed exactly as without it.
    pes: estimate the meta-gradient by persistent evolution strategies
      (:class:`~metaoptax.l2o.pes.PES`: antithetic pairs of perturbed networks per task,
      each carrying its sum of perturbations across the truncations of the run) instead
      of back-propagation through each truncation: an unbiased estimate of the gradient
      of each truncation's meta-loss through the whole run so far, with no
      back-propagation (``second_order`` is moot: the particles run the true dynamics).
      Without ``mask_diverged_tasks`` a pair whose meta-loss is not finite vetoes the
      meta step (and, carrying non-finite params, every later one of its batch); with
      it the pair contributes nothing and restarts, as a masked task does.
  """

  tasks_per_step: int = 32
  horizon: int = 100
  unroll: int = 10
  second_order: bool = False
  log_loss: bool = False
  loss_weights: tuple[float, ...] | None = None
  mask_diverged_tasks: bool = False
  truncation_weights: tuple[float, ...] | None = None
  pes: PES | None = None


class TrainingState(NamedTuple):
  """Everything a meta-training run carries from one task batch to the next.

  Attributes:
    params: the network's weights.
    opt_state: the meta-optimizer's state.
    key: typed PRNG key of the next task batches.
    meta_step: int32 scalar, the task batches done.
    skipped_updates: int32 scalar, the meta updates skipped (non-finite meta-gradient
      or meta-loss).
  """

  params: Any
  opt_state: Any
  key: jax.Array
  meta_step: jax.Array
  skipped_updates: jax.Array


class TrainingInfo(NamedTuple):
  """What one task batch (:func:`build_training_step`) reports.

  With ``horizon // unroll`` truncations per batch:

  Attributes:
    losses: ``(horizon // unroll,)``, the meta-loss of each truncation.
    finite: ``(horizon // unroll,)`` bool; false where the meta update was skipped.
    task_losses: ``(tasks_per_step,)``, each task's loss at the horizon.
    diverged: ``(horizon // unroll,)`` int32, the tasks masked and restarted in each
      truncation (``mask_diverged_tasks``).
    task_meta_losses: ``(horizon // unroll, tasks_per_step)``, each task's own meta-loss
      in each truncation.
  """

  losses: jax.Array
  finite: jax.Array
  task_losses: jax.Array
  diverged: jax.Array
  task_meta_losses: jax.Array


class TrainingResult(NamedTuple):
  """What :func:`train` returns.

  Attributes:
    params: the network's weights (with ``validation=`` and ``select_best``, the
      best-scoring ones); ``config.transformation(params)`` is the trained optimizer.
    losses: ``(num_iterations * horizon // unroll,)``, one meta-loss per meta update
      (truncation) of this call: the mean over the batch's tasks that the meta step
      descends (over its finite tasks with ``mask_diverged_tasks``).
    skipped_updates: the meta updates skipped for a non-finite meta-gradient (whole run,
      across continued calls).
    seconds: the wall-clock time of this call.
    updates_per_second: meta updates per second of this call.
    state: the :class:`TrainingState` to continue from (``init_state=``) or to checkpoint.
    diverged_tasks: the tasks masked and restarted in this call (``mask_diverged_tasks``).
    validation_scores: ``(k, 2)``, the (iteration, held-out score) of each validation of
      this call (``validation=``); ``None`` without validation.
    best_iteration: the iteration of the selected weights (``validation=``); ``None``
      without validation.
  """

  params: Any
  losses: np.ndarray
  skipped_updates: int
  seconds: float
  updates_per_second: float
  state: TrainingState
  diverged_tasks: int = 0
  validation_scores: np.ndarray | None = None
  best_iteration: int | None = None


def _unroll(config, family, network_params, task, params, state, length, second_order,
            log_loss):
  act = None if family.act is None else (lambda theta, p: family.act(task, theta, p))

  def body(carry, _):
    x, st = carry
    g = task_gradient(family, task, x, st.count)
    if not second_order:
      g = jax.lax.stop_gradient(g)
    x, st, _ = config.step(network_params, st, x, g, act)
    value = family.loss(task, x)
    return (x, st), jnp.log(value + 1e-12) if log_loss else value

  (params, state), losses = jax.lax.scan(body, (params, state), None, length=length)
  return losses, (params, state)


def default_optimizer(learning_rate: float = 1e-3, *, max_norm: float = 1.0,
                      decay_updates: int | None = None, warmup_updates: int = 0,
                      final_learning_rate: float = 1e-5) -> optax.GradientTransformation:
  r"""Adam with global-norm clipping of the meta-gradient; by default Adam 1e-3, clipping at 1.

  The meta-optimizer of a learned optimizer's network (not
  :func:`metaoptax.l2hmc.default_optimizer`, the sampler's).
  The same object for equal (hashable) arguments, so that runs with it, e.g. every
  run with the default, share compiled meta steps.

  With ``decay_updates`` (the run's meta updates: ``num_iterations * horizon //
  unroll``) the step size follows a warm-up and a cosine decay: linear from 0
  to ``learning_rate`` over ``warmup_updates`` updates :math:`W`, then
  :math:`\eta_f + \tfrac12(\eta - \eta_f)(1 + \cos(\pi (k - W) / (K - W)))` down
  to ``final_learning_rate`` :math:`\eta_f` at update :math:`K` = ``decay_updates``
  (``optax.warmup_cosine_decay_schedule``), so that the end of
  meta-training settles instead of wandering at the peak step size.

  Args:
    learning_rate: Adam's (peak) step size.
    max_norm: the meta-gradient's global norm is clipped to this.
    decay_updates: meta updates of the whole schedule, warm-up included
      (``None``: a constant step size).
    warmup_updates: meta updates of the linear warm-up (with ``decay_updates``).
    final_learning_rate: the step size at the end of the decay.
  """
  return loop.built(_default_optimizer, learning_rate, max_norm, decay_updates,
                    warmup_updates, final_learning_rate)


def _default_optimizer(learning_rate, max_norm, decay_updates, warmup_updates,
                       final_learning_rate) -> optax.GradientTransformation:
  if decay_updates is None:
    if warmup_updates:
      raise ValueError("warmup_updates needs decay_updates (the schedule's length).")
    return optax.chain(optax.clip_by_global_norm(max_norm), optax.adam(learning_rate))
  if not 0 <= warmup_updates < decay_updates:
    raise ValueError(f"Need 0 <= warmup_updates ({warmup_updates}) < decay_updates "
                     f"({decay_updates}).")
  if not 0 <= final_learning_rate <= learning_rate:
    raise ValueError(f"Need 0 <= final_learning_rate ({final_learning_rate}) <= "
                     f"learning_rate ({learning_rate}).")
  schedule = optax.warmup_cosine_decay_schedule(
      0.0 if warmup_updates else learning_rate, learning_rate, max(warmup_updates, 1),
      decay_updates, final_learning_rate)
  return optax.chain(optax.clip_by_global_norm(max_norm), optax.adam(schedule))


def init_training(rng_key: jax.Array, family: TaskFamily | Sequence[TaskFamily],
                  config: L2OConfig, training: TrainingConfig = TrainingConfig(), *,
                  optimizer: optax.GradientTransformation | None = None, params: Any = None
                  ) -> TrainingState:
  """The state before the first task batch.

  Args:
    rng_key: PRNG key of the run (the network's init, then the task batches).
    family: the task family (or families) the run trains on, as for :func:`train`.
    config: the learned optimizer's configuration.
    training: the run's :class:`TrainingConfig` (checked here).
    optimizer: optax optimizer of the network (default :func:`default_optimizer`); the
      same one must go to :func:`build_training_step`.
    params: start from these network weights instead of ``config.init_network``.

  Returns:
    The state, committed to the default device as :func:`train` places it (a
    loop over :func:`build_training_step` shares its compilation).
  """
  _training_config(training)
  _check(config, _families(family))
  optimizer = optimizer or default_optimizer()
  key, init_key = jax.random.split(rng_key)
  net = config.init_network(init_key) if params is None else params
  zero = jnp.zeros([], jnp.int32)
  return on_local_device(TrainingState(net, optimizer.init(net), key, zero, zero))


def _check(config, families: tuple[TaskFamily, ...]) -> None:
  """A teleport head needs every family's group action."""
  if "teleport" in getattr(config, "heads", ()):
    missing = [f.name for f in families if f.act is None]
    if missing:
      raise ValueError(f"The 'teleport' head needs the family's group action: {missing} "
                       "have act=None.")


def _training_config(training: TrainingConfig) -> TrainingConfig:
  """``training``, checked, in a hashable form."""
  if training.horizon % training.unroll:
    raise ValueError(f"horizon ({training.horizon}) must be a multiple of unroll "
                     f"({training.unroll}).")
  if training.loss_weights is not None:
    weights = np.asarray(training.loss_weights, np.float32)
    if weights.shape != (training.unroll,):
      raise ValueError(f"loss_weights must have shape ({training.unroll},), got "
                       f"{weights.shape}.")
    training = training._replace(loss_weights=tuple(weights.tolist()))
  if training.truncation_weights is not None:
    weights = np.asarray(training.truncation_weights, np.float32)
    truncations = training.horizon // training.unroll
    if weights.shape != (truncations,):
      raise ValueError(f"truncation_weights must have shape ({truncations},) (horizon // "
                       f"unroll), got {weights.shape}.")
    training = training._replace(truncation_weights=tuple(weights.tolist()))
  return training


def build_training_step(
    family: TaskFamily | Sequence[TaskFamily],
    config: L2OConfig,
    training: TrainingConfig = TrainingConfig(),
    *,
    optimizer: optax.GradientTransformation | None = None,
    mesh: jax.sharding.Mesh | None = None,
    data_axis: str | Sequence[str] | None = None,
) -> Callable[[TrainingState], tuple[TrainingState, TrainingInfo]]:
  """``step(state) -> (state, info)``: one task batch, all its truncations.

  Samples ``training.tasks_per_step`` tasks with the state's key, runs
  ``horizon`` optimizee steps as ``horizon // unroll`` truncations
  (``jax.lax.scan``), and after each takes a meta-optimizer step, or skips it
  (counted) when the meta-gradient or the meta-loss is not finite. Pure and
  jit-able. With a sequence of families, batch ``k`` (``state.meta_step``) is
  drawn from family ``k mod len(family)``.

  With ``mesh``, the tasks (and the optimizees' params and states) are split
  over the devices of ``data_axis`` (default: every axis of the mesh) and the
  network and meta-optimizer state are replicated; the batch mean becomes an
  all-reduce. Arguments as in :func:`train`.

  Args:
    family: the task family, or a sequence of families (batch ``k`` from family
      ``k mod len(family)``).
    config: the learned optimizer's configuration (:class:`L2OConfig`,
      :class:`ScaledAdamConfig` or :class:`ClimbedAdamConfig`).
    training: the :class:`TrainingConfig`.
    optimizer: the network's optax optimizer; the one :func:`init_training` was given
      (default :func:`default_optimizer`).
    mesh: a ``jax.sharding.Mesh`` to split the tasks over; ``None``: one device.
    data_axis: the mesh axes the tasks are split over (default: every axis).

  Returns:
    The pure function ``step(state) -> (state, info)``: a :class:`TrainingState` and a
    :class:`TrainingInfo`.
  """
  training = _training_config(training)
  _check(config, _families(family))
  # one step object per configuration: its jit shares train's compilation
  return loop.built(_build_training_step, config, _families(family), training,
                    optimizer or default_optimizer(), mesh, hashable_axis(data_axis))


def _families(family: TaskFamily | Sequence[TaskFamily]) -> tuple[TaskFamily, ...]:
  """``family`` as a (hashable) tuple of one or more families."""
  families = (family,) if isinstance(family, TaskFamily) else tuple(family)
  if not families or not all(isinstance(f, TaskFamily) for f in families):
    raise ValueError("family must be a TaskFamily or a non-empty sequence of them.")
  return families


def _build_training_step(config: L2OConfig, family: TaskFamily | tuple[TaskFamily, ...],
                         training: TrainingConfig, meta_optimizer: optax.GradientTransformation,
                         mesh: jax.sharding.Mesh | None,
                         data_axis: str | tuple[str, ...] | None):
  """:func:`build_training_step` of a checked configuration: with several families, task batch
  ``k`` is drawn from family ``k mod len(families)`` (``jax.lax.switch``)."""
  steps = [_one_family_meta_step(config, f, training, meta_optimizer, mesh, data_axis)
           for f in _families(family)]
  if len(steps) == 1:
    return steps[0]
  return lambda state: jax.lax.switch(state.meta_step % len(steps), steps, state)


def _one_family_meta_step(config: L2OConfig, family: TaskFamily, training: TrainingConfig,
                          meta_optimizer: optax.GradientTransformation,
                          mesh: jax.sharding.Mesh | None,
                          data_axis: str | tuple[str, ...] | None):
  """The meta step of one family."""
  if training.pes is not None:
    return _pes_meta_step(config, family, training, meta_optimizer, mesh, data_axis)
  (tasks_per_step, horizon, unroll, second_order, log_loss, loss_weights, masking,
   truncation_weights, _) = training
  parallel = data_parallel(mesh, data_axis, tasks_per_step, "tasks_per_step")
  weights = jnp.ones(unroll) if loss_weights is None else jnp.asarray(loss_weights)
  run_weights = (jnp.ones(horizon // unroll) if truncation_weights is None
                 else jnp.asarray(truncation_weights))

  def task_losses_of(net, tasks, params, states):
    return jax.vmap(
        lambda t, p, s: _unroll(config, family, net, t, p, s, unroll, second_order, log_loss)
    )(tasks, params, states)

  def batch_loss(net, tasks, params, states):
    losses, carry = task_losses_of(net, tasks, params, states)
    return jnp.mean(losses * weights), (carry, jnp.all(jnp.isfinite(losses), axis=1),
                                        jnp.mean(losses * weights, axis=1))

  def masked_mean(net, tasks, params, states):
    """The mean meta-loss and meta-gradient over the tasks where both are finite."""

    def one(t, p, s):
      value, grads = jax.value_and_grad(
          lambda n: jnp.mean(_unroll(config, family, n, t, p, s, unroll, second_order,
                                     log_loss)[0] * weights))(net)
      return value, grads, jnp.isfinite(value) & tree_utils.all_finite(grads)

    values, grads, ok = jax.vmap(one)(tasks, params, states)
    count = jnp.sum(ok)
    denominator = jnp.maximum(count, 1).astype(values.dtype)
    mean = lambda x: jnp.sum(jnp.where(ok.reshape((-1,) + (1,) * (x.ndim - 1)), x, 0),
                             axis=0) / denominator
    loss = jnp.where(count > 0, mean(values), jnp.nan)
    return loss, jax.tree.map(mean, grads), ok

  def truncation(carry, run_weight):
    net, opt_state, skipped, tasks, params, states, start = carry
    (loss, ((new_params, new_states), ok, per_task)), grads = jax.value_and_grad(
        batch_loss, has_aux=True)(net, tasks, params, states)
    diverged = jnp.zeros([], jnp.int32)
    if masking:
      finite = tree_utils.all_finite(grads) & jnp.isfinite(loss)
      loss, grads, ok = jax.lax.cond(
          finite, lambda: (loss, grads, ok),
          lambda: masked_mean(net, tasks, params, states))
      ok = ok & jax.vmap(lambda p, s: tree_utils.all_finite((p, s)))(new_params, new_states)
      restart = lambda fresh, current: jnp.where(
          ok.reshape((-1,) + (1,) * (current.ndim - 1)), current, fresh)
      new_params, new_states = jax.tree.map(restart, start, (new_params, new_states))
      diverged = jnp.sum(~ok).astype(jnp.int32)
    if truncation_weights is not None:
      grads = jax.tree.map(lambda g: run_weight * g, grads)
    net, opt_state, finite = apply_if_finite(meta_optimizer, grads, loss, net, opt_state)
    net, opt_state = parallel.replicate((net, opt_state))
    params, states = parallel.shard_batch((new_params, new_states))
    skipped = skipped + (~finite).astype(jnp.int32)
    return ((net, opt_state, skipped, tasks, params, states, start),
            (loss, finite, diverged, per_task))

  def meta_step(state: TrainingState):
    key, sub = jax.random.split(state.key)
    tasks, params, states = parallel.shard_batch(
        sample_problems(sub, family, config, tasks_per_step))
    carry = (state.params, state.opt_state, state.skipped_updates, tasks, params, states,
             (params, states))
    (net, opt_state, skipped, tasks, params, _, _), (losses, finite, diverged, per_task) = (
        jax.lax.scan(truncation, carry, run_weights))
    task_losses = parallel.shard_batch(jax.vmap(family.loss)(tasks, params))
    new_state = TrainingState(net, opt_state, key, state.meta_step + 1, skipped)
    return parallel.replicate(new_state), TrainingInfo(losses, finite, task_losses, diverged,
                                                       per_task)

  return meta_step


def _perturbed_leaves(net: Any, perturb: str | None) -> Any:
  """The network's leaves that PES perturbs (a pytree of bools): those whose path
  contains ``perturb`` (all with ``None``)."""
  mask = jax.tree_util.tree_map_with_path(
      lambda path, _: perturb is None or perturb in jax.tree_util.keystr(path), net)
  if not any(jax.tree.leaves(mask)):
    raise ValueError(f"PES.perturb={perturb!r} matches no leaf of the network; its paths: "
                     f"{[jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_leaves_with_path(net)]}")
  return mask


def _pes_meta_step(config, family: TaskFamily, training: TrainingConfig,
                   meta_optimizer: optax.GradientTransformation, mesh: jax.sharding.Mesh | None,
                   data_axis: str | tuple[str, ...] | None):
  """The meta step of one family with the PES meta-gradient (``training.pes``): each of
  the batch's tasks runs ``2 * pes.pairs`` perturbed copies of the network from the same
  start on the same minibatches, and after each truncation the meta-optimizer steps on
  the mean over the tasks of :func:`metaoptax.l2o.pes.gradient`'s estimate."""
  (tasks_per_step, horizon, unroll, _, log_loss, loss_weights, masking, truncation_weights,
   pes) = training
  if pes.pairs < 1 or not pes.sigma > 0:
    raise ValueError(f"PES needs pairs >= 1 and sigma > 0, got {pes.pairs} and {pes.sigma}.")
  copies = 2 * pes.pairs
  parallel = data_parallel(mesh, data_axis, tasks_per_step * copies,
                           "tasks_per_step * 2 * pes.pairs")
  weights = jnp.ones(unroll) if loss_weights is None else jnp.asarray(loss_weights)
  run_weights = (jnp.ones(horizon // unroll) if truncation_weights is None
                 else jnp.asarray(truncation_weights))

  def particle_loss(net, particle):
    task, params, state = particle
    losses, (params, state) = _unroll(config, family, net, task, params, state, unroll, False,
                                      log_loss)
    return jnp.mean(losses * weights), (task, params, state)

  def truncation(carry, inputs):
    run_weight, key = inputs
    net, opt_state, skipped, particles, start = carry
    grads, losses, particles, pairs_ok = pes_estimator.gradient(
        key, particle_loss, net, particles, pes.sigma, _perturbed_leaves(net, pes.perturb))
    ok = jnp.repeat(pairs_ok, 2)
    diverged = jnp.zeros([], jnp.int32)
    if masking:
      ok = ok & jax.vmap(tree_utils.all_finite)(particles.states[1:])
      ok = jnp.repeat(jnp.all(ok.reshape(-1, 2), axis=1), 2)  # a pair restarts together
      count = jnp.sum(ok)
      loss = jnp.where(count > 0, jnp.sum(jnp.where(ok, losses, 0.0))
                       / jnp.maximum(count, 1).astype(losses.dtype), jnp.nan)
      restart = lambda fresh, current: jnp.where(
          ok.reshape((-1,) + (1,) * (current.ndim - 1)), current, fresh)
      particles = pes_estimator.PESState(
          jax.tree.map(restart, start, particles.states),
          jax.tree.map(lambda xi: restart(jnp.zeros_like(xi), xi), particles.accumulated))
      diverged = jnp.sum(~ok).astype(jnp.int32)
    else:
      loss = jnp.mean(losses)
    if truncation_weights is not None:
      grads = jax.tree.map(lambda g: run_weight * g, grads)
    net, opt_state, finite = apply_if_finite(meta_optimizer, grads, loss, net, opt_state)
    net, opt_state = parallel.replicate((net, opt_state))
    particles = parallel.shard_batch(particles)
    skipped = skipped + (~finite).astype(jnp.int32)
    per_task = jnp.mean(losses.reshape(tasks_per_step, copies), axis=1)
    return (net, opt_state, skipped, particles, start), (loss, finite, diverged, per_task)

  def meta_step(state: TrainingState):
    key, sub = jax.random.split(state.key)
    noise_key = jax.random.fold_in(sub, 1)  # the tasks are those of the back-propagation step
    particles = parallel.shard_batch(jax.tree.map(
        lambda x: jnp.repeat(x, copies, axis=0),
        sample_problems(sub, family, config, tasks_per_step)))
    carry = (state.params, state.opt_state, state.skipped_updates,
             pes_estimator.init(state.params, particles), particles)
    (net, opt_state, skipped, particles, _), (losses, finite, diverged, per_task) = (
        jax.lax.scan(truncation, carry,
                     (run_weights, jax.random.split(noise_key, horizon // unroll))))
    tasks, params, _ = particles.states
    task_losses = jnp.mean(jax.vmap(family.loss)(tasks, params).reshape(tasks_per_step, copies),
                           axis=1)
    new_state = TrainingState(net, opt_state, key, state.meta_step + 1, skipped)
    return parallel.replicate(new_state), TrainingInfo(losses, finite, task_losses, diverged,
                                                       per_task)

  return meta_step


def _summarize(infos: TrainingInfo) -> tuple[float, dict]:
  """The median over the tasks of their meta-loss (averaged over the truncations since
  the previous report), and the worst task's: one diverging task (an ill-conditioned
  draw that the network's current steps overshoot) dominates the batch mean, which
  the meta step descends and ``result.losses`` records, but not the median."""
  per_task = np.asarray(infos.task_meta_losses, np.float64)
  per_task = per_task.reshape(-1, per_task.shape[-1])
  if not per_task.size:
    return float("nan"), {"worst_task": float("nan")}
  ordered = np.where(np.isnan(per_task), np.inf, per_task)  # a NaN task is as bad as inf
  return (loop.finite_mean(np.median(ordered, axis=-1)),
          {"worst_task": float(np.max(ordered))})


def train(
    rng_key: jax.Array,
    family: TaskFamily | Sequence[TaskFamily],
    config: L2OConfig,
    training: TrainingConfig = TrainingConfig(),
    *,
    num_iterations: int = 100,
    optimizer: optax.GradientTransformation | None = None,
    init_state: TrainingState | None = None,
    progress: str | Callable[[Progress], None] | None = "bar",
    log_every: int = 10,
    mesh: jax.sharding.Mesh | None = None,
    data_axis: str | Sequence[str] | None = None,
    checkpoint_dir: str | os.PathLike | None = None,
    checkpoint_every: int = 0,
    validation: Validation | None = None,
) -> TrainingResult:
  """Trains the network of a learned optimizer on a task family.

  The run is a pure function of its starting state: the same ``init_state``
  gives the same result bit for bit, whatever ``log_every``, and so does a run
  interrupted and resumed from a checkpoint. The host waits for the devices
  only at progress reports and checkpoints.

  Args:
    rng_key: PRNG key of the run: the network's init and the task batches
      (:func:`init_training`); unused with ``init_state``.
    family: the task family to train on, or a sequence of families (e.g.
      architectures whose params differ in shape): task batch ``k`` is drawn from
      family ``k mod len(family)``, every batch has the same ``training``.
    config: the learned optimizer's configuration: an :class:`L2OConfig` (heads,
      sizes), a :class:`ScaledAdamConfig` or a :class:`ClimbedAdamConfig`.
    training: tasks per batch, horizon, truncation and meta-loss
      (:class:`TrainingConfig`).
    num_iterations: task batches in the whole run (a resumed run does the
      remaining ones); each gives ``horizon // unroll`` meta updates.
    optimizer: optax optimizer of the network (default
      :func:`default_optimizer`: Adam 1e-3 with global-norm clipping at 1).
    init_state: the starting state (:func:`init_training`; or ``result.state`` of
      an earlier call, to continue). Default: ``init_training(rng_key, family,
      config, training, optimizer=optimizer)``.
    progress: ``"bar"`` (a tqdm bar with the loss, the skipped updates and the
      rate), a callable receiving a :class:`metaoptax.Progress` every
      ``log_every`` iterations and at the end (``print`` prints a labelled
      line), or ``None`` for silence. The reported ``loss`` is the median over
      the batch's tasks of their meta-loss, and ``worst_task`` the largest: a
      task that diverges under the network's current steps (an ill-conditioned
      draw) shows there, while ``result.losses`` records the batch mean that the
      meta step descends, which that one task dominates.
    log_every: iterations between progress reports.
    mesh: shard the tasks over this ``jax.sharding.Mesh`` (data parallel; see
      :func:`build_training_step`). Same results as on one device up to the order
      of float32 sums over tasks.
    data_axis: the mesh axis (or axes) the tasks are split over (default all).
    checkpoint_dir: write the state to ``checkpoint_dir/<iteration>`` (orbax,
      :mod:`metaoptax.checkpoint`) every ``checkpoint_every`` iterations and at
      the end. If it already holds checkpoints, the run resumes from the
      latest, so re-running the same call after an interruption finishes the
      run. An ``init_state`` that is neither the checkpointed run's start nor
      its latest state is an error.
    checkpoint_every: iterations between checkpoints (0: only at the end).
    validation: score the network on held-out tasks (:class:`Validation`) at
      the start, every ``validation.every`` iterations and at the end, and with
      ``validation.select_best`` return the best-scoring weights as
      ``result.params`` (``result.state`` stays the last state, to continue).
      The scores are in ``result.validation_scores``; they read the weights
      on the host, the training itself is unchanged. A resumed run selects
      among the scores of its own call.

  Returns:
    A :class:`TrainingResult`.
  """
  data_axis = hashable_axis(data_axis)
  training = _training_config(training)
  _check(config, _families(family))
  optimizer = optimizer or default_optimizer()
  chosen = init_state is not None
  if init_state is None:
    init_state = init_training(rng_key, family, config, training, optimizer=optimizer)
  parallel = data_parallel(mesh, data_axis, training.tasks_per_step, "tasks_per_step")
  step = loop.jitted(_build_training_step, config, _families(family), training, optimizer,
                     mesh, data_axis)
  selection = (None if validation is None else
               validation_selection(config, validation, num_iterations))
  run = loop.run(step, init_state, num_iterations=num_iterations,
                 count=lambda s: s.meta_step, summarize=_summarize, label="L2O meta-training",
                 chosen=chosen, place=parallel.place, progress=progress, log_every=log_every,
                 checkpoint_dir=checkpoint_dir, checkpoint_every=checkpoint_every,
                 callback=selection)
  losses = run.infos.losses.reshape(-1)
  result = TrainingResult(run.state.params, losses, int(run.state.skipped_updates),
                          run.seconds, losses.size / run.seconds, run.state,
                          int(np.sum(run.infos.diverged)))
  if selection is None:
    return result
  return result._replace(
      params=selection.best_params if validation.select_best else run.state.params,
      validation_scores=np.stack([selection.iterations, selection.scores], axis=1),
      best_iteration=selection.best_iteration)
