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


def _minor_mode_mixture(x):
  """A standard normal at 0 with a minor mode of the same width at (40, 40), e^-500 the mass
  (the bulk's own density there e^-1600): no leapfrog at a unit step size crosses between
  them."""
  far = -500.0 - 0.5 * jnp.sum((x - 40.0) ** 2)
  return jnp.logaddexp(-0.5 * jnp.sum(x**2), far)


def test_behind_marks_chains_far_below_the_median_log_density():
  half, dim = 10, 2
  # the median -1.0; the bound 20 nats per coordinate below it, -41.0
  means = jnp.array([-1.0, -0.5, -1.0, -1.5, -42.0, -40.0])
  quarters = jnp.zeros((2, 2, 6, dim + 1)).at[0, 0, :, -1].set(means * half)
  np.testing.assert_array_equal(adaptation._behind(quarters, half),
                                [False, False, False, False, True, False])


def test_warmup_restarts_chains_left_in_a_minor_mode():
  # 28 chains in the bulk, 4 in the minor mode (500 nats below): they move there (acceptance
  # near the bulk's), so only their log p tells them apart. The dense metric's burn-in moves
  # each chain with its own Newton metric (the adapt default's up to DENSE_MAX_DIM)
  positions = 0.5 * jax.random.normal(jax.random.key(1), (32, 2))
  positions = positions.at[:4].add(40.0)
  found = l2hmc.warmup(jax.random.key(0), _minor_mode_mixture, positions, num_steps=3,
                       num_iterations=200, metric="dense")
  assert float(jnp.max(jnp.abs(found.positions))) < 5.0
  assert float(found.rhat[-1]) < 1.5  # log p's: hundreds where chains stay in both modes
