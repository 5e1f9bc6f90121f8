"""The engine's trace vs brute-force autodiff through an unrolled run (float64).

The oracle (tests/metaoptimize/oracle.py) recomputes H_t from its definition, a discounted
sum of Jacobians dw_t/d(delta_tau) by jax.jacfwd through the whole unrolled run,
with no trace recursion. Tolerance: relative 1e-9, absolute 1e-12, on the trace,
the weights and the log step sizes after every one of 6 steps.

The exact variants keep the meta-sensitivity in a trust region
(``metaoptax._src.exact.stabilize``: a column whose Y^beta strays more
than ``sensitivity_radius`` from e_j is pulled back, i.e. a smaller discount for
that step). The oracle implements that definition independently, as weights on
its brute-force Jacobians dw_t/d(delta_tau) and d beta_t/d(delta_tau); the cases
in ``PULLED`` leave the trust region (the oracle's pull factor c < 1 at some
step), the others stay inside it (c = 1: the plain discounted sum).
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.flatten_util import ravel_pytree

import metaoptax
from metaoptax._src import exact
from tests.metaoptimize import oracle

STEPS = 6
EPS_ROOT = 1e-30  # finite derivative of sqrt(v) at v = 0 (see presets)

BASES = {
    "adam": lambda: optax.scale_by_adam(eps_root=EPS_ROOT),
    "lion": lambda: optax.scale_by_lion(b1=0.9, b2=0.99),
    "rmsprop": lambda: optax.scale_by_rms(decay=0.9),
    "momentum": lambda: optax.trace(decay=0.9),
    "sgd": optax.identity,
    "amsgrad": lambda: optax.scale_by_amsgrad(eps_root=EPS_ROOT),
    # a base whose direction reads the params: the jvp must carry that term
    "decayed_adam": lambda: optax.chain(optax.add_decayed_weights(0.05),
                                        optax.scale_by_adam(eps_root=EPS_ROOT)),
}
METAS = {
    "adam": lambda: optax.adam(0.05, eps_root=EPS_ROOT),
    "sgd": lambda: optax.sgd(0.5),
    "small_sgd": lambda: optax.sgd(0.005),
    "big_sgd": lambda: optax.sgd(4.0),  # leaves the meta-sensitivity trust region
    "lion": lambda: optax.lion(0.05, weight_decay=0.0),
    "rmsprop": lambda: optax.rmsprop(0.05, eps=1e-6),
}

# (base, meta, approximation, layout, gamma, kappa, meta_update_first, parametrization)
CASES = [
    ("adam", "adam", "2x2", "scalar", 1.0, 0.1, False, "log"),
    ("adam", "adam", "l_approx", "per_leaf", 0.9, 0.1, False, "log"),
    ("adam", "adam", "2x2", "per_param", 0.9, 0.0, False, "log"),
    ("sgd", "sgd", "l_approx", "per_param", 1.0, 0.0, True, "log"),
    ("momentum", "adam", "2x2", "labels", 0.5, 0.1, False, "log"),
    ("rmsprop", "rmsprop", "2x2", "per_leaf", 1.0, 0.1, False, "log"),
    ("amsgrad", "adam", "l_approx", "scalar", 0.0, 0.1, False, "log"),
    ("decayed_adam", "adam", "2x2", "labels", 0.9, 0.0, True, "log"),
    # (SGD, SGD, 2x2, scalar) once: gamma = 1, the log parametrization and
    # meta_update_first=False are in the other 2x2 cases.
    ("sgd", "sgd", "2x2", "scalar", 0.7, 0.0, True, "linear"),
    ("lion", "lion", "2x2", "per_leaf", 1.0, 0.1, False, "log"),
    ("momentum", "big_sgd", "2x2", "labels", 1.0, 0.0, True, "log"),
    # Hessian-free: compressed trace (one params-sized vector)
    ("adam", "adam", "hessian_free", "scalar", 1.0, 0.1, False, "log"),
    ("adam", "lion", "hessian_free", "per_param", 0.9, 0.1, False, "log"),
    ("momentum", "adam", "hessian_free", "labels", 0.0, 0.1, True, "log"),
    ("decayed_adam", "small_sgd", "hessian_free", "per_leaf", 0.9, 0.0, False, "linear"),
    ("rmsprop", "adam", "hessian_free", "per_leaf", 1.0, 0.0, False, "log"),
]

# Cases whose meta-sensitivity leaves the trust region within the 6 steps.
PULLED = [("momentum", "big_sgd", "2x2", "labels", 1.0, 0.0, True, "log")]


def loss(p, x, y):
  """A smooth non-quadratic objective; (x, y) is the step's batch."""
  flat = jnp.concatenate([p["a"].ravel(), p["b"]])
  r = x @ flat - y
  return jnp.mean(jnp.log(jnp.cosh(r))) + 0.05 * jnp.sum(flat**4)


