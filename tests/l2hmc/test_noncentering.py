"""The learned non-centering (metaoptax.l2hmc.noncentering).

Oracles, float64: the inverse against the forward map (1e-12); the log-determinant against
the log |det| of the Jacobian by autodiff (1e-10); the latent state's log density and
gradient against autodiff of log p(T(u)) + log|det| (1e-10), and back; the structure and
the fit against Neal's funnel's exact non-centering from exact draws (0.1, about 5 standard
errors of the slope at 4,096 draws); a transported sampler leaves exact funnel draws' moments
within 5 standard errors.
"""

import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from metaoptax import l2hmc
from metaoptax.l2hmc import noncentering
from metaoptax.l2hmc.kernel import L2HMCState

DIM = 5


@pytest.fixture(autouse=True)
def _float64():
  with jax.enable_x64(True):
    yield


def _transport(key):
  """A random transport: coordinates 2 and 4 driven, by 0 and 1 (scale), on 0, 1, 3."""
  keys = jax.random.split(key, 9)
  driven = jnp.array([False, False, True, False, True])
  parents = ~driven
  shift_mask = driven[:, None] & parents[None, :]
  scale_mask = shift_mask & (jnp.arange(DIM) < 2)[None, :]
  normal = lambda k, shape: jax.random.normal(k, shape, jnp.float64)
  return noncentering.NonCentering(
      normal(keys[0], (DIM,)), jnp.exp(0.3 * normal(keys[1], (DIM,))), driven,
      jnp.where(driven, normal(keys[2], (DIM,)), 0.0),
      jnp.where(shift_mask, normal(keys[3], (DIM, DIM)), 0.0),
      jnp.where(driven, 0.3 * normal(keys[4], (DIM,)), 0.0),
      jnp.where(scale_mask, 0.5 * normal(keys[5], (DIM, DIM)), 0.0),
      jnp.where(driven, jnp.exp(normal(keys[6], (DIM,))), 0.0),
      jnp.where(driven, normal(keys[7], (DIM,)), 0.0),
      jnp.where(shift_mask, normal(keys[8], (DIM, DIM)), 0.0))


def _logdensity(x):  # a non-Gaussian density of five coordinates
  return -0.5 * jnp.sum(x**2) - 0.1 * jnp.sum(x**4) + 0.3 * x[0] * x[2] + jnp.sin(x[1] * x[4])


def test_inverse_and_log_det():
  transport = _transport(jax.random.key(0))
  for seed in range(4):
    u = jax.random.normal(jax.random.key(seed + 10), (DIM,), jnp.float64)
    x, log_det = noncentering.forward(transport, u)
    np.testing.assert_allclose(noncentering.inverse(transport, x), u, atol=1e-12)
    jacobian = jax.jacfwd(lambda v: noncentering.forward(transport, v)[0])(u)
    np.testing.assert_allclose(log_det, jnp.linalg.slogdet(jacobian)[1], atol=1e-10)


def test_latent_state_round_trip():
  transport = _transport(jax.random.key(1))
  latent_fn = noncentering.latent_logdensity(_logdensity, transport)
  u = jax.random.normal(jax.random.key(2), (DIM,), jnp.float64)
  x = noncentering.forward(transport, u)[0]
  state = L2HMCState(x, _logdensity(x), jax.grad(_logdensity)(x))
  latent = noncentering.to_latent_state(transport, state)
  np.testing.assert_allclose(latent.position, u, atol=1e-12)
  np.testing.assert_allclose(latent.logdensity, latent_fn(u), atol=1e-10)
  np.testing.assert_allclose(latent.logdensity_grad, jax.grad(latent_fn)(u), atol=1e-10)
  back = noncentering.from_latent_state(
      transport, L2HMCState(u, latent_fn(u), jax.grad(latent_fn)(u)))
  for got, want in zip(back, state):
    np.testing.assert_allclose(got, want, atol=1e-10)


