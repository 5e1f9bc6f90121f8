"""The reflection step (L2HMCConfig(reflection=True)): x -> 2 mu - x by Metropolis, then the
leapfrog move.

Oracles: an unequal mixture of two Gaussians at -2 and +2 (weights 0.3 / 0.7, variance 0.1,
exact draws). The share of transitions that change side is the exact Metropolis acceptance
of the reflection, 0.7 min(1, 3/7) + 0.3 = 0.6 (within 0.03; the leapfrog move, step 0.1,
does not cross the ~20-nat barrier), and after a transition from exact draws the weights and
the moments of x and x^2 stay within 5 standard errors (an acceptance of 1 would swap the
weights to 0.7 / 0.3). The reflection sampler's start: the exact-rotation step sizes against
the closed-form rotation in float64, the warm-up's midpoint location against the mixture's
centre from an uneven split of the chains, and their wiring in ``init_training``.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from metaoptax import l2hmc
from tests.l2hmc.paper import paper_config, paper_training

WEIGHTS, MEANS, VARIANCE = jnp.array([0.3, 0.7]), jnp.array([[-2.0, 0.0], [2.0, 0.0]]), 0.1


def _logdensity(x):
  sq = jnp.sum((x - MEANS) ** 2, axis=-1)
  return jax.nn.logsumexp(-0.5 * sq / VARIANCE + jnp.log(WEIGHTS))


def _draws(key, n):
  k_c, k_x = jax.random.split(key)
  component = jax.random.bernoulli(k_c, WEIGHTS[1], (n,)).astype(jnp.int32)
  return MEANS[component] + math.sqrt(VARIANCE) * jax.random.normal(k_x, (n, 2))


def test_reflection_crosses_at_the_metropolis_rate_and_keeps_the_weights():
  config = paper_config(dim=2, num_steps=3, use_networks=False, reflection=True)
  params = l2hmc.init_params(jax.random.key(0), config, step_size=0.1)
  sampler = l2hmc.l2hmc(_logdensity, config, params, l2hmc.make_masks(jax.random.key(1),
                                                                      config))
  n = 20_000
  draws = _draws(jax.random.key(2), n)

  @jax.jit
  def move(key, positions):
    states, info = jax.vmap(sampler.step)(jax.random.split(key, n),
                                          jax.vmap(sampler.init)(positions))
    return states.position, info.num_gradient_evaluations

  moved, grads = move(jax.random.key(3), draws)
  crossed = float(jnp.mean(jnp.sign(moved[:, 0]) != jnp.sign(draws[:, 0])))
  np.testing.assert_allclose(crossed, 0.7 * 3 / 7 + 0.3, atol=0.03)
  positive = float(jnp.mean(moved[:, 0] > 0))
  np.testing.assert_allclose(positive, 0.7, atol=5 * math.sqrt(0.21 / n))
  mean_x0, second_x0 = 0.8, 4.0 + VARIANCE  # E x0 = 0.7*2 - 0.3*2; E x0^2 = 4 + 0.1
  sd_x0 = math.sqrt(second_x0 - mean_x0**2)
  np.testing.assert_allclose(float(moved[:, 0].mean()), mean_x0, atol=5 * sd_x0 / math.sqrt(n))
  np.testing.assert_allclose(float((moved[:, 1] ** 2).mean()), VARIANCE,
                             atol=5 * math.sqrt(2 * VARIANCE**2 / n))
  assert int(grads[0]) == 4  # K + 1: the reflected point's log density and gradient


def test_reflection_is_through_the_whitening_location():
  """With a whitening of location mu, x -> 2 mu - x: the mixture shifted by mu crosses alike."""
  shift = jnp.array([5.0, -3.0])
  config = paper_config(dim=2, num_steps=1, use_networks=False, reflection=True)
  params = l2hmc.init_params(jax.random.key(0), config, step_size=1e-4)
  whitening = l2hmc.whitening.Whitening(shift, jnp.ones(2))
  sampler = l2hmc.l2hmc(lambda x: _logdensity(x - shift), config, params,
                        jnp.zeros((1, 2)), whitening)
  state = sampler.init(shift + jnp.array([-2.0, 0.1]))  # the light mode's centre
  state, _ = jax.jit(sampler.step)(jax.random.key(0), state)  # accepted with probability 1
  np.testing.assert_allclose(state.position, shift + jnp.array([2.0, -0.1]), atol=1e-3)


def test_rotation_step_sizes_turn_a_gaussian_exactly():
  """K leapfrog steps with ``rotation_step_sizes`` on U(z) = |z|^2/2 (float64) are the exact
  rotation by K theta (to 1e-12), a quarter period at the cap (z_K = v), energy kept; the
  equal step sizes of the same angle turn alike but change the energy (K = 1: by more than
  0.1 on this start)."""
  with jax.enable_x64(True):
    z = jnp.array([0.7, -1.3, 2.0])
    v = jnp.array([1.1, 0.4, -0.9])
    for num_steps, h in ((1, 3.0), (2, 0.5), (3, 10.0)):  # capped, below the cap, capped
      eps_x, eps_v = l2hmc.rotation_step_sizes(jnp.float64(h), num_steps)
      theta = min(2 * math.asin(min(h / 2, 1.0)), math.pi / 2 / num_steps)
      config = paper_config(dim=3, num_steps=num_steps, use_networks=False)
      params = l2hmc.L2HMCParams({}, jnp.log(eps_x)[None], jnp.log(eps_v)[None])
      x_k, v_k, logdensity, _, _ = l2hmc.leapfrog(
          config, params, jnp.zeros((num_steps, 3)), lambda q: -0.5 * q @ q, z, v,
          -0.5 * z @ z, -z, 1)
      angle = num_steps * theta
      np.testing.assert_allclose(x_k, math.cos(angle) * z + math.sin(angle) * v, atol=1e-12)
      np.testing.assert_allclose(v_k, -math.sin(angle) * z + math.cos(angle) * v, atol=1e-12)
      np.testing.assert_allclose(-logdensity + 0.5 * v_k @ v_k, 0.5 * (z @ z + v @ v),
                                 atol=1e-12)
    equal = jnp.log(jnp.float64(math.sqrt(2.0)))[None]  # K = 1, theta = pi/2, equal steps
    x_1, v_1, logdensity, _, _ = l2hmc.leapfrog(
        paper_config(dim=3, num_steps=1, use_networks=False),
        l2hmc.L2HMCParams({}, equal, equal), jnp.zeros((1, 3)), lambda q: -0.5 * q @ q, z, v,
        -0.5 * z @ z, -z, 1)
    np.testing.assert_allclose(x_1, math.sqrt(2.0) * v, atol=1e-12)
    assert abs(float(-logdensity + 0.5 * v_1 @ v_1 - 0.5 * (z @ z + v @ v))) > 0.1


@pytest.mark.system  # a warm-up of 300 iterations on 32 chains (~5 s): CI's second command
def test_within_chain_scale_and_midpoint_of_an_uneven_split():
  """Warm-up chains that each stay in one mode, started 20 / 12 between the modes of the
  equal mixture (x0 = +-2, variance 0.1): the within-chain sd is the modes' own,
  sqrt(0.1) = 0.316, in both coordinates (within 15 %: 32 chains, 60 autocorrelated draws
  each), where the pooled sd of x0 is the modes' spread, sqrt(4.1) = 2.02; the midpoint of
  the chains' means is the centre, x0 = 0, within 0.08 (a mode's sd is 0.32; measured over
  8 keys: at most 0.038 off), where their pooled mean is the split's,
  2 (20 - 12) / 32 = 0.5 (measured: 0.47-0.51)."""
  target = l2hmc.targets.mixture_of_gaussians()
  start = jnp.stack([jnp.where(jnp.arange(32) < 20, 2.0, -2.0), jnp.zeros(32)], 1)
  start = start + math.sqrt(0.1) * jax.random.normal(jax.random.key(0), (32, 2))
  found = jax.jit(lambda x, k: l2hmc.warmup(k, target.logdensity_fn, x, num_steps=5,
                                            num_iterations=300, scales="within",
                                            location="midpoint"))(start, jax.random.key(1))
  np.testing.assert_allclose(found.whitening.scale, [math.sqrt(0.1)] * 2, rtol=0.15)
  np.testing.assert_allclose(found.whitening.location, [0.0, 0.0], atol=0.08)
  assert float(jnp.min(found.positions[:, 0])) < -1.0 < 1.0 < float(jnp.max(found.positions[:, 0]))


@pytest.mark.system  # a warm-up's compilation (~9 s on the shared cores)
def test_init_training_starts_the_reflection_sampler_at_an_exact_rotation():
  """With ``reflection=True`` the step sizes start as an exact-rotation pair,
  eps_v = 2 tan(asin(eps_x) / 2) (to 1e-5; equal step sizes fail it), at most the
  quarter-period angle over K (K = 1: eps_x <= 1), and the whitening's location (the
  reflection's centre) is near the mixture's centre (within 0.15 of 0)."""
  target = l2hmc.targets.mixture_of_gaussians()
  config = paper_config(dim=2, num_steps=1, use_networks=False, hidden=1,
                             step_sizes="per_step", per_coordinate=True, reflection=True)
  state = l2hmc.init_training(jax.random.key(0), target, config, paper_training(
      num_chains=16, objective="squares_coordinates", warmup_iterations=100))
  eps_x = np.exp(np.asarray(state.params.log_step_size_x))
  eps_v = np.exp(np.asarray(state.params.log_step_size_v))
  np.testing.assert_allclose(eps_v, 2 * np.tan(np.arcsin(eps_x) / 2), rtol=1e-5)
  assert np.all(eps_x <= 1.0 + 1e-6) and np.all(eps_v > eps_x)
  np.testing.assert_allclose(state.whitening.location[0], 0.0, atol=0.15)
