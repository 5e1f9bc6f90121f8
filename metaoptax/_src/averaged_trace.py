r"""The Hessian-free trace read off an average of the iterates: one buffer for both.

:func:`metaoptax.metaoptimize` with ``average=c`` keeps the average of the weights
of :func:`metaoptax.average_iterates`,

.. math::

  \bar w_t = \bar w_{t-1} + \rho_t (w_t - \bar w_{t-1}), \qquad \rho_t = \frac{1}{c\,t + 1},

and no trace of its own: the Hessian-free trace is

.. math::

  h_t = \frac{w_t - \bar w_t}{1 - \rho_t},

the iterate's distance from the average. Since
:math:`w_{t+1} - \bar w_{t+1} = (1-\rho_{t+1})(w_{t+1} - \bar w_t)` and
:math:`w_{t+1} = w_t + \Delta_t`, it follows the recursion

.. math::

  h_{t+1} = (1 - \rho_t)\, h_t + \Delta_t,

the Hessian-free trace of :mod:`metaoptax._src.hessian_free` with the discount
:math:`\gamma_t = 1 - \rho_t = c\,t / (c\,t + 1)`: a horizon of :math:`c\,t` steps that
grows with the run, as the average's does. The meta-gradient
:math:`s_t[j] = \sum_{i: b(i)=j} h_t[i]\, g_t[i]` asks whether the loss still falls
along the way from the average to the iterate. Two differences from the stored trace:
the discount is the average's (``gamma`` is not used for the step sizes' trace), and the
factor :math:`1 - \kappa\alpha_t` by which weight decay shrinks a stored trace
(:math:`h' = \gamma(1-\kappa\alpha)h + \Delta`) is left out, the horizon :math:`c\,t` being
what forgets old displacements. The params-reading base-state sensitivities and the
learned hyperparameters' columns are kept as in the stored trace.

The average starts at the first new iterate, :math:`\bar w_1 = w_1` (so
:math:`h_0 = h_1 = 0`), and again at the iterate after a restart of the trace (the guard's,
:mod:`metaoptax._src.guard`), which sets its count to 0 and reads neither the params nor
its old values. The trace resolves displacements down to the precision of the weights
themselves (float32: :math:`\sim 6\cdot 10^{-8}|w|`), where a stored trace sums the intended
ones: a climb started far below, e.g. at ``1e-8`` on weights of order 1, sees no
displacement and may end at once. For the same reason the average is kept in float32 (or
the params' wider dtype): a bfloat16 average's rounding, :math:`\sim 2^{-9}|w|`, would swamp
the trace while the step size is small.

Memory: the state holds the average, which the user evaluates
(:func:`metaoptax.averaged_params`), and no trace: one params-sized buffer fewer than
a stored trace beside an average. The updates must be applied as they are
(``optax.apply_updates``), as for :func:`metaoptax.average_iterates`: the new iterate
is read as ``params + updates``.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax

from metaoptax._src import hessian_free, tree_utils
from metaoptax._src.approximation import Approximation, StepConfig
from metaoptax._src.averaging import AverageState, average_weight
from metaoptax._src.blocks import BlockLayout
from metaoptax._src.learned import MetaParams
from metaoptax._src.state import AveragedTrace, HessianFreeTrace, MetaOptimizeState

def trace_scale(horizon: Any, count: jax.Array) -> jax.Array:
  r""":math:`1 / (1 - \rho_n) = (c n + 1) / (c n)` after ``n = count`` steps (1 at ``n = 0``,
  where the trace is 0)."""
  n = horizon * count.astype(jnp.result_type(horizon, jnp.float32))
  return jnp.where(count > 0, (n + 1.0) / jnp.where(count > 0, n, 1.0), 1.0)


def weights_trace(horizon: Any, average: AverageState, params: Any) -> Any:
  r""":math:`h_t = (w_t - \bar w_t) / (1 - \rho_t)`, params-shaped, float32 or wider; 0 at
  ``count = 0`` (the start, or a restart: the average is the iterate)."""
  scale = trace_scale(horizon, average.count)

  def leaf(w, a):
    difference = _difference(w, a)
    scaled = difference * scale.astype(tree_utils.real_dtype(difference.dtype))
    return jnp.where(average.count > 0, scaled, jnp.zeros_like(scaled))

  return jax.tree.map(leaf, params, average.average)


def _difference(w: jax.Array, a: jax.Array) -> jax.Array:
  """:math:`w - \\bar w` in float32 or wider."""
  wide = tree_utils.wide_dtype(jnp.result_type(w, a))
  return w.astype(wide) - a.astype(wide)


def _real_dtype_of(tree: Any) -> Any:
  """float32, or float64 for float64 (or complex128) params."""
  leaves = jax.tree.leaves(tree)
  return tree_utils.real_dtype(jnp.result_type(*leaves)) if leaves else jnp.float32


def _as_hessian_free(trace: AveragedTrace, weights: Any) -> HessianFreeTrace:
  return HessianFreeTrace(weights=weights, base_state=trace.base_state,
                          hyperparams=trace.hyperparams, count=trace.average.count)


def approximation(horizon: Any) -> Approximation:
  """The Hessian-free approximation whose trace is read off an average of horizon
  ``horizon``, kept in float32 or wider."""

  def init_trace(config: StepConfig, layout: BlockLayout, wide_params: Any, base_state: Any,
                 meta_state: Any, meta_params: MetaParams) -> AveragedTrace:
    """The average at the params, and the stored trace's other parts (zeros)."""
    trace = hessian_free.init_trace(config, layout, wide_params, base_state, meta_state,
                                    meta_params)
    return AveragedTrace(
        average=AverageState(count=jnp.zeros([], jnp.int32),
                             # a copy: the params and the state may both be donated
                             average=jax.tree.map(jnp.copy, wide_params)),
        horizon=jnp.asarray(horizon, _real_dtype_of(wide_params)), base_state=trace.base_state,
        hyperparams=trace.hyperparams)

  def initial_trace(trace: AveragedTrace, meta_params: MetaParams) -> AveragedTrace:
    """A restart: the average's count at 0 (so ``h = 0``, and the average starts again at
    the new iterate, :func:`after_update`), its values left as they are (they are not
    read again); the other sensitivities zero."""
    del meta_params
    zeros = jax.tree.map(jnp.zeros_like, trace)
    return zeros._replace(average=trace.average._replace(count=zeros.average.count),
                          horizon=trace.horizon)

  def meta_gradient(layout: BlockLayout, trace: AveragedTrace, grads: Any,
                    meta_params: MetaParams, params: Any) -> MetaParams:
    r"""``s = H^T g`` with :math:`h = (w - \bar w)/(1-\rho)`: the per-block sums of
    :math:`(w - \bar w)\,g`, times :math:`1/(1-\rho)` (one scalar); 0 at count 0."""
    unscaled = jax.tree.map(_difference, params, trace.average.average)
    s = hessian_free.meta_gradient(layout, _as_hessian_free(trace, unscaled), grads,
                                   meta_params)
    # at count 0 the average is the iterate, h = 0 (a restart's stale values are not read)
    count = trace.average.count
    scale = trace_scale(trace.horizon, count)
    return s._replace(step_size=jax.tree.map(
        lambda x: jnp.where(count > 0, x * scale, jnp.zeros_like(x)).astype(x.dtype),
        s.step_size))

  def step(config: StepConfig, layout: BlockLayout, grads: Any, state: MetaOptimizeState,
           meta_grad: MetaParams, params: Any, extra_args: dict) -> tuple[Any, MetaOptimizeState]:
    """The Hessian-free step (:func:`metaoptax._src.hessian_free.step`) from the trace read
    off the average; the average itself moves in :func:`after_update`."""
    trace = state.trace
    viewed = _as_hessian_free(trace, weights_trace(trace.horizon, trace.average, params))
    delta, new = hessian_free.step(config, layout, grads, state._replace(trace=viewed),
                                   meta_grad, params, extra_args)
    return delta, new._replace(trace=trace._replace(base_state=new.trace.base_state,
                                                    hyperparams=new.trace.hyperparams))

  def after_update(trace: AveragedTrace, params: Any, updates: Any) -> AveragedTrace:
    """The average's step, which is the trace's, at the new iterate ``params + updates``:
    the updates as returned (after the guard, in the params' dtypes), so that the new
    iterate is the expression of ``optax.apply_updates``, which XLA computes once.

    A skipped step (zero updates) moves the average too, as
    :func:`metaoptax.average_iterates` after the step would."""
    started = trace.average.count > 0
    count = optax.safe_increment(trace.average.count)
    weight = average_weight(trace.horizon, count)

    def averaged(a, p, u):
      wide = tree_utils.wide_dtype(a.dtype)
      a = a.astype(wide)
      new = p.astype(wide) + u.astype(wide)
      # at count 0 (the start, a restart) the average starts at the new iterate
      return jnp.where(started, a + weight.astype(tree_utils.real_dtype(wide)) * (new - a), new)

    average = jax.tree.map(averaged, trace.average.average, params, updates)
    return trace._replace(average=AverageState(count=count, average=average))

  return Approximation(init_trace=init_trace, initial_trace=initial_trace,
                       meta_gradient=meta_gradient, step=step, checks_new_trace=False,
                       takes_held_out_gradient=True, after_update=after_update)
