"""Hostile inputs, property-based (hypothesis): each gets a clear error or the
documented behaviour of docs/robustness.md, and no state is silently corrupted.

* random pytrees (nested dict / list / tuple, 0-4 leaves, 0-3 dims with
  zero-size dims, float16 / bfloat16 / float32) and random valid
  hyperparameters: init and update run under jit, the updates have the params'
  structure, shapes and dtypes, the state stays finite with fixed dtypes;
* random invalid hyperparameters: ``ValueError`` naming the problem;
* NaN / +-inf at random gradient positions: the step is skipped (zero updates;
  step sizes, meta state and trace kept; ``skipped_steps`` + 1) and the next
  finite step proceeds;
* an ``obj_fn`` returning a non-scalar: ``ValueError`` at trace time; one whose
  Hessian-vector products are NaN / inf: the step is taken, the step sizes and
  meta state kept, the trace restarted and counted (``trace_resets``);
* mismatched ``blocks=`` labels: ``ValueError`` naming the problem;
* empty pytrees and all-zero-size leaves: a no-op step (or, for
  ``blocks="per_leaf"`` on no arrays, a clear error);
* learned optimizers (``metaoptax.l2o``) on NaN gradients: skipped, state kept.

Compiles dominate the cost, so the non-finite properties run on one fixed mixed
tree per variant with the numeric hyperparameters and the bad positions as
traced arguments: each variant compiles once and every example reuses it.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import metaoptax
from metaoptax import l2o
from metaoptax._src import exact as exact_variants
from metaoptax.step_size.presets import PRESETS

# tens of seconds in all: the file runs first (tests/conftest.py), not last on one worker
pytestmark = pytest.mark.slow


def hostile_settings(max_examples):
  return settings(max_examples=max_examples, deadline=None, derandomize=True, database=None,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


DTYPES = (jnp.float16, jnp.bfloat16, jnp.float32)
BAD_VALUES = (math.nan, math.inf, -math.inf)
DEFAULT_BOUNDS = (1e-10, 1.0)


# --------------------------------------------------------------------- pytrees
@dataclasses.dataclass(frozen=True)
class LeafSpec:
  """The shape and dtype of one params leaf (a pytree leaf itself: not registered)."""

  shape: tuple
  dtype: object


leaf_specs = st.builds(LeafSpec, st.lists(st.integers(0, 3), max_size=3).map(tuple),
                       st.sampled_from(DTYPES))
tree_specs = st.recursive(
    leaf_specs,
    lambda children: st.one_of(
        st.dictionaries(st.sampled_from("abcd"), children, max_size=3),
        st.lists(children, max_size=3),
        st.lists(children, max_size=3).map(tuple)),
    max_leaves=4,
).filter(lambda spec: len(jax.tree.leaves(spec)) <= 4)


def materialize(spec, seed):
  """Arrays of the specified shapes and dtypes, values ~ N(0, 0.5^2)."""
  rng = np.random.default_rng(seed)
  return jax.tree.map(
      lambda s: jnp.asarray(0.5 * rng.standard_normal(s.shape), s.dtype), spec)


def quadratic(params, targets):
  """``sum_i 0.5 (p_i - t_i)^2`` in float32: gradient ``p - t``, Hessian ``I``."""
  return sum((0.5 * jnp.sum((p.astype(jnp.float32) - t) ** 2)
              for p, t in zip(jax.tree.leaves(params), jax.tree.leaves(targets))),
             jnp.zeros([], jnp.float32))


def signature(tree):
  """Structure, shapes and dtypes of a tree (what must never drift)."""
  return jax.tree.structure(tree), [(jnp.shape(x), jnp.asarray(x).dtype)
                                    for x in jax.tree.leaves(tree)]


def all_finite(tree):
  return all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree.leaves(tree)
             if jnp.issubdtype(jnp.asarray(x).dtype, jnp.inexact))


def assert_trees_equal(a, b):
  assert jax.tree.structure(a) == jax.tree.structure(b)
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    np.testing.assert_array_equal(np.asarray(x, np.float64), np.asarray(y, np.float64))


# ----------------------------------------------------------- hyperparameters
@dataclasses.dataclass(frozen=True)
class Hyperparams:
  init_step_size: float
  gamma: float
  meta_step_size: float
  weight_decay: float
  bounds: tuple = DEFAULT_BOUNDS


def log_uniform(low, high):
  return st.floats(math.log(low), math.log(high)).map(math.exp)


@st.composite
def valid_hyperparams(draw, random_bounds=True):
  if random_bounds:
    lower = draw(st.one_of(st.just(0.0), log_uniform(1e-12, 1e-4)))
    upper = draw(st.one_of(st.just(math.inf), log_uniform(1e-2, 10.0)))
  else:
    lower, upper = DEFAULT_BOUNDS
  init = draw(log_uniform(max(lower, 1e-7), min(upper, 0.1)))
  return Hyperparams(
      init_step_size=init,
      gamma=draw(st.one_of(st.sampled_from([0.0, 1.0]), st.floats(0.0, 1.0))),
      meta_step_size=draw(st.one_of(st.just(0.0), log_uniform(1e-6, 1e-1))),
      weight_decay=draw(st.one_of(st.just(0.0), st.floats(0.0, 1.0))),
      bounds=(lower, upper))


# -------------------------------------------------------------------- variants
@dataclasses.dataclass(frozen=True)
class Variant:
  """One transformation under test: a preset with a layout, IDBD or HD."""

  kind: str  # "preset", "idbd" or "hd"
  preset: str = ""
  approximation: str = "hessian_free"
  blocks: object = "scalar"

  @property
  def exact(self):
    return self.approximation != "hessian_free"

  def build(self, hp: Hyperparams):
    if self.kind == "idbd":
      return metaoptax.idbd(meta_step_size=hp.meta_step_size, init_step_size=hp.init_step_size,
                            step_size_bounds=hp.bounds)
    if self.kind == "hd":
      return metaoptax.hypergradient_descent(
          meta_step_size=hp.meta_step_size, init_step_size=hp.init_step_size,
          blocks=self.blocks, step_size_bounds=(0.0, hp.bounds[1]))
    return PRESETS[self.preset](
        hp.init_step_size, meta_step_size=hp.meta_step_size, weight_decay=hp.weight_decay,
        gamma=hp.gamma, blocks=self.blocks, approximation=self.approximation,
        step_size_bounds=hp.bounds)

  def extra_args(self, params, targets, obj_scale=1.0):
    if self.kind == "idbd":
      return {"hessian_diagonal": jax.tree.map(jnp.ones_like, params)}  # Hessian of quadratic
    if self.exact:
      return {"obj_fn": lambda p: obj_scale * quadratic(p, targets)}
    return {}

  def __str__(self):
    if self.kind != "preset":
      return self.kind
    blocks = self.blocks if isinstance(self.blocks, str) else "labels"
    return f"{self.preset}-{self.approximation}-{blocks}"


def per_weight_labels(params):
  """Labels 0, 1, 2, 0, ... over each array's weights (a callable ``blocks=``)."""
  return jax.tree.map(lambda x: np.arange(x.size, dtype=np.int32).reshape(x.shape) % 3, params)


