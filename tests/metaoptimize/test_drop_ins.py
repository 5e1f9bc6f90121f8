"""The climb (metaoptax.climb) and the learning-rate-free drop-ins (metaoptax.adamw, lion, sgd).

Oracles:
* ``climb`` against a plain-Python re-implementation of its rule on scripted
  meta-gradients (exact equality of every update, float32);
* with the meta step and the climb frozen (``meta_step_size=0, climb_rate=0,
  climb_backoff=1``),
  each drop-in equals its optax namesake at that learning rate, step for step
  (rtol 1e-6, 30 steps on a small MLP), with and without a weight-decay mask;
* derivatives through an unrolled run (float64) against central differences.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import metaoptax
from metaoptax.step_size import drop_ins
from tests import conftest as unroll_lib

# tens of seconds in all: the file runs first (tests/conftest.py), not last on one worker
pytestmark = pytest.mark.slow


def reference_climb(meta_grads, rate, decay, inner_updates, backoff=1.0):
  """Plain-Python rule: + rate while the running mean of sum(s) <= 0; at the first
  step it is > 0, - rate * decay / (1 - decay) - log(backoff); afterwards the inner
  meta's update."""
  average, climbing, out = 0.0, True, []
  for s, inner in zip(meta_grads, inner_updates):
    average = decay * average + (1 - decay) * float(np.sum(s))
    if climbing and average > 0:
      climbing = False
      out.append(np.full_like(inner, -rate * decay / (1 - decay) - math.log(backoff)))
    elif climbing:
      out.append(np.full_like(inner, rate))
    else:
      out.append(inner)
  return out


@pytest.mark.parametrize("backoff", [1.0, 10.0, 0.5])
def test_climb_equals_its_rule_on_scripted_meta_gradients(backoff):
  rng = np.random.default_rng(0)
  # Three blocks: climbing while the total is negative, then a turn, then noise.
  meta_grads = ([rng.normal(-1.0, 0.3, 3).astype(np.float32) for _ in range(12)]
                + [np.full(3, 4.0, np.float32)] * 3
                + [rng.normal(0.0, 1.0, 3).astype(np.float32) for _ in range(10)])
  inner = optax.adam(1e-2)
  tx = metaoptax.climb(inner, rate=0.07, decay=0.8, backoff=backoff)
  beta = jnp.zeros(3)
  meta_params = metaoptax.MetaParams(beta, {})
  state, inner_state = tx.init(meta_params), inner.init(beta)
  got, inner_updates = [], []
  for s in meta_grads:
    u, state = tx.update(metaoptax.MetaParams(jnp.asarray(s), {}), state, meta_params)
    v, inner_state = inner.update(jnp.asarray(s), inner_state, beta)
    got.append(np.asarray(u.step_size))
    inner_updates.append(np.asarray(v))
  want = reference_climb(meta_grads, 0.07, 0.8, inner_updates, backoff)
  for t, (g, w) in enumerate(zip(got, want)):
    np.testing.assert_allclose(g, w, rtol=1e-6, atol=0, err_msg=f"step {t}")
  assert not bool(state.climbing)
  assert int(state.climb_steps) == sum(np.allclose(w, 0.07) for w in want)


def test_climb_rejects_bad_hyperparameters():
  for kwargs in ({"rate": -0.1}, {"decay": 1.0}, {"rate": float("nan")}, {"decay": -0.5},
                 {"backoff": 0.0}, {"backoff": -1.0}, {"backoff": float("nan")}, {"backoff": float("inf")}):
    with pytest.raises(ValueError):
      metaoptax.climb(optax.adam(1e-3), **kwargs)


def mlp_params():
  k1, k2 = jax.random.split(jax.random.key(0))
  return {"w1": jax.random.normal(k1, (4, 8)) * 0.5, "b1": jnp.zeros(8),
          "w2": jax.random.normal(k2, (8, 2)) * 0.3, "b2": jnp.zeros(2)}


def mlp_loss(p, x):
  h = jnp.tanh(x @ p["w1"] + p["b1"])
  return jnp.mean((h @ p["w2"] + p["b2"] - jnp.stack([x[:, 0], -x[:, 1]], 1)) ** 2)


def run_steps(opt, steps=30):
  params = mlp_params()
  xs = jax.random.normal(jax.random.key(1), (steps, 16, 4))

  def body(carry, x):
    p, s = carry
    u, s = opt.update(jax.grad(mlp_loss)(p, x), s, p)
    return (optax.apply_updates(p, u), s), None

  (params, state), _ = jax.jit(lambda p: jax.lax.scan(body, (p, opt.init(p)), xs))(params)
  return params, state


MASK = {"w1": True, "b1": False, "w2": True, "b2": False}
FROZEN = dict(meta_step_size=0.0, climb_rate=0.0, climb_backoff=1.0, average=None,
              climb_memory=None)
