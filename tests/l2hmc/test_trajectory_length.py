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


@pytest.mark.parametrize("length, jitter", [(1.0, 0.5), (3.4, 0.23), (np.pi, 0.0),
                                            (4.35, 0.19)])
def test_square_autocorrelation_is_the_jittered_rotation_s(length, jitter):
  """Oracle: exact dynamics on N(0, 1), z' = z cos(t u) + v sin(t u), u ~ U(1 - j, 1 + j),
  sampled (float64, 400,000 triples): the correlation of z'^2 with z^2 within 0.01 (standard
  error ~0.002); and the closed form against the mean of cos^2(t u) on a fine grid (1e-4)."""
  rng = np.random.default_rng(0)
  n = 400_000
  z, v = rng.standard_normal(n), rng.standard_normal(n)
  t = length * rng.uniform(1.0 - jitter, 1.0 + jitter, n)
  moved = z * np.cos(t) + v * np.sin(t)
  rho = trajectory_length.square_autocorrelation(length, jitter)
  assert abs(np.corrcoef(moved**2, z**2)[0, 1] - rho) < 0.01
  u = np.linspace(1.0 - jitter, 1.0 + jitter, 200_001)  # the grid's mean: error ~1e-5
  assert abs(np.mean(np.cos(length * u) ** 2) - rho) < 1e-4
  assert 0.0 <= rho <= 1.0


def test_num_steps_for_spread_takes_the_best_k_for_unit_squares_from_the_widest_quarter():
  """At s = 2.15 the widest coordinate's quarter period is near a unit coordinate's half
  period (rho ~ 0.7): the rule lengthens the trajectory to the K, among those from the
  widest quarter period to the cap, with the most effective draws of z^2 per gradient
  (brute force over K with the closed form), with the jitter scaled by K_s / K."""
  h, s, j = 0.272, 2.15, 0.5
  shortest = trajectory_length.num_steps_for(h / s)
  k, jitter = trajectory_length.num_steps_for_spread(h, s, j)

  def per_gradient(k):
    rho = trajectory_length.square_autocorrelation(k * h, j / s * shortest / k)
    return (1 - rho) / ((1 + rho) * k)

  candidates = range(shortest, trajectory_length.MAX_NUM_STEPS + 1)
  assert k == max(candidates, key=per_gradient) and k > shortest
  np.testing.assert_allclose(jitter, j / s * shortest / k, rtol=1e-12)
  # unit squares mix at least twice as well per gradient as on the shortest K
  assert per_gradient(k) > 2 * per_gradient(shortest)


@pytest.mark.parametrize("spread", [1.0, 0.5, float("nan")])
def test_num_steps_for_spread_without_a_wide_coordinate_starts_at_the_unit_quarter(spread):
  """s <= 1 (or not finite) counts as 1: K starts from the unit quarter period, the jitter
  at most j (a quarter period's K stays where it mixes unit squares best)."""
  k, jitter = trajectory_length.num_steps_for_spread(0.4, spread, 0.5)
  assert k == trajectory_length.num_steps_for(0.4) and jitter == 0.5


def test_num_steps_for_spread_past_the_cap_keeps_the_cap_and_the_jitter_over_s():
  assert trajectory_length.num_steps_for_spread(0.05, 3.0, 0.5) == (
      trajectory_length.MAX_NUM_STEPS, 0.5 / 3.0)
