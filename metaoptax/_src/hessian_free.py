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

from metaoptax._src import learned, rounding, tree_utils
from metaoptax._src.approximation import Approximation, StepConfig
from metaoptax._src.blocks import BlockLayout
from metaoptax._src.dependence import dependent_outputs, outputs_read_outputs
from metaoptax._src.learned import MetaParams
from metaoptax._src.state import HessianFreeTrace, HyperparamTrace, MetaOptimizeState


def init_trace(config: StepConfig, layout: BlockLayout, wide_params: Any, base_state: Any,
               meta_state: Any, meta_params: MetaParams) -> HessianFreeTrace:
  """``h_0 = 0``, zero sensitivities for the base-state leaves that read the params,
  and a zero column for each learned hyperparameter."""
  del layout, meta_state
  zero_grads = jax.tree.map(jnp.zeros_like, wide_params)
  reading = params_reading_leaves(config.base.update, zero_grads, base_state, wide_params)
  floats, _ = tree_utils.split_floats(base_state)
  zeros = lambda tree: jax.tree.map(jnp.zeros_like, tree)
  columns = hyperparam_dependent_leaves(config.base.update, zero_grads, base_state, wide_params,
                                        meta_params.hyperparams)
  return HessianFreeTrace(
      weights=jax.tree.map(lambda w: jnp.zeros_like(w, config.trace_dtype), wide_params),
      base_state=tuple(jnp.zeros_like(floats[i]) for i in reading),
      hyperparams=HyperparamTrace(
          weights=tuple(zeros(wide_params) for _ in columns),
          base_state=tuple(tuple(zeros(floats[i]) for i in leaves) for leaves in columns)),
      count=jnp.zeros([], jnp.int32))


def initial_trace(trace: HessianFreeTrace, meta_params: MetaParams) -> HessianFreeTrace:
  """The trace a restart starts from: zeros."""
  del meta_params
  return jax.tree.map(jnp.zeros_like, trace)


def meta_gradient(layout: BlockLayout, trace: HessianFreeTrace, grads: Any,
                  meta_params: MetaParams, params: Any = None) -> MetaParams:
  """``s = H^T g`` from the compressed trace: per-block sums of ``h * g``, like ``beta``
  (of ``Re(conj(h) * g)`` for complex params: :func:`metaoptax._src.tree_utils.real_product`);
  for each learned hyperparameter, the full sum of its column times ``g``.

  The guard reads ``s`` to detect non-finite gradients and traces, so its
  derivative must stay finite when they are not (see
  :func:`metaoptax._src.tree_utils.product_with_finite_derivative`).
  """
  def product(h, g):
    h = h.astype(tree_utils.wide_dtype(h.dtype))  # a bfloat16 trace is read as float32
    return tree_utils.real_product(h, g.astype(h.dtype), tree_utils.product_with_finite_derivative)

  del params
  s = layout.reduce(jax.tree.map(product, trace.weights, grads))

  def dot(column):
    products = [jnp.sum(product(h, g))
                for h, g in zip(jax.tree.leaves(column), jax.tree.leaves(grads))]
    return sum(products[1:], products[0]) if products else jnp.zeros([])

  hyperparams = meta_params.hyperparams
  return MetaParams(optax.tree_utils.tree_cast_like(s, meta_params.step_size), {
      name: dot(column).astype(hyperparams[name].dtype)
      for name, column in zip(sorted(hyperparams), trace.hyperparams.weights)})


