"""Deprecated keyword arguments: still accepted, with a ``DeprecationWarning`` naming the
replacement."""

from __future__ import annotations

import warnings
from typing import Any, Mapping


def pop_deprecated(function: str, kwargs: dict[str, Any], replacements: Mapping[str, str],
                   stacklevel: int = 3) -> dict[str, Any]:
  """The deprecated keyword arguments in ``kwargs``, each announced by a warning.

  Args:
    function: the public function's name, for the messages.
    kwargs: the keyword arguments the function did not declare.
    replacements: deprecated name -> what to use instead (shown in the warning).
    stacklevel: the warnings' stack level (3: the public function's caller).

  Returns:
    ``{deprecated name: value}`` for those given.

  Raises:
    TypeError: for a keyword that is neither declared nor deprecated, as Python would.
  """
  unknown = [name for name in kwargs if name not in replacements]
  if unknown:
    raise TypeError(f"{function}() got an unexpected keyword argument {unknown[0]!r}")
  for name in kwargs:
    warnings.warn(f"{function}(): `{name}=` is deprecated; use {replacements[name]}.",
                  DeprecationWarning, stacklevel=stacklevel)
  return dict(kwargs)


def rename(function: str, value: Any, default: Any, old: dict[str, Any], old_name: str,
           new_name: str) -> Any:
  """``value`` of ``new_name``, or the deprecated ``old_name``'s value if that was given.

  Raises ``TypeError`` if both were given (``value`` differs from ``default``).
  """
  if old_name not in old:
    return value
  if value is not default and value != default:
    raise TypeError(f"{function}() got both `{new_name}=` and its deprecated name "
                    f"`{old_name}=`.")
  return old[old_name]


def deprecated_alias(old: str, new: str) -> property:
  """A read-only property ``old`` (e.g. of a NamedTuple) returning attribute ``new``, with a
  ``DeprecationWarning``."""

  def get(self):
    warnings.warn(f"`.{old}` is deprecated; use `.{new}`.", DeprecationWarning, stacklevel=2)
    return getattr(self, new)

  return property(get, doc=f"Deprecated name of ``{new}``.")


def replace_fields(function: str, config: Any, old: dict[str, Any]) -> Any:
  """``config`` (a NamedTuple) with the deprecated flat keyword arguments for its fields,
  popped from ``old``, applied.

  Raises ``TypeError`` if ``config`` was given too (differs from its default).
  """
  flat = {name: old.pop(name) for name in config._fields if name in old}
  if not flat:
    return config
  if config != type(config)():
    raise TypeError(f"{function}() got both a {type(config).__name__} and its deprecated "
                    f"flat fields {sorted(flat)}.")
  return config._replace(**flat)
