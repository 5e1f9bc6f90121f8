"""Checkpoints (orbax): exact round trips of any state, clear errors, bit-for-bit resume."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import metaoptax
from metaoptax import checkpoint
from tests.l2hmc.paper import paper_config, paper_training


def _assert_identical(a, b):
  """Same tree, same leaf types and dtypes, bitwise-equal values."""
  assert jax.tree.structure(a) == jax.tree.structure(b)
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    assert type(x) is type(y), (type(x), type(y))
    if isinstance(x, jax.Array) and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
      assert x.dtype == y.dtype
      x, y = jax.random.key_data(x), jax.random.key_data(y)
    x, y = np.asarray(x), np.asarray(y)
    assert x.dtype == y.dtype and x.shape == y.shape
    np.testing.assert_array_equal(x.reshape(-1).view(np.uint8), y.reshape(-1).view(np.uint8))  # bits


def test_round_trip_of_a_metaoptimize_state_keys_scalars_and_empty_leaves(tmp_path):
  optimizer = metaoptax.presets.adamw_adam(1e-3)
  params = {"w": jnp.linspace(-1.0, 1.0, 6).reshape(2, 3), "b": jnp.ones(3, jnp.bfloat16),
            "empty": jnp.zeros((0, 4))}
  state = optimizer.init(params)
  grads = jax.tree.map(lambda p: jnp.full_like(p, 0.3), params)
  for _ in range(3):
    updates, state = optimizer.update(grads, state, params, value=jnp.float32(1.0))
    params = optax.apply_updates(params, updates)
  tree = {"state": state, "params": params, "key": jax.random.split(jax.random.key(7), 3),
          "count": 12, "scale": 0.5, "flag": True, "np": np.float32(np.nan),
          "table": np.arange(4, dtype=np.int16), "nothing": None}
  checkpoint.save(tmp_path / "5", tree)
  _assert_identical(checkpoint.restore(tmp_path / "5", like=tree), tree)
  fresh = jax.tree.map(lambda x: x, tree)  # restoring into any like of the same layout
  _assert_identical(checkpoint.restore(tmp_path / "5", like=fresh), tree)
  abstract = {"w": jax.ShapeDtypeStruct((2, 3), jnp.float32)}
  checkpoint.save(tmp_path / "7", {"w": params["w"]})
  _assert_identical(checkpoint.restore(tmp_path / "7", like=abstract), {"w": params["w"]})
  assert checkpoint.latest_step(tmp_path) == 7
  assert checkpoint.latest_step(tmp_path / "absent") is None


def test_empty_tree_and_overwrite(tmp_path):
  checkpoint.save(tmp_path / "c", ())
  assert checkpoint.restore(tmp_path / "c", ()) == ()
  with pytest.raises(ValueError, match=r"already exists.*overwrite=True"):
    checkpoint.save(tmp_path / "c", {"a": jnp.ones(2)})
  checkpoint.save(tmp_path / "c", {"a": jnp.ones(2)}, overwrite=True)
  _assert_identical(checkpoint.restore(tmp_path / "c", {"a": jnp.zeros(2)}), {"a": jnp.ones(2)})


def test_mismatched_like_is_an_error_naming_the_first_differing_leaf(tmp_path):
  tree = {"a": jnp.ones(3), "b": jnp.zeros((), jnp.int32), "d": jnp.ones(2)}
  checkpoint.save(tmp_path / "c", tree)
  with pytest.raises(ValueError, match=r"leaf \['a'\] has shape \(3,\) in the checkpoint, "
                                       r"shape \(4,\) in `like`"):
    checkpoint.restore(tmp_path / "c", {**tree, "a": jnp.ones(4)})
  with pytest.raises(ValueError, match=r"leaf \['a'\] has dtype float32 in the checkpoint, "
                                       r"dtype float16 in `like`"):
    checkpoint.restore(tmp_path / "c", {**tree, "a": jnp.ones(3, jnp.float16)})
  with pytest.raises(ValueError, match=r"the checkpoint has a leaf \['b'\] that `like` lacks "
                                       r"\(the checkpoint has 3 leaves, `like` has 2\)"):
    checkpoint.restore(tmp_path / "c", {"a": tree["a"], "d": tree["d"]})
  with pytest.raises(ValueError, match=r"`like` has a leaf \['c'\] that the checkpoint lacks"):
    checkpoint.restore(tmp_path / "c", {**tree, "c": tree["b"]})
  with pytest.raises(FileNotFoundError):
    checkpoint.restore(tmp_path / "missing", tree)
  with pytest.raises(TypeError, match="str"):
    checkpoint.save(tmp_path / "d", {"name": "not an array"})


def test_restoring_an_optimizer_state_into_another_optimizers_names_the_leaf(tmp_path):
  """The user's mistake: a state saved from one optimizer restored into another's."""
  params = {"w": jnp.ones((2, 3)), "b": jnp.zeros(3)}
  saved = metaoptax.adamw().init(params)
  checkpoint.save(tmp_path / "c", saved)
  other = metaoptax.sgd().init(params)
  missing = [jax.tree_util.keystr(path) for path, _ in
             jax.tree_util.tree_flatten_with_path(saved)[0]]
  with pytest.raises(ValueError, match="that `like` lacks|that the checkpoint lacks") as error:
    checkpoint.restore(tmp_path / "c", like=other)
  assert any(path in str(error.value) for path in missing), str(error.value)
  assert "leaves, `like` has" in str(error.value)


def _poisoned_ellipses(threshold=1.2):
  """Ellipse tasks whose loss is NaN when ``b[0] > threshold``: an injected NaN."""
  base = metaoptax.l2o.tasks.ellipse()
  poisoned = lambda task: task["b"][0] > threshold
  family = base._replace(
      name="poisoned", loss=lambda task, x: jnp.where(poisoned(task), jnp.nan, 1.0)
      * base.loss(task, x))
  return family, poisoned


@pytest.mark.system  # a meta-training run, saved and resumed
def test_l2o_meta_training_resumes_bit_for_bit_and_counts_skipped_updates(tmp_path):
  l2o = metaoptax.l2o
  family, poisoned = _poisoned_ellipses()
  config = l2o.L2OConfig(heads=("learning_rate", "momentum"), hidden=4)
  meta_optimizer = l2o.default_optimizer()
  training = l2o.TrainingConfig(tasks_per_step=8, horizon=4, unroll=2, log_loss=True)
  start = l2o.init_training(jax.random.key(5), family, config, optimizer=meta_optimizer)
  kwargs = dict(num_iterations=4, optimizer=meta_optimizer, progress=None)
  full = l2o.train(jax.random.key(0), family, config, training, **kwargs, init_state=start,
                   checkpoint_dir=tmp_path / "full", checkpoint_every=2)
  assert checkpoint.latest_step(tmp_path / "full") == 4
  # oracle for the skips: batch k is sampled with the second half of the k-th split of the key
  key = l2o.init_training(jax.random.key(5), family, config).key
  expected = 0
  for _ in range(4):
    key, sub = jax.random.split(key)
    tasks, _, _ = l2o.sample_problems(sub, family, config, 8)
    expected += 2 * bool(jnp.any(jax.vmap(poisoned)(tasks)))  # both truncations are NaN
  assert 0 < expected < 8, "pick a seed whose batches are partly poisoned"
  assert full.skipped_updates == int(full.state.skipped_updates) == expected
  assert int(np.sum(~np.isfinite(full.losses))) == expected
  assert bool(_all_finite(full.state.params))

  # an interrupted run: only the mid-run checkpoint survives; the same call finishes the run
  (tmp_path / "resumed").mkdir()
  (tmp_path / "full" / "2").rename(tmp_path / "resumed" / "2")
  resumed = l2o.train(jax.random.key(0), family, config, training, **kwargs, init_state=start,
                      checkpoint_dir=tmp_path / "resumed")
  _assert_identical(resumed.state, full.state)
  np.testing.assert_array_equal(resumed.losses, full.losses[4:])
  _assert_identical(checkpoint.restore(tmp_path / "resumed" / "4", like=full.state),
                    full.state)
  # continuing in memory (init_state) and rerunning with the same seed: identical too
  half = l2o.train(jax.random.key(0), family, config, training, **{**kwargs, "num_iterations": 2},
                   init_state=start)
  _assert_identical(l2o.train(jax.random.key(0), family, config, training, **kwargs,
                              init_state=half.state).state, full.state)
  _assert_identical(l2o.train(jax.random.key(0), family, config, training, **kwargs,
                              init_state=start).state,
                    full.state)


def _all_finite(tree):
  return jax.tree.reduce(lambda a, b: a & b, jax.tree.map(lambda x: jnp.all(jnp.isfinite(x)),
                                                          tree))


def _walled_gaussian(threshold):
  """N(0, 0.25 I) whose log density is NaN where ``x[0] > threshold``: a NaN region."""
  base = metaoptax.l2hmc.targets.gaussian(0.25 * jnp.eye(2))
  return base._replace(name="walled", logdensity_fn=lambda x: jnp.where(
      x[0] > threshold, jnp.nan, base.logdensity_fn(x)))


@pytest.mark.system  # an L2HMC training run, saved and resumed
def test_l2hmc_training_resumes_bit_for_bit_and_counts_skipped_updates(tmp_path):
  """A fresh N(0, I) draw of the loss's second population inside the NaN region
  makes the gradient NaN (its acceptance is 0, the derivative of exp at NaN is
  NaN): that iteration's update is skipped. With step sizes of 0.01 nothing
  moves across the wall, so the skips are exactly the iterations with such a
  draw, counted from the key stream alone."""
  l2hmc = metaoptax.l2hmc
  threshold, margin, iterations, chains = 1.5, 0.1, 6, 8
  target = _walled_gaussian(threshold)
  config = paper_config(dim=2, num_steps=2, hidden=4, init_step_size=0.01)
  training = paper_training(num_chains=chains)
  kwargs = dict(num_iterations=iterations, progress=None, log_every=4)
  start = l2hmc.init_training(jax.random.key(16), target, config, training)
  assert float(start.chains.position[:, 0].max()) < threshold - margin, "pick another seed"
  expected = 0
  for i in range(iterations):  # iteration i: fold_in(key, i) -> (loss key, accept key);
    k_loss, _ = jax.random.split(jax.random.fold_in(start.key, i))  # the loss key's third
    fresh = jax.random.normal(jax.random.split(k_loss, 3)[2], (chains, 2))[:, 0]  # split
    assert not bool(jnp.any((fresh > threshold - margin) & (fresh <= threshold)))
    expected += bool(jnp.any(fresh > threshold))
  assert expected == 3, "iterations 1, 2 and 4 have a draw in the NaN region"

  full = l2hmc.train(jax.random.key(0), target, config, training, init_state=start,
                     checkpoint_dir=tmp_path / "full", checkpoint_every=3, **kwargs)
  assert full.skipped_updates == int(full.state.skipped_updates) == expected
  assert bool(_all_finite((full.state.params, full.state.chains)))
  assert float(full.state.chains.position[:, 0].max()) < threshold - margin
  assert checkpoint.latest_step(tmp_path / "full") == iterations

  # an interrupted run: only the mid-run checkpoint survives; the same call finishes the run
  (tmp_path / "resumed").mkdir()
  (tmp_path / "full" / "3").rename(tmp_path / "resumed" / "3")
  resumed = l2hmc.train(jax.random.key(0), target, config, training, init_state=start,
                        checkpoint_dir=tmp_path / "resumed", **kwargs)
  _assert_identical(resumed.state, full.state)
  np.testing.assert_array_equal(resumed.losses, full.losses[3:])
  np.testing.assert_array_equal(resumed.acceptance, full.acceptance[3:])
  # continuing in memory (init_state) and rerunning with the same seed: identical too
  half = l2hmc.train(jax.random.key(0), target, config, training, init_state=start,
                     **{**kwargs, "num_iterations": 3})
  _assert_identical(l2hmc.train(jax.random.key(0), target, config, training, init_state=half.state,
                                **kwargs).state, full.state)
  _assert_identical(l2hmc.train(jax.random.key(0), target, config, training, init_state=start, **kwargs).state,
                    full.state)
  with pytest.raises(ValueError, match="chains of shape"):
    l2hmc.train(jax.random.key(0), target, config, paper_training(num_chains=4), init_state=half.state,
                **kwargs)
  with pytest.raises(ValueError, match="checkpoint_dir"):
    l2hmc.train(jax.random.key(0), target, config, training, init_state=start, checkpoint_every=2, **kwargs)
