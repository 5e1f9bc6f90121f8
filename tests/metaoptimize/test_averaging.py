"""Iterate averaging (``metaoptax.average_iterates``) against a float64 NumPy loop."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import metaoptax
from metaoptax._src import tree_utils


def _numpy_average(iterates, horizon):
  """The oracle: avg_0 = w_0, avg_t = avg_{t-1} + (w_t - avg_{t-1}) / (c t + 1), in float64."""
  average = np.asarray(iterates[0], np.float64)
  for t, w in enumerate(iterates[1:], start=1):
    average = average + (np.asarray(w, np.float64) - average) / (horizon * t + 1.0)
  return average


@pytest.mark.parametrize("horizon", [0.1, 0.5, 1.0])
def test_average_matches_the_recursion_and_passes_updates_through(horizon):
  opt = optax.chain(optax.sgd(0.05, momentum=0.9), metaoptax.average_iterates(horizon))
  target = jnp.array([1.0, -2.0, 3.0])
  loss = lambda p: jnp.sum((p["w"] - target) ** 2) + jnp.sum(p["b"] ** 4)
  params = {"w": jnp.zeros(3), "b": jnp.full((2, 2), 0.5)}
  reference = optax.sgd(0.05, momentum=0.9)
  state, ref_state = opt.init(params), reference.init(params)
  iterates = [params]

  @jax.jit
  def step(params, state, ref_state):
    grads = jax.grad(loss)(params)
    updates, state = opt.update(grads, state, params)
    ref_updates, ref_state = reference.update(grads, ref_state, params)
    return optax.apply_updates(params, updates), state, updates, ref_updates, ref_state

  for _ in range(40):
    params, state, updates, ref_updates, ref_state = step(params, state, ref_state)
    jax.tree.map(np.testing.assert_array_equal, updates, ref_updates)  # unchanged
    iterates.append(params)
  averaged = metaoptax.averaged_params(state)
  for key in params:  # float32 recursion against float64: 40 steps, rtol 1e-5
    np.testing.assert_allclose(averaged[key], _numpy_average([p[key] for p in iterates],
                                                             horizon), rtol=1e-5, atol=1e-6)
  assert int(state[1].count) == 40


def test_drop_in_with_average_under_donation():
  """The average starts as a copy: params and state can both be donated."""
  opt = metaoptax.adamw()  # keeps the average by default
  params = {"w": jnp.ones((4, 3)), "b": jnp.zeros(3)}
  state = opt.init(params)
  loss = lambda p: jnp.sum(jnp.tanh(jnp.ones(4) @ p["w"] + p["b"]) ** 2)

  @functools.partial(jax.jit, donate_argnums=(0, 1))
  def step(params, state):
    updates, state = opt.update(jax.grad(loss)(params), state, params)
    return optax.apply_updates(params, updates), state

  for _ in range(3):
    params, state = step(params, state)
  averaged = metaoptax.averaged_params(state)
  assert jax.tree.structure(averaged) == jax.tree.structure(params)
  assert all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree.leaves(averaged))
  assert metaoptax.step_sizes(state) > 0


def test_bad_input():
  for horizon in (0.0, -0.1, 1.5):
    with pytest.raises(ValueError, match="horizon"):
      metaoptax.average_iterates(horizon)
  tx = metaoptax.average_iterates()
  state = tx.init({"w": jnp.ones(2)})
  with pytest.raises(ValueError, match="needs params"):
    tx.update({"w": jnp.ones(2)}, state)
  with pytest.raises(ValueError, match="holds 0 AverageState"):
    metaoptax.averaged_params(optax.adam(1e-3).init({"w": jnp.ones(2)}))
  two = optax.chain(metaoptax.average_iterates(), metaoptax.average_iterates())
  with pytest.raises(ValueError, match="holds 2 AverageState"):
    metaoptax.averaged_params(two.init({"w": jnp.ones(2)}))


@pytest.mark.parametrize("name", ["adamw", "lion", "sgd"])
def test_drop_in_average_is_the_chain(name):
  """``metaoptax.<drop-in>(average=c)`` is the drop-in chained with ``average_iterates(c)``:
  the same updates and average, bit for bit."""
  drop_in = getattr(metaoptax, name)
  ours = drop_in(average=0.2)
  chained = optax.chain(drop_in(average=None), metaoptax.average_iterates(0.2))
  params = {"w": jnp.linspace(-1.0, 1.0, 6).reshape(2, 3)}
  loss = lambda p: jnp.sum(jnp.sin(p["w"]) ** 2)
  states = [ours.init(params), chained.init(params)]
  ps = [params, params]
  for _ in range(5):
    for i, opt in enumerate((ours, chained)):
      updates, states[i] = opt.update(jax.grad(loss)(ps[i]), states[i], ps[i])
      ps[i] = optax.apply_updates(ps[i], updates)
  jax.tree.map(np.testing.assert_array_equal, ps[0], ps[1])
  jax.tree.map(np.testing.assert_array_equal, metaoptax.averaged_params(states[0]),
               metaoptax.averaged_params(states[1]))


@pytest.mark.parametrize("name", ["adamw", "lion", "sgd"])
def test_every_drop_in_averages_by_default(name):
  """The drop-ins agree: each keeps the average, so ``averaged_params`` reads it."""
  opt = getattr(metaoptax, name)()
  params = {"w": jnp.ones(3)}
  state = opt.init(params)
  updates, state = opt.update({"w": jnp.array([0.1, -0.2, 0.3])}, state, params)
  new = optax.apply_updates(params, updates)
  expected = _numpy_average([params["w"], new["w"]], 0.1)  # the default horizon
  np.testing.assert_allclose(metaoptax.averaged_params(state)["w"], expected, rtol=1e-6)


def _two_drop_ins():
  opt = optax.multi_transform({"adamw": metaoptax.adamw(), "sgd": metaoptax.sgd(momentum=0.9)},
                              {"w": "adamw", "b": "sgd", "v": "adamw"})
  params = {"w": jnp.ones((2, 3)), "b": jnp.zeros(3), "v": jnp.full((4,), 2.0)}
  loss = lambda p: jnp.sum(jnp.sin(p["w"]) ** 2) + jnp.sum((p["b"] - 1) ** 2) + jnp.sum(p["v"])
  state = opt.init(params)
  for _ in range(3):
    updates, state = opt.update(jax.grad(loss)(params), state, params)
    params = optax.apply_updates(params, updates)
  return opt, params, state


def test_multi_transform_of_drop_ins_is_inspected_per_partition():
  """``step_sizes`` gives ``{label: alpha}`` and ``averaged_params`` one params tree
  whose every leaf is its own partition's average."""
  _, params, state = _two_drop_ins()
  sizes = metaoptax.step_sizes(state)
  assert sorted(sizes) == ["adamw", "sgd"]
  for label in sizes:
    alone = state.inner_states[label]
    assert sizes[label].shape == ()  # one scalar step size per drop-in
    np.testing.assert_array_equal(sizes[label], metaoptax.step_sizes(alone))
  averaged = metaoptax.averaged_params(state)
  assert jax.tree.structure(averaged) == jax.tree.structure(params)
  for label, keys in (("adamw", ("w", "v")), ("sgd", ("b",))):
    (own,) = [s.average for s in tree_utils.instances_of(state.inner_states[label],
                                                         metaoptax.AverageState)]
    for key in keys:
      np.testing.assert_array_equal(averaged[key], own[key])
  assert not np.array_equal(averaged["w"], params["w"])  # an average, not the iterate


def test_multi_transform_with_a_partition_without_average_raises():
  opt = optax.multi_transform({"a": metaoptax.adamw(), "b": optax.adam(1e-3)},
                              {"w": "a", "b": "b"})
  state = opt.init({"w": jnp.ones(2), "b": jnp.ones(2)})
  with pytest.raises(ValueError, match="exactly one partition"):
    metaoptax.averaged_params(state)
  assert metaoptax.step_sizes(state).shape == ()  # the one drop-in's, as in a chain


def test_one_step_size_is_a_scalar():
  state = metaoptax.adamw().init({"w": jnp.ones(3)})
  assert metaoptax.step_sizes(state).shape == ()
  per_leaf = metaoptax.adamw(blocks="per_leaf").init({"w": jnp.ones(3), "b": jnp.ones(2)})
  assert metaoptax.step_sizes(per_leaf).shape == (2,)
