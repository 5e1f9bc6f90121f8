"""``benchmarks/_tuningfork.py`` and the headline metric of ``benchmarks/_sampler_metrics.py``.

Oracles:

* the headline (min bulk ESS per total gradient) on draws with a known answer: independent
  draws (bulk ESS ~ the number of draws) and AR(1) chains (ESS ~ n (1 - rho) / (1 + rho));
* every class's log density against an independent one: numpyro's ``potential_energy`` of
  the same model written with numpyro's distributions and its own unconstrained transforms
  (``biject_to``), the likelihoods evaluated row by row (radon's without the sufficient
  statistics, the volatility's AR(1) as a sequential scan, Lotka–Volterra's ODE by scipy's
  adaptive ``solve_ivp`` in float64), compared as differences between points (densities are
  up to a constant) and as gradients;
* the closed-form moments against exact draws; the GP's basis against the exact kernel;
* eight schools' NUTS reference (a run with divergent transitions) against quadrature.
"""

import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import integrate

import _sampler_metrics  # benchmarks/ is on sys.path (tests/conftest.py)
import _tuningfork

numpyro = pytest.importorskip("numpyro")
dist = numpyro.distributions


# --------------------------------------------------------------------------- the headline


def test_headline_of_independent_draws_is_draws_per_gradient():
  draws = np.asarray(jax.random.normal(jax.random.key(0), (1000, 4, 3)))
  found = _sampler_metrics.headline(draws, total_grads_per_chain=2000.0, divergences=0)
  assert 3000 < found["min_bulk_ess"] < 4600  # ~ 4,000 draws in all
  assert 0.5 * 0.75 < found["min_bulk_ess_per_grad"] < 0.5 * 1.15  # ~ 1,000 / 2,000
  assert found["max_rank_rhat"] < 1.01 and found["gate"]


def test_headline_of_ar1_chains_matches_the_integrated_autocorrelation():
  rho, n, chains = 0.9, 4000, 4
  noise = np.asarray(jax.random.normal(jax.random.key(1), (n, chains, 2)))
  draws = np.empty_like(noise)
  draws[0] = noise[0] / math.sqrt(1 - rho**2)
  for t in range(1, n):
    draws[t] = rho * draws[t - 1] + noise[t]
  expected = n * chains * (1 - rho) / (1 + rho)
  found = _sampler_metrics.headline(draws, total_grads_per_chain=1.0, divergences=0)
  assert 0.7 * expected < found["min_bulk_ess"] < 1.3 * expected


def test_gate_fails_on_divergences_small_ess_and_disagreeing_chains():
  draws = np.asarray(jax.random.normal(jax.random.key(2), (1000, 4, 2)))
  assert not _sampler_metrics.headline(draws, 1.0, divergences=1)["gate"]
  assert _sampler_metrics.headline(draws, 1.0, divergences=None)["gate"]
  assert not _sampler_metrics.headline(draws[:90], 1.0, divergences=0)["gate"]  # ESS < 400
  shifted = draws + np.arange(4)[None, :, None]  # chains in different places
  found = _sampler_metrics.headline(shifted, 1.0, divergences=0)
  assert found["max_rank_rhat"] > 1.1 and not found["gate"]
  with pytest.raises(ValueError, match="total_grads_per_chain"):
    _sampler_metrics.headline(draws, 0.0, divergences=0)


# --------------------------------------------------------------------------- the suite


def test_split_is_fixed_and_covers_the_fourteen_classes():
  assert len(_tuningfork.NAMES_TUNING) == 7 and len(_tuningfork.NAMES_HELD_OUT) == 7
  assert set(_tuningfork.NAMES) == set(_tuningfork._MODELS)
  assert not set(_tuningfork.NAMES_TUNING) & set(_tuningfork.NAMES_HELD_OUT)
  with pytest.raises(ValueError, match="unknown tuningfork class"):
    _tuningfork.load("rosenbrock")


DIMS = dict(mvn_10=10, gaussian_50=50, eight_schools_ncp=10, neals_funnel=10, banana=2,
            radon=390, logistic=3, german_credit=26, horseshoe=204, irt_2pl=144, gmm_25=2,
            stochastic_volatility=503, lotka_volterra=7, gp_regression=203)


