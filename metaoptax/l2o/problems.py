"""Batches of optimizee problems: tasks of a family, starting points and optimizer states."""

from __future__ import annotations

import jax

from metaoptax.l2o.tasks import TaskFamily

__all__ = ("sample_problems",)


def sample_problems(config, family: TaskFamily, key: jax.Array, count: int):
  """``count`` tasks, starting points and fresh optimizer states (vmapped).

  ``config``: a learned optimizer's configuration (``L2OConfig`` or
  ``ScaledAdamConfig``), whose ``init_state(params)`` gives the states.
  """
  k_task, k_init = jax.random.split(key)
  tasks = jax.vmap(family.sample_task)(jax.random.split(k_task, count))
  params = jax.vmap(family.init_params)(jax.random.split(k_init, count), tasks)
  states = jax.vmap(lambda p: config.init_state(p))(params)
  return tasks, params, states
