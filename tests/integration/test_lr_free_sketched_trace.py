"""``benchmarks/lr_free.py``'s designs "the default from 1e-3, its trace count-sketched to
1/16" and "1/256" (issue 60, item 1): the meta-gradient :math:`s = (Sh)\\cdot(Sg)` of a count
sketch :math:`S` of the trace, taken as :math:`h \\cdot (S^\\top S g)` through ``meta_grads``.

Oracles: the sketch written out as a NumPy matrix (float64; the float32 sums agree to
``rtol = 1e-5``), and with one entry per bucket (``ratio=1``, :math:`S^\\top S = I`) the design
is ``metaoptax.adamw`` itself (``rtol = 1e-6``)."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import metaoptax
import lr_free  # benchmarks/ is on sys.path (conftest.py)


@pytest.mark.parametrize("n, ratio", [(1000, 16), (300, 256), (7, 1)])
def test_the_sketch_against_its_matrix(n, ratio):
  rng = np.random.default_rng(0)
  h, g = rng.normal(size=n), rng.normal(size=n)
  k = -(-n // ratio)
  signs = np.asarray(lr_free._count_sketch_signs(n), np.float64)
  assert set(np.unique(signs)) == {-1.0, 1.0}
  matrix = np.zeros((k, n))
  matrix[np.arange(n) % k, np.arange(n)] = signs  # entry i into bucket i mod k
  back = np.asarray(lr_free._count_sketch_back(jnp.asarray(g, jnp.float32), ratio), np.float64)
  np.testing.assert_allclose(h @ back, (matrix @ h) @ (matrix @ g), rtol=1e-5)
  if ratio == 1:
    np.testing.assert_allclose(back, g, rtol=1e-6)


def test_one_entry_per_bucket_is_the_drop_in():
  params = {"w": jnp.ones((4, 3)), "b": jnp.zeros(3)}
  sketched = lr_free._sketched_trace(1, init_step_size=1e-2)
  plain = metaoptax.adamw(1e-2, weight_decay=lr_free.WEIGHT_DECAY)
  s, t = sketched.init(params), plain.init(params)
  sketched_update, plain_update = jax.jit(sketched.update), jax.jit(plain.update)
  for key in jax.random.split(jax.random.key(0), 10):
    grads = jax.tree.map(lambda p: jax.random.normal(key, p.shape) + 0.3, params)
    u, s = sketched_update(grads, s, params)
    v, t = plain_update(grads, t, params)
    params = optax.apply_updates(params, v)
    for x, y in zip(jax.tree.leaves(u), jax.tree.leaves(v)):
      np.testing.assert_allclose(x, y, rtol=1e-6)
  assert metaoptax.step_sizes(t) != 1e-2  # the meta-gradient moved the step size
