"""The leaner step reads fewer bytes and computes the same numbers.

Two changes cut XLA's bytes accessed of the donated step (``test_step_bytes.py``) without
changing a value:

* ``tree_utils.all_finite`` as ``isfinite(sum(x - x))``, one arithmetic reduction, instead of
  ``all(isfinite(x))`` (a boolean array written, then reduced);
* ``hessian_free._written_after``: Lion's in-place moment update ordered after the weight
  change by one entry of it instead of all of it.

The oracle is the former implementation of both, kept here (:func:`_reference_all_finite`,
:func:`_reference_written_after`) and patched in: 50 donated, jitted steps of each drop-in on
a small MLP, with a NaN gradient (a skipped step) and a NaN in the trace (a restart) on the
way, must give the same params and state to ``rtol = 1e-6`` (float32), and the same counts.
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import metaoptax
from metaoptax._src import hessian_free, tree_utils

STEPS = 50
SKIPPED_AT, RESET_AT = 17, 31


def _reference_all_finite(tree):
  leaves = [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)
            if jnp.issubdtype(jnp.asarray(x).dtype, jnp.inexact)]
  return jnp.all(jnp.stack(leaves)) if leaves else jnp.asarray(True)


def _reference_written_after(delta, base_state):
  treedef = jax.tree.structure(delta)

  def leaf(x, d):
    if jnp.shape(x) != jnp.shape(d) or not jnp.issubdtype(jnp.asarray(x).dtype, jnp.inexact):
      return x
    return jnp.where((d == d) | (d != d), x, jnp.zeros_like(x))

  def subtree(tree):
    return jax.tree.map(leaf, tree, delta) if jax.tree.structure(tree) == treedef else tree

  return jax.tree.map(subtree, base_state, is_leaf=lambda t: jax.tree.structure(t) == treedef)


def _loss(params, x, y):
  h = jnp.tanh(x @ params[0]["w"] + params[0]["b"])
  return jnp.mean((h @ params[1]["w"] + params[1]["b"] - y) ** 2)


def _run(opt, validation_loss: bool):
  """50 donated steps; returns (params, state) as numpy trees."""
  keys = jax.random.split(jax.random.PRNGKey(0), 4)
  params = [{"w": 0.5 * jax.random.normal(keys[0], (8, 32)), "b": jnp.zeros(32)},
            {"w": 0.5 * jax.random.normal(keys[1], (32, 4)), "b": jnp.zeros(4)}]
  x = jax.random.normal(keys[2], (64, 8))
  y = jnp.sin(x[:, :4]) + 0.1 * jax.random.normal(keys[3], (64, 4))

  def step(params, state, t):
    loss, grads = jax.value_and_grad(_loss)(params, x * (1 + 0.01 * t), y)
    grads = jax.tree.map(lambda g: jnp.where(t == SKIPPED_AT, jnp.nan, g), grads)
    extra = {"validation_loss": loss * (1 + 0.001 * t)} if validation_loss else {}
    updates, state = opt.update(grads, state, params, **extra)
    return optax.apply_updates(params, updates), state

  step = jax.jit(step, donate_argnums=(0, 1))
  state = opt.init(params)
  for t in range(STEPS):
    if t == RESET_AT:  # a NaN in the trace: the guard restarts it
      state = jax.tree.map(
          lambda s: s._replace(trace=s.trace._replace(weights=jax.tree.map(
              lambda h: h.at[(0,) * h.ndim].set(jnp.nan), s.trace.weights)))
          if isinstance(s, metaoptax.MetaOptimizeState) else s,
          state, is_leaf=lambda s: isinstance(s, metaoptax.MetaOptimizeState))
    params, state = step(params, state, jnp.asarray(t, jnp.float32))
  return jax.device_get((params, state))


DROP_INS = {
    "adamw": (lambda: metaoptax.adamw(1e-3), False),
    "adamw from 1e-6": (lambda: metaoptax.adamw(), False),
    "lion": (lambda: metaoptax.lion(1e-4), False),
    "sgd": (lambda: metaoptax.sgd(1e-2, momentum=0.9), False),
    "gate": (lambda: metaoptax.overfitting_gate(metaoptax.adamw(1e-3)), True),
}


@pytest.mark.parametrize("name", DROP_INS)
def test_same_numbers_as_the_former_step(name, monkeypatch):
  make, validation_loss = DROP_INS[name]
  got = _run(make(), validation_loss)
  with monkeypatch.context() as patch:
    patch.setattr(tree_utils, "all_finite", _reference_all_finite)
    patch.setattr(hessian_free, "_written_after", _reference_written_after)
    want = _run(make(), validation_loss)
  got_leaves, want_leaves = jax.tree.leaves(got), jax.tree.leaves(want)
  assert jax.tree.structure(got) == jax.tree.structure(want)
  for a, b in zip(got_leaves, want_leaves):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=0)
  meta = [s for s in jax.tree.leaves(got[1], is_leaf=lambda s: isinstance(
      s, metaoptax.MetaOptimizeState)) if isinstance(s, metaoptax.MetaOptimizeState)]
  assert int(meta[0].skipped_steps) == 1 and int(meta[0].trace_resets) >= 1
  assert float(metaoptax.step_sizes(got[1])) > 0
