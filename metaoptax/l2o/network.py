r"""A coordinate-wise LSTM that reads gradients and emits optimizer decisions.

Every coordinate of the optimizee is a row of one batch through the same LSTM
weights (shared weights, per-coordinate state), so the network applies to any
number of parameters. Heads, chosen by configuration:

* ``"update"``: the step itself, ``update_scale * Dense(h)`` (vanilla L2O);
* ``"learning_rate"``: a per-coordinate step size ``lr_scale * exp(Dense(h))``;
* ``"momentum"``: a per-coordinate momentum coefficient ``sigmoid(Dense(h))``;
* ``"teleport"``: a group parameter ``teleport_scale * tanh(Dense(pooled h))``
  (``group_dim`` numbers). ``teleport_pooling="mean"`` pools the hidden states
  over coordinates (any number of coordinates, but permutation-invariant: it
  cannot tell which coordinate has which gradient); ``"concat"`` reads them in
  place (a fixed ``num_coordinates``, e.g. the 2-D families, where swapping the
  coordinates must flip the rotation).

Gradient preprocessing (Andrychowicz et al. 2016, App. A), with ``p = 10``:
:math:`g \mapsto (\log|g| / p,\ \mathrm{sign}(g))` if :math:`|g| \ge e^{-p}`,
else :math:`(-1,\ e^{p} g)`.
"""

from __future__ import annotations

from typing import NamedTuple

import flax
import flax.linen as nn
from flax import traverse_util
import jax
import jax.numpy as jnp

__all__ = ("HEADS", "L2OConfig", "preprocess", "CoordinateLSTM")

#: The output heads a :class:`L2OConfig` can ask for (``L2OConfig.heads``).
HEADS = ("update", "learning_rate", "momentum", "teleport")


class L2OConfig(NamedTuple):
  """Static configuration of a learned optimizer.

  Attributes:
    heads: output heads, a subset of :data:`HEADS` with exactly one of
      ``"update"`` and ``"learning_rate"``; ``"momentum"`` needs ``"learning_rate"``.
    hidden: LSTM hidden size (per coordinate).
    layers: stacked LSTM layers.
    group_dim: size of the teleportation group parameter (the task family's
      ``group_dim``); needed by the ``"teleport"`` head.
    update_scale: scale of the ``"update"`` head's output (the step).
    lr_scale: scale of the ``"learning_rate"`` head: ``lr_scale * exp(Dense(h))``.
    momentum_init: momentum coefficient at initialization (the head's bias is
      its logit).
    teleport_scale: bound of the group parameter, ``teleport_scale * tanh(.)``.
    teleport_every: teleport every this many optimizee steps.
    teleport_pooling: ``"mean"`` (any number of coordinates) or ``"concat"``
      (a fixed ``num_coordinates``).
    num_coordinates: the optimizee's size; needed by ``teleport_pooling="concat"``.
  """

  heads: tuple[str, ...] = ("update",)
  hidden: int = 20
  layers: int = 2
  group_dim: int = 0
  update_scale: float = 0.1
  lr_scale: float = 0.05
  momentum_init: float = 0.5
  teleport_scale: float = 0.5
  teleport_every: int = 1
  teleport_pooling: str = "mean"
  num_coordinates: int = 0

  # The interface the meta-training engine calls (as for ``ScaledAdamConfig``).
  def init_network(self, rng_key: jax.Array, warm_start=None):
    r"""Initial network weights (independent of the optimizee's size).

    Args:
      rng_key: PRNG key of the weights.
      warm_start: the weights of a trained network whose every layer this
        configuration also has (same name and shape), e.g. an LSTM(lr, tele) for an
        LSTM(lr, tele, momentum) of the same sizes: those layers start from it and
        only the heads it lacks are freshly initialized. With a small
        ``momentum_init`` the momentum variant then starts as (nearly) the optimizer
        without momentum, :math:`v_t = \mu v_{t-1} - \alpha_t g_t` with
        :math:`\mu \approx 0`.
    """
    validate(self)
    n = self.num_coordinates if self.teleport_pooling == "concat" else 1
    params = CoordinateLSTM(self).init(rng_key, initial_carry(self, n), jnp.zeros((n, 2)))
    return params if warm_start is None else _warm_started(params, warm_start)

  def init_state(self, params):
    """Zero LSTM state and momentum, float32 or wider (float64 for float64 params)."""
    from metaoptax.l2o import optimizer  # pylint: disable=g-import-not-at-top
    return optimizer.init_state(self, params)

  def step(self, network_params, state, params, grads, act=None):
    """One learned step: ``(new_params, new_state, head_outputs)``.

    ``act(theta, params) -> params`` is the task's group action (teleport head). The
    network reads the gradient, and the step is computed, in float32 or wider (the
    state's precision); ``new_params`` have the dtypes of ``params``.
    """
    from metaoptax.l2o import optimizer  # pylint: disable=g-import-not-at-top
    return optimizer.step(network_params, self, state, params, grads, act)

  def transformation(self, network_params):
    """The trained network as an optax transformation on any params pytree.

    ``update(grads, state, params, act=None)``: ``act(theta, params)`` enables the
    teleport head (a group action of the problem); without it the head is unused.
    A non-finite gradient or step is skipped (zero update, state kept, counted).

    Examples:
      >>> import jax, jax.numpy as jnp, optax
      >>> from metaoptax import l2o
      >>> config = l2o.L2OConfig(heads=("learning_rate", "momentum"))
      >>> opt = config.transformation(config.init_network(jax.random.key(0)))
      >>> params = {"w": jnp.ones(3)}
      >>> state = opt.init(params)
      >>> updates, state = opt.update({"w": jnp.ones(3)}, state, params)
      >>> updates["w"].shape
      (3,)
    """
    from metaoptax.l2o import optimizer  # pylint: disable=g-import-not-at-top
    return optimizer.transformation(network_params, self)