# One of every layout, every preset, both exact approximations, IDBD and HD.
FIXED_TREE_VARIANTS = [
    Variant("preset", "adamw_adam", blocks="scalar"),
    Variant("preset", "adamw_lion", blocks="per_param"),
    Variant("preset", "lion_lion", blocks="per_leaf"),
    Variant("preset", "rmsprop_adam", blocks=per_weight_labels),
    Variant("preset", "sgd_momentum_adam", blocks="per_param"),
    Variant("preset", "sgd_sgd", blocks="scalar"),
    Variant("preset", "sgd_adam", blocks="per_leaf"),
    Variant("preset", "amsgrad_adam", blocks="scalar"),
    Variant("preset", "sgd_momentum_adam", approximation="2x2", blocks="scalar"),
    Variant("preset", "adamw_adam", approximation="l_approx", blocks="per_leaf"),
    Variant("idbd"),
    Variant("hd"),
]


def fixed_tree():
  """Mixed dtypes, a scalar and a zero-size leaf: 10 weights in all."""
  return {"w": jnp.asarray([[0.5, -1.0], [0.25, 2.0], [-0.75, 1.5]], jnp.float32),
          "b": [jnp.asarray([0.1, -0.2, 0.3], jnp.bfloat16), jnp.asarray(1.5, jnp.float16)],
          "z": jnp.zeros((0, 2), jnp.float32)}


