"""``L2HMCConfig(retry_divergent=r, retry_power=k)``: a rejected trajectory retried with
probability (1 - alpha_1)^k, with steps r times smaller, accepted by delayed rejection
(``metaoptax.l2hmc.kernel.retried_acceptance``).

Oracles: the harmonic oscillator's exact flow (the refined trajectory is the same
integrator with r times the steps: its error falls as 1/r^2), detailed balance of the
second stage checked on pairs of states in float64 (pi(xi) (1 - alpha_1(xi))^(k+1)
alpha_2(xi) = pi(eta) (1 - alpha_1(eta))^(k+1) alpha_2(eta), eta the refined proposal),
the stationary moments of a quartic target, whose big steps overflow, against quadrature,
and a chi-square of chains started from the quartic's exact distribution, which a kernel
that keeps it must leave there.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats

from metaoptax import l2hmc
from metaoptax.l2hmc import kernel as kernel_module


def _quartic(x):
  return -0.5 * jnp.sum(x**2) - 0.25 * jnp.sum(x**4)


def _sampler(num_steps, step_size, retry, dtype=jnp.float32, jitter=0.0, dim=1):
  config = l2hmc.L2HMCConfig(dim=dim, num_steps=num_steps, use_networks=False, jitter=jitter,
                             retry_divergent=retry)
  params = l2hmc.init_params(jax.random.key(0), config, step_size=step_size)
  params = params._replace(log_step_size_x=params.log_step_size_x.astype(dtype),
                           log_step_size_v=params.log_step_size_v.astype(dtype))
  return config, params, l2hmc.make_masks(jax.random.key(1), config)


@pytest.mark.parametrize("bad", [1, -1])
def test_retry_divergent_is_checked(bad):
  with pytest.raises(ValueError, match="retry_divergent"):
    l2hmc.build_kernel(l2hmc.L2HMCConfig(dim=2, retry_divergent=bad))
  with pytest.raises(ValueError, match="retry_divergent"):
    l2hmc.build_kernel(l2hmc.L2HMCConfig(dim=2, retry_divergent=2, use_networks=True))


@pytest.mark.parametrize("bad", [-0.5, float("inf"), float("nan")])
def test_retry_power_is_checked(bad):
  with pytest.raises(ValueError, match="retry_power"):
    l2hmc.build_kernel(l2hmc.L2HMCConfig(dim=2, retry_divergent=4, retry_power=bad))


def test_the_retry_probability():
  """g(alpha) = (1 - alpha)^k: 1 for a divergent trajectory, 0 for an accepted one."""
  alpha = jnp.array([0.0, 0.11, 0.5, 1.0])
  np.testing.assert_allclose(kernel_module.retry_probability(alpha, 8.0),
                             [1.0, 0.89**8, 0.5**8, 0.0], rtol=1e-6)
  np.testing.assert_allclose(kernel_module.retry_probability(alpha, 0.0), 1.0)


def test_the_refined_trajectory_is_the_same_flow_with_r_times_the_steps():
  """On N(0, I) (float64), per-step sizes: the refined trajectory's error against the exact
  rotation over the same total time sum(eps) falls by r^2 (within 20 %): the same leapfrog,
  each step split into r."""
  with jax.enable_x64(True):
    config, params, masks = _sampler(4, 0.3, 0, jnp.float64, dim=2)
    params = params._replace(log_step_size_x=jnp.log(jnp.array([[0.2, 0.3], [0.25, 0.35],
                                                                [0.3, 0.2], [0.22, 0.3]])),
                             log_step_size_v=jnp.log(jnp.array([[0.2, 0.3], [0.25, 0.35],
                                                                [0.3, 0.2], [0.22, 0.3]])))
    logdensity = lambda x: -0.5 * jnp.sum(x**2)
    state = l2hmc.init(jnp.array([0.8, -1.1]), logdensity)
    v = jnp.array([0.5, 0.9])
    time = jnp.sum(jnp.exp(params.log_step_size_x), 0)
    exact = state.position * jnp.cos(time) + v * jnp.sin(time)
    errors = []
    for r in (1, 2, 4):
      fine = kernel_module.refined(config, params, masks, r) if r > 1 else (config, params,
                                                                            masks)
      proposal = l2hmc.propose(*fine, logdensity, state, v, jnp.asarray(1))[0]
      errors.append(float(jnp.max(jnp.abs(proposal.position - exact))))
    assert errors[0] > 1e-3
    np.testing.assert_allclose(errors[0] / np.array(errors[1:]), [4.0, 16.0], rtol=0.2)


@pytest.mark.parametrize("num_steps, step_size, x, v, diverges, power", [
    (6, 0.9, 2.0, -2.0, True, 8.0),    # the first stage overflows
    (3, 0.6, 2.0, 3.0, False, 0.0),    # its energy error is ~49: finite
    (3, 0.6, 1.5, -3.0, False, 8.0),   # alpha_1 ~ 1e-161, the ghost's ~ 2.5e-3
    (3, 0.6, 0.75, -2.0, False, 1.0),  # alpha_1 ~ 0.48, the ghost's ~ 0.19
    (3, 0.6, 0.75, -2.0, False, 8.0),
    (3, 0.6, 0.5, 2.5, False, 0.0)])   # alpha_1 ~ 0.64, the ghost's ~ 0.06
def test_the_second_stage_keeps_detailed_balance(num_steps, step_size, x, v, diverges, power):
  """float64, the quartic target, from xi = (x, v, +1): the refined trajectory's end
  eta = (x_2, v_2, -1) maps back to xi, and pi(xi) (1 - alpha_1(xi)) g(alpha_1(xi))
  alpha_2(xi) = pi(eta) (1 - alpha_1(eta)) g(alpha_1(eta)) alpha_2(eta) to 1e-10, both
  nonzero, g the retry's probability, with the first stages' acceptances alpha_1 from
  propose (the ghost's from eta)."""
  with jax.enable_x64(True):
    config, params, masks = _sampler(num_steps, step_size, 4, jnp.float64)
    config = config._replace(retry_power=power)
    start = l2hmc.init(jnp.array([x]), _quartic)
    v = jnp.array([v])
    first, alpha_1, _ = l2hmc.propose(config, params, masks, _quartic, start, v,
                                      jnp.asarray(1))
    assert bool(kernel_module.is_divergent(first)) == diverges
    eta, alpha_xi = kernel_module.retried_acceptance(
        config, params, masks, _quartic, start, v, jnp.asarray(1), alpha_1)
    v_eta = kernel_module._propose(*kernel_module.refined(config, params, masks, 4), _quartic,
                                   start, v, jnp.asarray(1))[3]
    ghost_alpha_1 = l2hmc.propose(config, params, masks, _quartic, eta, v_eta,
                                  jnp.asarray(-1))[1]
    back, alpha_eta = kernel_module.retried_acceptance(
        config, params, masks, _quartic, eta, v_eta, jnp.asarray(-1), ghost_alpha_1)
    np.testing.assert_allclose(back.position, start.position, atol=1e-10)
    assert float(alpha_xi) > 0 and float(alpha_eta) > 0

    def flux(s, v, alpha_1, alpha_2):
      rejected = 1.0 - alpha_1
      return (jnp.exp(s.logdensity - 0.5 * jnp.sum(v**2)) * rejected
              * kernel_module.retry_probability(alpha_1, power) * alpha_2)

    np.testing.assert_allclose(float(flux(start, v, alpha_1, alpha_xi)),
                               float(flux(eta, v_eta, ghost_alpha_1, alpha_eta)), rtol=1e-10)


@pytest.mark.system  # jits the kernel's loop (~5 s)
def test_the_kernel_retries_rejected_trajectories_and_counts_them():
  """float64, K = 3 steps of 0.6 from x = 2.5 on the quartic (most first stages fail): the
  transitions count K gradients, or (r + 1) K = 15 more where they retried; an accepted
  first stage is never retried, and none of the first stages that did not diverge counts
  as divergent."""
  with jax.enable_x64(True):
    config, params, masks = _sampler(3, 0.6, 4, jnp.float64)
    kernel = jax.jit(lambda k, s: l2hmc.build_kernel(config)(k, s, _quartic, params, masks))
    infos = [kernel(jax.random.key(i), l2hmc.init(jnp.array([2.5]), _quartic))[1]
             for i in range(20)]
    used = {int(info.num_gradient_evaluations) for info in infos}
    assert 3 + 5 * 3 in used and used <= {3, 3 + 5 * 3}
    assert not any(bool(info.is_divergent) for info in infos if info.num_gradient_evaluations == 3)


@pytest.mark.system  # jits the kernel's loop (~5 s)
def test_an_unstable_step_size_on_a_gaussian_is_retried_and_accepted():
  """N(0, I), K = 3 steps of 2.5 (past the leapfrog's stability limit 2: the energy error
  grows): the first stage fails, the refined one (steps of 0.625) is accepted."""
  config, params, masks = _sampler(3, 2.5, 4, dim=2)
  logdensity = lambda x: -0.5 * jnp.sum(x**2)
  kernel = jax.jit(lambda k, s: l2hmc.build_kernel(config)(k, s, logdensity, params, masks))
  infos = [kernel(jax.random.key(i), l2hmc.init(jnp.array([1.0, -1.0]), logdensity))[1]
           for i in range(8)]
  retried = [info for info in infos if int(info.num_gradient_evaluations) == 3 + 5 * 3]
  assert retried and all(float(info.acceptance_rate) > 0.5 for info in retried)


@pytest.mark.system
def test_the_retrying_kernel_samples_the_quartic():
  """float32, 2,000 chains x 300 transitions of K = 6 steps of 0.8 jittered by 0.2 (a few
  per cent of the trajectories overflow), without and with the retry (r = 4): E[x^2] and
  E[x^4] within 4 standard errors of quadrature (chains independent: the standard error
  from the chains' means), the divergent transitions at least halved by the retry, and
  each retry counted as (r + 1) K gradients."""
  rates = []
  for retry in (0, 4):
    config, params, masks = _sampler(6, 0.8, retry, jitter=0.2)
    kernel = l2hmc.build_kernel(config)
    chains = 2000
    states = jax.vmap(lambda x: l2hmc.init(x, _quartic))(
        jax.random.normal(jax.random.key(2), (chains, 1)) * 0.7)

    def one(states, key, kernel=kernel, params=params, masks=masks):
      states, info = jax.vmap(lambda k, s: kernel(k, s, _quartic, params, masks))(
          jax.random.split(key, chains), states)
      return states, (states.position[:, 0], info.is_divergent, info.num_gradient_evaluations)

    _, (x, divergent, grads) = jax.jit(lambda s, one=one: jax.lax.scan(
        one, s, jax.random.split(jax.random.key(3), 300)))(states)
    x = np.asarray(x[50:], np.float64)
    grid = np.linspace(-6, 6, 200_001)
    density = np.exp(-0.5 * grid**2 - 0.25 * grid**4)
    density /= density.sum()
    for power in (2, 4):
      per_chain = np.mean(x**power, 0)
      error = np.std(per_chain) / np.sqrt(chains)
      assert abs(per_chain.mean() - np.sum(grid**power * density)) < 4 * error
    grads = np.asarray(grads)
    assert set(np.unique(grads)) <= ({6, 6 + 5 * 6} if retry else {6})
    rates.append(float(np.mean(np.asarray(divergent))))
  assert rates[0] > 1e-2 and rates[1] < 0.5 * rates[0]


@pytest.mark.system  # ~10 s per power on 2 cores
@pytest.mark.parametrize("power", [0.0, 16.0])
def test_the_retrying_kernel_keeps_the_quartic_stationary(power):
  """float64, 20,000 independent chains started from the quartic's exact distribution
  (inverse CDF by quadrature), 40 transitions of K = 6 steps of 1.2 jittered by 0.2 (about
  half the transitions retry): the chains' final positions in 20 equiprobable bins pass a
  chi-square test at p > 1e-3 (19 degrees of freedom). Oracle of the whole kernel: the
  exact distribution is stationary, so the final positions are 20,000 independent draws of
  it. A second stage accepted by pi(eta)/pi(xi) alone (without the ghost's factor) fails it
  by far (chi-square ~110)."""
  chains = 20_000
  with jax.enable_x64(True):
    config, params, masks = _sampler(6, 1.2, 4, jnp.float64, jitter=0.2)
    config = config._replace(retry_power=power)
    kernel = l2hmc.build_kernel(config)
    grid = np.linspace(-5.0, 5.0, 200_001)
    cdf = np.cumsum(np.exp(-0.5 * grid**2 - 0.25 * grid**4))
    cdf /= cdf[-1]
    rng = np.random.default_rng(0)
    starts = np.interp(rng.uniform(size=chains), cdf, grid)[:, None]
    states = jax.vmap(lambda x: l2hmc.init(x, _quartic))(jnp.asarray(starts))

    def one(states, key):
      states, info = jax.vmap(lambda k, s: kernel(k, s, _quartic, params, masks))(
          jax.random.split(key, chains), states)
      return states, info.num_gradient_evaluations > 6

    states, retried = jax.jit(lambda s: jax.lax.scan(one, s, jax.random.split(
        jax.random.key(5), 40)))(states)
    assert 0.2 < float(jnp.mean(retried)) < 0.9
    edges = np.interp(np.linspace(0.0, 1.0, 21), cdf, grid)
    edges[0], edges[-1] = -np.inf, np.inf
    counts = np.histogram(np.asarray(states.position[:, 0]), edges)[0]
    expected = chains / 20
    chi2 = np.sum((counts - expected)**2 / expected)
    assert scipy.stats.chi2.sf(chi2, 19) > 1e-3, chi2


def funnel(z):
  """A 2-d funnel: v ~ N(0, 3^2), x | v ~ N(0, e^v)."""
  return -z[0]**2 / 18.0 - 0.5 * z[1]**2 * jnp.exp(-z[0]) - 0.5 * z[0]


def _funnel_local_params(config, step_size):
  """float64 step sizes and local step sizes beta = (0.6, 0), c = (0, 0.8) for ``funnel``."""
  params = l2hmc.init_params(jax.random.key(0), config, step_size=step_size)
  return params._replace(
      log_step_size_x=params.log_step_size_x.astype(jnp.float64),
      log_step_size_v=params.log_step_size_v.astype(jnp.float64),
      local=params.local._replace(slope=jnp.array([0.6, 0.0]), exponent=jnp.array([0.0, 0.8])))


def test_the_second_stage_keeps_detailed_balance_with_local_step_sizes():
  """float64, a 2-d funnel (v ~ N(0, 3^2), x | v ~ N(0, e^v)) with local step sizes
  (beta = (0.6, 0), c = (0, 0.8)): the tuning variable w = beta^T z + u stays fixed in both
  stages and the ghost, the refined trajectory maps eta back to xi, and the fluxes of the
  augmented target pi(z) N(v; 0, I) N(w; beta^T z, 1) match to 1e-10, both nonzero."""
  with jax.enable_x64(True):
    config = l2hmc.L2HMCConfig(dim=2, num_steps=4, use_networks=False, jitter=0.0,
                               retry_divergent=4, local_step_sizes=True)
    params = _funnel_local_params(config, step_size=0.9)
    masks = l2hmc.make_masks(jax.random.key(1), config)
    start = l2hmc.init(jnp.array([2.0, 3.0]), funnel)
    v, u = jnp.array([-1.0, 1.0]), jnp.asarray(-0.5)
    alpha_1 = l2hmc.propose(config, params, masks, funnel, start, v, jnp.asarray(1),
                            tuning_noise=u)[1]
    eta, alpha_xi = kernel_module.retried_acceptance(
        config, params, masks, funnel, start, v, jnp.asarray(1), alpha_1, tuning_noise=u)
    v_eta = kernel_module._propose(*kernel_module.refined(config, params, masks, 4), funnel,
                                   start, v, jnp.asarray(1), None, u)[3]
    w = 0.6 * start.position[0] + u
    u_eta = w - 0.6 * eta.position[0]
    ghost_alpha_1 = l2hmc.propose(config, params, masks, funnel, eta, v_eta, jnp.asarray(-1),
                                  tuning_noise=u_eta)[1]
    back, alpha_eta = kernel_module.retried_acceptance(
        config, params, masks, funnel, eta, v_eta, jnp.asarray(-1), ghost_alpha_1,
        tuning_noise=u_eta)
    np.testing.assert_allclose(back.position, start.position, atol=1e-10)
    assert 0 < float(alpha_xi) < 1 and float(alpha_eta) > 0
    assert 0.05 < float(alpha_1) < 0.95 and 0.05 < float(ghost_alpha_1) < 0.95

    def flux(s, v, noise, alpha_1, alpha_2):
      return (jnp.exp(s.logdensity - 0.5 * jnp.sum(v**2) - 0.5 * noise**2) * (1.0 - alpha_1)
              * kernel_module.retry_probability(alpha_1, config.retry_power) * alpha_2)

    np.testing.assert_allclose(float(flux(start, v, u, alpha_1, alpha_xi)),
                               float(flux(eta, v_eta, u_eta, ghost_alpha_1, alpha_eta)),
                               rtol=1e-10)


@pytest.mark.system  # ~20 s on 2 cores
def test_the_retrying_kernel_keeps_the_funnel_stationary_with_local_step_sizes():
  """float64, a 2-d funnel (v ~ N(0, 3^2), x | v ~ N(0, e^v)) with local step sizes
  (beta = (0.6, 0), c = (0, 0.8)): 20,000 chains started from its exact distribution, 30
  transitions of K = 4 steps of 1.2 jittered by 0.3 (the neck's trajectories diverge and
  retry): v and x e^{-v/2} (standard normal) in 20 equiprobable bins each pass a
  chi-square test at p > 1e-3 (19 degrees of freedom). A ghost that keeps the noise u
  instead of w fails it (p ~ 0)."""
  chains = 20_000
  with jax.enable_x64(True):
    config = l2hmc.L2HMCConfig(dim=2, num_steps=4, use_networks=False, jitter=0.3,
                               retry_divergent=4, local_step_sizes=True)
    params = _funnel_local_params(config, step_size=1.2)
    masks = l2hmc.make_masks(jax.random.key(1), config)
    kernel = l2hmc.build_kernel(config)
    noise = jax.random.normal(jax.random.key(2), (chains, 2), jnp.float64)
    starts = jnp.stack([3.0 * noise[:, 0], jnp.exp(1.5 * noise[:, 0]) * noise[:, 1]], 1)
    states = jax.vmap(lambda x: l2hmc.init(x, funnel))(starts)

    def one(states, key):
      states, info = jax.vmap(lambda k, s: kernel(k, s, funnel, params, masks))(
          jax.random.split(key, chains), states)
      return states, (info.num_gradient_evaluations > 4, info.is_divergent)

    states, (retried, divergent) = jax.jit(lambda s: jax.lax.scan(one, s, jax.random.split(
        jax.random.key(3), 30)))(states)
    assert float(jnp.mean(retried)) > 0.01
    v, x = np.asarray(states.position[:, 0]), np.asarray(states.position[:, 1])
    for draws in (v / 3.0, x * np.exp(-v / 2)):
      edges = scipy.stats.norm.ppf(np.linspace(0.0, 1.0, 21))
      counts = np.histogram(draws, edges)[0]
      chi2 = np.sum((counts - chains / 20)**2 / (chains / 20))
      assert scipy.stats.chi2.sf(chi2, 19) > 1e-3, chi2
