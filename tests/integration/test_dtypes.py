"""Params dtypes and determinism.

Matrix: every MetaOptimize variant (the 8 presets, scalar and weight-wise; one
blockwise layout; the exact ``2x2`` and ``L``; IDBD; hypergradient descent) x
params in float16, bfloat16, float32, float64 (under ``jax.enable_x64``), a
mixed bfloat16 / float32 tree, and float32 with x64 enabled. Checked by
abstract evaluation (``jax.eval_shape``, no compile; outside any ``lax.scan``):

* the updates have exactly the params' dtypes;
* every floating leaf of the state (log step sizes, traces, meta and base
  optimizer moments) is float32, float64 for float64 params; counters are int32;
* ``update`` maps the state's dtype tree, weak types included, onto itself.

Then, for float16 and bfloat16 (one compile per variant): 10 jitted steps under
``lax.scan`` from step size 1e-2 on a small quadratic with one gradient entry
exactly 0 and one ~1e-4 (Adam's second moment underflows there in float16) stay
finite, take no guard action, and reduce the loss. The learned (LSTM) optimizer
and the teleport wrapper get the same dtype checks.

Determinism: the same inputs and seed give bit-identical results from two
separate XLA compilations (MetaOptimize runs, an L2O meta-training step, L2HMC
training), and eager execution matches jit to float32 rounding (not bit for bit:
XLA fuses and reorders float operations under jit; see
``docs/metaoptimize.md``, "Precision and determinism").
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import metaoptax
from metaoptax import l2hmc, l2o, teleport
from metaoptax.step_size import presets
from metaoptax.step_size.drop_ins import DROP_INS
from tests.l2hmc.paper import paper_config, paper_training

STEPS = 10
INIT_STEP_SIZE = 1e-2
CURVATURE = np.array([1.0, 2.0, 0.1])
TARGET = np.array([1.0, -0.5, 1e-3])  # w[2]'s gradient is 1e-4 at the start


def loss(params):
  """A quadratic in float32 (float64 for float64 params); ``b[1]``'s gradient is 0."""
  w, b = (x.astype(jnp.result_type(x.dtype, jnp.float32)) for x in (params["w"], params["b"]))
  # Constants converted at the loss's dtype: an eager op mixing a numpy array with
  # float64 after float32 calls of the same op fails to re-convert it (JAX 0.10).
  curvature, target = jnp.asarray(CURVATURE, w.dtype), jnp.asarray(TARGET, w.dtype)
  return 0.5 * jnp.sum(curvature * (w - target) ** 2) + 0.5 * b[0] ** 2


def make_params(dtype):
  """``dtype`` is a dtype, or "mixed" (bfloat16 weights, float32 biases)."""
  w_dtype, b_dtype = (jnp.bfloat16, jnp.float32) if dtype == "mixed" else (dtype, dtype)
  return {"w": jnp.zeros(3, w_dtype), "b": jnp.array([0.5, 0.0], b_dtype)}


# name -> (factory, extra arguments of update: None, "obj_fn" or "hessian_diagonal")
VARIANTS = {
    f"{name}-{blocks}": (lambda f=fn, b=blocks: f(INIT_STEP_SIZE, blocks=b), None)
    for name, fn in presets.PRESETS.items() for blocks in ("scalar", "per_param")
}
VARIANTS.update({
    f"drop-in {name}-{blocks}": (lambda f=fn, b=blocks: f(INIT_STEP_SIZE, blocks=b), None)
    for name, fn in DROP_INS.items() for blocks in ("scalar", "per_param")})
VARIANTS["adamw_adam-labels"] = (
    lambda: presets.adamw_adam(INIT_STEP_SIZE, blocks={"w": np.array([0, 1, 1]), "b": 2}),
    None)
VARIANTS["adamw_adam-2x2"] = (
    lambda: presets.adamw_adam(INIT_STEP_SIZE, approximation="2x2"), "obj_fn")
VARIANTS["sgd_adam-L-per_leaf"] = (
    lambda: presets.sgd_adam(INIT_STEP_SIZE, approximation="l_approx", blocks="per_leaf"),
    "obj_fn")
