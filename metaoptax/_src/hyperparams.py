"""Checking numeric hyperparameters that may be traced."""

from __future__ import annotations

import math

import jax


def concrete_number(name: str, value) -> float | None:
  """``float(value)`` for a concrete number; ``None`` for a traced one.

  Numeric hyperparameters may be traced (``jax.grad`` with respect to them,
  ``jit``, ``optax.inject_hyperparams`` under ``jit``): those are used as they
  are, and only concrete values are checked.

  Raises:
    ValueError: ``value`` is not a number (a string, a bool, ``None``, an array
      with more than one entry).
  """
  if value is None or isinstance(value, (str, bytes, bool)):
    raise ValueError(f"{name} must be a number, got {value!r}.")
  try:
    return float(value)
  except jax.errors.ConcretizationTypeError:
    return None
  except (TypeError, ValueError) as e:
    raise ValueError(f"{name} must be a number (a scalar), got {value!r}.") from e


def check_meta_step_size(name: str, value, *, allow_schedule: bool = True) -> None:
  """Raises ``ValueError`` unless ``value`` is a finite number ``>= 0``.

  ``0`` freezes the step sizes. A schedule (a callable ``count -> step size``,
  as optax's optimizers take) passes when ``allow_schedule``; a traced value
  passes unchecked.
  """
  if allow_schedule and callable(value):
    return
  number = concrete_number(name, value)
  if number is not None and not (math.isfinite(number) and number >= 0):
    raise ValueError(f"{name} must be a finite number >= 0, got {value!r}.")


def check_step_size_bounds(step_size_bounds) -> tuple[float, float]:
  """``(lower, upper)`` as floats; raises ``ValueError`` unless ``0 <= lower < upper``."""
  try:
    lower, upper = (float(b) for b in step_size_bounds)
  except (TypeError, ValueError) as e:
    raise ValueError(
        f"step_size_bounds must be (lower, upper), two concrete numbers, got "
        f"{step_size_bounds!r}.") from e
  if not (0.0 <= lower < upper) or math.isnan(upper):
    raise ValueError(f"step_size_bounds must satisfy 0 <= lower < upper, got {step_size_bounds}.")
  return lower, upper