NUM_WEIGHTS = 10


def inject(tree, positions, value):
  """``tree`` with ``value`` at the flat positions ``positions`` (a bool vector)."""
  leaves, treedef = jax.tree.flatten(tree)
  out, start = [], 0
  for x in leaves:
    mask = positions[start:start + x.size].reshape(x.shape)
    out.append(jnp.where(mask, jnp.asarray(value, x.dtype), x))
    start += x.size
  return jax.tree.unflatten(treedef, out)


def as_traced(hp: Hyperparams):
  """The numeric hyperparameters as arrays (jit arguments: no recompiles)."""
  return {k: jnp.asarray(getattr(hp, k), jnp.float32)
          for k in ("init_step_size", "gamma", "meta_step_size", "weight_decay")}


@functools.lru_cache(maxsize=None)
def jitted(variant: Variant):
  """``init(hp, params)`` and ``update(hp, grads, state, params, targets, obj_scale)``,
  jitted once per variant: hyperparameters, values and ``obj_scale`` are traced.

  Steps are separate calls (as in a training loop), so a state that is kept is
  the very buffer passed in: inside one jit XLA may recompute it in two fusions
  with different roundings.
  """

  @jax.jit
  def init(hp, params):
    return variant.build(Hyperparams(**hp)).init(params)

  @jax.jit
  def update(hp, grads, state, params, targets, obj_scale):
    opt = variant.build(Hyperparams(**hp))
    return opt.update(grads, state, params, **variant.extra_args(params, targets, obj_scale))

  return init, update


def quadratic_grads(params, targets):
  """``p - t`` (the gradient of :func:`quadratic`), in the params' dtypes."""
  return jax.tree.map(lambda p, t: (p.astype(jnp.float32) - t).astype(p.dtype), params, targets)


positions_strategy = st.sets(st.integers(0, NUM_WEIGHTS - 1), min_size=1, max_size=3).map(
    lambda ks: np.isin(np.arange(NUM_WEIGHTS), sorted(ks)))


def kept_fields(state):
  """What a skipped step keeps: everything but the base state and the counters."""
  if isinstance(state, metaoptax.IDBDState):
    return (state.log_step_sizes, state.trace)
  return (state.meta_params, state.meta_state, state.trace)


@pytest.mark.parametrize("variant", FIXED_TREE_VARIANTS, ids=str)
@hostile_settings(max_examples=4)
@given(hp=valid_hyperparams(random_bounds=False), positions=positions_strategy,
       bad_value=st.sampled_from(BAD_VALUES), seed=st.integers(0, 2**16),
       bad_objective=st.sampled_from([math.nan, math.inf]))
def test_nonfinite_gradients_skip_the_step(variant, hp, positions, bad_value, seed,
                                           bad_objective):
  params = fixed_tree()
  targets = materialize(jax.tree.map(lambda x: LeafSpec(x.shape, jnp.float32), params), seed)
  init, update = jitted(variant)
  hp = as_traced(hp)
  grads = quadratic_grads(params, targets)
  state0 = init(hp, params)
  u1, s1 = update(hp, grads, state0, params, targets, 1.0)
  u2, s2 = update(hp, inject(grads, positions, bad_value), s1, params, targets, 1.0)
  u3, s3 = update(hp, grads, s2, params, targets, 1.0)

  # A finite step: the params' structure, shapes and dtypes; a finite state.
  assert signature(u1) == signature(params)
  assert signature(s1) == signature(state0)
  assert all_finite(u1) and all_finite(s1)
  assert int(s1.skipped_steps) == 0

  # The bad step: zero updates, step sizes / meta state / trace kept, counted.
  assert signature(u2) == signature(params)
  assert all(float(jnp.abs(u).max(initial=0.0)) == 0.0 for u in jax.tree.leaves(u2))
  assert int(s2.skipped_steps) == 1
  assert_trees_equal(kept_fields(s2), kept_fields(s1))
  assert all_finite(s2) and signature(s2) == signature(state0)
  if isinstance(s2, metaoptax.MetaOptimizeState):
    assert int(s2.trace_resets) == int(s1.trace_resets)
    # the base state advances as for an all-zero gradient (Adam: moments decay)
    zeros = jax.tree.map(jnp.zeros_like, grads)
    assert_trees_equal(s2.base_state, update(hp, zeros, s1, params, targets, 1.0)[1].base_state)
  else:  # IDBD keeps its whole state: the next step is the one it would have taken
    assert_trees_equal(update(hp, grads, s1, params, targets, 1.0), (u3, s3._replace(
        skipped_steps=s1.skipped_steps)))

  # The next finite step proceeds normally.
  assert all_finite(u3) and all_finite(s3)
  assert int(s3.skipped_steps) == 1
  assert float(jnp.abs(u3["w"]).max()) > 0
  if isinstance(s3, metaoptax.MetaOptimizeState):
    assert int(s3.trace_resets) == int(s2.trace_resets)

  if variant.exact:
    # obj_fn with non-finite Hessian-vector products: the step is taken (the
    # update does not read them), beta and the meta state kept, the trace
    # restarted, counted.
    u3_bad, s3_bad = update(hp, grads, s2, params, targets, bad_objective)
    assert_trees_equal(u3_bad, u3)
    assert_trees_equal(s3_bad.base_state, s3.base_state)
    assert_trees_equal((s3_bad.meta_params, s3_bad.meta_state),
                       (s2.meta_params, s2.meta_state))
    assert_trees_equal(s3_bad.trace, exact_variants.initial_trace(s2.trace, s2.meta_params))
    assert int(s3_bad.trace_resets) == int(s2.trace_resets) + 1
    assert int(s3_bad.skipped_steps) == 1


