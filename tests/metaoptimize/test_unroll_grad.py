"""Meta-gradients through unrolled runs vs central finite differences (float64).

``jax.grad`` of a loss after a ``jax.lax.scan`` of optimizer steps, with respect
to MetaOptimize's hyperparameters (meta step size eta inside ``meta``, initial
step size alpha_0, gamma, weight decay) and to a learned optimizer's network,
against central differences (h = 1e-5 on log eta, log alpha_0, gamma, kappa;
along random directions for networks). Tolerance: relative 1e-6 per
component (measured agreement ~1e-8 and better).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import metaoptax
from metaoptax import l2o
from metaoptax.l2o import training as l2o_training
from tests.conftest import H, HYPER, RTOL, check_against_fd, metaoptimize_from, unroll

# tens of seconds in all: the file runs first (tests/conftest.py), not last on one worker
pytestmark = [pytest.mark.usefixtures("float64"), pytest.mark.slow]


@pytest.mark.parametrize("approximation,blocks", [
    ("hessian_free", "scalar"), ("hessian_free", "per_param"),
    # the Hessian-vector-product variants take 7-10 s each: the system tier runs them
    pytest.param("l_approx", "per_leaf", marks=pytest.mark.system),
    pytest.param("2x2", "scalar", marks=pytest.mark.system),
])
def test_metaoptimize_hyperparameter_gradient(approximation, blocks):
  """d loss(w_T) / d (log eta, log alpha_0, gamma, kappa), exact variants included.

  The exact variants' Hessian-vector products are a custom_jvp rule applied
  only inside the step's own ``jax.linearize``; an outer ``jax.grad`` sees the
  user's gradient as the primal value, so nothing is counted twice. For 2x2 with
  scalar blocks (the code path of every labelled layout, per_leaf included),
  forward mode (``jax.jacfwd``) through the unroll equals that reverse-mode
  gradient (rtol 1e-12). (2x2 with weight-wise blocks: its trace against brute-force
  autodiff in ``test_trace_oracle.py``.)
  """
  f = lambda h: unroll(metaoptimize_from(h, approximation=approximation, blocks=blocks))[0]
  grad = check_against_fd(f, HYPER)
  if (approximation, blocks) == ("2x2", "scalar"):
    np.testing.assert_allclose(jax.jit(jax.jacfwd(f))(HYPER), grad, rtol=1e-12)


@pytest.mark.parametrize("name", ["lion_lion", "rmsprop_adam", "sgd_momentum_adam"])
def test_presets(name):
  """Presets: d / d (log meta step size, log alpha_0, gamma, kappa)."""
  def f(h):
    opt = metaoptax.presets.PRESETS[name](
        jnp.exp(h[1]), meta_step_size=jnp.exp(h[0]), gamma=h[2], weight_decay=h[3],
        blocks="per_leaf")
    return unroll(opt)[0]
  check_against_fd(f, HYPER)


def test_hypergradient_descent():
  def f(h):
    return unroll(metaoptax.hypergradient_descent(
        meta_step_size=jnp.exp(h[0]), init_step_size=jnp.exp(h[1])))[0]
  check_against_fd(f, np.log([0.01, 0.05]))


def test_idbd():
  def f(h):
    return unroll(metaoptax.idbd(meta_step_size=jnp.exp(h[0]),
                                 init_step_size=jnp.exp(h[1])))[0]
  check_against_fd(f, np.log([0.05, 0.05]))


@pytest.mark.parametrize("heads", [
    pytest.param(("update",), marks=pytest.mark.system),  # ~12 s; the other heads' run is alike
    ("learning_rate", "momentum", "teleport")])
def test_l2o_truncated_meta_gradient(heads):
  """The meta-gradient of l2o.train's truncated unroll (lax.scan, vmap over
  tasks) w.r.t. the network, along 3 random directions, vs central differences.

  ``second_order=True`` (the exact gradient of the truncated meta-loss); the
  default ``second_order=False`` drops the optimizee's Hessian on purpose.
  """
  config = l2o.L2OConfig(heads=heads, hidden=4, layers=1, group_dim=1)
  family = l2o.tasks.ellipse()
  net = jax.tree.map(lambda x: x.astype(jnp.float64),
                     config.init_network(jax.random.key(0)))
  tasks, params, states = l2o.sample_problems(jax.random.key(1), family, config, 3)
  states = jax.tree.map(
      lambda x: x.astype(jnp.float64) if jnp.issubdtype(x.dtype, jnp.floating) else x, states)

  def meta_loss(net):
    losses, _ = jax.vmap(lambda t, p, s: l2o_training._unroll(
        config, family, net, t, p, s, 5, True, False))(tasks, params, states)
    return jnp.mean(losses)

  # One compiled value_and_grad gives the gradient and the differences' values.
  flat_net, unravel = jax.flatten_util.ravel_pytree(net)
  value_and_grad = jax.jit(jax.value_and_grad(lambda x: meta_loss(unravel(x))))
  flat_grad = np.asarray(value_and_grad(flat_net)[1])
  assert np.all(np.isfinite(flat_grad)) and np.any(flat_grad != 0)
  directions = jax.random.normal(jax.random.key(2), (3, flat_net.size), jnp.float64)
  values = np.array([value_and_grad(x)[0] for x in
                     jnp.concatenate([flat_net + H * directions, flat_net - H * directions])])
  fd = (values[:3] - values[3:]) / (2 * H)
  np.testing.assert_allclose(directions @ flat_grad, fd, rtol=RTOL)
