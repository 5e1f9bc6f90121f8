"""Brute-force forward-mode reference ("oracle") for MetaOptimize traces.

Independent of the ``metaoptax`` engine: everything here is recomputed from the
definition by ``jax.jacfwd`` through an unrolled float64 run.

Step t (t = 0..T-1), on f_t = obj_fn(., batch_t), with a beta-perturbation
delta_t in R^m (delta = 0 in the primal run):
  1. beta_t <- beta_t + delta_t
  2. g_t = grad f_t(w_t)
  3. s_t = H_t^T g~_t, with H_t (n x m) a CONSTANT (the oracle's own earlier
     value, fed in as a fixed array); g~_t = g_t for "2x2", stop_gradient(g_t)
     for "l_approx" and "hessian_free".
  4. u, meta_state = meta.update(s_t, meta_state, beta_t); beta_{t+1} = beta_t + u
  5. g_base = g_t ("2x2", "l_approx") or stop_gradient(g_t) ("hessian_free");
     d_t, base_state = base.update(g_base, base_state, w_t);
     alpha_i = sigma(beta_used)[b(i)], beta_used = beta_{t+1} if
     meta_update_first else beta_t; sigma = exp ("log") or identity ("linear");
     w_{t+1} = w_t - alpha * (d_t + kappa * w_t).
beta_0 = sigma^{-1}(alpha0) * ones(m).

Call it under ``with jax.enable_x64(True):`` (float64).

Trace: per column j, with weights omega_{t,tau} on the perturbations delta_tau,
    H_t[:, j] = sum_{tau<t} omega_{t,tau,j} * d w_t / d delta_tau[j]      (H_0 = 0)
    Y_t[:, j] = sum_{tau<t} omega_{t,tau,j} * d beta_t / d delta_tau[j] + omega_{t,t,j} e_j
    omega_{0,0} = 1;  omega^_{t+1,tau} = gamma omega_{t,tau} + (1-gamma)[tau = t]  (tau <= t)
    c_j = min(1, radius / sum_i |Y^_{t+1}[i, j] - [i = j]|)   (Y^ from omega^; c = 1 if
          radius is None)
    omega_{t+1,tau} = c_j omega^_{t+1,tau} (tau <= t),  omega_{t+1,t+1} = 1 - c_j.
Without the trust region (c = 1): omega_{t,0} = gamma^(t-1) and
omega_{t,tau} = (1-gamma) gamma^(t-tau-1), 1 <= tau < t (gamma=1: dw_t/d delta_0;
gamma=0: dw_t/d delta_{t-1}). Computed sequentially: H_t comes from the Jacobian
of a run whose step-3 constants are H_0..H_{t-1} as already computed here. The run
is a ``jax.lax.scan`` over the T steps, differentiated by one compiled ``jacfwd``
called T times (w_t reads neither H_t.. nor delta_t..): still brute-force autodiff
through the whole run, without a trace recursion.
"""
import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

_SIGMA = {"log": (jnp.exp, jnp.log), "linear": (lambda b: b, lambda a: a)}
_APPROX = ("hessian_free", "l_approx", "2x2")


def labels_for(params, layout):
    """Return (labels pytree of int arrays shaped like params, num_blocks m).

    "scalar": all 0 (m=1); "per_leaf": leaf k (jax.tree.leaves order) -> k;
    "per_param": flat index in ravel_pytree order (m = n).
    """
    leaves, treedef = jax.tree.flatten(params)
    shapes = [np.shape(l) for l in leaves]
    if layout == "scalar":
        labs, m = [np.zeros(s, np.int32) for s in shapes], 1
    elif layout == "per_leaf":
        labs, m = [np.full(s, k, np.int32) for k, s in enumerate(shapes)], len(leaves)
    elif layout == "per_param":
        labs, off = [], 0
        for s in shapes:
            size = int(np.prod(s, dtype=np.int64))
            labs.append(np.arange(off, off + size, dtype=np.int32).reshape(s))
            off += size
        m = off
    else:
        raise ValueError(f"unknown layout {layout!r}")
    return jax.tree.unflatten(treedef, labs), m


def hyperparam_value(name, phi):
    """A learned hyperparameter's value: sigmoid(phi) for those in (0, 1), else exp(phi)."""
    unit = name in ("b1", "b2", "decay", "momentum")
    return 1.0 / (1.0 + jnp.exp(-phi)) if unit else jnp.exp(phi)


def hyperparam_phi(name, value):
    """Inverse of ``hyperparam_value``."""
    unit = name in ("b1", "b2", "decay", "momentum")
    return np.log(value) - np.log1p(-value) if unit else np.log(value)


