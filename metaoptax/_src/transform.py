r"""MetaOptimize: step sizes learned while training runs (Sharifnassab et al., 2024)."""

from __future__ import annotations

import math

from typing import Any

import jax
import jax.numpy as jnp
import optax

from metaoptax._src import averaged_trace, averaging, blocks as blocks_lib, exact, guard
from metaoptax._src import hessian_free, learned, restart, rounding, tree_utils, validation
from metaoptax._src.approximation import Approximation, StepConfig
from metaoptax._src.hyperparams import check_step_size_bounds, concrete_number
from metaoptax._src.state import MetaOptimizeState

#: The approximation of each name (see :mod:`metaoptax._src.approximation`): the one
#: place where the user's ``approximation=`` is read.
_APPROXIMATIONS: dict[str, Approximation] = {
    "hessian_free": hessian_free.HESSIAN_FREE,
    "l_approx": exact.L_APPROX,
    "2x2": exact.TWO_BY_TWO,
}
APPROXIMATIONS = tuple(_APPROXIMATIONS)
PARAMETRIZATIONS = ("log", "linear")
DEFAULT_STEP_SIZE_BOUNDS = (1e-10, 1.0)
#: The meta-parameters whose meta-gradients use ``meta_grads`` when it is given.
HELD_OUT = ("all", "hyperparams")


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
  _check_average(average, approximation, gamma, trace_dtype)
  gamma = 1.0 if gamma is None else gamma  # with average: the columns the average does not hold
  _validate(base, meta, init_step_size, blocks, gamma, approximation, weight_decay,
            step_size_bounds, parametrization, sensitivity_radius)
  trace_dtype = rounding.check_storage_dtype("trace_dtype", trace_dtype)
  if trace_dtype is not None and approximation != "hessian_free":
    raise ValueError(f"trace_dtype={trace_dtype} needs approximation='hessian_free' (the exact "
                     f"variants keep their sensitivities in float32), got {approximation!r}.")
  learn = learned.check_learn(learn)
  learned.check_exposed(learn, base)
  meta_probed = validation.check_meta_ignores_beta(meta)
  if held_out not in HELD_OUT:
    raise ValueError(f"Unknown held_out={held_out!r}; expected one of {HELD_OUT}.")
  if learned.WEIGHT_DECAY in learn:
    kappa0 = concrete_number("weight_decay", weight_decay)
    if kappa0 is not None:
      learned.to_phi(learned.WEIGHT_DECAY, kappa0)  # raises unless > 0
  log = parametrization == "log"
  lower, upper = (float(b) for b in step_size_bounds)
  config = StepConfig(
      base=optax.with_extra_args_support(base), meta=meta, gamma=gamma,
      weight_decay=weight_decay, log_parametrization=log,
      beta_bounds=((math.log(lower) if lower > 0 else -math.inf, math.log(upper)) if log
                   else (lower, upper)),
      meta_update_first=meta_update_first, sensitivity_radius=sensitivity_radius, learn=learn,
      trace_dtype=trace_dtype)
  implementation = (_APPROXIMATIONS[approximation] if average is None
                    else averaged_trace.approximation(average))
  restarting = climb_memory is not None and restart.restarts(climb_memory)
  # Adam's (1 - b1, 1 - b2) for the moments counted as steps, read off the base on a probe
  # of the params' structure (a pytree mask must fit): checked at init, constants in update
  shortening = climb_memory is not None and not restarting
  if shortening:
    try:  # at construction where a one-leaf probe fits the base
      restart.adam_decays(base, {"w": jnp.zeros([1])})
    except restart.NoAdamMomentsError:
      raise
    except (ValueError, TypeError):  # the base reads the params' structure (a pytree mask)
      pass  # checked at init

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
    if not meta_probed:
      validation.check_meta_ignores_beta(meta, meta_params)
    meta_state = meta.init(meta_params)
    if climb_memory is not None:
      restart.check_climbs(meta_state)
    if shortening:
      restart.adam_decays(base, params)  # raises here unless the base holds one Adam
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
    if restarting:
      state = restart.restart_if_the_climb_ended(
          state, config.base_state_for(state.meta_params,
                                       config.base.init(tree_utils.widen(params))))
    elif shortening:
      state = restart.shorten_if_the_climb_ended(state, climb_memory,
                                                 *restart.adam_decays(base, params))
    meta_grads = extra_args.pop("meta_grads", None)
    if meta_grads is None:
      meta_grad = implementation.meta_gradient(layout, state.trace, updates, state.meta_params,
                                               params)
    else:
      meta_grads = _held_out(meta_grads, updates, implementation, approximation)
      meta_grad = implementation.meta_gradient(layout, state.trace, meta_grads,
                                               state.meta_params, params)
      if held_out == "hyperparams" and learn:  # the step sizes follow the training loss
        on_train = implementation.meta_gradient(layout, state.trace, updates,
                                                state.meta_params, params)
        meta_grad = meta_grad._replace(step_size=on_train.step_size)

    def attempt(grads, state, meta_grad):
      return implementation.step(config, layout, grads, state, meta_grad, params, extra_args)

    if skip_nonfinite:
      delta, new_state = guard.guarded_step(
          attempt, updates, state, meta_grad, initial_trace=implementation.initial_trace,
          check_new_trace=implementation.checks_new_trace)
    else:
      delta, new_state = guard.unguarded_step(attempt, updates, state, meta_grad)
    delta = optax.tree_utils.tree_cast_like(delta, params)
    if implementation.after_update is not None:
      new_state = new_state._replace(
          trace=implementation.after_update(new_state.trace, params, delta))
    return delta, new_state

  return optax.GradientTransformationExtraArgs(init_fn, update_fn)


