"""Bad input gets a clear error naming the problem (the non-finite guard: test_guard.py)."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import metaoptax
from metaoptax._src import exact
from tests.conftest import TWO_LEAVES as PARAMS, adam_metaoptimize as make, two_leaves_loss as loss


@pytest.mark.parametrize("kwargs,message", [
    ({"gamma": 1.5}, "gamma must be in"),
    ({"gamma": -0.1}, "gamma must be in"),
    ({"init_step_size": 0.0}, "init_step_size must be > 0"),
    ({"init_step_size": -1e-3}, "init_step_size must be > 0"),
    ({"init_step_size": float("nan")}, "finite number"),
    ({"init_step_size": 10.0}, "outside step_size_bounds"),
    ({"approximation": "exact"}, "Unknown approximation"),
    ({"blocks": "layerwise"}, "Unknown blocks"),
    ({"blocks": None}, "not a layout"),
    ({"parametrization": "sqrt"}, "Unknown parametrization"),
    ({"weight_decay": -0.1}, "weight_decay must be >= 0"),
    ({"step_size_bounds": (1.0, 0.1)}, "0 <= lower < upper"),
    ({"step_size_bounds": 3}, "must be \\(lower, upper\\)"),
    ({"sensitivity_radius": 0.0}, "sensitivity_radius must be in \\(0, inf\\]"),
    ({"sensitivity_radius": -0.5}, "sensitivity_radius must be in \\(0, inf\\]"),
    ({"sensitivity_radius": float("nan")}, "sensitivity_radius must be in \\(0, inf\\]"),
    ({"sensitivity_radius": jnp.asarray(-1.0)}, "sensitivity_radius must be in \\(0, inf\\]"),
    ({"sensitivity_radius": "0.9"}, "sensitivity_radius must be a number"),
    ({"sensitivity_radius": None}, "sensitivity_radius must be a number"),
])
def test_construction_errors(kwargs, message):
  with pytest.raises(ValueError, match=message):
    make(**kwargs)


def test_sensitivity_radius_reaches_the_presets_and_drop_ins():
  for radius in (0.5, float("inf")):
    metaoptax.presets.adamw_adam(approximation="2x2", sensitivity_radius=radius)
  with pytest.raises(ValueError, match="sensitivity_radius must be in"):
    metaoptax.adamw(approximation="l_approx", sensitivity_radius=0.0)
  # Traced (optax.inject_hyperparams, a meta-gradient): used as given, unchecked.
  jax.jit(lambda r: make(approximation="2x2", sensitivity_radius=r).init(PARAMS))(0.9)


def test_base_must_be_a_transformation():
  with pytest.raises(TypeError, match="base must be an optax.GradientTransformation"):
    metaoptax.metaoptimize(optax.adam, optax.adam(1e-3), init_step_size=1e-3)


@pytest.mark.parametrize("labels,message", [
    ({"a": np.zeros((2, 3), int)}, "do not match the params structure"),
    ({"a": np.zeros((3, 2), int), "b": np.zeros(4, int)}, "has shape"),
    ({"a": np.zeros((2, 3)), "b": np.zeros(4, int)}, "must be integers"),
    ({"a": -np.ones((2, 3), int), "b": np.zeros(4, int)}, "must be >= 0"),
])
def test_labels_not_matching_params(labels, message):
  with pytest.raises(ValueError, match=message):
    make(blocks=labels).init(PARAMS)


def test_labels_and_callable_blocks():
  labels = {"a": np.array([[0, 0, 1], [1, 2, 2]]), "b": 3}  # per weight / per array
  state = make(blocks=labels).init(PARAMS)
  assert state.meta_params.step_size.shape == (4,)
  by_rank = lambda p: jax.tree.map(lambda x: x.ndim - 1, p)
  state = make(blocks=by_rank).init(PARAMS)
  assert state.meta_params.step_size.shape == (2,)


def test_update_needs_params():
  opt = make()
  with pytest.raises(ValueError, match="needs params"):
    opt.update(PARAMS, opt.init(PARAMS))


def test_exact_needs_scalar_objective():
  opt = make(approximation="2x2")
  state = opt.init(PARAMS)
  grads = jax.grad(loss)(PARAMS)
  with pytest.raises(ValueError, match="need the objective"):
    opt.update(grads, state, PARAMS)
  with pytest.raises(ValueError, match="floating-point scalar"):
    opt.update(grads, state, PARAMS, obj_fn=lambda p: p["b"])


def test_exact_refuses_too_many_blocks():
  params = {"w": jnp.zeros(exact.MAX_EXACT_BLOCKS + 1)}
  with pytest.raises(ValueError, match="approximation='hessian_free'"):
    make(approximation="l_approx", blocks="per_param").init(params)
  make(approximation="hessian_free", blocks="per_param").init(params)  # fine


def test_idbd_errors():
  with pytest.raises(ValueError, match="init_step_size must be > 0"):
    metaoptax.idbd(meta_step_size=0.01, init_step_size=0.0)
  opt = metaoptax.idbd(meta_step_size=0.01, init_step_size=0.05)
  w = jnp.zeros(3)
  state = opt.init(w)
  with pytest.raises(ValueError, match="hessian_diagonal"):
    opt.update(jnp.ones(3), state, w)


def test_step_sizes_and_trace_inside_a_chain():
  opt = optax.chain(optax.clip_by_global_norm(1.0), make(blocks="per_leaf"))
  state = opt.init(PARAMS)
  assert metaoptax.step_sizes(state).shape == (2,)
  assert jax.tree.structure(metaoptax.sensitivity_trace(state)) == jax.tree.structure(PARAMS)
  with pytest.raises(ValueError, match="exactly one MetaOptimizeState"):
    metaoptax.step_sizes(optax.adam(1e-3).init(PARAMS))


@pytest.mark.parametrize("make_opt, name", [
    (lambda: metaoptax.adamw(), "metaoptimize"),
    (lambda: metaoptax.presets.sgd_adam(1e-3), "metaoptimize"),
    (lambda: metaoptax.idbd(meta_step_size=1e-2, init_step_size=1e-2), "idbd"),
])
def test_integer_and_bool_params_are_refused_at_init(make_opt, name):
  params = {"w": jnp.ones(3), "steps": jnp.arange(3), "flag": jnp.array(True)}
  with pytest.raises(ValueError, match=name) as info:
    make_opt().init(params)
  message = str(info.value)
  assert "['steps'] (int32)" in message and "['flag'] (bool)" in message
  assert "['w']" not in message


def test_masked_integer_leaves_are_accepted():
  params = {"w": jnp.ones(3), "steps": jnp.arange(3)}
  opt = optax.masked(metaoptax.adamw(), {"w": True, "steps": False})
  state = opt.init(params)
  grads = {"w": jnp.ones(3), "steps": jnp.zeros(3, jnp.int32)}
  updates, _ = opt.update(grads, state, params)
  assert updates["w"].dtype == jnp.float32


def test_callable_blocks_under_inject_hyperparams_names_static_args():
  """inject_hyperparams calls callables as schedules of the step count."""
  per_leaf = lambda p: jax.tree.map(lambda _: 0, p)
  opt = optax.inject_hyperparams(metaoptax.metaoptimize)(
      optax.scale_by_adam(), optax.adam(1e-3), init_step_size=1e-3, blocks=per_leaf)
  with pytest.raises(ValueError, match=r"static_args=\('blocks',\)"):
    opt.init(PARAMS)
  fixed = optax.inject_hyperparams(metaoptax.metaoptimize, static_args=("blocks",))(
      optax.scale_by_adam(), optax.adam(1e-3), init_step_size=1e-3, blocks=per_leaf)
  state = fixed.init(PARAMS)
  updates, _ = fixed.update(jax.tree.map(jnp.ones_like, PARAMS), state, PARAMS)
  assert jax.tree.structure(updates) == jax.tree.structure(PARAMS)


# Trees or shapes that do not match: the error names grads, params or state and the leaf.
OTHER_SHAPE = {"a": jnp.ones((3, 2)), "b": jnp.ones(4)}
FEWER = {"a": jnp.ones((2, 3))}


@pytest.mark.parametrize("make_opt", [
    lambda: metaoptax.adamw(),
    lambda: metaoptax.presets.lion_lion(),
    lambda: make(approximation="l_approx"),
])
@pytest.mark.parametrize("under_jit", [False, True])
@pytest.mark.parametrize("case", ["grads_tree", "grads_shape", "params_tree", "params_shape",
                                  "state"])
def test_mismatched_grads_params_or_state_are_named(make_opt, under_jit, case):
  opt = make_opt()
  state = opt.init(PARAMS)
  grads, params, message = {
      "grads_tree": (FEWER, PARAMS, r"grads and params have different tree structures "
                                    r"\(only in params: \['b'\]\)"),
      "grads_shape": (OTHER_SHAPE, PARAMS, r"\['a'\]: grads \(3, 2\), params \(2, 3\)"),
      "params_tree": (PARAMS, FEWER, r"only in grads: \['b'\]"),
      "params_shape": (PARAMS, OTHER_SHAPE, r"\['a'\]: grads \(2, 3\), params \(3, 2\)"),
      "state": (OTHER_SHAPE, OTHER_SHAPE, r"state and init\(params\) have leaves of different "
                                          r"shapes \(.*\['a'\]: state \(2, 3\), init\(params\) "
                                          r"\(3, 2\).*call init with the params"),
  }[case]
  update = lambda g, s, p: opt.update(g, s, p, obj_fn=lambda q: loss(q))
  with pytest.raises(ValueError, match=message):
    (jax.jit(update) if under_jit else update)(grads, state, params)


def test_idbd_names_mismatched_inputs():
  opt = metaoptax.idbd(meta_step_size=0.01, init_step_size=0.05)
  state = opt.init(PARAMS)
  with pytest.raises(ValueError, match=r"idbd: state and init\(params\)"):
    opt.update(OTHER_SHAPE, state, OTHER_SHAPE, hessian_diagonal=OTHER_SHAPE)
  with pytest.raises(ValueError, match=r"hessian_diagonal and grads .*\['a'\]"):
    opt.update(PARAMS, state, PARAMS, hessian_diagonal=OTHER_SHAPE)


def test_the_checks_cost_nothing_in_the_compiled_step():
  """Structure and shapes are static: the jitted step is the same with the checks off."""
  from metaoptax._src import validation
  opt = metaoptax.adamw()
  state, grads = opt.init(PARAMS), jax.grad(loss)(PARAMS)
  step = lambda g, s, p: opt.update(g, s, p)
  checked = jax.jit(step).lower(grads, state, PARAMS).as_text()
  original = validation.check_update_inputs
  validation.check_update_inputs = lambda *args: None
  try:
    unchecked = jax.jit(step).lower(grads, state, PARAMS).as_text()
  finally:
    validation.check_update_inputs = original
  assert checked == unchecked


# The optax habit learning_rate=, and unknown keywords, name the function called.
@pytest.mark.parametrize("factory", [metaoptax.adamw, metaoptax.lion, metaoptax.sgd,
                                     metaoptax.presets.adamw_adam])
def test_learning_rate_points_to_init_step_size(factory):
  name = factory.__name__
  with pytest.raises(TypeError, match=rf"{name}\(\) takes no learning_rate: the step size is "
                                      rf"learned .* init_step_size= \(e\.g\. {name}\("):
    factory(learning_rate=1e-3)
  with pytest.raises(TypeError, match=rf"{name}\(\) got an unexpected keyword argument "
                                      r"'nonsense'; it accepts: init_step_size, "):
    factory(nonsense=1)


@pytest.mark.parametrize("factory, accepted", [
    (metaoptax.adamw, "b1, b2, eps, eps_root, weight_decay"),
    (metaoptax.lion, "b1, b2, weight_decay"),
    (metaoptax.sgd, "momentum, weight_decay"),
])
def test_learn_is_checked_at_construction_against_the_optimizer(factory, accepted):
  with pytest.raises(ValueError, match=rf"metaoptax\.{factory.__name__} cannot learn "
                                       rf"'nonsense'; it can learn {accepted} \(the numeric "
                                       rf"arguments of optax\.{factory.__name__}\)"):
    factory(learn=("nonsense",))


# A meta optimizer that reads beta (weight decay) is refused.
@pytest.mark.parametrize("meta", [
    optax.lion(1e-3),  # weight_decay=1e-3 by default
    optax.adamw(1e-3),
    optax.chain(optax.add_decayed_weights(0.1), optax.sgd(1e-2)),
    metaoptax.climb(optax.lion(1e-3)),
    optax.inject_hyperparams(optax.lion)(learning_rate=1e-3),
], ids=["lion", "adamw", "decay+sgd", "climb(lion)", "injected lion"])
def test_a_meta_optimizer_with_weight_decay_is_refused(meta):
  with pytest.raises(ValueError, match=r"meta must not read .* weight_decay=0\.0"):
    metaoptax.metaoptimize(optax.scale_by_lion(), meta, init_step_size=1e-3)


@pytest.mark.parametrize("meta", [
    optax.lion(1e-3, weight_decay=0.0), optax.adam(1e-3), optax.sgd(1e-2, momentum=0.9),
    optax.inject_hyperparams(optax.lion, static_args=("weight_decay",))(
        learning_rate=1e-3, weight_decay=0.0),
    optax.inject_hyperparams(optax.lion)(learning_rate=1e-3, weight_decay=0.0),  # an array
    metaoptax.climb(optax.adam(1e-3)),
], ids=["lion0", "adam", "momentum", "injected lion0", "injected lion0 array", "climb(adam)"])
def test_a_meta_optimizer_that_does_not_read_beta_is_accepted(meta):
  metaoptax.metaoptimize(optax.scale_by_lion(), meta, init_step_size=1e-3).init(PARAMS)


def test_a_meta_optimizer_that_cannot_be_probed_is_checked_at_init():
  """A mask tree fits only the real beta: the probe defers to init."""
  decayed = optax.masked(optax.lion(1e-3), metaoptax.MetaParams(True, {"b1": True}))
  opt = metaoptax.metaoptimize(optax.inject_hyperparams(optax.scale_by_lion)(b1=0.9),
                               decayed, init_step_size=1e-3, learn=("b1",))
  with pytest.raises(ValueError, match="meta must not read"):
    opt.init(PARAMS)
