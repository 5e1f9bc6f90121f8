"""``benchmarks/lr_free.py``'s designs "the default from 1e-3 on a schedule-free base, ...":
the meta-optimized step of Adam without its first moment, inside schedule-free's interpolation
(issue 60, item 1). Their state, and their equations against a float64 numpy oracle."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import metaoptax
import lr_free  # benchmarks/ is on sys.path (conftest.py)
from _optimizer_step import params_sized_buffers

B1, B2, EPS = 0.9, 0.999, 1e-8
PARAMS = {"w": jnp.zeros((4, 3)), "b": jnp.zeros((3,))}


def _grads(steps, seed=0):
  keys = jax.random.split(jax.random.key(seed), steps)
  return [{"w": jax.random.normal(k, (4, 3)), "b": jax.random.normal(jax.random.fold_in(k, 1), (3,))}
          for k in keys]


def test_adam_without_first_moment_is_optax_adam_with_b1_zero():
  base, adam = lr_free._scale_by_adam_without_first_moment(), optax.scale_by_adam(b1=0.0)
  s, t = base.init(PARAMS), adam.init(PARAMS)
  base_update, adam_update = jax.jit(base.update), jax.jit(adam.update)
  for g in _grads(20):
    d, s = base_update(g, s, PARAMS)
    e, t = adam_update(g, t, PARAMS)
    for x, y in zip(jax.tree.leaves(d), jax.tree.leaves(e)):
      # float32: optax forms 1 - b2^t, which loses ~1e-5 of it to cancellation at small t
      np.testing.assert_allclose(x, y, rtol=3e-5, atol=1e-7)


@pytest.mark.parametrize("make, buffers", [
    (lr_free._schedule_free_base, 3.0),  # z, v, h
    (lr_free._schedule_free_base_weighted, 3.0),
    (lambda: lr_free._schedule_free_base_weighted(weights="uniform", trace_of_y=True), 3.0),
    (lr_free._schedule_free_trace_read_off, 2.0),  # z, v
])
def test_state_buffers(make, buffers):
  state = jax.eval_shape(make().init, PARAMS)
  assert params_sized_buffers(state, PARAMS) == pytest.approx(buffers)


def _oracle(grads, alphas, y0, kappa, trace_of_y):
  """float64: v (Adam's, b1 = 0, bias-corrected), z_{t+1} = z_t - alpha_t (d_t + kappa y_t),
  x_{t+1} the uniform average of z_1 ... z_{t+1}, y = b1 x + (1 - b1) z, and the trace
  h_{t+1} = (1 - kappa alpha_t) h_t + (y_{t+1} - y_t if trace_of_y else Delta_t)."""
  y, z, x = y0.copy(), y0.copy(), y0.copy()
  v, h = np.zeros_like(y0), np.zeros_like(y0)
  for t, (g, a) in enumerate(zip(grads, alphas)):
    v = B2 * v + (1 - B2) * g * g
    delta = -a * (g / (np.sqrt(v / (1 - B2 ** (t + 1))) + EPS) + kappa * y)
    z = z + delta
    x = x + (z - x) / (t + 1)
    y_new = B1 * x + (1 - B1) * z
    h = (1 - kappa * a) * h + (y_new - y if trace_of_y else delta)
    y = y_new
  return y, z, x, h


@pytest.mark.parametrize("trace_of_y", [False, True])
def test_equations_against_a_float64_oracle(trace_of_y):
  """Both forms: optax.contrib.schedule_free around the meta-optimized base (the trace of z),
  and the design's own interpolation with the trace of y. The step sizes are read off the
  state (the climb's; the oracle checks what is done with them)."""
  opt = (lr_free._schedule_free_base_weighted(weights="uniform", trace_of_y=True,
                                              climb_memory=None) if trace_of_y
         else lr_free._schedule_free_base(climb_memory=None))
  inner = (lambda s: s.base) if trace_of_y else (lambda s: s.base_optimizer_state)
  flat = lambda tree: np.concatenate([np.ravel(np.asarray(x, np.float64))
                                      for x in jax.tree.leaves(tree)])
  y = jax.tree.map(lambda p: p + 0.5, PARAMS)
  y0 = flat(y)
  state = opt.init(y)
  update = jax.jit(opt.update)
  grads, alphas = _grads(12, seed=1), []
  for g in grads:
    alphas.append(float(jnp.mean(jnp.atleast_1d(metaoptax.step_sizes(inner(state))))))
    u, state = update(g, state, y)
    y = optax.apply_updates(y, u)
  want_y, want_z, want_x, want_h = _oracle([flat(g) for g in grads], alphas, y0,
                                           lr_free.WEIGHT_DECAY, trace_of_y)
  evaluated = (lr_free._interpolated_eval(state, y) if trace_of_y
               else optax.contrib.schedule_free_eval_params(state, y))
  for got, want in ((y, want_y), (state.z, want_z), (evaluated, want_x),
                    (inner(state).trace.weights, want_h)):
    np.testing.assert_allclose(flat(got), want, rtol=2e-4, atol=2e-6)  # float32 state

