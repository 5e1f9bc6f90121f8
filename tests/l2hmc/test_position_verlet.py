"""Position Verlet (``L2HMCConfig(integrator="position_verlet")``): drift-kick-drift, one
gradient per leapfrog step and none at a trajectory's end points.

Oracles, in float64: the trajectory run again from its end with the momentum flipped (or in
the other direction) returns to its start (to 1e-10), and its Jacobian by forward-mode
autodiff has determinant 1 (to 1e-10), on a non-Gaussian target with unequal per-coordinate
step sizes; on a unit Gaussian the step sizes of ``rotation_step_sizes(...,
"position_verlet")``, eps_x = 2 tan(theta / 2) and eps_v = sin(theta), are the closed-form
rotation (to 1e-12; velocity Verlet's pair is not). The sampler, with the reflection, keeps a
shifted, correlated 2-d Gaussian (exact draws, three transitions: moments within 5 standard
errors); the gradients and the log-density-only evaluations of a transition are counted by a
``jax.custom_vjp`` whose forward and backward passes report through ``jax.debug.callback``.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from metaoptax import l2hmc
from tests.l2hmc.paper import paper_config, paper_training

DIM = 3


def _rough(x):
  """A non-Gaussian log density: quartic, coupled and periodic terms."""
  return (-0.5 * jnp.sum(x**2) - 0.1 * jnp.sum(x**4) - 0.3 * x[0] * x[1]
          + 0.2 * jnp.sum(jnp.sin(2.0 * x)))


def _trajectory(step_sizes, num_steps=3, direction=1):
  """``(x, v) -> (x', v')``: K position-Verlet steps on ``_rough``, per-coordinate step sizes
  (``step_sizes``: one pair, or one per step) that differ between x and v."""
  config = paper_config(dim=DIM, num_steps=num_steps, use_networks=False, hidden=1,
                             step_sizes=step_sizes, per_coordinate=True,
                             integrator="position_verlet")
  rng = np.random.default_rng(0)
  n = num_steps if step_sizes == "per_step" else 1
  params = l2hmc.L2HMCParams({}, jnp.log(jnp.asarray(rng.uniform(0.2, 0.6, (n, DIM)))),
                             jnp.log(jnp.asarray(rng.uniform(0.2, 0.6, (n, DIM)))))

  def run(x, v, direction=direction):
    x_k, v_k, logdensity, _, log_det = l2hmc.leapfrog(
        config, params, jnp.zeros((num_steps, DIM)), _rough, x, v, _rough(x),
        jnp.zeros_like(x), direction)
    return x_k, v_k, logdensity, log_det

  return run


@pytest.mark.parametrize("step_sizes", ["shared", "per_step"])
def test_reversible_and_volume_preserving(step_sizes):
  """Shared step sizes: the trajectory from its end with the momentum flipped returns (a
  symmetric splitting); per-step ones: in the backward direction (the steps reversed)."""
  with jax.enable_x64(True):
    run = _trajectory(step_sizes)
    x = jnp.array([0.4, -1.1, 0.8])
    v = jnp.array([1.3, 0.2, -0.7])
    x_k, v_k, logdensity, log_det = run(x, v)
    assert float(jnp.max(jnp.abs(x_k - x))) > 0.1 and float(log_det) == 0.0
    np.testing.assert_allclose(logdensity, _rough(x_k), atol=1e-12)  # log p at the end point
    if step_sizes == "shared":
      x_back, v_back, _, _ = run(x_k, -v_k)  # the momentum flipped
      np.testing.assert_allclose(x_back, x, atol=1e-10)
      np.testing.assert_allclose(-v_back, v, atol=1e-10)
    x_back, v_back, _, _ = run(x_k, v_k, -1)  # the backward direction: the exact inverse
    np.testing.assert_allclose(x_back, x, atol=1e-10)
    np.testing.assert_allclose(v_back, v, atol=1e-10)
    jacobian = jax.jacfwd(lambda xv: jnp.concatenate(run(xv[:DIM], xv[DIM:])[:2]))(
        jnp.concatenate([x, v]))
    assert float(jnp.max(jnp.abs(jacobian - jnp.eye(2 * DIM)))) > 0.1  # not the identity
    np.testing.assert_allclose(abs(float(jnp.linalg.det(jacobian))), 1.0, atol=1e-10)


def test_rotation_step_sizes_turn_a_gaussian_exactly():
  """The closed form of each splitting's exact rotation, and the swap of roles between them:
  velocity Verlet's pair under position Verlet keeps the determinant but not the energy."""
  with jax.enable_x64(True):
    z = jnp.array([0.7, -1.3, 2.0])
    v = jnp.array([1.1, 0.4, -0.9])
    gaussian = lambda q: -0.5 * q @ q
    for num_steps, h in ((1, 3.0), (2, 0.5), (3, 10.0)):  # capped, below the cap, capped
      theta = min(2 * math.asin(min(h / 2, 1.0)), math.pi / 2 / num_steps)
      eps_x, eps_v = l2hmc.rotation_step_sizes(jnp.float64(h), num_steps, "position_verlet")
      np.testing.assert_allclose([eps_x, eps_v], [2 * math.tan(theta / 2), math.sin(theta)],
                                 rtol=1e-14)
      config = paper_config(dim=3, num_steps=num_steps, use_networks=False,
                                 integrator="position_verlet")
      params = l2hmc.L2HMCParams({}, jnp.log(eps_x)[None], jnp.log(eps_v)[None])
      x_k, v_k, logdensity, _, _ = l2hmc.leapfrog(config, params, jnp.zeros((num_steps, 3)),
                                                  gaussian, z, v, gaussian(z), -z, 1)
      angle = num_steps * theta
      np.testing.assert_allclose(x_k, math.cos(angle) * z + math.sin(angle) * v, atol=1e-12)
      np.testing.assert_allclose(v_k, -math.sin(angle) * z + math.cos(angle) * v, atol=1e-12)
      np.testing.assert_allclose(-logdensity + 0.5 * v_k @ v_k, 0.5 * (z @ z + v @ v),
                                 atol=1e-12)
    # K = 1 at the cap, velocity Verlet's pair (eps_x = 1, eps_v = 2) under position Verlet
    swapped = l2hmc.rotation_step_sizes(jnp.float64(3.0), 1)
    x_1, v_1, logdensity, _, _ = l2hmc.leapfrog(
        paper_config(dim=3, num_steps=1, use_networks=False, integrator="position_verlet"),
        l2hmc.L2HMCParams({}, jnp.log(swapped[0])[None], jnp.log(swapped[1])[None]),
        jnp.zeros((1, 3)), gaussian, z, v, gaussian(z), -z, 1)
    assert abs(float(-logdensity + 0.5 * v_1 @ v_1 - 0.5 * (z @ z + v @ v))) > 0.1