def step(config: StepConfig, layout: BlockLayout, grads: Any, state: MetaOptimizeState,
         meta_grad: MetaParams, params: Any, extra_args: dict) -> tuple[Any, MetaOptimizeState]:
  """One step given ``meta_grad = H^T g``: the meta step, then one jvp of the weight change
  (and one for each learned hyperparameter's column)."""
  new_meta, new_meta_state = config.meta_step(meta_grad, state.meta_state, state.meta_params)
  used = config.step_beta(state.meta_params, new_meta)
  base_update = lambda g, s, p: config.base.update(g, s, p, **extra_args)
  base_state = config.base_state_for(used, state.base_state)
  wide_grads, wide_params = tree_utils.widen(grads), tree_utils.widen(params)
  reading = params_reading_leaves(base_update, wide_grads, base_state, wide_params)
  if len(reading) != len(state.trace.base_state):
    raise ValueError("The base state's dependence on the params changed between init "
                     "and update (different extra arguments?).")
  # The per-weight step sizes: the only expansion of the block layout in this step.
  step_sizes = layout.expand(config.step_sizes(used), like=wide_params)
  kappa = config.decay(used.hyperparams)
  change = _weight_change(config, base_update, wide_grads, base_state, reading, kappa)
  delta, weights, state_dot, new_base_state = _trace_step(
      config, change, wide_params, base_state, reading, step_sizes, state.trace)
  count = state.trace.count + 1
  new_trace = HessianFreeTrace(_stored(config, weights, count), state_dot, _hyperparam_trace_step(
      config, base_update, wide_grads, wide_params, base_state, used.hyperparams, step_sizes,
      state.trace.hyperparams), count)
  if direction_beside_state(base_update, wide_grads, base_state, wide_params):
    # XLA:CPU only: XLA:GPU fuses Delta and the moment's update into one kernel with
    # several outputs, which the ordering would split.
    new_base_state = jax.lax.platform_dependent(
        delta, new_base_state, cpu=_written_after, default=lambda _, state: state)
  return delta, state._replace(base_state=new_base_state, meta_params=new_meta,
                               meta_state=new_meta_state, trace=new_trace)


def _stored(config: StepConfig, weights: Any, count: jax.Array) -> Any:
  """The new trace in its storage dtype: as computed, or stochastically rounded to
  ``config.trace_dtype`` (:mod:`metaoptax._src.rounding`), each leaf with its own bits."""
  if config.trace_dtype is None:
    return weights
  return rounding.stochastic_round_tree(weights, config.trace_dtype, count)


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


def direction_beside_state(base_update: Callable, grads: Any, base_state: Any,
                           params: Any) -> bool:
  """Whether the base computes its direction from its old state and from none of its new
  state's floats: Lion (the sign of an interpolation of the gradient and the old moment),
  not Adam, RMSProp or momentum (from the new moments). A jaxpr walk at trace time."""
  floats, split = tree_utils.split_floats(base_state)

  def direction_and_floats(g, fl):
    direction, new_state = base_update(g, tree_utils.merge_floats(fl, split), params)
    return direction, tree_utils.split_floats(new_state)[0]

  args = [grads, floats]
  n = len(jax.tree.leaves(grads))  # the direction has the gradient's structure
  reads_old = any(dependent_outputs(direction_and_floats, args, [1])[:n])
  return reads_old and not outputs_read_outputs(direction_and_floats, args, range(n),
                                                range(n, n + len(floats)))


def _written_after(delta: Any, base_state: Any) -> Any:
  r"""``base_state``, bit for bit, with its params-shaped float leaves computed after
  :math:`\Delta`.

  For a base like Lion, the kernel that computes :math:`\Delta` and the one that
  updates the moment in place both read the gradient and the old moment, and
  nothing orders the second after the first: XLA then copies the donated
  moment before overwriting it. Each leaf here is selected on
  ``(d == d) | (d != d)`` with ``d`` one entry of its params leaf's :math:`\Delta`, a
  predicate that always holds and that XLA does not fold, so the in-place
  update reads that entry of :math:`\Delta` and runs after it, and the copy goes. One
  entry orders the kernels as all of :math:`\Delta` would, without a pass over it. (With
  ``weight_decay=0`` XLA fuses :math:`\Delta` into its readers instead of
  writing it, and the copy stays, as in ``optax.lion``'s own step.) On CPU only: where
  fusions have several outputs (XLA:GPU), one kernel computes :math:`\Delta` and the
  moment's update together, and the ordering would split it in two.
  """
  treedef = jax.tree.structure(delta)

  def leaf(x, d):
    if jnp.shape(x) != jnp.shape(d) or not jnp.issubdtype(jnp.asarray(x).dtype, jnp.inexact):
      return x
    if jnp.size(d):
      d = d[(0,) * jnp.ndim(d)]
    return jnp.where((d == d) | (d != d), x, jnp.zeros_like(x))

  def subtree(tree):
    return jax.tree.map(leaf, tree, delta) if jax.tree.structure(tree) == treedef else tree

  return jax.tree.map(subtree, base_state, is_leaf=lambda t: jax.tree.structure(t) == treedef)