@pytest.mark.parametrize("variant", [FIXED_TREE_VARIANTS[i] for i in (0, 8, 10)], ids=str)
@hostile_settings(max_examples=2)
@given(hp=valid_hyperparams(random_bounds=False), seed=st.integers(0, 2**16))
def test_nan_meta_step_size_at_run_time(variant, hp, seed):
  """A traced (unchecked) meta step size that is NaN, e.g. set by inject_hyperparams:
  the step sizes stay put, each step counted (trace_resets; IDBD: skipped_steps)."""
  params = fixed_tree()
  targets = materialize(jax.tree.map(lambda x: LeafSpec(x.shape, jnp.float32), params), seed)
  init, update = jitted(variant)  # compiled by test_nonfinite_gradients_skip_the_step
  hp = as_traced(dataclasses.replace(hp, meta_step_size=math.nan))
  grads = quadratic_grads(params, targets)
  state = state0 = init(hp, params)
  for step in range(1, 4):
    updates, state = update(hp, grads, state, params, targets, 1.0)
    assert all_finite(state) and signature(state) == signature(state0)
    if isinstance(state, metaoptax.IDBDState):  # the new step sizes are NaN: skipped
      assert int(state.skipped_steps) == step
      assert_trees_equal(state._replace(skipped_steps=0), state0)
    else:  # the step is taken with the step sizes kept, the trace restarted
      assert int(state.trace_resets) == step and int(state.skipped_steps) == 0
      assert_trees_equal(state.meta_params, state0.meta_params)
      assert all_finite(updates) and float(jnp.abs(updates["w"]).max()) > 0


def test_other_nan_hyperparameters_at_run_time_are_not_caught():
  """Documented limits: only the meta step size is covered by the guard."""
  init, update = jitted(FIXED_TREE_VARIANTS[0])
  params = fixed_tree()
  targets = jax.tree.map(lambda x: jnp.zeros(x.shape), params)
  grads = quadratic_grads(params, targets)
  for field in ("init_step_size", "weight_decay", "gamma"):
    hp = as_traced(dataclasses.replace(Hyperparams(1e-3, 1.0, 1e-3, 0.1), **{field: math.nan}))
    state = init(hp, params)
    updates, state = update(hp, grads, state, params, targets, 1.0)
    assert all_finite(updates) == (field == "gamma")  # NaN alpha or decay: NaN updates
    assert not all_finite(state.trace)
    if field == "gamma":  # the NaN trace is restarted, and counted, at the next step
      updates, state = update(hp, grads, state, params, targets, 1.0)
      assert int(state.trace_resets) == 1 and all_finite(updates)


