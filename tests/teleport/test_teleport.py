"""Group actions leave the loss invariant; teleportation; Prop. 4.1; Appendix B.

Tolerances (float64): invariance and inverses to 1e-9 relative (linear
layer pair 1e-10).
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from metaoptax.teleport import (closed_form_group_gradient, groups, teleport_on_the_fly,
                                with_teleportation)

BOOTH_A = jnp.array([[1.0, 2.0], [2.0, 1.0]])
BOOTH_B = jnp.array([-7.0, -5.0])


def f_h(h):
  return lambda x: jnp.sum(h(x) ** 2)


BIJECTIONS = {
    "booth": groups.affine_bijection(BOOTH_A, BOOTH_B),
    "ellipse": groups.affine_bijection(jnp.diag(jnp.array([0.5, 3.0])), jnp.zeros(2)),
    "rosenbrock": groups.rosenbrock_bijection(1.0, -1.0, lambda x: -10.0, lambda x: 10 * x**2),
    "generalized_rosenbrock": groups.rosenbrock_bijection(
        1.3, 0.4, lambda x: -2.0, lambda x: 0.4 * x**2 - 0.3 * x + 0.2),
}


@pytest.mark.parametrize("name", list(BIJECTIONS))
def test_so2_action_is_a_symmetry_with_inverse(name):
  with jax.enable_x64(True):
    h, _ = BIJECTIONS[name]
    act, inverse = groups.conjugated_rotation(BIJECTIONS[name])
    f = f_h(h)
    x = jnp.array([0.7, -1.3])
    for theta in np.linspace(-3, 3, 7):
      y = act(theta, x)
      np.testing.assert_allclose(f(y), f(x), rtol=1e-9)
      np.testing.assert_allclose(inverse(theta, y), x, rtol=1e-9)
    # the action really moves x (it is not the identity)
    assert float(jnp.linalg.norm(act(1.0, x) - x)) > 0.1


def test_layer_pair_actions_leave_the_loss_invariant():
  with jax.enable_x64(True):
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(20, 30)), rng.normal(size=(20, 30))  # width 20, mixed signs
    w1, w2 = rng.normal(size=(20, 20)), rng.normal(size=(20, 20))
    g = np.eye(20) + 0.1 * rng.normal(size=(20, 20))
    linear = lambda a, b: 0.5 * np.sum((y - b @ (a @ x)) ** 2)
    np.testing.assert_allclose(linear(*groups.linear_layer_pair(g, w1, w2)), linear(w1, w2),
                               rtol=1e-10)
    # LeakyReLU, at most as many examples as units: exact on the batch
    xs, ys = x[:, :15], y[:, :15]
    leaky = lambda a, b: 0.5 * jnp.sum((ys - b @ groups.leaky_relu(a @ xs)) ** 2)
    a2, b2 = groups.leaky_relu_layer_pair(g, w1, w2, xs)
    np.testing.assert_allclose(leaky(a2, b2), leaky(w1, w2), rtol=1e-9)
    assert np.abs(a2 - w1).max() > 1e-2  # it moved
    # ... but not on other data, and not with more examples than units
    other = lambda a, b: 0.5 * jnp.sum((y - b @ groups.leaky_relu(a @ x)) ** 2)
    assert abs(float(other(a2, b2)) / float(other(w1, w2)) - 1) > 1e-3
    a3, b3 = groups.leaky_relu_layer_pair(g, w1, w2, x)
    assert abs(float(other(a3, b3)) / float(other(w1, w2)) - 1) > 1e-3


def booth(x):
  return jnp.sum((BOOTH_A @ x + BOOTH_B) ** 2)


def run_booth(opt, steps=9):
  x = jnp.array([5.0, -5.0])
  update = jax.jit(lambda g, s, x: opt.update(g, s, x, obj_fn=booth))
  state = opt.init(x)
  for _ in range(steps):
    u, state = update(jax.grad(booth)(x), state, x)
    x = x + u
  return float(booth(x)), state


def test_one_teleport_speeds_up_gd_on_booth():
  act, _ = groups.conjugated_rotation(groups.affine_bijection(BOOTH_A, BOOTH_B))
  gd, _ = run_booth(optax.sgd(0.08))
  tele, state = run_booth(with_teleportation(
      optax.sgd(0.08), act, teleport_at=(0,),
      init_group_param=lambda k: jax.random.uniform(k, (), maxval=jnp.pi),
      ascent_steps=10, ascent_learning_rate=1e-4))
  assert abs(gd - 3.12) < 0.01  # GD, lr 0.08 from (5, -5), loss at step 9
  assert tele < 1e-2 < gd / 100
  assert int(state.teleports) == 1 and int(state.rejected) == 0


def test_teleport_leaving_the_level_set_is_rejected():
  bad_act = lambda theta, x: x * (1.0 + theta)  # not a symmetry
  _, state = run_booth(with_teleportation(
      optax.sgd(0.08), bad_act, teleport_every=3, init_group_param=lambda k: 0.5))
  assert int(state.teleports) == 0 and int(state.rejected) == 3


def orbit_growth(bijection, x):
  """Prop. 4.1 along the SO(2) orbit of ``x`` under ``groups.conjugated_rotation(bijection)``.

  Returns ``(cos(tau, grad f), growth, product, c)``: ``tau`` the orbit's tangent
  at ``x``, ``growth = d/dtheta ||grad f(g_theta x)||^2`` at 0 (autodiff through
  the library's action), ``product = v_perp . d/dx ||grad f||^2`` with ``v_perp``
  the component of the Newton direction orthogonal to the gradient (from the
  Hessian alone), and ``c = tau . v_perp / |tau|^2``. In 2-D the tangent spans the
  gradient's orthogonal complement, so ``v_perp = c tau`` and ``product = c growth``.
  """
  h, _ = bijection
  f = f_h(h)
  act, _ = groups.conjugated_rotation(bijection)
  grad, hessian = jax.grad(f)(x), jax.hessian(f)(x)
  tau = jax.jvp(lambda theta: act(theta, x), (0.0,), (1.0,))[1]
  growth = jax.grad(lambda theta: jnp.sum(jax.grad(f)(act(theta, x)) ** 2))(0.0)
  v = -jnp.linalg.solve(hessian, grad)
  v_perp = v - (v @ grad) / (grad @ grad) * grad
  product = v_perp @ (2 * hessian @ grad)
  cosine = tau @ grad / (jnp.linalg.norm(tau) * jnp.linalg.norm(grad))
  return cosine, growth, product, (tau @ v_perp) / (tau @ tau)


def test_proposition_4_1_along_the_group_orbit():
  """Prop. 4.1 through the library's group actions: for convex f (h affine, random A, b)
  the gradient norm grows along the orbit in the direction of Newton's component
  orthogonal to the gradient; for the non-convex Rosenbrock f_h both signs occur."""
  with jax.enable_x64(True):
    rng = np.random.default_rng(0)
    a = jnp.asarray(rng.normal(size=(50, 2, 2)) + 2 * np.eye(2))
    b, x = jnp.asarray(rng.normal(size=(50, 2))), jnp.asarray(rng.normal(size=(50, 2)))
    cosine, growth, product, c = jax.jit(jax.vmap(
        lambda a, b, x: orbit_growth(groups.affine_bijection(a, b), x)))(a, b, x)
    np.testing.assert_array_less(np.abs(cosine), 1e-9)  # the orbit stays on the level set
    np.testing.assert_allclose(product, c * growth, rtol=1e-8)
    assert np.all(product >= -1e-9 * (1 + np.abs(product))), product
    assert np.median(np.abs(product)) > 1e-3  # not vacuous
    _, growth, product, c = jax.jit(jax.vmap(
        lambda x: orbit_growth(BIJECTIONS["rosenbrock"], x)))(jnp.asarray(rng.normal(size=(50, 2))))
    np.testing.assert_allclose(product, c * growth, rtol=1e-8)
    assert product.min() < 0 < product.max()  # without convexity the proposition fails


def test_algorithm_2_closed_form_and_learning():
  with jax.enable_x64(True):
    rng = np.random.default_rng(1)
    q = rng.normal(size=(2, 2))
    b = jnp.asarray(q @ q.T + 0.5 * np.eye(2))  # symmetric positive definite
    a = b.T @ b
    f = lambda x: x @ a @ x
    act = lambda theta, x: jnp.linalg.solve(b, groups.rotation(theta) @ b @ x)
    alpha = 0.05
    for _ in range(10):
      x, theta = jnp.asarray(rng.normal(size=2)), float(rng.uniform(-3, 3))
      autodiff = jax.grad(lambda th: f(act(th, x) - alpha * jax.grad(f)(act(th, x))))(theta)
      np.testing.assert_allclose(closed_form_group_gradient(b, x, theta, alpha), autodiff,
                                 rtol=1e-10)
    x0 = jnp.asarray([1.0, -1.0])
    learned = teleport_on_the_fly(f, act, x0, 0.0, step_size=alpha, meta_step_size=0.05,
                                  steps=20)
    fixed = teleport_on_the_fly(f, act, x0, 0.0, step_size=alpha, meta_step_size=0.0, steps=20)
    assert float(learned.loss[-1]) < 0.5 * float(fixed.loss[-1])


def test_closed_form_2x2_inverse_matches_lu_solve():
  """``solve_2x2`` (the ellipse family's inverse map) against ``jnp.linalg.solve``
  (LU) in float64, on Gaussian matrices and on ones with condition number up to 1e6;
  relative error below 1e-9 times the condition number."""
  with jax.enable_x64(True):
    keys = jax.random.split(jax.random.key(7), 200)
    for k, key in enumerate(keys):
      ka, kv, kc = jax.random.split(key, 3)
      a = jax.random.normal(ka, (2, 2), jnp.float64)
      if k % 2:  # force an ill-conditioned matrix
        u, s, vt = jnp.linalg.svd(a)
        a = (u * jnp.array([s[0], s[0] * 10.0 ** -jax.random.uniform(kc, maxval=6.0)])) @ vt
      v = jax.random.normal(kv, (2,), jnp.float64)
      expected = jnp.linalg.solve(a, v)
      error = jnp.linalg.norm(groups.solve_2x2(a, v) - expected) / jnp.linalg.norm(expected)
      assert float(error) <= 1e-9 * float(jnp.linalg.cond(a)), (k, float(error))
