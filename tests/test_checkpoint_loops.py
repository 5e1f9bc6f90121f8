"""Checkpoints (orbax): exact round trips of any state, clear errors, bit-for-bit resume."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import metaoptax
from metaoptax import checkpoint


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
  with pytest.raises(ValueError, match="exists"):
    checkpoint.save(tmp_path / "c", {"a": jnp.ones(2)})
  checkpoint.save(tmp_path / "c", {"a": jnp.ones(2)}, overwrite=True)
  _assert_identical(checkpoint.restore(tmp_path / "c", {"a": jnp.zeros(2)}), {"a": jnp.ones(2)})


def test_mismatched_like_is_an_error_not_a_cast(tmp_path):
  tree = {"a": jnp.ones(3), "b": jnp.zeros((), jnp.int32)}
  checkpoint.save(tmp_path / "c", tree)
  with pytest.raises(ValueError, match=r"\['a'\].*shape \(3,\).*shape \(4,\)"):
    checkpoint.restore(tmp_path / "c", {"a": jnp.ones(4), "b": tree["b"]})
  with pytest.raises(ValueError, match="float32.*float16"):
    checkpoint.restore(tmp_path / "c", {"a": jnp.ones(3, jnp.float16), "b": tree["b"]})
  with pytest.raises(ValueError, match=r"\['b'\].*\['c'\]"):
    checkpoint.restore(tmp_path / "c", {"a": tree["a"], "c": tree["b"]})
  with pytest.raises(ValueError, match="2 leaves"):
    checkpoint.restore(tmp_path / "c", {"a": tree["a"]})
  with pytest.raises(FileNotFoundError):
    checkpoint.restore(tmp_path / "missing", tree)
  with pytest.raises(TypeError, match="str"):
    checkpoint.save(tmp_path / "d", {"name": "not an array"})