def _oracle_models():
  """numpyro versions of the classes and how a flat u maps to their unconstrained sites."""
  models = {}

  models["mvn_10"] = (lambda: numpyro.sample("x", dist.Normal(jnp.zeros(10), 1.0)),
                      lambda u: {"x": u})
  cov = _tuningfork.gaussian_50_covariance()
  models["gaussian_50"] = (
      lambda: numpyro.sample("x", dist.MultivariateNormal(jnp.zeros(50), jnp.asarray(cov))),
      lambda u: {"x": u})

  def schools():
    mu = numpyro.sample("mu", dist.Normal(0.0, 5.0))
    tau = numpyro.sample("tau", dist.HalfCauchy(5.0))
    raw = numpyro.sample("raw", dist.Normal(jnp.zeros(8), 1.0))
    numpyro.sample("y", dist.Normal(mu + tau * raw, _tuningfork.SCHOOLS_SIGMA),
                   obs=_tuningfork.SCHOOLS_Y)
  models["eight_schools_ncp"] = (schools, lambda u: {"mu": u[0], "tau": u[1], "raw": u[2:]})

  def funnel():
    v = numpyro.sample("v", dist.Normal(0.0, 3.0))
    numpyro.sample("theta", dist.Normal(jnp.zeros(9), jnp.exp(v / 2)))
  models["neals_funnel"] = (funnel, lambda u: {"v": u[0], "theta": u[1:]})

  def banana():
    x1 = numpyro.sample("x1", dist.Normal(0.0, math.sqrt(8.0)))
    numpyro.sample("x2", dist.Normal(x1**2 / 4, 1.0))
  models["banana"] = (banana, lambda u: {"x1": u[0], "x2": u[1]})

  data = _tuningfork.radon_data()

  def radon():
    mu_a = numpyro.sample("mu_a", dist.Normal(0.0, 10.0))
    sigma_a = numpyro.sample("sigma_a", dist.HalfNormal(5.0))
    beta = numpyro.sample("beta", dist.Normal(0.0, 10.0))
    sigma_y = numpyro.sample("sigma_y", dist.HalfNormal(5.0))
    raw = numpyro.sample("raw", dist.Normal(jnp.zeros(386), 1.0))
    alpha = mu_a + sigma_a * raw
    numpyro.sample("y", dist.Normal(alpha[data["county"]] + beta * data["floor"], sigma_y),
                   obs=data["log_radon"])
  models["radon"] = (radon, lambda u: {"mu_a": u[0], "sigma_a": u[1], "beta": u[2],
                                       "sigma_y": u[3], "raw": u[4:]})

  def logistic_model(x, y):
    def model():
      beta = numpyro.sample("beta", dist.Normal(jnp.zeros(x.shape[1] + 1), 5.0))
      numpyro.sample("y", dist.Bernoulli(logits=beta[0] + x @ beta[1:]), obs=y)
    return model, lambda u: {"beta": u}
  models["logistic"] = logistic_model(*_tuningfork.logistic_data())
  models["german_credit"] = logistic_model(*_tuningfork.german_credit_data())

  hx, hy = _tuningfork.horseshoe_data()

  def horseshoe():
    m = 100
    alpha = numpyro.sample("alpha", dist.Normal(0.0, 2.0))
    sigma = numpyro.sample("sigma", dist.HalfNormal(2.0))
    tau_t = numpyro.sample("tau_t", dist.HalfCauchy(1.0))
    c2_t = numpyro.sample("c2_t", dist.InverseGamma(12.5, 12.5))
    lam = numpyro.sample("lam", dist.HalfCauchy(jnp.ones(m)))
    beta_t = numpyro.sample("beta_t", dist.Normal(jnp.zeros(m), 1.0))
    tau = 10.0 / 90.0 / math.sqrt(200) * sigma * tau_t
    c2 = 9.0 * c2_t
    lam_tilde = jnp.sqrt(c2 * lam**2 / (c2 + tau**2 * lam**2))
    numpyro.sample("y", dist.Normal(alpha + hx @ (tau * lam_tilde * beta_t), sigma), obs=hy)
  models["horseshoe"] = (horseshoe, lambda u: {
      "alpha": u[0], "sigma": u[1], "tau_t": u[2], "c2_t": u[3], "lam": u[4:104],
      "beta_t": u[104:]})

  responses = _tuningfork.irt_data()

  def irt():
    s_theta = numpyro.sample("s_theta", dist.HalfCauchy(2.0))
    theta_raw = numpyro.sample("theta_raw", dist.Normal(jnp.zeros(100), 1.0))
    s_a = numpyro.sample("s_a", dist.HalfCauchy(2.0))
    log_a_raw = numpyro.sample("log_a_raw", dist.Normal(jnp.zeros(20), 1.0))
    mu_b = numpyro.sample("mu_b", dist.Normal(0.0, 5.0))
    s_b = numpyro.sample("s_b", dist.HalfCauchy(2.0))
    b_raw = numpyro.sample("b_raw", dist.Normal(jnp.zeros(20), 1.0))
    a, b = jnp.exp(s_a * log_a_raw), mu_b + s_b * b_raw
    logits = a[None] * (s_theta * theta_raw[:, None] - b[None])
    numpyro.sample("y", dist.Bernoulli(logits=logits), obs=responses)
  models["irt_2pl"] = (irt, lambda u: {
      "s_theta": u[0], "theta_raw": u[1:101], "s_a": u[101], "log_a_raw": u[102:122],
      "mu_b": u[122], "s_b": u[123], "b_raw": u[124:]})

  grid = jnp.asarray(_tuningfork.GMM_GRID)
  locations = jnp.stack(jnp.meshgrid(grid, grid, indexing="ij"), -1).reshape(25, 2)

  def gmm():
    mixing = dist.Categorical(probs=jnp.full(25, 1 / 25))
    numpyro.sample("x", dist.MixtureSameFamily(
        mixing, dist.Normal(locations, 0.3).to_event(1)))
  models["gmm_25"] = (gmm, lambda u: {"x": u})

  returns = _tuningfork.stochastic_volatility_data()

  def volatility():
    mu = numpyro.sample("mu", dist.Normal(-10.0, 5.0))
    # (phi + 1) / 2 ~ Beta(20, 1.5), sampled as itself: numpyro gives an affinely transformed
    # Beta the support Real (not (-1, 1)), so biject_to would leave phi unconstrained
    phi = 2.0 * numpyro.sample("phi_half", dist.Beta(20.0, 1.5)) - 1.0
    sigma = numpyro.sample("sigma", dist.HalfNormal(0.5))
    raw = numpyro.sample("raw", dist.Normal(jnp.zeros(500), 1.0))

    def step(h, r):
      h = mu + phi * (h - mu) + sigma * r
      return h, h
    h0 = mu + sigma / jnp.sqrt(1 - phi**2) * raw[0]
    h = jnp.concatenate([h0[None], jax.lax.scan(step, h0, raw[1:])[1]])
    numpyro.sample("r", dist.Normal(0.0, jnp.exp(h / 2)), obs=returns)
  models["stochastic_volatility"] = (volatility, lambda u: {
      "mu": u[0], "phi_half": u[1], "sigma": u[2], "raw": u[3:]})

  gx, gy = _tuningfork.gp_data()
  phi_basis, frequency = _tuningfork.gp_basis(gx)

  def gp():
    ls = numpyro.sample("ls", dist.LogNormal(0.0, 1.0))
    ks = numpyro.sample("ks", dist.LogNormal(0.0, 1.0))
    noise = numpyro.sample("noise", dist.LogNormal(-2.0, 1.0))
    z = numpyro.sample("z", dist.Normal(jnp.zeros(200), 1.0))
    # sqrt of ks^2 sqrt(2 pi) ls exp(-(ls w)^2 / 2), taken inside: the spectral density
    # underflows to 0 at high frequencies, where sqrt's gradient would be inf (NaN after * 0)
    sqrt_spectral = (ks * jnp.sqrt(jnp.sqrt(2 * jnp.pi) * ls)
                     * jnp.exp(-0.25 * (ls * frequency) ** 2))
    numpyro.sample("y", dist.Normal(phi_basis @ (sqrt_spectral * z), noise), obs=gy)
  models["gp_regression"] = (gp, lambda u: {"ls": u[0], "ks": u[1], "noise": u[2], "z": u[3:]})
  return models


