r"""A fresh start of the base direction's state when the climb ends.

:func:`metaoptax.climb` raises :math:`\log\alpha` from a start orders of magnitude
below a good step size. While it lasts the weights hardly move, so the gradient
keeps its initial scale, and the base direction's state records it: Adam's second
moment :math:`v` is an average over the last :math:`\sim 1/(1-b_2) = 1000`
steps, so the climb's large early gradients dominate :math:`v` for hundreds of
steps after it and shrink every step :math:`\hat m / \sqrt{\hat v}` once the loss
and its gradients have fallen. A warm-up of ``optax.adamw`` by a schedule does
the same: on ``benchmarks/lr_free.py``'s digits MLP an exponential ramp from 1e-6
to 0.0086 over 92 steps left the train loss at 0.0086 (above its floor) at step
500, against 0.0034 for a constant 0.0086 from step 0; restarting Adam's moments
when the ramp ended gave 0.0030.

With ``metaoptimize(..., restart_after_climb=True)``, the step after the one at
which the climb ends (:attr:`ClimbState.ended`) starts from the base state of
``base.init``: the base direction goes on as one started at the climbed step size
from the current weights. The meta optimizer's state (warm since the first step)
and the trace are kept. The restart selects the step's *input*: XLA fuses the
selection into the kernels that read the base state, and the step stays in place
with no temporary beyond ``optax.adamw``'s
(``tests/metaoptimize/test_compiled_step.py``). Selecting the step's outputs instead
cost two params-sized temporaries, and restarting the trace too (its selection has
two readers, the meta-gradient and the trace update) one, on XLA:CPU.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp

from metaoptax._src.state import ClimbState, MetaOptimizeState


def climb_states(meta_state: Any) -> list[ClimbState]:
  """The :class:`ClimbState` s held in a meta optimizer's state."""
  is_climb = lambda x: isinstance(x, ClimbState)
  return [s for s in jax.tree.leaves(meta_state, is_leaf=is_climb) if is_climb(s)]


def check_climbs(meta_state: Any) -> None:
  """Raises unless the meta state holds exactly one climb."""
  found = len(climb_states(meta_state))
  if found != 1:
    raise ValueError(
        f"restart_after_climb=True needs a meta optimizer built with metaoptax.climb "
        f"(exactly one); its state holds {found}.")


def restart_if_the_climb_ended(state: MetaOptimizeState,
                               fresh_base_state: Callable[[Any], Any]) -> MetaOptimizeState:
  """``state`` with its base state restarted if the climb ended at the last step.

  Args:
    state: the state a step starts from.
    fresh_base_state: ``meta_params -> base state`` as at ``init``.
  """
  (climb,) = climb_states(state.meta_state)
  return state._replace(base_state=jax.tree.map(
      lambda fresh, kept: jnp.where(climb.ended, fresh, kept).astype(kept.dtype),
      fresh_base_state(state.meta_params), state.base_state))