def _funnel_draws(n=4096):
  funnel = l2hmc.posteriors.neals_funnel(dim=4)
  return funnel, funnel.sample(jax.random.key(3), n).astype(jnp.float64)


@pytest.mark.system  # 8,192 funnel draws and their Hessians (~8 s)
def test_structure_and_fit_find_the_funnels_noncentering():
  """On exact funnel draws (v = x_0 ~ N(0, 3^2), x_i ~ N(0, e^v)), whitened by their sds,
  the log square of x_i regressed on v has slope 1 per unit of v: 1.5 per unit of z_0 in
  log-scale units; the fit finds A_{i0} = 1.5 and B = 0 (within 0.1)."""
  _, draws = _funnel_draws()
  location, scale = jnp.zeros(4, jnp.float64), jnp.std(draws, 0)
  z = draws / scale
  centred = z - z.mean(0)
  cross = centred.T @ (jnp.log(centred**2) - jnp.log(centred**2).mean(0)) / z.shape[0]
  slopes = 0.5 * jnp.linalg.solve(centred.T @ centred / z.shape[0], cross)
  driven, edges = noncentering.structure(slopes * (1.0 - jnp.eye(4)))
  np.testing.assert_array_equal(driven, [False, True, True, True])
  np.testing.assert_array_equal(edges[1:, 0], [True, True, True])
  assert not jnp.any(edges[:, 1:])
  transport = noncentering.fit(draws, location, scale, driven, edges).transport
  np.testing.assert_allclose(transport.scale_weights[1:, 0], 1.5, atol=0.1)
  np.testing.assert_allclose(transport.shift_weights[1:, 0], 0.0, atol=0.1)


def test_no_structure_in_a_gaussian():
  """A correlated Gaussian: every log-scale slope is 0, so nothing is driven."""
  covariance = jnp.array([[1.0, 0.9, 0.0], [0.9, 1.0, 0.5], [0.0, 0.5, 1.0]])
  x = jax.random.multivariate_normal(jax.random.key(4), jnp.zeros(3), covariance, (8192,))
  c = x - x.mean(0)
  cross = c.T @ (jnp.log(c**2) - jnp.log(c**2).mean(0)) / x.shape[0]
  slopes = 0.5 * jnp.linalg.solve(c.T @ c / x.shape[0], cross) * (1.0 - jnp.eye(3))
  driven, _ = noncentering.structure(slopes)
  assert not jnp.any(driven)


@pytest.mark.system
def test_transported_sampler_keeps_the_funnel():
  """HMC in the fitted latent coordinates, wrapped, from exact funnel draws: the draws'
  mean and sd of v after 20 transitions stay within 5 standard errors of the exact ones."""
  funnel, draws = _funnel_draws(1024)
  location, scale = jnp.zeros(4, jnp.float64), jnp.std(draws, 0)
  driven = jnp.array([False, True, True, True])
  edges = driven[:, None] & (jnp.arange(4) == 0)[None, :]
  transport = noncentering.fit(draws, location, scale, driven, edges).transport
  latent_fn = noncentering.latent_logdensity(funnel.logdensity_fn, transport)
  config = l2hmc.L2HMCConfig(dim=4, num_steps=8, use_networks=False, jitter=0.0)
  params = l2hmc.init_params(jax.random.key(5), config, step_size=0.3)
  masks = l2hmc.make_masks(jax.random.key(6), config)
  sampler = noncentering.transported(l2hmc.l2hmc(latent_fn, config, params, masks), transport)
  states = jax.vmap(sampler.init)(draws)
  np.testing.assert_allclose(states.logdensity, jax.vmap(funnel.logdensity_fn)(draws),
                             atol=1e-9)
  out, info = jax.jit(lambda k, s: l2hmc.sample_chains(k, sampler, s, 20))(
      jax.random.key(7), states)
  v = out[-1][:, 0]
  assert float(jnp.mean(info.acceptance_rate)) > 0.5
  assert abs(float(jnp.mean(v))) < 5 * 3.0 / np.sqrt(1024)
  assert abs(float(jnp.std(v)) - 3.0) < 5 * 3.0 / np.sqrt(2 * 1024)


