"""Bad input gets a clear error; non-finite values never enter the state."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import metaoptax
from metaoptax._src import exact

PARAMS = {"a": jnp.ones((2, 3)), "b": jnp.zeros(4)}


def loss(p):
  return jnp.sum((p["a"] - 2.0) ** 2) + jnp.sum((p["b"] + 1.0) ** 2)


def make(**kwargs):
  kwargs.setdefault("init_step_size", 1e-3)
  return metaoptax.metaoptimize(optax.scale_by_adam(), optax.adam(1e-3), **kwargs)


@pytest.mark.parametrize("kwargs,message", [
    ({"gamma": 1.5}, "gamma must be in"),
    ({"gamma": -0.1}, "gamma must be in"),
    ({"init_step_size": 0.0}, "init_step_size must be > 0"),
    ({"init_step_size": -1e-3}, "init_step_size must be > 0"),
    ({"init_step_size": float("nan")}, "finite number"),
    ({"init_step_size": 10.0}, "outside step_size_bounds"),
    ({"approximation": "exact"}, "Unknown approximation"),
    ({"blocks": "layerwise"}, "Unknown blocks"),
    ({"blocks": None}, "not a layout"),
    ({"parametrization": "sqrt"}, "Unknown parametrization"),
    ({"weight_decay": -0.1}, "weight_decay must be >= 0"),
    ({"step_size_bounds": (1.0, 0.1)}, "0 <= lower < upper"),
    ({"step_size_bounds": 3}, "must be \\(lower, upper\\)"),
])
def test_construction_errors(kwargs, message):
  with pytest.raises(ValueError, match=message):
    make(**kwargs)


def test_base_must_be_a_transformation():
  with pytest.raises(TypeError, match="base must be an optax.GradientTransformation"):
    metaoptax.metaoptimize(optax.adam, optax.adam(1e-3), init_step_size=1e-3)


@pytest.mark.parametrize("labels,message", [
    ({"a": np.zeros((2, 3), int)}, "do not match the params structure"),
    ({"a": np.zeros((3, 2), int), "b": np.zeros(4, int)}, "has shape"),
    ({"a": np.zeros((2, 3)), "b": np.zeros(4, int)}, "must be integers"),
    ({"a": -np.ones((2, 3), int), "b": np.zeros(4, int)}, "must be >= 0"),
])
def test_labels_not_matching_params(labels, message):
  with pytest.raises(ValueError, match=message):
    make(blocks=labels).init(PARAMS)


def test_labels_and_callable_blocks():
  labels = {"a": np.array([[0, 0, 1], [1, 2, 2]]), "b": 3}  # per weight / per array
  state = make(blocks=labels).init(PARAMS)
  assert state.meta_params.shape == (4,)
  by_rank = lambda p: jax.tree.map(lambda x: x.ndim - 1, p)
  state = make(blocks=by_rank).init(PARAMS)
  assert state.meta_params.shape == (2,)


def test_update_needs_params():
  opt = make()
  with pytest.raises(ValueError, match="needs params"):
    opt.update(PARAMS, opt.init(PARAMS))


def test_exact_needs_scalar_objective():
  opt = make(approximation="2x2")
  state = opt.init(PARAMS)
  grads = jax.grad(loss)(PARAMS)
  with pytest.raises(ValueError, match="need the objective"):
    opt.update(grads, state, PARAMS)
  with pytest.raises(ValueError, match="floating-point scalar"):
    opt.update(grads, state, PARAMS, obj_fn=lambda p: p["b"])


def test_exact_refuses_too_many_blocks():
  params = {"w": jnp.zeros(exact.MAX_EXACT_BLOCKS + 1)}
  with pytest.raises(ValueError, match="approximation='hessian_free'"):
    make(approximation="l_approx", blocks="per_param").init(params)
  make(approximation="hessian_free", blocks="per_param").init(params)  # fine


@pytest.mark.parametrize("approximation", ["hessian_free", "2x2"])
@pytest.mark.parametrize("bad", [jnp.nan, jnp.inf])
def test_nonfinite_gradient_skips_the_step(approximation, bad):
  opt = make(approximation=approximation)
  update = jax.jit(lambda g, s, p: opt.update(g, s, p, obj_fn=loss))
  state = opt.init(PARAMS)
  _, state = update(jax.grad(loss)(PARAMS), state, PARAMS)  # a normal step first
  grads = jax.grad(loss)(PARAMS)
  grads = {"a": grads["a"].at[0, 1].set(bad), "b": grads["b"]}
  updates, new_state = update(grads, state, PARAMS)
  assert all(float(jnp.abs(u).max()) == 0.0 for u in jax.tree.leaves(updates))
  assert int(new_state.skipped_steps) == 1
  kept = new_state._replace(skipped_steps=0)
  # the base state advances as for an all-zero gradient; everything else is kept
  zero_grads = jax.tree.map(jnp.zeros_like, grads)
  _, expected_base = optax.scale_by_adam().update(zero_grads, state.base_state, PARAMS)
  for old, new in zip(jax.tree.leaves(expected_base), jax.tree.leaves(new_state.base_state)):
    np.testing.assert_allclose(new, old, rtol=1e-6)
  kept = kept._replace(base_state=state.base_state)
  for old, new in zip(jax.tree.leaves(state._replace(skipped_steps=0)), jax.tree.leaves(kept)):
    np.testing.assert_array_equal(old, new)
  # and training goes on from there
  updates, state = update(jax.grad(loss)(PARAMS), new_state, PARAMS)
  assert all(bool(jnp.all(jnp.isfinite(u))) for u in jax.tree.leaves(updates))
  assert float(jnp.abs(updates["a"]).max()) > 0


def test_overflowing_trace_restarts():
  opt = make()
  state = opt.init(PARAMS)
  huge = jax.tree.map(lambda x: jnp.full_like(x, 3e38), state.trace)
  state = state._replace(trace=huge)
  grads = jax.grad(loss)(PARAMS)
  updates, new_state = opt.update(grads, state, PARAMS)  # h*g overflows -> beta inf
  assert int(new_state.trace_resets) == 1 and int(new_state.skipped_steps) == 0
  np.testing.assert_array_equal(new_state.meta_params, state.meta_params)
  assert float(jnp.abs(updates["a"]).max()) > 0  # the base step was taken
  # ... exactly as from a restarted (zero) trace
  fresh = state._replace(trace=jax.tree.map(jnp.zeros_like, state.trace))
  ref_updates, ref_state = make(skip_nonfinite=False).update(grads, fresh, PARAMS)
  for got, want in zip(jax.tree.leaves((updates, new_state.trace, new_state.base_state)),
                       jax.tree.leaves((ref_updates, ref_state.trace, ref_state.base_state))):
    np.testing.assert_array_equal(got, want)


def test_idbd_errors_and_nonfinite():
  with pytest.raises(ValueError, match="init_step_size must be > 0"):
    metaoptax.idbd(meta_step_size=0.01, init_step_size=0.0)
  opt = metaoptax.idbd(meta_step_size=0.01, init_step_size=0.05)
  w = jnp.zeros(3)
  state = opt.init(w)
  with pytest.raises(ValueError, match="hessian_diagonal"):
    opt.update(jnp.ones(3), state, w)
  u, new_state = opt.update(jnp.array([1.0, jnp.nan, 0.0]), state, w, hessian_diagonal=jnp.ones(3))
  assert float(jnp.abs(u).max()) == 0.0 and int(new_state.skipped_steps) == 1


def test_step_sizes_and_trace_inside_a_chain():
  opt = optax.chain(optax.clip_by_global_norm(1.0), make(blocks="per_leaf"))
  state = opt.init(PARAMS)
  assert metaoptax.step_sizes(state).shape == (2,)
  assert jax.tree.structure(metaoptax.sensitivity_trace(state)) == jax.tree.structure(PARAMS)
  with pytest.raises(ValueError, match="exactly one MetaOptimizeState"):
    metaoptax.step_sizes(optax.adam(1e-3).init(PARAMS))


@pytest.mark.parametrize("blocks", ["scalar", "per_leaf", "per_param"])
def test_nan_in_the_trace_restarts_instead_of_skipping_forever(blocks):
  opt = make(blocks=blocks)
  state = opt.init(PARAMS)
  bad = jax.tree.map(lambda h: h.at[(0,) * h.ndim].set(jnp.nan), state.trace)
  state = state._replace(trace=bad)
  updates, state = opt.update(jax.grad(loss)(PARAMS), state, PARAMS)
  assert int(state.trace_resets) == 1 and int(state.skipped_steps) == 0
  assert all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree.leaves(state))
  updates, state = opt.update(jax.grad(loss)(PARAMS), state, PARAMS)
  assert int(state.trace_resets) == 1 and int(state.skipped_steps) == 0


def test_guard_under_vmap_is_per_problem():
  opt = make(blocks="per_leaf")
  batch = jax.tree.map(lambda x: jnp.stack([x, 2 * x]), PARAMS)
  states = jax.vmap(opt.init)(batch)
  grads = jax.vmap(jax.grad(loss))(batch)
  grads = {"a": grads["a"].at[1, 0, 0].set(jnp.inf), "b": grads["b"]}  # problem 1 only
  updates, states = jax.jit(jax.vmap(opt.update))(grads, states, batch)
  np.testing.assert_array_equal(states.skipped_steps, [0, 1])
  assert float(jnp.abs(updates["a"][0]).max()) > 0
  assert float(jnp.abs(updates["a"][1]).max()) == 0
  assert all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree.leaves(states))
