r"""Keeping non-finite values out of the MetaOptimize state.

The contract (``skip_nonfinite=True``):

* a step with a non-finite gradient is **skipped**: zero updates, and
  :math:`\beta`, the meta state and the trace unchanged; counted in
  ``skipped_steps``. The base optimizer's state advances as for an all-zero
  gradient (Adam's moments decay by ``b1``/``b2``, its count increments): keeping
  it exactly would need the old and new moments side by side, which costs ~25% of
  a train step on a 1M-parameter MLP;
* a finite step whose trace or :math:`\beta` is not finite (the sensitivity of a
  run can grow without bound, e.g. Adam near an optimum where
  :math:`\alpha/\sqrt{v}` explodes) is **taken**, with :math:`\beta` and the meta
  state kept and the trace restarted; counted in ``trace_resets``.

How (:func:`guarded_step`): the meta-gradient :math:`s = H^\top g` is a reduction
over every gradient entry and every trace entry, so it is finite exactly when the
gradient and the trace are (a NaN or inf anywhere gives a NaN or inf sum; a
finite sum that overflows counts as non-finite too). Only when it is not is the
gradient checked on its own (``lax.cond``), to tell a bad gradient (skip) from a
bad trace (restart: the step is taken from the initial trace). Every other
choice is a selection on these scalars, known before the big kernels run, so XLA
fuses it into them: for the Hessian-free variant the guard adds no pass over
memory.

A trace made non-finite by the step itself: the exact variants check the new
trace (one more pass) and restart it at once. The Hessian-free trace
:math:`h' = c\,h + \Delta` holds the update additively, so it can only become
non-finite with the update (a base that divides by zero, e.g. Adam with
``eps=0``); that shows up in the next meta-gradient, which restarts the trace.
Such an update itself is not caught, as in optax (chain
``optax.apply_if_finite`` for it).
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax

from metaoptax._src import tree_utils
from metaoptax._src.state import MetaOptimizeState


def _count(state: MetaOptimizeState, skipped, reset) -> MetaOptimizeState:
  return state._replace(
      skipped_steps=state.skipped_steps + jnp.asarray(skipped, jnp.int32),
      trace_resets=state.trace_resets + jnp.asarray(reset, jnp.int32))


def guarded_step(attempt: Callable, grads: Any, state: MetaOptimizeState, meta_grad: Any, *,
                 initial_trace: Callable, check_new_trace: bool) -> tuple[Any, MetaOptimizeState]:
  """Runs ``attempt(grads, state, meta_grad) -> (delta, new_state)`` under the contract.

  ``meta_grad`` is ``H^T g`` from the current trace and gradient;
  ``initial_trace(trace, meta_params)`` the trace a restart starts from, and
  ``check_new_trace`` whether the new trace is checked too (the approximation's
  :class:`~metaoptax._src.approximation.Approximation` fields).
  """
  s_ok = tree_utils.all_finite(meta_grad)
  # Only when s is not finite: is it the gradient (skip) or the trace (restart)?
  grads_ok = jax.lax.cond(s_ok, lambda: jnp.asarray(True), lambda: tree_utils.all_finite(grads))
  restart_trace = initial_trace(state.trace, state.meta_params)
  trace = optax.tree_utils.tree_where(s_ok, state.trace, restart_trace)
  delta, new = attempt(tree_utils.zeros_unless(grads_ok, grads), state._replace(trace=trace),
                       tree_utils.zeros_unless(s_ok, meta_grad))
  trace_ok = tree_utils.all_finite(new.trace) if check_new_trace else jnp.asarray(True)
  meta_ok = s_ok & trace_ok & tree_utils.all_finite(new.meta_params)
  new_trace = optax.tree_utils.tree_where(trace_ok, new.trace, restart_trace)
  new = new._replace(
      meta_params=optax.tree_utils.tree_where(meta_ok, new.meta_params, state.meta_params),
      meta_state=optax.tree_utils.tree_where(meta_ok, new.meta_state, state.meta_state),
      trace=optax.tree_utils.tree_where(grads_ok, new_trace, state.trace))
  return tree_utils.zeros_unless(grads_ok, delta), _count(new, ~grads_ok, grads_ok & ~meta_ok)


def unguarded_step(attempt: Callable, grads: Any, state: MetaOptimizeState,
                   meta_grad: Any) -> tuple[Any, MetaOptimizeState]:
  """Runs ``attempt(grads, state, meta_grad)`` without the guard (``skip_nonfinite=False``).

  The gradient and the trace pass through selections on a predicate that always
  holds (``s == s or s != s``), computed from the meta-gradient, which XLA does
  not fold: like the guard's selections, they order the reads of the trace and
  of the params (by the meta-gradient and the backward pass) before the in-place
  updates of donated buffers, which XLA would otherwise copy first. The values
  are those of ``attempt(grads, state, meta_grad)``, bit for bit.
  """
  total = sum((jnp.sum(x) for x in jax.tree.leaves(meta_grad)), jnp.zeros([]))
  always = (total == total) | (total != total)
  return attempt(tree_utils.zeros_unless(always, grads),
                 state._replace(trace=tree_utils.zeros_unless(always, state.trace)), meta_grad)


def step(attempt: Callable, grads: Any, state: MetaOptimizeState, meta_grad: Any, *,
         skip_nonfinite: bool, initial_trace: Callable,
         check_new_trace: bool) -> tuple[Any, MetaOptimizeState]:
  """:func:`guarded_step` with ``skip_nonfinite``, else :func:`unguarded_step`."""
  if skip_nonfinite:
    return guarded_step(attempt, grads, state, meta_grad, initial_trace=initial_trace,
                        check_new_trace=check_new_trace)
  return unguarded_step(attempt, grads, state, meta_grad)
