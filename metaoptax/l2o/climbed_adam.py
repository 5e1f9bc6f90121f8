r"""A learned schedule on a found scale: MetaOptimize finds the step size of each run, a
per-tensor LSTM learns bounded multipliers of it.

Method. Tensor :math:`i` takes the step

.. math::

  u_t^{(i)} = -\alpha_t\, e^{s_t^{(i)}}\, d_t^{(i)}, \qquad
  \alpha_t = e^{\beta_t},

where :math:`d_t` is Adam's direction and :math:`s_t^{(i)} = S_\pm\tanh(\cdot)` the bounded
log-multiplier of :meth:`~metaoptax.l2o.ScaledAdamConfig.transformation`'s LSTM
(:func:`~metaoptax.l2o.scale_by_learned_adam`), and the scale :math:`\alpha_t` is not a
constant but is found while the run goes, by MetaOptimize (Sharifnassab et al. 2024)
with its Hessian-free trace on the whole step :math:`e^{s} d` (the direction that
:func:`metaoptax.metaoptimize` wraps):

.. math::

  h_{t+1} = \gamma h_t - \alpha_t e^{s_t} d_t, \qquad
  \beta_{t+1} = \beta_t + \mathrm{meta}(h_t^\top g_t),

with the fast start of :func:`metaoptax.adamw`: :math:`\beta` climbs by ``climb_rate``
per step from :math:`\log` ``init_step_size`` until the meta-gradient turns, ends
``1/climb_backoff`` above that point, and Adam (``meta_step_size``) follows
(:func:`metaoptax.climb`). A network whose best rate is 1e-2 (a convnet) and one whose
best is 3e-3 (an MLP) then each get theirs; a multiplier constant in time is absorbed
by the climb, so what the LSTM contributes is the schedule *relative* to the found
scale: e.g. a decay once the run reaches its noise floor, which the greedy
meta-gradient does not make.

At initialization (zero read-out, :math:`s = 0`) the optimizer is exactly
``metaoptimize(optax.scale_by_adam(), climb(adam(meta_step_size)), ...)`` with the
drop-in's weight decay and average of the weights, i.e.
``metaoptax.adamw(climb_memory=None, meta_step_size=1e-3)`` (Adam's moments kept as they
are when the climb ends), the average included (evaluate
:func:`metaoptax.averaged_params` of the state); ``ClimbedAdamConfig(weight_decay=0.0,
average=None)`` drops both; with any weights
every step is that optimizer's direction times a factor in :math:`[e^{-S_-}, e^{S_+}]`,
on top of a scale bounded by MetaOptimize's ``step_size_bounds``.

Meta-training (:func:`~metaoptax.l2o.train`, through :meth:`ClimbedAdamConfig.step`)
back-propagates through the whole step, the climb and MetaOptimize's trace included: the
meta-gradient sees that a multiplier raised during the climb is undone by a smaller
:math:`\alpha`. The optimizee's gradient is an input, as for every learned optimizer of
the library (``second_order=False``).

The idea of a hypergradient-tuned scale under a learned shape follows the split of
direction and step size of optax and of VeLO (Metz et al. 2022,
arXiv:2211.09760), whose network also outputs a multiplier of a per-task scale.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax

from metaoptax._src import tree_utils
from metaoptax._src.averaging import average_iterates
from metaoptax._src.state import MetaOptimizeState
from metaoptax._src.transform import metaoptimize
from metaoptax.l2o.learned_adam import ScaledAdamConfig, ScaledAdamState, scale_by_learned_adam
from metaoptax.step_size import presets
from metaoptax.step_size.climbing import climb

__all__ = ("ClimbedAdamConfig", "ClimbedAdamState")


class ClimbedAdamConfig(NamedTuple):
  """Static configuration of :meth:`ClimbedAdamConfig.transformation` (the defaults: those
  of :func:`metaoptax.adamw`'s step size, its weight decay and its average, the recipe
  for networks not seen in meta-training).

  Attributes:
    scaling: the learned multipliers (:class:`~metaoptax.l2o.ScaledAdamConfig`; its
      ``learning_rate`` is only the nominal rate of its feature 4).
    init_step_size: :math:`\\alpha_0`, where the climb starts.
    meta_step_size: Adam's step on :math:`\\log\\alpha` after the climb.
    climb_rate: rise of :math:`\\log\\alpha` per step during the climb.
    climb_backoff: :math:`\\alpha` is divided by it when the climb ends (0.5: doubled).
    gamma: discount of MetaOptimize's sensitivity trace (1: the whole run).
    weight_decay: decoupled weight decay, scaled by the step size (as in
      :func:`metaoptax.adamw`; not multiplied by the learned factor).
    average: horizon of the average of the weights (:func:`metaoptax.average_iterates`),
      or ``None`` for none. The average does not change the iterates (nor meta-training,
      whose loss is the iterates'); it is what to evaluate.
  """

  scaling: ScaledAdamConfig = ScaledAdamConfig()
  init_step_size: float = 1e-6
  meta_step_size: float = 1e-3
  climb_rate: float = 0.1
  climb_backoff: float = 0.5
  gamma: float = 1.0
  weight_decay: float = 1e-4
  average: float | None = 0.1

  # The interface the meta-training engine calls (as for ``ScaledAdamConfig``).
  def init_network(self, rng_key: jax.Array):
    """Initial network weights: random LSTM, zero read-out (exactly MetaOptimize's Adam)."""
    return self.scaling.init_network(rng_key)

  def init_state(self, params: Any) -> "ClimbedAdamState":
    """The optimizer's state (:func:`metaoptax.metaoptimize`'s around the multipliers'; its
    structure does not depend on the network's weights, so zero weights build it) and a
    zero step count."""
    shapes = jax.eval_shape(self.scaling.init_network, jax.random.key(0))
    zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)
    return ClimbedAdamState(self.transformation(zeros).init(params), jnp.zeros([], jnp.int32))

  def step(self, network_params, state: "ClimbedAdamState", params: Any, grads: Any,
           act: Callable | None = None):
    """``(new_params, new_state, {"log_scale": s, "step_size": alpha})``; ``act`` is
    ignored (no teleport head)."""
    del act
    updates, inner = self.transformation(network_params).update(grads, state.optimizer, params)
    new_params = jax.tree.map(lambda p, u: (p + u).astype(p.dtype), params, updates)
    (scaled,) = tree_utils.instances_of(inner, ScaledAdamState)
    return new_params, ClimbedAdamState(inner, state.count + 1), {
        "log_scale": scaled.log_scale, "step_size": jnp.exp(_beta(inner))}

  def transformation(self, network_params) -> optax.GradientTransformationExtraArgs:
    r"""Adam with a step size found by MetaOptimize's climb and learned per-tensor
    multipliers of it: :math:`u^{(i)} = -\alpha_t e^{s^{(i)}} \hat m^{(i)} / (\sqrt{\hat
    v^{(i)}} + \epsilon)` (module docstring).

    With freshly initialized weights (``config.init_network``) it is
    ``metaoptax.adamw(weight_decay=config.weight_decay, average=config.average,
    climb_memory=None, meta_step_size=config.meta_step_size)``; with the default
    configuration, the average of the weights included: evaluate
    :func:`metaoptax.averaged_params` of the state. A non-finite gradient is skipped,
    counted by MetaOptimize's guard (``skip_nonfinite``).

    Args:
      network_params: the network's weights (``config.init_network(key)`` or
        ``l2o.train(key, family, config, ...).params``).

    Returns:
      An ``optax.GradientTransformationExtraArgs``; ``update(grads, state, params)`` needs
      ``params``. :func:`metaoptax.step_sizes` of the state reads :math:`\alpha_t`.

    Examples:
      >>> import jax, jax.numpy as jnp, metaoptax
      >>> from metaoptax import l2o
      >>> config = l2o.ClimbedAdamConfig()
      >>> opt = config.transformation(config.init_network(jax.random.key(0)))
      >>> params = {"w": jnp.ones(3)}
      >>> updates, state = opt.update({"w": jnp.ones(3)}, opt.init(params), params)
      >>> print(f"{float(metaoptax.step_sizes(state)):.2g}")  # climbing from 1e-6
      1.1e-06

    References:
      Sharifnassab, Salehkaleybar and Sutton 2024, https://arxiv.org/abs/2402.02342;
      Kingma and Ba 2015, https://arxiv.org/abs/1412.6980; Metz et al. 2022 (VeLO),
      https://arxiv.org/abs/2211.09760
    """
    return _climbed_scaled_adam(network_params, self)


class ClimbedAdamState(NamedTuple):
  """What :meth:`ClimbedAdamConfig.step` carries: the optimizer's state and the steps taken.

  Attributes:
    optimizer: the transformation's state (MetaOptimize's, around a
      :class:`ScaledAdamState`).
    count: int32 scalar, the steps taken (the minibatch index of the task families).
  """

  optimizer: Any
  count: jax.Array


def _beta(state) -> jax.Array:
  """:math:`\\log\\alpha` (the scalar block) of the state."""
  (meta,) = tree_utils.instances_of(state, MetaOptimizeState)
  return jnp.reshape(jax.tree.leaves(meta.meta_params.step_size)[0], ())


def _climbed_scaled_adam(network_params, config: ClimbedAdamConfig
                         ) -> optax.GradientTransformationExtraArgs:
  """:meth:`ClimbedAdamConfig.transformation`."""
  meta = climb(presets.meta_adam(config.meta_step_size), rate=config.climb_rate,
               backoff=config.climb_backoff)
  opt = metaoptimize(scale_by_learned_adam(network_params, config.scaling), meta,
                     init_step_size=config.init_step_size, gamma=config.gamma,
                     weight_decay=config.weight_decay)
  return opt if config.average is None else optax.chain(opt, average_iterates(config.average))
