"""``metaoptax.overfitting_gate``: the wrapped optimizer (to rtol 1e-6) until the validation
loss trends up (against the float64 oracle of ``tests/conftest.py``), then the step sizes
of the climb's end, or the current ones where higher, held; bad input raises at construction or at ``init``/``update``."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import metaoptax
from metaoptax._src import tree_utils
from tests.conftest import climb_end_step
from tests.conftest import first_validation_rise
from tests.conftest import run_with_validation_losses

STEPS = 400
FALLING = np.linspace(2.0, 1.0, STEPS)
# turns up at step 300
TURNING = np.concatenate([FALLING[:300], FALLING[299] + 0.01 * np.arange(1, 101)])
# short averages and patience: these runs are short
SHORT = dict(decay=0.95, trend_decay=0.998, patience=20)


@pytest.mark.system  # ~13 s; the file's other tests cover the gate in the default tier
def test_it_is_the_optimizer_until_the_trend_rises_then_holds_the_climbed_step_size():
  default, _ = run_with_validation_losses(metaoptax.adamw(weight_decay=0.1), FALLING,
                                          extra=False)
  gated, states = run_with_validation_losses(
      metaoptax.overfitting_gate(metaoptax.adamw(weight_decay=0.1), **SHORT), FALLING)
  end = climb_end_step(states)
  assert first_validation_rise(FALLING, end + 1, rho=0.95, patience=20, slow_rho=0.998) is None
  # never closed: the optimizer (bit for bit here; a tolerance, as another CPU's XLA may
  # fuse the two programs differently)
  np.testing.assert_allclose(gated, default, rtol=1e-6)
  assert not bool(states[-1].held)

  gated, states = run_with_validation_losses(
      metaoptax.overfitting_gate(metaoptax.adamw(weight_decay=0.1), **SHORT), TURNING)
  expected = first_validation_rise(TURNING, end + 1, rho=0.95, patience=20, slow_rho=0.998)
  held = np.array([bool(s.held) for s in states])
  assert expected is not None and end < expected
  assert int(np.argmax(held)) == expected and held[expected:].all()
  climbed = float(jnp.exp(jnp.mean(states[-1].climbed)))
  np.testing.assert_allclose(climbed, gated[end], rtol=1e-6)  # where the climb ended
  np.testing.assert_allclose(gated[expected:], climbed, rtol=1e-6)  # back there, held
  np.testing.assert_allclose(gated[:expected], default[:expected], rtol=1e-6)
  assert gated[expected - 1] < 0.99 * climbed  # it had annealed: holding changed something


def test_non_finite_validation_losses_leave_the_averages_as_they_are():
  losses = TURNING.copy()
  losses[100:110] = np.nan
  losses[200] = np.inf
  opt = metaoptax.overfitting_gate(metaoptax.adamw(weight_decay=0.1), **SHORT)
  gated, states = run_with_validation_losses(opt, losses)
  assert np.all(np.isfinite(gated))
  for t in (100, 109, 200):
    for field in ("fast_average", "fast_weight", "slow_average", "slow_weight"):
      assert float(getattr(states[t], field)) == float(getattr(states[t - 1], field))
  assert np.isfinite(float(states[-1].fast_average)) and bool(states[-1].held)


def test_it_reads_through_the_wrapped_state_and_forwards_extra_arguments():
  params = {"w": jnp.ones(3)}
  opt = metaoptax.overfitting_gate(metaoptax.adamw())
  state = opt.init(params)
  assert isinstance(state, metaoptax.OverfittingGateState)
  updates, state = jax.jit(opt.update)({"w": jnp.ones(3)}, state, params,
                                       validation_loss=1.0, value=jnp.float32(3.0))
  assert metaoptax.step_sizes(state).shape == ()
  assert set(metaoptax.averaged_params(state)) == {"w"}
  # a step with the params and the state donated (each leaf of the state its own buffer)
  donated = jax.jit(lambda p, s: opt.update({"w": jnp.ones(3)}, s, p, validation_loss=1.0),
                    donate_argnums=(1,))
  state = opt.init(params)
  for _ in range(2):
    _, state = donated(params, state)
  # inside a chain that passes extra arguments on
  chained = optax.chain(optax.clip_by_global_norm(1.0), opt)
  s = chained.init(params)
  chained.update({"w": jnp.ones(3)}, s, params, validation_loss=jnp.float32(1.0))


@pytest.mark.parametrize("make", [metaoptax.lion, lambda: metaoptax.sgd(momentum=0.9)])
def test_it_wraps_the_other_drop_ins(make):
  """``lion`` and ``sgd`` climb too: the gate holds their climbed step size as well."""
  gated, states = run_with_validation_losses(metaoptax.overfitting_gate(make(), **SHORT),
                                             TURNING)
  end = climb_end_step(states)
  expected = first_validation_rise(TURNING, end + 1, rho=0.95, patience=20, slow_rho=0.998)
  held = np.array([bool(s.held) for s in states])
  assert expected is not None and int(np.argmax(held)) == expected and held[expected:].all()
  np.testing.assert_allclose(gated[expected:], gated[end], rtol=1e-6)


@pytest.mark.parametrize("kwargs, match", [
    (dict(decay=1.0), "decay"),
    (dict(decay=0.0), "decay"),
    (dict(trend_decay=1.5), "trend_decay"),
    (dict(decay=0.999, trend_decay=0.998), "above decay"),
    (dict(margin=-0.1), "margin"),
    (dict(patience=0), "patience"),
    (dict(patience=True), "patience"),
    (dict(patience=2.5), "patience"),
])
def test_bad_settings_raise_at_construction(kwargs, match):
  with pytest.raises(ValueError, match=match):
    metaoptax.overfitting_gate(metaoptax.adamw(), **kwargs)


def test_an_optimizer_without_a_climb_or_a_validation_loss_raises():
  params = {"w": jnp.ones(3)}
  no_climb = metaoptax.metaoptimize(optax.scale_by_adam(), optax.adam(1e-3), init_step_size=1e-3)
  with pytest.raises(ValueError, match="needs a climb"):
    metaoptax.overfitting_gate(no_climb).init(params)
  with pytest.raises(ValueError, match="exactly one"):
    metaoptax.overfitting_gate(optax.adam(1e-3)).init(params)
  opt = metaoptax.overfitting_gate(metaoptax.adamw())
  state = opt.init(params)
  with pytest.raises(ValueError, match="validation_loss="):
    opt.update({"w": jnp.ones(3)}, state, params)
  with pytest.raises(ValueError, match="scalar"):
    opt.update({"w": jnp.ones(3)}, state, params, validation_loss=jnp.ones(2))


def _gate_log_alpha(state):
  (meta,) = tree_utils.instances_of(state.inner, metaoptax.MetaOptimizeState)
  return float(jnp.mean(meta.meta_params.step_size))


@pytest.mark.system  # compiles the gate once, 150 steps (~5 s)
@pytest.mark.parametrize("offset", [-np.log(4.0), np.log(4.0)])
def test_closing_holds_the_larger_of_the_climbs_end_and_the_current_step_size(offset):
  """A climb can end low and the meta-gradient raise alpha after it: closing never lowers it.
  The state is set so that the next update closes the gate, with the climb's end a factor 4
  below (then the current step size is held) or above (then the climb's end) alpha now."""
  opt = metaoptax.overfitting_gate(metaoptax.adamw(weight_decay=0.1))

  @jax.jit
  def step(w, state, key):
    x = jax.random.normal(key, (16, 5))
    grads = jax.grad(lambda v: jnp.mean((x @ (v["w"] - jnp.arange(1.0, 6.0))) ** 2))(w)
    updates, state = opt.update(grads, state, w, validation_loss=jnp.float32(1.0))
    return optax.apply_updates(w, updates), state

  w = {"w": jnp.zeros(5)}
  state = opt.init(w)
  for i in range(150):  # a flat validation loss: the climb ends and the gate stays open
    w, state = step(w, state, jax.random.key(i))
  (climb,) = tree_utils.instances_of(state.inner, metaoptax.ClimbState)
  assert not bool(climb.climbing) and not bool(state.held)
  now = _gate_log_alpha(state)
  state = state._replace(climbed=jnp.full_like(state.climbed, now + offset),
                         above=jnp.int32(99), fast_average=jnp.float32(2.0),
                         fast_weight=jnp.float32(1.0), slow_average=jnp.float32(1.0),
                         slow_weight=jnp.float32(1.0))
  w, state = step(w, state, jax.random.key(1000))
  assert bool(state.held)
  np.testing.assert_allclose(_gate_log_alpha(state), max(now, now + offset), rtol=1e-6)
  for i in range(3):  # held
    w, state = step(w, state, jax.random.key(1001 + i))
    np.testing.assert_allclose(_gate_log_alpha(state), max(now, now + offset), rtol=1e-6)
