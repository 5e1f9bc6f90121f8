"""The learned multipliers on MetaOptimize's found step size (``l2o.ClimbedAdamConfig``):
MetaOptimize's Adam at initialization, bounded multiples of it, the engine's step, and the
meta-gradient through the climb and the trace against finite differences."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import metaoptax
from metaoptax import l2o
from metaoptax._src import tree_utils
from tests.conftest import check_against_fd
from tests.l2o.test_scaled_adam import _grads, _params

#: The eighth attempt's multipliers (issue 30), with a small LSTM.
SCALING = l2o.ScaledAdamConfig(hidden=8, learning_rate=3e-3, max_log_scale=1.5,
                               min_log_scale=-6.9, slow_b1=0.99)
#: Without the drop-in's weight decay and average: each step is a multiple of Adam's direction.
CONFIG = l2o.ClimbedAdamConfig(SCALING, weight_decay=0.0, average=None)


def test_defaults_are_the_drop_ins_recipe():
  """The default configuration is the transfer recipe: ``metaoptax.adamw()``'s weight decay
  and average of the weights (evaluate ``averaged_params``)."""
  import inspect
  defaults = inspect.signature(metaoptax.adamw).parameters
  config = l2o.ClimbedAdamConfig()
  assert (config.weight_decay, config.average) == (1e-4, 0.1)
  assert config.weight_decay == defaults["weight_decay"].default
  assert config.average == defaults["average"].default
  opt = config.transformation(config.init_network(jax.random.key(0)))
  params = {"w": jnp.ones(3)}
  assert metaoptax.averaged_params(opt.init(params))["w"].shape == (3,)


@pytest.mark.parametrize("weight_decay, average", [(0.0, None), (1e-4, 0.1)])
def test_is_metaoptimize_adam_at_initialization(weight_decay, average):
  """Zero read-out: over 40 steps of noisy gradients of mixed scales with a consistent
  mean (the climb running), every update equals ``metaoptax.adamw(weight_decay, average,
  climb_memory=None, meta_step_size=1e-3)``'s to float32 round-off (1e-6 of the largest
  entry of each tensor) and so does the step size; with the drop-in's decay and average
  (its defaults) the averaged weights agree too (rtol 1e-6)."""
  config = CONFIG._replace(weight_decay=weight_decay, average=average)
  opt = config.transformation(config.init_network(jax.random.key(0)))
  reference = metaoptax.adamw(config.init_step_size, weight_decay=weight_decay,
                              average=average, climb_memory=None,
                              meta_step_size=config.meta_step_size)
  params = _params(jax.random.key(1))
  state, ref_state = opt.init(params), reference.init(params)
  update, ref_update = jax.jit(opt.update), jax.jit(reference.update)
  mean = _grads(jax.random.key(99), params)
  for t in range(40):
    grads = jax.tree.map(lambda m, n: m + 0.3 * n, mean, _grads(jax.random.key(100 + t), params))
    u, state = update(grads, state, params)
    expected, ref_state = ref_update(grads, ref_state, params)
    for a, b in zip(jax.tree.leaves(u), jax.tree.leaves(expected)):
      np.testing.assert_allclose(a, b, rtol=0, atol=1e-6 * float(jnp.max(jnp.abs(b))))
    params = optax.apply_updates(params, u)
  np.testing.assert_allclose(metaoptax.step_sizes(state), metaoptax.step_sizes(ref_state),
                             rtol=1e-6)
  assert float(metaoptax.step_sizes(state)) > 1e-5  # the climb did run
  if average is not None:
    for a, b in zip(jax.tree.leaves(metaoptax.averaged_params(state)),
                    jax.tree.leaves(metaoptax.averaged_params(ref_state))):
      np.testing.assert_allclose(a, b, rtol=1e-6)


def test_steps_are_bounded_multiples_of_the_found_step_size():
  """With large random read-out weights, each tensor's update is -alpha_t (the step size
  before the step) times Adam's direction times one factor in [e^-S-, e^S+]."""
  net = CONFIG.init_network(jax.random.key(0))
  net = jax.tree.map(lambda w: 50.0 * jax.random.normal(jax.random.key(3), w.shape), net)
  opt = CONFIG.transformation(net)
  adam = optax.scale_by_adam(SCALING.b1, SCALING.b2, SCALING.eps)
  params = _params(jax.random.key(1))
  state, adam_state = opt.init(params), adam.init(params)
  update, adam_update = jax.jit(opt.update), jax.jit(adam.update)
  ratios = []
  for t in range(10):
    grads = _grads(jax.random.key(200 + t), params)
    alpha = float(metaoptax.step_sizes(state))
    u, state = update(grads, state, params)
    direction, adam_state = adam_update(grads, adam_state, params)
    for a, d in zip(jax.tree.leaves(u), jax.tree.leaves(direction)):
      ratio = -a / (alpha * d)
      np.testing.assert_allclose(ratio, ratio.reshape(-1)[0], rtol=1e-4)  # one per tensor
      ratios.append(float(ratio.reshape(-1)[0]))
    params = optax.apply_updates(params, u)
  low, high = SCALING.log_scale_bounds
  assert all(np.exp(low) * (1 - 1e-5) <= r <= np.exp(high) * (1 + 1e-5) for r in ratios)
  assert np.ptp(np.log(ratios)) > 0.5  # the factors do vary


