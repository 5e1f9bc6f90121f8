"""The optimizer step that the speed and memory benchmarks compile, and what XLA says of it.

Shared by ``step_time.py`` (a whole train step: gradient, update, ``apply_updates``)
and ``_step_bytes.py`` (the update and ``apply_updates`` alone, from abstract shapes),
and by the test that pins the step's bytes (``tests/metaoptimize/test_step_bytes.py``).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax

import metaoptax


def update_and_apply(opt, grads, state, params, **extra):
  """``opt``'s update, then ``optax.apply_updates``: ``(new params, new state)``."""
  updates, state = opt.update(grads, state, params, **extra)
  return optax.apply_updates(params, updates), state


def compiled_update(opt, params, extra_arg: str | None = None, donate: bool = True):
  """The compiled ``(params, state, grads[, validation_loss]) -> (params, state)`` step.

  ``params`` may be ``jax.ShapeDtypeStruct`` leaves: the step is lowered from shapes
  alone, so a 100M-parameter step needs no memory. ``extra_arg="validation_loss"``
  feeds a scalar argument as the held-out loss (:func:`metaoptax.overfitting_gate`).
  The params and the state are donated (updated in place) unless ``donate=False``.
  """
  params = jax.tree.map(lambda x: jax.ShapeDtypeStruct(jnp.shape(x), jnp.result_type(x)), params)
  state = jax.eval_shape(opt.init, params)
  if extra_arg == "validation_loss":
    step = lambda p, s, g, loss: update_and_apply(opt, g, s, p, validation_loss=loss)
    args = (params, state, params, jax.ShapeDtypeStruct((), jnp.float32))
  elif extra_arg is None:
    step = lambda p, s, g: update_and_apply(opt, g, s, p)
    args = (params, state, params)
  else:
    raise ValueError(f"Unknown extra argument {extra_arg!r}.")
  return jax.jit(step, donate_argnums=(0, 1) if donate else ()).lower(*args).compile()


def accessed_bytes(compiled) -> float:
  """Bytes the compiled step reads and writes, from XLA's cost analysis."""
  analysis = compiled.cost_analysis()
  analysis = analysis[0] if isinstance(analysis, (list, tuple)) else analysis
  return float(analysis.get("bytes accessed", float("nan")))


def nbytes(tree: Any) -> int:
  """Bytes of the arrays (or shapes) of ``tree``."""
  return sum(x.size * jnp.dtype(x.dtype).itemsize for x in jax.tree.leaves(tree))


def params_sized_buffers(state: Any, params: Any) -> float:
  """How many params-sized float32 vectors the state's params-shaped leaves make up
  (a bfloat16 copy of the params counts one half)."""
  shapes = {tuple(x.shape) for x in jax.tree.leaves(params) if x.size > 1}
  held = sum(x.size * jnp.dtype(x.dtype).itemsize for x in jax.tree.leaves(state)
             if tuple(x.shape) in shapes)
  return held / (4 * sum(x.size for x in jax.tree.leaves(params) if tuple(x.shape) in shapes))


def mlp_shapes(width: int, depth: int, dtype=jnp.float32) -> list:
  """The params of ``depth`` dense ``width x width`` layers (weights and biases), as shapes."""
  return [{"w": jax.ShapeDtypeStruct((width, width), dtype),
           "b": jax.ShapeDtypeStruct((width,), dtype)} for _ in range(depth)]


def optimizers() -> dict:
  """name: (optimizer, its update's extra argument): the drop-ins, with their defaults,
  against ``optax.adamw`` and the rivals a user would pick instead."""
  return {
      "optax.adamw(1e-3)": (optax.adamw(1e-3), None),
      "metaoptax.adamw()": (metaoptax.adamw(), None),
      # the trace read off the average: state 3x params, 2.5x with Adam's m in bfloat16
      "metaoptax.adamw(gamma=None)": (metaoptax.adamw(gamma=None), None),
      "metaoptax.adamw(gamma=None, mu_dtype=bfloat16)": (
          metaoptax.adamw(gamma=None, mu_dtype=jnp.bfloat16), None),
      "metaoptax.lion()": (metaoptax.lion(), None),
      "metaoptax.adamw(trace_dtype=bfloat16)": (metaoptax.adamw(trace_dtype=jnp.bfloat16), None),
      "metaoptax.adamw(trace_dtype=bfloat16, average_dtype=bfloat16)": (
          metaoptax.adamw(trace_dtype=jnp.bfloat16, average_dtype=jnp.bfloat16), None),
      # and Adam's first moment too: state 2.5x params
      "metaoptax.adamw(mu_dtype=bfloat16, trace_dtype=bfloat16, average_dtype=bfloat16)": (
          metaoptax.adamw(mu_dtype=jnp.bfloat16, trace_dtype=jnp.bfloat16,
                          average_dtype=jnp.bfloat16), None),
      "metaoptax.sgd()": (metaoptax.sgd(), None),
      "metaoptax.overfitting_gate(metaoptax.adamw())": (
          metaoptax.overfitting_gate(metaoptax.adamw()), "validation_loss"),
      "optax.contrib.prodigy()": (optax.contrib.prodigy(), None),
      "optax.contrib.schedule_free_adamw(1e-3)": (optax.contrib.schedule_free_adamw(1e-3), None),
  }