@pytest.mark.system
def test_curvature_fit_finds_the_slope_from_a_biased_window():
  """Funnel draws from its mouth only (v > 1, as a warm-up that has not reached the neck):
  the local Gaussians there (gradients and curvatures against autodiff's, 1e-10) give
  A_{i0} = 3/2 per whitened unit of v within 0.05 (the ridge's bias), and the centre 0."""
  funnel, draws = _funnel_draws(8192)
  draws = draws[draws[:, 0] > 1.0][:2048]
  location, scale = jnp.zeros(4, jnp.float64), jnp.full(4, 3.0, jnp.float64)
  driven = jnp.array([False, True, True, True])
  edges = driven[:, None] & (jnp.arange(4) == 0)[None, :]
  gradients, curvatures = jax.vmap(
      lambda x: noncentering.local_gaussian(funnel.logdensity_fn, x))(draws[:256])
  np.testing.assert_allclose(gradients, jax.vmap(jax.grad(funnel.logdensity_fn))(draws[:256]),
                             rtol=1e-12)
  np.testing.assert_allclose(
      curvatures, jax.vmap(lambda x: -jnp.diagonal(jax.hessian(funnel.logdensity_fn)(x)))(
          draws[:256]), rtol=1e-10)
  transport = noncentering.fit(draws, location, scale, driven, edges, draws[:256],
                               gradients, curvatures).transport
  np.testing.assert_allclose(transport.scale_weights[1:, 0], 1.5, atol=0.05)
  # the centres x_i + g_i / c_i are the funnel's 0 exactly: b and B vanish (the ridge aside)
  np.testing.assert_allclose(transport.shift[1:], 0.0, atol=1e-6)
  np.testing.assert_allclose(transport.shift_weights[1:], 0.0, atol=1e-6)


@pytest.mark.system
def test_the_screen_finds_the_funnels_drivers_and_no_gaussians():
  """The screen's trigger, read off adapt's own warm-up (5 leapfrog steps): on Neal's funnel
  the log-scale slopes make v the driver of every x_i. On a correlated Gaussian (whose log
  squares do have slopes, through the conditional means) the local Gaussians' slopes find
  no driver, and adapt leaves the target as it was. (Whether a transport is kept is the
  latent warm-up's measurement, ``_latent_is_better``, tested below.)"""
  from metaoptax.l2hmc import default_adaptation
  funnel = l2hmc.posteriors.neals_funnel()
  gaussian = l2hmc.targets.strongly_correlated_gaussian()
  positions = jax.random.normal(jax.random.key(0), (16, funnel.dim))
  found = l2hmc.warmup(jax.random.key(1), funnel.logdensity_fn, positions,
                       num_steps=default_adaptation.WARMUP_NUM_STEPS, num_iterations=200)
  driven, _ = noncentering.structure(found.log_scale_slopes)
  np.testing.assert_array_equal(driven, [False] + [True] * (funnel.dim - 1))
  (_, _), info = l2hmc.adapt(gaussian.logdensity_fn, progress=None).run(
      jax.random.key(1), jax.random.normal(jax.random.key(0), (16, gaussian.dim)),
      num_steps=400)
  assert info.noncentering is None


def test_structure_keeps_a_hub_a_parent():
  """Centered schools' pattern (mu, log tau, theta_1..3): log tau sets every theta's scale
  and mu's; every theta's centre rests on mu, mu's on each theta a third as much. mu stays a
  parent (hub), the thetas are driven by log tau alone."""
  slopes = jnp.zeros((5, 5)).at[1, jnp.array([0, 2, 3, 4])].set(1.0)
  centre = (jnp.zeros((5, 5)).at[0, 2:].set(0.9).at[2:, 0].set(0.3))
  driven, edges = noncentering.structure(slopes, centre)
  np.testing.assert_array_equal(driven, [False, False, True, True, True])
  np.testing.assert_array_equal(edges[2:], jnp.zeros((3, 5), bool).at[:, 1].set(True))
  driven, _ = noncentering.structure(slopes)  # without the centres, mu is driven too
  np.testing.assert_array_equal(driven, [True, False, True, True, True])


