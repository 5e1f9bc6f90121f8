"""Signatures of factories that forward keywords to :func:`metaoptax.metaoptimize`."""

from __future__ import annotations

import inspect

from metaoptax._src.transform import metaoptimize


def forwarding_metaoptimize_keywords(preset):
  """Gives ``preset`` a signature that lists the keywords it forwards.

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
  preset.__signature__ = inspect.Signature(own + forwarded)
  return preset