def test_engine_step_is_the_transformation():
  """``ClimbedAdamConfig.step`` (what meta-training unrolls) takes the transformation's
  step bit for bit, counts the steps and reports the step size and the multipliers."""
  net = jax.tree.map(lambda w: 0.3 * jnp.ones_like(w), CONFIG.init_network(jax.random.key(0)))
  opt = CONFIG.transformation(net)
  params = _params(jax.random.key(1))
  state, opt_state = CONFIG.init_state(params), opt.init(params)
  step, update = jax.jit(CONFIG.step), jax.jit(opt.update)
  p = params
  for t in range(3):
    grads = _grads(jax.random.key(300 + t), params)
    params, state, info = step(net, state, params, grads)
    u, opt_state = update(grads, opt_state, p)
    p = optax.apply_updates(p, u)
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(p)):
      np.testing.assert_array_equal(a, b)
  assert int(state.count) == 3
  assert float(info["step_size"]) == pytest.approx(float(metaoptax.step_sizes(opt_state)))
  assert info["log_scale"].shape == (3,) and np.all(info["log_scale"] > 0)


@pytest.mark.system  # compiles a 12-step unroll twice (~10 s); CI's second command
@pytest.mark.usefixtures("float64")
def test_meta_gradient_through_the_climb_matches_finite_differences():
  """d(loss after 12 steps)/d(read-out weights), by back-propagation through the LSTM, the
  climb and MetaOptimize's trace (float64), against central differences (rel 1e-6): the
  multipliers enter the trace and, through it, the step size. The params reach the
  features through ``stop_gradient`` (a first-order choice that finite differences do not
  share); a nominal rate of 1e-12 keeps feature 4 at its clip, so that both see the same
  function."""
  config = CONFIG._replace(init_step_size=1e-2, climb_rate=0.3,
                           scaling=SCALING._replace(learning_rate=1e-12))
  net = config.init_network(jax.random.key(0))
  net = jax.tree.map(lambda w: w.astype(jnp.float64), net)
  target = jnp.array([1.0, -2.0, 0.5])
  params = {"w": jnp.array([[0.5, -0.3, 0.2], [0.1, 0.4, -0.6]]), "b": jnp.array([0.1, -0.2, 0.3])}

  def loss(p, t):
    r = jnp.tanh(jnp.array([1.0, -0.5]) @ p["w"] + p["b"]) - target * 0.5 - 0.01 * t
    return jnp.sum(r**2) + 0.1 * jnp.sum(p["w"] ** 4)

  def final_loss(readout):
    network = jax.tree.map(lambda w: w, net)
    network["params"]["log_scale"]["kernel"] = readout[:-1, None]
    network["params"]["log_scale"]["bias"] = readout[-1:]

    def body(carry, t):
      p, state = carry
      p, state, _ = config.step(network, state, p, jax.grad(loss)(p, t))
      return (p, state), None

    (p, state), _ = jax.lax.scan(body, (params, config.init_state(params)),
                                 jnp.arange(12, dtype=jnp.float64))
    (climbing,) = tree_utils.instances_of(state, metaoptax.ClimbState)
    return loss(p, 12.0), climbing.climb_steps

  readout = 0.05 * jax.random.normal(jax.random.key(5), (SCALING.hidden + 1,), jnp.float64)
  grad, climb_steps = check_against_fd(final_loss, readout, has_aux=True)
  assert np.max(np.abs(grad)) > 1e-4
  assert 0 < int(climb_steps) < 12  # the climb ended: Adam on log(alpha) ran too
