"""Checking numeric hyperparameters that may be traced."""

from __future__ import annotations

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
