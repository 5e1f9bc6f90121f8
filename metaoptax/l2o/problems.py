"""Batches of optimizee problems: tasks of a family, starting points and optimizer states."""

from __future__ import annotations

import jax

from metaoptax.l2o.tasks import TaskFamily

__all__ = ("sample_problems",)


def sample_problems(rng_key: jax.Array, family: TaskFamily, config, num_tasks: int):
  """``num_tasks`` tasks, starting points and fresh optimizer states (vmapped).

  Args:
    rng_key: PRNG key of the tasks and starting points.
    family: the task family they are drawn from.
    config: a learned optimizer's configuration (``L2OConfig``, ``ScaledAdamConfig``,
      ...), whose ``init_state(params)`` gives the states, or one with a
      ``sample_state(key, params)`` that draws them (``l2o.budget.VariedBudget``: a
      budget per task).
    num_tasks: how many.

  Returns:
    ``(tasks, params, states)``, each with a leading axis of ``num_tasks``.
  """
  k_task, k_init = jax.random.split(rng_key)
  tasks = jax.vmap(family.sample_task)(jax.random.split(k_task, num_tasks))
  params = jax.vmap(family.init_params)(jax.random.split(k_init, num_tasks), tasks)
  sample_state = getattr(config, "sample_state", None)
  if sample_state is None:
    states = jax.vmap(lambda p: config.init_state(p))(params)
  else:
    states = jax.vmap(sample_state)(jax.random.split(jax.random.fold_in(rng_key, 2), num_tasks),
                                  params)
  return tasks, params, states
