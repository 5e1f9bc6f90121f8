"""``benchmarks/lr_free.py``'s design "schedule-free, range test, hold" (``_range_test``):
while it climbs it is optax's schedule-free AdamW on the climbing rate, and when the
smoothed loss doubles it rolls back to the average of its lowest loss and holds that rate."""

import jax
import jax.numpy as jnp
import numpy as np
import optax

import lr_free  # benchmarks/ is on sys.path (conftest.py)


def _loss(w):
  return 0.5 * jnp.sum(jnp.array([1.0, 10.0]) * w ** 2) + 1.0


def _run(opt, steps, w0, value=True):
  w, s, path = w0, opt.init(w0), []
  for _ in range(steps):
    g = jax.grad(_loss)(w)
    u, s = opt.update(g, s, w, obj_fn=_loss) if value else opt.update(g, s, w)
    w = optax.apply_updates(w, u)
    path.append((w, s))
  return path


def test_climbing_it_is_optax_schedule_free_on_the_climbing_rate():
  w0 = jnp.array([1.0, -2.0])
  ours = lr_free._range_test(climb=0.1, stop=float("inf"), init_rate=1e-3)
  rate = lambda t: 1e-3 * jnp.exp(0.1 * t)
  oracle = optax.contrib.schedule_free_adamw(rate, weight_decay=lr_free.WEIGHT_DECAY)
  for (w, s), (v, t) in zip(_run(ours, 30, w0), _run(oracle, 30, w0, value=False)):
    np.testing.assert_allclose(w, v, rtol=2e-5, atol=1e-6)  # float32 round-off over 30 steps
    np.testing.assert_allclose(s.x, optax.contrib.schedule_free_eval_params(t, v), rtol=2e-5,
                               atol=1e-6)


def test_when_the_smoothed_loss_doubles_it_rolls_back_and_holds_the_best_rate():
  ours = lr_free._range_test(climb=0.3, init_rate=1e-3)
  path = _run(ours, 80, jnp.array([1.0, -2.0]))
  ended = [i for i, (_, s) in enumerate(path) if not bool(s.climbing)]
  assert ended, "the climb never ended"
  i = ended[0]
  w, s = path[i]
  _, before = path[i - 1]
  # back to the average of the lowest smoothed loss, at the rate of that step
  np.testing.assert_allclose(w, before.best_x, rtol=1e-6)
  np.testing.assert_allclose(s.x, before.best_x, rtol=1e-6)
  np.testing.assert_allclose(s.log_rate, before.best_log_rate, rtol=1e-6)
  assert float(s.best_log_rate) < float(before.log_rate)  # the best was below where it broke
  # then the rate is held
  rates = [float(t.log_rate) for _, t in path[i:]]
  assert max(rates) == min(rates)
  assert np.all(np.isfinite(path[-1][0]))
