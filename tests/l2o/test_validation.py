"""Meta-training schedules and the choice of the final weights on held-out tasks."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from metaoptax import l2o


def _warmup_cosine(k, peak, warmup, total, final):
  """The warm-up + cosine schedule written out (the oracle)."""
  if k < warmup:
    return peak * k / warmup
  fraction = min(k - warmup, total - warmup) / (total - warmup)
  return final + 0.5 * (peak - final) * (1 + np.cos(np.pi * fraction))


def test_default_meta_optimizer_schedule_and_default():
  """With a constant meta-gradient g, Adam's k-th step is -eta_k g / (|g| + eps) exactly
  (bias-corrected moments equal g and g^2), so the steps read the schedule off; the
  no-argument default is Adam 1e-3 after clipping at norm 1, bit for bit."""
  g = {"w": jnp.array([0.3, -2.0, 0.01])}
  opt = l2o.default_optimizer(1e-3, decay_updates=40, warmup_updates=10,
                              final_learning_rate=1e-5, max_norm=100.0)
  state, update = opt.init(g), jax.jit(opt.update)
  for k in range(45):
    updates, state = update(g, state, g)
    expected = -_warmup_cosine(k, 1e-3, 10, 40, 1e-5) * np.sign(g["w"])
    np.testing.assert_allclose(updates["w"], expected, rtol=2e-5, atol=1e-9)
  big = {"w": jnp.array([3.0, -4.0, 12.0])}  # norm 13: clipped to norm 1
  default, reference = l2o.default_optimizer(), optax.chain(
      optax.clip_by_global_norm(1.0), optax.adam(1e-3))
  for grads in (g, big):
    a, _ = default.update(grads, default.init(grads), grads)
    b, _ = reference.update(grads, reference.init(grads), grads)
    np.testing.assert_array_equal(a["w"], b["w"])


@pytest.mark.parametrize("kwargs, message", [
    ({"warmup_updates": 5}, "needs decay_updates"),
    ({"decay_updates": 10, "warmup_updates": 10}, "warmup_updates"),
    ({"decay_updates": 10, "final_learning_rate": 1.0}, "final_learning_rate"),
])
def test_bad_schedules(kwargs, message):
  with pytest.raises(ValueError, match=message):
    l2o.default_optimizer(**kwargs)


def _setup():
  family = l2o.tasks.ellipse()
  config = l2o.L2OConfig(heads=("learning_rate",), hidden=4, lr_scale=0.2)
  training = l2o.TrainingConfig(tasks_per_step=4, horizon=4, unroll=2, log_loss=True)
  meta_optimizer = l2o.default_optimizer(3e-2)  # large: the scores move a lot
  validation = l2o.Validation(family, jax.random.key(9), num_tasks=16, steps=5, at=3, every=2)
  return family, config, training, meta_optimizer, validation


@pytest.mark.system  # a training or sampling run (6-10 s): CI's second command
def test_validation_scores_and_selects_the_best_weights():
  """The scores are the median held-out losses of the weights after 0, 2, 4, 6 task
  batches (each recomputed by a run stopped there and ``evaluate``); the returned
  weights are those of the best score; the training itself is unchanged."""
  family, config, training, meta_optimizer, validation = _setup()
  start = l2o.init_training(jax.random.key(4), family, config, optimizer=meta_optimizer)
  kwargs = dict(optimizer=meta_optimizer, init_state=start, progress=None)
  result = l2o.train(jax.random.key(0), family, config, training, **kwargs, num_iterations=6,
                     validation=validation)
  plain = l2o.train(jax.random.key(0), family, config, training, **kwargs, num_iterations=6)
  same = lambda a, b: [np.testing.assert_array_equal(x, y) for x, y in
                       zip(jax.tree.leaves(a), jax.tree.leaves(b))]
  same(result.state._replace(key=None), plain.state._replace(key=None))
  np.testing.assert_array_equal(result.validation_scores[:, 0], [0, 2, 4, 6])
  evaluate = jax.jit(lambda net: l2o.evaluate(validation.key, family, config.transformation(net),
                                              16, 5)[:, 3])
  weights = {k: start.params if k == 0 else
             l2o.train(jax.random.key(0), family, config, training, **kwargs,
                       num_iterations=k).params
             for k in (0, 2, 4)}
  weights[6] = plain.params
  for k, net in weights.items():
    losses = np.asarray(evaluate(net))
    expected = np.median(np.where(np.isfinite(losses), losses, np.inf))
    np.testing.assert_allclose(result.validation_scores[k // 2, 1], expected, rtol=1e-6)
  scores = result.validation_scores[:, 1]
  assert len(set(scores.tolist())) > 1  # the choice is not vacuous
  best = int(result.validation_scores[np.argmin(scores), 0])
  assert result.best_iteration == best
  same(result.params, weights[best])
  last = l2o.train(jax.random.key(0), family, config, training, **kwargs, num_iterations=6,
                   validation=validation._replace(select_best=False))
  same(last.params, plain.params)


@pytest.mark.parametrize("change, message", [({"at": 6}, "at"), ({"every": 0}, "every")])
def test_bad_validation(change, message):
  family, config, training, _, validation = _setup()
  with pytest.raises(ValueError, match=message):
    l2o.train(jax.random.key(0), family, config, training, num_iterations=1, progress=None,
              validation=validation._replace(**change))