def validate(config: L2OConfig) -> None:
  unknown = set(config.heads) - set(HEADS)
  if unknown:
    raise ValueError(f"Unknown heads {sorted(unknown)}; expected a subset of {HEADS}.")
  if ("update" in config.heads) == ("learning_rate" in config.heads):
    raise ValueError("Choose exactly one of the heads 'update' (the step itself) and "
                     "'learning_rate' (a step size for the gradient).")
  if "momentum" in config.heads and "learning_rate" not in config.heads:
    raise ValueError("The 'momentum' head needs the 'learning_rate' head.")
  if "teleport" in config.heads and config.group_dim < 1:
    raise ValueError("The 'teleport' head needs group_dim >= 1 (the task family's group_dim).")
  if config.teleport_pooling not in ("mean", "concat"):
    raise ValueError(f"teleport_pooling must be 'mean' or 'concat', got {config.teleport_pooling!r}.")
  if config.teleport_pooling == "concat" and config.num_coordinates < 1:
    raise ValueError("teleport_pooling='concat' needs num_coordinates (the optimizee's size).")
  if config.hidden < 1 or config.layers < 1 or config.teleport_every < 1:
    raise ValueError("hidden, layers and teleport_every must be >= 1.")


def preprocess(grad: jax.Array, p: float = 10.0) -> jax.Array:
  r"""Per-coordinate features ``(n,) -> (n, 2)`` of the gradient.

  The paper's preprocessing (Andrychowicz et al. 2016):
  :math:`g \mapsto (\log|g|/p,\ \mathrm{sign}\,g)` where :math:`|g| \ge e^{-p}`, else
  :math:`(-1,\ e^p g)`: both features stay of order one across the gradient's scales.

  Args:
    grad: the flat gradient ``(n,)``.
    p: :math:`p`, the threshold's exponent.

  Returns:
    ``(n, 2)``, the LSTM's input.
  """
  magnitude = jnp.abs(grad)
  large = magnitude >= jnp.exp(-p)
  first = jnp.where(large, jnp.log(jnp.maximum(magnitude, jnp.exp(-p))) / p, -1.0)
  second = jnp.where(large, jnp.sign(grad), jnp.exp(p) * grad)
  return jnp.stack([first, second], axis=-1)