def _lotka_volterra_oracle(u):
  """The log density (up to a constant) in float64, the ODE by scipy's adaptive RK45."""
  times, observed = _tuningfork.lotka_volterra_data()
  alpha, beta, gamma, delta, u0, v0 = np.exp(u[:6])
  sigma = math.exp(u[6])
  solution = integrate.solve_ivp(
      lambda t, s: [alpha * s[0] - beta * s[0] * s[1], delta * s[0] * s[1] - gamma * s[1]],
      (0.0, times[-1]), [u0, v0], t_eval=times, rtol=1e-10, atol=1e-10).y.T
  prior = sum(-0.5 * ((u[i] - loc) / scale) ** 2
              for i, (loc, scale) in enumerate(_tuningfork.LV_PRIOR.values()))
  prior += -0.5 * sigma**2 + u[6]  # half-N(1) on sigma and the log-Jacobian
  return prior - 0.5 * np.sum(((observed - solution) / sigma) ** 2) - observed.size * u[6]


def _points(name, dim):
  key = jax.random.key(_tuningfork.NAMES.index(name))
  points = 0.3 * np.asarray(jax.random.normal(key, (3, dim)), np.float64)
  if name == "stochastic_volatility":
    points[:, 0] += -10.0  # mu near the data's scale
    points[:, 1] += 3.0  # phi near 0.9
  if name == "lotka_volterra":
    truth = np.log([0.5, 0.05, 0.5, 0.05, 10.0, 5.0, 0.5])
    points = truth + 0.1 * points
  return points


