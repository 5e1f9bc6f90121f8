r"""A fresh start of the base direction and the trace when the climb ends.

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

With ``metaoptimize(..., restart_after_climb=True)``, at the step at which the
climb ends the base state restarts from ``base.init`` and the trace from its
initial value (the approximation's restart): the run goes on as one started at
the climbed step size from the current weights. The meta optimizer's state
(warm since the first step) is kept.
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


def restart_when_climb_ends(before: MetaOptimizeState, after: MetaOptimizeState,
                            fresh_base_state: Callable[[Any], Any],
                            initial_trace: Callable[[Any, Any], Any]) -> MetaOptimizeState:
  """``after``, with its base state and trace restarted if the climb ended in this step.

  Args:
    before, after: the states before and after the step.
    fresh_base_state: ``meta_params -> base state`` as at ``init``.
    initial_trace: ``(trace, meta_params) -> trace`` a restart starts from.
  """
  (was,), (now,) = climb_states(before.meta_state), climb_states(after.meta_state)
  ends = was.climbing & ~now.climbing
  where = lambda fresh, kept: jax.tree.map(
      lambda f, k: jnp.where(ends, f, k).astype(k.dtype), fresh, kept)
  return after._replace(
      base_state=where(fresh_base_state(after.meta_params), after.base_state),
      trace=where(initial_trace(after.trace, after.meta_params), after.trace))

