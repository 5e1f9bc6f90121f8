r"""The Hessian-free step: a compressed, params-sized trace.

With every :math:`\nabla^2 f` term of the sensitivity Jacobian :math:`G_t` set
to zero, each block of :math:`G_t` is diagonal (for an elementwise base) and
column :math:`j` of the trace :math:`H` is non-zero only on block :math:`j`'s
weights. One params-shaped vector ``h`` with :math:`h_i = H_{i, b(i)}` holds all
of it, whatever the number of blocks, and (paper eqs. 8-15, Algorithm 3)

.. math::

  s_t[j] = \sum_{i: b(i)=j} h_t[i]\, g_t[i], \qquad
  h_{t+1} = \gamma h_t + \mathrm{jvp}\big(\Delta,\ (w_t, \beta),\ (\gamma h_t, \mathbf{1})\big),

where :math:`\Delta(w, \beta) = -\sigma(\beta)_{b} \odot (d(w) + \kappa w)` is the
weight change with the gradient held fixed. ``jax.jvp`` evaluates the tangent,
so a base that reads the params (``add_decayed_weights`` before Adam) is handled
exactly, its state's sensitivities carried alongside ``h``; for a base that does
not (Adam, Lion, RMSProp, momentum) the jvp reduces to the paper's closed form
:math:`h_{t+1} = \gamma(1-\kappa\alpha_t) h_t - \alpha_t (d_t + \kappa w_t)`
(log parametrization).

Assumptions: the base is elementwise (all of optax's ``scale_by_*`` are; put
global-norm clipping before ``metaoptimize``, not inside ``base``), and the meta
update does not read :math:`\beta` (:math:`\partial \beta_{t+1} / \partial
\beta_t = I`), true of SGD, Adam, Lion, RMSProp and momentum on :math:`\beta`.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax

from metaoptax._src import tree_utils
from metaoptax._src.dependence import dependent_outputs
from metaoptax._src.blocks import BlockLayout
from metaoptax._src.state import HessianFreeTrace


def meta_gradient(layout: BlockLayout, trace: HessianFreeTrace, grads: Any) -> Any:
  """``s = H^T g`` from the compressed trace: per-block sums of ``h * g``.

  The guard reads ``s`` to detect non-finite gradients and traces, so its
  derivative must stay finite when they are not (see
  :func:`tree_utils.product_with_finite_derivative`).
  """
  return layout.reduce(jax.tree.map(
      lambda h, g: tree_utils.product_with_finite_derivative(h, g.astype(h.dtype)),
      trace.weights, grads))


def params_reading_leaves(base_update: Callable, grads: Any, base_state: Any,
                          params: Any) -> tuple[int, ...]:
  """Float leaves of the base state whose sensitivity to ``beta`` can be non-zero.

  Those the update computes from the params, or (transitively) from such leaves.
  Found by a dependency walk over the update's jaxpr, at trace time.
  """
  floats, split = tree_utils.split_floats(base_state)

  def new_floats(p, *fl):
    return tree_utils.split_floats(base_update(grads, tree_utils.merge_floats(fl, split), p)[1])[0]

  reading: set[int] = set()
  while True:
    sources = [0] + [1 + i for i in sorted(reading)]
    found = {i for i, d in enumerate(dependent_outputs(new_floats, [params, *floats], sources))
             if d}
    if found <= reading:
      return tuple(sorted(reading))
    reading |= found


def init_trace(params: Any, base_state: Any, reading: tuple[int, ...]) -> HessianFreeTrace:
  floats, _ = tree_utils.split_floats(base_state)
  return HessianFreeTrace(
      weights=tree_utils.widen(jax.tree.map(jnp.zeros_like, params)),
      base_state=tuple(jnp.zeros_like(floats[i]) for i in reading))


def weight_change(
    base_update: Callable,
    grads: Any,
    base_state: Any,
    layout: BlockLayout,
    step_size_of: Callable,
    weight_decay,
    reading: tuple[int, ...],
) -> Callable:
  r"""The function :math:`(w, \tilde x_R, \beta) \mapsto (\Delta, \tilde x_R')`.

  ``w`` is a widened (float32+) copy of the params, and ``grads`` are widened
  too: the base computes its direction and state in float32 or wider (see
  :func:`metaoptax.metaoptimize`); :math:`\tilde x_R` are the params-reading
  base-state leaves. The gradient is closed over, i.e. held fixed
  (Hessian-free). The full new base state is returned as auxiliary output.
  """
  floats, split = tree_utils.split_floats(base_state)

  def change(wide_params, reading_floats, beta):
    leaves = list(floats)
    for i, x in zip(reading, reading_floats):
      leaves[i] = x
    direction, new_base_state = base_update(grads, tree_utils.merge_floats(leaves, split),
                                            wide_params)
    alpha = layout.expand(step_size_of(beta), like=wide_params)

    def leaf(a, d, w):
      d = d.astype(w.dtype)
      if not (isinstance(weight_decay, (int, float)) and weight_decay == 0):
        d = d + weight_decay * w
      # -d / (1 / a) == -a * d; written as a division so that XLA (which does not
      # duplicate divisions into a second consumer) writes delta once and the
      # trace kernel reads it, instead of writing the direction d and
      # recomputing delta from it in two kernels: one params-sized pass less.
      return -d / (1 / a.astype(w.dtype))

    delta = jax.tree.map(leaf, alpha, direction, wide_params)
    new_floats = tree_utils.split_floats(new_base_state)[0]
    return (delta, tuple(new_floats[i] for i in reading)), new_base_state

  return change


def trace_step(change: Callable, params: Any, base_state: Any, reading: tuple[int, ...],
               beta: Any, trace: HessianFreeTrace, gamma, log_parametrization: bool):
  r"""One jvp: returns ``(delta, new_trace, new_base_state)``.

  The tangent along :math:`\beta` needs no differentiation under the log
  parametrization: :math:`\Delta = -e^{\beta_b} (d + \kappa w)` and the base never
  sees :math:`\beta`, so :math:`\partial\Delta/\partial\beta \cdot \mathbf 1 = \Delta`.
  Adding :math:`\Delta` itself (instead of a second product with the direction)
  lets the trace kernel read :math:`\Delta` rather than the direction.
  """
  floats, _ = tree_utils.split_floats(base_state)
  carried = optax.tree_utils.tree_scale(gamma, trace.weights)
  carried_state = optax.tree_utils.tree_scale(gamma, trace.base_state)
  primals = (tree_utils.widen(params), tuple(floats[i] for i in reading), beta)
  if log_parametrization:
    (delta, _), (delta_dot, state_dot), new_base_state = jax.jvp(
        lambda w, x: change(w, x, beta), primals[:2], (carried, carried_state), has_aux=True)
    delta_dot = optax.tree_utils.tree_add(delta_dot, delta)
  else:
    ones = jax.tree.map(jnp.ones_like, beta)
    (delta, _), (delta_dot, state_dot), new_base_state = jax.jvp(
        change, primals, (carried, carried_state, ones), has_aux=True)
  return delta, HessianFreeTrace(optax.tree_utils.tree_add(carried, delta_dot), state_dot), new_base_state
