"""Learned optimizers: heads, jit/vmap, task families, meta-training, a checkpoint round trip."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import scipy.stats

from metaoptax import checkpoint, l2o

HEAD_SETS = [
    ("update",),
    ("update", "teleport"),
    ("learning_rate",),
    ("learning_rate", "teleport"),
    ("learning_rate", "momentum"),
    ("learning_rate", "teleport", "momentum"),
]


@pytest.mark.parametrize("heads", HEAD_SETS, ids=["+".join(h) for h in HEAD_SETS])
def test_every_head_combination_jits_and_vmaps(heads):
  family = l2o.tasks.ellipse()
  config = l2o.L2OConfig(heads=heads, group_dim=family.group_dim, hidden=8)
  net = config.init_network(jax.random.key(0))
  tasks, params, states = l2o.sample_problems(jax.random.key(1), family, config, 5)

  def one(task, x, s):
    g = jax.grad(family.loss, argnums=1)(task, x)
    return config.step(net, s, x, g, lambda th, p: family.act(task, th, p))

  new_params, new_states, out = jax.jit(jax.vmap(one))(tasks, params, states)
  assert new_params.shape == (5, 2)
  assert new_states.carry[0][0].shape == (5, 2, 8)  # (tasks, coordinates, hidden)
  for head in heads:
    assert head in out
  if "teleport" in heads:
    assert out["teleport"].shape == (5, 1)
  if "learning_rate" in heads:
    assert out["learning_rate"].shape == (5, 2) and bool(jnp.all(out["learning_rate"] > 0))
  if "momentum" in heads:
    assert bool(jnp.all((out["momentum"] > 0) & (out["momentum"] < 1)))
  assert bool(jnp.all(jnp.isfinite(new_params)))


@pytest.mark.parametrize("heads,message", [
    (("update", "learning_rate"), "exactly one"),
    (("momentum",), "exactly one"),
    (("update", "momentum"), "needs the 'learning_rate'"),
    (("learning_rate", "teleport"), "group_dim"),
    (("update", "steps"), "Unknown heads"),
])
def test_bad_configurations(heads, message):
  with pytest.raises(ValueError, match=message):
    l2o.L2OConfig(heads=heads).init_network(jax.random.key(0))


FAMILIES = {
    "ellipse": l2o.tasks.ellipse(),
    "ellipse_fixed": l2o.tasks.ellipse(varying=False),
    "ellipse_reference": l2o.tasks.ellipse(sampler="reference"),
    "ellipse_ill_conditioned": l2o.tasks.ellipse(sampler="ill_conditioned"),
    "ellipse_mixture": l2o.tasks.ellipse(sampler="mixture"),
    "rosenbrock": l2o.tasks.rosenbrock(),
    "rosenbrock_fixed": l2o.tasks.rosenbrock(varying=False),
    "mlp_regression": l2o.tasks.mlp_regression(width=6, examples=6),
}


@pytest.mark.parametrize("name", list(FAMILIES))
def test_task_families_group_action_keeps_the_loss(name):
  family = FAMILIES[name]

  def one(key):  # the loss before and after a random group action, and how far it moved x
    k1, k2, k3 = jax.random.split(key, 3)
    task = family.sample_task(k1)
    x = family.init_params(k2, task)
    theta = jax.random.normal(k3, (family.group_dim,))
    moved = family.act(task, theta, x)
    shift = jnp.max(jnp.abs(jax.flatten_util.ravel_pytree(moved)[0]
                            - jax.flatten_util.ravel_pytree(x)[0]))
    return family.loss(task, moved), family.loss(task, x), shift

  with jax.enable_x64(True):  # 20 draws in one compiled call
    after, before, shift = jax.jit(jax.vmap(one))(jax.random.split(jax.random.key(2), 20))
    assert after.dtype == jnp.float64
    np.testing.assert_allclose(after, before, rtol=1e-7)
    assert float(jnp.min(shift)) > 1e-6


def test_samplers_stay_away_from_singular_maps():
  tasks = jax.vmap(l2o.tasks.ellipse().sample_task)(jax.random.split(jax.random.key(0), 2000))
  assert float(jnp.min(jnp.abs(jnp.linalg.det(tasks["a"])))) >= 0.3 - 1e-6
  tasks = jax.vmap(l2o.tasks.rosenbrock().sample_task)(jax.random.split(jax.random.key(0), 2000))
  assert float(jnp.min(jnp.abs(tasks[:, 0]))) >= 0.5 and float(jnp.min(jnp.abs(tasks[:, 2]))) >= 0.5


def test_reference_sampler_is_the_plain_gaussian_draw():
  """``sampler="reference"``: A and b are the N(0, 1) draws of the task's key
  (no bound on det A: near-singular maps occur), x0 ~ N(0, I)."""
  family = l2o.tasks.ellipse(sampler="reference")
  keys = jax.random.split(jax.random.key(0), 4000)
  tasks = jax.vmap(family.sample_task)(keys)
  ka, kb = jax.vmap(jax.random.split)(keys).transpose(1, 0)
  np.testing.assert_array_equal(tasks["a"], jax.vmap(lambda k: jax.random.normal(k, (2, 2)))(ka))
  np.testing.assert_array_equal(tasks["b"], jax.vmap(lambda k: jax.random.normal(k, (2,)))(kb))
  for values in (tasks["a"].ravel(), tasks["b"].ravel(),
                 jax.vmap(family.init_params)(keys, tasks).ravel()):
    assert scipy.stats.kstest(np.asarray(values), "norm").pvalue > 1e-3
  det = np.abs(np.linalg.det(np.asarray(tasks["a"])))
  # P(|det A| < 0.05) for a Gaussian 2x2 matrix is about 5 %
  assert 0.03 < np.mean(det < 0.05) < 0.07 and det.min() > 0


@pytest.mark.parametrize("max_condition", [1e3, 10.0])
def test_ill_conditioned_sampler_condition_numbers(max_condition):
  """``sampler="ill_conditioned"``: cond(A) spans [1, max_condition], log-uniform
  (Kolmogorov-Smirnov), with the Gaussian draw's singular vectors and largest
  singular value."""
  family = l2o.tasks.ellipse(sampler="ill_conditioned", max_condition=max_condition)
  keys = jax.random.split(jax.random.key(1), 4000)
  a = np.asarray(jax.vmap(family.sample_task)(keys)["a"], np.float64)
  cond = np.linalg.cond(a)
  assert cond.min() >= 1 - 1e-4 and cond.max() <= max_condition * (1 + 1e-3)
  assert cond.max() > 0.95 * max_condition and cond.min() < 1.05
  assert scipy.stats.kstest(np.log(cond) / np.log(max_condition), "uniform").pvalue > 1e-3
  gaussian = np.asarray(jax.vmap(lambda k: jax.random.normal(
      jax.random.split(jax.random.split(k)[0])[0], (2, 2)))(keys), np.float64)
  np.testing.assert_allclose(np.linalg.norm(a, 2, axis=(1, 2)),
                             np.linalg.norm(gaussian, 2, axis=(1, 2)), rtol=1e-4)
  with pytest.raises(ValueError, match="sampler"):
    l2o.tasks.ellipse(sampler="uniform")


def test_mlp_classifier_draws_its_minibatches_from_the_given_data():
  """``mlp_classifier(data)``: every task is ``batch`` distinct examples of the
  given set, shapes follow its features and classes, and the loss is the mean
  cross-entropy of the MLP (NumPy oracle, float64)."""
  rng = np.random.default_rng(0)
  x, y = rng.normal(size=(40, 5)).astype(np.float32), rng.integers(0, 3, 40)
  y[0] = 2  # three classes
  family = l2o.tasks.mlp_classifier((x, y), hidden=4, batch=16)
  task = jax.jit(family.sample_task)(jax.random.key(0))
  rows = [int(np.flatnonzero((x == r).all(1))[0]) for r in np.asarray(task["x"])]
  assert len(set(rows)) == 16 and np.array_equal(np.asarray(task["y"]), y[rows])
  p = jax.jit(family.init_params)(jax.random.key(1), task)
  assert p["w1"].shape == (4, 5) and p["w2"].shape == (3, 4) and p["b2"].shape == (3,)
  q = {k: np.asarray(v, np.float64) + 0.1 for k, v in p.items()}  # non-zero biases
  logits = np.maximum(x[rows] @ q["w1"].T + q["b1"], 0) @ q["w2"].T + q["b2"]
  logits -= logits.max(1, keepdims=True)
  expected = np.mean(np.log(np.exp(logits).sum(1)) - logits[np.arange(16), y[rows]])
  loss = jax.jit(family.loss)(task, {k: jnp.asarray(v, jnp.float32) for k, v in q.items()})
  np.testing.assert_allclose(float(loss), expected, rtol=1e-5)
  with pytest.raises(ValueError, match="batch"):
    l2o.tasks.mlp_classifier((x, y), batch=41)
  with pytest.raises(ValueError, match="data"):
    l2o.tasks.mlp_classifier((x, y[:10]))


def test_variance_preserving_initialization():
  w = l2o.tasks.he_normal(jax.random.key(0), 400, 500)
  np.testing.assert_allclose(float(jnp.var(w)), 2.0 / 500, rtol=0.02)
  w = l2o.tasks.glorot_normal(jax.random.key(0), 400, 500)
  np.testing.assert_allclose(float(jnp.var(w)), 2.0 / 900, rtol=0.02)


@pytest.mark.system  # a training or sampling run (6-10 s): CI's second command
def test_meta_training_reduces_the_meta_loss_and_is_deterministic():
  family = l2o.tasks.ellipse()
  config = l2o.L2OConfig(heads=("learning_rate", "teleport", "momentum"), group_dim=1, hidden=8)
  training = l2o.TrainingConfig(tasks_per_step=16, horizon=20, unroll=10, log_loss=True)
  kwargs = dict(num_iterations=30, progress=None)
  result = l2o.train(jax.random.key(3), family, config, training, **kwargs)
  first, last = result.losses[:10].mean(), result.losses[-10:].mean()
  assert last < first - 0.5, (first, last)  # log-loss: more than 1.6x lower
  assert result.skipped_updates == 0
  again = l2o.train(jax.random.key(3), family, config, training, **kwargs)
  np.testing.assert_array_equal(result.losses, again.losses)


@pytest.mark.system  # three meta steps compiled: about 8 s
def test_truncation_weights_scale_each_truncations_meta_step():
  """Oracle: with plain SGD as the meta-optimizer, a run of two truncations weighted
  (0.5, 0) takes exactly the meta step of the first truncation alone at half the rate
  (the second, weight 0, none); unweighted, the same run moves further. rtol 1e-5."""
  family = l2o.tasks.ellipse()
  config = l2o.L2OConfig(heads=("learning_rate", "momentum"), hidden=4)
  state = l2o.init_training(jax.random.key(4), family, config, optimizer=optax.sgd(0.1))

  def net_after(horizon, learning_rate, truncation_weights=None):
    training = l2o.TrainingConfig(tasks_per_step=4, horizon=horizon, unroll=5, log_loss=True,
                                  truncation_weights=truncation_weights)
    step = l2o.build_training_step(family, config, training, optimizer=optax.sgd(learning_rate))
    return jax.tree.leaves(jax.jit(step)(state)[0].params)

  oracle = net_after(5, 0.05)
  weighted = net_after(10, 0.1, (0.5, 0.0))
  unweighted = net_after(10, 0.05)
  start = jax.tree.leaves(state.params)
  assert any(not np.allclose(a, b) for a, b in zip(oracle, start))  # the step is not zero
  for a, b in zip(weighted, oracle):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
  assert any(not np.allclose(a, b, rtol=1e-3) for a, b in zip(unweighted, oracle))
  with pytest.raises(ValueError, match="truncation_weights must have shape"):
    net_after(10, 0.1, (1.0, 1.0, 1.0))


def test_non_finite_meta_gradients_are_skipped_and_counted():
  base = l2o.tasks.ellipse()
  # a family whose loss is NaN on some tasks
  poisoned = base._replace(loss=lambda task, x: jnp.where(task["b"][0] > 1.0, jnp.nan, 1.0)
                           * base.loss(task, x))
  config = l2o.L2OConfig(heads=("learning_rate",), hidden=4)
  training = l2o.TrainingConfig(tasks_per_step=8, horizon=10, unroll=10)
  result = l2o.train(jax.random.key(0), poisoned, config, training, num_iterations=5, progress=None)
  assert result.skipped_updates > 0
  assert all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree.leaves(result.params))


def _diverging_ellipses(threshold=1.0, scale=1e4):
  """Ellipse tasks scaled by ``scale`` when ``b[0] > threshold``: a step size of
  0.05 multiplies their loss by about 1e6 a step, to inf within a few steps."""
  base = l2o.tasks.ellipse()
  return base._replace(name="diverging", loss=lambda task, x: jnp.where(
      task["b"][0] > threshold, scale, 1.0) * base.loss(task, x))


@pytest.mark.system  # meta-training steps, masked and not (10 s): CI's second command
def test_a_diverging_task_vetoes_the_batch_unless_masked():
  """Injected divergence: without masking every truncation from the divergence
  on is skipped; with ``mask_diverged_tasks`` none is, the diverged tasks are
  counted, and the network stays finite."""
  family = _diverging_ellipses()
  config = l2o.L2OConfig(heads=("learning_rate",), hidden=4)
  runs = {}
  for masking in (False, True):
    training = l2o.TrainingConfig(tasks_per_step=8, horizon=20, unroll=5, log_loss=True,
                                  mask_diverged_tasks=masking)
    runs[masking] = l2o.train(jax.random.key(1), family, config, training, num_iterations=3,
                              progress=None)
  assert runs[False].skipped_updates >= 3 and runs[False].diverged_tasks == 0
  assert runs[True].skipped_updates == 0 and runs[True].diverged_tasks >= 3
  assert bool(jnp.all(jnp.isfinite(runs[True].losses)))
  assert all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree.leaves(runs[True].params))


def _oracle_meta_loss(net, config, family, task, x, unroll):
  """Mean log-loss of one task over ``unroll`` learned steps (a Python loop)."""
  state, total = l2o.optimizer.init_state(config, x), 0.0
  for _ in range(unroll):
    g = jax.lax.stop_gradient(jax.grad(family.loss, argnums=1)(task, x))
    x, state, _ = config.step(net, state, x, g)
    total = total + jnp.log(family.loss(task, x) + 1e-12)
  return total / unroll


@pytest.mark.system  # meta-training steps of two batches (16 s): CI's second command
@pytest.mark.parametrize("threshold", [0.5, -jnp.inf])
def test_masked_meta_step_is_the_mean_over_the_finite_tasks(threshold):
  """One truncation with NaN-poisoned tasks: the meta step equals the default
  meta-optimizer's step on the mean meta-gradient of the finite tasks, each
  computed alone (float32, rtol 1e-5); with every task poisoned it is skipped."""
  base = l2o.tasks.ellipse()
  family = base._replace(loss=lambda task, x: jnp.where(task["b"][0] > threshold, jnp.nan, 1.0)
                         * base.loss(task, x))
  config = l2o.L2OConfig(heads=("learning_rate", "momentum"), hidden=4)
  training = l2o.TrainingConfig(tasks_per_step=8, horizon=5, unroll=5, log_loss=True,
                                mask_diverged_tasks=True)
  state = l2o.init_training(jax.random.key(2), family, config)
  new_state, info = jax.jit(l2o.build_training_step(family, config, training))(state)
  if threshold == -jnp.inf:  # every task poisoned: no oracle needed (nor compiled)
    assert int(info.diverged[0]) == 8 and int(new_state.skipped_updates) == 1
    for a, b in zip(jax.tree.leaves(new_state.params), jax.tree.leaves(state.params)):
      np.testing.assert_array_equal(a, b)
    return
  tasks, params, _ = l2o.sample_problems(jax.random.split(state.key)[1], family, config, 8)
  values, grads = [], []
  oracle = jax.jit(jax.value_and_grad(  # one compile, then each task alone
      lambda net, task, x: _oracle_meta_loss(net, config, family, task, x, 5)))
  for i in range(8):
    task, x = jax.tree.map(lambda v: v[i], tasks), params[i]
    value, grad = oracle(state.params, task, x)
    if np.isfinite(float(value)):
      values.append(value)
      grads.append(grad)
  assert int(info.diverged[0]) == 8 - len(values)
  assert 0 < len(values) < 8 and int(new_state.skipped_updates) == 0
  np.testing.assert_allclose(info.losses[0], np.mean(values), rtol=1e-5)
  mean_grad = jax.tree.map(lambda *g: sum(g) / len(g), *grads)
  meta_optimizer = l2o.default_optimizer()
  updates, _ = meta_optimizer.update(mean_grad, meta_optimizer.init(state.params), state.params)
  expected = optax.apply_updates(state.params, updates)
  for a, b in zip(jax.tree.leaves(new_state.params), jax.tree.leaves(expected)):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


@pytest.mark.system  # a training or sampling run (6-10 s): CI's second command
def test_trained_optimizer_as_optax_and_checkpointed(tmp_path):
  config = l2o.L2OConfig(heads=("learning_rate", "momentum"), hidden=8)
  net = config.init_network(jax.random.key(0))
  checkpoint.save(tmp_path / "l2o", net)
  net2 = checkpoint.restore(tmp_path / "l2o", like=config.init_network(jax.random.key(1)))
  for a, b in zip(jax.tree.leaves(net), jax.tree.leaves(net2)):
    np.testing.assert_array_equal(a, b)
  # any params pytree, inside optax.chain, under jit
  params = {"dense": {"w": jnp.ones((3, 2)), "b": jnp.zeros(2)}, "s": jnp.asarray(2.0)}
  loss = lambda p: jnp.sum(p["dense"]["w"] ** 2) + jnp.sum(p["dense"]["b"] - 1) ** 2 + p["s"] ** 2
  opt = optax.chain(optax.clip_by_global_norm(10.0), config.transformation(net2))
  state = opt.init(params)

  @jax.jit
  def train_step(p, s):
    u, s = opt.update(jax.grad(loss)(p), s, p)
    return optax.apply_updates(p, u), s

  start = float(loss(params))
  for _ in range(50):
    params, state = train_step(params, state)
  assert float(loss(params)) < start
  u, new_state = config.transformation(net2).update(
      jax.tree.map(lambda x: x * jnp.nan, params), state[1], params)
  assert int(new_state.skipped_steps) == 1
  assert all(float(jnp.abs(x).max()) == 0 for x in jax.tree.leaves(u))


@pytest.mark.system  # a meta-training run end to end
def test_progress_shows_the_median_task_and_the_worst():
  """One diverging task dominates the batch mean that ``result.losses`` records (the
  meta step's objective); the progress shows the median over the tasks, and the worst
  task apart."""
  config = l2o.L2OConfig(heads=("learning_rate",), hidden=4)
  family = l2o.tasks.ellipse()
  training = l2o.TrainingConfig(tasks_per_step=8, horizon=4, unroll=2)
  reports = []
  result = l2o.train(jax.random.key(0), family, config, training, num_iterations=2, log_every=1,
                     progress=reports.append)
  step = jax.jit(l2o.build_training_step(family, config, training))
  state = l2o.init_training(jax.random.key(0), family, config, training)  # as train places it
  for report in reports:
    state, info = step(state)
    per_task = np.asarray(info.task_meta_losses)
    assert per_task.shape == (2, 8)
    np.testing.assert_allclose(per_task.mean(axis=1), info.losses, rtol=1e-6)
    np.testing.assert_allclose(report.loss, np.mean(np.median(per_task, axis=1)), rtol=1e-6)
    np.testing.assert_allclose(report.metrics["worst_task"], per_task.max(), rtol=1e-6)
  np.testing.assert_array_equal(result.losses.size, 4)


def test_progress_summary_is_robust_to_a_diverging_task():
  from metaoptax.l2o.training import TrainingInfo, _summarize
  per_task = np.array([[[0.4, 0.5, 1e13, 0.3], [0.4, np.nan, 0.6, 0.2]]])  # (1, 2, 4)
  infos = TrainingInfo(np.nanmean(per_task, -1), np.ones((1, 2), bool), np.zeros((1, 4)),
                       np.zeros((1, 2), np.int32), per_task)
  loss, metrics = _summarize(infos)
  np.testing.assert_allclose(loss, (0.45 + 0.5) / 2)  # NaN counts as the worst
  assert metrics == {"worst_task": np.inf}


def test_a_task_family_needs_only_its_four_functions():
  """``TaskFamily(name, sample_task, init_params, loss)``: no group action needed, unless
  the configuration has a teleport head; evaluation passes ``act=None``."""
  family = l2o.TaskFamily("quadratic", lambda key: {"c": jax.random.normal(key, (3,))},
                          lambda key, task: jnp.zeros(3),
                          lambda task, x: jnp.sum((x - task["c"]) ** 2))
  assert family.act is None and family.group_dim == 0 and family.minibatch_loss is None
  config = l2o.L2OConfig(heads=("learning_rate",), hidden=4)
  state = l2o.init_training(jax.random.key(0), family, config)
  assert int(state.meta_step) == 0
  losses = l2o.evaluate(jax.random.key(1), family, config.transformation(state.params), 2, 3)
  assert losses.shape == (2, 4) and bool(jnp.all(losses[:, -1] < losses[:, 0]))
  with pytest.raises(ValueError, match="'teleport' head needs the family's group action"):
    l2o.init_training(jax.random.key(0), family,
                      l2o.L2OConfig(heads=("learning_rate", "teleport"), group_dim=1))
