"""L2HMC: reversibility, exact log-determinant, HMC limit, invariance, ESS, training."""

import functools
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from metaoptax import l2hmc
from tests.l2hmc.paper import paper_config, paper_training

TARGET = l2hmc.targets.strongly_correlated_gaussian()


def perturbed_params(config, scale=0.2, seed=3):
  """Parameters with clearly non-zero networks (as after training), float64."""
  params = jax.tree.map(lambda a: a.astype(jnp.float64),
                        l2hmc.init_params(jax.random.key(0), config))
  leaves, tree = jax.tree.flatten(params)
  keys = jax.random.split(jax.random.key(seed), len(leaves))
  return jax.tree.unflatten(
      tree, [a + scale * jax.random.normal(k, a.shape, a.dtype) for a, k in zip(leaves, keys)])


def run(config, params, masks, x, v, direction, target=TARGET):
  logdensity, grad = jax.value_and_grad(target.logdensity_fn)(x)
  return l2hmc.leapfrog(config, params, masks, target.logdensity_fn, x, v, logdensity, grad,
                        direction)


@functools.cache
def _round_trip(step_sizes):
  """A jitted function of the direction (traced: both directions share one
  compilation; float64): the start, the forward run with the networks on and
  off, the backward run from the forward run's end, and both log-determinants."""
  config = paper_config(dim=2, num_steps=4, step_sizes=step_sizes)
  params, masks = perturbed_params(config), l2hmc.make_masks(jax.random.key(1), config)
  x, v = jnp.array([1.0, 2.0]), jnp.array([0.5, -1.0])

  @jax.jit
  def go(direction):
    x1, v1, _, _, log_det = run(config, params, masks, x, v, direction)
    plain = run(config._replace(use_networks=False), params, masks, x, v, direction)[0]
    x2, v2, _, _, log_det_back = run(config, params, masks, x1, v1, -direction)
    return x, v, x1, plain, x2, v2, log_det, log_det_back

  return go


@pytest.mark.parametrize("step_sizes", ["shared", "per_step"])
@pytest.mark.parametrize("direction", [1, -1])
def test_forward_then_backward_returns_and_log_dets_cancel(step_sizes, direction):
  with jax.enable_x64(True):
    x, v, x1, plain, x2, v2, log_det, log_det_back = _round_trip(step_sizes)(direction)
    assert x.dtype == jnp.float64
    assert float(jnp.abs(x1 - plain).max()) > 0.1  # the networks really act
    np.testing.assert_allclose(x2, x, atol=1e-8)
    np.testing.assert_allclose(v2, v, atol=1e-8)
    np.testing.assert_allclose(log_det + log_det_back, 0.0, atol=1e-10)


@functools.cache
def _log_dets(per_coordinate):
  """A jitted function of the direction (both share one compilation; float64):
  the leapfrog's log|det J| and that of ``jax.jacfwd``'s Jacobian of the map."""
  config = paper_config(dim=3, num_steps=3, step_sizes="per_step",
                             per_coordinate=per_coordinate)
  target = l2hmc.targets.gaussian(jnp.diag(jnp.array([1.0, 4.0, 0.25])))
  params, masks = perturbed_params(config), l2hmc.make_masks(jax.random.key(2), config)
  z = jnp.array([0.3, -1.0, 0.7, 1.1, 0.2, -0.4])

  @jax.jit
  def go(direction):
    def flow(z):
      x1, v1, _, _, _ = run(config, params, masks, z[:3], z[3:], direction, target)
      return jnp.concatenate([x1, v1])

    expected = jnp.linalg.slogdet(jax.jacfwd(flow)(z)).logabsdet
    return run(config, params, masks, z[:3], z[3:], direction, target)[4], expected

  return go


@pytest.mark.parametrize("per_coordinate", [False, True])
@pytest.mark.parametrize("direction", [1, -1])
def test_log_det_equals_autodiff_jacobian(direction, per_coordinate):
  with jax.enable_x64(True):
    log_det, expected = _log_dets(per_coordinate)(direction)
    assert expected.dtype == jnp.float64 and abs(float(expected)) > 0.01
    np.testing.assert_allclose(log_det, expected, rtol=1e-9)


