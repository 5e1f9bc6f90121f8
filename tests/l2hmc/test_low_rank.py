"""The diagonal-plus-low-rank whitening: its maps and log-det against a dense float64 oracle,
its fit against a Gaussian's covariance, and the warm-up choosing it."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from metaoptax import l2hmc
from metaoptax.l2hmc import low_rank
from metaoptax.l2hmc import training as training_module
from metaoptax.l2hmc import whitening as w


def _low_rank_whitening(dim=6, rank=2):
  rng = np.random.default_rng(0)
  vectors = np.linalg.qr(rng.standard_normal((dim, rank)))[0]
  return w.Whitening(jnp.asarray(rng.standard_normal(dim)),
                     jnp.asarray(np.exp(rng.standard_normal(dim))),
                     vectors=jnp.asarray(vectors), eigenvalues=jnp.asarray([9.0, 0.2][:rank]))


def _dense_factor(found):
  """The oracle: L = diag(sigma) (I + U (Lambda^1/2 - I) U^T), built explicitly."""
  u, lam = np.asarray(found.vectors), np.asarray(found.eigenvalues)
  inner = np.eye(u.shape[0]) + u @ np.diag(np.sqrt(lam) - 1.0) @ u.T
  return np.diag(np.asarray(found.scale)) @ inner


def test_low_rank_maps_and_log_det_match_the_dense_matrix():
  with jax.enable_x64(True):
    found = _low_rank_whitening()
    factor = _dense_factor(found)
    mu = np.asarray(found.location)
    x = np.random.default_rng(1).standard_normal((3, 6))
    z = np.linalg.solve(factor, (x - mu).T).T
    # float64 throughout: agreement to rounding (1e-12 relative)
    np.testing.assert_allclose(w.to_whitened(found, jnp.asarray(x)), z, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(w.from_whitened(found, jnp.asarray(z)), x, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(w.log_det_jacobian(found), np.linalg.slogdet(factor)[1],
                               rtol=1e-12)
    # L L^T = diag(sigma) (I + U (Lambda - I) U^T) diag(sigma)
    u, lam, sigma = (np.asarray(a) for a in (found.vectors, found.eigenvalues, found.scale))
    covariance = np.diag(sigma) @ (np.eye(6) + u @ np.diag(lam - 1.0) @ u.T) @ np.diag(sigma)
    np.testing.assert_allclose(factor @ factor.T, covariance, rtol=1e-12, atol=1e-12)
    logdensity_fn = lambda x: -0.5 * jnp.sum(jnp.sin(x) * x**2) + x[0] * x[2]
    grad_z = jax.grad(w.whitened_logdensity(logdensity_fn, found))(jnp.asarray(z[0]))  # autodiff
    grad_x = jax.grad(logdensity_fn)(jnp.asarray(x[0]))
    np.testing.assert_allclose(w.gradient_to_whitened(found, grad_x), grad_z, rtol=1e-12)
    np.testing.assert_allclose(w.gradient_from_whitened(found, grad_z), grad_x, rtol=1e-12)


def test_log_det_of_the_diagonal_and_dense_whitenings():
  with jax.enable_x64(True):
    cov = np.asarray([[4.0, 1.0], [1.0, 2.0]])
    dense = w.dense_whitening(jnp.zeros(2), jnp.asarray(cov))
    np.testing.assert_allclose(w.log_det_jacobian(dense), 0.5 * np.linalg.slogdet(cov)[1],
                               rtol=1e-12)
    diagonal = w.Whitening(jnp.zeros(2), jnp.asarray([0.5, 4.0]))
    np.testing.assert_allclose(w.log_det_jacobian(diagonal), np.log(2.0), rtol=1e-12)


def test_spd_geometric_mean_solves_m_b_m_equals_a():
  with jax.enable_x64(True):
    rng = np.random.default_rng(2)
    a, b = (m @ m.T + np.eye(5) for m in rng.standard_normal((2, 5, 5)))
    mean = np.asarray(low_rank.spd_geometric_mean(jnp.asarray(a), jnp.asarray(b)))
    np.testing.assert_allclose(mean @ b @ mean, a, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(mean, mean.T, atol=1e-12)
    assert np.all(np.linalg.eigvalsh(mean) > 0)


def _gaussian_draws(covariance, draws=64, chains=32, seed=3):
  """Independent draws of N(0, covariance) and their gradients, (draws, chains, dim)."""
  dim = covariance.shape[0]
  rng = np.random.default_rng(seed)
  x = rng.standard_normal((draws, chains, dim)) @ np.linalg.cholesky(covariance).T
  return jnp.asarray(x), jnp.asarray(-x @ np.linalg.inv(covariance))


def _spiked_covariance(dim=50, spike=25.0):
  """Scales log-spaced over 1e-1 .. 1e1, and correlation along one direction (eigenvalue
  ``spike`` in the scaled space)."""
  u = np.ones(dim) / np.sqrt(dim)
  sd = np.logspace(-1, 1, dim)
  return np.diag(sd) @ (np.eye(dim) + (spike - 1.0) * np.outer(u, u)) @ np.diag(sd)


def test_the_fit_recovers_a_spiked_covariance_and_masks_the_rest():
  with jax.enable_x64(True):
    covariance = _spiked_covariance()
    x, g = _gaussian_draws(covariance)
    found = jax.jit(low_rank.fisher_low_rank)(jax.random.key(0), x, g)
    factor = _dense_factor(found)
    # 1,024 independent draws per half: the covariance in the fit's whitened coordinates is
    # the identity within 30 % in every direction (its eigenvalues; sampling error ~10 %)
    eigenvalues = np.linalg.eigvalsh(np.linalg.solve(factor, np.linalg.solve(factor,
                                                                              covariance).T))
    assert eigenvalues.min() > 0.7 and eigenvalues.max() < 1.3
    # one direction confirmed, within 10 % of the spike's variance in the fit's scaled
    # coordinates (x_i / sigma_i: sigma_i = sd_i 1.217^(1/2) / 0.990^(1/2), so 25 / 1.229);
    # the others masked to exactly 1
    lam = np.sort(np.asarray(found.eigenvalues))
    np.testing.assert_allclose(lam[-1], 25.0 / 1.229, rtol=0.1)
    np.testing.assert_array_equal(lam[:-1], 1.0)


def test_the_fit_of_an_independent_gaussian_is_diagonal():
  with jax.enable_x64(True):
    # 500 coordinates and 1,024 draws per half: the sample covariance's leading eigenvalues
    # are noise near (1 + sqrt(500 / 1024))^2 = 2.9, which the held-out half masks
    covariance = np.diag(np.logspace(-1, 1, 500) ** 2)
    x, g = _gaussian_draws(covariance)
    found = jax.jit(low_rank.fisher_low_rank)(jax.random.key(0), x, g)
    np.testing.assert_array_equal(found.eigenvalues, 1.0)
    np.testing.assert_allclose(found.scale, np.sqrt(np.diag(covariance)), rtol=0.1)


@pytest.mark.system  # a warm-up above 256 coordinates (~13 s); the fit's oracles stay
def test_the_warm_up_chooses_low_rank_where_the_correlation_is_there():
  covariance = _spiked_covariance(dim=40)
  target = l2hmc.targets.gaussian(jnp.asarray(covariance, jnp.float32))
  positions = jax.random.normal(jax.random.key(0), (32, 40))
  run = jax.jit(lambda k, x, f: l2hmc.warmup(k, f, x, num_iterations=200, metric="low_rank"),
                static_argnums=2)
  found = run(jax.random.key(1), positions, target.logdensity_fn)
  assert found.whitening.vectors is not None
  lam = np.sort(np.asarray(found.whitening.eigenvalues))
  # 32 chains' autocorrelated draws: the spike of 25 within a factor of 2
  assert 12.5 < lam[-1] < 50.0
  independent = l2hmc.targets.gaussian(jnp.asarray(np.diag(np.diag(covariance)), jnp.float32))
  found = run(jax.random.key(1), positions, independent.logdensity_fn)
  np.testing.assert_array_equal(found.whitening.eigenvalues, 1.0)  # the diagonal kept
  np.testing.assert_allclose(found.whitening.scale, np.sqrt(np.diag(covariance)), rtol=0.3)


def test_auto_metric_is_low_rank_above_the_dense_limit():
  big = training_module.DENSE_MAX_DIM + 1
  auto = l2hmc.TrainingConfig()
  assert training_module._metric(l2hmc.L2HMCConfig(dim=big), auto) == "low_rank"
  assert training_module._metric(l2hmc.L2HMCConfig(dim=8), auto) == "dense"
  assert training_module._metric(l2hmc.L2HMCConfig(dim=big, reflection=True), auto) == (
      "diagonal")
  with pytest.raises(ValueError, match="low_rank"):
    training_module._metric(l2hmc.L2HMCConfig(dim=big, reflection=True),
                            l2hmc.TrainingConfig(metric="low_rank"))


def test_the_low_rank_metric_gets_more_burn_in_windows():
  """The burn-in before a low-rank fit travels with per-coordinate scales alone: up to
  ``LOW_RANK_BURN_IN_WINDOWS`` windows where the metric is low rank, ``BURN_IN_WINDOWS``
  elsewhere, and what the user sets wherever it is set."""
  big = training_module.DENSE_MAX_DIM + 1
  windows = lambda dim, **kw: training_module._burn_in_windows(
      l2hmc.L2HMCConfig(dim=dim), l2hmc.TrainingConfig(**kw))
  assert windows(big) == training_module.LOW_RANK_BURN_IN_WINDOWS == 12
  assert windows(8) == training_module.BURN_IN_WINDOWS == 4
  assert windows(8, metric="low_rank") == 12 and windows(big, metric="diagonal") == 4
  assert windows(big, burn_in_windows=2) == 2
  for bad in (0, True, 2.0):
    with pytest.raises(ValueError, match="burn_in_windows must be None or an int"):
      training_module._check_training(l2hmc.TrainingConfig(burn_in_windows=bad))


@pytest.mark.system  # two warm-ups of a 4-d target (~30 s)
def test_the_trajectory_covers_the_widest_whitened_coordinate():
  """Where the low-rank fit leaves a coordinate long in the whitened units (a mixture's
  coordinate: its gradients' spread within a mode, its draws' across the modes), the warm-up
  measures that coordinate's sd (``whitened_spread``) and the sampler's K covers its quarter
  period, not that of a unit sd."""
  precision = jnp.linalg.inv(jnp.asarray([[1.0, 0.95], [0.95, 1.0]]))

  def logdensity_fn(x):  # x0: modes at +-2 of sd 0.5 (sd 2.06); x1 N(0, 1); x2, x3 correlated
    modes = jnp.stack([-0.5 * ((x[0] - 2.0) / 0.5) ** 2, -0.5 * ((x[0] + 2.0) / 0.5) ** 2])
    return jax.nn.logsumexp(modes) - 0.5 * x[1] ** 2 - 0.5 * x[2:] @ precision @ x[2:]

  target = l2hmc.Target("mixture", 4, logdensity_fn)
  positions = jnp.concatenate([jnp.full((16, 1), 2.0), jnp.full((16, 1), -2.0)])
  positions = jnp.concatenate([positions, jax.random.normal(jax.random.key(0), (32, 3))], 1)
  training = l2hmc.TrainingConfig(metric="low_rank", warmup_iterations=200)
  _, found, config = training_module._initial_state(
      jax.random.key(1), target, l2hmc.L2HMCConfig(num_steps=5), training, None, positions,
      choose_num_steps=True)
  # the correlated pair confirms a low-rank fit, whose diagonal is the Fisher scale; half the
  # chains in each mode: the draws' sd of x0 is 2.06, its Fisher scale sqrt(2.06 / 2) (the
  # gradients' sd within a mode, 0.5 / 0.25), so its whitened sd is ~2
  assert np.any(np.asarray(found.whitening.eigenvalues) != 1.0)
  assert 1.5 < float(found.whitened_spread) < 3.0
  quarter = l2hmc.trajectory_length.num_steps_for
  # from the widest coordinate's quarter period, the K that mixes unit squares best, with the
  # jitter that spreads a unit coordinate's phase as the default does
  assert (config.num_steps, config.jitter) == l2hmc.trajectory_length.num_steps_for_spread(
      float(found.step_size), float(found.whitened_spread), 0.5)
  assert config.num_steps >= quarter(float(found.step_size) / float(found.whitened_spread))
  assert config.num_steps > quarter(float(found.step_size))
  # elsewhere (diagonal, dense) the warm-up does not measure it, and K is a unit quarter period
  _, found, config = training_module._initial_state(
      jax.random.key(1), target, l2hmc.L2HMCConfig(num_steps=5),
      training._replace(metric="dense"), None, positions, choose_num_steps=True)
  assert found.whitened_spread is None
  assert config.num_steps == quarter(float(found.step_size)) and config.jitter == 0.5
