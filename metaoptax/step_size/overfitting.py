r"""A held-out loss decides whether the learned step size anneals: the overfitting gate.

:func:`metaoptax.adamw` anneals :math:`\alpha` after its climb by the meta-gradient
of the *training* loss. On a network that overfits that is the wrong direction: the
held-out loss rises while the training loss still falls, and there a larger step
generalizes better. :func:`overfitting_gate` wraps a
meta-optimized optimizer with a climb and reads a ``validation_loss`` at every
``update``. It keeps two bias-corrected exponential averages of it,

.. math::

  \bar v_t = \rho\,\bar v_{t-1} + (1-\rho)\,v_t, \qquad
  \tilde v_t = \bar v_t / (1 - \rho^t),

a fast one (``decay`` :math:`\rho = 0.98`, ~50 steps) and a slow one
(``trend_decay`` :math:`\rho = 0.995`, ~200 steps). From the step after the climb's
end, once the fast average has stayed above the slow one by more than ``margin``
(relative) for ``patience`` consecutive steps, the validation loss trends up: the
network overfits. Each log step size then goes back to where the climb ended, or stays
where it is if that is higher, and is held there for the rest of the run: the gate stops
the annealing and never lowers :math:`\alpha` (a climb can end low, and the meta-gradient
raise :math:`\alpha` after it). Until then the optimizer is unchanged, bit for bit. A
non-finite ``validation_loss`` leaves both averages as they are (pass ``jnp.nan`` on steps
without an evaluation).

The trend (fast against slow) and not the lowest value so far: noise biases a
running minimum low, and on the character model a gate against it closed on two
seeds of three while the validation loss still fell. The patience of 100 steps: a
rise that lasts, not a spike. The averages' horizons and the patience were chosen on
validation splits (docs/design-decisions.md; the measurements are in
docs/benchmarks.md).

It reads a held-out loss at every step, which ``optax.adamw``'s contract does not
give, so it is an opt-in rather than the drop-in's default.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from metaoptax._src import tree_utils
from metaoptax._src.hyperparams import concrete_number
from metaoptax._src.loss_average import bias_corrected
from metaoptax._src.loss_average import exponential_average
from metaoptax._src.state import ClimbState
from metaoptax._src.state import MetaOptimizeState

__all__ = ("OverfittingGateState", "overfitting_gate")


class OverfittingGateState(NamedTuple):
  r"""State of :func:`metaoptax.overfitting_gate`.

  Attributes:
    inner: the wrapped optimizer's state.
    fast_average: exponential average of the validation loss (``decay``).
    fast_weight: :math:`1 - \mathrm{decay}^k`, its bias correction.
    slow_average: the slower exponential average of the validation loss (``trend_decay``).
    slow_weight: its bias correction.
    above: int32 scalar, the consecutive steps the fast average has been above the margin.
    held: bool scalar: the trend rose, and the step sizes are held from then on.
    climbed: the log step sizes where the climb ended; from the gate's closing on, the
      held ones (the larger of those and the step sizes it closed at).
  """

  inner: optax.OptState
  fast_average: jax.Array
  fast_weight: jax.Array
  slow_average: jax.Array
  slow_weight: jax.Array
  above: jax.Array
  held: jax.Array
  climbed: Any


def _the_climb(state: MetaOptimizeState, transformation: str) -> ClimbState:
  """The :class:`metaoptax.ClimbState` of ``state``'s meta optimizer."""
  found = tree_utils.instances_of(state.meta_state, ClimbState)
  if len(found) != 1:
    raise ValueError(f"{transformation} holds the step sizes where the climb ended: the "
                     "optimizer needs a climb (metaoptax.adamw, lion or sgd, or "
                     "metaoptimize(..., meta=metaoptax.climb(...))).")
  return found[0]


def _with_meta_state(state: Any, meta: MetaOptimizeState) -> Any:
  """``state`` (any optimizer state holding one MetaOptimizeState) with ``meta`` in it."""
  is_meta = lambda s: isinstance(s, MetaOptimizeState)
  return jax.tree.map(lambda s: meta if is_meta(s) else s, state, is_leaf=is_meta)


