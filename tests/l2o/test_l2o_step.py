"""The learned optimizer's step against a hand-written NumPy oracle (float64).

The oracle re-implements, independently of Flax and of ``metaoptax.l2o``, what
the L2O-teleportation paper's Algorithm 3 and Andrychowicz et al. (2016, App. A)
specify: the gradient preprocessing, the coordinate-wise LSTM (gates
i, f, g, o; ``c' = f c + i g``, ``h' = o tanh(c')``), the heads
(``update_scale * Dense(h)``, ``lr_scale * exp(Dense(h))``,
``sigmoid(Dense(h))``, ``teleport_scale * tanh(Dense(pooled h))``) and the
steps ``x + u``, ``x - eta g``, ``v' = mu v - eta g, x + v'``, with the group
action applied after the step at every ``teleport_every``-th step starting
with the first. Random (not initial) network weights make every head depend on
the gradient. Tolerance: relative 1e-10 over 7 steps in float64.
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from metaoptax import l2o

pytestmark = pytest.mark.usefixtures("float64")

P = 10.0  # preprocessing constant
RTOL = 1e-10
STEPS = 7


def np_preprocess(g):
  """(log|g| / p, sign g) if |g| >= e^-p, else (-1, e^p g)."""
  out = np.empty((g.size, 2))
  for i, gi in enumerate(g):
    out[i] = ((np.log(abs(gi)) / P, np.sign(gi)) if abs(gi) >= np.exp(-P)
              else (-1.0, np.exp(P) * gi))
  return out


def np_sigmoid(z):
  return 1.0 / (1.0 + np.exp(-z))


def np_lstm_cell(cell, c, h, x):
  def gate(k):
    return x @ cell["i" + k]["kernel"] + h @ cell["h" + k]["kernel"] + cell["h" + k]["bias"]
  i, f, g, o = np_sigmoid(gate("i")), np_sigmoid(gate("f")), np.tanh(gate("g")), np_sigmoid(gate("o"))
  c = f * c + i * g
  return c, o * np.tanh(c)


def np_dense(layer, x):
  return x @ layer["kernel"] + layer["bias"]


def np_network(net, config, carry, features):
  """(new carry, heads) of the coordinate-wise LSTM; carry is [(c, h)] per layer."""
  net = net["params"]
  x, new_carry = features, []
  for layer, (c, h) in enumerate(carry):
    c, x = np_lstm_cell(net[f"lstm_{layer}"], c, h, x)
    new_carry.append((c, x))
  out = {}
  if "update" in config.heads:
    out["update"] = config.update_scale * np_dense(net["update"], x)[:, 0]
  if "learning_rate" in config.heads:
    out["learning_rate"] = config.lr_scale * np.exp(np_dense(net["learning_rate"], x)[:, 0])
  if "momentum" in config.heads:
    out["momentum"] = np_sigmoid(np_dense(net["momentum"], x)[:, 0])
  if "teleport" in config.heads:
    pooled = x.reshape(-1) if config.teleport_pooling == "concat" else x.mean(0)
    out["teleport"] = config.teleport_scale * np.tanh(np_dense(net["teleport"], pooled))
  return new_carry, out


def np_run(net, config, x, grad_fn, act):
  """The oracle: STEPS learned steps from flat x; returns the iterates and the heads."""
  carry = [(np.zeros((x.size, config.hidden)),) * 2 for _ in range(config.layers)]
  v = np.zeros(x.size)
  xs, outs = [x], []
  for count in range(STEPS):
    g = grad_fn(x)
    carry, out = np_network(net, config, carry, np_preprocess(g))
    if "update" in config.heads:
      delta = out["update"]
    elif "momentum" in config.heads:
      v = out["momentum"] * v - out["learning_rate"] * g
      delta = v
    else:
      delta = -out["learning_rate"] * g
    x = x + delta
    if "teleport" in config.heads and count % config.teleport_every == 0:
      x = act(out["teleport"], x)
    xs.append(x)
    outs.append(out)
  return xs, outs


# A quadratic on two leaves, flattened by ravel_pytree in key order ("b", then "w").
CURVATURE = np.array([1.0, 0.5, 2.0, 0.8, 1.5])
TARGET = np.array([0.3, -1.2, 0.7, 2.0, -0.4])
X0 = {"b": np.array([0.3, 0.9]), "w": np.array([-0.5, 1.1, 0.2])}  # b[0] at its optimum: g = 0


def flat(tree):
  return np.concatenate([np.asarray(tree["b"]), np.asarray(tree["w"])])


def np_grad(x):
  return CURVATURE * (x - TARGET)


def loss(p):
  return 0.5 * jnp.sum(jnp.asarray(CURVATURE) * (jnp.concatenate([p["b"], p["w"]])
                                                 - jnp.asarray(TARGET)) ** 2)


def rotate_first_two(theta, x):
  """A group action for the teleport schedule: rotate coordinates 0 and 1 by theta[0]."""
  c, s = np.cos(theta[0]), np.sin(theta[0])
  return np.concatenate([[c * x[0] - s * x[1], s * x[0] + c * x[1]], x[2:]])


def jax_rotate_first_two(theta, p):
  c, s = jnp.cos(theta[0]), jnp.sin(theta[0])
  b = jnp.stack([c * p["b"][0] - s * p["b"][1], s * p["b"][0] + c * p["b"][1]])
  return {"b": b, "w": p["w"]}


CONFIGS = {
    "update": l2o.L2OConfig(heads=("update",), hidden=4),
    "learning_rate": l2o.L2OConfig(heads=("learning_rate",), hidden=4),
    "momentum": l2o.L2OConfig(heads=("learning_rate", "momentum"), hidden=4, momentum_init=0.7),
    "teleport_every_3": l2o.L2OConfig(
        heads=("learning_rate", "teleport", "momentum"), hidden=4, group_dim=1,
        teleport_every=3),
    "update_teleport_concat": l2o.L2OConfig(
        heads=("update", "teleport"), hidden=3, layers=1, group_dim=1, teleport_every=2,
        teleport_pooling="concat", num_coordinates=5, teleport_scale=0.8),
}


def random_network(config, seed=0):
  """Initial weights plus N(0, 0.5^2) noise, in float64: every head reads the gradient."""
  net = config.init_network(jax.random.key(seed))
  leaves, treedef = jax.tree.flatten(net)
  keys = jax.random.split(jax.random.key(seed + 1), len(leaves))
  return jax.tree.unflatten(treedef, [
      jnp.asarray(x, jnp.float64) + 0.5 * jax.random.normal(k, x.shape, jnp.float64)
      for x, k in zip(leaves, keys)])


@pytest.mark.parametrize("name", list(CONFIGS))
def test_step_matches_the_numpy_oracle(name):
  config = CONFIGS[name]
  net = random_network(config)
  net_np = jax.tree.map(np.asarray, net)
  teleport = "teleport" in config.heads
  expected, expected_outs = np_run(net_np, config, flat(X0), np_grad, rotate_first_two)
  act = jax_rotate_first_two if teleport else None

  params = jax.tree.map(jnp.asarray, X0)
  state = l2o.optimizer.init_state(config, params)
  step = jax.jit(lambda s, p, g: config.step(net, s, p, g, act))
  for t in range(STEPS):
    params, state, out = step(state, params, jax.grad(loss)(params))
    for head, value in expected_outs[t].items():
      np.testing.assert_allclose(out[head], value, rtol=RTOL, atol=1e-14, err_msg=head)
    np.testing.assert_allclose(flat(params), expected[t + 1], rtol=RTOL, atol=1e-14)
  assert int(state.count) == STEPS

  # The same run through the optax interface (updates = new params - params).
  opt = config.transformation(net)
  params = jax.tree.map(jnp.asarray, X0)
  opt_state = opt.init(params)
  update = jax.jit(lambda g, s, p: opt.update(g, s, p, act=act))
  for t in range(STEPS):
    updates, opt_state = update(jax.grad(loss)(params), opt_state, params)
    params = optax.apply_updates(params, updates)
    np.testing.assert_allclose(flat(params), expected[t + 1], rtol=RTOL, atol=1e-13)
  assert int(opt_state.skipped_steps) == 0


def test_the_oracle_exercises_what_it_checks():
  """The oracle's runs are not degenerate: both preprocessing branches occur, the
  learning rates and momenta vary across coordinates, and teleporting moves the
  iterate (so a wrong schedule or a skipped action would fail the test above)."""
  config = CONFIGS["teleport_every_3"]
  net = jax.tree.map(np.asarray, random_network(config))
  g0 = np_grad(flat(X0))
  assert g0[0] == 0 and np.all(np.abs(g0[1:]) > 1e-2)  # small and large branches
  xs, outs = np_run(net, config, flat(X0), np_grad, rotate_first_two)
  for out in outs:  # per-coordinate heads that differ across coordinates (rtol 1e-10 above)
    assert np.ptp(out["learning_rate"]) > 1e-3 * out["learning_rate"].mean()
    assert np.ptp(out["momentum"]) > 1e-3
    assert abs(out["teleport"][0]) > 1e-2
  no_teleport = np_run(net, config, flat(X0), np_grad, lambda theta, x: x)[0]
  assert np.abs(xs[1] - no_teleport[1]).max() > 1e-2  # the first step teleports
  every_step = np_run(net, config._replace(teleport_every=1), flat(X0), np_grad,
                      rotate_first_two)[0]
  np.testing.assert_array_equal(xs[1], every_step[1])
  assert np.abs(xs[2] - every_step[2]).max() > 1e-2  # the second one does not


def test_preprocessing_by_hand():
  """Andrychowicz et al. (2016), App. A, p = 10: e^-10 = 4.54e-5 separates the branches."""
  g = np.array([2.5, -0.3, 1e-4, 4e-5, -3e-5, 0.0])
  expected = np.array([
      [np.log(2.5) / 10, 1.0],
      [np.log(0.3) / 10, -1.0],
      [np.log(1e-4) / 10, 1.0],
      [-1.0, np.exp(10.0) * 4e-5],
      [-1.0, -np.exp(10.0) * 3e-5],
      [-1.0, 0.0],
  ])
  np.testing.assert_allclose(l2o.preprocess(jnp.asarray(g)), expected, rtol=1e-14)
  np.testing.assert_allclose(np_preprocess(g), expected, rtol=1e-14)
  np.testing.assert_allclose(expected[2, 0], -0.921034037, rtol=1e-9)  # log(1e-4) / 10
  np.testing.assert_allclose(expected[3, 1], 0.8810586318, rtol=1e-9)  # e^10 * 4e-5 = 22026.4658 * 4e-5