def _run(obj_fn, batches, params0, base, meta, labels, beta0, kappa, sigma,
         approximation, meta_update_first, traces, deltas, names=(), base_factory=None):
    """Run of T steps (T = len(deltas)) under ``jax.lax.scan``; traces[t] are the
    constant H_t. Returns the flat w_t (t=0..T), beta_t (t=0..T), s_t (t=0..T-1) and
    the final params. A scan, not a Python loop, so that one compiled function serves
    every t: w_t does not depend on traces[t:] nor on deltas[t:]."""
    def step(carry, xs):
        w, beta, base_state, meta_state = carry
        batch, trace, delta = xs
        beta = beta + delta                                         # 1.
        g = jax.grad(obj_fn)(w, batch)                              # 2.
        g_flat = ravel_pytree(g)[0]
        g_meta = g_flat if approximation == "2x2" else jax.lax.stop_gradient(g_flat)
        s = jax.lax.stop_gradient(trace).T @ g_meta                 # 3.
        u, meta_state = meta.update(s, meta_state, beta)            # 4.
        beta_next = beta + u
        g_base = jax.lax.stop_gradient(g) if approximation == "hessian_free" else g
        used = beta_next if meta_update_first else beta
        m = used.shape[0] - len(names)  # beta = (log step sizes, learned phi)
        values = {n: hyperparam_value(n, used[m + k]) for k, n in enumerate(names)}
        kap = values.pop("weight_decay", kappa)
        step_base = base_factory(**values) if names else base
        d, base_state = step_base.update(g_base, base_state, w)     # 5.
        a = sigma(used[:m])
        w = jax.tree.map(lambda wi, di, li: wi - a[li] * (di + kap * wi),
                         w, d, labels)
        return (w, beta_next, base_state, meta_state), (ravel_pytree(w)[0], beta_next, s)

    carry = (params0, beta0, base.init(params0), meta.init(beta0))
    (w, _, _, _), (ws, betas, sgs) = jax.lax.scan(step, carry, (batches, traces, deltas))
    ws = jnp.concatenate([ravel_pytree(params0)[0][None], ws])
    betas = jnp.concatenate([beta0[None], betas])
    return ws, betas, sgs, w


def unrolled_metaoptimize(obj_fn, batches, params0, base, meta, labels, num_blocks,
                          init_step_size, gamma, weight_decay=0.0,
                          parametrization="log", approximation="hessian_free",
                          meta_update_first=False, radius=None, hyperparams=None,
                          base_factory=None):
    """Reference MetaOptimize run over T steps (float64), f_t = obj_fn(., batch_t).

    ``batches``: a pytree of arrays with a leading axis of length T (batch_t is
    its slice t). ``radius``: the trust radius of the meta-sensitivity Y (None:
    none). Returns dict with lists: "w" (flat w_t, t=0..T), "beta" (t=0..T),
    "trace" (H_t, n x m, t=0..T), "meta_grad" (s_t, t=0..T-1), "pull"
    (c, per column, t=1..T) and "params" (final params pytree).

    ``hyperparams``: ``{name: start value}`` of hyperparameters learned beside
    the step sizes, appended to beta in sorted order as ``phi`` (logit for
    b1/b2/decay/momentum, else log); ``"weight_decay"`` replaces ``weight_decay``,
    the others are passed to ``base_factory(**values)``, a fresh base built at
    every step from the current values (``base`` gives its initial state).
    """
    if approximation not in _APPROX:
        raise ValueError(f"unknown approximation {approximation!r}")
    sigma, sigma_inv = _SIGMA[parametrization]
    T, m = jax.tree.leaves(batches)[0].shape[0], int(num_blocks)
    labels = jax.tree.map(lambda l: jnp.asarray(l, jnp.int32), labels)
    flat0 = ravel_pytree(params0)[0]
    n = flat0.shape[0]
    beta0 = jnp.full((m,), sigma_inv(jnp.asarray(init_step_size, flat0.dtype)),
                     flat0.dtype)
    names = tuple(sorted(hyperparams or {}))
    if names:
        phi0 = [hyperparam_phi(n, hyperparams[n]) for n in names]
        beta0 = jnp.concatenate([beta0, jnp.asarray(phi0, flat0.dtype)])
        m += len(names)
    args = (obj_fn, batches, params0, base, meta, labels, beta0, weight_decay, sigma,
            approximation, meta_update_first)

    def run(traces, deltas):
        ws, betas, sgs, w = _run(*args, traces, deltas, names, base_factory)
        return (ws, betas), (ws, betas, sgs, w)

    # Jacobians of every w_t, beta_t (t=0..T) w.r.t. every delta_tau: (T+1, n|m, T, m).
    # The entries t of ``traces`` not yet known are zeros: w_t and beta_t do not read them.
    jacobians = jax.jit(jax.jacfwd(run, argnums=1, has_aux=True))
    zeros = jnp.zeros((T, m), flat0.dtype)
    traces = np.zeros((T + 1, n, m))
    pulls = []
    omega = np.ones((1, m))  # omega[tau, j], tau = 0..t
    for t in range(1, T + 1):
        # step-3 constants are the already computed H_0..H_{t-1}
        (Jw, Jb), _ = jacobians(jnp.asarray(traces[:T]), zeros)
        Jw, Jb = np.asarray(Jw)[t, :, :t], np.asarray(Jb)[t, :, :t]  # (n|m, t, m)
        omega_hat = gamma * omega
        omega_hat[t - 1] += 1 - gamma
        H = np.einsum("itj,tj->ij", Jw, omega_hat)
        Y = np.einsum("itj,tj->ij", Jb, omega_hat)
        c = np.ones(m)
        if radius is not None:
            deviation = np.sum(np.abs(Y - np.eye(m)), axis=0)
            with np.errstate(divide="ignore"):
                c = np.minimum(1.0, radius / deviation)
        traces[t] = H * c
        pulls.append(c)
        omega = np.concatenate([c * omega_hat, (1 - c)[None]], axis=0)

    _, (ws, betas, sgs, w) = jacobians(jnp.asarray(traces[:T]), zeros)
    return {"w": list(ws), "beta": list(betas), "trace": list(traces),
            "meta_grad": list(sgs), "pull": pulls, "params": w}