VARIANTS["idbd"] = (
    lambda: metaoptax.idbd(meta_step_size=1e-2, init_step_size=INIT_STEP_SIZE),
    "hessian_diagonal")
VARIANTS["hypergradient_descent-adam"] = (
    lambda: metaoptax.hypergradient_descent(optax.scale_by_adam(), meta_step_size=1e-4,
                                            init_step_size=INIT_STEP_SIZE), None)

DTYPES = {"float16": jnp.float16, "bfloat16": jnp.bfloat16, "float32": jnp.float32,
          "float64": jnp.float64, "mixed": "mixed",
          "float32-x64": jnp.float32}  # float32 params with x64 enabled: nothing widens


def update_fn(opt, extra):
  def update(grads, state, params):
    kwargs = {}
    if extra == "obj_fn":
      kwargs["obj_fn"] = loss
    elif extra == "hessian_diagonal":
      kwargs["hessian_diagonal"] = jax.tree.map(
          lambda p: jnp.full_like(p, 1.0, jnp.float32), params)
    return opt.update(grads, state, params, **kwargs)
  return update


def signature(tree):
  """``(dtype, weak_type)`` of every leaf, concrete or abstract."""
  return [(str(x.dtype), bool(getattr(x, "weak_type", False) if isinstance(
      x, jax.ShapeDtypeStruct) else jax.typeof(x).weak_type)) for x in jax.tree.leaves(tree)]


def float_leaves(tree):
  return [x for x in jax.tree.leaves(tree) if jnp.issubdtype(x.dtype, jnp.inexact)]


def int_leaves(tree):
  return [x for x in jax.tree.leaves(tree) if jnp.issubdtype(x.dtype, jnp.integer)]


def check_dtypes(opt, update, params, state_dtype):
  """Updates in the params' dtypes; state floats in ``state_dtype``; no drift."""
  state = jax.eval_shape(opt.init, params)
  grads = jax.eval_shape(jax.grad(loss), params)
  updates, new_state = jax.eval_shape(update, grads, state, params)
  assert signature(updates) == signature(params)
  assert signature(new_state) == signature(state)
  assert jax.tree.structure(new_state) == jax.tree.structure(state)
  assert {str(x.dtype) for x in float_leaves(state)} == {state_dtype}
  assert {str(x.dtype) for x in int_leaves(state)} <= {"int32"}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("variant", VARIANTS)
def test_updates_keep_params_dtypes_and_state_is_wide(variant, dtype):
  make, extra = VARIANTS[variant]
  opt = make()
  if dtype in ("float64", "float32-x64"):
    with jax.enable_x64(True):
      check_dtypes(opt, update_fn(opt, extra), make_params(DTYPES[dtype]), dtype[:7])
  else:
    check_dtypes(opt, update_fn(opt, extra), make_params(DTYPES[dtype]), "float32")


def meta_state_parts(state):
  """(log step sizes, traces, meta moments) of a MetaOptimizeState or IDBDState."""
  if isinstance(state, metaoptax.IDBDState):
    return state.log_step_sizes, state.trace, ()
  return state.meta_params, state.trace, state.meta_state


# The scan runs compile once per variant: one of each code path (every base
# direction but AMSGrad (Adam's path), the block layouts, both exact variants,
# IDBD, hypergradient descent).
RUNS = ["adamw_adam-per_param", "lion_lion-scalar", "rmsprop_adam-scalar",
        "sgd_momentum_adam-per_param", "sgd_sgd-per_param",
        "adamw_adam-labels", "adamw_adam-2x2", "sgd_adam-L-per_leaf", "idbd",
        "hypergradient_descent-adam"]