EQUIVALENT = {
    "adamw": (lambda: metaoptax.adamw(3e-3, weight_decay=0.1, **FROZEN),
              lambda: optax.adamw(3e-3, weight_decay=0.1)),
    "adamw-mask-nesterov": (
        lambda: metaoptax.adamw(3e-3, weight_decay=0.1, mask=MASK, nesterov=True, **FROZEN),
        lambda: optax.adamw(3e-3, weight_decay=0.1, mask=MASK, nesterov=True)),
    "lion": (lambda: metaoptax.lion(1e-3, weight_decay=0.5, **FROZEN),
             lambda: optax.lion(1e-3, weight_decay=0.5)),
    "lion-mask": (lambda: metaoptax.lion(1e-3, weight_decay=0.5, mask=MASK, **FROZEN),
                  lambda: optax.lion(1e-3, weight_decay=0.5, mask=MASK)),
    "sgd": (lambda: metaoptax.sgd(0.05, **FROZEN), lambda: optax.sgd(0.05)),
    "sgd-momentum": (lambda: metaoptax.sgd(0.05, momentum=0.9, **FROZEN),
                     lambda: optax.sgd(0.05, momentum=0.9)),
    "sgd-nesterov": (lambda: metaoptax.sgd(0.05, momentum=0.9, nesterov=True, **FROZEN),
                     lambda: optax.sgd(0.05, momentum=0.9, nesterov=True)),
}


@pytest.mark.parametrize("case", sorted(EQUIVALENT))
def test_frozen_drop_in_equals_its_optax_namesake(case):
  ours, theirs = EQUIVALENT[case]
  got, state = run_steps(ours())
  want, _ = run_steps(theirs())
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7), got, want)
  assert not bool(state.meta_state.climbing) or int(state.meta_state.climb_steps) == 30
  np.testing.assert_allclose(jax.tree.leaves(metaoptax.step_sizes(state))[0],
                             jnp.exp(ours().init(mlp_params()).meta_params.step_size), rtol=0)


@pytest.mark.parametrize("name", ["adamw", "lion", "sgd"])
def test_drop_in_climbs_from_1e_8(name):
  """From 1e-8 log(alpha) rises by the climb rate per step (0.1; 0.03 for sgd) until the
  climb ends, 4 to 25 above where it started; the loss falls well below the start."""
  opt = getattr(metaoptax, name)(1e-8, average=None,
                                 **({"momentum": 0.9} if name == "sgd" else {}))
  rate = drop_ins.SGD_CLIMB_RATE if name == "sgd" else drop_ins.CLIMB_RATE
  params, state = run_steps(opt, steps=int(30 / rate))
  climb_state = state.meta_state
  assert not bool(climb_state.climbing)
  assert 4 <= int(climb_state.climb_steps) * rate <= 25
  x = jax.random.normal(jax.random.key(2), (256, 4))
  assert float(mlp_loss(params, x)) < 0.5 * float(mlp_loss(mlp_params(), x))


def states_along(opt, steps):
  """``(params, state)`` after each of ``steps`` steps of ``run_steps``'s problem, stacked."""
  xs = jax.random.normal(jax.random.key(1), (steps, 16, 4))

  def body(carry, x):
    p, s = carry
    u, s = opt.update(jax.grad(mlp_loss)(p, x), s, p)
    carry = (optax.apply_updates(p, u), s)
    return carry, carry

  return jax.jit(lambda p: jax.lax.scan(body, (p, opt.init(p)), xs)[1])(mlp_params())


def _climb_end(run):
  """``k``: the climb ended at step ``k + 1`` of ``run`` (``states_along``)."""
  ended = np.asarray(run[1].meta_state.ended)
  assert ended.sum() == 1
  k = int(np.argmax(ended))
  assert 50 < k < 140 and not bool(run[1].meta_state.climbing[k])
  return k


def _close(a, b):
  np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


def test_adam_restarts_when_the_climb_ends():
  """adamw(climb_memory=0): the run equals the one with the moments kept
  (``climb_memory=None``; to float32 rounding: the two programs fuse differently; rtol
  1e-5) up to and including the step at which the climb ends; the next step starts from
  Adam's initial state (one step later: count 1, mu = (1 - b1) g, nu = (1 - b2) g^2 of
  that step's g) and the same beta (the trace is kept); the runs then differ."""
  on, off = (states_along(metaoptax.adamw(1e-6, average=None, climb_memory=memory), 150)
             for memory in (0, None))
  at = lambda run, i: jax.tree.map(lambda x: x[i], run)
  k = _climb_end(on)
  jax.tree.map(_close, at(on, k), at(off, k))
  (_, s_on), (_, s_off) = at(on, k + 1), at(off, k + 1)
  jax.tree.map(_close, s_on.meta_params, s_off.meta_params)
  adam = s_on.base_state  # optax.ScaleByAdamState, restarted then one step
  assert int(adam.count) == 1 and int(s_off.base_state.count) == k + 2
  for mu, nu in zip(jax.tree.leaves(adam.mu), jax.tree.leaves(adam.nu)):
    np.testing.assert_allclose(nu, 0.001 / 0.1**2 * mu**2, rtol=1e-5, atol=1e-12)
  assert not np.allclose(at(on, k + 5)[0]["w1"], at(off, k + 5)[0]["w1"], rtol=0, atol=1e-7)


