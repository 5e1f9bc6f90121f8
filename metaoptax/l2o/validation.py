"""Held-out validation tasks during meta-training, and the choice of the final weights.

Meta-training a learned optimizer by truncated back-propagation is noisy: the
network's quality on unseen tasks wanders from one meta update to the next, so
the weights at the last iteration are one draw from that wander. Scoring the
network every ``every`` iterations on a fixed set of held-out tasks drawn from
the training distribution, and keeping the best-scoring weights, is the usual
checkpoint selection (early stopping) of supervised learning. The held-out
tasks must not be the tasks the optimizer is finally evaluated on.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from metaoptax.l2o.evaluation import trajectory_losses
from metaoptax.l2o.network import L2OConfig
from metaoptax.l2o.problems import sample_problems
from metaoptax.l2o.tasks import TaskFamily

__all__ = ("Validation",)


class Validation(NamedTuple):
  """Held-out tasks that score the network during :func:`~metaoptax.l2o.train`.

  The score is the median over ``num_tasks`` tasks of the loss after ``at``
  steps of the learned optimizer (a non-finite loss counts as ``+inf``), the
  same losses as ``evaluate(key, family, config.transformation(params),
  num_tasks, steps)[:, at]``. With a sequence of families (meta-training on
  several), ``num_tasks`` tasks of each and the geometric mean of their
  medians: every family counts alike whatever the scale of its loss.

  Attributes:
    family: the family the held-out tasks are drawn from (the training family,
      or the same distribution, never the final evaluation's tasks), or a
      sequence of families.
    key: PRNG key of the held-out tasks and starting points (fixed for the run;
      a key not used for the training batches or the final evaluation).
    num_tasks: held-out tasks.
    steps: optimizee steps run on each.
    at: the step whose loss is scored (default ``steps``).
    every: iterations (task batches) between scores; the starting weights and
      the last iteration are scored too.
    select_best: return the best-scoring weights as ``result.params`` (the
      earliest on ties); otherwise the last ones.
  """

  family: TaskFamily | Sequence[TaskFamily]
  key: jax.Array
  num_tasks: int = 200
  steps: int = 20
  at: int | None = None
  every: int = 100
  select_best: bool = True


def check(validation: Validation) -> None:
  at = validation.steps if validation.at is None else validation.at
  if validation.num_tasks < 1 or validation.steps < 1 or validation.every < 1:
    raise ValueError("Validation needs num_tasks, steps and every >= 1, got "
                     f"{validation.num_tasks}, {validation.steps} and {validation.every}.")
  if not 0 <= at <= validation.steps:
    raise ValueError(f"Validation.at ({at}) must be in [0, steps={validation.steps}].")


@functools.partial(jax.jit, static_argnames=("config", "family", "steps", "at"))
def _median_loss(network_params, tasks, starts, *, config, family, steps, at):
  losses = trajectory_losses(family, config.transformation(network_params), tasks, starts,
                             steps)[:, at]
  return jnp.median(jnp.where(jnp.isfinite(losses), losses, jnp.inf))


def validation_scorer(config: L2OConfig, validation: Validation) -> Callable[[Any], float]:
  """``score(network_params) -> float``: the median held-out loss, or the geometric mean
  of the families' medians (compiled once per configuration, family and steps)."""
  check(validation)
  at = validation.steps if validation.at is None else validation.at
  single = isinstance(validation.family, TaskFamily)
  families = (validation.family,) if single else tuple(validation.family)
  problems = [jax.jit(sample_problems, static_argnums=(1, 2, 3))(
      jax.random.fold_in(validation.key, i) if not single else validation.key, family, config,
      validation.num_tasks) for i, family in enumerate(families)]

  def score(network_params):
    medians = [float(_median_loss(network_params, tasks, starts, config=config, family=family,
                                  steps=validation.steps, at=at))
               for family, (tasks, starts, _) in zip(families, problems)]
    return medians[0] if single else float(np.exp(np.mean(np.log(medians))))

  return score


class Selection:
  """Host-side record of the scores of a run and the best weights so far."""

  def __init__(self, config: L2OConfig, validation: Validation, num_iterations: int):
    self.score = validation_scorer(config, validation)
    self.every, self.last = validation.every, num_iterations
    self.iterations, self.scores = [], []
    self.best_params, self.best_iteration, self.best_score = None, None, None

  def __call__(self, iteration: int, state) -> None:
    """Scores ``state.params`` at the start, every ``every`` iterations and at the end."""
    if self.iterations and iteration % self.every and iteration != self.last:
      return
    score = self.score(state.params)
    self.iterations.append(iteration)
    self.scores.append(score)
    if self.best_score is None or score < self.best_score:
      self.best_params, self.best_iteration, self.best_score = state.params, iteration, score