# Cheap to compile: one jit per random tree.
RANDOM_TREE_VARIANTS = [Variant("preset", name, blocks=blocks)
                        for name, blocks in zip(PRESETS, ["scalar", "per_param", "per_leaf",
                                                          per_weight_labels] * 2)]
RANDOM_TREE_VARIANTS += [Variant("idbd"), Variant("hd", blocks="per_param")]


@hostile_settings(max_examples=10)
@given(spec=tree_specs, variant=st.sampled_from(RANDOM_TREE_VARIANTS), hp=valid_hyperparams(),
       seed=st.integers(0, 2**16))
def test_random_pytrees_and_hyperparameters(spec, variant, hp, seed):
  params = materialize(spec, seed)
  targets = materialize(jax.tree.map(lambda s: LeafSpec(s.shape, jnp.float32), spec), seed + 1)
  opt = variant.build(hp)  # concrete valid hyperparameters pass validation
  if variant.blocks == "per_leaf" and not jax.tree.leaves(params):
    with pytest.raises(ValueError, match="needs at least one parameter array"):
      opt.init(params)
    return

  init = jax.jit(opt.init)
  update = jax.jit(lambda g, s, p: opt.update(g, s, p, **variant.extra_args(p, targets)))
  state0 = init(params)
  u1, s1 = update(quadratic_grads(params, targets), state0, params)
  params = optax.apply_updates(params, u1)
  u2, s2 = update(quadratic_grads(params, targets), s1, params)
  for u in (u1, u2):
    assert signature(u) == signature(params)
    assert all_finite(u)
  for s in (s1, s2):
    assert signature(s) == signature(state0)
    assert all_finite(s)
    assert int(s.skipped_steps) == 0


# --------------------------------------------------------- invalid hyperparams
def out_of(low, high):
  """Floats outside ``[low, high]``, infinities and NaN."""
  return st.one_of(st.floats(max_value=low, exclude_max=True, allow_nan=False),
                   st.floats(min_value=high, exclude_min=True, allow_nan=False),
                   st.just(math.nan))


not_numbers = st.sampled_from(["0.1", None, True, [0.1, 0.2], np.ones(2)])
negative_or_nonfinite = st.one_of(st.floats(max_value=0.0, exclude_max=True),
                                  st.sampled_from([math.inf, -math.inf, math.nan]))

# (which argument, a strategy of invalid values, the message expected)
INVALID_PRESET_ARGUMENTS = [
    ("gamma", out_of(0.0, 1.0), r"gamma must be in \[0, 1\]"),
    ("init_step_size", st.floats(max_value=0.0, allow_nan=False).filter(math.isfinite),
     "init_step_size must be > 0"),
    ("init_step_size", st.sampled_from([math.nan, math.inf, -math.inf]),
     "init_step_size must be a finite number"),
    ("init_step_size", st.floats(1.0, 1e30, exclude_min=True), "outside step_size_bounds"),
    ("weight_decay", negative_or_nonfinite, "weight_decay must be >= 0 and finite"),
    ("meta_step_size", negative_or_nonfinite, "meta_step_size must be a finite number >= 0"),
    ("step_size_bounds", st.one_of(
        st.tuples(st.floats(max_value=0.0, exclude_max=True), st.just(1.0)),
        st.floats(1e-8, 1.0).map(lambda x: (x, x)),
        st.floats(1e-8, 1.0).map(lambda x: (x, x / 2)),
        st.sampled_from([(1e-8, math.nan), (math.nan, 1.0)])),
     r"step_size_bounds must satisfy 0 <= lower < upper"),
    ("step_size_bounds", st.sampled_from([3, (1e-8,), (0.0, 0.5, 1.0), "wide", None]),
     r"step_size_bounds must be \(lower, upper\)"),
]
for _name in ("gamma", "init_step_size", "weight_decay", "meta_step_size"):
  INVALID_PRESET_ARGUMENTS.append((_name, not_numbers, f"{_name} must be a number"))
# gamma=None is a setting (the trace read off the average), which needs average=
INVALID_PRESET_ARGUMENTS[-4] = ("gamma", not_numbers,
                                "gamma must be a number|gamma=None reads the trace off an average")


