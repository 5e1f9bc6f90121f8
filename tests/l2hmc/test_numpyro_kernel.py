"""``l2hmc.NumPyroL2HMC``: the default adaptation inside ``numpyro.infer.MCMC``.

The default tier runs one small model through ``MCMC`` (the warm-up's calls cost nothing,
the constrained sites, ``print_summary``, ``arviz.from_numpyro``, a forced
``ConvergenceWarning``) and checks the errors raised before any adaptation. The system tier
compares the guide's eight schools with numpyro's NUTS on the same model, within Monte Carlo
error.
"""

import warnings

import arviz
import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.diagnostics import effective_sample_size
from numpyro.infer import MCMC, NUTS

from metaoptax import l2hmc
from metaoptax.l2hmc.numpyro_kernel import _AdaptedSampler, _Static
from tests.l2hmc.paper import paper_config

FAST = dict(progress=None, choose_local_step_sizes=False, choose_reflection=False)


def regression(x, y=None):
  w = numpyro.sample("w", dist.Normal(0.0, 1.0).expand([2]))
  s = numpyro.sample("s", dist.HalfNormal(1.0))
  numpyro.deterministic("w_sum", jnp.sum(w))
  numpyro.sample("y", dist.Normal(x @ w, s), obs=y)


def _data():
  rng = np.random.default_rng(0)
  x = rng.normal(size=(20, 2))
  return x, x @ np.array([1.0, -0.5]) + 0.3 * rng.normal(size=20)


def test_importing_l2hmc_does_not_import_numpyro():
  import subprocess
  import sys
  code = ("import sys, metaoptax.l2hmc as m; a = 'numpyro' in sys.modules; m.NumPyroL2HMC; "
          "print(a, 'numpyro' in sys.modules)")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       check=True, timeout=600).stdout
  assert out.split() == ["False", "True"]


def test_bad_use_raises_before_any_adaptation():
  x, y = _data()
  with pytest.raises(ValueError, match="exactly one of model= and potential_fn="):
    l2hmc.NumPyroL2HMC()
  with pytest.raises(ValueError, match="exactly one"):
    l2hmc.NumPyroL2HMC(regression, potential_fn=lambda z: 0.0)
  with pytest.raises(TypeError, match="no_such_option"):
    l2hmc.NumPyroL2HMC(regression, no_such_option=1)
  with pytest.raises(ValueError, match="max_rhat"):
    l2hmc.NumPyroL2HMC(regression, max_rhat=1.0)
  for chains, method in ((2, "sequential"), (1, "vectorized")):
    mcmc = MCMC(l2hmc.NumPyroL2HMC(regression, **FAST), num_warmup=100, num_samples=10,
                num_chains=chains, chain_method=method, progress_bar=False)
    with pytest.raises(ValueError, match="chain_method='vectorized'"):
      mcmc.run(jax.random.key(0), x, y=y)
  mcmc = MCMC(l2hmc.NumPyroL2HMC(regression, **FAST), num_warmup=50, num_samples=10,
              num_chains=4, chain_method="vectorized", progress_bar=False)
  with pytest.raises(ValueError, match="num_warmup=50"):
    mcmc.run(jax.random.key(0), x, y=y)
  mcmc = MCMC(l2hmc.NumPyroL2HMC(potential_fn=lambda z: jnp.sum(z ** 2), **FAST),
              num_warmup=100, num_samples=10, num_chains=4, chain_method="vectorized",
              progress_bar=False)
  with pytest.raises(ValueError, match="init_params"):
    mcmc.run(jax.random.key(0))


def _adapted_state(kernel, potential_fn, start, chains, num_warmup):
  """The state ``init`` would return after an adaptation that left the chains at ``start``
  with random networks (no adaptation runs: the test is of the draws' transitions)."""
  config = paper_config(dim=start.shape[-1], num_steps=2)
  sampler = _AdaptedSampler(l2hmc.init_params(jax.random.key(0), config),
                            l2hmc.make_masks(jax.random.key(1), config), None,
                            _Static(config, num_warmup))
  z = jnp.tile(start, (chains, 1))
  zeros = jnp.zeros(chains)
  kernel._sample_fn = kernel._transition  # pylint: disable=protected-access
  return l2hmc.NumPyroL2HMCState(
      i=jnp.full(chains, num_warmup, jnp.int32), z=z,
      potential_energy=jax.vmap(potential_fn)(z), z_grad=jax.vmap(jax.grad(potential_fn))(z),
      accept_prob=zeros, mean_accept_prob=zeros,
      num_gradient_evaluations=jnp.zeros(chains, jnp.int32),
      diverging=jnp.zeros(chains, bool), sampler=sampler,
      rng_key=jax.random.split(jax.random.key(2), chains))