SLOW_ORACLES = ("stochastic_volatility", "lotka_volterra",  # ~12 s each, and 5-8 s each:
                "irt_2pl", "horseshoe", "radon", "logistic", "german_credit")  # the system tier


@pytest.mark.parametrize("name", [
    pytest.param(name, marks=pytest.mark.system) if name in SLOW_ORACLES else name
    for name in _tuningfork.NAMES])
def test_log_density_matches_an_independent_oracle(name):
  """Differences of the log density between three points, and its gradient, against
  numpyro's potential (scipy's ODE solution for Lotka–Volterra), in float64."""
  model = _tuningfork.load(name)
  assert model.dim == DIMS[name] == len(model.coordinate_names)
  points = _points(name, model.dim)
  with jax.enable_x64(True):
    value_and_grad = jax.value_and_grad(model.logdensity_fn)
    found = [value_and_grad(jnp.asarray(p)) for p in points]
    if name == "lotka_volterra":
      oracle = [_lotka_volterra_oracle(p) for p in points]
      step = 1e-5
      oracle_grads = [np.array([(_lotka_volterra_oracle(p + step * e)
                                 - _lotka_volterra_oracle(p - step * e)) / (2 * step)
                                for e in np.eye(7)]) for p in points]
      rtol = 2e-4  # RK4 with 8 steps per interval against an adaptive solver
    else:
      fn, sites = _oracle_models()[name]
      potential = lambda p: -numpyro.infer.util.potential_energy(fn, (), {}, sites(p))
      oracle = [float(potential(jnp.asarray(p))) for p in points]
      oracle_grads = [np.asarray(jax.grad(potential)(jnp.asarray(p))) for p in points]
      rtol = 1e-5  # the models hold their data in float32
  values = np.array([float(v) for v, _ in found])
  differences, expected = values[1:] - values[0], np.array(oracle[1:]) - oracle[0]
  scale = max(1.0, np.max(np.abs(oracle)))
  np.testing.assert_allclose(differences, expected, rtol=rtol, atol=rtol * scale)
  for (_, grad), oracle_grad in zip(found, oracle_grads):
    np.testing.assert_allclose(np.asarray(grad), oracle_grad, rtol=rtol * 10,
                               atol=rtol * 10 * max(1.0, np.max(np.abs(oracle_grad))))


@pytest.mark.parametrize("name", _tuningfork.EXACT)
def test_exact_moments_match_exact_draws(name):
  """The closed-form means and sds against 200,000 ancestral draws (5 standard errors)."""
  model = _tuningfork.load(name)
  assert model.exact
  rng = np.random.default_rng(0)
  n = 200_000
  if name == "mvn_10":
    draws = rng.standard_normal((n, 10))
  elif name == "gaussian_50":
    draws = rng.multivariate_normal(np.zeros(50), _tuningfork.gaussian_50_covariance(), n)
  elif name == "neals_funnel":
    v = 3.0 * rng.standard_normal(n)
    draws = np.c_[v, np.exp(v / 2)[:, None] * rng.standard_normal((n, 9))]
  elif name == "banana":
    x1 = math.sqrt(8.0) * rng.standard_normal(n)
    draws = np.c_[x1, x1**2 / 4 + rng.standard_normal(n)]
  else:
    grid = np.array(_tuningfork.GMM_GRID)
    draws = rng.choice(grid, (n, 2)) + 0.3 * rng.standard_normal((n, 2))
  sd = draws.std(0)
  kurtosis = np.mean((draws - draws.mean(0)) ** 4, 0) / sd**4
  np.testing.assert_array_less(np.abs(draws.mean(0) - model.reference_mean),
                               5 * model.reference_sd / math.sqrt(n))
  # the funnel's theta has heavy tails: its sd's error is sd sqrt((kurtosis - 1) / (4 n))
  np.testing.assert_array_less(np.abs(sd - model.reference_sd),
                               5 * model.reference_sd * np.sqrt((kurtosis - 1) / (4 * n)))