@st.composite
def invalid_preset_arguments(draw):
  name, values, message = draw(st.sampled_from(INVALID_PRESET_ARGUMENTS))
  kwargs = dataclasses.asdict(draw(valid_hyperparams()))
  kwargs["step_size_bounds"] = kwargs.pop("bounds")
  kwargs[name] = draw(values)
  if message == "outside step_size_bounds":
    kwargs["step_size_bounds"] = DEFAULT_BOUNDS  # the values drawn are above its upper end
  return draw(st.sampled_from(sorted(PRESETS))), kwargs, message


@hostile_settings(max_examples=60)
@given(case=invalid_preset_arguments(),
       blocks=st.sampled_from(["scalar", "per_leaf", "per_param"]),
       approximation=st.sampled_from(["hessian_free", "l_approx", "2x2"]))
def test_invalid_hyperparameters_are_named(case, blocks, approximation):
  preset, kwargs, message = case
  init_step_size = kwargs.pop("init_step_size")
  with pytest.raises(ValueError, match=message):
    PRESETS[preset](init_step_size, blocks=blocks, approximation=approximation, **kwargs)


INVALID_IDBD_AND_HD_ARGUMENTS = [
    ("idbd", "meta_step_size", negative_or_nonfinite, "meta_step_size must be a finite number"),
    ("idbd", "meta_step_size", not_numbers, "meta_step_size must be a number"),
    ("idbd", "init_step_size", st.floats(max_value=0.0, allow_nan=False).filter(math.isfinite),
     "init_step_size must be > 0"),
    ("idbd", "init_step_size", st.floats(1.0, 1e30, exclude_min=True), "outside step_size_bounds"),
    ("idbd", "step_size_bounds", st.floats(1e-8, 1.0).map(lambda x: (x, x / 2)),
     "0 <= lower < upper"),
    ("hd", "meta_step_size", negative_or_nonfinite, "meta_step_size must be a finite number"),
    ("hd", "init_step_size", st.floats(max_value=0.0, exclude_max=True, allow_nan=False)
     .filter(math.isfinite), "outside step_size_bounds"),
    ("hd", "init_step_size", st.sampled_from([math.nan, math.inf]), "finite number"),
]


@hostile_settings(max_examples=30)
@given(data=st.data())
def test_invalid_idbd_and_hd_arguments_are_named(data):
  which, name, values, message = data.draw(st.sampled_from(INVALID_IDBD_AND_HD_ARGUMENTS))
  kwargs = {"meta_step_size": 0.01, "init_step_size": 0.05}
  make = metaoptax.idbd if which == "idbd" else metaoptax.hypergradient_descent
  kwargs[name] = data.draw(values)
  with pytest.raises(ValueError, match=message):
    make(**kwargs)


def test_meta_step_size_schedules_and_zero_are_accepted():
  schedule = optax.linear_schedule(1e-3, 0.0, 100)
  for name in PRESETS:
    PRESETS[name](1e-6, meta_step_size=schedule)
    PRESETS[name](1e-6, meta_step_size=0.0)  # freezes the step sizes
  metaoptax.hypergradient_descent(meta_step_size=schedule, init_step_size=0.01)
  with pytest.raises(ValueError, match="meta_step_size must be a number"):
    metaoptax.idbd(meta_step_size=schedule, init_step_size=0.05)  # IDBD needs a number


# ---------------------------------------------------------------- block labels
MISMATCHES = {
    "structure": "do not match the params structure",
    "shape": "has shape",
    "float": "must be integers",
    "bool": "must be integers",
    "negative": "must be >= 0",
}


def mismatched_labels(params, kind, leaf, rng):
  """Valid per-weight labels with one leaf (or the structure) broken in one way."""
  labels = per_weight_labels(params)
  leaves, treedef = jax.tree.flatten(labels)
  lab = leaves[leaf]
  if kind == "structure":
    leaves[leaf] = (lab, lab)  # a leaf turned into a subtree
  elif kind == "shape":
    shape = lab.shape[:-1] + (lab.shape[-1] + 1,) if lab.ndim else (1,)
    leaves[leaf] = np.zeros(shape, np.int32)
  elif kind == "float":
    leaves[leaf] = lab.astype((np.float16, np.float32, np.float64)[rng.integers(3)])
  elif kind == "bool":
    leaves[leaf] = lab.astype(bool)
  elif kind == "negative":
    lab = lab.copy() if lab.size else np.array(0, np.int32)
    lab[tuple(rng.integers(0, max(d, 1)) for d in np.shape(lab))] = -rng.integers(1, 5)
    leaves[leaf] = lab
  return jax.tree.unflatten(treedef, leaves)


