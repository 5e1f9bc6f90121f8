"""Position-dependent step sizes (Gibbs self-tuning).

Oracles: a textbook leapfrog with the step sizes exp(log eps + c w) and the GIST
acceptance ratio written out by hand (float64, 1e-10), and Monte Carlo moments of a
known Gaussian after transitions from exact draws (5 standard errors).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from metaoptax import l2hmc
from tests.l2hmc.paper import paper_config, paper_training

COVARIANCE = jnp.array([[1.0, 0.6], [0.6, 4.0]])
GAUSSIAN = l2hmc.targets.gaussian(COVARIANCE)


def _config():
  return paper_config(dim=2, num_steps=5, use_networks=False, per_coordinate=True,
                           step_sizes="per_step", local_step_sizes=True)


# saturating step sizes: coordinate 0 capped at a shift of 0.4 (reached at w ~ 0.7),
# coordinate 1 uncapped (log-linear)
CAPS = {"log-linear": None, "saturating": jnp.array([0.4, jnp.inf])}


def _params(config, cap=None):
  params = l2hmc.init_params(jax.random.key(0), config, step_size=jnp.array([0.3, 0.5]))
  local = l2hmc.local_step_sizes.LocalStepSizes(jnp.array([1.5, -0.4]), jnp.array([0.6, 0.3]),
                                                cap)
  return params._replace(local=local)


def _textbook(x, v, u, params):
  """Leapfrog with eps_k = exp(log eps_k + c w), w = beta.x + u (with caps, the shift c w
  replaced by the soft minimum -log(e^{-2 c w} + e^{-2 cap}) / 2 less its value at w = 0),
  and the acceptance min(1, p(x')N(v')N(w; beta.x', 1) / (p(x)N(v)N(w; beta.x, 1)))."""
  beta, c, cap = params.local[:3]
  w = beta @ x + u
  shift = c * w
  if cap is not None:
    shift = (-0.5 * jnp.log(jnp.exp(-2.0 * c * w) + jnp.exp(-2.0 * cap))
             + 0.5 * jnp.log(1.0 + jnp.exp(-2.0 * cap)))
  logp, grad = GAUSSIAN.logdensity_fn, jax.grad(GAUSSIAN.logdensity_fn)
  y, p = x, v
  for log_eps in params.log_step_size_x:
    eps = jnp.exp(log_eps + shift)
    p = p + 0.5 * eps * grad(y)
    y = y + eps * p
    p = p + 0.5 * eps * grad(y)
  log_ratio = (logp(y) - 0.5 * p @ p - 0.5 * (w - beta @ y) ** 2
               - logp(x) + 0.5 * v @ v + 0.5 * (w - beta @ x) ** 2)
  return y, jnp.minimum(1.0, jnp.exp(log_ratio))


@pytest.mark.parametrize("cap", list(CAPS))
def test_acceptance_matches_the_gist_ratio(cap, u=1.3):
  with jax.enable_x64(True):
    config = _config()
    params = jax.tree.map(lambda a: jnp.asarray(a, jnp.float64), _params(config, CAPS[cap]))
    x, v = jnp.array([0.5, -1.0]), jnp.array([0.4, 1.1])
    state = l2hmc.init(x, GAUSSIAN.logdensity_fn)
    proposal, acceptance, _ = l2hmc.propose(config, params, jnp.zeros((5, 2)),
                                            GAUSSIAN.logdensity_fn, state, v,
                                            jnp.asarray(1), None, jnp.asarray(u))
    y, expected = _textbook(x, v, u, params)
    assert 0.01 < float(expected) < 0.99  # the q ratio matters here
    if cap == "saturating":  # the cap binds: coordinate 0's shift is below c w
      assert float(params.local.exponent[0] * (params.local.slope @ x + u)) > 0.6
    np.testing.assert_allclose(proposal.position, y, atol=1e-10)
    np.testing.assert_allclose(acceptance, expected, atol=1e-10)


@pytest.mark.parametrize("cap", list(CAPS))
def test_leaves_the_target_invariant(cap):
  """Exact draws stay exact after a transition (moments of x and x^2 within 5 s.e.)."""
  config, n = _config(), 20_000
  sampler = l2hmc.l2hmc(GAUSSIAN.logdensity_fn, config, _params(config, CAPS[cap]),
                        jnp.zeros((5, 2)))
  draws = GAUSSIAN.sample(jax.random.key(1), n)

  @jax.jit
  def move(key, positions):
    states = jax.vmap(sampler.init)(positions)
    states, info = jax.vmap(sampler.step)(jax.random.split(key, n), states)
    return states.position, info.acceptance_rate

  moved, acceptance = move(jax.random.key(2), draws)
  assert 0.2 < float(jnp.mean(acceptance)) < 0.95
  variances = jnp.diag(COVARIANCE)
  np.testing.assert_array_less(jnp.abs(moved.mean(0)), 5 * jnp.sqrt(variances / n))
  np.testing.assert_array_less(jnp.abs((moved**2).mean(0) - variances),
                               5 * jnp.sqrt(2 * variances**2 / n))


def test_needs_per_coordinate_step_sizes():
  with pytest.raises(ValueError, match="per_coordinate"):
    l2hmc.init_params(jax.random.key(0), paper_config(dim=2, local_step_sizes=True))


def test_scale_move_needs_local_step_sizes():
  with pytest.raises(ValueError, match="scale_move"):
    l2hmc.init_params(jax.random.key(0), paper_config(dim=2, scale_move=1.0))


@pytest.mark.parametrize("size", [0.1, 3.0])
def test_fit_recovers_a_rank_one_slope_matrix(size):
  """H = s a b^T: c beta^T = H exactly (1e-5), the jitter max|c| capped at JITTER."""
  a, b = jnp.array([0.6, 0.8, 0.0]), jnp.array([0.0, 0.6, -0.8])
  slopes = size * jnp.outer(a, b)
  local = l2hmc.local_step_sizes.fit(slopes)
  np.testing.assert_allclose(jnp.outer(local.slope, local.exponent), slopes, atol=1e-5)
  jitter = float(jnp.max(jnp.abs(local.exponent)))
  np.testing.assert_allclose(jitter, min(0.8 * size, l2hmc.local_step_sizes.JITTER), rtol=1e-5)


def test_curvature_is_the_hessian_diagonal():
  """local_step_sizes.diagonal_curvature against jax.hessian's diagonal (a non-separable
  density), 1e-5."""
  def logdensity(x):
    return -0.5 * x[0] ** 2 * jnp.exp(x[1]) - jnp.sum(jnp.sin(x) * x[::-1]) - x[2] ** 4

  x = jnp.array([0.3, -0.7, 1.2])
  np.testing.assert_allclose(l2hmc.local_step_sizes.diagonal_curvature(logdensity, x),
                             -jnp.diagonal(jax.hessian(logdensity)(x)), rtol=1e-5)


@pytest.mark.system  # a training or sampling run (6-10 s): CI's second command
def test_fitted_step_sizes_follow_the_funnels_scale():
  """On the funnel the local scale of x_i is exp(v/2): after init_training's curvature fit,
  log eps_{x_i} grows by c_i beta_v / sigma_v = 1/2 per unit of v (1e-3; the slopes are in
  the units of the whitening the sampler uses), and follows no other coordinate
  (|beta_j| < 1e-3 |beta_v|). (The log-square fit gave 0.02-0.64 over seeds on the 10-d
  funnel.)"""
  target = l2hmc.posteriors.neals_funnel(dim=4)
  config = paper_config(dim=4, num_steps=3, use_networks=False, per_coordinate=True,
                             local_step_sizes=True)
  training = paper_training(num_chains=8, warmup_iterations=24)
  state = l2hmc.init_training(jax.random.key(3), target, config, training)
  local, sigma_v = state.params.local, float(state.whitening.scale[0])
  per_v = np.asarray(local.exponent[1:]) * float(local.slope[0]) / sigma_v
  np.testing.assert_allclose(per_v, 0.5, rtol=1e-3)
  assert abs(float(local.exponent[0])) < 1e-3  # v's own scale does not follow v
  np.testing.assert_array_less(np.abs(np.asarray(local.slope[1:])),
                               1e-3 * abs(float(local.slope[0])))


def test_curvature_slopes_vanish_on_a_gaussian():
  """Constant curvature: every slope 0 (1e-5), so the fit leaves plain HMC (c ~ 0)."""
  found = jax.jit(lambda x, k: l2hmc.warmup(k, GAUSSIAN.logdensity_fn, x, num_steps=3,
                                            num_iterations=40, slopes="curvature"))(
                                                GAUSSIAN.sample(jax.random.key(0), 16),
                                                jax.random.key(1))
  np.testing.assert_array_less(np.abs(np.asarray(found.log_scale_slopes)), 1e-5)
  local = l2hmc.local_step_sizes.fit(found.log_scale_slopes)
  np.testing.assert_array_less(np.abs(np.asarray(local.exponent)), 1e-4)


def test_rejects_an_unknown_fit():
  with pytest.raises(ValueError, match="slopes"):
    l2hmc.warmup(jax.random.key(0), GAUSSIAN.logdensity_fn, jnp.zeros((4, 2)), slopes="x")
  with pytest.raises(ValueError, match="local_fit"):
    l2hmc.init_training(jax.random.key(0), GAUSSIAN, _config(), paper_training(local_fit="x"))


def test_fit_caps_recovers_a_saturating_scale():
  """Log scales m(0.5 p, 0.4) + 0.3 (soft minimum, p = z_0) and -1 + 0.5 p: the fit keeps the
  second log-linear (cap inf, exponent 0.5) and matches the first's shifts over the samples
  up to their intercept within 0.03 (the caps are a grid of quantiles)."""
  z = jax.random.normal(jax.random.key(0), (2000, 2))
  p = z[:, 0]
  saturating = -0.5 * jnp.log(jnp.exp(-p) + jnp.exp(-0.8)) + 0.3
  local = l2hmc.local_step_sizes.fit_caps(
      l2hmc.local_step_sizes.LocalStepSizes(jnp.array([1.0, 0.0]), jnp.array([0.5, 0.5])),
      z, jnp.stack([saturating, -1.0 + 0.5 * p], axis=1))
  assert float(local.cap[1]) == float("inf")
  np.testing.assert_allclose(local.exponent[1] * local.slope[0], 0.5, rtol=1e-6)
  shifts = l2hmc.local_step_sizes.shifted_log_step_sizes(local, jnp.zeros(2),
                                                         (local.slope[0] * p)[:, None])
  residual = saturating - shifts[:, 0]
  np.testing.assert_array_less(jnp.abs(residual - jnp.mean(residual)), 0.03)
  assert float(local.cap[0]) < 1.0 < float(jnp.max(0.5 * p))  # the cap binds


@pytest.mark.parametrize("exponent, kept", [(0.5, True), (0.3, False)])
def test_keep_if_varying_switches_off_a_flat_model(exponent, kept):
  """Positions with beta.z ~ N(0, 1): the shift c w has sd |c| (0.5 kept, 0.3 < MIN_SPREAD
  = 0.4 switched off to beta = c = 0, which leaves the step sizes fixed)."""
  z = jax.random.normal(jax.random.key(0), (4000, 2))
  local = l2hmc.local_step_sizes.LocalStepSizes(jnp.array([1.0, 0.0]),
                                                jnp.array([exponent, 0.1]))
  chosen = l2hmc.local_step_sizes.keep_if_varying(local, z)
  expected = local if kept else l2hmc.local_step_sizes.LocalStepSizes(jnp.zeros(2), jnp.zeros(2))
  np.testing.assert_array_equal(chosen.slope, expected.slope)
  np.testing.assert_array_equal(chosen.exponent, expected.exponent)


FUNNEL_MODEL = l2hmc.local_step_sizes.LocalStepSizes(jnp.array([1.0, 0.0, 0.0, 0.0]),
                                                     jnp.array([0.0, 0.5, 0.5, 0.5]))


@pytest.mark.parametrize("t", [-1.6, 2.3])
def test_scale_move_ratio_on_the_funnel_is_the_prior_ratio_of_v(t):
  """With the funnel's exact model (x_i scaled by e^{t/2} as v -> v + t), p(T_t z) |det| / p(z)
  is N(v + t; 0, 9) / N(v; 0, 9) in closed form (float64, 1e-10); the Jacobian against
  jax.jacfwd's (1e-10); T_{-t} undoes T_t."""
  target = l2hmc.posteriors.neals_funnel(dim=4)
  with jax.enable_x64(True):
    model = jax.tree.map(lambda a: jnp.asarray(a, jnp.float64), FUNNEL_MODEL)
    z, t = jnp.array([0.7, 0.3, -1.2, 2.0]), jnp.asarray(t)
    moved, log_det = l2hmc.local_step_sizes.scale_move(model, z, t)
    log_ratio = target.logdensity_fn(moved) - target.logdensity_fn(z) + log_det
    np.testing.assert_allclose(log_ratio, -0.5 * ((0.7 + t) ** 2 - 0.7**2) / 9.0, atol=1e-10)
    jacobian = jax.jacfwd(lambda y: l2hmc.local_step_sizes.scale_move(model, y, t)[0])(z)
    np.testing.assert_allclose(log_det, jnp.linalg.slogdet(jacobian)[1], atol=1e-10)
    np.testing.assert_allclose(l2hmc.local_step_sizes.scale_move(model, moved, -t)[0], z,
                               atol=1e-10)


def test_scale_move_leaves_the_funnel_invariant():
  """A saturating model (caps that bind) with inexact rates and centres: exact funnel draws
  stay exact
  after a scale move and a leapfrog of tiny steps (the mean and variance of v and the mean of
  log x_1^2 - v, a log chi^2_1, within 5 s.e.); v moves. Without the Jacobian the mean of v
  fails (measured -0.69)."""
  target = l2hmc.posteriors.neals_funnel(dim=4)
  config = paper_config(dim=4, num_steps=1, use_networks=False, per_coordinate=True,
                             local_step_sizes=True, scale_move=2.0)
  local = FUNNEL_MODEL._replace(exponent=jnp.array([0.0, 0.45, 0.5, 0.55]),
                                cap=jnp.array([jnp.inf, 1.0, 1.5, jnp.inf]),
                                centre=jnp.array([0.0, 0.3, -0.2, 0.0]))
  params = l2hmc.init_params(jax.random.key(0), config, step_size=jnp.full(4, 1e-3))
  sampler = l2hmc.l2hmc(target.logdensity_fn, config, params._replace(local=local),
                        jnp.zeros((1, 4)))
  n = 20_000
  draws = target.sample(jax.random.key(1), n)
  moved = jax.jit(lambda k, x: jax.vmap(sampler.step)(jax.random.split(k, n),
                                                      jax.vmap(sampler.init)(x))[0].position)(
                                                          jax.random.key(2), draws)
  v = moved[:, 0]
  assert float(jnp.mean(jnp.abs(v - draws[:, 0]))) > 0.5
  np.testing.assert_allclose(float(v.mean()), 0.0, atol=5 * 3.0 / np.sqrt(n))
  np.testing.assert_allclose(float((v**2).mean()), 9.0, atol=5 * 9.0 * np.sqrt(2.0 / n))
  standardized = jnp.log(moved[:, 1] ** 2) - v  # log chi^2_1: mean -1.27, sd 2.22
  np.testing.assert_allclose(float(standardized.mean()), -1.2704, atol=5 * 2.2214 / np.sqrt(n))


def test_scale_move_about_a_centre_and_fit_centre_by_hand():
  """T_t scales z_i - a_i (a = centre): by hand, e^{c_i beta_k t} (log-linear, pivot 0), and
  T_{-t} undoes it; fit_centre is the mean weighted by e^{-2 l} (two samples, by hand)."""
  model = FUNNEL_MODEL._replace(centre=jnp.array([0.0, 1.0, -2.0, 0.5]))
  z = jnp.array([0.7, 0.3, -1.2, 2.0])
  moved, log_det = l2hmc.local_step_sizes.scale_move(model, z, jnp.asarray(0.8))
  factor = np.exp(0.5 * 0.8)
  expected = [0.7 + 0.8, 1.0 + (0.3 - 1.0) * factor, -2.0 + (-1.2 + 2.0) * factor,
              0.5 + (2.0 - 0.5) * factor]
  np.testing.assert_allclose(moved, expected, atol=1e-6)
  np.testing.assert_allclose(log_det, 3 * 0.5 * 0.8, rtol=1e-6)
  np.testing.assert_allclose(l2hmc.local_step_sizes.scale_move(model, moved, -0.8)[0], z,
                             rtol=1e-5)
  positions, log_scales = jnp.array([[1.0, 4.0], [3.0, -2.0]]), jnp.array([[0.0, 1.0],
                                                                            [1.0, 0.0]])
  w = np.exp(-2.0 * np.array([[0.0, 1.0], [1.0, 0.0]]))
  np.testing.assert_allclose(l2hmc.local_step_sizes.fit_centre(positions, log_scales),
                             (w * np.asarray(positions)).sum(0) / w.sum(0), rtol=1e-6)


@pytest.mark.parametrize("factor, varies", [(0.97, False), (1.03, True)])
def test_fit_varies_where_the_fitted_shifts_spread_by_min_spread(factor, varies):
  """One driver (coordinate 0) setting the log scale of the 3 others with slope g (whitened),
  the log local scales exactly g z_0 (log-linear, no cap): the fit's shift of each is g z_0
  (rank one: s = g sqrt(3), b = 1/sqrt(3), a = e_0; fit_caps keeps no cap and the exponent),
  whose sd over the positions is g sd(z_0), kept by keep_if_varying where >= MIN_SPREAD. g 3 %
  below and above that threshold (the oracle: the closed form of the sd); flat slopes and
  scales (a Gaussian) do not vary."""
  z = jax.random.normal(jax.random.key(1), (2000, 4))
  threshold = l2hmc.local_step_sizes.MIN_SPREAD / float(jnp.std(z[:, 0]))
  g = factor * threshold
  slopes = jnp.zeros((4, 4)).at[0, 1:].set(g)
  log_scales = jnp.concatenate([jnp.zeros((2000, 1)), jnp.repeat(g * z[:, :1], 3, 1)], 1)
  assert bool(l2hmc.local_step_sizes.fit_varies(slopes, z, log_scales)) == varies
  assert not bool(l2hmc.local_step_sizes.fit_varies(jnp.zeros((4, 4)), z, jnp.zeros_like(z)))


def test_scales_vary_screens_curvatures():
  """The screen of adapt (MIN_SPREAD = 0.4 on the sd of half the log curvature): constant
  curvatures (a Gaussian) no; the funnel's e^{-v} with v ~ N(0, 9) yes (sd 1.5); the same
  coordinate with a curvature <= 0 at one chain no (no local scale to follow)."""
  v = 3.0 * jax.random.normal(jax.random.key(0), (32,))
  constant = jnp.ones((32, 3)) * jnp.array([1.0, 4.0, 0.5])
  funnel = jnp.stack([jnp.full(32, 1 / 9.0), jnp.exp(-v), jnp.exp(-v)], axis=1)
  assert not bool(l2hmc.local_step_sizes.scales_vary(constant))
  assert bool(l2hmc.local_step_sizes.scales_vary(funnel))
  assert not bool(l2hmc.local_step_sizes.scales_vary(funnel.at[0, 1:].set(-1.0)))
  # at the threshold: half the log curvature with sd just below / above 0.4
  ramp = jnp.linspace(-1.0, 1.0, 32)
  half_log_sd = float(jnp.std(ramp))
  below = jnp.exp(2 * ramp * 0.39 / half_log_sd)[:, None]
  above = jnp.exp(2 * ramp * 0.41 / half_log_sd)[:, None]
  assert not bool(l2hmc.local_step_sizes.scales_vary(below))
  assert bool(l2hmc.local_step_sizes.scales_vary(above))