@pytest.mark.parametrize("variant", RUNS)
def test_low_precision_steps_stay_finite_and_reduce_the_loss(variant):
  """float16 and bfloat16 problems side by side in one jitted lax.scan."""
  make, extra = VARIANTS[variant]
  opt = make()
  update = update_fn(opt, extra)
  problems = {"float16": make_params(jnp.float16), "bfloat16": make_params(jnp.bfloat16)}

  def body(carry, _):
    new = {}
    for name, (params, state) in carry.items():
      updates, state = update(jax.grad(loss)(params), state, params)
      new[name] = (optax.apply_updates(params, updates), state)
    return new, None

  @jax.jit
  def run(problems):
    start = {name: (p, opt.init(p)) for name, p in problems.items()}
    end, _ = jax.lax.scan(body, start, None, length=STEPS)
    losses = {name: (loss(p), loss(end[name][0])) for name, p in problems.items()}
    return start, end, losses

  start, end, losses = run(problems)
  for name, params in problems.items():
    final_params, final_state = end[name]
    assert signature(final_params) == signature(params), name
    assert signature(final_state) == signature(start[name][1]), name
    assert all(bool(jnp.all(jnp.isfinite(x))) for x in float_leaves(end[name])), name
    for part in meta_state_parts(final_state):
      assert all(x.dtype == jnp.float32 for x in float_leaves(part)), name
    assert int(final_state.skipped_steps) == 0, name
    assert int(getattr(final_state, "trace_resets", 0)) == 0, name
    initial, final = (float(x) for x in losses[name])
    assert final < 0.9 * initial, (name, initial, final)
    assert float(final_params["b"][1]) == 0.0  # zero gradient: no move


L2O_HEADS = [("update",), ("learning_rate", "momentum")]


@pytest.mark.parametrize("heads", L2O_HEADS, ids=["+".join(h) for h in L2O_HEADS])
def test_learned_optimizer_dtypes(heads):
  config = l2o.L2OConfig(heads=heads, hidden=4)
  opt = config.transformation(config.init_network(jax.random.key(0)))
  update = lambda g, s, p: opt.update(g, s, p)
  for dtype in ("float16", "bfloat16", "float32", "mixed"):
    check_dtypes(opt, update, make_params(DTYPES[dtype]), "float32")
  with jax.enable_x64(True):
    check_dtypes(opt, update, make_params(jnp.float64), "float64")

  if heads != L2O_HEADS[-1]:
    return

  def body(carry, _):
    params, state = carry
    updates, state = opt.update(jax.grad(loss)(params), state, params)
    return (optax.apply_updates(params, updates), state), None

  params = make_params(jnp.bfloat16)
  (final, state), _ = jax.jit(
      lambda p: jax.lax.scan(body, (p, opt.init(p)), None, length=STEPS))(params)
  assert signature(final) == signature(params)
  assert all(bool(jnp.all(jnp.isfinite(x))) for x in float_leaves((final, state)))
  assert int(state.skipped_steps) == 0


def test_teleport_wrapper_dtypes():
  """with_teleportation around a preset: the teleported params keep their dtypes."""
  def act(theta, params):  # a rotation of (w[0], w[1]) (not a symmetry here; rejected)
    c, s = jnp.cos(theta), jnp.sin(theta)
    w = params["w"]
    return {**params, "w": jnp.stack([c * w[0] - s * w[1], s * w[0] + c * w[1], w[2]])}

  opt = teleport.with_teleportation(
      presets.adamw_adam(INIT_STEP_SIZE), act, teleport_every=1,
      init_group_param=lambda key: jnp.float32(0.1), ascent_steps=2)
  update = lambda g, s, p: opt.update(g, s, p, obj_fn=loss)
  for dtype in ("bfloat16", "mixed"):
    params = make_params(DTYPES[dtype])
    state = jax.eval_shape(opt.init, params)
    grads = jax.eval_shape(jax.grad(loss), params)
    updates, new_state = jax.eval_shape(update, grads, state, params)
    assert signature(updates) == signature(params)
    assert signature(new_state) == signature(state)
    assert all(x.dtype == jnp.float32 for x in float_leaves(state.inner_state))


# --- determinism -------------------------------------------------------------

def unrolled(opt, extra):
  update = update_fn(opt, extra)

  def run(params):
    def body(carry, _):
      params, state = carry
      updates, state = update(jax.grad(loss)(params), state, params)
      return (optax.apply_updates(params, updates), state), loss(params)
    return jax.lax.scan(body, (params, opt.init(params)), None, length=STEPS)
  return run


