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

from typing import Any

import jax
import jax.numpy as jnp

from metaoptax._src import tree_utils
from metaoptax._src.state import ClimbState, MetaOptimizeState


def check_climbs(meta_state: Any) -> None:
  """Raises unless the meta state holds exactly one climb."""
  found = len(tree_utils.instances_of(meta_state, ClimbState))
  if found != 1:
    raise ValueError(
        f"restart_after_climb=True needs a meta optimizer built with metaoptax.climb "
        f"(exactly one); its state holds {found}.")


def restart_if_the_climb_ended(state: MetaOptimizeState,
                               fresh_base_state: Any) -> MetaOptimizeState:
  """``state`` with its base state restarted if the climb ended at the last step.

  Args:
    state: the state a step starts from.
    fresh_base_state: the base state as at ``init`` (its constants: XLA fuses them).
  """
  (climb,) = tree_utils.instances_of(state.meta_state, ClimbState)
  return state._replace(base_state=jax.tree.map(
      lambda fresh, kept: jnp.where(climb.ended, fresh, kept).astype(kept.dtype),
      fresh_base_state, state.base_state))
