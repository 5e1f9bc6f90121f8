"""Which outputs of a function can depend on which inputs (a jaxpr walk).

Used at trace time to find the base-state leaves that read the params, so the
Hessian-free trace carries sensitivities for exactly those and no others.
Conservative: an equation's outputs depend on all of its inputs (nested
jaxprs of scan / cond / pjit included), so the answer may say "depends" where
a finer analysis would not, never the reverse.
"""

from __future__ import annotations

from typing import Callable, Sequence

import jax
from jax.extend import core as jax_core


def dependent_outputs(fn: Callable, args: Sequence, sources: Sequence[int]) -> list[bool]:
  """For each flat output of ``fn(*args)``: can it depend on ``args[k]``, k in sources?"""
  closed = jax.make_jaxpr(fn)(*args)
  jaxpr = closed.jaxpr
  counts = [len(jax.tree.leaves(a)) for a in args]
  starts = [sum(counts[:k]) for k in range(len(args))]
  dependent = set()
  for k in sources:
    dependent.update(jaxpr.invars[starts[k]:starts[k] + counts[k]])
  for eqn in jaxpr.eqns:
    if any(not isinstance(v, jax_core.Literal) and v in dependent for v in eqn.invars):
      dependent.update(eqn.outvars)
  return [not isinstance(v, jax_core.Literal) and v in dependent for v in jaxpr.outvars]
