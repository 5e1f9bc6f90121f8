r"""A learned optimizer that is Adam at initialization: bounded, learned log-multipliers of
Adam's direction, one per tensor.

Method. With the gradient :math:`g_t` and Adam's moments (Kingma and Ba 2015)
:math:`m_t = \beta_1 m_{t-1} + (1-\beta_1) g_t`,
:math:`v_t = \beta_2 v_{t-1} + (1-\beta_2) g_t^2`, the base direction is Adam's
:math:`d_t = \hat m_t / (\sqrt{\hat v_t} + \epsilon)` (bias-corrected moments).
Tensor :math:`i` (a leaf of the params pytree) takes the step

.. math::

  u_t^{(i)} = -\eta\, e^{s_t^{(i)}}\, d_t^{(i)}, \qquad
  s_t^{(i)} = S_\pm \tanh\!\big(w^\top h_t^{(i)} + b\big),

where :math:`h_t^{(i)}` is the hidden state of an LSTM run once per step over the
tensors (one row per tensor, shared weights, a ``(c, h)`` state per tensor), and
:math:`S_+` = ``max_log_scale`` (for a positive argument of the tanh) and
:math:`S_-` = ``-min_log_scale`` (for a negative one; by default :math:`S_+`)
bound the multiplier to :math:`[e^{-S_-}, e^{S_+}]`:
whatever the network's weights and inputs, every step is Adam's direction
scaled by a bounded factor, so the optimizer cannot step further than Adam at
:math:`\eta e^{S_+}`; a wide range downward (``min_log_scale=-6.9``: down to
:math:`10^{-3}\eta`) lets it anneal. The read-out :math:`(w, b)` starts at zero, so that at
initialization :math:`s = 0` and the optimizer **is** ``optax.adam(eta)``;
meta-training moves it away from Adam only where that lowers the meta-loss.

The LSTM reads per-tensor features that do not depend on the scale of the loss,
of the parameters or of the tensor's size, so that one network applies to
architectures it has not seen:

1. :math:`\cos(g_t, d_{t-1})` and 2. :math:`\cos(d_t, d_{t-1})`: whether the
   step keeps its direction (too small a step) or reverses it (too large); the
   first is the sign of the hypergradient of the step size (Baydin et al. 2018);
3. :math:`\log \mathrm{rms}(d_t) / 5`: Adam's signal-to-noise ratio (near 0 for
   consistent gradients, negative for noisy ones);
4. :math:`\log(\eta e^{s_{t-1}} \mathrm{rms}(d_t) / \mathrm{rms}(x))/10`, clipped
   to :math:`[-2, 0.5]`: the relative size of the step (LARS, You et al. 2017);
5. :math:`s_{t-1} / S`: the previous log-multiplier;
6. :math:`\log(\text{size}) / 10` and 7. whether the tensor is a vector (bias, scale);
8. :math:`\tanh(t/10)` and 9. :math:`\tanh(t/100)`: the step count, saturated
   within a few hundred steps so that long runs stay inside the range seen in
   meta-training;
10.-12. the means of features 1-3 over the tensors (the whole network's state).

With ``slow_b1`` (:math:`\beta_s`, e.g. 0.99) the state keeps a slow first moment
:math:`\bar m_t = \beta_s \bar m_{t-1} + (1-\beta_s) g_t` and the LSTM reads three
more features, for annealing (a constant step stalls at a noise floor that only
a smaller step lowers):

13. :math:`\log(\mathrm{rms}(\hat{\bar m}_t) / \sqrt{\mathrm{mean}(\hat v_t)})/3`, the
    gradient-noise ratio :math:`|\mathbb E g| / \sqrt{\mathbb E g^2}` of the tensor over
    about :math:`1/(1-\beta_s)` steps (1 for a consistent gradient, about
    :math:`\sqrt{(1-\beta_s)/(1+\beta_s)}` for pure noise; the noise-to-signal
    statistic of Mandt et al. 2017 and of the critical batch size, McCandlish et
    al. 2018);
14. its mean over the tensors;
15. :math:`\tanh(t/1000)`, the step count at the scale of a long run.

With ``budget`` (the run's length :math:`T`, :mod:`metaoptax.l2o.budget`) the LSTM reads
five more features, the fraction of the run done and the budget, and its read-out reads
them too (a linear schedule term beside the LSTM's output):

16.-19. :math:`x, x^2, x^4, x^8` with :math:`x = \min(t / T, 1)`;
20. :math:`\log(T) / 10`.

With ``cosine_decay`` as well, the base step size follows a cosine over the budget,
:math:`\eta_t = \eta\,\tfrac12\big(1 + \cos(\pi \min(t-1, T)/T)\big)`
(``optax.cosine_decay_schedule(eta, T)`` at the count of steps taken), so that at
initialization the optimizer is Adam with the cosine schedule of its budget, and the
learned multipliers scale that schedule (a tenth attempt at issue 30: the network need
not learn the annealing, only where to depart from it).

The LSTM is per tensor, not per coordinate: its cost is independent of the
tensors' sizes, and a step costs Adam's elementwise work plus a few reductions
per tensor.

Learned optimizers with a learned step size (LSTM(lr), Andrychowicz et al. 2016;
Chen et al. 2022) scale the raw gradient; scaling a preconditioned direction by
a normalized, bounded factor follows the lesson of Celo (Moudgil et al. 2025,
arXiv:2501.12670) and VeLO (Metz et al. 2022, arXiv:2211.09760): keep a
well-understood base direction and normalize what the network outputs.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from metaoptax._src import tree_utils

__all__ = ("ScaledAdamConfig", "ScaledAdamState", "TensorLSTM", "scaled_adam_features",
           "scale_by_learned_adam")

#: Features per tensor (see the module docstring); 3 more with ``slow_b1``, 5 more with
#: ``budget``.
NUM_FEATURES = 12
#: The budget features (the last columns with ``budget``), which the read-out reads too.
NUM_BUDGET_FEATURES = 5


def num_features(config: "ScaledAdamConfig") -> int:
  return (NUM_FEATURES + (3 if config.slow_b1 is not None else 0)
          + (NUM_BUDGET_FEATURES if config.budget is not None else 0))


class ScaledAdamConfig(NamedTuple):
  """Static configuration of the learned Adam-scaling optimizer.

  Attributes:
    learning_rate: :math:`\\eta`, Adam's step size at initialization.
    max_log_scale: :math:`S_+`, the upper bound of the log-multiplier.
    hidden: LSTM hidden size (per tensor).
    layers: stacked LSTM layers.
    b1, b2, eps: Adam's moment decays and denominator constant (optax's defaults).
    min_log_scale: :math:`-S_-`, the lower bound of the log-multiplier (negative);
      ``None``: ``-max_log_scale``.
    slow_b1: :math:`\\beta_s`, the decay of a slow first moment whose gradient-noise
      ratio (and the step count at a longer scale) the LSTM reads (features 13-15 of
      the module docstring); ``None``: 12 features, no slow moment.
    budget: :math:`T`, the steps the run will take: the LSTM and its read-out read the
      fraction of the run done and :math:`\\log T` (features 16-20 of the module
      docstring; :mod:`metaoptax.l2o.budget`). ``init_state`` writes it into the state
      (``ScaledAdamState.budget``), where a run may set another. ``None``: no budget.
    cosine_decay: the base step size decays as a cosine over the budget (module
      docstring; needs ``budget``): at initialization the optimizer is
      ``optax.adam(optax.cosine_decay_schedule(learning_rate, budget))``.
  """

  learning_rate: float = 1e-3
  max_log_scale: float = 3.0
  hidden: int = 32
  layers: int = 1
  b1: float = 0.9
  b2: float = 0.999
  eps: float = 1e-8
  min_log_scale: float | None = None
  slow_b1: float | None = None
  budget: float | None = None
  cosine_decay: bool = False

  @property
  def log_scale_bounds(self) -> tuple[float, float]:
    """:math:`(-S_-, S_+)`."""
    low = -self.max_log_scale if self.min_log_scale is None else self.min_log_scale
    return low, self.max_log_scale

  # The interface the meta-training engine calls (as for ``L2OConfig``).
  def init_network(self, rng_key: jax.Array):
    """Initial network weights: random LSTM, zero read-out (exactly Adam)."""
    _check(self)
    carry = _initial_carry(self, 1, jnp.float32)
    return TensorLSTM(self).init(rng_key, carry, jnp.zeros((1, num_features(self))))

  def init_state(self, params: Any) -> "ScaledAdamState":
    """Zero moments, LSTM state and multipliers (float32 or wider)."""
    dtype = tree_utils.wide_dtype(jnp.result_type(*jax.tree.leaves(params)))
    zeros = jax.tree.map(lambda p: jnp.zeros(p.shape, dtype), params)
    n = len(jax.tree.leaves(params))
    return ScaledAdamState(zeros, zeros, _initial_carry(self, n, dtype), jnp.zeros(n, dtype),
                           jnp.zeros([], jnp.int32), jnp.zeros([], jnp.int32),
                           None if self.slow_b1 is None else zeros,
                           None if self.budget is None else jnp.asarray(self.budget, dtype))

  def step(self, network_params, state: "ScaledAdamState", params: Any, grads: Any,
           act: Callable | None = None):
    """``(new_params, new_state, {"log_scale": s})``; ``act`` is ignored (no teleport head)."""
    del act
    updates, state, log_scale = _update(network_params, self, state, params, grads)
    new_params = jax.tree.map(lambda p, u: (p + u).astype(p.dtype), params, updates)
    return new_params, state, {"log_scale": log_scale}

  def transformation(self, network_params) -> optax.GradientTransformationExtraArgs:
    r"""The learned Adam-scaling optimizer as an optax transformation on any params pytree.

    Steps :math:`u^{(i)} = -\eta\, e^{s^{(i)}} \hat m^{(i)} / (\sqrt{\hat v^{(i)}} + \epsilon)`
    with :math:`s^{(i)} = S_\pm \tanh(\cdot)` from a per-tensor LSTM (module docstring).
    With freshly initialized weights (``config.init_network``) it is
    ``optax.adam(config.learning_rate, config.b1, config.b2, config.eps)``.
    A non-finite gradient or step is skipped (zero update, state kept, counted in
    ``skipped_steps``), as in :meth:`L2OConfig.transformation`.

    Args:
      network_params: the network's weights (``config.init_network(key)`` or
        ``l2o.train(key, family, config, ...).params``).

    Returns:
      An ``optax.GradientTransformationExtraArgs``; ``update(grads, state, params)``
      needs ``params``; other extra arguments are ignored.

    Examples:
      >>> import jax, jax.numpy as jnp, optax
      >>> from metaoptax import l2o
      >>> config = l2o.ScaledAdamConfig()
      >>> opt = config.transformation(config.init_network(jax.random.key(0)))
      >>> params = {"w": jnp.ones(3)}
      >>> updates, _ = opt.update({"w": jnp.ones(3)}, opt.init(params), params)
      >>> [round(float(u), 6) for u in updates["w"]]  # Adam's first step: -lr * sign(g)
      [-0.001, -0.001, -0.001]

    References:
      Kingma and Ba 2015, https://arxiv.org/abs/1412.6980; Andrychowicz et al. 2016,
      https://arxiv.org/abs/1606.04474; Moudgil et al. 2025 (Celo),
      https://arxiv.org/abs/2501.12670
    """
    return _scaled_adam(network_params, self)


class ScaledAdamState(NamedTuple):
  """State of :meth:`ScaledAdamConfig.transformation`: Adam's moments, the LSTM state and
  the multipliers.

  Attributes:
    mu: Adam's first moment, params-shaped (float32 or wider).
    nu: Adam's second moment, params-shaped.
    carry: the LSTM's ``(c, h)`` per layer, each ``(num_tensors, hidden)``.
    log_scale: ``(num_tensors,)``, the last log-multipliers :math:`s`.
    count: int32 scalar, the steps taken.
    skipped_steps: int32 scalar, the steps skipped (non-finite gradient or step).
    mu_slow: the slow first moment, params-shaped (``slow_b1``); ``None`` without it.
    budget: the run's length :math:`T` in steps, a scalar (``budget``); ``None``
      without it.
  """

  mu: Any
  nu: Any
  carry: tuple
  log_scale: jax.Array
  count: jax.Array
  skipped_steps: jax.Array
  mu_slow: Any = None
  budget: jax.Array | None = None


def _check(config: ScaledAdamConfig) -> None:
  if config.hidden < 1 or config.layers < 1:
    raise ValueError(f"hidden and layers must be >= 1, got {config.hidden} and {config.layers}.")
  if not config.max_log_scale > 0 or not config.learning_rate > 0:
    raise ValueError("max_log_scale and learning_rate must be > 0, got "
                     f"{config.max_log_scale} and {config.learning_rate}.")
  if config.min_log_scale is not None and not config.min_log_scale < 0:
    raise ValueError(f"min_log_scale must be < 0, got {config.min_log_scale}.")
  if config.slow_b1 is not None and not 0 < config.slow_b1 < 1:
    raise ValueError(f"slow_b1 must be in (0, 1), got {config.slow_b1}.")
  if config.budget is not None and not config.budget >= 1:
    raise ValueError(f"budget must be >= 1 (steps), got {config.budget}.")
  if config.cosine_decay and config.budget is None:
    raise ValueError("cosine_decay decays over the budget: it needs budget (steps).")


def _initial_carry(config: ScaledAdamConfig, rows: int, dtype):
  zeros = jnp.zeros((rows, config.hidden), dtype)
  return tuple((zeros, zeros) for _ in range(config.layers))


class TensorLSTM(nn.Module):
  """``(carry, features (tensors, F)) -> (carry, raw (tensors,))``: an LSTM over the rows
  (one per tensor) and a zero-initialized linear read-out.

  The Flax module of :class:`ScaledAdamConfig`: ``config.layers`` stacked
  ``nn.OptimizedLSTMCell`` layers of ``config.hidden`` units shared by the tensors, and a
  dense read-out named ``log_scale``, of the LSTM's output and, with ``budget``, of the
  budget features (the last columns). Its weights start at zero, so the raw outputs do,
  and the multipliers :math:`e^{s}` start at 1.

  Attributes:
    config: the :class:`ScaledAdamConfig`.
  """

  config: ScaledAdamConfig

  @nn.compact
  def __call__(self, carry, features):
    x, new_carry = features, []
    for layer in range(self.config.layers):
      c, x = nn.OptimizedLSTMCell(self.config.hidden, name=f"lstm_{layer}")(carry[layer], x)
      new_carry.append(c)
    if self.config.budget is not None:
      x = jnp.concatenate([x, features[:, -NUM_BUDGET_FEATURES:]], axis=1)
    raw = nn.Dense(1, kernel_init=nn.initializers.zeros, name="log_scale")(x)[:, 0]
    return tuple(new_carry), raw


def _cosine(a, b):
  return jnp.vdot(a, b) / (jnp.linalg.norm(a) * jnp.linalg.norm(b) + 1e-30)


def _rms(x):
  return jnp.sqrt(jnp.mean(x * x))


def scaled_adam_features(config: ScaledAdamConfig, state: ScaledAdamState, params: Any,
                         grads: Any):
  """``(features (tensors, F), mu, nu, directions, mu_slow)``: the network's inputs at
  this step (``F = 12``, 3 more with ``slow_b1``, 5 more with ``budget``), Adam's new
  moments, its direction
  :math:`d_t` and the new slow moment (``None`` without ``slow_b1``), per tensor (pure,
  jit-able).

  Args:
    config: the :class:`ScaledAdamConfig`.
    state: the optimizer's :class:`ScaledAdamState` before the step.
    params: the params (pytree).
    grads: the gradient, params-shaped.

  Returns:
    The 5-tuple above: ``features`` ``(num_tensors, F)``; ``mu`` and ``nu``
    params-shaped; ``directions`` params-shaped; ``mu_slow`` params-shaped or ``None``.
  """
  b1, b2, eps = config.b1, config.b2, config.eps
  count = state.count  # steps taken before this one
  t = (count + 1).astype(state.log_scale.dtype)
  dtype = state.log_scale.dtype
  bounds = config.log_scale_bounds
  base_rate = base_step_size(config, state)

  def direction(m, v, steps):
    steps = jnp.maximum(steps, 1).astype(dtype)
    return (m / (1 - b1**steps)) / (jnp.sqrt(v / (1 - b2**steps)) + eps)

  leaves_g, treedef = jax.tree.flatten(grads)
  leaves_p = treedef.flatten_up_to(params)
  leaves_m, leaves_v = treedef.flatten_up_to(state.mu), treedef.flatten_up_to(state.nu)
  slow = config.slow_b1 is not None
  leaves_s = treedef.flatten_up_to(state.mu_slow) if slow else [None] * len(leaves_g)
  rows, mus, nus, dirs, slows, ratios = [], [], [], [], [], []
  for i, (g, p, m_prev, v_prev, s_prev) in enumerate(zip(leaves_g, leaves_p, leaves_m,
                                                         leaves_v, leaves_s)):
    g = g.astype(dtype)
    d_prev = jnp.where(count > 0, direction(m_prev, v_prev, count), 0.0)
    m = b1 * m_prev + (1 - b1) * g
    v = b2 * v_prev + (1 - b2) * g * g
    d = direction(m, v, count + 1)
    rms_d = _rms(d)
    relative = jnp.log(base_rate * jnp.exp(state.log_scale[i]) * rms_d
                       / (_rms(p.astype(dtype)) + 1e-30) + 1e-30) / 10
    rows.append(jnp.stack([
        _cosine(g, d_prev), _cosine(d, d_prev), jnp.log(rms_d + 1e-8) / 5,
        jnp.clip(relative, -2.0, 0.5), state.log_scale[i] / max(map(abs, bounds)),
        jnp.full((), jnp.log(max(g.size, 1)) / 10, dtype), jnp.full((), g.ndim <= 1, dtype),
        jnp.tanh(t / 10), jnp.tanh(t / 100)]))
    mus.append(m)
    nus.append(v)
    dirs.append(d)
    if slow:
      bs = config.slow_b1
      m_slow = bs * s_prev + (1 - bs) * g
      noise_ratio = (_rms(m_slow / (1 - bs**t))
                     / (jnp.sqrt(jnp.mean(v / (1 - b2**t))) + 1e-30))
      slows.append(m_slow)
      ratios.append(jnp.log(noise_ratio + 1e-8) / 3)
  local = jnp.stack(rows)
  n = local.shape[0]
  pooled = jnp.broadcast_to(jnp.mean(local[:, :3], axis=0), (n, 3))
  columns = [local, pooled]
  if slow:
    ratio = jnp.stack(ratios)
    columns.append(jnp.stack([ratio, jnp.full((n,), jnp.mean(ratio)),
                              jnp.full((n,), jnp.tanh(t / 1000))], axis=1))
  if config.budget is not None:
    columns.append(jnp.broadcast_to(budget_features(t, state.budget.astype(dtype)),
                                    (n, NUM_BUDGET_FEATURES)))
  unflatten = lambda leaves: jax.tree.unflatten(treedef, leaves)
  return (jnp.concatenate(columns, axis=1), unflatten(mus), unflatten(nus),
          unflatten(dirs), unflatten(slows) if slow else None)


def budget_features(t: jax.Array, budget: jax.Array) -> jax.Array:
  """``(5,)``: :math:`x, x^2, x^4, x^8` with :math:`x = \\min(t / T, 1)`, and
  :math:`\\log(T) / 10`, at step ``t`` (1 for the first) of a run of ``budget`` :math:`T`
  steps (features 16-20 of the module docstring; the training horizon features of VeLO,
  Metz et al. 2022)."""
  x = jnp.minimum(t / budget, 1.0)
  return jnp.stack([x, x**2, x**4, x**8, jnp.log(budget) / 10])


def base_step_size(config: ScaledAdamConfig, state: ScaledAdamState) -> jax.Array:
  """The base step size of this step: :math:`\\eta`, or with ``cosine_decay``
  :math:`\\eta\\,\\tfrac12(1 + \\cos(\\pi \\min(n, T) / T))` after :math:`n` steps of a run of
  budget :math:`T` (``optax.cosine_decay_schedule``'s value at count :math:`n`)."""
  rate = jnp.asarray(config.learning_rate, state.log_scale.dtype)
  if not config.cosine_decay:
    return rate
  budget = state.budget.astype(rate.dtype)
  count = jnp.minimum(state.count.astype(rate.dtype), budget)
  return rate * (0.5 * (1 + jnp.cos(jnp.pi * count / budget)))  # optax's order of operations


def _scaled_direction(network_params, config: ScaledAdamConfig, state: ScaledAdamState,
                      params, grads):
  """``(e^s d, new_state, log_scale)``: Adam's direction times the bounded learned
  multipliers, per tensor, in the state's precision (no finiteness guard)."""
  features, mu, nu, directions, mu_slow = scaled_adam_features(config, state, params, grads)
  carry, raw = TensorLSTM(config).apply(network_params, state.carry, features)
  low, high = config.log_scale_bounds
  log_scale = jnp.where(raw >= 0, high, -low) * jnp.tanh(raw)
  leaves, treedef = jax.tree.flatten(directions)
  scaled = jax.tree.unflatten(treedef, [jnp.exp(s) * d for s, d in zip(log_scale, leaves)])
  return scaled, ScaledAdamState(mu, nu, carry, log_scale, state.count + 1,
                                 state.skipped_steps, mu_slow, state.budget), log_scale


def _update(network_params, config: ScaledAdamConfig, state: ScaledAdamState, params, grads):
  """``(updates, new_state, log_scale)`` of one step (no finiteness guard)."""
  rate = base_step_size(config, state)
  scaled, state, log_scale = _scaled_direction(network_params, config, state, params, grads)
  updates = jax.tree.map(lambda d, p: (-rate * d).astype(p.dtype), scaled, params)
  return updates, state, log_scale


def _scaled_adam(network_params, config: ScaledAdamConfig) -> optax.GradientTransformationExtraArgs:
  """:meth:`ScaledAdamConfig.transformation`."""
  _check(config)

  def update_fn(updates, state, params=None, **extra_args):
    del extra_args
    _require_params(params, "ScaledAdamConfig.transformation")
    deltas, new_state, _ = _update(network_params, config, state, params, updates)
    ok = tree_utils.all_finite(updates) & tree_utils.all_finite(deltas)
    new_state = optax.tree_utils.tree_where(ok, new_state, state)
    return tree_utils.zeros_unless(ok, deltas), new_state._replace(
        skipped_steps=state.skipped_steps + (~ok).astype(jnp.int32))

  return optax.GradientTransformationExtraArgs(_init(config, "ScaledAdamConfig.transformation"),
                                               update_fn)


def _init(config: ScaledAdamConfig, name: str) -> Callable:
  """The ``init`` of a transformation built on ``config``: float params only."""

  def init_fn(params):
    tree_utils.check_float_params(params, name)
    return config.init_state(params)

  return init_fn


def _require_params(params, name: str) -> None:
  if params is None:
    raise ValueError(f"{name} needs params: update(grads, state, params).")


def scale_by_learned_adam(network_params, config: ScaledAdamConfig = ScaledAdamConfig()
                          ) -> optax.GradientTransformationExtraArgs:
  r"""The learned optimizer's *direction*: :math:`e^{s^{(i)}} \hat m^{(i)} / (\sqrt{\hat v^{(i)}}
  + \epsilon)` per tensor, without the step size or the sign flip (as
  ``optax.scale_by_adam``, for a step-size wrapper such as :func:`metaoptax.metaoptimize`).

  The same network, features and bounds as :meth:`ScaledAdamConfig.transformation`;
  ``config.learning_rate`` only enters feature 4 (the step's size relative to the weights)
  as a nominal rate. The
  params reach the features through ``jax.lax.stop_gradient``: a wrapper that
  differentiates the direction with respect to the weights (MetaOptimize's Hessian-free
  trace, a ``jax.jvp``) sees the multipliers as constants, as it sees Adam's moments. With
  freshly initialized weights it is ``optax.scale_by_adam(config.b1, config.b2,
  config.eps)``. No finiteness guard: the wrapper's applies.

  Args:
    network_params: the network's weights (``config.init_network(key)`` or trained).
    config: the :class:`ScaledAdamConfig` they belong to.

  Returns:
    An ``optax.GradientTransformationExtraArgs`` whose ``update(grads, state, params)``
    needs ``params``; other extra arguments are ignored.

  Examples:
    >>> import jax, jax.numpy as jnp
    >>> from metaoptax import l2o
    >>> config = l2o.ScaledAdamConfig()
    >>> tx = l2o.scale_by_learned_adam(config.init_network(jax.random.key(0)), config)
    >>> params = {"w": jnp.ones(2)}
    >>> direction, _ = tx.update({"w": jnp.array([2.0, -3.0])}, tx.init(params), params)
    >>> [round(float(d), 4) for d in direction["w"]]  # Adam's first direction: sign(g)
    [1.0, -1.0]
  """
  _check(config)
  if config.cosine_decay:
    raise ValueError("scale_by_learned_adam is a direction without a step size; "
                     "cosine_decay is a schedule of the step size (use config.transformation).")

  def update_fn(updates, state, params=None, **extra_args):
    del extra_args
    _require_params(params, "scale_by_learned_adam")
    direction, new_state, _ = _scaled_direction(network_params, config, state,
                                                jax.lax.stop_gradient(params), updates)
    return jax.tree.map(lambda d, g: d.astype(g.dtype), direction, updates), new_state

  return optax.GradientTransformationExtraArgs(_init(config, "scale_by_learned_adam"),
                                               update_fn)