def problem():
  """Params and a different batch at every step (stacked: leading axis = step)."""
  rng = np.random.default_rng(0)
  params = {"a": jnp.asarray(rng.normal(size=(2, 2))), "b": jnp.asarray(rng.normal(size=3))}
  batches = [(rng.normal(size=(5, 7)), rng.normal(size=5)) for _ in range(STEPS)]
  return params, (jnp.asarray(np.stack([x for x, _ in batches])),
                  jnp.asarray(np.stack([y for _, y in batches])))


LABELS = {"a": np.array([[0, 1], [1, 0]]), "b": np.array([2, 2, 0])}


def labels_for(params, layout):
  if layout == "labels":
    return LABELS, 3
  return oracle.labels_for(params, layout)


@pytest.mark.parametrize("case", CASES, ids=["-".join(map(str, c)) for c in CASES])
def test_trace_equals_bruteforce_sensitivity(case):
  base, meta, approximation, layout, gamma, kappa, first, param = case
  with jax.enable_x64(True):
    params, batches = problem()
    labels, m = labels_for(params, layout)
    alpha0 = 0.05
    ref = oracle.unrolled_metaoptimize(
        lambda p, batch: loss(p, *batch), batches, params, BASES[base](), METAS[meta](),
        labels, m, alpha0, gamma, weight_decay=kappa, parametrization=param,
        approximation=approximation, meta_update_first=first,
        radius=None if approximation == "hessian_free" else exact.DEFAULT_SENSITIVITY_RADIUS)
    pulled = min(float(np.min(c)) for c in ref["pull"]) < 1.0
    assert pulled == (case in PULLED)
    opt = metaoptax.metaoptimize(
        BASES[base](), METAS[meta](), init_step_size=alpha0,
        blocks=LABELS if layout == "labels" else layout, gamma=gamma,
        approximation=approximation, weight_decay=kappa, parametrization=param,
        meta_update_first=first, step_size_bounds=(1e-30, 1e30))
    step = jax.jit(lambda s, p, x, y: opt.update(
        jax.grad(loss)(p, x, y), s, p, obj_fn=lambda q: loss(q, x, y)))
    state, p = opt.init(params), params
    flat_labels = ravel_pytree(jax.tree.map(jnp.asarray, labels))[0].astype(int)
    for t, (x, y) in enumerate(zip(*batches)):
      updates, state = step(state, p, x, y)
      p = optax.apply_updates(p, updates)
      H = np.asarray(ref["trace"][t + 1])  # n x m
      np.testing.assert_allclose(ravel_pytree(p)[0], ref["w"][t + 1], rtol=1e-9, atol=1e-12)
      np.testing.assert_allclose(ravel_pytree(state.meta_params)[0], ref["beta"][t + 1],
                                 rtol=1e-9, atol=1e-12)
      if approximation == "hessian_free":
        h = np.asarray(ravel_pytree(metaoptax.sensitivity_trace(state))[0])
        np.testing.assert_allclose(h, H[np.arange(H.shape[0]), flat_labels],
                                   rtol=1e-9, atol=1e-12)
        off_block = H.copy()
        off_block[np.arange(H.shape[0]), flat_labels] = 0.0
        assert np.abs(off_block).max() < 1e-12  # HF: H is block-diagonal
      else:
        columns = jax.vmap(lambda tree: ravel_pytree(tree)[0])(metaoptax.sensitivity_trace(state))
        np.testing.assert_allclose(np.asarray(columns).T, H, rtol=1e-9, atol=1e-12)
    assert int(state.skipped_steps) == 0 and int(state.trace_resets) == 0
