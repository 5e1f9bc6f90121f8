"""The learned Adam-scaling optimizer: Adam at initialization, bounded steps, non-finite
gradients skipped, minibatch task families, meta-training over several families."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from metaoptax import l2o

CONFIG = l2o.ScaledAdamConfig(hidden=8)
#: The annealing variant: a wide range downward and the gradient-noise features.
ANNEALING = CONFIG._replace(learning_rate=3e-3, max_log_scale=1.5, min_log_scale=-6.9,
                            slow_b1=0.99)
#: The budget-aware variant (``metaoptax.l2o.budget``) with a 40-step budget.
BUDGET = ANNEALING._replace(learning_rate=1e-2, budget=40)
#: The budget-aware variant whose base step size decays as a cosine over the budget.
COSINE = BUDGET._replace(cosine_decay=True)


def _params(key):
  k1, k2 = jax.random.split(key)
  return {"w": jax.random.normal(k1, (5, 3)), "b": jnp.zeros(3),
          "deep": [jax.random.normal(k2, (4,))]}


def _grads(key, params):
  leaves, treedef = jax.tree.flatten(params)
  keys = jax.random.split(key, len(leaves))
  return jax.tree.unflatten(treedef, [jax.random.normal(k, x.shape) * 10.0 ** i
                                      for i, (k, x) in enumerate(zip(keys, leaves))])


@pytest.mark.parametrize("config", [CONFIG, ANNEALING, BUDGET, COSINE],
                         ids=["default", "annealing", "budget", "cosine"])
def test_is_adam_at_initialization(config):
  r"""Zero read-out: every update equals optax.adam's to float32 round-off (rtol 1e-6)
  over 44 steps of random gradients of mixed scales, with or without the noise features,
  and with the budget features read before and after a 40-step budget; with
  ``cosine_decay``, optax.adam on ``optax.cosine_decay_schedule`` over that budget (zero
  steps after it) to rtol 1e-5: near the budget's end :math:`1 + \cos` cancels, and one
  float32 ulp of the cosine (which XLA may compute in another fusion) is up to ~2e-6 of
  the step."""
  opt = config.transformation(config.init_network(jax.random.key(0)))
  rate = (optax.cosine_decay_schedule(config.learning_rate, int(config.budget))
          if config.cosine_decay else config.learning_rate)
  adam = optax.adam(rate, config.b1, config.b2, config.eps)
  params = _params(jax.random.key(1))
  state, adam_state = opt.init(params), adam.init(params)
  update, adam_update = jax.jit(opt.update), jax.jit(adam.update)
  for t in range(44):
    grads = _grads(jax.random.key(100 + t), params)
    u, state = update(grads, state, params)
    expected, adam_state = adam_update(grads, adam_state, params)
    for a, b in zip(jax.tree.leaves(u), jax.tree.leaves(expected)):
      np.testing.assert_allclose(a, b, rtol=1e-5 if config.cosine_decay else 1e-6,
                                 atol=1e-12)
    params = optax.apply_updates(params, u)
  np.testing.assert_array_equal(state.log_scale, 0.0)


def test_steps_are_bounded_multiples_of_adam():
  """With large random read-out weights, each tensor's update is Adam's direction times
  a factor in [e^-S-, e^S+] (the asymmetric bounds of the annealing variant), whatever
  the gradients."""
  config = ANNEALING
  net = config.init_network(jax.random.key(0))
  net = jax.tree.map(lambda w: 50.0 * jax.random.normal(jax.random.key(3), w.shape), net)
  opt = config.transformation(net)
  adam = optax.scale_by_adam(config.b1, config.b2, config.eps)
  params = _params(jax.random.key(1))
  state, adam_state = opt.init(params), adam.init(params)
  ratios = []
  update, adam_update = jax.jit(opt.update), jax.jit(adam.update)
  for t in range(10):
    grads = _grads(jax.random.key(200 + t), params)
    u, state = update(grads, state, params)
    direction, adam_state = adam_update(grads, adam_state, params)
    for a, d in zip(jax.tree.leaves(u), jax.tree.leaves(direction)):
      ratio = -a / (config.learning_rate * d)
      np.testing.assert_allclose(ratio, ratio.reshape(-1)[0], rtol=1e-4)  # one per tensor
      ratios.append(float(ratio.reshape(-1)[0]))
    params = optax.apply_updates(params, u)
  low, high = config.log_scale_bounds
  assert all(np.exp(low) * (1 - 1e-5) <= r <= np.exp(high) * (1 + 1e-5) for r in ratios)
  assert np.all((low <= state.log_scale) & (state.log_scale <= high))
  assert np.ptp(np.log(ratios)) > 0.5  # the factors do vary


def test_non_finite_gradient_is_skipped():
  opt = CONFIG.transformation(CONFIG.init_network(jax.random.key(0)))
  params = _params(jax.random.key(1))
  state = opt.init(params)
  u, state = opt.update(_grads(jax.random.key(2), params), state, params)
  bad = jax.tree.map(lambda g: g.at[0].set(jnp.nan), _grads(jax.random.key(3), params))
  u_bad, state_bad = opt.update(bad, state, params)
  assert all(np.all(np.asarray(x) == 0) for x in jax.tree.leaves(u_bad))
  assert int(state_bad.skipped_steps) == 1 and int(state_bad.count) == int(state.count)
  for a, b in zip(jax.tree.leaves(state_bad.mu), jax.tree.leaves(state.mu)):
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("config", [CONFIG, ANNEALING], ids=["default", "annealing"])
def test_features_are_scale_free(config):
  """Multiplying the loss (the gradients) by 1e4 leaves the features unchanged (the
  gradient-noise ratio of the annealing variant too)."""
  params = _params(jax.random.key(1))
  grads = _grads(jax.random.key(2), params)
  state = config.init_state(params)
  state = config.transformation(config.init_network(jax.random.key(0))).update(
      grads, state, params)[1]
  f1 = l2o.scaled_adam_features(config, state, params, grads)[0]
  scaled = config._replace(eps=config.eps * 1e4)
  times = lambda tree, c: None if tree is None else jax.tree.map(lambda x: x * c, tree)
  state2 = state._replace(mu=times(state.mu, 1e4), nu=times(state.nu, 1e8),
                          mu_slow=times(state.mu_slow, 1e4))
  f2 = l2o.scaled_adam_features(scaled, state2, params,
                                jax.tree.map(lambda g: g * 1e4, grads))[0]
  np.testing.assert_allclose(f1, f2, rtol=1e-4, atol=1e-5)


def _digits(n=300):
  from sklearn.datasets import load_digits
  data = load_digits()
  x = data.data[:n].astype(np.float32)
  return (x - x.mean(0)) / (x.std(0) + 1e-6), data.target[:n]


def test_minibatch_family_gradients_vary_with_the_step():
  family = l2o.tasks.mlp_minibatch(_digits(), (64, 8, 10), "tanh", examples=100, batch=16)
  task = family.sample_task(jax.random.key(0))
  params = family.init_params(jax.random.key(1), task)
  gradient = jax.jit(lambda step: l2o.tasks.gradient(family, task, params, step))
  g0, g1, g0_again = gradient(jnp.int32(0)), gradient(jnp.int32(1)), gradient(jnp.int32(0))
  assert not np.allclose(g0[0]["w"], g1[0]["w"])
  np.testing.assert_array_equal(g0[0]["w"], g0_again[0]["w"])
  assert float(family.loss(task, params)) == pytest.approx(np.log(10), rel=0.5)


def test_held_out_family_scores_examples_it_does_not_train_on():
  """``held_out``: the loss is the cross-entropy on examples disjoint from the training
  set (checked against a NumPy cross-entropy, rtol 1e-5), the gradients come from the
  training set only, the same set (and gradients) as the family without ``held_out``;
  ``metric="error"``: the fraction of those examples misclassified (NumPy's argmax)."""
  data = _digits()
  plain = l2o.tasks.mlp_minibatch(data, (64, 8, 10), "relu", examples=100, batch=16)
  family = l2o.tasks.mlp_minibatch(data, (64, 8, 10), "relu", examples=100, batch=16,
                                   held_out=50)
  task = family.sample_task(jax.random.key(0))
  rows = lambda a: {tuple(np.asarray(r)) for r in a}
  assert task["x_held_out"].shape == (50, 64) and not rows(task["x"]) & rows(task["x_held_out"])
  params = family.init_params(jax.random.key(1), task)
  h = np.maximum(np.asarray(task["x_held_out"]) @ np.asarray(params[0]["w"])
                 + np.asarray(params[0]["b"]), 0)
  logits = h @ np.asarray(params[1]["w"]) + np.asarray(params[1]["b"])
  logits = logits - logits.max(1, keepdims=True)
  log_p = logits - np.log(np.exp(logits).sum(1, keepdims=True))
  expected = -np.mean(log_p[np.arange(50), np.asarray(task["y_held_out"])])
  np.testing.assert_allclose(float(family.loss(task, params)), expected, rtol=1e-5)
  np.testing.assert_array_equal(plain.sample_task(jax.random.key(0))["x"], task["x"])
  for a, b in zip(jax.tree.leaves(l2o.tasks.gradient(family, task, params, jnp.int32(3))),
                  jax.tree.leaves(l2o.tasks.gradient(plain, plain.sample_task(jax.random.key(0)),
                                                     params, jnp.int32(3)))):
    np.testing.assert_array_equal(a, b)
  with pytest.raises(ValueError, match="held_out"):  # more than the data set holds
    l2o.tasks.mlp_minibatch(data, (64, 8, 10), examples=100, held_out=len(data[0]))
  with pytest.raises(ValueError, match="held_out"):
    l2o.tasks.mlp_minibatch(data, (64, 8, 10), examples=100, held_out=-1)
  error = l2o.tasks.mlp_minibatch(data, (64, 8, 10), "relu", examples=100, batch=16,
                                  held_out=50, metric="error")
  wrong = np.mean(np.argmax(logits, 1) != np.asarray(task["y_held_out"]))
  assert float(error.loss(task, params)) == pytest.approx(wrong, abs=1e-7)  # same task draw
  with pytest.raises(ValueError, match="metric"):
    l2o.tasks.mlp_minibatch(data, (64, 8, 10), examples=100, metric="accuracy")


@pytest.mark.system  # meta-trains on two families
def test_meta_training_on_two_families_beats_its_start():
  """A few task batches alternating between two architectures lower the held-out score
  below that of the starting weights (Adam 1e-4, far too slow); the score of several
  families is the geometric mean of their medians."""
  data = _digits()
  families = [l2o.tasks.mlp_minibatch(data, (64, 8, 10), "relu", examples=100, batch=32),
              l2o.tasks.mlp_minibatch(data, (64, 6, 6, 10), "tanh", examples=100, batch=32)]
  config = l2o.ScaledAdamConfig(hidden=4, learning_rate=1e-4)
  training = l2o.TrainingConfig(tasks_per_step=2, horizon=20, unroll=10, log_loss=True)
  start = l2o.init_training(jax.random.key(0), families, config,
                            optimizer=l2o.default_optimizer(5e-2))
  result = l2o.train(jax.random.key(0), families, config, training, num_iterations=6, progress=None,
                     init_state=start, optimizer=l2o.default_optimizer(5e-2))
  assert result.skipped_updates == 0
  validation = l2o.Validation(families, jax.random.key(9), num_tasks=4, steps=20)
  score = l2o.validation.validation_scorer(config, validation)
  assert score(result.params) < 0.9 * score(start.params)  # both committed: one compile
  one = [l2o.validation.validation_scorer(config, validation._replace(
      family=f, key=jax.random.fold_in(validation.key, i))) for i, f in enumerate(families)]
  net = result.params
  assert score(net) == pytest.approx(np.sqrt(one[0](net) * one[1](net)), rel=1e-6)


def test_cosine_decay_needs_a_budget_and_a_step_size():
  """``cosine_decay`` without a budget, or in the step-size-free direction, is refused."""
  with pytest.raises(ValueError, match="needs budget"):
    l2o.ScaledAdamConfig(cosine_decay=True).init_network(jax.random.key(0))
  with pytest.raises(ValueError, match="schedule of the step size"):
    l2o.scale_by_learned_adam(COSINE.init_network(jax.random.key(0)), COSINE)