def test_gp_basis_approximates_the_squared_exponential_kernel():
  """Phi diag(S(w)) Phi^T against s^2 exp(-r^2 / (2 l^2)) at the posterior's scales."""
  x, _ = _tuningfork.gp_data()
  phi, frequency = _tuningfork.gp_basis(x)
  for lengthscale in (0.2, 0.5):
    spectral = np.exp(np.asarray(_tuningfork.squared_exponential_log_spectral_density(
        frequency, 0.0, math.log(lengthscale)), np.float64))
    approximate = phi @ np.diag(spectral) @ phi.T
    exact = np.exp(-0.5 * (x[:, None] - x[None, :]) ** 2 / lengthscale**2)
    assert np.max(np.abs(approximate - exact)) < 0.02


def test_associative_ar1_equals_the_recursion():
  raw = np.asarray(jax.random.normal(jax.random.key(3), (50,)), np.float64)
  mu, phi, sigma = -1.0, 0.9, 0.3
  h = np.empty(50)
  h[0] = mu + sigma / math.sqrt(1 - phi**2) * raw[0]
  for t in range(1, 50):
    h[t] = mu + phi * (h[t - 1] - mu) + sigma * raw[t]
  with jax.enable_x64(True):
    np.testing.assert_allclose(np.asarray(_tuningfork.ar1(mu, phi, sigma, jnp.asarray(raw))),
                               h, rtol=1e-12)


def _eight_schools_quadrature():
  """Exact moments of eight schools (non-centered) in u = (mu, log tau, raw): raw integrates
  out (y_j ~ N(mu, sigma_j^2 + tau^2)), (mu, log tau) by quadrature on a grid, and raw_j
  given (mu, tau) is Gaussian (precision 1 + tau^2 / sigma_j^2)."""
  y, sigma = _tuningfork.SCHOOLS_Y[:, None, None], _tuningfork.SCHOOLS_SIGMA[:, None, None]
  mu = np.linspace(-40.0, 50.0, 451)[:, None]
  log_tau = np.linspace(-14.0, 7.0, 526)[None, :]
  tau = np.exp(log_tau)
  variance = sigma**2 + tau**2
  log_p = (-0.5 * (mu / 5.0) ** 2 - np.log1p((tau / 5.0) ** 2) + log_tau
           - 0.5 * np.sum((y - mu) ** 2 / variance + np.log(variance), axis=0))
  weights = np.exp(log_p - log_p.max())
  weights /= weights.sum()
  precision = 1.0 + tau**2 / sigma**2
  raw_mean = tau * (y - mu) / sigma**2 / precision
  expect = lambda f: np.sum(weights * f, axis=(-2, -1))
  mean = np.r_[expect(mu + 0 * log_tau), expect(log_tau + 0 * mu), expect(raw_mean)]
  second = np.r_[expect(mu**2 + 0 * log_tau), expect(log_tau**2 + 0 * mu),
                 expect(1.0 / precision + raw_mean**2)]
  return mean, np.sqrt(second - mean**2)


def test_eight_schools_reference_matches_quadrature_despite_its_divergences():
  """The long NUTS run behind eight_schools_ncp's reference had divergent transitions: its
  means lie within 4 Monte Carlo errors (1 / sqrt(min bulk ESS) sds) of the exact ones and
  its sds within 4 %."""
  model = _tuningfork.load("eight_schools_ncp")
  record = json.loads(_tuningfork.REFERENCE.read_text())["records"][
      "eight_schools_ncp"]
  mean, sd = _eight_schools_quadrature()
  mcse = record["max_mcse_in_sd"]  # 1 / sqrt(min bulk ESS)
  np.testing.assert_array_less(np.abs(model.reference_mean - mean) / sd, 4 * mcse)
  np.testing.assert_array_less(np.abs(model.reference_sd / sd - 1.0), 0.04)
