"""L2HMC with blackjax: the kernel in blackjax's inference loop, our ESS against blackjax's.

``metaoptax.l2hmc.ess.geyer_ess`` against ``blackjax.diagnostics.effective_sample_size``
(blackjax 1.7.1, in float64; ours returns a fraction of the samples and the
minimum over dimensions, blackjax a count per dimension with the chains on axis
0). Measured agreement:

* Equal to 1e-14 (relative) wherever a pair of autocorrelations turns
  non-positive within the run, as Geyer's sequence needs: AR(1) chains with
  phi in {-0.7, -0.2, 0, 0.5, 0.9} (3 seeds x (samples, chains) in {(500, 4),
  (1000, 8), (2000, 200)}), and sampler output that mixes within the run (L2HMC
  with acting networks and HMC at an antithetic step size on the rough well,
  the mixture's x^2).
* Within 1e-3 where the chains are slower than the run (no pair turns
  non-positive; blackjax then subtracts the last even lag): AR(1) with
  phi = 0.99 (measured up to 9.3e-4), L2HMC's x on the mixture (chains stay in
  their mode) and on the correlated Gaussian, 1,000 samples (measured 2e-4 to 5e-4).
* Within 2 % on antithetic AR(1) chains (phi = -0.5) in 2 of 9 runs (measured
  1.3 % and 3.7e-4): the last even lag exceeded the monotone sequence's last
  pair, and blackjax clips it where Stan (and ours) adds it as is.
* blackjax in its default float32: within 1e-4 (measured < 1e-5) of ours where
  float64 agrees to 1e-12.
* Chains that never move: blackjax reports 0, ours 1 / (2 n - 1) per chain.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import scipy.signal

from metaoptax import l2hmc
from tests.l2hmc.paper import paper_config, paper_training

blackjax = pytest.importorskip("blackjax")

NUM_STEPS = 5


def acting_sampler(target, seed=0):
  """An L2HMC sampler whose networks are far from zero (as after training)."""
  config = paper_config(dim=target.dim, num_steps=NUM_STEPS, step_sizes="per_step",
                             init_step_size=0.15)
  params = l2hmc.init_params(jax.random.key(seed), config)
  noise = optax.tree_utils.tree_random_like(jax.random.key(seed + 1), params.networks)
  params = params._replace(networks=jax.tree.map(lambda a, r: a + 0.2 * r, params.networks,
                                                 noise))
  masks = l2hmc.make_masks(jax.random.key(seed + 2), config)
  return l2hmc.l2hmc(target.logdensity_fn, config, params, masks)


def scanned(sampler, keys, state):
  """The plain loop: ``lax.scan`` of ``sampler.step`` over ``keys``."""

  def one(state, key):
    state, info = sampler.step(key, state)
    return state, (state, info)

  return jax.lax.scan(one, state, keys)


def assert_trees_equal(a, b):
  for u, w in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
    np.testing.assert_array_equal(u, w)


@pytest.mark.system  # a training or sampling run (6-10 s): CI's second command
def test_kernel_runs_in_blackjax_inference_loop_bit_for_bit():
  target = l2hmc.targets.strongly_correlated_gaussian()
  sampler = acting_sampler(target)
  key, num_steps = jax.random.key(3), 60
  state = sampler.init(jnp.array([1.0, -2.0]))

  final, (states, infos) = blackjax.util.run_inference_algorithm(
      key, sampler, num_steps, initial_state=state)
  plain = jax.jit(functools.partial(scanned, sampler))
  expected_final, (expected_states, expected_infos) = plain(jax.random.split(key, num_steps),
                                                            state)
  assert_trees_equal((final, states, infos), (expected_final, expected_states, expected_infos))
  assert 0.05 < float(infos.acceptance_rate.mean()) < 1.0  # a real chain: moves, rejects
  assert float(jnp.abs(jnp.diff(states.position, axis=0)).max()) > 0.1
  np.testing.assert_array_equal(infos.num_integration_steps, NUM_STEPS)

  # from a position: blackjax splits off a key for ``init`` (ours ignores it)
  final, (states, _) = blackjax.util.run_inference_algorithm(
      key, sampler, num_steps, initial_position=jnp.array([1.0, -2.0]))
  expected_final, (expected_states, _) = plain(
      jax.random.split(jax.random.split(key)[0], num_steps), state)
  assert_trees_equal((final, states), (expected_final, expected_states))

  # vmapped over chains, the way blackjax runs several
  positions = jax.random.normal(jax.random.key(4), (4, 2))
  chain_keys = jax.random.split(key, 4)
  run = lambda k, x: blackjax.util.run_inference_algorithm(
      k, sampler, num_steps, initial_state=sampler.init(x))[1][0].position
  chain = lambda k, x: scanned(sampler, jax.random.split(k, num_steps), sampler.init(x))[1][0]
  np.testing.assert_array_equal(jax.vmap(run)(chain_keys, positions),
                                jax.jit(jax.vmap(chain))(chain_keys, positions).position)


def blackjax_fraction(samples, x64=True):
  """blackjax's ESS as ours is: a fraction of the samples, the minimum over dimensions."""
  num_samples, chains = samples.shape[:2]
  with jax.enable_x64(x64):
    per_dim = jax.jit(blackjax.diagnostics.effective_sample_size)(
        jnp.asarray(np.swapaxes(samples, 0, 1)))  # chains on axis 0, samples on axis 1
    return float(np.min(np.asarray(per_dim))) / (num_samples * chains)


