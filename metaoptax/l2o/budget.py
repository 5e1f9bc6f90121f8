r"""A budget-aware learned optimizer: the LSTM knows how far the run has gone and how long
it is, and meta-training scores the end of runs of varied length.

Method. A step size tuned for a budget of :math:`T` steps depends on :math:`T`: a
constant rate that is best at 1,000 steps is too large at 5,000, where the best
schedules hold a rate and decay it as the run nears its end (e.g. the cosine or linear
decay to zero at :math:`T`). :class:`~metaoptax.l2o.ScaledAdamConfig` with ``budget``
:math:`T` gives its per-tensor LSTM the fraction of the run done and the budget,

.. math::

  x_t = \min(t / T, 1), \qquad \phi_t = \big(x_t, x_t^2, x_t^4, x_t^8, \log(T) / 10\big),

as inputs (the training-horizon features of VeLO, Metz et al. 2022), and its read-out
reads them beside the LSTM's output :math:`h_t^{(i)}`:

.. math::

  u_t^{(i)} = -\eta\, e^{s_t^{(i)}}\, d_t^{(i)}, \qquad
  s_t^{(i)} = S_\pm \tanh\!\big(w^\top h_t^{(i)} + v^\top \phi_t + b\big),

so that a schedule of the run's fraction (hold, then decay as :math:`x_t \to 1`) is one
linear term, whatever the LSTM learns of the gradients. The read-out :math:`(w, v, b)`
starts at zero: at initialization the optimizer is exactly ``optax.adam(eta)`` whatever
:math:`T`, and with any weights each step is Adam's direction times a factor in
:math:`[e^{-S_-}, e^{S_+}]`. At evaluation the user passes the budget
(``ScaledAdamConfig(budget=T)``, or ``state.budget``); past :math:`T` the features stay at
:math:`x = 1`.

Meta-training (:class:`VariedBudget`). Each task draws its budget log-uniformly in
:math:`[T_{lo}, T_{hi}]` and its run *ends* there: from step :math:`T` on the optimizee's
parameters and the optimizer's state are held, so that every later loss of the unroll is
the run's final loss :math:`\ell(x_T)`. The meta-loss of a horizon of :math:`H \ge T_{hi}`
steps, a mean over its truncations, then counts the final loss of each run with weight
:math:`(H - T)/H` beside its trajectory: the objective that a schedule tuned for the
budget optimizes. A gradient of the final loss through the whole run crosses
truncations: persistent evolution strategies (:mod:`metaoptax.l2o.pes`) estimate it,
truncated back-propagation does not (the held steps give it no gradient).
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax

from metaoptax.l2o.learned_adam import ScaledAdamConfig, ScaledAdamState

__all__ = ("VariedBudget",)


class VariedBudget(NamedTuple):
  """Meta-training configuration of a budget-aware :class:`~metaoptax.l2o.ScaledAdamConfig`:
  each task's budget is drawn log-uniformly in ``[low, high]`` steps and its run ends
  there (module docstring). The same network and optimizer as ``config``: the trained
  weights go to ``config.transformation``, with the user's budget.

  Attributes:
    config: the optimizer (``budget`` set: its value is the budget of ``init_state``, the
      held-out tasks' of :class:`~metaoptax.l2o.Validation`).
    low, high: :math:`T_{lo} \\le T_{hi}`, the range of the tasks' budgets (steps).
  """

  config: ScaledAdamConfig
  low: float
  high: float

  def init_network(self, rng_key: jax.Array):
    """The optimizer's initial weights (zero read-out: exactly Adam)."""
    _check(self)
    return self.config.init_network(rng_key)

  def init_state(self, params: Any) -> ScaledAdamState:
    """The optimizer's state with ``config.budget``."""
    return self.config.init_state(params)

  def sample_state(self, rng_key: jax.Array, params: Any) -> ScaledAdamState:
    """The optimizer's state with a budget drawn log-uniformly in ``[low, high]``
    (:func:`~metaoptax.l2o.sample_problems` calls it for each task)."""
    state = self.config.init_state(params)
    log_budget = jax.random.uniform(rng_key, (), state.budget.dtype, jnp.log(self.low),
                                    jnp.log(self.high))
    return state._replace(budget=jnp.round(jnp.exp(log_budget)))

  def step(self, network_params, state: ScaledAdamState, params: Any, grads: Any,
           act: Callable | None = None):
    """:meth:`ScaledAdamConfig.step` until the state's budget is spent, then the params
    and the state held (the run is over)."""
    new_params, new_state, info = self.config.step(network_params, state, params, grads, act)
    running = state.count < state.budget
    hold = lambda new, old: optax.tree_utils.tree_where(running, new, old)
    return hold(new_params, params), hold(new_state, state), info

  def transformation(self, network_params) -> optax.GradientTransformationExtraArgs:
    """``config.transformation``: the optimizer at ``config.budget``."""
    return self.config.transformation(network_params)


def _check(varied: VariedBudget) -> None:
  if varied.config.budget is None:
    raise ValueError("VariedBudget needs a config with a budget (ScaledAdamConfig(budget=T)).")
  if not 1 <= varied.low <= varied.high:
    raise ValueError(f"Need 1 <= low <= high, got {varied.low} and {varied.high}.")