def test_divergent_draws_warn_once_per_run_and_are_counted(capsys):
  """Draws whose proposals diverge warn (``ConvergenceWarning``, once per run, as
  ``sample_chains`` warns) and ``print_summary`` counts them. (The system tier's MCMC run
  checks that draws without one do not warn.)"""
  wall = lambda z: jnp.where(z[0] > 0.5, jnp.nan, 0.5 * z @ z)  # the potential, -log p
  kernel = l2hmc.NumPyroL2HMC(potential_fn=wall, progress=None)
  mcmc = MCMC(kernel, num_warmup=100, num_samples=30, num_chains=4,
              chain_method="vectorized", progress_bar=False)
  for run in range(2):  # the second run from the same state warns again
    mcmc.post_warmup_state = _adapted_state(kernel, wall, jnp.array([0.4, 0.0]), 4, 100)
    with warnings.catch_warnings(record=True) as caught:
      warnings.simplefilter("always")
      mcmc.run(jax.random.key(run))
      jax.effects_barrier()
    divergent = np.asarray(mcmc.get_extra_fields()["diverging"])
    assert 0 < divergent.sum() < divergent.size
    messages = [str(w.message) for w in caught
                if issubclass(w.category, l2hmc.ConvergenceWarning)]
    assert len(messages) == 1 and "diverged" in messages[0], messages
  assert np.all(np.asarray(mcmc.get_samples())[:, 0] <= 0.5)  # every divergent one rejected
  mcmc.print_summary()
  assert f"Number of divergences: {divergent.sum()}" in capsys.readouterr().out


@pytest.mark.system  # a whole MCMC run (~29 s); the class doctest runs MCMC in the default tier
def test_mcmc_runs_the_adaptation_and_numpyros_tools_work(capsys):
  """One adaptation in ``init``; the ``num_warmup`` calls leave the chains where it left
  them and evaluate no gradient; the draws then move, on the model's constrained sites,
  and ``print_summary``, ``post_warmup_state`` and ``arviz.from_numpyro`` work. A forced
  failing check (``max_rhat`` just above 1) warns and is reachable on the kernel."""
  x, y = _data()
  chains, num_warmup, num_samples = 8, 100, 50
  kernel = l2hmc.NumPyroL2HMC(regression, max_rhat=1.0001, **FAST)
  mcmc = MCMC(kernel, num_warmup=num_warmup, num_samples=num_samples, num_chains=chains,
              chain_method="vectorized", progress_bar=False)
  fields = ("num_gradient_evaluations", "accept_prob", "z_grad")
  with pytest.warns(l2hmc.ConvergenceWarning, match="R-hat"):
    mcmc.warmup(jax.random.key(0), x, y=y, collect_warmup=True, extra_fields=fields)
  info = kernel.adaptation_info
  assert isinstance(info, l2hmc.AdaptationInfo) and not info.converged and info.messages
  assert info.num_gradient_evaluations > 0
  warm = mcmc.get_samples(group_by_chain=True)
  assert warm["w"].shape == (chains, num_warmup, 2)
  # the warm-up's calls: every chain stays at its adapted position, no gradient evaluated
  np.testing.assert_array_equal(warm["w"], np.broadcast_to(warm["w"][:, :1], warm["w"].shape))
  extra = mcmc.get_extra_fields(group_by_chain=True)
  assert not np.any(extra["num_gradient_evaluations"]) and not np.any(extra["accept_prob"])
  last = mcmc.post_warmup_state
  assert isinstance(last, l2hmc.NumPyroL2HMCState)
  np.testing.assert_array_equal(last.i, num_warmup)

  with warnings.catch_warnings():
    warnings.simplefilter("error", l2hmc.ConvergenceWarning)  # no second adaptation
    mcmc.run(jax.random.key(1), x, y=y, extra_fields=fields)
  assert kernel.adaptation_info is info
  samples = mcmc.get_samples()
  assert set(samples) == {"w", "s", "w_sum"}
  assert samples["w"].shape == (chains * num_samples, 2)
  assert np.all(samples["s"] > 0)  # constrained: s = exp(z)
  np.testing.assert_allclose(samples["w_sum"], samples["w"].sum(-1), rtol=1e-5)
  extra = mcmc.get_extra_fields()
  # every transition's gradients: K, and (r + 1)K more where it retried a failed trajectory
  base, config = l2hmc.gradient_evaluations(info.config), info.config
  retried = base + (config.retry_divergent + 1) * config.num_steps
  counts = np.asarray(extra["num_gradient_evaluations"])
  assert np.all((counts == base) | ((counts == retried) & (config.retry_divergent > 0)))
  assert np.mean(counts == base) > 0.9
  assert np.mean(extra["accept_prob"]) > 0.3
  # a default field, as for numpyro's NUTS: collected without being asked for
  assert extra["diverging"].shape == (chains * num_samples,)
  assert extra["diverging"].dtype == bool and not np.any(extra["diverging"])
  assert kernel.get_diagnostics_str(mcmc.last_state).startswith(
      f"{l2hmc.gradient_evaluations(info.config)} gradients per transition")
  grouped = mcmc.get_samples(group_by_chain=True)["w"]
  assert np.all(np.std(grouped, axis=1) > 0)  # every chain moves
  # the state's gradient is the potential's at its position (carried, not stale)
  potential = numpyro.infer.util.potential_energy
  z = jax.tree.map(lambda leaf: leaf[0], mcmc.last_state.z)
  expected = jax.grad(lambda z: potential(regression, (x,), {"y": y}, z))(z)
  got = jax.tree.map(lambda leaf: leaf[0], mcmc.last_state.z_grad)
  for name in expected:
    np.testing.assert_allclose(got[name], expected[name], rtol=1e-4, atol=1e-4)

  mcmc.print_summary()
  printed = capsys.readouterr().out
  assert "r_hat" in printed and "w[1]" in printed and "s " in printed
  assert "w_sum" not in printed  # deterministic sites excluded, as for NUTS
  assert "Number of divergences: 0" in printed
  data = arviz.from_numpyro(mcmc)
  assert data.posterior["w"].shape == (chains, num_samples, 2)
  assert data.log_likelihood["y"].shape == (chains, num_samples, 20)
  assert data.sample_stats["acceptance_rate"].shape == (chains, num_samples)
  assert data.sample_stats["diverging"].shape == (chains, num_samples)

  # a transition whose proposals are not finite is reported diverging: the chains moved
  # once more under a potential that is NaN wherever it is evaluated
  kernel._potential_fn = lambda z: jnp.nan * jnp.sum(z["w"])  # pylint: disable=protected-access
  moved = kernel.sample(mcmc.last_state, (x,), {"y": y})
  assert np.all(moved.diverging)
  np.testing.assert_array_equal(moved.z["w"], mcmc.last_state.z["w"])  # all rejected


