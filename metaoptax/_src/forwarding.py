"""Signatures of factories that forward keywords to :func:`metaoptax.metaoptimize`."""

from __future__ import annotations

import functools
import inspect

from metaoptax._src.transform import metaoptimize


def forwarding_metaoptimize_keywords(preset):
  """``preset`` with a signature that lists the keywords it forwards, and that
  refuses any other keyword under its own name.

  ``optax.inject_hyperparams`` binds arguments by the signature; with a bare
  ``**kwargs`` it would pass ``kwargs={...}`` as one argument. Listing
  :func:`metaoptimize`'s keyword-only arguments makes ``gamma`` injectable and
  ``blocks``, ``approximation``, ... ordinary static arguments.
  """
  own = [p for p in inspect.signature(preset).parameters.values()
         if p.kind is not inspect.Parameter.VAR_KEYWORD]
  names = {p.name for p in own}
  forwarded = [p for p in inspect.signature(metaoptimize).parameters.values()
               if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name not in names
               and p.name != "init_step_size"]
  signature = inspect.Signature(own + forwarded)

  @functools.wraps(preset)
  def checked(*args, **kwargs):
    _check_keywords(preset.__name__, signature, kwargs)
    return preset(*args, **kwargs)

  checked.__signature__ = signature
  return checked


def _check_keywords(name: str, signature: inspect.Signature, kwargs: dict) -> None:
  """A ``TypeError`` that names ``name`` (not :func:`metaoptimize`) for an unknown
  keyword, and points ``learning_rate=`` (optax's name) to ``init_step_size=``."""
  unknown = [k for k in kwargs if k not in signature.parameters]
  if not unknown:
    return
  if "learning_rate" in unknown:
    default = signature.parameters["init_step_size"].default
    raise TypeError(
        f"{name}() takes no learning_rate: the step size is learned while training runs. "
        f"Give its starting value as init_step_size= (e.g. {name}(init_step_size=1e-3), "
        f"or positionally, {name}(1e-3), as optax's learning rate); it need not be tuned "
        f"(default {default:g}).")
  raise TypeError(f"{name}() got an unexpected keyword argument {unknown[0]!r}; it accepts: "
                  f"{', '.join(signature.parameters)}.")
