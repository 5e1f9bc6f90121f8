"""``l2hmc.trajectory_length``: the fewest leapfrog steps that reach a quarter period, and
the quarter period's independence on a standard normal (the oracle: exact dynamics)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from metaoptax.l2hmc import trajectory_length


@pytest.mark.parametrize("step_size, expected", [
    (math.pi / 2, 1), (1.0, 2), (0.4, 4), (0.1, 16), (0.2, 8), (1e-6, 16), (3.0, 1)])
def test_num_steps_is_the_ceiling_of_a_quarter_period_over_the_step_size(step_size, expected):
  k = trajectory_length.num_steps_for(step_size)
  assert k == expected
  # the fewest steps whose trajectory reaches pi/2 (or the most allowed)
  assert k == trajectory_length.MAX_NUM_STEPS or (k - 1) * step_size < math.pi / 2 <= k * step_size


@pytest.mark.parametrize("step_size", [0.0, -1.0, float("nan"), float("inf")])
def test_a_step_size_that_is_not_positive_and_finite_gives_the_most_steps(step_size):
  assert trajectory_length.num_steps_for(step_size) == trajectory_length.MAX_NUM_STEPS


def test_bad_max_num_steps_raises():
  with pytest.raises(ValueError, match="max_num_steps"):
    trajectory_length.num_steps_for(0.5, max_num_steps=0)


def test_the_rule_s_trajectory_correlates_z_as_a_jittered_quarter_period_rotation():
  """On N(0, 1) a leapfrog step of size e rotates (z, v) by w(e) = arccos(1 - e^2/2) in
  phase: after K steps the lag-1 correlation of z is cos(K w(e)), and of z^2 (the
  rotation keeping z^2 + v^2, near enough at h = 0.3, acceptance ~0.99) cos^2(K w(e)).
  The oracle averages those closed forms over the jitter u ~ U(0.5, 1.5) on a fine grid;
  the sampled transitions (K = ceil(pi/2 / h) steps of h u, Metropolis-corrected) must
  match within 0.03 (200,000 pairs: standard errors ~0.005). Both correlations are far
  from a half period's -1 and +1."""
  h = 0.3
  k = trajectory_length.num_steps_for(h)
  u = np.linspace(0.5, 1.5, 100_001)
  angle = k * np.arccos(1.0 - (h * u) ** 2 / 2.0)
  oracle_z, oracle_z2 = np.mean(np.cos(angle)), np.mean(np.cos(angle) ** 2)

  def transition(z, key):
    k_v, k_u, k_a = jax.random.split(key, 3)
    v = jax.random.normal(k_v, z.shape)
    eps = h * jax.random.uniform(k_u, z.shape, minval=0.5, maxval=1.5)
    z1, v1 = z, v
    for _ in range(k):
      v1 = v1 - 0.5 * eps * z1
      z1 = z1 + eps * v1
      v1 = v1 - 0.5 * eps * z1
    accept = jnp.log(jax.random.uniform(k_a, z.shape)) < 0.5 * (z**2 + v**2 - z1**2 - v1**2)
    z_next = jnp.where(accept, z1, z)
    return z_next, z_next

  z0 = jax.random.normal(jax.random.key(0), (4096,))
  _, zs = jax.lax.scan(transition, z0, jax.random.split(jax.random.key(1), 50))
  before, after = np.asarray(zs[:-1]).ravel(), np.asarray(zs[1:]).ravel()
  np.testing.assert_allclose(np.corrcoef(before, after)[0, 1], oracle_z, atol=0.03)
  np.testing.assert_allclose(np.corrcoef(before**2, after**2)[0, 1], oracle_z2, atol=0.03)
  assert abs(oracle_z) < 0.3 and oracle_z2 < 0.3


@pytest.mark.parametrize("step_size, widest_variance, expected", [
    (0.4, 4.0, 8), (0.2, 2.25, 12), (0.5, 9.0, 10), (0.1, 4.0, 16)])
def test_the_widest_direction_lengthens_the_trajectory_by_its_sd(step_size, widest_variance,
                                                                 expected):
  """K reaches the quarter period of the widest whitened direction, sd sqrt(lambda)."""
  k = trajectory_length.num_steps_for(step_size, widest_variance=widest_variance)
  assert k == expected
  length = math.sqrt(widest_variance) * math.pi / 2
  assert k == trajectory_length.MAX_NUM_STEPS or (k - 1) * step_size < length <= k * step_size


@pytest.mark.parametrize("widest_variance", [1.0, 0.5, 0.0, float("nan"), float("inf")])
def test_a_widest_variance_below_one_or_not_finite_leaves_the_quarter_period(widest_variance):
  assert trajectory_length.num_steps_for(0.4, widest_variance=widest_variance) == 4
