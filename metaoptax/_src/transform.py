r"""MetaOptimize: step sizes learned while training runs (Sharifnassab et al., 2024).

The core of the step. Its pieces, each a module that reads on its own:

* the arguments' checks: :mod:`metaoptax._src.arguments`;
* the trace, one :class:`~metaoptax._src.approximation.Approximation`: Hessian-free
  (:mod:`metaoptax._src.hessian_free`), exact (:mod:`metaoptax._src.exact`), or read off
  the average of the weights (:mod:`metaoptax._src.averaged_trace`);
* the meta-gradient, on the training or a held-out gradient:
  :mod:`metaoptax._src.held_out`;
* the climb's memory in the base state: :mod:`metaoptax._src.restart`;
* the guard against non-finite values: :mod:`metaoptax._src.guard`.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax

from metaoptax._src import arguments, averaged_trace, blocks as blocks_lib, exact, guard
from metaoptax._src import held_out as held_out_lib, learned, restart, tree_utils, validation
from metaoptax._src.approximation import StepConfig
from metaoptax._src.arguments import DEFAULT_STEP_SIZE_BOUNDS
from metaoptax._src.state import MetaOptimizeState


def metaoptimize(
    base: optax.GradientTransformation,
    meta: optax.GradientTransformation,
    *,
    init_step_size: float,
    blocks: blocks_lib.BlockSpec = "scalar",
    gamma: float | None = 1.0,
    approximation: str = "hessian_free",
    weight_decay: float = 0.0,
    step_size_bounds: tuple[float, float] = DEFAULT_STEP_SIZE_BOUNDS,
    parametrization: str = "log",
    meta_update_first: bool = False,
    skip_nonfinite: bool = True,
    learn: tuple[str, ...] = (),
    held_out: str = "all",
    sensitivity_radius: float = exact.DEFAULT_SENSITIVITY_RADIUS,
    climb_memory: int | None = None,
    trace_dtype: Any = None,
    average: float | None = None,
) -> optax.GradientTransformationExtraArgs:
  r"""Wraps a base direction with step sizes that are meta-optimized on the fly.

  At each step, with gradient :math:`g_t`, base direction :math:`d_t` and
  step sizes :math:`\alpha = \sigma(\beta)` (one per block, :math:`\sigma = \exp`
  by default):

  .. math::

    s_t &= H_t^\top g_t  && \text{meta-gradient}\\
    w_{t+1} &= w_t - \alpha_t \odot (d_t + \kappa w_t) && \text{base step}\\
    H_{t+1} &= \text{trace update (approximation)} \\
    \beta_{t+1} &= \beta_t + \text{meta}(s_t) && \text{meta step}

  :math:`H_t` is the discounted sensitivity of the weights to :math:`\beta`
  (eq. 8 of the paper), a causal surrogate for the gradient of the
  :math:`\gamma`-discounted future loss with respect to :math:`\beta`.

  Precision: whatever the params' dtype, every floating leaf of the state
  (:math:`\beta`, the trace, the meta state and the base direction's own state,
  e.g. Adam's moments) is float32, or float64 for float64 params (the trace
  bfloat16 with ``trace_dtype=jnp.bfloat16``), and the
  direction and step are computed at that precision; only the updates have the
  params' dtypes. (In float16, Adam's second moment underflows for
  :math:`|g| \lesssim 5\cdot 10^{-3}` and its ``eps = 1e-8`` is 0: NaN or infinite updates; in
  bfloat16 its 0.999 decay cannot be represented and the moment freezes.)

  Args:
    base: an optax transformation producing the update *direction*
      (``optax.scale_by_adam()``, ``optax.scale_by_lion()``,
      ``optax.scale_by_rms()``, ``optax.trace(0.9)``, ``optax.identity()``, ...).
      Do not include a learning rate or a sign flip: metaoptax applies
      ``-alpha * (d + weight_decay * w)``.
    meta: an optax transformation acting on the meta-parameters ``beta``
      (``optax.adam(1e-3)``, ``optax.lion(1e-3)``, ``optax.sgd(1e-3)``). It must
      not read ``beta`` itself (no weight decay on ``beta``).
    init_step_size: initial step size ``alpha_0 > 0`` (the paper starts one to
      two orders of magnitude below a good fixed step size, e.g. ``1e-6``).
    blocks: ``"scalar"``, ``"per_leaf"`` (one step size per parameter array),
      ``"per_param"`` (weight-wise), a pytree of integer labels matching params
      (one label per weight or one per array), or a callable params -> labels.
    gamma: discount ``gamma`` in ``[0, 1]`` of future losses, or ``None`` with ``average``
      (the trace read off the average, with its discount); ``1`` (default) is
      the paper's choice, ``0`` gives hypergradient descent.
    approximation: ``"hessian_free"`` (no extra function evaluations, one
      params-sized trace), ``"l_approx"`` or ``"2x2"`` (exact Hessian terms by
      Hessian-vector products; need the extra argument ``obj_fn``).
    weight_decay: decoupled weight decay ``kappa``, scaled by the learned step size.
    step_size_bounds: ``(lower, upper)``: ``beta`` is clipped so the step sizes
      stay in this range after every meta update.
    parametrization: ``"log"`` (``alpha = exp(beta)``) or ``"linear"``
      (``alpha = beta``, as in hypergradient descent).
    meta_update_first: apply the meta update before the base step, so the step
      uses ``alpha_{t+1}`` (the ordering of IDBD and hypergradient descent). The
      paper's default uses ``alpha_t``.
    skip_nonfinite: guard the state against non-finite values: a step with a
      non-finite gradient is skipped (zero updates; ``beta``, the meta state and
      the trace kept; the base state advances as for a zero gradient), counted
      in ``state.skipped_steps``; a
      finite step whose trace or ``beta`` is not finite is taken with ``beta``
      kept and the trace restarted, counted in ``state.trace_resets``. See
      ``metaoptax._src.guard``. Free for the Hessian-free variant.
    learn: hyperparameters meta-optimized beside the step sizes, one scalar
      each: ``"weight_decay"`` (``kappa``; start it > 0), and any numeric
      argument that ``base`` exposes through ``optax.inject_hyperparams``
      (``"b1"``, ``"b2"``, ``"decay"``, ``"momentum"``, ...). Values in (0, 1)
      are learned through their logit, the others through their log; read them
      with :func:`metaoptax.hyperparameters`. See ``metaoptax._src.learned``.
    held_out: which meta-gradients use ``meta_grads`` when ``update`` is given
      one: ``"all"`` (default), or ``"hyperparams"``: only those of the
      hyperparameters in ``learn``, while the step sizes follow the training
      gradient (a regularizer tuned on held-out data, the step size on the
      training loss).
    sensitivity_radius: trust radius ``r > 0`` of the exact variants' meta-sensitivity
      (``"l_approx"``, ``"2x2"``; unused by ``"hessian_free"``): after each
      step, a column ``j`` of the sensitivities whose :math:`Y^\beta_{:,j}`
      (sensitivity of the meta-parameters to meta-parameter ``j``) is farther
      than ``r`` from its initial value :math:`e_j` (l1 norm) is pulled back to
      that distance, which keeps the recursion stable (see
      ``metaoptax._src.exact.stabilize``). ``float("inf")`` disables the pull
      (the paper's plain recursion).
    climb_memory: with ``meta`` a :func:`metaoptax.climb`: what the base state keeps of
      the climb at the step after the one at which the climb ends (see
      ``metaoptax._src.restart``). ``None``: all of it, unchanged; ``0``: nothing, the
      base state restarts from ``base.init``; ``k > 0`` (a base with one
      ``optax.ScaleByAdamState``): Adam's moments keep their
      bias-corrected values and count as ``k`` steps, so the climb's gradients, taken
      while the weights hardly moved, fade from :math:`\hat v` within tens of steps
      instead of ~1,000. :func:`metaoptax.adamw` passes ``3``. A traced count (from
      ``optax.inject_hyperparams``) counts Adam's moments, ``0`` included (for Adam the
      same as the restart).
    trace_dtype: the Hessian-free trace's storage: ``None`` (float32, or float64 for
      float64 params) or ``jnp.bfloat16``, which halves the trace's bytes. The trace is
      computed in float32 and stored stochastically rounded, so that its small
      increments are kept on average (:mod:`metaoptax._src.rounding`); the meta-gradient
      reads it as float32. Real params and ``approximation="hessian_free"`` only.
    average: ``None``, or the horizon :math:`c \in (0, 1]` of an average of the weights
      kept in the state, :math:`\bar w_t = \bar w_{t-1} + (w_t - \bar w_{t-1})/(c\,t + 1)`
      (as :func:`metaoptax.average_iterates`; evaluate :func:`metaoptax.averaged_params` of
      the state), from which the Hessian-free trace is read,
      :math:`h_t = (w_t - \bar w_t)/(1 - \rho_t)`: no trace is stored, one params-sized
      buffer less. Needs ``gamma=None``: the trace's discount is the average's,
      :math:`\gamma_t = c\,t/(c\,t + 1)` (a horizon of :math:`c\,t` steps, growing with the
      run; the learned hyperparameters' columns are not discounted), and weight decay's
      factor :math:`1 - \kappa\alpha` on the
      carried trace is left out (see ``metaoptax._src.averaged_trace``). A restart of the
      trace (the guard's) restarts the average at the iterate. ``approximation=
      "hessian_free"`` only; the updates must be applied as they are. The average is kept
      in float32 (or wider params' dtype): the trace is its small difference from the
      weights, which a bfloat16 average's rounding would swamp.

  Returns:
    An ``optax.GradientTransformationExtraArgs``. Its ``update`` needs ``params``;
    the exact variants also need ``obj_fn`` (``params -> scalar loss`` on the
    same batch as the gradient). ``meta_grads`` (optional, params-shaped): the
    gradient of a held-out objective at ``params``, used in the meta-gradient
    :math:`s = H^\top g_{val}` in place of the training gradient, which still
    drives the base step (costs one more gradient, on a validation batch; a
    non-finite one gives :math:`s = 0` for that step). Other extra arguments
    are passed to ``base``.

  Examples:
    >>> import jax.numpy as jnp, optax, metaoptax
    >>> opt = metaoptax.metaoptimize(
    ...     optax.scale_by_adam(), optax.adam(1e-3), init_step_size=1e-6,
    ...     weight_decay=0.1)
    >>> params = {"w": jnp.ones(3)}
    >>> state = opt.init(params)
    >>> grads = {"w": jnp.array([0.1, -0.2, 0.3])}
    >>> updates, state = opt.update(grads, state, params)
    >>> params = optax.apply_updates(params, updates)
    >>> print(f"{float(metaoptax.step_sizes(state)):.2g}")
    1e-06

  References:
    Sharifnassab, Salehkaleybar and Sutton, `MetaOptimize: A Framework for
    Optimizing Step Sizes and Other Meta-parameters
    <https://arxiv.org/abs/2402.02342>`_, 2024.
  """
  checked = arguments.check(
      base, meta, init_step_size=init_step_size, blocks=blocks, gamma=gamma,
      approximation=approximation, weight_decay=weight_decay,
      step_size_bounds=step_size_bounds, parametrization=parametrization, learn=learn,
      held_out=held_out, sensitivity_radius=sensitivity_radius, trace_dtype=trace_dtype,
      average=average)
  learn, trace_dtype = checked.learn, checked.trace_dtype
  log = parametrization == "log"
  config = StepConfig(
      base=optax.with_extra_args_support(base), meta=meta, gamma=checked.gamma,
      weight_decay=weight_decay, log_parametrization=log, beta_bounds=checked.beta_bounds,
      meta_update_first=meta_update_first, sensitivity_radius=sensitivity_radius, learn=learn,
      trace_dtype=trace_dtype)
  # the pieces: the trace (its approximation, or read off the average), the climb's memory
  implementation = (arguments.BY_NAME[approximation] if average is None
                    else averaged_trace.approximation(average))
  climb = restart.climb_memory_piece(base, climb_memory)
  takes_held_out = tuple(k for k, a in arguments.BY_NAME.items() if a.takes_held_out_gradient)

  def init_fn(params):
    tree_utils.check_float_params(params, "metaoptimize")
    if trace_dtype is not None and any(jnp.iscomplexobj(x) for x in jax.tree.leaves(params)):
      raise ValueError(f"trace_dtype={trace_dtype} stores a real trace: complex params need "
                       "trace_dtype=None.")
    layout = blocks_lib.resolve(blocks, params)
    # jnp, not math: init_step_size may be traced (a meta-gradient with respect to it).
    init_beta = jnp.log(init_step_size) if log else jnp.asarray(init_step_size)
    beta = layout.init_beta(init_beta, params)
    # The base runs in float32 or wider (its moments too): see "Precision" above.
    wide_params = tree_utils.widen(params)
    base_state = config.base.init(wide_params)
    dtype = jnp.result_type(*jax.tree.leaves(beta)) if jax.tree.leaves(beta) else jnp.float32
    meta_params = learned.MetaParams(
        beta, learned.init_hyperparams(learn, base_state, weight_decay, dtype))
    base_state = config.base_state_for(meta_params, base_state)
    if not checked.meta_probed:
      validation.check_meta_ignores_beta(meta, meta_params)
    meta_state = meta.init(meta_params)
    climb.check(params, meta_state)
    return MetaOptimizeState(
        base_state=base_state,
        meta_params=meta_params,
        meta_state=meta_state,
        trace=implementation.init_trace(config, layout, wide_params, base_state, meta_state,
                                        meta_params),
        log_parametrization=jnp.asarray(log),
        skipped_steps=jnp.zeros([], jnp.int32),
        trace_resets=jnp.zeros([], jnp.int32),
    )

  def update_fn(updates, state, params=None, **extra_args):
    if params is None:
      raise ValueError("metaoptimize needs params: call update(grads, state, params).")
    validation.check_update_inputs("metaoptimize", init_fn, updates, state, params)
    layout = blocks_lib.resolve(blocks, params)
    state = climb.apply(state, params, lambda: config.base_state_for(
        state.meta_params, config.base.init(tree_utils.widen(params))))
    meta_grad = held_out_lib.meta_gradient(
        implementation, layout, state, updates, extra_args.pop("meta_grads", None), params,
        held_out=held_out, learn=learn, name=approximation, takes=takes_held_out)

    def attempt(grads, state, meta_grad):
      return implementation.step(config, layout, grads, state, meta_grad, params, extra_args)

    delta, new_state = guard.step(attempt, updates, state, meta_grad,
                                  skip_nonfinite=skip_nonfinite,
                                  initial_trace=implementation.initial_trace,
                                  check_new_trace=implementation.checks_new_trace)
    delta = optax.tree_utils.tree_cast_like(delta, params)
    if implementation.after_update is not None:
      new_state = new_state._replace(
          trace=implementation.after_update(new_state.trace, params, delta))
    return delta, new_state

  return optax.GradientTransformationExtraArgs(init_fn, update_fn)
