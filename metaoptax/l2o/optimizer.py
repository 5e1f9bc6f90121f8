r"""The learned optimizer's step, as a pure function and as an optax transformation.

With heads from :mod:`metaoptax.l2o.network` and gradient :math:`\nabla_t`
(Algorithm 3 of the L2O-teleportation paper):

* ``update``: :math:`x_t = x_{t-1} + m_\phi(\nabla_t)` (vanilla L2O);
* ``learning_rate``: :math:`x_t = x_{t-1} - \alpha_t \odot \nabla_t`;
* ``learning_rate`` + ``momentum``: :math:`v_t = \beta_t v_{t-1} - \alpha_t \nabla_t`,
  :math:`x_t = x_{t-1} + v_t`;
* ``teleport`` (any of the above): at teleport steps :math:`x_t \leftarrow
  g_{\theta_t} \cdot x_t` with :math:`\theta_t` from the teleport head and the
  task's group action.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax
from jax.flatten_util import ravel_pytree

from metaoptax._src import sharding, tree_utils
from metaoptax.l2o.network import (CoordinateLSTM, L2OConfig, initial_carry, preprocess,
                                   validate)

__all__ = ("L2OState",)


class L2OState(NamedTuple):
  """Per-optimizee state of a learned optimizer (:meth:`L2OConfig.transformation`).

  Attributes:
    carry: the LSTM's ``(c, h)`` per layer, each ``(num_coordinates, hidden)``.
    momentum: :math:`v`, flat ``(num_coordinates,)`` (zeros without a ``"momentum"``
      head).
    count: int32 scalar, the steps taken.
    skipped_steps: int32 scalar, the steps skipped (non-finite gradient or step).
  """

  carry: tuple
  momentum: jax.Array
  count: jax.Array
  skipped_steps: jax.Array


def init_state(config: L2OConfig, params: Any) -> L2OState:
  """Zero LSTM state and momentum, float32 or wider (float64 for float64 params)."""
  flat = ravel_pytree(sharding.replicated(params))[0]
  dtype = tree_utils.wide_dtype(flat.dtype)
  return L2OState(initial_carry(config, flat.size, dtype), jnp.zeros_like(flat, dtype),
                  jnp.zeros([], jnp.int32), jnp.zeros([], jnp.int32))


def step(network_params, config: L2OConfig, state: L2OState, params: Any, grads: Any,
         act: Callable | None = None):
  """:meth:`L2OConfig.step`: ``(new_params, new_state, head_outputs)``.

  ``act(theta, params) -> params`` is the task's group action (teleport head).
  The network reads the gradient, and the step is computed, in float32 or wider
  (the state's precision, :func:`init_state`); ``new_params`` have the dtypes of
  ``params``.
  """
  # The LSTM state is flat over all coordinates; on explicit meshes the leaves
  # are replicated first (ravel concatenates them) and the result resharded.
  flat_x, unravel = ravel_pytree(sharding.replicated(params))
  flat_g = ravel_pytree(sharding.replicated(grads))[0].astype(
      tree_utils.wide_dtype(flat_x.dtype))
  carry, out = CoordinateLSTM(config).apply(network_params, state.carry, preprocess(flat_g))
  momentum = state.momentum
  if "update" in config.heads:
    delta = out["update"]
  elif "momentum" in config.heads:
    momentum = out["momentum"] * momentum - out["learning_rate"] * flat_g
    delta = momentum
  else:
    delta = -out["learning_rate"] * flat_g
  new_params = sharding.tree_reshard_like(unravel(flat_x + delta), params)
  if "teleport" in config.heads and act is not None:
    teleport_now = state.count % config.teleport_every == 0
    new_params = optax.tree_utils.tree_where(teleport_now, act(out["teleport"], new_params), new_params)
  new_params = optax.tree_utils.tree_cast_like(new_params, params)
  return new_params, L2OState(carry, momentum, state.count + 1, state.skipped_steps), out


def transformation(network_params, config: L2OConfig) -> optax.GradientTransformationExtraArgs:
  """:meth:`L2OConfig.transformation`: the trained network as an optax transformation."""
  validate(config)

  def init_fn(params):
    tree_utils.check_float_params(params, "L2OConfig.transformation")
    return init_state(config, params)

  def update_fn(updates, state, params=None, act=None, **extra_args):
    del extra_args
    if params is None:
      raise ValueError("L2OConfig.transformation needs params: update(grads, state, params).")
    new_params, new_state, _ = step(network_params, config, state, params, updates, act)
    deltas = jax.tree.map(lambda n, p: (n - p).astype(p.dtype), new_params, params)
    ok = tree_utils.all_finite(updates) & tree_utils.all_finite(deltas)
    new_state = optax.tree_utils.tree_where(ok, new_state, state)
    deltas = tree_utils.zeros_unless(ok, deltas)
    return deltas, new_state._replace(
        skipped_steps=state.skipped_steps + (~ok).astype(jnp.int32))

  return optax.GradientTransformationExtraArgs(init_fn, update_fn)