@pytest.mark.parametrize("memory", [3, 10])
def test_adam_moments_count_as_climb_memory_steps_when_the_climb_ends(memory):
  """adamw(climb_memory=k), against the run with the moments kept and the rule in numpy:
  equal up to and including the step at which the climb ends (rtol 1e-5); the next step
  starts from the moments scaled by (1 - b^k) / (1 - b^n) (n = k_end + 1 steps taken),
  count k, so its count is k + 1 and, with that step's gradient g (recovered from the kept
  run: (1 - b) g = m_next - b m), mu = b1 s1 mu + (1 - b1) g and likewise nu (float64
  rule on Adam's float32 1 - b; rtol 1e-5);
  the runs then differ."""
  # the decays as Adam applies them: 1 - b in float32
  b1, b2 = (1.0 - float(np.float32(1.0 - b)) for b in (0.9, 0.999))
  on, off = (states_along(metaoptax.adamw(1e-6, average=None, climb_memory=m), 150)
             for m in (memory, None))
  at = lambda run, i: jax.tree.map(lambda x: x[i], run)
  k = _climb_end(on)
  jax.tree.map(_close, at(on, k), at(off, k))
  (_, s_end) = at(off, k)
  (_, s_on), (_, s_off) = at(on, k + 1), at(off, k + 1)
  jax.tree.map(_close, s_on.meta_params, s_off.meta_params)
  n = k + 1
  assert int(s_end.base_state.count) == n and int(s_on.base_state.count) == memory + 1
  for b, field in ((b1, "mu"), (b2, "nu")):
    kept = np.asarray(jax.tree.leaves(getattr(s_end.base_state, field))[0], np.float64)
    kept_next = np.asarray(jax.tree.leaves(getattr(s_off.base_state, field))[0], np.float64)
    fresh_term = kept_next - b * kept
    expected = b * kept * (1 - b**memory) / (1 - b**n) + fresh_term
    got = np.asarray(jax.tree.leaves(getattr(s_on.base_state, field))[0])
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-12)
  assert not np.allclose(at(on, k + 5)[0]["w1"], at(off, k + 5)[0]["w1"], rtol=0, atol=1e-7)


def test_climb_memory_reads_learned_decays():
  """With b1 and b2 learned, the moments are scaled with the values injected at the step
  (not the initial ones): the run stays finite through the climb's end, and at the step
  after it the count is climb_memory + 1."""
  opt = metaoptax.adamw(1e-6, average=None, learn=("b1", "b2"), meta_step_size=3e-2)
  run = states_along(opt, 150)
  ended = np.asarray(run[1].meta_state.ended)
  assert ended.sum() == 1
  k = int(np.argmax(ended))
  adam = jax.tree.map(lambda x: x[k + 1], run[1].base_state.inner_state)
  assert int(adam.count) == drop_ins.ADAMW_CLIMB_MEMORY + 1
  assert all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree.leaves(run))


@pytest.mark.parametrize("memory", [-1, True, 1.5])
def test_climb_memory_must_be_none_or_a_count(memory):
  with pytest.raises(ValueError, match="climb_memory must be None or an int"):
    metaoptax.adamw(climb_memory=memory)


def test_climb_memory_above_zero_needs_adam_moments():
  with pytest.raises(ValueError, match="exactly one optax.ScaleByAdamState"):
    metaoptax.lion(climb_memory=3)
  metaoptax.lion(climb_memory=0).init(mlp_params())  # a restart suits any base


def test_a_pytree_mask_works_with_the_default_climb_memory():
  """A weight-decay mask given as a pytree (as ``optax.adamw`` takes it) fits the probe of
  Adam's decays (it used to raise at construction) and gives the callable mask's steps."""
  as_tree = metaoptax.adamw(weight_decay=0.1, mask=MASK)
  as_callable = metaoptax.adamw(weight_decay=0.1, mask=lambda p: {k: k.startswith("w") for k in p})
  got, _ = run_steps(as_tree)
  want, _ = run_steps(as_callable)
  jax.tree.map(np.testing.assert_array_equal, got, want)


