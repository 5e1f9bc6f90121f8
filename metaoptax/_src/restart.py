r"""What the base direction's state keeps of the climb when it ends.

:func:`metaoptax.climb` raises :math:`\log\alpha` from a start orders of magnitude
below a good step size. While it lasts the weights hardly move, so the gradient
keeps its initial scale, and the base direction's state records it: Adam's second
moment :math:`v` is an average over the last :math:`\sim 1/(1-b_2) = 1000`
steps, so the climb's large early gradients dominate :math:`v` for hundreds of
steps after it and shrink every step :math:`\hat m / \sqrt{\hat v}` once the loss
and its gradients have fallen. A warm-up of ``optax.adamw`` by a schedule does
the same: after an exponential ramp of the learning rate the loss stays above that of
a constant rate from step 0 until Adam's moments forget the ramp, and restarting them
when the ramp ends closes the gap (docs/design-decisions.md).

``metaoptimize(..., climb_memory=k)`` acts at the step after the one at which the
climb ends (:attr:`ClimbState.ended`):

* ``k = 0``: the base state restarts from ``base.init``; the base direction goes on
  as one started at the climbed step size from the current weights. Adam's fresh
  moments then take sign-like first steps (:math:`|\hat m/\sqrt{\hat v}| = 1` on
  every weight), a shock at the climbed step size (docs/design-decisions.md).
* ``k > 0`` (a base holding one ``optax.ScaleByAdamState``): Adam's moments keep
  their bias-corrected values :math:`\hat m, \hat v` but count as ``k`` steps: the
  count :math:`n` becomes ``k`` and

  .. math::

    m \leftarrow m\,\frac{1 - b_1^{k}}{1 - b_1^{n}}, \qquad
    v \leftarrow v\,\frac{1 - b_2^{k}}{1 - b_2^{n}},

  so the direction is continuous, and the climb's gradients weigh as ``k`` of the
  gradients that follow in :math:`\hat v` (the ``t``-th step after it gives them
  :math:`(1-b_2^k)\,b_2^t / (1 - b_2^{k+t})`, about :math:`k/(k+t)`) instead of the
  ~100 of the climb. :func:`metaoptax.adamw` uses ``k = 3`` (chosen on validation
  splits: docs/design-decisions.md).

The meta optimizer's state (warm since the first step) and the trace are kept. The
change selects (``k = 0``) or scales (``k > 0``) the step's *input*: XLA fuses it into
the kernels that read the base state, and the step stays in place with no temporary
beyond ``optax.adamw``'s (``tests/metaoptimize/test_compiled_step.py``). Selecting the
step's outputs instead cost two params-sized temporaries, and restarting the trace too
(its selection has two readers, the meta-gradient and the trace update) one, on XLA:CPU.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax

from metaoptax._src import tree_utils
from metaoptax._src.hyperparams import concrete_number
from metaoptax._src.state import ClimbState, MetaOptimizeState


def check_climbs(meta_state: Any) -> None:
  """Raises unless the meta state holds exactly one climb."""
  found = len(tree_utils.instances_of(meta_state, ClimbState))
  if found != 1:
    raise ValueError(
        f"climb_memory needs a meta optimizer built with metaoptax.climb (exactly one); "
        f"its state holds {found}.")


def restarts(climb_memory: Any) -> bool:
  """Whether ``climb_memory`` asks for the restart of any base (a concrete ``0``), as
  opposed to Adam's moments counted as ``climb_memory`` steps (a count > 0, or a traced
  one: ``optax.inject_hyperparams`` injects it as an array); checks a concrete one."""
  if isinstance(climb_memory, bool):
    raise ValueError(f"climb_memory must be None or an int >= 0, got {climb_memory!r}.")
  try:
    count = concrete_number("climb_memory", climb_memory)
  except ValueError as e:
    raise ValueError(f"climb_memory must be None or an int >= 0, got {climb_memory!r}.") from e
  if count is not None and (count < 0 or count != int(count)):
    raise ValueError(f"climb_memory must be None or an int >= 0, got {climb_memory!r}.")
  return count == 0


class NoAdamMomentsError(ValueError):
  """The base of ``climb_memory > 0`` does not hold exactly one Adam state."""


def adam_decays(base: optax.GradientTransformation,
                params: Any) -> tuple[jax.Array, jax.Array]:
  """``(1 - b1, 1 - b2)`` of the one ``optax.ScaleByAdamState`` of ``base``, read off one
  step of ``base`` from its initial state on a probe of ``params``' structure (every leaf
  ``ones`` of shape ``(1,) * ndim``, so that pytree masks and ndim-reading callables fit):
  ``mu = (1 - b1) g``, ``nu = (1 - b2) g^2`` at ``g = 1``, the complements as Adam computes
  them, which :func:`shorten_if_the_climb_ended` needs accurately. Constants even where a
  trace calls it. Raises unless ``base`` holds exactly one ``ScaleByAdamState`` with a
  leaf that is not masked out.
  Decays that are learned (``learn=("b1", "b2")``) are read from the state instead, when
  the moments are shortened (:func:`shorten_if_the_climb_ended`)."""
  base = optax.with_extra_args_support(base)
  with jax.ensure_compile_time_eval():  # concrete even where a trace builds the optimizer
    probe = jax.tree.map(lambda x: jnp.zeros((1,) * jnp.ndim(x), jnp.float32), params)
    ones = jax.tree.map(jnp.ones_like, probe)
    _, state = base.update(ones, base.init(probe), probe)
  found = tree_utils.instances_of(state, optax.ScaleByAdamState)
  leaves = [jax.tree.leaves(tree) for adam in found for tree in (adam.mu, adam.nu)]
  if len(found) != 1 or not all(leaves):
    raise NoAdamMomentsError(
        f"climb_memory > 0 counts Adam's moments as that many steps: the base must hold "
        f"exactly one optax.ScaleByAdamState with at least one leaf, and its state holds "
        f"{len(found)}; use climb_memory=0 (a restart from base.init) for other bases.")
  return tuple(jnp.ravel(tree[0])[0].astype(jnp.float32) for tree in leaves)


def restart_if_the_climb_ended(state: MetaOptimizeState,
                               fresh_base_state: Any) -> MetaOptimizeState:
  """``state`` with its base state restarted if the climb ended at the last step.

  Args:
    state: the state a step starts from.
    fresh_base_state: the base state as at ``init`` (its constants: XLA fuses them).
  """
  (climb,) = tree_utils.instances_of(state.meta_state, ClimbState)
  return state._replace(base_state=jax.tree.map(
      lambda fresh, kept: jnp.where(climb.ended, fresh, kept).astype(kept.dtype),
      fresh_base_state, state.base_state))


def shorten_if_the_climb_ended(state: MetaOptimizeState, steps: int, c1: jax.Array,
                               c2: jax.Array) -> MetaOptimizeState:
  r"""``state`` whose Adam moments count as ``steps`` steps if the climb ended at the
  last step (their bias-corrected values kept; see the module's docstring). ``c1, c2``:
  ``1 - b1, 1 - b2`` (:func:`adam_decays`), or learned decays injected in the state.
  :math:`1 - b^k = -\mathrm{expm1}(k \log(1 - c))`, accurate in float32 where
  :math:`b^k` is within rounding of 1."""
  (climb,) = tree_utils.instances_of(state.meta_state, ClimbState)
  for injected in tree_utils.instances_of(state.base_state,
                                          optax.InjectStatefulHyperparamsState):
    # learned decays: the values of the last step (metaoptimize injects them)
    c1 = 1.0 - injected.hyperparams.get("b1", 1.0 - c1)
    c2 = 1.0 - injected.hyperparams.get("b2", 1.0 - c2)

  def shorten(adam):
    if not isinstance(adam, optax.ScaleByAdamState):
      return adam
    count = adam.count.astype(jnp.float32)
    weight = lambda c, n: -jnp.expm1(n * jnp.log1p(-c))  # 1 - b^n
    scale = lambda c: jnp.where(climb.ended, weight(c, jnp.asarray(steps, jnp.float32))
                                / weight(c, count), 1.0)
    return optax.ScaleByAdamState(
        count=jnp.where(climb.ended, jnp.asarray(steps).astype(adam.count.dtype), adam.count),
        mu=jax.tree.map(lambda m: (m * scale(c1)).astype(m.dtype), adam.mu),
        nu=jax.tree.map(lambda v: (v * scale(c2)).astype(v.dtype), adam.nu))

  return state._replace(base_state=jax.tree.map(
      shorten, state.base_state, is_leaf=lambda s: isinstance(s, optax.ScaleByAdamState)))


class ClimbMemory(NamedTuple):
  """The climb's piece of :func:`metaoptax.metaoptimize`'s step (``climb_memory=``).

  Attributes:
    check: ``(params, meta_state) -> None``, at ``init``: raises unless the meta state
      holds one climb and, for a count ``> 0``, the base one Adam.
    apply: ``(state, params, fresh_base_state) -> state``, first in ``update``: the state
      whose base state keeps what ``climb_memory`` says of the climb, if it ended at the
      last step; ``fresh_base_state()`` gives the base state as at ``init``.
  """
  check: Callable[[Any, Any], None]
  apply: Callable[[MetaOptimizeState, Any, Callable[[], Any]], MetaOptimizeState]


def climb_memory_piece(base: optax.GradientTransformation, climb_memory: Any) -> ClimbMemory:
  """The piece for ``climb_memory`` (``None``: nothing is done), checked at construction
  where it can be: Adam's decays are read off the base on a probe of the params'
  structure (:func:`adam_decays`), at once where a one-leaf probe fits the base, else
  at ``init`` (a base that reads the params' structure: a pytree mask)."""
  restarting = climb_memory is not None and restarts(climb_memory)
  shortening = climb_memory is not None and not restarting
  checked = not shortening
  if shortening:
    try:  # at construction where a one-leaf probe fits the base
      adam_decays(base, {"w": jnp.zeros([1])})
      checked = True
    except NoAdamMomentsError:
      raise
    except (ValueError, TypeError):  # the base reads the params' structure (a pytree mask)
      pass  # checked at init

  def check(params, meta_state):
    if climb_memory is not None:
      check_climbs(meta_state)
    if not checked:  # only where construction could not: params may be a placeholder
      adam_decays(base, params)  # (optax's init of a state's shape) raises unless one Adam

  def apply(state, params, fresh_base_state):
    if restarting:
      return restart_if_the_climb_ended(state, fresh_base_state())
    if shortening:
      return shorten_if_the_climb_ended(state, climb_memory, *adam_decays(base, params))
    return state

  return ClimbMemory(check=check, apply=apply)
