"""Batches of optimizee problems: tasks of a family, starting points and optimizer states."""

from __future__ import annotations

import jax

from metaoptax.l2o.tasks import TaskFamily

__all__ = ("sample_problems",)


def sample_problems(config, family: TaskFamily, key: jax.Array, count: int):
  """``count`` tasks, starting points and fresh optimizer states (vmapped).

  ``config``: a learned optimizer's configuration (``L2OConfig`` or
  ``ScaledAdamConfig``), whose ``init_state(params)`` gives the states, or one with a
  ``sample_state(key, params)`` that draws them (``l2o.budget.VariedBudget``: a budget
  per task).
  """
  k_task, k_init = jax.random.split(key)
  tasks = jax.vmap(family.sample_task)(jax.random.split(k_task, count))
  params = jax.vmap(family.init_params)(jax.random.split(k_init, count), tasks)
  sample_state = getattr(config, "sample_state", None)
  if sample_state is None:
    states = jax.vmap(lambda p: config.init_state(p))(params)
  else:
    states = jax.vmap(sample_state)(jax.random.split(jax.random.fold_in(key, 2), count), params)
  return tasks, params, states