def test_structure_makes_no_hub_of_rounding_error():
  """Neal's funnel's pattern (v, x_1..3): v sets every x's scale and no centre rests on any x
  (their centres are 0), so the centre slopes are rounding error only, here 1e-9 out of x_1
  and 1e-10 into it. Their ratio is above ``HUB_RATIO``, but they sum to less than
  ``MIN_HUB``: every x stays driven (a parent would be left in the funnel)."""
  slopes = jnp.zeros((4, 4)).at[0, 1:].set(1.2)
  centre = jnp.zeros((4, 4)).at[1, 2:].set(1e-9).at[2:, 1].set(1e-10)
  driven, edges = noncentering.structure(slopes, centre)
  np.testing.assert_array_equal(driven, [False, True, True, True])
  np.testing.assert_array_equal(edges[1:], jnp.zeros((3, 4), bool).at[:, 0].set(True))


def test_latent_is_kept_only_where_it_measures_better():
  from metaoptax.l2hmc import default_adaptation
  found = lambda rhat: l2hmc.WarmupResult(None, None, None, None, rhat=jnp.array([rhat]))
  config = lambda k: l2hmc.L2HMCConfig(num_steps=k)
  better = default_adaptation._latent_is_better
  assert better(found(1.2), config(16), found(1.01), config(2))  # the funnel
  assert not better(found(1.01), config(4), found(1.01), config(8))  # longer trajectories
  assert not better(found(1.2), config(16), found(1.5), config(8))  # chains agree less
  assert not better(found(1.5), config(16), found(1.2), config(8))  # nor in the latent
  assert not better(found(1.01), config(4), found(1.01), config(4))  # no gain


def test_the_screen_reads_the_slopes_of_the_warm_up_the_diagonal_fallback_replaced(
    monkeypatch):
  """Where the diagonal fallback replaced the dense warm-up, a driver in either one's
  log-scale slopes has the screen read the local Gaussians: here the dense warm-up's
  strongest slope is just above ``MIN_SLOPE`` and the diagonal one's just below, as on a
  centered hierarchy whose chains disagree in both. In neither, the screen costs nothing."""
  from metaoptax.l2hmc import default_adaptation
  min_slope = noncentering.MIN_SLOPE
  driver = lambda slope: jnp.zeros((3, 3)).at[0, 1:].set(slope)  # 0 sets 1's and 2's scale
  found = lambda slopes: l2hmc.WarmupResult(None, None, None, None, log_scale_slopes=slopes)
  dense, diagonal = found(driver(1.15 * min_slope)), found(driver(0.9 * min_slope))
  shows = default_adaptation._shows_drivers
  assert shows((dense,)) and not shows((diagonal,))
  assert shows((diagonal, dense))
  assert not shows((diagonal, found(None)))

  class PastTheTrigger(Exception):
    pass

  def sampler(*args):
    raise PastTheTrigger

  monkeypatch.setattr(default_adaptation, "l2hmc", sampler)  # the screen's first step
  target = l2hmc.targets.Target("three", 3, lambda x: -0.5 * jnp.sum(x**2))
  state = types.SimpleNamespace(params=None, masks=None, whitening=None, chains=None)
  screen = lambda *replaced: default_adaptation._screen_noncentering(
      jax.random.key(0), target, l2hmc.L2HMCConfig(dim=3), l2hmc.L2HMCConfig(dim=3), None,
      None, state, diagonal, True, replaced)
  assert screen() == (None, default_adaptation._Cost(), None)
  with pytest.raises(PastTheTrigger):
    screen(dense)


