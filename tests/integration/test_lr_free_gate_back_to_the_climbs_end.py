"""``benchmarks/lr_free.py``'s design "the default from 1e-3, held once validation trends up
(overfitting_gate)" (``_gate_back_to_the_climbs_end``): the gate as it was when that design
ran, which took the step size back to the climb's end when it closed, where the library's
gate holds the larger of the climb's end and the step size it closes at."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import lr_free  # benchmarks/ is on sys.path (conftest.py)
import metaoptax
from metaoptax._src import tree_utils

SETTINGS = {**lr_free.NEW_DEFAULT, "init_step_size": 1e-3}


def _loss(w, key):
  x = jax.random.normal(key, (16, 5))
  return jnp.mean((x @ w["w"] - x @ jnp.arange(1.0, 6.0)) ** 2)


def _log_alpha(state):
  (meta,) = tree_utils.instances_of(state.inner, metaoptax.MetaOptimizeState)
  return float(jnp.mean(meta.meta_params.step_size))


@pytest.mark.system  # compiles the gate and the design (~6 s)
@pytest.mark.parametrize("offset", [-np.log(4.0), np.log(4.0)])
def test_it_holds_the_climbs_end_where_the_library_holds_the_larger(offset):
  gate = metaoptax.overfitting_gate(metaoptax.adamw(weight_decay=lr_free.WEIGHT_DECAY,
                                                    **SETTINGS))
  design = lr_free._gate_back_to_the_climbs_end(**SETTINGS)
  steps = {}
  for name, opt in (("gate", gate), ("design", design)):
    @jax.jit
    def step(w, state, key, opt=opt):
      g = jax.grad(_loss)(w, key)
      updates, state = opt.update(g, state, w, validation_loss=jnp.float32(1.0))
      return optax.apply_updates(w, updates), state
    steps[name] = step

  w = {"w": jnp.zeros(5)}
  state = design.init(w)
  for i in range(150):  # a flat validation loss: the climb ends and the gate stays open
    w, state = steps["design"](w, state, jax.random.key(i))
  climb, = tree_utils.instances_of(state.inner, metaoptax.ClimbState)
  assert not bool(climb.climbing) and not bool(state.held)
  now = _log_alpha(state)
  # the climb ended `offset` away from where alpha is now; the trend has risen for
  # patience - 1 steps, so the next update closes the gate
  state = state._replace(climbed=jnp.full_like(state.climbed, now + offset), above=jnp.int32(99),
                         fast_average=jnp.float32(2.0), fast_weight=jnp.float32(1.0),
                         slow_average=jnp.float32(1.0), slow_weight=jnp.float32(1.0))
  key = jax.random.key(1000)
  _, gated = steps["gate"](w, state, key)
  w1, designed = steps["design"](w, state, key)
  assert bool(gated.held) and bool(designed.held)
  np.testing.assert_allclose(_log_alpha(gated), max(now, now + offset), rtol=1e-6)
  np.testing.assert_allclose(_log_alpha(designed), now + offset, rtol=1e-6)  # the climb's end
  _, designed = steps["design"](w1, designed, jax.random.key(1001))
  np.testing.assert_allclose(_log_alpha(designed), now + offset, rtol=1e-6)  # held
