r""":func:`metaoptax.metaoptimize`'s arguments, checked at construction.

Every check that needs no params runs here, before the first step, and names the
argument at fault; numeric hyperparameters are checked where they are concrete (a
value traced by ``optax.inject_hyperparams`` passes). :func:`check` returns what the
step needs of them: the trace's discount, the learned hyperparameters, the trace's
storage dtype and the bounds of :math:`\beta`.
"""

from __future__ import annotations

import math

from typing import Any, NamedTuple

import optax

from metaoptax._src import averaging, blocks as blocks_lib, exact, hessian_free, learned
from metaoptax._src import rounding, validation
from metaoptax._src.approximation import Approximation
from metaoptax._src.hyperparams import check_step_size_bounds, concrete_number

#: The approximation of each name (see :mod:`metaoptax._src.approximation`): the one
#: place where the user's ``approximation=`` is read.
BY_NAME: dict[str, Approximation] = {
    "hessian_free": hessian_free.HESSIAN_FREE,
    "l_approx": exact.L_APPROX,
    "2x2": exact.TWO_BY_TWO,
}
APPROXIMATIONS = tuple(BY_NAME)
PARAMETRIZATIONS = ("log", "linear")
DEFAULT_STEP_SIZE_BOUNDS = (1e-10, 1.0)
#: The meta-parameters whose meta-gradients use ``meta_grads`` when it is given.
HELD_OUT = ("all", "hyperparams")


class Checked(NamedTuple):
  r"""What the step needs of the checked arguments.

  Attributes:
    gamma: the trace's discount (``1`` where ``gamma=None`` reads the trace off the
      average: the discount of the columns the average does not hold).
    learn: the learned hyperparameters' names, checked.
    trace_dtype: the Hessian-free trace's storage dtype, or ``None``.
    beta_bounds: ``(lower, upper)`` of :math:`\beta` (of :math:`\log\alpha` for the log
      parametrization).
    meta_probed: whether ``meta`` was checked to ignore :math:`\beta` already (else it
      is checked at ``init``, on the meta-parameters).
  """
  gamma: Any
  learn: tuple[str, ...]
  trace_dtype: Any
  beta_bounds: tuple[float, float]
  meta_probed: bool


def check(base, meta, *, init_step_size, blocks, gamma, approximation, weight_decay,
          step_size_bounds, parametrization, learn, held_out, sensitivity_radius,
          trace_dtype, average) -> Checked:
  """Checks every argument of :func:`metaoptax.metaoptimize` that needs no params."""
  _check_average(average, approximation, gamma, trace_dtype)
  gamma = 1.0 if gamma is None else gamma  # with average: the columns the average does not hold
  _check_numbers(base, meta, init_step_size, blocks, gamma, approximation, weight_decay,
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
  lower, upper = (float(b) for b in step_size_bounds)
  beta_bounds = ((math.log(lower) if lower > 0 else -math.inf, math.log(upper))
                 if parametrization == "log" else (lower, upper))
  return Checked(gamma=gamma, learn=learn, trace_dtype=trace_dtype, beta_bounds=beta_bounds,
                 meta_probed=meta_probed)


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


def _check_numbers(base, meta, init_step_size, blocks, gamma, approximation, weight_decay,
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
