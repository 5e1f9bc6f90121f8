"""Evaluating optimizers, learned or not, on unseen tasks of a family."""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import optax

from metaoptax.l2o.network import L2OConfig
from metaoptax.l2o.problems import sample_problems
from metaoptax.l2o.tasks import TaskFamily, gradient

__all__ = ("evaluate",)


def evaluate(rng_key: jax.Array, family: TaskFamily, optimizer: optax.GradientTransformation,
             num_tasks: int, steps: int) -> jax.Array:
  """Losses ``(num_tasks, steps + 1)`` of an optax optimizer on unseen tasks of ``family``.

  The same ``rng_key`` gives every optimizer the same tasks and starting points. A
  trained learned optimizer is ``config.transformation(result.params)``; each update
  receives the task's group action as ``act=`` (``None`` for a family without one),
  so its teleport head acts (other optimizers ignore it).

  Args:
    rng_key: PRNG key of the tasks and starting points.
    family: the :class:`TaskFamily`.
    optimizer: any optax transformation, learned or not.
    num_tasks: the tasks to run (vmapped).
    steps: the optimizer steps on each.

  Returns:
    ``(num_tasks, steps + 1)``: each task's loss at its start and after every step.

  Examples:
    >>> import jax, optax
    >>> from metaoptax import l2o
    >>> family = l2o.tasks.ellipse()
    >>> losses = l2o.evaluate(jax.random.key(0), family, optax.adam(0.1), 4, 10)
    >>> losses.shape
    (4, 11)
  """
  tasks, params, _ = sample_problems(rng_key, family, L2OConfig(), num_tasks)
  return jax.jit(functools.partial(trajectory_losses, family, optimizer, steps=steps))(
      tasks, params)


def trajectory_losses(family: TaskFamily, optimizer: optax.GradientTransformation, tasks: Any,
                      params: Any, steps: int) -> jax.Array:
  """Losses ``(num_tasks, steps + 1)`` of ``optimizer`` from ``params`` on ``tasks``
  (a batch, as :func:`~metaoptax.l2o.sample_problems` draws them); jit-able.
  The optimizer receives :func:`~metaoptax.l2o.tasks.gradient` at each step (the
  minibatch gradient of families that have one); the losses are ``family.loss``."""
  optimizer = optax.with_extra_args_support(optimizer)

  def run(task, p):
    act = None if family.act is None else functools.partial(family.act, task)

    def body(carry, step):
      x, s = carry
      u, s = optimizer.update(gradient(family, task, x, step), s, x, act=act)
      x = optax.apply_updates(x, u)
      return (x, s), family.loss(task, x)

    _, losses = jax.lax.scan(body, (p, optimizer.init(p)), jnp.arange(steps, dtype=jnp.int32))
    return jnp.concatenate([family.loss(task, p)[None], losses])

  return jax.vmap(run)(tasks, params)
