"""``benchmarks/lr_free.py``'s design "climb x2, gamma=1 + average, alpha-weighted moments":
its base is Adam while the ratio is 1, and otherwise its moments are the step-size-weighted
averages written out term by term; in the design the ratio follows the learned step size."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import lr_free  # benchmarks/ is on sys.path (conftest.py)


def _grads(steps, seed=0):
  return [jax.random.normal(k, (5,)) for k in jax.random.split(jax.random.key(seed), steps)]


def test_at_ratio_one_it_is_optax_adam():
  base, adam = lr_free._scale_by_alpha_weighted_adam(), optax.scale_by_adam()
  w = jnp.zeros(5)
  s, t = base.init(w), adam.init(w)
  for g in _grads(20):
    d, s = base.update(g, s, w)
    e, t = adam.update(g, t, w)
    # float32: optax forms 1 - b2^t, which loses ~1e-5 of it to cancellation at small t
    np.testing.assert_allclose(d, e, rtol=3e-5, atol=1e-7)


def test_its_moments_are_the_step_size_weighted_averages():
  """With ratios r_t the direction is (sum_s a_s g_s / sum_s a_s) / (sqrt(sum_s c_s g_s^2 /
  sum_s c_s) + eps), a_s = b1^(t-s) (1 - b1) prod_{s<k<=t} r_k and c_s the same with b2 and
  r_k^2: the sums written out in float64 numpy."""
  b1, b2, eps = 0.9, 0.999, 1e-8
  base = lr_free._scale_by_alpha_weighted_adam(b1, b2, eps)
  grads = [np.asarray(g, np.float64) for g in _grads(12, seed=1)]
  ratios = np.exp(-0.1 * np.arange(1, 13)) ** 0.5  # anything in (0, 1]
  w = jnp.zeros(5)
  s = base.init(w)
  for t, g in enumerate(grads):
    s = s._replace(ratio=jnp.float32(ratios[t]))
    d, s = base.update(jnp.asarray(g, jnp.float32), s, w)
    carried = [np.prod(ratios[k + 1:t + 1]) for k in range(t + 1)]  # prod over s < k <= t
    a = np.array([b1 ** (t - k) * (1 - b1) * carried[k] for k in range(t + 1)])
    c = np.array([b2 ** (t - k) * (1 - b2) * carried[k] ** 2 for k in range(t + 1)])
    m = sum(ak * gk for ak, gk in zip(a, grads)) / a.sum()
    v = sum(ck * gk ** 2 for ck, gk in zip(c, grads)) / c.sum()
    np.testing.assert_allclose(d, m / (np.sqrt(v) + eps), rtol=1e-4)  # float32 state


@pytest.mark.system  # compiles the whole design (~4 s)
def test_in_the_design_the_ratio_follows_the_climbing_step_size():
  opt = lr_free._alpha_weighted()
  loss = lambda w: 0.5 * jnp.sum(w ** 2)
  w = jnp.ones(4)
  state = opt.init(w)
  alphas, ratios = [], []
  for _ in range(30):
    u, state = opt.update(jax.grad(loss)(w), state, w)
    w = optax.apply_updates(w, u)
    alphas.append(float(state.step_size))
    ratios.append(float(state.inner[0].base_state.ratio))
  alphas = np.array(alphas)
  np.testing.assert_allclose(alphas[1:], alphas[:-1] * np.exp(0.1), rtol=1e-4)  # climbing
  np.testing.assert_allclose(ratios[1:], np.exp(-0.1), rtol=1e-4)
