"""``sampler_baselines.chees_hmc`` on a tiny Gaussian: shapes, finiteness, gradient counts."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import sampler_baselines  # benchmarks/ is on sys.path (tests/conftest.py)


@pytest.mark.system  # ~7 s
def test_chees_hmc_returns_draws_and_gradient_counts():
  scales = jnp.array([1.0, 3.0])

  def logdensity_fn(x):
    return -0.5 * jnp.sum((x / scales) ** 2)

  chains, warmup, samples = 4, 20, 10
  positions = jax.random.uniform(jax.random.key(0), (chains, 2), minval=-2.0, maxval=2.0)
  run = sampler_baselines.chees_hmc(logdensity_fn, jax.random.key(1), positions, warmup, samples)
  assert run["draws"].shape == (samples, chains, 2)
  assert np.isfinite(run["draws"]).all()
  assert run["grads_per_transition"] >= 1
  assert run["warmup_grads"].shape == (chains,)
  # every warm-up step takes at least one integration step per chain
  assert (run["warmup_grads"] >= warmup).all()
  assert run["step_size"] > 0 and run["num_leapfrog_steps"] > 0
  assert 0 <= run["acceptance"] <= 1
