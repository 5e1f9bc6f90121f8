r"""Meta-training learned optimizers (Algorithm 1, Chen et al. 2022) and evaluation.

For each meta step, ``tasks_per_step`` tasks and starting points are sampled;
the optimizee runs ``horizon`` steps in truncations of ``unroll`` steps
(``jax.lax.scan``, ``jax.vmap`` over tasks). After each truncation the network
takes one meta-optimizer step on the gradient of the weighted loss
:math:`L = \tfrac1T \sum_t w_t\, \ell(f(x_t))` (truncated back-propagation: no
gradient crosses truncations). Non-finite meta-gradients are skipped and
counted; the run is deterministic under ``seed``.

By default the optimizee's gradient is treated as an input that does not depend
on the network (``second_order=False``, Andrychowicz et al. 2016), which drops
second derivatives of ``f`` from the meta-gradient.
"""

from __future__ import annotations

import time
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from metaoptax.l2o.network import L2OConfig, init_network
from metaoptax.l2o.optimizer import init_state, step
from metaoptax.l2o.tasks import TaskFamily
from metaoptax.metaoptimize import _tree


class MetaTrainingResult(NamedTuple):
  """What :func:`meta_train` returns."""

  network_params: Any
  meta_losses: np.ndarray  # one per meta update (truncation)
  skipped_updates: int  # meta updates skipped for non-finite meta-gradients
  seconds: float
  updates_per_second: float


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
) -> MetaTrainingResult:
  """Trains the network of a learned optimizer on a task family.

  Args:
    config: the learned optimizer's configuration (heads, sizes).
    family: the task family to train on.
    meta_steps: number of task batches; each gives ``horizon // unroll`` updates.
    tasks_per_step: tasks per batch (vmapped).
    horizon: optimizee steps per task.
    unroll: truncation length T.
    meta_optimizer: optax optimizer of the network (default Adam 1e-3 with
      global-norm clipping at 1).
    seed: PRNG seed (network init and tasks).
    second_order: differentiate through the optimizee's gradient too.
    log_loss: use ``log f`` in the meta-loss (robust across task scales).
    loss_weights: ``(unroll,)`` weights ``w_t`` (default: all ones).
    network_params: start from these weights instead of a fresh init.
    progress: called as ``progress(meta_step, mean_loss, skipped)`` every
      ``log_every`` meta steps (default: a printed line); ``None`` for silence.
    log_every: how often to report.

  Returns:
    A :class:`MetaTrainingResult`.
  """
  if horizon % unroll:
    raise ValueError(f"horizon ({horizon}) must be a multiple of unroll ({unroll}).")
  meta_optimizer = meta_optimizer or optax.chain(optax.clip_by_global_norm(1.0), optax.adam(1e-3))
  weights = jnp.ones(unroll) if loss_weights is None else jnp.asarray(loss_weights)
  key = jax.random.key(seed)
  key, init_key = jax.random.split(key)
  net = init_network(init_key, config) if network_params is None else network_params
  opt_state = meta_optimizer.init(net)

  def batch_loss(net, tasks, params, states):
    losses, carry = jax.vmap(
        lambda t, p, s: _unroll(config, family, net, t, p, s, unroll, second_order, log_loss)
    )(tasks, params, states)
    return jnp.mean(losses * weights), carry

  @jax.jit
  def truncation(net, opt_state, tasks, params, states):
    (loss, (params, states)), grads = jax.value_and_grad(batch_loss, has_aux=True)(
        net, tasks, params, states)
    finite = _tree.all_finite(grads) & jnp.isfinite(loss)
    updates, new_opt_state = meta_optimizer.update(grads, opt_state, net)
    net = _tree.select(finite, optax.apply_updates(net, updates), net)
    opt_state = _tree.select(finite, new_opt_state, opt_state)
    return net, opt_state, params, states, loss, finite

  sample = jax.jit(lambda k: sample_problems(config, family, k, tasks_per_step))
  losses, skipped = [], 0
  start = time.perf_counter()
  for meta_step in range(meta_steps):
    key, sub = jax.random.split(key)
    tasks, params, states = sample(sub)
    for _ in range(horizon // unroll):
      net, opt_state, params, states, loss, finite = truncation(
          net, opt_state, tasks, params, states)
      losses.append(float(loss))
      skipped += int(not bool(finite))
    if progress is not None and (meta_step + 1) % log_every == 0:
      recent = np.asarray(losses[-log_every * (horizon // unroll):])
      progress(meta_step + 1, float(np.mean(recent[np.isfinite(recent)])), skipped)
  seconds = time.perf_counter() - start
  return MetaTrainingResult(net, np.asarray(losses), skipped, seconds, len(losses) / seconds)


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