MEAN = jnp.array([1.0, -0.5])
COVARIANCE = jnp.array([[1.0, 0.6], [0.6, 0.8]])


def _gaussian(x):
  r = x - MEAN
  return -0.5 * r @ jnp.linalg.solve(COVARIANCE, r)


def test_sampler_with_the_reflection_keeps_a_gaussian():
  """8,000 exact draws of a shifted, correlated 2-d Gaussian, three transitions of the
  position-Verlet sampler (K = 2, reflection through the origin: not a symmetry of the
  target, so its Metropolis step rejects some; step sizes that accept ~70 %): mean and
  covariance within 5 standard errors of the exact ones."""
  config = paper_config(dim=2, num_steps=2, use_networks=False, hidden=1,
                             step_sizes="per_step", per_coordinate=True, reflection=True,
                             integrator="position_verlet")
  params = l2hmc.init_params(jax.random.key(0), config, step_size=jnp.array([0.9, 0.7]))
  sampler = l2hmc.l2hmc(_gaussian, config, params, jnp.zeros((2, 2)))
  n = 8000
  draws = MEAN + jax.random.normal(jax.random.key(1), (n, 2)) @ jnp.linalg.cholesky(
      COVARIANCE).T

  @jax.jit
  def run(key, positions):
    def one(states, key):
      states, info = jax.vmap(sampler.step)(jax.random.split(key, n), states)
      return states, info.acceptance_rate
    states, acceptance = jax.lax.scan(one, jax.vmap(sampler.init)(positions),
                                      jax.random.split(key, 3))
    return states.position, acceptance

  moved, acceptance = run(jax.random.key(2), draws)
  assert 0.3 < float(acceptance.mean()) < 0.95
  moved = np.asarray(moved, np.float64)
  assert np.mean(np.abs(moved - np.asarray(draws)) > 1e-6) > 0.5  # the chains moved
  cov = np.asarray(COVARIANCE)
  assert np.all(np.abs(moved.mean(0) - np.asarray(MEAN)) < 5 * np.sqrt(np.diag(cov) / n))
  se = np.sqrt((np.outer(np.diag(cov), np.diag(cov)) + cov**2) / n)  # of a sample covariance
  assert np.all(np.abs(np.cov(moved.T) - cov) < 5 * se)


