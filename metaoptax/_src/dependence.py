"""Which outputs of a function can depend on which inputs (a jaxpr walk).

Used at trace time to find the base-state leaves that read the params, so the
Hessian-free trace carries sensitivities for exactly those and no others, and
whether a base's direction is computed from its new state (Adam) or beside it
(Lion). Conservative: an equation's outputs depend on all of its inputs (nested
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


def outputs_read_outputs(fn: Callable, args: Sequence, readers: Sequence[int],
                         read: Sequence[int]) -> bool:
  """Can a flat output of ``fn(*args)`` in ``readers`` be computed from one in ``read``?

  True as well when an equation that a reader needs also produces a ``read``
  output (a nested jaxpr computing both), or when the two are the same value.
  A ``read`` output that is an input passed through counts as that input.
  """
  closed = jax.make_jaxpr(fn)(*args)
  outvars = closed.jaxpr.outvars
  variables = lambda vs: {v for v in vs if not isinstance(v, jax_core.Literal)}
  targets = variables(outvars[k] for k in read) - set(closed.jaxpr.invars)
  needed = variables(outvars[k] for k in readers)
  for eqn in reversed(closed.jaxpr.eqns):
    if needed & targets:
      return True
    if variables(eqn.outvars) & needed:
      if variables(eqn.outvars) & targets:
        return True
      needed |= variables(eqn.invars)
  return bool(needed & targets)
