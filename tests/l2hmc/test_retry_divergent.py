"""``L2HMCConfig(retry_divergent=r)``: a divergent trajectory retried with steps r times
smaller, accepted by delayed rejection (``metaoptax.l2hmc.kernel.retried_acceptance``).

Oracles: the harmonic oscillator's exact flow (the refined trajectory is the same
integrator with r times the steps: its error falls as 1/r^2), detailed balance of the
second stage checked on a pair of states in float64 (pi(xi) alpha_2(xi) = pi(eta)
alpha_2(eta), eta the refined proposal), and the stationary moments of a quartic target,
whose big steps overflow, against quadrature.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

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


@pytest.mark.parametrize("num_steps, step_size, x, v, diverges", [
    (6, 0.9, 2.0, -2.0, True),    # the first stage overflows
    (3, 0.6, 2.0, 3.0, False)])   # its energy error is ~49: finite, above RETRY_ENERGY
def test_the_second_stage_keeps_detailed_balance(num_steps, step_size, x, v, diverges):
  """float64, the quartic target, from xi = (x, v, +1) a first stage that fails: the refined
  trajectory's end eta = (x_2, v_2, -1) maps back to xi, and exp(-H(xi)) alpha_2(xi) =
  exp(-H(eta)) alpha_2(eta) to 1e-10, both nonzero (the ghosts fail too), with the first
  stages' acceptances alpha_1 from propose."""
  with jax.enable_x64(True):
    config, params, masks = _sampler(num_steps, step_size, 4, jnp.float64)
    start = l2hmc.init(jnp.array([x]), _quartic)
    v = jnp.array([v])
    first, alpha_1, _ = l2hmc.propose(config, params, masks, _quartic, start, v,
                                      jnp.asarray(1))
    assert bool(kernel_module.is_divergent(first)) == diverges
    assert bool(kernel_module.failed(alpha_1))
    eta, alpha_xi, ghost_failed = kernel_module.retried_acceptance(
        config, params, masks, _quartic, start, v, jnp.asarray(1), alpha_1)
    v_eta = kernel_module._propose(*kernel_module.refined(config, params, masks, 4), _quartic,
                                   start, v, jnp.asarray(1))[3]
    ghost_alpha_1 = l2hmc.propose(config, params, masks, _quartic, eta, v_eta,
                                  jnp.asarray(-1))[1]
    back, alpha_eta, _ = kernel_module.retried_acceptance(
        config, params, masks, _quartic, eta, v_eta, jnp.asarray(-1), ghost_alpha_1)
    np.testing.assert_allclose(back.position, start.position, atol=1e-10)
    assert bool(ghost_failed) and float(alpha_xi) > 0 and float(alpha_eta) > 0
    energy = lambda s, v: -s.logdensity + 0.5 * jnp.sum(v**2)
    np.testing.assert_allclose(float(jnp.exp(-energy(start, v)) * alpha_xi),
                               float(jnp.exp(-energy(eta, v_eta)) * alpha_eta), rtol=1e-10)


@pytest.mark.system  # jits the kernel's loop (~5 s)
def test_a_ghost_that_does_not_fail_rejects_the_retry():
  """float64, K = 3 steps of 0.6 from xi = (1.5, -3, +1): the first stage fails (acceptance
  ~1e-161) but the ghost from the refined end does not: alpha_2 = 0 (its factor D(eta) is
  0). The kernel's transitions from there count (r + 1) K = 15 gradients more where they
  retry, and none diverges."""
  with jax.enable_x64(True):
    config, params, masks = _sampler(3, 0.6, 4, jnp.float64)
    start = l2hmc.init(jnp.array([1.5]), _quartic)
    v = jnp.array([-3.0])
    _, alpha_1, _ = l2hmc.propose(config, params, masks, _quartic, start, v, jnp.asarray(1))
    assert bool(kernel_module.failed(alpha_1))
    _, alpha, ghost_failed = kernel_module.retried_acceptance(
        config, params, masks, _quartic, start, v, jnp.asarray(1), alpha_1)
    assert not bool(ghost_failed) and float(alpha) == 0.0
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
