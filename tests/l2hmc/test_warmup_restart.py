"""The warm-up restarts chains that never move (stuck where the shared step size is too
large for them) from moving chains' states."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from metaoptax import l2hmc
from metaoptax.l2hmc import adaptation


def _states(n=6, dim=3):
  positions = jnp.arange(n * dim, dtype=jnp.float32).reshape(n, dim)
  return l2hmc.L2HMCState(positions, -jnp.arange(n, dtype=jnp.float32), 2 * positions)


def test_stuck_chains_take_the_whole_state_of_a_moving_chain():
  states = _states()
  acceptance = jnp.array([0.8, 0.0, 0.7, 0.01, 0.9, 0.6])  # chains 1 and 3 stuck
  moved = adaptation._restart_stuck(jax.random.key(0), states, acceptance)
  positions = np.asarray(moved.position)
  for i in (0, 2, 4, 5):
    np.testing.assert_array_equal(positions[i], np.asarray(states.position[i]))
  for i in (1, 3):
    donor = int(positions[i, 0]) // 3
    assert donor in (0, 2, 4, 5)
    np.testing.assert_array_equal(positions[i], np.asarray(states.position[donor]))
    assert float(moved.logdensity[i]) == float(states.logdensity[donor])
    np.testing.assert_array_equal(moved.logdensity_grad[i], states.logdensity_grad[donor])


def test_no_moving_chain_keeps_every_chain():
  states = _states()
  moved = adaptation._restart_stuck(jax.random.key(0), states, jnp.zeros(6))
  jax.tree.map(np.testing.assert_array_equal, moved, states)


@pytest.mark.system  # a training or sampling run (6-10 s): CI's second command
def test_warmup_from_a_far_chain_ends_in_the_bulk():
  target = l2hmc.targets.gaussian(jnp.diag(jnp.array([0.01, 0.01])))
  positions = jnp.zeros((16, 2)).at[0].set(jnp.array([60.0, -60.0]))  # |grad| ~ 6e3
  found = l2hmc.warmup(jax.random.key(0), target.logdensity_fn, positions, num_steps=3,
                       num_iterations=60)
  assert float(jnp.max(jnp.abs(found.positions))) < 1.0
  np.testing.assert_allclose(found.whitening.scale, [0.1, 0.1], rtol=0.3)
