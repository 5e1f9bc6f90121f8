"""The state of :func:`metaoptax.metaoptimize` and accessors for logging."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from metaoptax._src import learned, tree_utils


class HyperparamTrace(NamedTuple):
  r"""Hessian-free sensitivities to the learned hyperparameters, one column each.

  Tuples of ``K`` entries (the learned hyperparameters, in the sorted order of
  their names; ``K = 0`` when only the step sizes are learned); column ``k`` is
  :math:`dw/d\phi_k`, not compressed: a hyperparameter acts on every weight.
  Each column carries the base-state leaves that depend on its hyperparameter
  (Adam's first moment for ``b1``, the second for ``b2``, none for
  ``weight_decay``).

  Attributes:
    weights: ``K`` params-shaped trees, :math:`dw/d\phi_k`.
    base_state: ``K`` tuples, the base-state floating-point leaves each column carries.
  """

  weights: tuple
  base_state: tuple


class HessianFreeTrace(NamedTuple):
  """The compressed Hessian-free trace: ``h[i] = H[i, b(i)]``, params-shaped.

  ``base_state`` holds the (equally compressed) sensitivities of the base-state
  leaves that read the params directly, e.g. the moments of
  ``chain(add_decayed_weights(...), scale_by_adam())``; it is empty for Adam,
  Lion, RMSProp, momentum and SGD, whose states depend on the weights only
  through the gradient. ``hyperparams`` holds one column per learned
  hyperparameter (none when only the step sizes are learned).

  Attributes:
    weights: :math:`h`, params-shaped (float32, or bfloat16 with ``trace_dtype``).
    base_state: the sensitivities of the base state's floating-point leaves that read
      the params.
    hyperparams: the learned hyperparameters' columns (:class:`~metaoptax.HyperparamTrace`).
    count: int32 scalar, the steps since the trace (re)started; it seeds the
      stochastic rounding of a bfloat16 trace.
  """

  weights: Any
  base_state: tuple
  hyperparams: HyperparamTrace
  count: jax.Array


class AveragedTrace(NamedTuple):
  """The Hessian-free trace of ``metaoptimize(..., average=c)``: read off the average.

  No params-sized trace is stored: :math:`h = (w - \\bar w)/(1 - \\rho_t)` is the
  iterate's distance from the average of the weights (see
  :mod:`metaoptax._src.averaged_trace`), which :func:`metaoptax.averaged_params`
  returns.

  Attributes:
    average: an ``AverageState``: the step count and the average of the weights.
    horizon: scalar (float32, float64 for float64 params): :math:`c`, the average's
      horizon as a fraction of the steps.
    base_state: the sensitivities of the base state's floating-point leaves that read
      the params (as :class:`HessianFreeTrace`'s).
    hyperparams: the learned hyperparameters' columns (as :class:`HessianFreeTrace`'s).
  """

  average: Any
  horizon: jax.Array
  base_state: tuple
  hyperparams: HyperparamTrace


class ExactTrace(NamedTuple):
  """Sensitivities ``Z = [Y; X]`` of the exact variants, one column per block.

  Every field has a leading axis of size ``m`` (the number of step sizes, then
  of learned hyperparameters); column ``j`` is the discounted sensitivity to
  meta-parameter ``j``. Only the
  floating-point leaves of the optimizer states carry sensitivities.

  Attributes:
    weights: :math:`X^w = H`, params-shaped leaves with a leading ``m`` axis.
    base_state: :math:`X` for the floating-point leaves of the base optimizer's state.
    meta_params: :math:`Y`, a :class:`~metaoptax.MetaParams` tree whose leaves have a
      leading ``m`` axis.
    meta_state: :math:`Y` for the floating-point leaves of the meta optimizer's state.
  """

  weights: Any
  base_state: tuple
  meta_params: Any
  meta_state: tuple


class ClimbState(NamedTuple):
  r"""State of :func:`metaoptax.climb`.

  Attributes:
    average: the smoothed total meta-gradient, a scalar in :math:`\beta`'s dtype.
    climbing: bool scalar, the climb has not ended.
    climb_steps: int32 scalar, the steps taken while climbing.
    ended: bool scalar, the climb ended at the last step.
    meta_state: the state of the meta optimizer that takes over after the climb.
  """

  average: jax.Array
  climbing: jax.Array
  climb_steps: jax.Array
  ended: jax.Array
  meta_state: optax.OptState


class MetaOptimizeState(NamedTuple):
  r"""State of :func:`metaoptax.metaoptimize`.

  Read it with :func:`metaoptax.step_sizes`, :func:`metaoptax.hyperparameters` and
  :func:`metaoptax.sensitivity_trace` rather than by field: wrappers (the average, the
  climb, the gate) nest it inside their own states.

  Attributes:
    base_state: the state of the base (direction) transformation.
    meta_params: :math:`\beta` (log step sizes, or step sizes) and :math:`\phi`, the learned
      hyperparameters (:class:`~metaoptax.MetaParams`).
    meta_state: the state of the meta transformation acting on :math:`\beta`.
    trace: a :class:`~metaoptax.HessianFreeTrace`, an :class:`~metaoptax.AveragedTrace` or an
      :class:`~metaoptax.ExactTrace`.
    log_parametrization: bool scalar: :math:`\alpha = e^\beta` if true, else
      :math:`\alpha = \beta`.
    skipped_steps: int32 scalar, the steps skipped (non-finite gradient or update).
    trace_resets: int32 scalar, the trace's restarts (a finite step whose trace was not
      finite).
  """

  base_state: optax.OptState
  meta_params: learned.MetaParams
  meta_state: optax.OptState
  trace: Any
  log_parametrization: jax.Array
  skipped_steps: jax.Array
  trace_resets: jax.Array


def _find_states(state: Any) -> list[MetaOptimizeState]:
  return tree_utils.instances_of(state, MetaOptimizeState)


def _the_state(state: Any) -> MetaOptimizeState:
  found = _find_states(state)
  if len(found) != 1:
    raise ValueError(
        f"Expected exactly one MetaOptimizeState in the optimizer state, found {len(found)}."
    )
  return found[0]


def _step_sizes_of(s: MetaOptimizeState) -> Any:
  sizes = jax.tree.map(lambda b: jnp.where(s.log_parametrization, jnp.exp(b), b),
                       s.meta_params.step_size)
  if isinstance(sizes, jax.Array) and sizes.shape == (1,):
    return sizes[0]  # one step size: a scalar
  return sizes


def step_sizes(state: Any) -> Any:
  """Current step sizes ``alpha = sigma(beta)``, one per block.

  Args:
    state: a :class:`MetaOptimizeState`, or any optimizer state (e.g. of an
      ``optax.chain``) that contains exactly one, or one in each partition of an
      ``optax.multi_transform``.

  Returns:
    A scalar for one step size (the ``"scalar"`` layout), shape ``(m,)`` for ``m``
    blocks, or a params-shaped tree for weight-wise step sizes; for an
    ``optax.multi_transform``, ``{label: ...}`` of those, one per partition that holds
    a MetaOptimize state.

  Examples:
    >>> import jax.numpy as jnp, optax, metaoptax
    >>> opt = optax.multi_transform({"a": metaoptax.adamw(), "b": metaoptax.sgd()},
    ...                             {"w": "a", "b": "b"})
    >>> state = opt.init({"w": jnp.ones(3), "b": jnp.zeros(())})
    >>> sorted(metaoptax.step_sizes(state)), metaoptax.step_sizes(state)["a"].shape
    (['a', 'b'], ())
  """
  return tree_utils.per_partition(state, MetaOptimizeState, _step_sizes_of, "step_sizes")


def hyperparameters(state: Any) -> dict:
  """Current values of the hyperparameters learned beside the step sizes.

  Args:
    state: a :class:`MetaOptimizeState`, or any optimizer state that contains
      exactly one, of a ``metaoptimize(..., learn=names)``, or one in each partition
      of an ``optax.multi_transform`` (then ``{label: {name: value}}``).

  Returns:
    ``{name: value}`` (scalars), ``{}`` when nothing but the step sizes is learned.
  """
  return tree_utils.per_partition(
      state, MetaOptimizeState,
      lambda s: {k: learned.to_value(k, phi) for k, phi in s.meta_params.hyperparams.items()},
      "hyperparameters")


def sensitivity_trace(state: Any, params: Any = None) -> Any:
  """The trace ``H`` (sensitivity of the weights to the meta-parameters).

  Hessian-free: a params-shaped tree ``h`` with ``h[i] = H[i, b(i)]``.
  Exact variants: a params-shaped tree whose leaves have a leading axis of size
  ``m``, one column ``H[:, j]`` per block (then one per learned hyperparameter).
  With learned hyperparameters, the Hessian-free step sizes' trace ``h``.

  Args:
    state: a :class:`MetaOptimizeState`, or any optimizer state that contains exactly
      one (e.g. of an ``optax.chain`` or of :func:`metaoptax.adamw`).
    params: the current params, needed where the trace is read off an average of the
      iterates (``metaoptimize(..., gamma=None, average=c)``):
      :math:`h = (w - \\bar w)/(1 - \\rho_t)`.

  Returns:
    The trace, as above.
  """
  trace = _the_state(state).trace
  if not isinstance(trace, AveragedTrace):
    return trace.weights
  if params is None:
    raise ValueError("sensitivity_trace: this trace is read off the average of the iterates "
                     "(metaoptimize(..., average=c)); give the current params: "
                     "sensitivity_trace(state, params).")
  from metaoptax._src import averaged_trace  # pylint: disable=g-import-not-at-top
  return averaged_trace.weights_trace(trace.horizon, trace.average, params)