@pytest.mark.parametrize("rhat, slope, chosen, order", [
    # apart (R-hat 1.5) with a driver: the screen first; chosen, no diagonal fallback
    (1.5, 1.15, True, ["screen"]),
    # not chosen: the fallback follows, and the screen does not run again after it
    (1.5, 1.15, False, ["screen", "fallback"]),
    # no driver: the fallback, then the screen (which reads its own trigger) as before
    (1.5, 0.0, False, ["fallback", "screen"]),
    # in separate modes (R-hat >= MODES_RHAT): the fallback and the screen for modes first
    (2.5, 1.15, False, ["fallback", "modes", "screen"]),
])
def test_a_dense_warm_up_apart_with_drivers_screens_for_a_non_centering_before_its_fallback(
    monkeypatch, rhat, slope, chosen, order):
  """Where the dense warm-up's chains disagree on log p and its log-scale slopes find a
  driver, ``run`` screens for a non-centering before the diagonal fallback, which runs (with
  its lengthened burn-in) only where the non-centering is not chosen: a centered hierarchy's
  chains disagree under either metric. The warm-ups, screens and training are stand-ins that
  record the order."""
  from metaoptax.l2hmc import default_adaptation
  calls = []

  class PastTheScreens(Exception):
    pass

  dim = 3
  slopes = jnp.zeros((dim, dim)).at[0, 1:].set(slope * noncentering.MIN_SLOPE)
  found = l2hmc.WarmupResult(
      jnp.float32(0.5), None, jnp.zeros((4, dim)), jnp.float32(0.8), log_scale_slopes=slopes,
      rhat=jnp.full(dim + 1, rhat), num_transitions=100, num_hessian_evaluations=0,
      num_divergent=0, num_leapfrog_steps=500)
  none = default_adaptation._Cost()

  def initial_state(rng_key, target, config, *args):
    return None, found, config

  def screen(rng_key, target, config, sampler_config, training, optimizer, state, found_,
             choose_num_steps, replaced=()):
    calls.append("screen")
    if chosen:
      return (None, found, sampler_config, target, noncentering.identity(
          jnp.zeros(dim), jnp.ones(dim))), none, None
    return None, none, None

  def fallback(*args):
    calls.append("fallback")
    return (None, found, args[2], args[3]._replace(metric="diagonal")), none

  def modes(rng_key, target, config, training, optimizer, found_, choose_num_steps):
    if float(jnp.max(found_.rhat)) >= default_adaptation.MODES_RHAT:
      calls.append("modes")
    return None, none

  def train(*args, **kwargs):
    raise PastTheScreens

  monkeypatch.setattr(default_adaptation, "_initial_state", initial_state)
  monkeypatch.setattr(default_adaptation, "_screen_noncentering", screen)
  monkeypatch.setattr(default_adaptation, "_retry_diagonal", fallback)
  monkeypatch.setattr(default_adaptation, "_screen_reflection", modes)
  monkeypatch.setattr(default_adaptation, "_screen_local_step_sizes", lambda *a: (None, none))
  monkeypatch.setattr(default_adaptation, "train", train)
  with pytest.raises(PastTheScreens):
    l2hmc.adapt(lambda x: -0.5 * jnp.sum(x**2), progress=None).run(
        jax.random.key(0), jnp.zeros((4, dim)), num_steps=100)
  assert calls == order