def overfitting_gate(optimizer: optax.GradientTransformation, decay: float = 0.98,
                     trend_decay: float = 0.995, margin: float = 0.01,
                     patience: int = 100) -> optax.GradientTransformationExtraArgs:
  r"""Holds the step sizes where the climb ended, or where they are if higher, once the
  validation loss trends up.

  Args:
    optimizer: a meta-optimized optimizer with a climb: :func:`metaoptax.adamw`,
      :func:`metaoptax.lion`, :func:`metaoptax.sgd`, or any ``optax.chain`` holding one
      :func:`metaoptax.metaoptimize` whose meta optimizer is a :func:`metaoptax.climb`.
    decay: decay :math:`\rho` of the fast average of the validation loss (~50 steps).
    trend_decay: decay of the slow average (~200 steps); above ``decay``.
    margin: relative amount by which the fast average must exceed the slow one.
    patience: consecutive steps above the margin after which the gate closes.

  Returns:
    An ``optax.GradientTransformationExtraArgs`` whose ``update`` takes
    ``validation_loss=``, a scalar: the loss of a minibatch of held-out data (any other
    keyword goes to ``optimizer``). Its state holds ``optimizer``'s, so
    :func:`metaoptax.step_sizes` and :func:`metaoptax.averaged_params` read it as they
    read ``optimizer``'s.

  Examples:
    >>> import jax.numpy as jnp, optax, metaoptax
    >>> opt = metaoptax.overfitting_gate(metaoptax.adamw(weight_decay=0.1))
    >>> params = {"w": jnp.ones(3)}
    >>> state = opt.init(params)
    >>> grads = {"w": jnp.ones(3)}
    >>> updates, state = opt.update(grads, state, params, validation_loss=jnp.float32(0.7))
    >>> bool(state.held)
    False
  """
  for name, value in (("decay", decay), ("trend_decay", trend_decay)):
    number = concrete_number(name, value)
    if number is None or not 0.0 < number < 1.0:
      raise ValueError(f"overfitting_gate({name}={value!r}): a decay in (0, 1).")
  if not decay < trend_decay:
    raise ValueError(f"overfitting_gate: trend_decay ({trend_decay!r}) must be above decay "
                     f"({decay!r}): the trend is the fast average against the slow one.")
  number = concrete_number("margin", margin)
  if number is None or not 0.0 <= number < float("inf"):
    raise ValueError(f"overfitting_gate(margin={margin!r}): a relative margin, >= 0.")
  if isinstance(patience, bool) or not isinstance(patience, int) or patience < 1:
    raise ValueError(f"overfitting_gate(patience={patience!r}): a number of steps, >= 1.")
  inner = optax.with_extra_args_support(optimizer)

  def init_fn(params):
    state = inner.init(params)
    meta = tree_utils.instances_of(state, MetaOptimizeState)
    if len(meta) != 1:
      raise ValueError(f"overfitting_gate: the optimizer's state holds {len(meta)} "
                       "MetaOptimizeState(s); it needs exactly one.")
    _the_climb(meta[0], "overfitting_gate")
    zero = lambda: jnp.zeros([], jnp.float32)  # a buffer each: the state may be donated
    return OverfittingGateState(inner=state, fast_average=zero(), fast_weight=zero(),
                                slow_average=zero(), slow_weight=zero(),
                                above=jnp.zeros([], jnp.int32), held=jnp.asarray(False),
                                climbed=jax.tree.map(jnp.copy, meta[0].meta_params.step_size))

  def update_fn(updates, state, params=None, *, validation_loss=None, **extra_args):
    if validation_loss is None:
      raise ValueError("overfitting_gate needs the held-out loss: "
                       "update(grads, state, params, validation_loss=...).")
    validation_loss = jnp.asarray(validation_loss, jnp.float32)
    if validation_loss.shape:
      raise ValueError(f"overfitting_gate: validation_loss must be a scalar, got shape "
                       f"{validation_loss.shape}.")
    (before,) = tree_utils.instances_of(state.inner, MetaOptimizeState)
    updates, inner_state = inner.update(updates, state.inner, params, **extra_args)
    (meta,) = tree_utils.instances_of(inner_state, MetaOptimizeState)
    climb = _the_climb(meta, "overfitting_gate")
    beta = meta.meta_params.step_size
    climbed = jax.tree.map(lambda b, c: jnp.where(climb.ended, b, c), beta, state.climbed)
    fast_average, fast_weight = exponential_average(
        state.fast_average, state.fast_weight, validation_loss, decay)
    slow_average, slow_weight = exponential_average(
        state.slow_average, state.slow_weight, validation_loss, trend_decay)
    after_climb = ~climb.climbing & ~climb.ended  # from the step after the climb's end
    rising = (bias_corrected(fast_average, fast_weight)
              > bias_corrected(slow_average, slow_weight) * (1 + margin))
    above = jnp.where(after_climb & rising, state.above + 1, 0).astype(jnp.int32)
    held = state.held | (above >= patience)
    # closing: the climb's end, or the step sizes of this step if higher (never lowered)
    closing = held & ~state.held
    climbed = jax.tree.map(lambda c, b: jnp.where(closing, jnp.maximum(c, b), c), climbed,
                           before.meta_params.step_size)
    beta = jax.tree.map(lambda b, c: jnp.where(held, c, b), beta, climbed)
    meta = meta._replace(meta_params=meta.meta_params._replace(step_size=beta))
    return updates, OverfittingGateState(
        inner=_with_meta_state(inner_state, meta), fast_average=fast_average,
        fast_weight=fast_weight, slow_average=slow_average, slow_weight=slow_weight,
        above=above, held=held, climbed=climbed)

  return optax.GradientTransformationExtraArgs(init_fn, update_fn)