def _counted(logdensity_fn, counts):
  """``logdensity_fn`` that adds 1 to ``counts["value"]`` per evaluation without gradient and to
  ``counts["gradient"]`` per gradient, when the compiled code runs them."""

  def tick(name):
    def add():
      counts[name] += 1
    jax.debug.callback(add)

  @jax.custom_vjp
  def f(x):
    tick("value")
    return logdensity_fn(x)

  def fwd(x):
    value, vjp = jax.vjp(logdensity_fn, x)
    return value, vjp

  def bwd(vjp, cotangent):
    tick("gradient")
    return vjp(cotangent)

  f.defvjp(fwd, bwd)
  return f


@pytest.mark.parametrize("integrator, num_steps, reflection, gradients, values", [
    ("position_verlet", 1, True, 1, 2),  # the midpoint; log p at the reflected and end points
    ("position_verlet", 3, False, 3, 1),
    ("velocity_verlet", 1, True, 2, 0),  # the end point's and the reflected point's gradients
    ("velocity_verlet", 3, False, 3, 0),
])
def test_gradients_per_transition(integrator, num_steps, reflection, gradients, values):
  counts = {"value": 0, "gradient": 0}
  config = paper_config(dim=2, num_steps=num_steps, use_networks=False, hidden=1,
                             reflection=reflection, integrator=integrator)
  params = l2hmc.init_params(jax.random.key(0), config, step_size=0.5)
  sampler = l2hmc.l2hmc(_counted(_gaussian, counts), config, params,
                        jnp.zeros((num_steps, 2)))
  state = sampler.init(jnp.array([0.3, -0.2]))
  step = jax.jit(sampler.step)
  for key in range(2):  # after the first: the counts of one transition
    counts.update(value=0, gradient=0)
    state, info = step(jax.random.key(key), state)
    jax.block_until_ready(state)
    jax.effects_barrier()
  assert counts == {"value": values, "gradient": gradients}
  assert int(info.num_gradient_evaluations) == gradients == l2hmc.gradient_evaluations(config)
  assert values == l2hmc.logdensity_evaluations(config)


def test_position_verlet_with_the_networks_is_refused():
  config = paper_config(dim=2, num_steps=2, use_networks=True,
                             integrator="position_verlet")
  with pytest.raises(ValueError, match="use_networks=False"):
    l2hmc.init_params(jax.random.key(0), config)
  with pytest.raises(ValueError, match="use_networks=False"):
    l2hmc.build_kernel(config)
  with pytest.raises(ValueError, match="integrator must be one of"):
    l2hmc.build_kernel(config._replace(use_networks=False, integrator="leapfrog"))
