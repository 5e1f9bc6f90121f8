"""optax.inject_hyperparams on MetaOptimize's numeric hyperparameters.

Numeric arguments (``init_step_size``, ``gamma``, ``weight_decay``, a preset's
``meta_step_size``, ...) become arrays in ``state.hyperparams``; transformations,
strings, tuples and bools stay static. A callable ``blocks`` must be listed in
``static_args`` (inject_hyperparams takes callables for schedules).
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import metaoptax
from tests.conftest import HYPER, check_against_fd, unroll

pytestmark = pytest.mark.usefixtures("float64")

PARAMS = {"w": jnp.array([1.0, -2.0, 0.5]), "b": jnp.array([0.3])}
GRADS = {"w": jnp.array([0.1, -0.2, 0.3]), "b": jnp.array([-0.4])}


def injected_metaoptimize(**kwargs):
  return optax.inject_hyperparams(metaoptax.metaoptimize)(
      optax.scale_by_adam(), optax.adam(1e-2), init_step_size=1e-3, **kwargs)


def two_steps_with(opt, change):
  """One shared step, then the same second step from states with and without change."""
  state = opt.init(PARAMS)
  update = jax.jit(opt.update)
  _, state = update(GRADS, state, PARAMS)
  changed = state._replace(hyperparams={**state.hyperparams, **change})
  return update(GRADS, state, PARAMS), update(GRADS, changed, PARAMS), state


def test_numeric_hyperparameters_are_injected():
  opt = injected_metaoptimize(gamma=0.9, weight_decay=0.1, blocks="per_leaf")
  state = opt.init(PARAMS)
  assert set(state.hyperparams) == {"init_step_size", "gamma", "weight_decay", "sensitivity_radius"}
  assert metaoptax.step_sizes(state).shape == (2,)


def test_changing_weight_decay_mid_run():
  """delta = -alpha (d + kappa w): kappa 0.1 -> 0.5 changes it by -alpha * 0.4 * w."""
  (u_old, _), (u_new, _), state = two_steps_with(
      injected_metaoptimize(weight_decay=0.1), {"weight_decay": jnp.asarray(0.5)})
  alpha = metaoptax.step_sizes(state)
  for k in PARAMS:
    np.testing.assert_allclose(u_new[k] - u_old[k], -alpha * 0.4 * PARAMS[k], rtol=1e-5)


def test_changing_gamma_mid_run():
  """gamma = 0 forgets the trace: the new Hessian-free trace is the update itself."""
  (_, s_old), (u_new, s_new), _ = two_steps_with(
      injected_metaoptimize(gamma=1.0), {"gamma": jnp.asarray(0.0)})
  trace_new = metaoptax.sensitivity_trace(s_new)
  for k in PARAMS:
    np.testing.assert_allclose(trace_new[k], u_new[k], rtol=1e-6)
    assert not np.allclose(metaoptax.sensitivity_trace(s_old)[k], u_new[k])


def test_changing_a_presets_meta_step_size_mid_run():
  """meta_step_size 0 freezes the step sizes; the original one moves them."""
  opt = optax.inject_hyperparams(metaoptax.presets.sgd_momentum_adam)(
      1e-2, meta_step_size=0.1, blocks="per_leaf")
  (_, s_old), (_, s_new), state = two_steps_with(opt, {"meta_step_size": jnp.asarray(0.0)})
  np.testing.assert_array_equal(metaoptax.step_sizes(s_new), metaoptax.step_sizes(state))
  assert np.all(metaoptax.step_sizes(s_old) != metaoptax.step_sizes(state))


def test_callable_blocks_is_a_static_arg():
  labels = lambda p: {"w": np.zeros(3, int), "b": np.ones(1, int)}  # concrete
  opt = optax.inject_hyperparams(metaoptax.metaoptimize, static_args=("blocks",))(
      optax.scale_by_adam(), optax.adam(1e-2), init_step_size=1e-3, blocks=labels)
  state = opt.init(PARAMS)
  updates, state = jax.jit(opt.update)(GRADS, state, PARAMS)
  assert metaoptax.step_sizes(state).shape == (2,)


def test_differentiating_through_injected_hyperparameters():
  """d loss(w_T) / d (log meta step size, log alpha_0, gamma, kappa), with the
  initial step size given to the factory and the rest set in state.hyperparams."""
  def f(h):
    opt = optax.inject_hyperparams(metaoptax.presets.adamw_adam)(
        jnp.exp(h[1]), blocks="per_leaf")

    class Injected:  # the same transformation, hyperparameters set in the state
      @staticmethod
      def init(params):
        state = opt.init(params)
        return state._replace(hyperparams={
            **state.hyperparams, "meta_step_size": jnp.exp(h[0]), "gamma": h[2],
            "weight_decay": h[3]})

      update = staticmethod(opt.update)

    return unroll(Injected)[0]

  check_against_fd(f, HYPER)
