"""Diagnosis: why the exact 2x2 (AdamW, Adam) degrades late on digits (suite task 1).

One seed, 30k steps from 3e-6; prints the step size, train loss - floor, the guard's
counters and the largest trace entry every 500 steps. Output committed as
``results/suite/diagnose_2x2_digits.txt``. Run: ``python benchmarks/diagnose_2x2_digits.py``.
"""
import sys, jax, jax.numpy as jnp, numpy as np, optax
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))
import metaoptax
from suite_tasks import digits
p = digits.make_problem()
opt = metaoptax.presets.adamw_adam(3e-6, approximation="2x2")
params = p.init(jax.random.key(0)); state = opt.init(params)
@jax.jit
def chunk(params, state, key):
  def body(c, k):
    q, s = c
    b = p.batch(k); f = lambda w: p.loss(w, b)
    g = jax.grad(f)(q)
    u, s = opt.update(g, s, q, obj_fn=f)
    return (optax.apply_updates(q, u), s), None
  (params, state), _ = jax.lax.scan(body, (params, state), jax.random.split(key, 500))
  return params, state
key = jax.random.key(1)
for i in range(60):
  key, k = jax.random.split(key)
  params, state = chunk(params, state, k)
  ms = state
  a = float(jnp.ravel(metaoptax.step_sizes(state))[0])
  tr = jax.tree.leaves(state.trace)
  tn = max(float(jnp.max(jnp.abs(t))) for t in tr if jnp.issubdtype(t.dtype, jnp.floating))
  print(f"{(i+1)*500} alpha {a:.3g} loss {float(p.evaluate(params)['train_loss'])-0.5003:.3g} resets {int(state.trace_resets)} skipped {int(state.skipped_steps)} max|trace| {tn:.3g}", flush=True)
