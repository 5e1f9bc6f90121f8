r"""The Hessian-free step: a compressed, params-sized trace.

With every :math:`\nabla^2 f` term of the sensitivity Jacobian :math:`G_t` set
to zero, each block of :math:`G_t` is diagonal and column :math:`j` of the trace
:math:`H` is non-zero only on block :math:`j`'s weights. One params-shaped vector
``h`` with :math:`h_i = H_{i, b(i)}` holds all of it, whatever the number of
blocks, and (paper eqs. 8-15, Algorithm 3)

.. math::

  s_t[j] = \sum_{i: b(i)=j} h_t[i]\, g_t[i], \qquad
  h_{t+1} = \gamma h_t + \mathrm{jvp}\big(\Delta,\ (w_t, \beta),\ (\gamma h_t, \mathbf{1})\big),

where :math:`\Delta(w, \beta) = -\sigma(\beta)_{b} \odot (d(w) + \kappa w)` is the
weight change with the gradient held fixed. ``jax.jvp`` evaluates the tangent,
so any base whose direction reads the params is handled exactly; for a base
that does not (Adam, Lion, RMSProp, momentum) the jvp reduces to the paper's
closed form :math:`h_{t+1} = \gamma(1-\kappa\alpha_t) h_t - \alpha_t (d_t + \kappa w_t)`
(log parametrization).

This assumes the meta update does not read :math:`\beta`
(:math:`\partial \beta_{t+1} / \partial \beta_t = I`), true of SGD, Adam, Lion,
RMSProp and momentum on :math:`\beta`.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp

from metaoptax.metaoptimize import _tree
from metaoptax.metaoptimize.blocks import BlockLayout


def meta_gradient(layout: BlockLayout, trace: Any, grads: Any) -> Any:
  """``s = H^T g`` from the compressed trace: per-block sums of ``h * g``."""
  return layout.reduce(jax.tree.map(lambda h, g: h * g.astype(h.dtype), trace, grads))


def weight_change(
    base_update: Callable,
    grads: Any,
    base_state: Any,
    params: Any,
    layout: BlockLayout,
    step_size_of: Callable,
    weight_decay,
) -> Callable:
  r"""The function :math:`(w, \beta) \mapsto (\Delta, \text{new base state})`.

  ``w`` is a widened (float32+) copy of the params; the base sees them in their
  own dtype. The gradient is closed over, i.e. held fixed (Hessian-free).
  """

  def change(wide_params, beta):
    own = _tree.cast_like(wide_params, params)
    direction, new_base_state = base_update(grads, base_state, own)
    alpha = layout.expand(step_size_of(beta))

    def leaf(a, d, w):
      d = d.astype(w.dtype)
      if not (isinstance(weight_decay, (int, float)) and weight_decay == 0):
        d = d + weight_decay * w
      return -a.astype(w.dtype) * d

    return jax.tree.map(leaf, alpha, direction, wide_params), new_base_state

  return change


def trace_step(change: Callable, params: Any, beta: Any, trace: Any, gamma):
  """One jvp: returns ``(delta, new_trace, new_base_state)``."""
  wide_params = _tree.widen(params)
  carried = _tree.scale(trace, gamma)
  ones = jax.tree.map(jnp.ones_like, beta)
  delta, delta_dot, new_base_state = jax.jvp(
      change, (wide_params, beta), (carried, ones), has_aux=True
  )
  return delta, _tree.add(carried, delta_dot), new_base_state
