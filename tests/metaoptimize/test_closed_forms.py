"""Hessian-free trace vs the paper's closed forms (Algorithm 3), in float64.

The reference below is plain NumPy written from the paper (no optax, no jvp):
AdamW and Lion bases, Adam and Lion meta updates, blockwise step sizes.
Tolerance: relative 1e-10 on weights, log step sizes and the trace over 40 steps.
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import metaoptax

STEPS = 40
RTOL = 1e-10


def adam_direction(state, g, t, b1=0.9, b2=0.999, eps=1e-8):
  m, v = state
  m = b1 * m + (1 - b1) * g
  v = b2 * v + (1 - b2) * g * g
  d = (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps)
  return d, (m, v)


def lion_direction(state, g, t, c=0.9, rho=0.99):
  (m,) = state
  d = np.sign(c * m + (1 - c) * g)
  return d, (rho * m + (1 - rho) * g,)


def adam_meta(state, s, t, eta, b1=0.9, b2=0.999, eps=1e-8):
  d, state = adam_direction(state, s, t, b1, b2, eps)
  return -eta * d, state


def lion_meta(state, s, t, eta, c=0.9, rho=0.99):
  d, state = lion_direction(state, s, t, c, rho)
  return -eta * d, state


def reference(grads, w0, labels, m, base, meta, *, alpha0, eta, gamma, kappa):
  """Paper Algorithm 3 (HF, log step sizes, meta uses s_t = sum_block h*g)."""
  w, h = w0.copy(), np.zeros_like(w0)
  beta = np.full(m, np.log(alpha0))
  base_state = (np.zeros_like(w0),) * (2 if base is adam_direction else 1)
  meta_state = (np.zeros(m),) * (2 if meta is adam_meta else 1)
  out = []
  for t, g in enumerate(grads, start=1):
    s = np.bincount(labels, weights=h * g, minlength=m)
    d, base_state = base(base_state, g, t)
    alpha = np.exp(beta)[labels]
    w_next = w - alpha * (d + kappa * w)
    h = gamma * (1 - kappa * alpha) * h - alpha * (d + kappa * w)
    w = w_next
    u, meta_state = meta(meta_state, s, t, eta)
    beta = beta + u
    out.append((w.copy(), beta.copy(), h.copy()))
  return out


CASES = [
    ("adamw-adam", adam_direction, adam_meta, optax.scale_by_adam, optax.adam),
    ("adamw-lion", adam_direction, lion_meta, optax.scale_by_adam, optax.lion),
    ("lion-lion", lion_direction, lion_meta, optax.scale_by_lion, optax.lion),
    ("lion-adam", lion_direction, adam_meta, optax.scale_by_lion, optax.adam),
]


@pytest.mark.parametrize("gamma", [1.0, 0.9])
@pytest.mark.parametrize("layout", ["scalar", "labels"])
@pytest.mark.parametrize("name,base_ref,meta_ref,base_tx,meta_tx", CASES,
                         ids=[c[0] for c in CASES])
def test_hessian_free_trace_matches_algorithm_3(name, base_ref, meta_ref, base_tx, meta_tx,
                                                layout, gamma):
  rng = np.random.default_rng(0)
  n = 7
  w0 = rng.normal(size=n)
  grads = [rng.normal(size=n) for _ in range(STEPS)]
  labels = np.zeros(n, int) if layout == "scalar" else np.array([0, 0, 1, 1, 1, 2, 2])
  m = labels.max() + 1
  eta, alpha0, kappa = 3e-2, 1e-2, 0.1
  ref = reference(grads, w0, labels, m, base_ref, meta_ref, alpha0=alpha0, eta=eta,
                  gamma=gamma, kappa=kappa)
  if meta_tx is optax.lion:
    meta = meta_tx(eta, b1=0.9, b2=0.99, weight_decay=0.0)
  else:
    meta = meta_tx(eta)
  base = base_tx(b1=0.9, b2=0.99) if base_tx is optax.scale_by_lion else base_tx()
  with jax.enable_x64(True):
    opt = metaoptax.metaoptimize(
        base, meta, init_step_size=alpha0, gamma=gamma, weight_decay=kappa,
        blocks="scalar" if layout == "scalar" else labels, step_size_bounds=(1e-30, 1e3))
    w = jnp.asarray(w0)

    def step(carry, g):
      w, state = carry
      u, state = opt.update(g, state, w)
      w = w + u
      return (w, state), (w, state.meta_params.step_size, metaoptax.sensitivity_trace(state))

    _, (ws, betas, hs) = jax.jit(lambda w, s, gs: jax.lax.scan(step, (w, s), gs))(
        w, opt.init(w), jnp.asarray(np.stack(grads)))
  w_ref, beta_ref, h_ref = (np.stack(x) for x in zip(*ref))
  np.testing.assert_allclose(np.asarray(ws), w_ref, rtol=RTOL, atol=1e-13)
  np.testing.assert_allclose(np.asarray(betas), beta_ref, rtol=RTOL)
  np.testing.assert_allclose(np.asarray(hs), h_ref, rtol=RTOL, atol=1e-13)
