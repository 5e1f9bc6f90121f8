r"""The drop-in's per-step arithmetic alone, written by hand: the bytes XLA's fusion gives
its outputs, whatever the library around it does.

:func:`arithmetic_floor` is one ``optax`` transformation with ``metaoptax.adamw()``'s
parameter-sized work and nothing else (no guard, no climb, no blocks, a plain step on
:math:`\log\alpha`): the meta-gradient's reduction :math:`\sum h \cdot g`, Adam's
moments, the weight change :math:`\Delta = -\alpha(\hat m / (\sqrt{\hat v} + \epsilon)
+ \kappa w)`, the Hessian-free trace :math:`h' = (1 - \kappa\alpha) h + \Delta`
(``gamma=1``) and the iterate average :math:`\bar w' = \bar w + (w + \Delta - \bar w) /
(0.1 t + 1)`. Its bytes accessed (``_step_bytes``) are what a step with these outputs
costs under XLA's fusions (one output each on XLA:CPU, several on XLA:GPU). It is a
benchmark reference, not an optimizer to train with.

Two design alternatives have rows of their own, to show what each would save where
fusions may have several outputs (XLA:GPU): ``late=True`` takes the step with the
current :math:`\alpha` (as the library does) and no selection on the meta-gradient (the
library's guard makes one), so that the reduction and the elementwise update may share one
pass over :math:`h` and :math:`g`; ``storage=jnp.bfloat16`` keeps the trace and the
average in bfloat16 (rounded to nearest).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax


def arithmetic_floor(trace: bool = True, average: bool = True, late: bool = False,
                     storage=jnp.float32, b1: float = 0.9,
                     b2: float = 0.999, eps: float = 1e-8, weight_decay: float = 1e-4,
                     meta_step_size: float = 3e-3) -> optax.GradientTransformationExtraArgs:
  """``metaoptax.adamw()``'s parameter-sized arithmetic (module docstring); without
  ``trace`` and ``average`` it is AdamW at a fixed step size."""

  def zeros(params, dtype=None):
    return jax.tree.map(lambda p: jnp.zeros_like(p, dtype), params)

  def init(params):
    return dict(mu=zeros(params), nu=zeros(params),
                trace=zeros(params, storage) if trace else None,
                average=zeros(params, storage) if average else None,
                log_step_size=jnp.zeros([]), count=jnp.zeros([], jnp.int32))

  def update(grads, state, params):
    log_step_size = state["log_step_size"]
    step_size = jnp.exp(log_step_size)
    if trace:  # the meta-gradient of log alpha: the trace against this step's gradient
      leaves = zip(jax.tree.leaves(state["trace"]), jax.tree.leaves(grads))
      log_step_size -= meta_step_size * sum(jnp.sum(h.astype(g.dtype) * g) for h, g in leaves)
    if not late:
      step_size = jnp.exp(log_step_size)
    count = state["count"] + 1
    c1, c2 = 1 - b1**count, 1 - b2**count
    mu = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, state["mu"], grads)
    nu = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * g * g, state["nu"], grads)
    delta = jax.tree.map(
        lambda m, v, w: -step_size * ((m / c1) / (jnp.sqrt(v / c2) + eps) + weight_decay * w),
        mu, nu, params)
    new = dict(mu=mu, nu=nu, trace=None, average=None, log_step_size=log_step_size,
               count=count)
    if trace:
      new["trace"] = jax.tree.map(
          lambda h, d: ((1 - weight_decay * step_size) * h + d).astype(storage),
          state["trace"], delta)
    if average:
      new["average"] = jax.tree.map(
          lambda a, w, d: (a + (w + d - a) / (0.1 * count + 1)).astype(storage),
          state["average"], params, delta)
    return delta, new

  return optax.GradientTransformationExtraArgs(init, update)


def floors() -> dict:
  """name: (transformation, extra argument), as ``_optimizer_step.optimizers``."""
  return {"hand-written arithmetic of metaoptax.adamw(): trace and average":
          (arithmetic_floor(), None),
          "hand-written arithmetic of metaoptax.adamw(): trace only":
          (arithmetic_floor(average=False), None),
          "hand-written arithmetic, step size one step late":
          (arithmetic_floor(late=True), None),
          "hand-written arithmetic, one step late, bfloat16 trace and average":
          (arithmetic_floor(late=True, storage=jnp.bfloat16), None)}