def _held_out(meta_grads: Any, grads: Any, implementation: Approximation, name: str) -> Any:
  """Checks a held-out gradient against the gradient; a non-finite one becomes 0."""
  if not implementation.takes_held_out_gradient:
    takes = [k for k, a in _APPROXIMATIONS.items() if a.takes_held_out_gradient]
    raise ValueError(
        f"meta_grads= is not supported by approximation={name!r}, whose meta step "
        "differentiates s = H^T g through the training gradient's Hessian; use one of "
        f"{takes} with a held-out meta-gradient.")
  if jax.tree.structure(meta_grads) != jax.tree.structure(grads):
    raise ValueError(
        "meta_grads must have the structure of the gradient (the gradient of the "
        f"held-out objective at params); got {jax.tree.structure(meta_grads)}, "
        f"expected {jax.tree.structure(grads)}.")
  return tree_utils.zeros_unless(tree_utils.all_finite(meta_grads), meta_grads)


def _check_average(average, approximation, gamma, trace_dtype):
  """Checks ``average`` against the other arguments."""
  if average is None:
    if gamma is None:
      raise ValueError("gamma=None reads the trace off an average of the iterates, with its "
                       "discount: give average= (its horizon, e.g. 0.1), or a gamma in [0, 1].")
    return
  averaging.check_horizon(f"metaoptimize(average={average!r})", average)
  if approximation != "hessian_free":
    raise ValueError(f"average={average} reads the Hessian-free trace off the average: it "
                     f"needs approximation='hessian_free', got {approximation!r} (chain "
                     "metaoptax.average_iterates after it instead).")
  if trace_dtype is not None:
    raise ValueError(f"trace_dtype={trace_dtype} with average={average}: no trace is stored "
                     "(it is read off the average, kept in float32).")
  if gamma is not None:
    raise ValueError(f"gamma={gamma} with average={average}: the trace read off the average "
                     "has the average's discount (a horizon of average * t steps); give "
                     "gamma=None, or chain metaoptax.average_iterates after a stored trace "
                     "of discount gamma.")


def _validate(base, meta, init_step_size, blocks, gamma, approximation, weight_decay,
              step_size_bounds, parametrization, sensitivity_radius):
  """Checks every argument; numeric hyperparameters only where they are concrete."""
  for name, tx in (("base", base), ("meta", meta)):
    if not (hasattr(tx, "init") and hasattr(tx, "update")):
      raise TypeError(f"{name} must be an optax.GradientTransformation, got {type(tx).__name__}.")
  if approximation not in APPROXIMATIONS:
    raise ValueError(f"Unknown approximation={approximation!r}; expected one of {APPROXIMATIONS}.")
  if parametrization not in PARAMETRIZATIONS:
    raise ValueError(
        f"Unknown parametrization={parametrization!r}; expected one of {PARAMETRIZATIONS}.")
  blocks_lib.validate_blocks_spec(blocks)
  gamma = concrete_number("gamma", gamma)
  if gamma is not None and not 0.0 <= gamma <= 1.0:
    raise ValueError(f"gamma must be in [0, 1], got {gamma}.")
  weight_decay = concrete_number("weight_decay", weight_decay)
  if weight_decay is not None and not 0 <= weight_decay < math.inf:
    raise ValueError(f"weight_decay must be >= 0 and finite, got {weight_decay}.")
  radius = concrete_number("sensitivity_radius", sensitivity_radius)
  if radius is not None and not 0 < radius <= math.inf:
    raise ValueError(f"sensitivity_radius must be in (0, inf], got {radius}.")
  lower, upper = check_step_size_bounds(step_size_bounds)
  init_step_size = concrete_number("init_step_size", init_step_size)
  if init_step_size is None:
    return
  if not math.isfinite(init_step_size):
    raise ValueError(f"init_step_size must be a finite number, got {init_step_size!r}.")
  if init_step_size <= 0 and parametrization == "log":
    raise ValueError(f"init_step_size must be > 0, got {init_step_size}.")
  if not lower <= init_step_size <= upper:
    raise ValueError(
        f"init_step_size={init_step_size} is outside step_size_bounds={step_size_bounds}.")
