"""The dense whitening: its maps against float64 oracles, and a correlated Gaussian sampled
through it."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from metaoptax import l2hmc
from metaoptax.l2hmc import whitening as w


def _covariance(dim=4):
  a = np.asarray(jax.random.normal(jax.random.key(0), (dim, dim)), np.float64)
  return a @ a.T + 0.5 * np.eye(dim)


def test_dense_maps_invert_each_other_and_the_gradient_is_the_chain_rule():
  with jax.enable_x64(True):
    cov = jnp.asarray(_covariance(), jnp.float64)
    location = jnp.asarray([1.0, -2.0, 0.5, 3.0])
    found = w.dense_whitening(location, cov)
    np.testing.assert_allclose(found.cholesky @ found.cholesky.T, cov, rtol=1e-12)
    np.testing.assert_allclose(found.scale, np.sqrt(np.diag(cov)), rtol=1e-12)
    x = jnp.asarray([[0.3, 0.1, -0.7, 2.0], [1.0, 1.0, 1.0, 1.0]])
    np.testing.assert_allclose(w.from_whitened(found, w.to_whitened(found, x)), x, rtol=1e-12)
    # the whitened coordinates of N(location, cov) are N(0, I): z = L^{-1}(x - mu)
    np.testing.assert_allclose(found.inverse_cholesky @ cov @ found.inverse_cholesky.T,
                               np.eye(4), atol=1e-12)
    logdensity_fn = lambda x: -0.5 * jnp.sum(jnp.sin(x) * x**2) + x[0] * x[2]
    z = w.to_whitened(found, x[0])
    grad_z = jax.grad(w.whitened_logdensity(logdensity_fn, found))(z)  # autodiff oracle
    grad_x = jax.grad(logdensity_fn)(x[0])
    np.testing.assert_allclose(w.gradient_to_whitened(found, grad_x), grad_z, rtol=1e-12)
    np.testing.assert_allclose(w.gradient_from_whitened(found, grad_z), grad_x, rtol=1e-12)


def test_the_diagonal_maps_are_unchanged():
  diagonal = w.Whitening(jnp.asarray([1.0, 2.0]), jnp.asarray([0.5, 4.0]))
  x = jnp.asarray([2.0, 10.0])
  np.testing.assert_allclose(w.to_whitened(diagonal, x), [2.0, 2.0])
  np.testing.assert_allclose(w.gradient_to_whitened(diagonal, x), [1.0, 40.0])


@pytest.mark.slow
@pytest.mark.system  # ~7 s
def test_a_dense_warm_up_whitens_a_correlated_gaussian_and_the_sampler_keeps_it():
  cov = np.asarray([[1.0, 0.99 * 3.0], [0.99 * 3.0, 9.0]])  # correlation 0.99
  target = l2hmc.targets.gaussian(jnp.asarray(cov, jnp.float32))
  positions = jax.random.normal(jax.random.key(0), (32, 2))
  found = jax.jit(lambda k, x: l2hmc.warmup(k, target.logdensity_fn, x, num_iterations=200,
                                            metric="dense"))(jax.random.key(1), positions)
  assert found.whitening.cholesky is not None
  # the estimate of the covariance (32 chains, 40 autocorrelated draws each): within 25 %
  np.testing.assert_allclose(found.whitening.cholesky @ found.whitening.cholesky.T, cov,
                             rtol=0.25, atol=0.1)
  config = l2hmc.L2HMCConfig(dim=2)
  params = l2hmc.init_params(jax.random.key(2), config, step_size=jnp.full((2,), 0.5))
  sampler = l2hmc.l2hmc(target.logdensity_fn, config, params,
                        l2hmc.make_masks(jax.random.key(3), config), found.whitening)
  states = jax.vmap(sampler.init)(found.positions)
  draws, info = jax.jit(lambda k, s: l2hmc.sample_chains(k, sampler, s, 500))(
      jax.random.key(4), states)
  draws = np.asarray(draws).reshape(-1, 2)
  assert float(jnp.mean(info.acceptance_rate)) > 0.5
  # 16,000 draws: the covariance within ~5 Monte Carlo errors
  np.testing.assert_allclose(np.cov(draws.T), cov, rtol=0.1, atol=0.05)


def test_bad_metric_raises():
  with pytest.raises(ValueError, match="metric"):
    l2hmc.warmup(jax.random.key(0), lambda x: -jnp.sum(x**2), jnp.zeros((4, 2)), metric="x")
  with pytest.raises(ValueError, match="metric"):
    l2hmc.init_training(jax.random.key(0), l2hmc.Target("t", 2, lambda x: -jnp.sum(x**2)),
                        l2hmc.L2HMCConfig(reflection=True),
                        l2hmc.TrainingConfig(metric="dense"))
