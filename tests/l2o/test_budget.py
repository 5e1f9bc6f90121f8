"""The budget-aware learned optimizer (``ScaledAdamConfig(budget=T)``, ``l2o.VariedBudget``):
Adam at initialization, the budget features, a schedule of the run's fraction, runs that end
at their budget."""

import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np
import optax

from metaoptax import l2o
from metaoptax.l2o.learned_adam import budget_features

from tests.l2o.test_scaled_adam import _grads, _params

CONFIG = l2o.ScaledAdamConfig(hidden=8, learning_rate=1e-2, max_log_scale=1.5,
                              min_log_scale=-6.9, slow_b1=0.99, budget=40)


def test_budget_features():
  """x = min(t / T, 1) and its powers 2, 4, 8, and log(T) / 10 (float64 oracle)."""
  for t, budget in [(1, 1000), (250, 1000), (1000, 1000), (1500, 1000), (2500, 5000)]:
    x = min(t / budget, 1.0)
    np.testing.assert_allclose(budget_features(jnp.float32(t), jnp.float32(budget)),
                               [x, x**2, x**4, x**8, np.log(budget) / 10], rtol=1e-6)


def test_read_out_of_the_run_fraction_is_a_schedule():
  """A read-out whose only weight v is on x = t/T gives every tensor the multiplier
  exp(S tanh(v t/T)) at step t (S: the bound on the sign's side), whatever the gradients:
  the schedule is what the budget features say it is."""
  net = CONFIG.init_network(jax.random.key(0))
  kernel = net["params"]["log_scale"]["kernel"]
  assert kernel.shape == (CONFIG.hidden + 5, 1)
  v = -0.8
  net["params"]["log_scale"]["kernel"] = kernel.at[CONFIG.hidden, 0].set(v)
  opt = CONFIG.transformation(net)
  params = _params(jax.random.key(1))
  state = opt.init(params)
  update = jax.jit(opt.update)
  low, _ = CONFIG.log_scale_bounds
  for t in range(1, 51):
    _, state = update(_grads(jax.random.key(t), params), state, params)
    expected = -low * np.tanh(v * min(t / CONFIG.budget, 1.0))
    np.testing.assert_allclose(state.log_scale, expected, rtol=1e-5)


def test_varied_budget_runs_end_at_their_budget():
  """Meta-training's tasks draw budgets in [low, high]; a run holds its params and state
  from its budget on (the loss after it is the final loss)."""
  varied = l2o.VariedBudget(CONFIG, 5, 20)
  family = l2o.tasks.mlp_regression(width=4, examples=8)
  tasks, params, states = l2o.sample_problems(jax.random.key(0), family, varied, 64)
  assert np.all((states.budget >= 5) & (states.budget <= 20)) and np.ptp(states.budget) > 5
  net = varied.init_network(jax.random.key(1))
  task = jax.tree.map(lambda x: x[0], tasks)
  x, state = jax.tree.map(lambda x: x[0], (params, states))
  state = state._replace(budget=jnp.float32(7))
  step = jax.jit(lambda x, state: varied.step(
      net, state, x, l2o.tasks.gradient(family, task, x, state.count))[:2])
  history = []
  for _ in range(12):
    x, state = step(x, state)
    history.append(jax.flatten_util.ravel_pytree(x)[0])
  assert int(state.count) == 7
  assert not np.allclose(history[5], history[6])
  for later in history[7:]:
    np.testing.assert_array_equal(later, history[6])
