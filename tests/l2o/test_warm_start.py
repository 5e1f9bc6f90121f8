"""Warm-starting a learned optimizer's network from a trained one with fewer heads."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from metaoptax import l2o

TELE = l2o.L2OConfig(heads=("learning_rate", "teleport"), group_dim=1, hidden=6)


@pytest.mark.system  # a training or sampling run (6-10 s): CI's second command
def test_momentum_variant_starts_as_the_optimizer_without_momentum():
  """Warm-started from LSTM(lr, tele) with momentum_init 1e-6, LSTM(lr, tele, momentum)
  takes the same steps, teleports included, to rtol 1e-5 (the oracle: the
  no-momentum optimizer, v_t = -alpha_t g_t), and shares every trained weight."""
  trained = jax.tree.map(lambda w: w + 0.3 * jax.random.normal(jax.random.key(5), w.shape),
                         TELE.init_network(jax.random.key(0)))
  config = TELE._replace(heads=TELE.heads + ("momentum",), momentum_init=1e-6)
  net = config.init_network(jax.random.key(1), warm_start=trained)
  for name in trained["params"]:
    for a, b in zip(jax.tree.leaves(trained["params"][name]), jax.tree.leaves(net["params"][name])):
      np.testing.assert_array_equal(a, b)
  family = l2o.tasks.ellipse()
  task = family.sample_task(jax.random.key(2))
  act = lambda theta, x: family.act(task, theta, x)
  def run(weights, cfg):
    x, state = family.init_params(jax.random.key(3), task), l2o.optimizer.init_state(cfg, jnp.zeros(2))
    for _ in range(5):
      x, state, _ = cfg.step(weights, state, x, jax.grad(family.loss, argnums=1)(task, x), act)
    return x

  xs = {label: jax.jit(run, static_argnums=1)(weights, cfg)
        for label, (weights, cfg) in {"plain": (trained, TELE), "warm": (net, config)}.items()}
  np.testing.assert_allclose(xs["warm"], xs["plain"], rtol=1e-5)
  fresh = config.init_network(jax.random.key(1))
  assert not np.allclose(fresh["params"]["lstm_0"]["hi"]["kernel"],
                         net["params"]["lstm_0"]["hi"]["kernel"])


@pytest.mark.parametrize("config, message", [
    (TELE._replace(hidden=7), "shape"),
    (TELE._replace(heads=("learning_rate",)), "lacks"),
])
def test_warm_start_mismatch_is_an_error(config, message):
  with pytest.raises(ValueError, match=message):
    config.init_network(jax.random.key(0), warm_start=TELE.init_network(jax.random.key(0)))