def eight_schools(sigma, y=None):
  """The guide's model (docs/l2hmc.md), non-centered."""
  mu = numpyro.sample("mu", dist.Normal(0.0, 5.0))
  tau = numpyro.sample("tau", dist.HalfCauchy(5.0))
  with numpyro.plate("schools", len(sigma)):
    theta_tilde = numpyro.sample("theta_tilde", dist.Normal(0.0, 1.0))
    numpyro.sample("y", dist.Normal(mu + tau * theta_tilde, sigma), obs=y)


def _moments(draws):
  """Per coordinate of ``draws`` (chains, draws, ...): mean, sd and their Monte Carlo
  standard errors (the sd's by the delta method on the squares' ESS)."""
  draws = np.asarray(draws, np.float64).reshape(draws.shape[:2] + (-1,))
  mean, sd = draws.mean((0, 1)), draws.std((0, 1))
  squares = (draws - mean) ** 2
  mean_error = sd / np.sqrt(effective_sample_size(draws))
  sd_error = squares.std((0, 1)) / (2 * sd * np.sqrt(effective_sample_size(squares)))
  return mean, sd, mean_error, sd_error


@pytest.mark.system
def test_eight_schools_matches_nuts_within_monte_carlo_error():
  """The guide's eight schools through the kernel (32 chains, 1,000 warm-up, 1,000 draws)
  and through numpyro's NUTS (8 chains, 1,000 + 2,000): every site's mean and sd agree within
  4 combined Monte Carlo standard errors."""
  y = np.array([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0])
  sigma = np.array([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0])
  kernel = l2hmc.NumPyroL2HMC(eight_schools, progress=None)
  mcmc = MCMC(kernel, num_warmup=1000, num_samples=1000, num_chains=32,
              chain_method="vectorized", progress_bar=False)
  mcmc.run(jax.random.key(0), sigma, y=y)
  assert kernel.adaptation_info.converged
  nuts = MCMC(NUTS(eight_schools), num_warmup=1000, num_samples=2000, num_chains=8,
              chain_method="vectorized", progress_bar=False)
  nuts.run(jax.random.key(1), sigma, y=y)
  ours, theirs = mcmc.get_samples(group_by_chain=True), nuts.get_samples(group_by_chain=True)
  assert set(ours) == set(theirs) == {"mu", "tau", "theta_tilde"}
  for site in ours:
    mean, sd, mean_error, sd_error = _moments(ours[site])
    nuts_mean, nuts_sd, nuts_mean_error, nuts_sd_error = _moments(theirs[site])
    assert np.all(np.abs(mean - nuts_mean) < 4 * np.hypot(mean_error, nuts_mean_error)), site
    assert np.all(np.abs(sd - nuts_sd) < 4 * np.hypot(sd_error, nuts_sd_error)), site