@hostile_settings(max_examples=25)
@given(spec=tree_specs.filter(lambda s: jax.tree.leaves(s)), kind=st.sampled_from(sorted(MISMATCHES)),
       data=st.data(), as_callable=st.booleans(),
       approximation=st.sampled_from(["hessian_free", "2x2"]))
def test_mismatched_labels_are_named(spec, kind, data, as_callable, approximation):
  params = materialize(spec, 0)
  leaf = data.draw(st.integers(0, len(jax.tree.leaves(params)) - 1))
  labels = mismatched_labels(params, kind, leaf, np.random.default_rng(leaf))
  blocks = (lambda p: labels) if as_callable else labels
  opt = metaoptax.presets.sgd_sgd(1e-3, blocks=blocks, approximation=approximation)
  with pytest.raises(ValueError, match=MISMATCHES[kind]):
    opt.init(params)


def test_labels_dropping_a_subtree_or_with_an_extra_level():
  params = fixed_tree()
  good = per_weight_labels(params)
  for labels in ({"w": good["w"], "b": good["b"]}, [good], {**good, "b": good["b"][:1]}):
    with pytest.raises(ValueError, match="do not match the params structure"):
      metaoptax.presets.sgd_sgd(1e-3, blocks=labels).init(params)


def test_labels_from_traced_values_are_refused():
  by_sign = lambda p: jax.tree.map(lambda x: (x > 0).astype(jnp.int32), p)
  opt = metaoptax.presets.sgd_sgd(1e-3, blocks=by_sign)
  with pytest.raises(ValueError, match="must be concrete integers"):
    jax.jit(opt.init)(fixed_tree())


# --------------------------------------------------------------------- obj_fn
@functools.lru_cache(maxsize=None)
def exact_sgd_sgd(approximation):
  opt = metaoptax.presets.sgd_sgd(1e-3, approximation=approximation)
  return opt, opt.init(fixed_tree())


@hostile_settings(max_examples=12)
@given(result=st.one_of(
    st.lists(st.integers(0, 3), min_size=1, max_size=3).map(
        lambda shape: jax.ShapeDtypeStruct(tuple(shape), jnp.float32)),
    st.sampled_from([jax.ShapeDtypeStruct((), jnp.int32), jax.ShapeDtypeStruct((), jnp.complex64),
                     jax.ShapeDtypeStruct((), jnp.bool_), jax.ShapeDtypeStruct((), jnp.float32)])),
       approximation=st.sampled_from(["l_approx", "2x2"]),
       with_aux=st.booleans())
def test_objective_must_return_a_float_scalar(result, approximation, with_aux):
  """Raised while tracing, under jit, before anything is compiled."""
  with_aux = with_aux or result.shape == () and result.dtype == jnp.float32  # (loss, aux)
  params = fixed_tree()
  opt, state = exact_sgd_sgd(approximation)

  def obj_fn(p):
    value = jnp.zeros(result.shape, result.dtype)
    return (value, {"aux": value}) if with_aux else value

  update = jax.jit(lambda g, s, p: opt.update(g, s, p, obj_fn=obj_fn))
  with pytest.raises(ValueError, match="obj_fn must return a floating-point scalar"):
    update(params, state, params)


# ----------------------------------------------------- empty and zero-size trees
EMPTY_TREE_CASES = {
    "hessian_free-scalar": (lambda: metaoptax.presets.adamw_adam(1e-3), {}),
    "hessian_free-per_param": (lambda: metaoptax.presets.adamw_lion(1e-3, blocks="per_param"),
                               {}),
    "hessian_free-labels": (lambda: metaoptax.presets.sgd_adam(1e-3, blocks=per_weight_labels),
                            {}),
    "2x2-per_param": (lambda: metaoptax.presets.sgd_sgd(
        1e-3, approximation="2x2", blocks="per_param"), {"obj_fn": True}),
    "l_approx-scalar": (lambda: metaoptax.presets.sgd_momentum_adam(
        1e-3, approximation="l_approx"), {"obj_fn": True}),
    "idbd": (lambda: metaoptax.idbd(meta_step_size=0.01, init_step_size=0.05),
             {"hessian_diagonal": True}),
    "hd": (lambda: metaoptax.hypergradient_descent(meta_step_size=0.01, init_step_size=0.05),
           {}),
}
ZERO_SIZE_TREES = {
    "empty-dict": {},
    "empty-nested": {"a": [], "b": ()},
    "zero-size": {"a": jnp.zeros((0, 3)), "b": [jnp.zeros((2, 0), jnp.bfloat16)],
                  "c": jnp.zeros((0,), jnp.float16)},
}