class CoordinateLSTM(nn.Module):
  """``(carry, features (n, F)) -> (carry, heads)``; carry is one (c, h) per layer.

  The Flax module of :class:`L2OConfig`: ``config.layers`` stacked
  ``nn.OptimizedLSTMCell`` layers of ``config.hidden`` units, shared by the ``n``
  coordinates (each coordinate a row), and one dense read-out per head of
  ``config.heads``: ``"update"`` (``update_scale`` times its output),
  ``"learning_rate"`` (``lr_scale`` times its exponential), ``"momentum"`` (a sigmoid,
  its bias at the logit of ``momentum_init``) and ``"teleport"`` (``group_dim``
  numbers, ``teleport_scale`` times a tanh, from the hidden states pooled over the
  coordinates). The read-outs start near zero.

  Attributes:
    config: the :class:`L2OConfig`.
  """

  config: L2OConfig

  @nn.compact
  def __call__(self, carry, features):
    cfg = self.config
    x = features
    new_carry = []
    for layer in range(cfg.layers):
      c, x = nn.OptimizedLSTMCell(cfg.hidden, name=f"lstm_{layer}")(carry[layer], x)
      new_carry.append(c)
    small = nn.initializers.normal(1e-3)
    out = {}
    if "update" in cfg.heads:
      out["update"] = cfg.update_scale * nn.Dense(1, kernel_init=small, name="update")(x)[:, 0]
    if "learning_rate" in cfg.heads:
      out["learning_rate"] = cfg.lr_scale * jnp.exp(
          nn.Dense(1, kernel_init=small, name="learning_rate")(x)[:, 0])
    if "momentum" in cfg.heads:
      bias = nn.initializers.constant(jnp.log(cfg.momentum_init / (1 - cfg.momentum_init)))
      out["momentum"] = jax.nn.sigmoid(
          nn.Dense(1, kernel_init=small, bias_init=bias, name="momentum")(x)[:, 0])
    if "teleport" in cfg.heads:
      pooled = x.reshape(-1) if cfg.teleport_pooling == "concat" else jnp.mean(x, axis=0)
      out["teleport"] = cfg.teleport_scale * jnp.tanh(
          nn.Dense(cfg.group_dim, kernel_init=small, name="teleport")(pooled))
    return tuple(new_carry), out


def initial_carry(config: L2OConfig, num_coordinates: int, dtype=jnp.float32):
  zeros = jnp.zeros((num_coordinates, config.hidden), dtype)
  return tuple((zeros, zeros) for _ in range(config.layers))


def _warm_started(fresh, trained):
  """``fresh`` with every weight that ``trained`` has at the same path."""
  old = traverse_util.flatten_dict(flax.core.unfreeze(trained))
  new = traverse_util.flatten_dict(flax.core.unfreeze(fresh))
  unused = sorted("/".join(path) for path in old if path not in new)
  if unused:
    raise ValueError(f"warm_start has weights this configuration lacks: {unused}.")
  for path, value in old.items():
    if jnp.shape(value) != new[path].shape:
      raise ValueError(f"warm_start's {'/'.join(path)} has shape {jnp.shape(value)}, this "
                       f"configuration's {new[path].shape} (hidden, layers and "
                       "num_coordinates must match).")
    new[path] = jnp.asarray(value, new[path].dtype)
  return type(fresh)(traverse_util.unflatten_dict(new)) if isinstance(
      fresh, flax.core.FrozenDict) else traverse_util.unflatten_dict(new)