def _weight_change(config: StepConfig, base_update: Callable, grads: Any, base_state: Any,
                   reading: tuple[int, ...], kappa: Any) -> Callable:
  r"""The function :math:`(w, \tilde x_R, \alpha) \mapsto (\Delta, \tilde x_R')`.

  ``w`` is a widened (float32+) copy of the params, and ``grads`` are widened
  too: the base computes its direction and state in float32 or wider (see
  :func:`metaoptax.metaoptimize`); :math:`\tilde x_R` are the params-reading
  base-state leaves; :math:`\alpha` the per-weight step sizes. The gradient is
  closed over, i.e. held fixed (Hessian-free). The full new base state is
  returned as auxiliary output.
  """
  floats, split = tree_utils.split_floats(base_state)

  def change(wide_params, reading_floats, step_sizes):
    leaves = list(floats)
    for i, x in zip(reading, reading_floats):
      leaves[i] = x
    direction, new_base_state = base_update(grads, tree_utils.merge_floats(leaves, split),
                                            wide_params)
    delta = config.weight_change(step_sizes, kappa, direction, wide_params)
    new_floats = tree_utils.split_floats(new_base_state)[0]
    return (delta, tuple(new_floats[i] for i in reading)), new_base_state

  return change


def _trace_step(config: StepConfig, change: Callable, wide_params: Any, base_state: Any,
                reading: tuple[int, ...], step_sizes: Any, trace: HessianFreeTrace):
  r"""One jvp: returns ``(delta, new weights trace, new base-state trace, new_base_state)``.

  The tangent along :math:`\beta` needs no differentiation under the log
  parametrization: :math:`\Delta = -e^{\beta_b} (d + \kappa w)` and the base never
  sees :math:`\beta`, so :math:`\partial\Delta/\partial\beta \cdot \mathbf 1 = \Delta`.
  Adding :math:`\Delta` itself (instead of a second product with the direction)
  lets the trace kernel read :math:`\Delta` rather than the direction. Under the
  linear parametrization :math:`\alpha_b = \beta_b`, and the tangent along
  :math:`\beta` is :math:`\mathbf 1` on every weight's step size.
  """
  floats, _ = tree_utils.split_floats(base_state)
  carried = optax.tree_utils.tree_scale(config.gamma, tree_utils.widen(trace.weights))
  carried_state = optax.tree_utils.tree_scale(config.gamma, trace.base_state)
  primals = (wide_params, tuple(floats[i] for i in reading), step_sizes)
  if config.log_parametrization:
    (delta, _), (delta_dot, state_dot), new_base_state = jax.jvp(
        lambda w, x: change(w, x, step_sizes), primals[:2], (carried, carried_state),
        has_aux=True)
    delta_dot = optax.tree_utils.tree_add(delta_dot, delta)
  else:
    ones = jax.tree.map(jnp.ones_like, step_sizes)
    (delta, _), (delta_dot, state_dot), new_base_state = jax.jvp(
        change, primals, (carried, carried_state, ones), has_aux=True)
  return delta, optax.tree_utils.tree_add(carried, delta_dot), state_dot, new_base_state


def hyperparam_dependent_leaves(base_update: Callable, grads: Any, base_state: Any,
                                params: Any, hyperparams: dict) -> tuple[tuple[int, ...], ...]:
  """For each learned hyperparameter (sorted by name): the float leaves of the base state
  whose sensitivity to it can be non-zero, those computed from it or the params, or
  (transitively) from such leaves. A jaxpr walk at trace time."""
  floats, split = tree_utils.split_floats(base_state)
  names = sorted(hyperparams)

  def new_floats(p, *phis_and_floats):
    phi = dict(zip(names, phis_and_floats[:len(names)]))
    state = learned.inject(tree_utils.merge_floats(phis_and_floats[len(names):], split), phi)
    return tree_utils.split_floats(base_update(grads, state, p)[1])[0]

  columns = []
  for k in range(len(names)):
    dependent: set[int] = set()
    while True:
      sources = [0, 1 + k] + [1 + len(names) + i for i in sorted(dependent)]
      found = {i for i, d in enumerate(dependent_outputs(
          new_floats, [params, *(hyperparams[n] for n in names), *floats], sources)) if d}
      if found <= dependent:
        break
      dependent |= found
    columns.append(tuple(sorted(dependent)))
  return tuple(columns)


