"""The exact 2x2 sensitivities stay bounded at gamma = 1 (the meta-sensitivity trust region).

A noisy quadratic near its minimum with (AdamW, Adam), 2x2, gamma = 1: the
gradient is mostly noise while the curvature is not, so meta Adam's derivative
(~ 1 / RMS of the meta-gradient) makes Y^beta -> X^w -> s -> Y^beta a positive
feedback loop. Without the trust region (radius = inf, the plain recursion of
paper eq. 15) Y^beta and the trace grow by orders of magnitude within 1,500
steps (Y^beta ~ 1e3, H ~ 3e2); with it the trace stays O(1), Y^beta stays within the radius of I and
the learned step size stays in the problem's stable range.
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import metaoptax
from metaoptax._src import exact

N, STEPS = 8, 1500
CURVATURES = jnp.logspace(-1, 0, N)


def loss(params, key):
  noise = 0.1 * jax.random.normal(key, (N,))
  return 0.5 * jnp.sum(CURVATURES * (params["w"] - noise) ** 2)


def run(radius):
  opt = metaoptax.presets.adamw_adam(0.1, meta_step_size=0.1, approximation="2x2",
                                     weight_decay=0.0, sensitivity_radius=radius)
  params = {"w": jnp.ones(N)}

  def body(carry, key):
    p, s = carry
    f = lambda q: loss(q, key)
    updates, s = opt.update(jax.grad(f)(p), s, p, obj_fn=f)
    return (optax.apply_updates(p, updates), s), None

  (params, state), _ = jax.jit(lambda p, s: jax.lax.scan(
      body, (p, s), jax.random.split(jax.random.key(0), STEPS)))(params, opt.init(params))
  return params, state


def test_plain_recursion_blows_up():
  _, state = run(radius=float("inf"))
  y = float(jnp.abs(state.trace.meta_params.step_size[0, 0]))
  h = float(jnp.max(jnp.abs(metaoptax.sensitivity_trace(state)["w"])))
  assert y > 100 or int(state.trace_resets) > 0, (y, h)
  assert h > 100 or int(state.trace_resets) > 0, (y, h)


def test_trust_region_keeps_the_trace_bounded():
  radius = exact.DEFAULT_SENSITIVITY_RADIUS
  params, state = run(radius)
  assert int(state.trace_resets) == 0 and int(state.skipped_steps) == 0
  y = float(state.trace.meta_params.step_size[0, 0])
  assert abs(y - 1.0) <= radius * (1 + 1e-6)
  assert float(jnp.max(jnp.abs(metaoptax.sensitivity_trace(state)["w"]))) < 10.0
  assert 0.0 < float(jnp.ravel(metaoptax.step_sizes(state))[0]) < 1.0
  assert np.isfinite(float(loss(params, jax.random.key(1))))
