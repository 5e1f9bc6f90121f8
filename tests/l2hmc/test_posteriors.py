"""The posteriors' log densities against scipy (float64), and the funnel's exact marginals;
the benchmarks' breast-cancer regression (``benchmarks/_breast_cancer.py``)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import special, stats

from _breast_cancer import breast_cancer  # benchmarks/ is on sys.path (conftest.py)
from metaoptax.l2hmc import posteriors
from tests.l2hmc.paper import paper_config, paper_training

# float32 log densities of magnitude |log p| against float64 oracles
RTOL, ATOL = 2e-6, 1e-4


def _points(dim, scale, seed=0, n=5):
  return np.random.default_rng(seed).normal(0.0, scale, (n, dim)).astype(np.float32)


def test_funnel_logdensity_is_the_normal_hierarchy():
  target = posteriors.neals_funnel(dim=10)
  for x in _points(10, 1.5):
    v = float(x[0])
    expected = stats.norm.logpdf(v, 0, 3) + stats.norm.logpdf(
        x[1:].astype(np.float64), 0, math.exp(v / 2)).sum()
    np.testing.assert_allclose(target.logdensity_fn(jnp.asarray(x)), expected, RTOL, ATOL)


def test_funnel_exact_marginals_by_quadrature():
  """The 2-d funnel's density integrates to 1, its v-marginal is N(0, 3^2) and
  E x^2 = e^{9/2} (the target's covariance), by quadrature of ``logdensity_fn``
  on x = e^{v/2} u (v up to 30: e^v N(v; 0, 9) peaks at v = 9)."""
  target = posteriors.neals_funnel(dim=2)
  v = np.linspace(-18.0, 30.0, 961)
  u = np.linspace(-9.0, 9.0, 361)
  vv, uu = np.meshgrid(v, u, indexing="ij")
  x = np.exp(vv / 2) * uu
  logp = jax.vmap(target.logdensity_fn)(jnp.asarray(np.stack([vv, x], -1).reshape(-1, 2),
                                                    jnp.float32))
  density = np.exp(np.asarray(logp, np.float64).reshape(vv.shape)) * np.exp(vv / 2)
  marginal = np.trapezoid(density, u, axis=1)
  np.testing.assert_allclose(marginal, stats.norm.pdf(v, 0, 3), atol=2e-6)
  np.testing.assert_allclose(np.trapezoid(marginal, v), 1.0, rtol=1e-5)
  second_moment = np.trapezoid(np.trapezoid(density * x**2, u, axis=1), v)
  np.testing.assert_allclose(second_moment, math.exp(4.5), rtol=1e-4)
  np.testing.assert_allclose(np.diag(target.covariance), [9.0, math.exp(4.5)], rtol=1e-6)


def test_funnel_exact_draws():
  target = posteriors.neals_funnel(dim=10)
  draws = np.asarray(target.sample(jax.random.key(0), 200_000), np.float64)
  assert abs(draws[:, 0].std() - 3.0) < 0.03  # sd of the sd estimate ~ 3 / sqrt(4e5)
  z = draws[:, 1:] / np.exp(draws[:, :1] / 2)  # x_i / e^{v/2} ~ N(0, 1) given v
  assert abs(z.std() - 1.0) < 0.01 and abs(z.mean()) < 0.01


@pytest.mark.parametrize("centered", [True, False])
def test_eight_schools_logdensity_against_scipy(centered):
  target = posteriors.eight_schools(centered=centered)
  y, sigma = np.array(posteriors.EIGHT_SCHOOLS_Y), np.array(posteriors.EIGHT_SCHOOLS_SIGMA)
  points = _points(10, 1.0, seed=1)
  points[:, 2:] *= 1.0 if not centered else 5.0
  for p in points.astype(np.float64):
    mu, log_tau, effects = p[0], p[1], p[2:]
    tau = math.exp(log_tau)
    theta = effects if centered else mu + tau * effects
    hierarchy = (stats.norm.logpdf(theta, mu, tau) if centered
                 else stats.norm.logpdf(effects, 0, 1)).sum()
    expected = (stats.norm.logpdf(mu, 0, 5) + stats.halfcauchy.logpdf(tau, scale=5) + log_tau
                + hierarchy + stats.norm.logpdf(y, theta, sigma).sum())
    np.testing.assert_allclose(target.logdensity_fn(jnp.asarray(p, jnp.float32)), expected,
                               RTOL, ATOL)


def test_eight_schools_parameterisations_differ_by_the_jacobian():
  """log p_nc(mu, log tau, eta) = log p_c(mu, log tau, mu + tau eta) + 8 log tau."""
  centered, noncentered = posteriors.eight_schools(True), posteriors.eight_schools(False)
  for p in _points(10, 1.0, seed=2):
    mu, log_tau = p[0], p[1]
    moved = np.concatenate([p[:2], mu + np.exp(log_tau) * p[2:]])
    np.testing.assert_allclose(noncentered.logdensity_fn(jnp.asarray(p)),
                               centered.logdensity_fn(jnp.asarray(moved)) + 8 * log_tau,
                               RTOL, ATOL)


def test_logistic_regression_against_scipy():
  rng = np.random.default_rng(3)
  features = rng.normal(size=(40, 3))
  labels = (rng.uniform(size=40) < 0.4).astype(np.float64)
  target = posteriors.logistic_regression(features, labels, prior_scale=2.0)
  assert target.dim == 4
  for beta in _points(4, 1.0, seed=4).astype(np.float64):
    eta = beta[0] + features @ beta[1:]
    expected = (stats.bernoulli.logpmf(labels, special.expit(eta)).sum()
                + stats.norm.logpdf(beta, 0, 2.0).sum())
    np.testing.assert_allclose(target.logdensity_fn(jnp.asarray(beta, jnp.float32)),
                               expected, RTOL, ATOL)


def test_breast_cancer_subsamples_share_coordinates():
  full = breast_cancer()
  first, second = breast_cancer(100, seed=0), breast_cancer(100, seed=1)
  assert full.dim == first.dim == second.dim == 31
  beta = jnp.asarray(_points(31, 0.3, seed=5)[0])
  values = [float(t.logdensity_fn(beta)) for t in (full, first, second)]
  assert all(np.isfinite(values)) and len(set(values)) == 3
  with pytest.raises(ValueError):
    breast_cancer(0)


@pytest.mark.system  # an L2HMC training run (12 s): CI's second command
def test_a_sampler_trained_on_one_subsample_runs_on_others():
  """Transfer: parameters, masks and whitening from one posterior (a 60-row
  subsample), used without retraining on the full data (and with a new warm-up's
  whitening)."""
  from metaoptax import l2hmc  # pylint: disable=g-import-not-at-top
  source = breast_cancer(60, seed=0)
  config = paper_config(dim=31, num_steps=3, use_networks=False, per_coordinate=True,
                             step_sizes="per_step")
  training = paper_training(num_chains=8, aux_weight=0.0, warmup_iterations=16,
                                  objective="esjd_coordinates", drop_nonfinite_chains=True)
  # the warmed-up starting state stands for a trained one (compiling training is slow)
  result = l2hmc.init_training(jax.random.key(0), source, config, training)
  assert result.whitening is not None
  warmup = jax.jit(lambda logdensity_fn, x: l2hmc.warmup(
      jax.random.key(1), logdensity_fn, x, num_steps=3, num_iterations=16), static_argnums=0)
  for target in (breast_cancer(),):  # another subsample runs the same code
    rewarmed = warmup(target.logdensity_fn, result.chains.position)

    @jax.jit
    def draws_with(whitening):  # one compilation for both whitenings (same shapes)
      sampler = l2hmc.l2hmc(target.logdensity_fn, config, result.params, result.masks,
                            whitening)
      return l2hmc.sample_chains(jax.random.key(2), sampler,
                                 jax.vmap(sampler.init)(rewarmed.positions), 4)

    for whitening in (result.whitening, rewarmed.whitening):
      draws, info = draws_with(whitening)
      acceptance = info.acceptance_rate
      assert draws.shape == (4, 8, 31) and bool(jnp.all(jnp.isfinite(draws)))
      assert bool(jnp.all((acceptance >= 0) & (acceptance <= 1)))