# Every case on the trees without weights (cheap); three on zero-size leaves
# (each a compile; the random trees cover the rest).
EMPTY_TREE_PAIRS = [(case, tree) for tree in ("empty-dict", "empty-nested")
                    for case in EMPTY_TREE_CASES] + [
    (case, "zero-size") for case in ("hessian_free-per_param", "2x2-per_param", "idbd")]


@pytest.mark.parametrize("case,tree", EMPTY_TREE_PAIRS, ids=lambda x: x)
def test_empty_and_zero_size_trees_are_a_no_op(case, tree):
  make, extra_spec = EMPTY_TREE_CASES[case]
  params = ZERO_SIZE_TREES[tree]
  opt = make()
  extra = {}
  if "obj_fn" in extra_spec:
    extra["obj_fn"] = lambda p: quadratic(p, jax.tree.map(jnp.zeros_like, p))
  if "hessian_diagonal" in extra_spec:
    extra["hessian_diagonal"] = jax.tree.map(jnp.ones_like, params)

  @jax.jit
  def step(params):
    state = opt.init(params)
    return (state,) + opt.update(jax.tree.map(jnp.ones_like, params), state, params, **extra)

  state, updates, new_state = step(params)
  assert signature(updates) == signature(params)
  assert signature(new_state) == signature(state)
  assert all_finite(new_state) and int(new_state.skipped_steps) == 0
  if isinstance(new_state, metaoptax.MetaOptimizeState):
    assert int(new_state.trace_resets) == 0
    # nothing to learn from: the step sizes stay where they started
    assert_trees_equal(metaoptax.step_sizes(new_state), metaoptax.step_sizes(state))


def test_per_leaf_blocks_need_an_array():
  with pytest.raises(ValueError, match="needs at least one parameter array"):
    metaoptax.presets.adamw_adam(1e-3, blocks="per_leaf").init({"a": [], "b": {}})


# ------------------------------------------------------------ learned optimizers
L2O_CONFIG = l2o.L2OConfig(heads=("learning_rate", "momentum"), hidden=4, layers=1)


@functools.lru_cache(maxsize=None)
def l2o_optimizer():
  net = L2O_CONFIG.init_network(jax.random.key(0))
  opt = L2O_CONFIG.transformation(net)
  return jax.jit(opt.init), jax.jit(opt.update)


@hostile_settings(max_examples=6)
@given(positions=positions_strategy, bad_value=st.sampled_from(BAD_VALUES),
       seed=st.integers(0, 2**16))
def test_learned_optimizer_skips_nonfinite_gradients(positions, bad_value, seed):
  params = fixed_tree()
  grads = materialize(jax.tree.map(lambda x: LeafSpec(x.shape, x.dtype), params), seed)
  init, update = l2o_optimizer()
  u1, s1 = update(grads, init(params), params)
  u2, s2 = update(inject(grads, positions, bad_value), s1, params)
  u3, s3 = update(grads, s2, params)
  u_ref, s_ref = update(grads, s1, params)  # as if the bad step never happened
  assert signature(u1) == signature(params) and all_finite((u1, s1))
  assert all(float(jnp.abs(u).max(initial=0.0)) == 0.0 for u in jax.tree.leaves(u2))
  assert int(s2.skipped_steps) == 1
  assert_trees_equal(s2._replace(skipped_steps=0), s1._replace(skipped_steps=0))
  # the LSTM carry, momentum and count were kept: the next step is the one it
  # would have taken without the bad gradient
  assert_trees_equal(u3, u_ref)
  assert_trees_equal(s3._replace(skipped_steps=0), s_ref._replace(skipped_steps=0))
  assert int(s3.skipped_steps) == 1 and float(jnp.abs(u3["w"]).max()) > 0
