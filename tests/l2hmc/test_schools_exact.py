"""``benchmarks/_schools_exact.py``: the eight schools' exact posterior (quadrature over log tau).

Oracle: a brute-force three-dimensional quadrature over (log tau, mu, (theta_j - mu)/tau) of the
model's densities written with scipy (the other seven effects integrated in closed form,
N(y; mu, sigma^2 + tau^2), which is the only closed form it shares), in float64; and
exact draws against the moments (5 Monte Carlo standard errors).
"""

import jax
import numpy as np
import pytest
from scipy import stats

import _schools_exact as schools_exact  # benchmarks/ is on sys.path (conftest.py)
from metaoptax.l2hmc import posteriors

Y, SIGMA = np.asarray(posteriors.EIGHT_SCHOOLS_Y), np.asarray(posteriors.EIGHT_SCHOOLS_SIGMA)


def _brute_force(j: int):
  """E and sd of mu, log tau, theta_j by a (log tau, mu, (theta_j - mu)/tau) grid."""
  log_tau = np.linspace(-14.0, 6.0, 321)
  mu = np.linspace(-20.0, 30.0, 251)
  u = np.linspace(-8.0, 8.0, 161)  # theta_j = mu + tau u: resolves every tau
  others = [k for k in range(8) if k != j]
  sums = np.zeros(7)  # mass, E mu, E mu^2, E lt, E lt^2, E th, E th^2
  for lt in log_tau:
    tau = np.exp(lt)
    prior = stats.halfcauchy.pdf(tau, scale=5.0) * tau * stats.norm.pdf(mu, 0.0, 5.0)
    rest = np.prod(stats.norm.pdf(Y[others][:, None], mu[None], np.sqrt(SIGMA[others][:, None]**2
                                                                          + tau**2)), axis=0)
    theta = mu[:, None] + tau * u[None]  # (mu, u)
    w = (prior * rest)[:, None] * stats.norm.pdf(u) * stats.norm.pdf(Y[j], theta, SIGMA[j])
    mass = w.sum()
    sums += [mass, (w.sum(1) * mu).sum(), (w.sum(1) * mu**2).sum(), mass * lt, mass * lt**2,
             (w * theta).sum(), (w * theta**2).sum()]
  e = sums[1:] / sums[0]
  return (np.array([e[0], e[2], e[4]]),
          np.sqrt(np.array([e[1] - e[0]**2, e[3] - e[2]**2, e[5] - e[4]**2])))


@pytest.mark.parametrize("j", [0, 4])
def test_moments_match_a_brute_force_quadrature(j):
  mean, sd = _brute_force(j)
  found = schools_exact.moments()
  index = [0, 1, 2 + j]
  # measured agreement 1.5e-5 relative (the coarse grid's log tau sd)
  np.testing.assert_allclose(found["mean"][index], mean, rtol=1e-4)
  np.testing.assert_allclose(found["sd"][index], sd, rtol=1e-4)


def test_log_tau_density_is_normalised_and_draws_match_the_moments():
  grid = schools_exact.GRID
  np.testing.assert_allclose(np.trapezoid(schools_exact.log_tau_density(grid), grid), 1.0,
                             rtol=1e-9)
  n = 200_000
  draws = np.asarray(schools_exact.sample(jax.random.key(0), n), np.float64)
  found = schools_exact.moments()
  for x, mean, sd, key in ((draws, found["mean"], found["sd"], "x"),
                           (draws**2, found["mean2"], found["sd2"], "x^2")):
    error = np.abs(x.mean(0) - mean) / (sd / np.sqrt(n))
    assert error.max() < 5.0, (key, error)
  assert np.abs(draws.std(0) / found["sd"] - 1).max() < 0.02