def plain_hmc_step(logdensity_fn, x, v, step_size, num_steps):
  """Textbook leapfrog + Metropolis (independent oracle)."""
  grad_u = lambda y: -jax.grad(logdensity_fn)(y)
  energy = lambda y, p: -logdensity_fn(y) + 0.5 * p @ p
  x1, v1 = x, v - 0.5 * step_size * grad_u(x)
  for i in range(num_steps):
    x1 = x1 + step_size * v1
    v1 = v1 - (step_size if i < num_steps - 1 else 0.5 * step_size) * grad_u(x1)
  return x1, jnp.minimum(1.0, jnp.exp(energy(x, v) - energy(x1, v1)))


def test_networks_off_is_exactly_hmc():
  with jax.enable_x64(True):
    config = paper_config(dim=2, num_steps=7, use_networks=False, init_step_size=0.15)
    params = jax.tree.map(lambda a: a.astype(jnp.float64),
                          l2hmc.init_params(jax.random.key(0), config))
    sampler = l2hmc.l2hmc(TARGET.logdensity_fn, config, params,
                          l2hmc.make_masks(jax.random.key(1), config))
    state = sampler.init(jnp.array([3.0, 1.0]))
    step = jax.jit(sampler.step)
    step_size = float(jnp.exp(params.log_step_size_x[0]))  # 0.15 as stored (float32 log)
    key = jax.random.key(7)
    for _ in range(20):
      key, sub = jax.random.split(key)
      k_momentum, _, _ = jax.random.split(sub, 3)
      v = jax.random.normal(k_momentum, (2,), jnp.float64)
      new_state, info = step(sub, state)
      # d = -1 runs the inverse leapfrog: HMC with the momentum -v
      x1, accept = plain_hmc_step(TARGET.logdensity_fn, state.position,
                                  v * info.direction, step_size, 7)
      np.testing.assert_allclose(info.proposal, x1, rtol=1e-10, atol=1e-12)
      np.testing.assert_allclose(info.acceptance_rate, accept, rtol=1e-9)
      state = new_state


def test_random_networks_leave_the_target_invariant():
  """Detailed balance sanity: with arbitrary (non-zero) networks the MH-corrected
  chain still samples the target: moments match within Monte Carlo error."""
  covariance = jnp.array([[1.0, 0.6], [0.6, 2.0]])
  target = l2hmc.targets.gaussian(covariance)
  config = paper_config(dim=2, num_steps=3, init_step_size=0.4)
  params = jax.tree.map(lambda a: a.astype(jnp.float32), perturbed_params(config, scale=0.1))
  sampler = l2hmc.l2hmc(target.logdensity_fn, config, params,
                        l2hmc.make_masks(jax.random.key(1), config))
  start = jax.random.multivariate_normal(jax.random.key(4), jnp.zeros(2), covariance, (500,))
  samples, info = jax.jit(lambda k, x: l2hmc.sample_chains(k, sampler, jax.vmap(sampler.init)(x), 400))(
      jax.random.key(5), start)
  assert 0.2 < float(info.acceptance_rate.mean()) < 1.0
  flat = np.asarray(samples).reshape(-1, 2)
  np.testing.assert_allclose(flat.mean(0), 0.0, atol=0.08)
  np.testing.assert_allclose(np.cov(flat.T), covariance, atol=0.12)


def test_nonfinite_acceptance_is_rejected_and_counted_as_divergent():
  """log p is NaN beyond x0 = 0.5 (its gradient there is 0, so positions stay finite): a
  proposal diverges exactly where it lands beyond, and is then rejected."""
  config = paper_config(dim=2, num_steps=2)
  params = l2hmc.init_params(jax.random.key(0), config)
  wall = lambda x: jnp.where(x[0] > 0.5, jnp.nan, -0.5 * x @ x)
  sampler = l2hmc.l2hmc(wall, config, params, l2hmc.make_masks(jax.random.key(1), config))
  state = sampler.init(jnp.array([0.4, 0.0]))
  rejected = 0
  for i in range(30):
    new_state, info = jax.jit(sampler.step)(jax.random.key(i), state)
    assert bool(jnp.isfinite(info.acceptance_rate))
    assert bool(jnp.all(jnp.isfinite(new_state.position)))
    beyond = bool(info.proposal[0] > 0.5)
    assert bool(info.is_divergent) == beyond
    assert not (beyond and bool(info.is_accepted))
    rejected += int(beyond)
  assert rejected > 0
  np.testing.assert_equal(float(l2hmc.acceptance_probability(0.0, jnp.nan, 0.0)), 0.0)


