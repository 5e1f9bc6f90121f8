"""``benchmarks/lr_free.py``'s design "the default from 1e-3, its weight decay at the climbed
step size" (``_decay_at_the_climbed_step_size``): each step is the undecayed drop-in's minus
``kappa * alpha_c * w``, with ``alpha_c`` the step size while the climb goes on and the step
size at the climb's end after it, and the trace shrunk by ``1 - kappa * alpha_c``."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import lr_free  # benchmarks/ is on sys.path (conftest.py)
import metaoptax
from metaoptax._src import tree_utils

SETTINGS = {**lr_free.NEW_DEFAULT, "init_step_size": 1e-3}
SETTINGS.pop("average")


def _loss(w):
  return 0.5 * jnp.sum(jnp.arange(1.0, 6.0) * (w["w"] - 1.0) ** 2)


@pytest.mark.system  # compiles the design and its undecayed drop-in (~5 s)
def test_each_step_is_the_undecayed_one_minus_the_decay_at_the_climbed_step_size():
  design = lr_free._decay_at_the_climbed_step_size(**SETTINGS)
  inner = metaoptax.adamw(weight_decay=0.0, average=None, **SETTINGS)
  kappa = lr_free.WEIGHT_DECAY

  @jax.jit
  def step(w, state):
    g = jax.grad(_loss)(w)
    wrapped = state[0]
    expected, inner_state = inner.update(g, wrapped.inner, w)  # the oracle: one inner step
    updates, state = design.update(g, state, w)
    return w, optax.apply_updates(w, updates), state, updates, expected, inner_state

  w = {"w": jnp.zeros(5)}
  state = design.init(w)
  climbing, references = [], []
  for _ in range(300):
    w0, w, state, updates, expected, inner_state = step(w, state)
    reference = float(state[0].reference)
    climb, = tree_utils.instances_of(state[0].inner, metaoptax.ClimbState)
    alpha = float(metaoptax.step_sizes(state[0].inner))
    np.testing.assert_allclose(updates["w"], expected["w"] - kappa * reference * w0["w"],
                               rtol=1e-5, atol=1e-9)
    shrunk = (1 - kappa * reference) * metaoptax.sensitivity_trace(inner_state)["w"]
    np.testing.assert_allclose(metaoptax.sensitivity_trace(state[0].inner)["w"], shrunk,
                               rtol=1e-5, atol=1e-9)
    if bool(climb.climbing) or bool(climb.ended):
      np.testing.assert_allclose(reference, alpha, rtol=1e-6)
    climbing.append(bool(climb.climbing))
    references.append(reference)
  end = climbing.index(False)  # the climb ended, and the reference is held from there on
  assert 0 < end < 250
  np.testing.assert_allclose(references[end:], references[end], rtol=0)
  assert float(metaoptax.step_sizes(state[0].inner)) != references[end]  # alpha moved on
