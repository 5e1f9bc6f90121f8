"""Checkpoint and resume of optimizer states mid-run, bit for bit (``metaoptax.checkpoint``).

For every preset (Hessian-free; scalar or weight-wise), every drop-in (per_leaf),
the exact 2x2 and L variants, IDBD and hypergradient descent: run 8 jitted steps
uninterrupted; run 4, save ``(params, state)`` with orbax, restore into a freshly
initialised ``like`` tree, run the last 4 with the same jitted step; params and every
state leaf must be identical (``np.array_equal``, no tolerance) and of the same dtype.
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import metaoptax
from metaoptax import checkpoint
from metaoptax.step_size import presets
from metaoptax.step_size.drop_ins import DROP_INS

STEPS, SAVE_AT = 8, 4


def _loss(params, t):
  x = jnp.sin(jnp.arange(6.0) + t)
  pred = jnp.tanh(params["w"] @ x[:4] + params["b"]) @ params["v"]
  return (pred - x[5]) ** 2 + 0.1 * jnp.sum(params["w"] ** 2)


def _params():
  key_w, key_v = jax.random.split(jax.random.key(0))
  return {"w": jax.random.normal(key_w, (3, 4)), "b": jnp.zeros(3),
          "v": jax.random.normal(key_v, (3,))}


# Every preset, alternately with scalar and weight-wise blocks (a label layout and
# the params-shaped beta: the two code paths of metaoptax/_src/blocks.py), so that
# each meta (Adam, Lion, SGD) meets both layouts; SGD on SGD with both.
PRESET_BLOCKS = {name: ("scalar", "per_param")[k % 2]
                 for k, name in enumerate(presets.PRESETS)}
CASES = {f"{name} {blocks}": (lambda f=presets.PRESETS[name], b=blocks: f(1e-3, blocks=b), False)
         for name, blocks in [*PRESET_BLOCKS.items(), ("sgd_sgd", "scalar"),
                              ("sgd_sgd", "per_param")]}
# The drop-ins with per_leaf blocks only: "scalar" and "per_leaf" are both label
# layouts (one code path, metaoptax/_src/blocks.py), which the presets' "scalar" covers.
CASES.update({f"drop-in {name} per_leaf": (lambda f=fn: f(1e-3, blocks="per_leaf"), False)
              for name, fn in DROP_INS.items()})
# the trace read off the average (no stored trace), also with Adam's first moment in bfloat16
CASES["drop-in adamw gamma=None"] = (lambda: metaoptax.adamw(1e-3, gamma=None), False)
CASES["drop-in adamw gamma=None, bfloat16 first moment"] = (
    lambda: metaoptax.adamw(1e-3, gamma=None, mu_dtype=jnp.bfloat16), False)
# the stored trace, the average and Adam's first moment in bfloat16 (stochastic rounding's bits
# are a hash of the step count, which the checkpoint holds)
CASES["drop-in adamw, first moment, trace and average in bfloat16"] = (
    lambda: metaoptax.adamw(1e-3, mu_dtype=jnp.bfloat16, trace_dtype=jnp.bfloat16,
                            average_dtype=jnp.bfloat16), False)
CASES["adamw_adam 2x2"] = (lambda: presets.adamw_adam(1e-3, approximation="2x2"), True)
CASES["adamw_adam l_approx per_leaf"] = (
    lambda: presets.adamw_adam(1e-3, approximation="l_approx", blocks="per_leaf"), True)
CASES["idbd"] = (lambda: metaoptax.idbd(meta_step_size=1e-2, init_step_size=1e-3), "diag")
CASES["hypergradient_descent"] = (
    lambda: metaoptax.hypergradient_descent(optax.scale_by_adam(), meta_step_size=1e-7,
                                            init_step_size=1e-3), False)


@pytest.mark.parametrize("case", sorted(CASES))
def test_resume_from_checkpoint_is_bit_for_bit(case, tmp_path):
  make, needs_obj_fn = CASES[case]
  opt = make()

  @jax.jit
  def step(params, state, t):
    grads = jax.grad(_loss)(params, t)
    extra = {}
    if needs_obj_fn == "diag":  # IDBD's curvature: a positive params-shaped tree
      extra = {"hessian_diagonal": jax.tree.map(lambda p: jnp.full_like(p, 0.5), params)}
    elif needs_obj_fn:
      extra = {"obj_fn": lambda p: _loss(p, t)}
    updates, state = opt.update(grads, state, params, **extra)
    return optax.apply_updates(params, updates), state

  def run(params, state, start, stop):
    for t in range(start, stop):
      params, state = step(params, state, jnp.float32(t))
    return params, state

  params0 = _params()
  full = run(params0, opt.init(params0), 0, STEPS)

  half = run(params0, opt.init(params0), 0, SAVE_AT)
  checkpoint.save(tmp_path / "ckpt", half)
  like = (params0, opt.init(params0))
  restored = checkpoint.restore(tmp_path / "ckpt", like)
  resumed = run(*restored, SAVE_AT, STEPS)

  full_leaves, resumed_leaves = jax.tree.leaves(full), jax.tree.leaves(resumed)
  assert jax.tree.structure(full) == jax.tree.structure(resumed)
  assert len(full_leaves) == len(resumed_leaves)
  for a, b in zip(full_leaves, resumed_leaves):
    assert np.asarray(a).dtype == np.asarray(b).dtype
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  assert all(np.isfinite(np.asarray(x, np.float64)).all() for x in full_leaves
             if np.asarray(x).dtype.kind == "f")