def test_sample_chains_records_and_warns_of_divergent_draws():
  """``sample_chains``' info marks each divergent transition and counts its gradients; an
  eager call warns where any diverged and not otherwise; under ``jit`` it returns the same
  info without warning."""
  config = paper_config(dim=2, num_steps=2)
  params = l2hmc.init_params(jax.random.key(0), config)
  masks = l2hmc.make_masks(jax.random.key(1), config)
  wall = lambda x: jnp.where(x[0] > 0.5, jnp.nan, -0.5 * x @ x)
  sampler = l2hmc.l2hmc(wall, config, params, masks)
  states = jax.vmap(sampler.init)(jnp.tile(jnp.array([0.4, 0.0]), (4, 1)))
  with pytest.warns(l2hmc.ConvergenceWarning, match="diverged"):
    draws, info = l2hmc.sample_chains(jax.random.key(2), sampler, states, 30)
  assert isinstance(info, l2hmc.SampleInfo) and info.is_divergent.shape == (30, 4)
  assert 0 < int(info.is_divergent.sum()) < info.is_divergent.size
  assert bool(jnp.all(draws[..., 0] <= 0.5))  # every divergent proposal rejected
  np.testing.assert_array_equal(info.num_gradient_evaluations,
                                l2hmc.gradient_evaluations(config))
  with warnings.catch_warnings():
    warnings.simplefilter("error", l2hmc.ConvergenceWarning)
    jitted = jax.jit(lambda k, s: l2hmc.sample_chains(k, sampler, s, 30))(
        jax.random.key(2), states)[1]
    np.testing.assert_array_equal(jitted.is_divergent, info.is_divergent)
    smooth = l2hmc.l2hmc(lambda x: -0.5 * x @ x, config, params, masks)
    l2hmc.sample_chains(jax.random.key(2), smooth, states, 30)  # no divergence, no warning


@pytest.mark.parametrize("field, value, diverged", [
    (None, None, False), ("logdensity", jnp.nan, True), ("logdensity", jnp.inf, True),
    ("logdensity", -jnp.inf, True), ("logdensity_grad", jnp.nan, True),
    ("position", jnp.inf, True), ("log_det", jnp.inf, True)])
def test_is_divergent_where_anything_of_the_proposal_is_not_finite(field, value, diverged):
  state = l2hmc.L2HMCState(jnp.array([0.3, -1.0]), jnp.asarray(-0.55), jnp.array([-0.3, 1.0]))
  log_det = jnp.asarray(0.2)
  if field == "log_det":
    log_det = jnp.asarray(value)
  elif field is not None:
    leaf = getattr(state, field)
    state = state._replace(**{field: leaf.at[..., -1].set(value) if leaf.ndim else
                              jnp.asarray(value)})
  assert bool(jax.jit(l2hmc.is_divergent)(state, log_det)) == diverged


def test_vmap_over_chains_and_jit():
  config = paper_config(dim=2, num_steps=3, step_sizes="per_step")
  params = l2hmc.init_params(jax.random.key(0), config)
  sampler = l2hmc.l2hmc(TARGET.logdensity_fn, config, params,
                        l2hmc.make_masks(jax.random.key(1), config))
  states = jax.vmap(sampler.init)(jnp.ones((8, 2)))
  states, info = jax.jit(jax.vmap(sampler.step))(jax.random.split(jax.random.key(2), 8), states)
  assert states.position.shape == (8, 2) and info.acceptance_rate.shape == (8,)
  assert set(np.asarray(info.direction).tolist()) <= {-1, 1}
  assert info.is_divergent.shape == (8,) and info.is_divergent.dtype == jnp.bool_


def ar1(phi, n, chains, seed=0):
  rng = np.random.default_rng(seed)
  x = np.zeros((n, chains, 1))
  noise = rng.normal(size=(n, chains, 1)) * np.sqrt(1 - phi**2)
  x[0] = rng.normal(size=(chains, 1))
  for t in range(1, n):
    x[t] = phi * x[t - 1] + noise[t]
  return x


@pytest.mark.parametrize("phi", [0.0, 0.5, 0.9])
def test_ess_estimators_on_ar1(phi):
  samples = ar1(phi, 4000, 8)
  exact = (1 - phi) / (1 + phi)  # ESS fraction of an AR(1) chain
  np.testing.assert_allclose(l2hmc.ess.geyer_ess(samples), exact, rtol=0.15)
  # the truncated estimator drops lags with rho < 0.05: biased up for slow decay
  truncated = l2hmc.ess.truncated_ess(samples, mean=0.0, scale=1.0)
  assert exact * 0.85 < truncated < exact * 1.6