def _hyperparam_trace_step(config: StepConfig, base_update: Callable, grads: Any,
                           wide_params: Any, base_state: Any, hyperparams: dict,
                           step_sizes: Any, trace: HyperparamTrace) -> HyperparamTrace:
  r"""The columns of the learned hyperparameters :math:`\phi_k` (gradient held fixed):

  .. math::

    H^w_k \leftarrow \gamma H^w_k + \partial\Delta\,(\gamma H^w_k, \gamma H^x_k, e_k),
    \qquad H^x_k \leftarrow \partial\tilde x'\,(\gamma H^w_k, \gamma H^x_k, e_k),

  the paper's eq. 15 for a meta-parameter that the meta step does not read
  (:math:`\partial\phi'/\partial\phi = I`, :math:`\partial\phi'/\partial x = 0`
  under the Hessian-free approximation). :math:`\tilde x_k` are the base-state
  leaves that depend on :math:`\phi_k` or the params (Adam's first moment for
  ``b1``); one ``jax.jvp`` per column, none when nothing but the step sizes is
  learned. ``step_sizes`` are the per-weight step sizes.
  """
  columns = hyperparam_dependent_leaves(base_update, grads, base_state, wide_params,
                                        hyperparams)
  if tuple(map(len, columns)) != tuple(map(len, trace.base_state)):
    raise ValueError("The base state's dependence on the learned hyperparameters changed "
                     "between init and update (different extra arguments?).")
  floats, split = tree_utils.split_floats(base_state)
  gamma = config.gamma
  new_weights, new_states = [], []
  for name, leaves, h, hx in zip(sorted(hyperparams), columns, trace.weights, trace.base_state):

    def change(w, column_floats, phi, leaves=leaves):
      state_floats = list(floats)
      for i, x in zip(leaves, column_floats):
        state_floats[i] = x
      state = learned.inject(tree_utils.merge_floats(state_floats, split), phi)
      direction, new_state = base_update(grads, state, w)
      delta = config.weight_change(step_sizes, config.decay(phi), direction, w)
      new_floats = tree_utils.split_floats(new_state)[0]
      return delta, tuple(new_floats[i] for i in leaves)

    carried = optax.tree_utils.tree_scale(gamma, h)
    unit = {n: jnp.asarray(n == name, phi.dtype) for n, phi in hyperparams.items()}
    _, (d_delta, d_state) = jax.jvp(
        change, (wide_params, tuple(floats[i] for i in leaves), hyperparams),
        (carried, optax.tree_utils.tree_scale(gamma, hx), unit))
    # NaN -> 0: Adam's sqrt(v) has an infinite derivative at v = 0, where a weight's
    # gradient has been exactly 0 (a dead ReLU unit): its direction is 0 whatever b2,
    # so its sensitivity is 0, but forward mode gives inf * 0 (see exact._zero_nan).
    d_delta, d_state = tree_utils.nan_to_zero((d_delta, d_state))
    new_weights.append(optax.tree_utils.tree_add(carried, d_delta))
    new_states.append(d_state)
  return HyperparamTrace(tuple(new_weights), tuple(new_states))


#: The Hessian-free approximation. The trace ``h' = c h + Delta`` holds the update
#: additively: it becomes non-finite only with the update itself, which the next
#: meta-gradient shows, so the guard need not check the new trace.
HESSIAN_FREE = Approximation(init_trace=init_trace, initial_trace=initial_trace,
                             meta_gradient=meta_gradient, step=step, checks_new_trace=False,
                             takes_held_out_gradient=True)
