"""IDBD, Xu et al.'s extension and hypergradient descent vs their published updates.

Each reference is written in NumPy from the original paper (float64):
* IDBD: Sutton (1992), the per-input loop of his Figure 2;
* Xu et al. (2018) as restated in Sharifnassab et al. (2024) App. B.1, with the
  full Hessian from jax.hessian;
* hypergradient descent: Baydin et al. (2017), Algorithms SGD-HD and Adam-HD.
Tolerance: relative 1e-10 (IDBD, HD), 1e-9 (Xu, Hessian by autodiff).
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import metaoptax


def run(opt, grads_fn, w0, steps, hessian_diagonal=None, obj_fn=None):
  """Runs ``opt`` for ``steps`` with gradients ``grads_fn(t, w)``; float64."""
  w = jnp.asarray(w0)
  state = opt.init(w)
  kwargs = {} if obj_fn is None else {"obj_fn": obj_fn}
  update = jax.jit(lambda g, s, w, **arrays: opt.update(g, s, w, **arrays, **kwargs))
  ws = []
  for t in range(steps):
    arrays = {} if hessian_diagonal is None else {"hessian_diagonal": hessian_diagonal(t, w)}
    u, state = update(jnp.asarray(grads_fn(t, w)), state, w, **arrays)
    w = w + u
    ws.append(np.asarray(w))
  return np.stack(ws), state


def tracking_data(steps, n=5, seed=0):
  rng = np.random.default_rng(seed)
  xs = rng.normal(size=(steps, n))
  targets = xs @ np.array([1.0, -1.0, 0.5, 0.0, 2.0]) + 0.1 * rng.normal(size=steps)
  return xs, targets


def test_idbd_matches_sutton_1992():
  steps, theta, alpha0 = 300, 0.01, 0.05
  xs, ys = tracking_data(steps)
  n = xs.shape[1]
  # Sutton (1992), Figure 2 (per-input loop; with g = -delta x his h is ours).
  w, beta, h = np.zeros(n), np.full(n, np.log(alpha0)), np.zeros(n)
  ref_w = []
  for x, y in zip(xs, ys):
    delta = y - w @ x
    for i in range(n):
      beta[i] += theta * delta * x[i] * h[i]
      alpha = np.exp(beta[i])
      w[i] += alpha * delta * x[i]
      h[i] = h[i] * max(0.0, 1 - alpha * x[i] ** 2) + alpha * delta * x[i]
    ref_w.append(w.copy())
  with jax.enable_x64(True):
    opt = metaoptax.idbd(meta_step_size=theta, init_step_size=alpha0, step_size_bounds=(1e-30, 1e3))
    ws, state = run(opt, lambda t, w: (w @ xs[t] - ys[t]) * xs[t], np.zeros(n), steps,
                    hessian_diagonal=lambda t, w: jnp.asarray(xs[t] ** 2))
  np.testing.assert_allclose(ws, np.stack(ref_w), rtol=1e-10, atol=1e-12)
  np.testing.assert_allclose(np.asarray(state.log_step_sizes), beta, rtol=1e-10)
  np.testing.assert_allclose(np.asarray(state.trace), h, rtol=1e-10, atol=1e-12)


def test_idbd_is_metaoptimize_l_approx_with_diagonal_hessian():
  """On a separable quadratic the diagonal Hessian is exact: IDBD without the
  rectifier equals MetaOptimize(SGD, SGD, weight-wise, L-approx, meta first)."""
  c = np.array([0.5, 1.0, 2.0, 4.0])
  target = np.array([1.0, -2.0, 0.5, 3.0])
  loss = lambda w: 0.5 * jnp.sum(c * (w - target) ** 2)
  with jax.enable_x64(True):
    idbd = metaoptax.idbd(meta_step_size=0.05, init_step_size=0.01, rectify=False)
    general = metaoptax.metaoptimize(
        optax.identity(), optax.sgd(0.05), init_step_size=0.01, blocks="per_param",
        approximation="l_approx", meta_update_first=True)
    grad = lambda t, w: jax.grad(loss)(w)
    w_idbd, s_idbd = run(idbd, grad, np.zeros(4), 60, hessian_diagonal=lambda t, w: jnp.asarray(c))
    w_gen, s_gen = run(general, grad, np.zeros(4), 60, obj_fn=loss)
  np.testing.assert_allclose(w_idbd, w_gen, rtol=1e-10)
  np.testing.assert_allclose(np.asarray(s_idbd.trace), np.diag(np.asarray(s_gen.trace.weights)),
                             rtol=1e-10, atol=1e-14)
  off_diagonal = np.asarray(s_gen.trace.weights) - np.diag(np.diag(np.asarray(s_gen.trace.weights)))
  assert np.abs(off_diagonal).max() == 0.0


def test_xu_idbd_matches_published_update():
  rng = np.random.default_rng(1)
  a = rng.normal(size=(6, 4))
  b = rng.normal(size=6)

  def loss(w):  # logistic regression: non-separable, non-constant Hessian
    return jnp.mean(jnp.logaddexp(0.0, -b * (a @ w)))

  eta, alpha0, steps = 0.5, 0.3, 40
  with jax.enable_x64(True):
    w, beta, H = np.zeros(4), np.full(4, np.log(alpha0)), np.zeros((4, 4))
    ref_w = []
    for _ in range(steps):
      g = np.asarray(jax.grad(loss)(jnp.asarray(w)))
      hess = np.asarray(jax.hessian(loss)(jnp.asarray(w)))
      beta = beta - eta * H.T @ g
      alpha = np.exp(beta)
      w_next = w - alpha * g
      H = (np.eye(4) - alpha[:, None] * hess) @ H - np.diag(alpha * g)
      w = w_next
      ref_w.append(w.copy())
    opt = metaoptax.xu_idbd(meta_step_size=eta, init_step_size=alpha0, step_size_bounds=(1e-30, 1e3))
    ws, state = run(opt, lambda t, w: jax.grad(loss)(w), np.zeros(4), steps,
                    obj_fn=loss)
  np.testing.assert_allclose(ws, np.stack(ref_w), rtol=1e-9)
  np.testing.assert_allclose(np.asarray(state.meta_params.step_size), beta, rtol=1e-9)
  # Column j of H is the trace's column j: ExactTrace.weights[j] = H[:, j].
  np.testing.assert_allclose(np.asarray(state.trace.weights).T, H, rtol=1e-9, atol=1e-14)


def quadratic_problem():
  rng = np.random.default_rng(2)
  q = rng.normal(size=(5, 5))
  a = q @ q.T / 5 + 0.1 * np.eye(5)
  return a, rng.normal(size=5)


def test_hypergradient_descent_matches_baydin_sgd_hd():
  a, b = quadratic_problem()
  grad = lambda w: a @ w - b
  alpha0, eta, steps = 0.01, 1e-3, 50
  # Baydin et al. (2017), Algorithm SGD-HD.
  w, alpha, g_prev = np.zeros(5), alpha0, np.zeros(5)
  ref = []
  for _ in range(steps):
    g = grad(w)
    alpha = alpha + eta * g @ g_prev
    w = w - alpha * g
    g_prev = g
    ref.append((w.copy(), alpha))
  with jax.enable_x64(True):
    opt = metaoptax.hypergradient_descent(meta_step_size=eta, init_step_size=alpha0)
    ws, state = run(opt, lambda t, w: grad(np.asarray(w)), np.zeros(5), steps)
  np.testing.assert_allclose(ws, np.stack([r[0] for r in ref]), rtol=1e-10)
  np.testing.assert_allclose(float(metaoptax.step_sizes(state)), ref[-1][1], rtol=1e-10)


def test_hypergradient_descent_matches_baydin_adam_hd():
  a, b = quadratic_problem()
  grad = lambda w: a @ w - b
  alpha0, eta, steps, b1, b2, eps = 0.01, 1e-4, 50, 0.9, 0.999, 1e-8
  # Baydin et al. (2017), Algorithm Adam-HD: h_t = g_t . u_{t-1}, u = -mhat/(sqrt(vhat)+eps).
  w, alpha, m, v, d_prev = np.zeros(5), alpha0, np.zeros(5), np.zeros(5), np.zeros(5)
  ref = []
  for t in range(1, steps + 1):
    g = grad(w)
    alpha = alpha + eta * g @ d_prev
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    d = (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps)
    w = w - alpha * d
    d_prev = d
    ref.append((w.copy(), alpha))
  with jax.enable_x64(True):
    opt = metaoptax.hypergradient_descent(
        optax.scale_by_adam(b1=b1, b2=b2, eps=eps), meta_step_size=eta, init_step_size=alpha0)
    ws, state = run(opt, lambda t, w: grad(np.asarray(w)), np.zeros(5), steps)
  np.testing.assert_allclose(ws, np.stack([r[0] for r in ref]), rtol=1e-10)
  np.testing.assert_allclose(float(metaoptax.step_sizes(state)), ref[-1][1], rtol=1e-10)


def test_hypergradient_descent_needs_meta_step_size():
  with pytest.raises(TypeError, match="meta_step_size"):
    metaoptax.hypergradient_descent(init_step_size=0.01)