@pytest.mark.system  # two L2HMC training runs (12 s; also in CI's floors): CI's second command
def test_training_improves_jumps_and_is_deterministic():
  """Same seed, different ``log_every`` (progress chunks): bit-identical runs."""
  config = paper_config(dim=2, num_steps=4)
  training = paper_training(num_chains=32)
  kwargs = dict(num_iterations=60, progress=None)
  start = lambda: l2hmc.init_training(jax.random.key(1), TARGET, config, training)
  reports = []
  first = l2hmc.train(jax.random.key(0), TARGET, config, training, init_state=start(), log_every=30, **kwargs)
  second = l2hmc.train(jax.random.key(0), TARGET, config, training, init_state=start(), log_every=7,
                       **{**kwargs, "progress": reports.append})
  np.testing.assert_array_equal(first.losses, second.losses)
  for a, b in zip(jax.tree.leaves(first.state), jax.tree.leaves(second.state)):
    if jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key):
      a, b = jax.random.key_data(a), jax.random.key_data(b)
    np.testing.assert_array_equal(a, b)
  assert [r.iteration for r in reports] == [7, 14, 21, 28, 35, 42, 49, 56, 60]
  np.testing.assert_allclose([reports[-1].loss, reports[-1].metrics["acceptance"]],
                             [first.losses[56:].mean(), first.acceptance[56:].mean()],
                             rtol=1e-6)
  assert first.skipped_updates == 0 and int(first.state.iteration) == 60
  assert first.losses[-10:].mean() < first.losses[:10].mean()
  with pytest.raises(ValueError, match="dim"):
    l2hmc.train(jax.random.key(0), TARGET, config._replace(dim=3), training, **kwargs)
  with pytest.raises(ValueError, match="step_sizes"):
    l2hmc.init_params(jax.random.key(0), config._replace(step_sizes="bogus"))


def test_geyer_ess_sees_chains_stuck_apart():
  rng = np.random.default_rng(0)
  stuck = rng.normal(size=(1000, 4, 1)) * 0.1 + np.array([-2.0, -2.0, 2.0, 2.0])[:, None]
  assert l2hmc.ess.geyer_ess(stuck) < 0.01  # well mixed within, not between chains



@pytest.mark.system  # three L2HMC training steps compiled
def test_temperature_and_first_order_force_in_training():
  """p^(1/T) of N(0, S) is N(0, T S): training at T = 4 is training on the wider
  Gaussian (bit for bit: the scalings are powers of 2), and a schedule is read at
  every iteration. Without gradients through the force the forward pass (the
  first loss) is unchanged and the updates differ."""
  target = l2hmc.targets.gaussian(jnp.diag(jnp.array([1.0, 2.0])))
  wide = l2hmc.targets.gaussian(jnp.diag(jnp.array([4.0, 8.0])))
  config = paper_config(dim=2, num_steps=1, hidden=4)
  training = paper_training(num_chains=8)

  def train(target, **fields):
    run = training._replace(**fields)
    return l2hmc.train(jax.random.key(0), target, config, run, num_iterations=4, log_every=4, progress=None,
                       init_state=l2hmc.init_training(jax.random.key(2), target, config, run))

  exact = train(target, temperature=4.0)
  cut = train(wide, differentiate_force=False)
  np.testing.assert_allclose(cut.losses[0], exact.losses[0], rtol=1e-6)
  assert any(bool(jnp.any(a != b)) for a, b in zip(jax.tree.leaves(cut.params),
                                                   jax.tree.leaves(exact.params)))
  annealed = train(target, differentiate_force=False,
                   temperature=optax.piecewise_constant_schedule(4.0, {2: 0.25}))
  np.testing.assert_allclose(annealed.losses[:2], cut.losses[:2], rtol=1e-6)
  assert np.all(annealed.losses[2:] != cut.losses[2:])
  with pytest.raises(ValueError, match="temperature"):
    train(target, temperature=0.0)


def test_first_order_logdensity_keeps_values_and_cuts_curvature():
  logdensity_fn = l2hmc.targets.rough_well().logdensity_fn
  first_order = l2hmc.training._first_order(logdensity_fn)
  x = jnp.array([0.3, -1.2])
  value, grad = jax.value_and_grad(first_order)(x)
  np.testing.assert_allclose(value, logdensity_fn(x), rtol=1e-6)
  np.testing.assert_allclose(grad, jax.grad(logdensity_fn)(x), rtol=1e-6)
  assert float(jnp.abs(jax.hessian(logdensity_fn)(x)).max()) > 10.0  # rough: ~1/eta
  np.testing.assert_array_equal(jax.hessian(first_order)(x), 0.0)