def two_compilations(fn, *args):
  """Two independent XLA compilations of ``fn``.

  JAX keeps the trace, the lowering and the executable of a function object, so two
  ``jax.jit(fn).lower(...).compile()`` in a row wrap the same executable; each
  compilation here jits a wrapper of its own (a new function object: traced, lowered
  and compiled again), leaving the process's other caches as they are.
  """
  first = jax.jit(lambda *a: fn(*a)).lower(*args).compile()
  second = jax.jit(lambda *a: fn(*a)).lower(*args).compile()
  assert first.runtime_executable() is not second.runtime_executable()
  return first, second


def assert_bitwise_equal(a, b):
  assert jax.tree.structure(a) == jax.tree.structure(b)
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
      x, y = jax.random.key_data(x), jax.random.key_data(y)
    x, y = np.asarray(x), np.asarray(y)
    assert x.dtype == y.dtype
    assert x.tobytes() == y.tobytes()  # bit for bit, NaNs and signed zeros included


DETERMINISM = ["adamw_adam-per_param", "idbd"]


@pytest.mark.parametrize("variant", DETERMINISM)
def test_metaoptimize_is_bitwise_deterministic_across_compilations(variant):
  make, extra = VARIANTS[variant]
  run = unrolled(make(), extra)
  params = make_params(jnp.float32)
  first, second = two_compilations(run, params)
  result = first(params)
  assert_bitwise_equal(result, second(params))
  if variant != "adamw_adam-per_param":
    return
  # Eager (op by op) against jit: equal to float32 rounding, not bit for bit
  # (XLA fuses elementwise chains and may contract a * b + c into an FMA).
  with jax.disable_jit():
    eager = run(params)
  for x, y in zip(jax.tree.leaves(eager), jax.tree.leaves(result)):
    np.testing.assert_allclose(np.asarray(x, np.float64), np.asarray(y, np.float64),
                               rtol=1e-5, atol=1e-7)


@pytest.mark.system  # a training or sampling run (6-10 s): CI's second command
def test_l2o_meta_training_is_bitwise_deterministic_across_compilations():
  family = l2o.tasks.ellipse()
  config = l2o.L2OConfig(heads=("learning_rate", "momentum"), hidden=4)
  meta_step = l2o.build_training_step(family, config,
                                      l2o.TrainingConfig(tasks_per_step=4, horizon=4, unroll=2))
  start = l2o.init_training(jax.random.key(5), family, config)
  first, second = two_compilations(meta_step, start)
  runs = []
  for compiled in (first, second):  # two meta steps (four meta updates) each
    state, info = compiled(start)
    runs.append((info, compiled(state)))
  assert_bitwise_equal(runs[0], runs[1])
  assert int(runs[0][1][0].meta_step) == 2
  # Another seed gives another run (the comparison above can fail).
  _, other = first(l2o.init_training(jax.random.key(6), family, config))
  assert not np.array_equal(np.asarray(other.losses), np.asarray(runs[0][0].losses))


@pytest.mark.system  # two compilations of an L2HMC training run
def test_l2hmc_training_is_bitwise_deterministic_across_compilations():
  target = l2hmc.targets.strongly_correlated_gaussian()
  config = paper_config(dim=2, num_steps=1)  # one leapfrog step: a small compile
  training = paper_training(num_chains=8)
  step = l2hmc.build_training_step(target, config, training)
  start = l2hmc.init_training(jax.random.key(2), target, config, training)
  first, second = two_compilations(step, start)
  runs = []
  for compiled in (first, second):  # two iterations each
    state, info = compiled(start)
    runs.append((info, compiled(state)))
  assert_bitwise_equal(runs[0], runs[1])
  assert int(runs[0][1][0].iteration) == 2
  _, other = first(l2hmc.init_training(jax.random.key(3), target, config, training))
  assert not np.array_equal(np.asarray(other.loss), np.asarray(runs[0][0].loss))