def ar1_chains(phi, num_samples, chains, dim, seed):
  """Stationary AR(1) chains with unit variance (ESS fraction (1 - phi)/(1 + phi))."""
  rng = np.random.default_rng(seed)
  noise = rng.standard_normal((num_samples, chains, dim))
  noise[0] /= np.sqrt(1 - phi**2)  # start in the stationary distribution
  return scipy.signal.lfilter([np.sqrt(1 - phi**2)], [1.0, -phi], noise, axis=0)


# -0.5, -0.2 and 0.5 are slow cases (system tier) between the fast ones
@pytest.mark.parametrize("phi", [-0.7, 0.0, 0.9, 0.99] + [
    pytest.param(phi, marks=pytest.mark.system) for phi in (-0.5, -0.2, 0.5)])
def test_geyer_ess_agrees_with_blackjax_on_ar1(phi):
  relative = []
  for num_samples, chains in ((500, 4), (1000, 8), (2000, 200)):
    for seed in range(3):
      samples = ar1_chains(phi, num_samples, chains, 3, seed)
      ours = l2hmc.ess.geyer_ess(samples)
      relative.append(abs(ours / blackjax_fraction(samples) - 1))
      if relative[-1] < 1e-12:  # and in float32, as blackjax runs by default
        assert abs(ours / blackjax_fraction(samples, x64=False) - 1) < 1e-4
      if chains == 200 and abs(phi) <= 0.9:  # long enough for the minimum over 3 dimensions
        exact = (1 - phi) / (1 + phi)
        assert ours == pytest.approx(min(exact, np.log10(num_samples * chains)), rel=0.2)
  relative = np.array(relative)
  if phi == 0.99:  # slower than the shorter runs: blackjax subtracts the last even lag
    assert relative.max() < 1e-3
  elif phi == -0.5:  # antithetic: blackjax clips the last even lag in 2 of 9 runs
    assert relative.max() < 0.02 and np.sum(relative > 1e-12) <= 2
  else:
    assert relative.max() < 1e-12


# (target, HMC step size or None for L2HMC, tolerance on x, on x^2): 1e-3 where the
# chains are slower than the run (no pair of autocorrelations turns non-positive)
SAMPLER_OUTPUT = [("rough_well", None, 1e-12, 1e-12),
                  ("rough_well", 0.3, 1e-12, 1e-12),  # antithetic: half an oscillation
                  ("mixture", None, 1e-3, 1e-12),  # x: the chains stay in their mode
                  ("correlated", None, 1e-3, 1e-3)]


@pytest.mark.parametrize("name,hmc_step_size,tolerance_x,tolerance_x2", SAMPLER_OUTPUT)
def test_geyer_ess_agrees_with_blackjax_on_sampler_output(name, hmc_step_size, tolerance_x,
                                                          tolerance_x2):
  target = l2hmc.targets.all_targets()[name]
  if hmc_step_size is None:
    sampler = acting_sampler(target)
  else:
    config = paper_config(dim=target.dim, num_steps=10, use_networks=False,
                               init_step_size=hmc_step_size)
    sampler = l2hmc.l2hmc(target.logdensity_fn, config,
                          l2hmc.init_params(jax.random.key(0), config),
                          l2hmc.make_masks(jax.random.key(1), config))
  positions = jax.random.normal(jax.random.key(5), (16, target.dim))
  draws, _ = jax.jit(lambda k, x: l2hmc.sample_chains(k, sampler, jax.vmap(sampler.init)(x), 1000))(
      jax.random.key(6), positions)
  draws = np.asarray(draws, np.float64)
  for samples, tolerance in ((draws, tolerance_x), (draws**2, tolerance_x2)):
    ours = l2hmc.ess.geyer_ess(samples)
    assert ours == pytest.approx(blackjax_fraction(samples), rel=tolerance)
  if hmc_step_size is not None:  # antithetic in x: more effective samples than samples
    assert l2hmc.ess.geyer_ess(draws) > 1.0