@pytest.mark.parametrize("slope, local_screen", [(0.0, False), (1.0, True)])
def test_the_screen_for_local_step_sizes_runs_where_the_local_gaussians_let_it_vary(
    monkeypatch, slope, local_screen):
  """Where the screen for a non-centering read the local Gaussians and chose nothing, their
  log-scale slopes decide whether the warm-up for local step sizes runs
  (local_step_sizes.fit_varies): not where they are flat (slope 0: its fit would be switched
  off), where a driver sets the others' scales with slope 1 (whitened; spread 1 > MIN_SPREAD)
  yes. The warm-ups, screens and training are stand-ins that record what ran."""
  from metaoptax.l2hmc import default_adaptation
  calls = []

  class PastTheScreens(Exception):
    pass

  dim = 3
  found = l2hmc.WarmupResult(
      jnp.float32(0.5), None, jnp.zeros((4, dim)), jnp.float32(0.8),
      log_scale_slopes=jnp.zeros((dim, dim)).at[0, 1:].set(1.15 * noncentering.MIN_SLOPE),
      rhat=jnp.full(dim + 1, 1.01), num_transitions=100, num_hessian_evaluations=0,
      num_divergent=0, num_leapfrog_steps=500)
  none = default_adaptation._Cost()
  z = jax.random.normal(jax.random.key(0), (256, dim))
  measured = (jnp.zeros((dim, dim)).at[0, 1:].set(slope), z,
              jnp.concatenate([jnp.zeros((256, 1)), jnp.repeat(slope * z[:, :1], 2, 1)], 1))

  def screen(*args):
    calls.append("noncentering")
    return None, none, measured

  def local(*args):
    calls.append("local")
    return None, none

  def train(*args, **kwargs):
    raise PastTheScreens

  monkeypatch.setattr(default_adaptation, "_initial_state",
                      lambda rng_key, target, config, *args: (None, found, config))
  monkeypatch.setattr(default_adaptation, "_screen_noncentering", screen)
  monkeypatch.setattr(default_adaptation, "_screen_reflection", lambda *a: (None, none))
  monkeypatch.setattr(default_adaptation, "_screen_local_step_sizes", local)
  monkeypatch.setattr(default_adaptation, "train", train)
  with pytest.raises(PastTheScreens):
    l2hmc.adapt(lambda x: -0.5 * jnp.sum(x**2), progress=None).run(
        jax.random.key(0), jnp.zeros((4, dim)), num_steps=100)
  assert calls == ["noncentering"] + (["local"] if local_screen else [])



def _members_transport(logdensity, draws, points):
  """``fit``'s transport of (mu, log tau, theta_1..3) draws, the members driven by log tau,
  with ``logdensity``'s local Gaussians at ``points``; jitted (op by op it takes ~10x the
  time). Returns it with the draws' location and scale."""
  driven = jnp.array([False, False, True, True, True])
  edges = driven[:, None] & (jnp.arange(5) == 1)[None, :]
  gradients, curvatures = jax.jit(jax.vmap(
      lambda x: noncentering.local_gaussian(logdensity, x)))(points)
  location, scale = jnp.mean(draws, 0), jnp.std(draws, 0)
  transport = jax.jit(noncentering.fit)(draws, location, scale, driven, edges, points,
                                        gradients, curvatures).transport
  return transport, location, scale


def _centered_members(y, sigma):
  """A centered hierarchy with Gaussian members (mu, log tau, theta_i; theta_i ~ N(mu, tau),
  y_i ~ N(theta_i, sigma_i)): its log density and each theta_i's exact conditional mean and
  sd given (mu, log tau)."""

  def logdensity(x):
    mu, log_tau, theta = x[0], x[1], x[2:]
    return (-0.5 * mu**2 / 25.0 - 0.5 * log_tau**2 + jnp.sum(
        -0.5 * ((theta - mu) / jnp.exp(log_tau)) ** 2 - log_tau - 0.5 * ((y - theta) / sigma) ** 2))

  def conditional(mu, log_tau):
    precision = jnp.exp(-2.0 * log_tau) + sigma**-2
    return (mu * jnp.exp(-2.0 * log_tau) + y * sigma**-2) / precision, precision**-0.5

  return logdensity, conditional

