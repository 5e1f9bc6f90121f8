r"""The exact-Hessian steps: L-approximation and 2x2, by forward mode.

The whole MetaOptimize step is a function
:math:`F: (\beta, \bar y, w, \tilde x) \mapsto (\beta', \bar y', \Delta, \tilde x')`
of the meta-parameters, meta state, weights and base state. The sensitivities
:math:`Z = [Y; X]` follow (paper eq. 15, the last row and column dropped)

.. math::

  Z_{t+1} = \partial F \,\big(\gamma Z_t + (1-\gamma) E\big),
  \qquad Y^\beta_0 = I,\ \text{everything else } 0,

one column per block (then one per learned hyperparameter, the meta-parameters
being the tree ``(beta, {name: phi})``), evaluated by ``jax.linearize`` of :math:`F` and its
linear map applied to each column (in turn for a few columns, under ``jax.vmap``
for many). Inside :math:`F` the gradient
is the one the user passed in, declared (``jax.custom_jvp``) to have the
derivative :math:`\nabla^2 f(w)` of the user's ``obj_fn``: every column picks up
the Hessian-vector product :math:`\nabla^2 f(w_t)\,\gamma X^w_t[:, j]` exactly,
computed as ``grad(w -> jvp(obj_fn, w, v))``, and the gradient is not evaluated
a second time.

* ``"2x2"``: the meta-gradient :math:`s = H^\top \nabla f(w)` depends on
  :math:`w` (with :math:`H` held fixed), giving the :math:`\partial y'/\partial x` block;
* ``"l_approx"``: :math:`s` is held fixed as well (that block is dropped).
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax

from metaoptax._src import sharding, tree_utils
from metaoptax._src.approximation import Approximation, StepConfig
from metaoptax._src.blocks import BlockLayout
from metaoptax._src.learned import MetaParams
from metaoptax._src.state import ExactTrace, MetaOptimizeState

MAX_EXACT_BLOCKS = 256
#: Up to this many block columns, the step applies its linear map to each column in
#: turn (unrolled at trace time), beyond to all at once (``jax.vmap``).
MAX_UNROLLED_COLUMNS = 8

#: Default trust radius ``r`` of the meta-sensitivity (:func:`stabilize`), the
#: ``sensitivity_radius`` of :func:`metaoptax.metaoptimize`: each column of
#: :math:`Y^\beta` stays within ``r`` of its initial value :math:`e_j` (l1 norm).
DEFAULT_SENSITIVITY_RADIUS = 0.9


def init_trace(config: StepConfig, layout: BlockLayout, wide_params: Any, base_state: Any,
               meta_state: Any, meta_params: MetaParams) -> ExactTrace:
  """``X_0 = 0`` and ``Y_0 = [I; 0]`` (paper Algorithm 1)."""
  del config
  check_num_blocks(layout)
  m = num_meta_params(meta_params)

  def zeros(tree):  # zeros_like keeps each leaf's sharding; the column axis is unsharded
    return jax.tree.map(lambda x: jnp.broadcast_to(
        jnp.zeros_like(x)[None], (m,) + jnp.shape(x)), tree)

  return ExactTrace(
      weights=zeros(wide_params),
      base_state=zeros(tree_utils.split_floats(base_state)[0]),
      meta_params=basis(meta_params),
      meta_state=zeros(tree_utils.split_floats(meta_state)[0]),
  )


def initial_trace(trace: ExactTrace, meta_params: MetaParams) -> ExactTrace:
  """The trace a restart starts from: zeros, and ``Y^beta = I``."""
  return jax.tree.map(jnp.zeros_like, trace)._replace(meta_params=basis(meta_params))


def meta_gradient(layout: BlockLayout, trace: ExactTrace, grads: Any,
                  meta_params: MetaParams, params: Any = None) -> MetaParams:
  """``s = H^T g``: one entry per column of the trace (laid out like the meta-parameters).

  The guard reads ``s`` to detect non-finite gradients and traces and the step
  uses it, so its derivative must stay finite when they are not (see
  :func:`metaoptax._src.tree_utils.product_with_finite_derivative`).
  """
  del layout, params
  return _columns_dot(trace.weights, grads, meta_params,
                      tree_utils.product_with_finite_derivative)


def _step(config: StepConfig, layout: BlockLayout, grads: Any, state: MetaOptimizeState,
          meta_grad: MetaParams, params: Any, extra_args: dict, *,
          two_by_two: bool) -> tuple[Any, MetaOptimizeState]:
  """One step given ``meta_grad = H^T g``: ``F`` linearized, applied to every column."""
  obj_fn = extra_args.get("obj_fn")
  check_objective(obj_fn, params)
  trace, beta = state.trace, state.meta_params
  base_floats, base_split = tree_utils.split_floats(state.base_state)
  meta_floats, meta_split = tree_utils.split_floats(state.meta_state)
  wide_params = tree_utils.widen(params)
  m = num_meta_params(beta)  # the blocks, then the learned hyperparameters
  gradient = _gradient_with_hvp_tangent(obj_fn)
  # "2x2": s depends on w through the gradient, with H held fixed (the
  # approximation drops dF/dH). "l_approx": s is held fixed: the value given,
  # not stop_gradient of an expression, which would also cut the derivative of
  # an outer transformation differentiating through this step (a meta-gradient).
  meta_grad_at = (_meta_gradient_along(meta_grad, trace.weights, beta)
                  if two_by_two else lambda g: meta_grad)

  def F(beta, meta_floats, wide_params, base_floats):
    own = optax.tree_utils.tree_cast_like(wide_params, params)
    # Primal value: the user's gradient; tangent: the Hessian-vector product.
    g = gradient(own, optax.tree_utils.tree_cast_like(grads, own))
    new_beta, new_meta = config.meta_step(
        meta_grad_at(g), tree_utils.merge_floats(meta_floats, meta_split), beta)
    # The base runs in float32 or wider, like its state (metaoptimize's "Precision").
    used = config.step_beta(beta, new_beta)
    direction, new_base = config.base.update(
        tree_utils.widen(g),
        config.base_state_for(used, tree_utils.merge_floats(base_floats, base_split)),
        wide_params, **extra_args)
    step_sizes = layout.expand(config.step_sizes(used), like=wide_params)
    delta = config.weight_change(step_sizes, config.decay(used.hyperparams), direction,
                                 wide_params)
    outputs = (
        new_beta,
        tree_utils.split_floats(new_meta)[0],
        delta,
        tree_utils.split_floats(new_base)[0],
        _curvature_probe(g),
    )
    return outputs, (new_meta, new_base)

  primals = (beta, meta_floats, wide_params, base_floats)
  (new_beta, _, delta, _, _), linear, (new_meta, new_base) = jax.linearize(
      F, *primals, has_aux=True
  )
  gamma = config.gamma
  tangents = (
      optax.tree_utils.tree_add(optax.tree_utils.tree_scale(gamma, trace.meta_params),
                                optax.tree_utils.tree_scale(1.0 - gamma, basis(beta))),
      optax.tree_utils.tree_scale(gamma, trace.meta_state),
      optax.tree_utils.tree_scale(gamma, trace.weights),
      optax.tree_utils.tree_scale(gamma, trace.base_state),
  )
  tangents = sharding.tree_reshard_like(tangents, primals, leading=1)  # explicit meshes
  if 0 < m <= MAX_UNROLLED_COLUMNS:
    # The linear map applied to each column in turn: plain matrix products.
    # Under vmap, the Hessian-vector products' weight cotangents come out with
    # the column axis inside and are transposed back (params-sized copies per
    # column): on the step_time.py MLP with per-leaf blocks (m = 6), ~20% of
    # the step on CPU; with one column, vmap's batched products are slower too.
    outs = [linear(*jax.tree.map(lambda t, j=j: t[j], tangents)) for j in range(m)]
    columns = jax.tree.map(lambda *c: jnp.stack(c), *outs)
  elif sharding.any_explicit(params):
    # jax.vmap of a linearized matmul with an explicit out_sharding (what a loss
    # on an explicit mesh contains) fails in JAX 0.10: map the columns in turn.
    columns = jax.lax.map(lambda c: linear(*c), tangents)
  else:
    columns = jax.vmap(linear, axis_size=m)(*tangents)  # axis_size: m = 0 on no params
  d_beta, d_meta, d_delta, d_base, d_probe = columns
  d_beta, d_meta, d_delta, d_base = _zero_nan((d_beta, d_meta, d_delta, d_base))
  # A non-finite Hessian-vector product (obj_fn NaN or inf near params) would be
  # read as zero curvature by _zero_nan: mark the trace non-finite instead, so
  # the guard restarts it and counts it (trace_resets); the step itself is taken.
  curvature_ok = tree_utils.all_finite(d_probe)
  new_trace = ExactTrace(
      weights=optax.tree_utils.tree_add(tangents[2], d_delta),
      base_state=d_base,
      meta_params=jax.tree.map(lambda y: jnp.where(curvature_ok, y, jnp.nan), d_beta),
      meta_state=d_meta,
  )
  return delta, state._replace(base_state=new_base, meta_params=new_beta,
                               meta_state=new_meta,
                               trace=stabilize(new_trace, state.meta_params,
                                               config.sensitivity_radius))


def stabilize(trace: ExactTrace, beta: MetaParams, radius: Any) -> ExactTrace:
  r"""Pulls each column of the sensitivities back towards its start when its
  :math:`Y^\beta` leaves the trust region :math:`\|Y^\beta_{:,j} - e_j\|_1 \le r`.

  Column ``j`` of :math:`Z = [Y; X]` becomes

  .. math::

    Z_{:,j} \leftarrow c_j Z_{:,j} + (1 - c_j) E_{:,j}, \qquad
    c_j = \min\Big(1, \frac{r}{\|Y^\beta_{:,j} - e_j\|_1}\Big),

  with :math:`E = [[I; 0]; 0]` the initial sensitivities (paper Algorithm 1).
  Since the next step propagates :math:`\gamma Z + (1-\gamma) E`, this is the
  recursion of paper eq. 15 with the discount :math:`\gamma c_j` for that step
  and column: the trace remains a non-negatively weighted sum of the exact
  sensitivities :math:`dw_t/d\beta_\tau`, with
  :math:`H_t = \sum_\tau \omega_{t,\tau}\, dw_t/d\beta_\tau`,
  :math:`\omega_{t+1,\tau} = c_{t+1}\big(\gamma\,\omega_{t,\tau} + (1-\gamma)[\tau = t]\big)`
  for :math:`\tau \le t` and :math:`\omega_{t+1,t+1} = 1 - c_{t+1}`
  (:math:`\omega_{0,0} = 1`). Inside the trust region :math:`c_j = 1` and nothing
  changes, bit for bit. With :math:`r < 1` the region is
  :math:`\|Y^\beta - I\|_1 \le r` (the induced 1-norm, a column sum): every
  column is diagonally dominant with :math:`Y^\beta_{jj} \ge 1 - r > 0`, so a
  step size's sensitivity to its own past keeps its sign and outweighs its
  effect on the others. A smaller ``r`` keeps the trace bounded too but shortens
  the horizon more, and the learned step size decays too early (the short-horizon
  bias of truncated meta-gradients); ``r = 0.9`` (docs/design-decisions.md).

  Why. :math:`Y^\beta_t = d\beta_t/d\beta_\tau` (discounted over :math:`\tau`)
  is the sensitivity of the meta-parameters to their own past; the 2x2 block
  :math:`\partial\beta'/\partial w` adds
  :math:`-\eta\, \partial u/\partial s\; H^\top \nabla^2 f\, X^w` to it each
  step, where ``u`` is the meta update. For a normalizing meta optimizer (Adam:
  :math:`\partial u/\partial s \sim 1/\sqrt{\bar v}`, the RMS of past ``s``)
  that gain is :math:`\eta\, H^\top\nabla^2 f X^w / \mathrm{rms}(s)`, large near
  a minimum where the gradient is small and the curvature is not. With
  :math:`\gamma = 1` nothing pulls :math:`Y^\beta` back, and
  :math:`Y^\beta \to X^w \to s \to Y^\beta` is a positive feedback loop:
  :math:`Y^\beta` grows first (0.5 to 9 in 300 steps, then to 1e12), :math:`X^w`
  follows, and the trace overflows; or :math:`Y^\beta` decays through 0 and
  flips the sign of the meta-gradient (an LMS base with meta Adam). The
  sensitivity to the distant past is then dominated by this unstable linearized
  meta-dynamics; the trust region shortens the horizon exactly when and for as
  long as it is (IDBD's rectifier :math:`[1 - \alpha x^2]^+`, paper Appendix B,
  likewise keeps the trace's propagation factor from changing sign).

  A non-finite :math:`Y^\beta` leaves a non-finite column (the guard restarts it).
  ``radius`` is ``metaoptimize``'s ``sensitivity_radius`` (default
  :data:`DEFAULT_SENSITIVITY_RADIUS`); ``inf`` disables the pull.
  """
  e = basis(beta)
  m = num_meta_params(beta)
  deviations = [
      jnp.sum(jnp.abs(y - u).reshape(m, -1), axis=1)
      for y, u in zip(jax.tree.leaves(trace.meta_params), jax.tree.leaves(e)) if jnp.size(y)
  ]
  if not deviations:
    return trace
  deviation = functools.reduce(jnp.add, deviations)
  # c = min(1, r / deviation), written so that its derivative (an outer jax.grad
  # through the run) is finite at deviation = 0; an infinite deviation gives
  # c = 0 and a non-finite column (the guard restarts it).
  outside = deviation > radius
  c = jnp.where(outside, radius / jnp.where(outside, deviation, radius), 1.0)

  def scaled(z):
    return (c.reshape((m,) + (1,) * (z.ndim - 1)).astype(z.dtype) * z)

  def pulled(y, u):
    c_ = c.reshape((m,) + (1,) * (y.ndim - 1)).astype(y.dtype)
    return c_ * y + (1 - c_) * u

  return ExactTrace(
      weights=jax.tree.map(scaled, trace.weights),
      base_state=jax.tree.map(scaled, trace.base_state),
      meta_params=jax.tree.map(pulled, trace.meta_params, e),
      meta_state=jax.tree.map(scaled, trace.meta_state),
  )


def check_num_blocks(layout: BlockLayout) -> None:
  if layout.num_blocks > MAX_EXACT_BLOCKS:
    raise ValueError(
        f"The exact variants carry one params-sized trace column and one "
        f"Hessian-vector product per block; this layout has {layout.num_blocks} "
        f"blocks (limit {MAX_EXACT_BLOCKS}). Use approximation='hessian_free' "
        "(one params-sized trace whatever the number of blocks), or fewer blocks."
    )


def check_objective(obj_fn: Callable | None, params: Any) -> None:
  if obj_fn is None:
    raise ValueError(
        "The exact variants ('l_approx', '2x2') need the objective for "
        "Hessian-vector products: call update(grads, state, params, obj_fn=loss) "
        "with loss(params) -> scalar, or use approximation='hessian_free'."
    )
  out = jax.eval_shape(obj_fn, params)
  if getattr(out, "shape", None) != () or not jnp.issubdtype(out.dtype, jnp.floating):
    raise ValueError(
        f"obj_fn must return a floating-point scalar; it returned {out}."
    )


def _split_like(flat: jax.Array, beta: Any) -> Any:
  """The last axis of ``flat`` (size m) cut into beta's leaves (``ravel_pytree``'s order).

  Each piece gets its leaf's shape, dtype and sharding (ravel / unravel would
  concatenate differently sharded leaves, a type error on explicit meshes).
  """
  leaves, treedef = jax.tree.flatten(beta)
  lead = flat.shape[:-1]
  pieces, start = [], 0
  for x in leaves:
    piece = flat[..., start:start + x.size].reshape(lead + jnp.shape(x)).astype(x.dtype)
    pieces.append(sharding.reshard_like(piece, x, leading=len(lead)))
    start += x.size
  return jax.tree.unflatten(treedef, pieces)


def num_meta_params(beta: Any) -> int:
  return sum(jnp.size(x) for x in jax.tree.leaves(beta))


def basis(beta: Any) -> Any:
  """Unit tangents ``e_j`` of a beta tree, stacked on a leading axis of size m.

  Laid out like ``beta`` (weight-wise: like the params), eagerly too.
  """
  m = num_meta_params(beta)
  leaves = jax.tree.leaves(beta)  # none for weight-wise blocks on an empty params tree
  dtype = jnp.result_type(*leaves) if leaves else jnp.float32
  columns = _split_like(jnp.eye(m, dtype=dtype), beta)
  return jax.tree.map(lambda e, b: e + jnp.zeros_like(b)[None], columns, beta)


def _columns_dot(columns: Any, tree: Any, beta: Any, product: Callable = jnp.multiply) -> Any:
  """``[<H[:, j], x>]_j`` for the columns ``H[:, j]`` of a trace, laid out like ``beta``
  (the real part of the conjugate inner product for complex params:
  :func:`metaoptax._src.tree_utils.real_product`)."""
  m = num_meta_params(beta)
  # Elementwise products summed over the weight axes (not a tensordot, whose
  # sharded contraction needs an output sharding on explicit meshes): on a mesh
  # each device reduces its shard, then one all-reduce of m numbers.
  products = [
      jnp.sum(tree_utils.real_product(h, x.astype(h.dtype)[None], product),
              axis=tuple(range(1, h.ndim))).reshape(m)
      for h, x in zip(jax.tree.leaves(columns), jax.tree.leaves(tree))
  ]
  s = sum(products[1:], products[0]) if products else jnp.zeros((m,))  # no params arrays
  return _split_like(s, beta)


def _meta_gradient_along(meta_grad: Any, trace_weights: Any, beta: Any) -> Callable:
  r"""``g -> s`` whose value is the given :math:`s = H^\top g` and whose derivative
  along :math:`\dot g` is :math:`H^\top \dot g` (:math:`H` held fixed).

  The 2x2 approximation's dependence of the meta step on the weights, through
  the gradient's Hessian-vector product, without evaluating :math:`H^\top g` a
  second time. An outer transformation differentiates ``meta_grad`` as the
  caller computed it.
  """

  @jax.custom_jvp
  def along(g):
    del g
    return meta_grad

  @along.defjvp
  def along_jvp(primals, tangents):
    del primals
    return meta_grad, _columns_dot(trace_weights, tangents[0], beta)

  return along


def _zero_nan(tree: Any) -> Any:
  """NaN tangents -> 0: where an update is not differentiable its sensitivity is 0.

  ``sqrt`` in Adam / RMSProp (base or meta) has an infinite derivative at 0, and a
  coordinate whose gradient is exactly 0 gives ``inf * 0 = nan`` in forward mode
  although the one-sided derivatives are finite (``|t|``-shaped); we take 0.
  Infinite tangents are kept, so genuine overflow still trips the finiteness guard.

  The rule is applied per output entry: a NaN arising *inside* a shared
  computation (meta Adam's ``sqrt(v)`` with ``v = 0`` on the first step) would
  wipe a whole column. Give Adam-type transformations ``eps_root > 0`` (inside
  the square root; the presets use 1e-30) so their derivative stays finite.
  """
  return tree_utils.nan_to_zero(tree)


def _gradient_with_hvp_tangent(obj_fn: Callable) -> Callable:
  r"""``gradient(w, g) = g``, the gradient at ``w`` given by the caller, whose
  derivative along ``v`` is the Hessian-vector product :math:`\nabla^2 f(w)\,v`.

  The user's gradient is the primal value (no second gradient evaluation), and
  the product is taken reverse-over-forward,
  :math:`\nabla_w \langle \nabla f(w), v \rangle = \nabla_w\, \mathrm{jvp}(f, w, v)`:
  the same numbers as forward-over-reverse, but an ordinary reverse pass, which
  XLA compiles without the transposed matmul outputs that forward mode through
  a backward pass produces. A tangent of ``g`` itself is passed through.

  An outer transformation (``jax.grad`` of a meta-loss through an unrolled run)
  does not see this rule: it is applied by the step's own ``jax.linearize``,
  the innermost level, whose rule returns ``g`` itself as the primal, so outer
  levels differentiate ``g`` as the caller computed it (``H dw`` from the
  caller's ``jax.grad``), and the product's own derivative (third derivatives
  of ``f``) through ``jax.grad(jvp(f))``. Nothing is counted twice
  (tests/metaoptimize/test_unroll_grad.py: reverse, forward and finite differences agree).

  Complex params: ``jax.grad`` of a real function returns the conjugate of the
  gradient an optax optimizer is given (see
  :func:`metaoptax._src.tree_utils.real_product`), so the product is conjugated
  back (a no-op on real params).
  """

  @jax.custom_jvp
  def gradient(w, g):
    del w
    return g

  @gradient.defjvp
  def gradient_jvp(primals, tangents):
    (w, g), (v, g_dot) = primals, tangents
    hvp = jax.tree.map(jnp.conj, jax.grad(lambda u: jax.jvp(obj_fn, (u,), (v,))[1])(w))
    return g, jax.tree.map(lambda a, b: a + b.astype(a.dtype), hvp, g_dot)

  return gradient


def _curvature_probe(g: Any) -> jax.Array:
  r"""Per-leaf sums of ``g``: their tangent sums the Hessian-vector product
  :math:`\nabla^2 f(w)\, v` leaf by leaf, so it is finite exactly when the product
  is (an overflowing sum counts as non-finite, as in the guard). One more
  reduction of the product per column."""
  sums = [jnp.sum(x.astype(tree_utils.wide_dtype(x.dtype))) for x in jax.tree.leaves(g)]
  return jnp.stack(sums) if sums else jnp.zeros((0,), jnp.float32)


def _approximation(two_by_two: bool) -> Approximation:
  # A trace column can overflow within a step (unstable sensitivity recursion): the
  # guard checks the new trace (one more pass) and restarts it at once. The 2x2
  # meta step differentiates s = H^T g through the training gradient's Hessian, so
  # s cannot come from another (held-out) gradient.
  return Approximation(init_trace=init_trace, initial_trace=initial_trace,
                       meta_gradient=meta_gradient,
                       step=functools.partial(_step, two_by_two=two_by_two),
                       checks_new_trace=True, takes_held_out_gradient=not two_by_two)


#: The L-approximation: the meta-gradient ``s`` held fixed within the step.
L_APPROX = _approximation(two_by_two=False)
#: The 2x2 approximation: ``s`` depends on the weights (the block ``d beta' / d w``).
TWO_BY_TWO = _approximation(two_by_two=True)
