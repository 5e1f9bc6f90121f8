"""Batches of optimizee problems: tasks of a family, starting points and optimizer states."""

from __future__ import annotations

import jax

from metaoptax.l2o.network import L2OConfig
from metaoptax.l2o.optimizer import init_state
from metaoptax.l2o.tasks import TaskFamily

__all__ = ("sample_problems",)


def sample_problems(config: L2OConfig, family: TaskFamily, key: jax.Array, count: int):
  """``count`` tasks, starting points and fresh optimizer states (vmapped)."""
  k_task, k_init = jax.random.split(key)
  tasks = jax.vmap(family.sample_task)(jax.random.split(k_task, count))
  params = jax.vmap(family.init_params)(jax.random.split(k_init, count), tasks)
  states = jax.vmap(lambda p: init_state(config, p))(params)
  return tasks, params, states