@pytest.mark.system  # a float64 fit of 2,048 draws (~25 s)
def test_a_conjugate_members_centre_rests_on_its_location_and_not_its_scale():
  """A centered hierarchy with Gaussian members (mu, log tau, theta_1..3; theta_i ~ N(mu,
  tau), y_i ~ N(theta_i, sigma_i)): each theta_i's local Gaussian is exact, its centre
  (mu / tau^2 + y_i / sigma_i^2) / (1 / tau^2 + 1 / sigma_i^2) = (1 - rho) mu + rho y_i. The fit
  puts no weight of the centre on its scale's driver (log tau), so away from the draws (log
  tau = 4, two units beyond the draws) the transport's centre is the exact conditional mean
  within 0.3 conditional sds (within 0.01 inside the draws; the saturating scale's fit, hence
  rho, is approximate). With a weight on log tau, the fit's was 1.24 sds off there (0.10
  inside)."""
  y, sigma = jnp.array([3.0, -1.0, 8.0]), jnp.array([2.0, 1.0, 4.0])

  logdensity, conditional = _centered_members(y, sigma)

  keys = jax.random.split(jax.random.key(0), 3)
  mu = 2.0 * jax.random.normal(keys[0], (2048,), jnp.float64)
  log_tau = jax.random.uniform(keys[1], (2048,), jnp.float64, -2.0, 2.0)
  mean, sd = jax.vmap(conditional)(mu, log_tau)
  theta = mean + sd * jax.random.normal(keys[2], (2048, 3), jnp.float64)
  draws = jnp.concatenate([mu[:, None], log_tau[:, None], theta], axis=1)
  transport, location, scale = _members_transport(logdensity, draws, draws[:512])
  for at, tolerance in (((0.5, -1.0), 0.01), ((1.0, 4.0), 0.3), ((-3.0, 4.0), 0.3)):
    x, _ = noncentering.forward(transport, jnp.concatenate([
        (jnp.array(at) - location[:2]) / scale[:2], jnp.zeros(3)]))
    exact_mean, exact_sd = conditional(*at)
    np.testing.assert_allclose((x[2:] - exact_mean) / exact_sd, 0.0, atol=tolerance)


def test_a_conjugate_members_centre_holds_in_the_neck_beyond_the_draws():
  """A centered hierarchy with Gaussian members whose data sit far from their location
  (mu, log tau, theta_1..3; theta_i ~ N(mu, tau), y_i ~ N(theta_i, sigma_i)), its local
  Gaussians read where a warm-up's chains are (log tau in [-1, 2.5], no draw in the neck):
  the transport's centre at log tau = -6 and -4 (the neck, where the conditional sd is
  tau) is the exact conditional mean (mu / tau^2 + y_i / sigma_i^2) / (1 / tau^2 + 1 /
  sigma_i^2) within 0.05 conditional sds. The error there is the fit's absolute error over
  tau: with the centre's ridge at 1e-4 per point (rho's small columns shrunk, the intercept
  taking up the rest) it was many sds at log tau = -6."""
  y, sigma = jnp.array([28.0, -3.0, 18.0]), jnp.array([15.0, 10.0, 16.0])

  logdensity, conditional = _centered_members(y, sigma)

  keys = jax.random.split(jax.random.key(0), 3)
  mu = 4.0 + 3.0 * jax.random.normal(keys[0], (256,), jnp.float64)
  log_tau = jax.random.uniform(keys[1], (256,), jnp.float64, -1.0, 2.5)
  mean, sd = jax.vmap(conditional)(mu, log_tau)
  theta = mean + sd * jax.random.normal(keys[2], (256, 3), jnp.float64)
  draws = jnp.concatenate([mu[:, None], log_tau[:, None], theta], axis=1)
  transport, location, scale = _members_transport(logdensity, draws, draws)
  for at in ((4.0, -6.0), (-2.0, -6.0), (10.0, -6.0), (4.0, -4.0), (4.0, 1.0)):
    x, _ = noncentering.forward(transport, jnp.concatenate([
        (jnp.array(at) - location[:2]) / scale[:2], jnp.zeros(3)]))
    exact_mean, exact_sd = conditional(*at)
    np.testing.assert_allclose((x[2:] - exact_mean) / exact_sd, 0.0, atol=0.05)