def test_climb_memory_needs_a_climb():
  with pytest.raises(ValueError, match="metaoptax.climb"):
    metaoptax.metaoptimize(optax.scale_by_adam(), optax.adam(1e-3), init_step_size=1e-3,
                           climb_memory=0).init(mlp_params())


def test_climb_ends_at_once_from_a_large_step_size():
  """Started far above a stable step size, the meta-gradient is positive at once."""
  _, state = run_steps(metaoptax.sgd(0.5, momentum=0.9), steps=40)
  assert int(state[0].meta_state.climb_steps) <= 5  # (metaoptimize, average)


def test_climb_decision_is_one_for_all_blocks():
  """Per-weight step sizes climb together (one decision from the summed meta-gradient)."""
  _, state = run_steps(metaoptax.adamw(1e-6, blocks="per_param"), steps=20)
  sizes = jnp.concatenate([jnp.ravel(a) for a in jax.tree.leaves(metaoptax.step_sizes(state))])
  np.testing.assert_allclose(sizes, sizes[0], rtol=1e-5)
  assert float(sizes[0]) > 1e-6 * np.exp(0.1 * 15)


def test_vmap_over_starting_step_sizes():
  def final_alpha(log_alpha0):
    return metaoptax.step_sizes(run_steps(metaoptax.adamw(jnp.exp(log_alpha0)), steps=10)[1])
  alphas = jax.vmap(final_alpha)(jnp.log(jnp.array([1e-8, 1e-6])))
  np.testing.assert_allclose(alphas, [1e-8 * np.exp(1.0), 1e-6 * np.exp(1.0)], rtol=1e-4)


@pytest.mark.parametrize("name", ["adamw", "lion", "sgd"])
def test_differentiable_through_an_unrolled_run(name, float64):  # pylint: disable=unused-argument
  """d(final loss)/d(log meta step, log alpha_0, gamma, weight decay), float64,
  vs central differences (the tolerance of test_unroll_grad)."""
  def f(h):
    opt = getattr(metaoptax, name)(
        jnp.exp(h[1]), meta_step_size=jnp.exp(h[0]), gamma=h[2], weight_decay=h[3],
        blocks="per_leaf")
    return unroll_lib.unroll(opt)[0]
  unroll_lib.check_against_fd(f, unroll_lib.HYPER)


def _held_out_run(meta_grads_of, steps=40):
  """``(params, state)`` of ``metaoptax.adamw(1e-6)`` after ``steps`` steps of
  ``run_steps``'s problem, ``update`` given ``meta_grads=meta_grads_of(grads)``."""
  opt = metaoptax.adamw(1e-6)
  xs = jax.random.normal(jax.random.key(1), (steps, 16, 4))

  def body(carry, x):
    p, s = carry
    g = jax.grad(mlp_loss)(p, x)
    u, s = opt.update(g, s, p, meta_grads=meta_grads_of(g))
    return (optax.apply_updates(p, u), s), None

  p = mlp_params()
  return jax.jit(lambda p: jax.lax.scan(body, (p, opt.init(p)), xs)[0])(p)


def test_adamw_takes_a_held_out_meta_gradient():
  """``update(..., meta_grads=...)`` of the drop-in: the training gradient itself gives the
  run without it, bit for bit; a held-out gradient opposed to the training one (the
  held-out loss rises where the training loss falls) ends the climb at once, so the step
  size stays within a few climb steps of its start."""
  plain = run_steps(metaoptax.adamw(1e-6), steps=40)
  same = _held_out_run(lambda g: g)
  jax.tree.map(lambda a, b: np.testing.assert_array_equal(a, b), same, plain)
  opposed = _held_out_run(lambda g: jax.tree.map(jnp.negative, g))
  assert float(metaoptax.step_sizes(plain[1])) > 1e-6 * np.exp(0.1 * 30)
  assert float(metaoptax.step_sizes(opposed[1])) < 1e-6 * np.exp(0.1 * 3)


def test_adamw_starts_at_optax_adamw_usual_rate():
  """The default start is 1e-3 (lion and sgd keep 1e-6): after 20 steps the loss has
  fallen where the start at 1e-6 has hardly moved it (the climb is still ~8 decades
  below a useful rate)."""
  assert drop_ins.ADAMW_INIT_STEP_SIZE == 1e-3
  state = metaoptax.adamw().init(mlp_params())
  np.testing.assert_allclose(metaoptax.step_sizes(state), 1e-3, rtol=1e-6)
  x = jax.random.normal(jax.random.key(2), (256, 4))
  start = float(mlp_loss(mlp_params(), x))
  quick = float(mlp_loss(run_steps(metaoptax.adamw(average=None), steps=20)[0], x))
  slow = float(mlp_loss(run_steps(metaoptax.adamw(1e-6, average=None), steps=20)[0], x))
  assert quick < 0.9 * start and slow > 0.99 * start
