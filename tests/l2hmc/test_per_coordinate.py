"""Per-coordinate step sizes, the whitening, the warm-up and the training objectives.

Oracles: the inverse run (float64; ``jax.jacfwd``'s log-determinant is in
test_l2hmc.py, parametrized over per-coordinate step sizes), a textbook HMC with a diagonal mass matrix, Monte Carlo moments of a
known Gaussian, and the objectives' closed forms.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from metaoptax import l2hmc
from tests.l2hmc.test_l2hmc import perturbed_params, run
from tests.l2hmc.paper import paper_config, paper_training

GAUSSIAN = l2hmc.targets.gaussian(jnp.diag(jnp.array([0.25, 1.0, 9.0])))


@functools.cache
def _round_trip(step_sizes):
  """The parameters and a jitted function of the direction (both directions share
  one compilation; float64): the start, the backward run from the forward run's
  end, and both log-determinants."""
  config = paper_config(dim=3, num_steps=4, step_sizes=step_sizes, per_coordinate=True)
  params, masks = perturbed_params(config), l2hmc.make_masks(jax.random.key(1), config)
  x, v = jnp.array([1.0, 2.0, -0.5]), jnp.array([0.5, -1.0, 0.3])

  @jax.jit
  def go(direction):
    x1, v1, _, _, log_det = run(config, params, masks, x, v, direction, GAUSSIAN)
    x2, v2, _, _, log_det_back = run(config, params, masks, x1, v1, -direction, GAUSSIAN)
    return x, v, x2, v2, log_det, log_det_back

  return params, go


@pytest.mark.parametrize("step_sizes", ["shared", "per_step"])
@pytest.mark.parametrize("direction", [1, -1])
def test_reversible_with_per_coordinate_step_sizes(step_sizes, direction):
  with jax.enable_x64(True):
    params, round_trip = _round_trip(step_sizes)
    assert params.log_step_size_x.shape == (4 if step_sizes == "per_step" else 1, 3)
    assert float(jnp.ptp(params.log_step_size_v)) > 0.1  # really different per coordinate
    x, v, x2, v2, log_det, log_det_back = round_trip(direction)
    assert x.dtype == jnp.float64
    np.testing.assert_allclose(x2, x, atol=1e-8)
    np.testing.assert_allclose(v2, v, atol=1e-8)
    np.testing.assert_allclose(log_det + log_det_back, 0.0, atol=1e-10)


def mass_matrix_hmc_step(logdensity_fn, x, v, h, num_steps, sigma):
  """Textbook HMC with the inverse mass matrix diag(sigma^2): momentum p = v / sigma."""
  grad_u = lambda y: -jax.grad(logdensity_fn)(y)
  energy = lambda y, p: -logdensity_fn(y) + 0.5 * jnp.sum((sigma * p) ** 2)
  p0 = v / sigma
  x1, p1 = x, p0 - 0.5 * h * grad_u(x)
  for i in range(num_steps):
    x1 = x1 + h * sigma**2 * p1
    p1 = p1 - (h if i < num_steps - 1 else 0.5 * h) * grad_u(x1)
  return x1, jnp.minimum(1.0, jnp.exp(energy(x, p0) - energy(x1, p1)))


@pytest.mark.parametrize("how", ["per_coordinate", "whitening"])
def test_networks_off_is_hmc_with_a_diagonal_mass_matrix(how):
  """Step sizes h*sigma per coordinate, or h in z = (x - mu)/sigma: both are HMC with
  the inverse mass matrix diag(sigma^2)."""
  with jax.enable_x64(True):
    sigma, mu, h, k = jnp.array([0.5, 1.0, 3.0]), jnp.array([0.2, -1.0, 4.0]), 0.3, 5
    config = paper_config(dim=3, num_steps=k, use_networks=False,
                               per_coordinate=how == "per_coordinate")
    step_size = h * sigma if how == "per_coordinate" else h
    whitening = l2hmc.Whitening(mu, sigma) if how == "whitening" else None
    params = jax.tree.map(lambda a: a.astype(jnp.float64),
                          l2hmc.init_params(jax.random.key(0), config, step_size=step_size))
    sampler = l2hmc.l2hmc(GAUSSIAN.logdensity_fn, config, params,
                          l2hmc.make_masks(jax.random.key(1), config), whitening)
    state = sampler.init(jnp.array([0.4, 1.0, -2.0]))
    step = jax.jit(sampler.step)
    key = jax.random.key(7)
    for _ in range(10):
      key, sub = jax.random.split(key)
      v = jax.random.normal(jax.random.split(sub, 3)[0], (3,), jnp.float64)
      new_state, info = step(sub, state)
      x1, accept = mass_matrix_hmc_step(GAUSSIAN.logdensity_fn, state.position,
                                        v * info.direction, h, k, sigma)
      np.testing.assert_allclose(info.proposal, x1, rtol=1e-6, atol=1e-6)
      np.testing.assert_allclose(info.acceptance_rate, accept, rtol=1e-5, atol=1e-7)
      np.testing.assert_allclose(new_state.logdensity_grad,
                                 jax.grad(GAUSSIAN.logdensity_fn)(new_state.position),
                                 rtol=1e-9)
      state = new_state


@pytest.mark.system  # 400 steps of 500 chains with both features (~6 s); the plain networks'
# invariance runs in the default tier (tests/l2hmc/test_l2hmc.py): CI's second command
def test_random_networks_with_whitening_and_per_coordinate_leave_the_target_invariant():
  covariance = jnp.array([[0.04, 0.0], [0.0, 25.0]])
  target = l2hmc.targets.gaussian(covariance, mean=jnp.array([1.0, -3.0]))
  config = paper_config(dim=2, num_steps=3, init_step_size=0.4, per_coordinate=True)
  params = jax.tree.map(lambda a: a.astype(jnp.float32), perturbed_params(config, scale=0.1))
  whitening = l2hmc.Whitening(jnp.array([0.8, -2.0]), jnp.array([0.25, 4.0]))
  sampler = l2hmc.l2hmc(target.logdensity_fn, config, params,
                        l2hmc.make_masks(jax.random.key(1), config), whitening)
  start = target.sample(jax.random.key(4), 500)
  samples, info = jax.jit(lambda k, x: l2hmc.sample_chains(k, sampler, jax.vmap(sampler.init)(x), 400))(
      jax.random.key(5), start)
  assert 0.2 < float(info.acceptance_rate.mean()) < 1.0
  flat = np.asarray(samples).reshape(-1, 2)
  assert np.all(np.abs(flat.mean(0) - [1.0, -3.0]) < 0.1 * np.sqrt([0.04, 25.0]))
  np.testing.assert_allclose(flat.var(0), [0.04, 25.0], rtol=0.15)


def test_warmup_finds_the_scales_and_the_acceptance():
  variances = jnp.array([0.01, 1.0, 100.0, 4.0])
  target = l2hmc.targets.gaussian(jnp.diag(variances), mean=jnp.array([0.0, 1.0, -5.0, 2.0]))
  found = jax.jit(lambda x, k: l2hmc.warmup(k, target.logdensity_fn, x, num_steps=5,
                                            num_iterations=300))(
      jax.random.normal(jax.random.key(0), (128, 4)), jax.random.key(1))
  np.testing.assert_allclose(found.whitening.scale, jnp.sqrt(variances), rtol=0.1)
  np.testing.assert_allclose(found.whitening.location, target.mean,
                             atol=0.1 * float(jnp.sqrt(variances).max()))
  assert abs(float(found.acceptance) - 0.8) < 0.05
  assert found.positions.shape == (128, 4) and found.step_size.shape == ()


def test_warmup_scale_far_from_the_origin_in_float32():
  """A mean 1e4 times the spread: E[x^2] - E[x]^2 would cancel to 0 in float32
  (x^2 ~ 1e8 has an ulp of 8, the variance is 1); the shifted sums keep it."""
  mean = jnp.array([1e4, -1e4])
  target = l2hmc.targets.gaussian(jnp.eye(2), mean=mean)
  start = mean + jax.random.normal(jax.random.key(0), (128, 2))
  found = jax.jit(lambda x, k: l2hmc.warmup(k, target.logdensity_fn, x, num_steps=5,
                                            num_iterations=300))(start, jax.random.key(1))
  np.testing.assert_allclose(found.whitening.scale, 1.0, rtol=0.1)
  np.testing.assert_allclose(found.whitening.location, mean, atol=0.1)


def test_init_params_step_size_checks():
  config = paper_config(dim=3, per_coordinate=True)
  params = l2hmc.init_params(jax.random.key(0), config, step_size=jnp.array([0.1, 0.2, 0.3]))
  np.testing.assert_allclose(jnp.exp(params.log_step_size_v[0]), [0.1, 0.2, 0.3], rtol=1e-6)
  with pytest.raises(ValueError, match="shape"):
    l2hmc.init_params(jax.random.key(0), config, step_size=jnp.ones(2))
  with pytest.raises(ValueError, match="shape"):
    l2hmc.init_params(jax.random.key(0), config._replace(per_coordinate=False),
                      step_size=jnp.ones(3))
  with pytest.raises(ValueError, match="> 0"):
    l2hmc.init_params(jax.random.key(0), config, step_size=jnp.array([0.1, -1.0, 0.3]))


def test_objectives_on_a_reflection():
  """A reflection z' = -z: ESJD rewards it, esjd_squares charges lambda^2/eps for z^2, and
  esjd_lag1 charges (4/lambda^2) mean|z|^2 (rho = -1 exactly)."""
  z = jax.random.normal(jax.random.key(0), (64, 3))
  accept = jnp.ones(64)
  esjd = l2hmc.objective_loss("esjd", z, -z, accept)
  np.testing.assert_allclose(esjd, l2hmc.esjd_loss(z, -z, accept), rtol=1e-6)
  squares = l2hmc.objective_loss("esjd_squares", z, -z, accept)
  np.testing.assert_allclose(squares - esjd, 0.1 / 1e-4 - 1e-4 / 0.1, rtol=1e-5)
  lag1 = l2hmc.objective_loss("esjd_lag1", z, -z, accept)
  np.testing.assert_allclose(lag1 - esjd, 4.0 / 0.1 * jnp.mean(jnp.sum(z**2, -1)), rtol=1e-5)
  # an independent draw: no penalty in expectation (rho ~ 0; only its negative part counts)
  fresh = jax.random.normal(jax.random.key(1), (64, 3))
  assert float(jnp.mean(l2hmc.objective_loss("esjd_squares", z, fresh, accept))) < float(
      jnp.mean(squares))
  with pytest.raises(ValueError, match="objective"):
    l2hmc.objective_loss("nope", z, fresh, accept)


@pytest.mark.system  # an L2HMC training run with a warm-up (10 s): CI's second command
def test_training_with_a_warmup_is_finite():
  """The warm-up path under one objective (each objective's value is checked above)."""
  objective = "esjd_squares"
  config = paper_config(dim=3, num_steps=3, hidden=8, per_coordinate=True,
                             step_sizes="per_step")
  training = paper_training(num_chains=32, aux_weight=0.0, objective=objective,
                                  warmup_iterations=40)
  result = l2hmc.train(jax.random.key(0), GAUSSIAN, config, training, num_iterations=30, progress=None)
  assert result.skipped_updates == 0 and np.all(np.isfinite(result.losses))
  assert result.whitening is not None
  np.testing.assert_allclose(result.whitening.scale, [0.5, 1.0, 3.0], rtol=0.35)
  assert result.params.log_step_size_x.shape == (3, 3)
  with pytest.raises(ValueError, match="objective"):
    paper_training(objective="nope") and l2hmc.init_training(jax.random.key(0), 
        GAUSSIAN, config, training._replace(objective="nope"))


def test_a_nonfinite_chain_drops_out_of_the_gradient():
  """Under vmap over chains, the guard zeroes exactly the diverged chain's cotangent:
  the gradient equals the sum over the finite chains (computed without the bad one)."""
  from metaoptax.l2hmc.training import _finite_cotangent  # pylint: disable=g-import-not-at-top

  def chain_loss(w, x):
    w = _finite_cotangent(w)
    return jnp.sum(jnp.sqrt(w * x))  # x < 0: NaN value and gradient

  xs = jnp.array([[1.0, 2.0], [3.0, -1.0], [0.5, 4.0]])
  w = jnp.array([2.0, 0.5])
  def loss(w, xs):
    per_chain = jnp.broadcast_to(w, (3, 2))  # as the training step does
    values = jax.vmap(chain_loss)(per_chain, xs)
    return jnp.sum(jnp.where(jnp.isfinite(values), values, 0.0))

  grad = jax.grad(loss)(w, xs)
  expected = jax.grad(lambda w: jnp.sum(jax.vmap(chain_loss, (None, 0))(w, xs[jnp.array([0, 2])])))(w)
  np.testing.assert_allclose(grad, expected, rtol=1e-6)
  unguarded = jax.grad(lambda w: jnp.sum(jax.vmap(lambda w, x: jnp.sum(jnp.sqrt(w * x)),
                                                  (None, 0))(w, xs)))(w)
  assert not np.all(np.isfinite(unguarded))


@pytest.mark.system  # an L2HMC training run (16 s): CI's second command
def test_training_drops_diverging_chains_instead_of_skipping_updates():
  """A target whose density is NaN beyond a wall: proposals crossing it are rejected;
  with ``drop_nonfinite_chains`` no update is skipped and the loss stays finite."""
  wall = lambda x: jnp.where(x[0] > 1.5, jnp.nan, -0.5 * x @ x)
  target = l2hmc.targets.Target("walled", 2, wall, None, None)
  config = paper_config(dim=2, num_steps=3, hidden=8, init_step_size=0.5)
  skipped = {}
  for drop in (False, True):
    training = paper_training(num_chains=64, aux_weight=0.0, drop_nonfinite_chains=drop)
    result = l2hmc.train(jax.random.key(0), target, config, training, num_iterations=10, progress=None)
    skipped[drop] = result.skipped_updates
    if drop:
      assert np.all(np.isfinite(result.losses))
  assert skipped[True] == 0 and skipped[False] > 0
