r"""An exponential climb of the step sizes, then any meta optimizer.

A meta optimizer such as Adam moves :math:`\beta = \log\alpha` by about its step
size :math:`\eta` per step, so a start two orders of magnitude below a good
step size costs :math:`\ln 100 / \eta \approx 4600` steps at the paper's
:math:`\eta = 10^{-3}`. ``climb`` removes that wait. While it lasts, every
:math:`\beta` rises by ``rate`` per step (the step sizes grow by
:math:`e^{\text{rate}}` per step: a factor 10 every :math:`\ln 10/\text{rate}`
steps); it ends for good at the first step at which the smoothed total
meta-gradient

.. math::

  \bar s_t = \rho\,\bar s_{t-1} + (1-\rho) \sum_j s_t[j],
  \qquad \sum_j s_t[j] = \frac{\partial}{\partial c}\,
  \mathcal L\big(\beta + c\,\mathbf 1\big)\Big|_{c=0}

turns positive, i.e. when raising all step sizes together stops lowering the
(discounted future) loss. The sum is the derivative along a common shift of
every :math:`\beta`, so the decision is one number whatever the block layout:
weight-wise step sizes, whose individual meta-gradients are noisy, climb
together as a scalar one would. The climb then backs off by the distance it
rose while the average :math:`\bar s` lagged the meta-gradient
(:math:`\text{rate}\cdot\rho/(1-\rho)`), and by :math:`\ln(\text{backoff})`
more, and ``meta`` (e.g. Adam on :math:`\beta`) takes over, per block.

Why a ``backoff`` beyond the lag: a direction whose steps are not normalized
(SGD) becomes unstable along a stiff direction of curvature :math:`\lambda` once
:math:`\alpha > 2/\lambda`, and that mode grows by :math:`|1-\alpha\lambda|`
per step from a seed far below the gradient's scale. It dominates the meta-gradient
only after :math:`k \approx \sqrt{\ln(1/\text{seed})/\text{rate}}` steps, when
:math:`\alpha` is already :math:`e^{\text{rate}\,k}` times above the limit (4x
on Rosenbrock's valley at ``rate = 0.1``): stepping back by the lag alone leaves it
unstable, and the run diverges. Adam and Lion bound each step by :math:`\alpha`,
so an overshoot costs a few noisy steps and ``backoff = 1`` suits them. A
``backoff`` below 1 ends the climb *above* the point where the meta-gradient
turned: the meta-gradient of a finite horizon is greedy (short-horizon bias, Wu et
al. 2018, https://arxiv.org/abs/1803.02021) and its optimum lies below the step
size that serves a long run best, most of all when an average of the iterates
(:func:`metaoptax.average_iterates`) rather than a smaller step removes the noise.
``meta`` sees every meta-gradient from
the first step on, so its moments are warm when it takes over. Hyperparameters
learned beside the step sizes (``metaoptimize(..., learn=...)``) do not climb:
``meta`` moves them from the first step.

The total meta-gradient of MetaOptimize's Hessian-free trace at a small step
size is :math:`\sum_k \alpha_k\, g_t^\top d_k`-like (the gradient against the
recent displacement), negative as long as successive steps agree; it turns
positive once the steps overshoot. Starting above a good step size, the climb
ends at once and ``meta`` behaves as it would alone.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import optax

from metaoptax._src.hyperparams import concrete_number
from metaoptax._src.learned import MetaParams
from metaoptax._src.state import ClimbState

__all__ = ("ClimbState", "climb")


def climb(meta: optax.GradientTransformation, rate: float = 0.05,
          decay: float = 0.9, backoff: float = 1.0) -> optax.GradientTransformation:
  r"""Raises every ``beta`` by ``rate`` per step until the meta-gradient turns; then ``meta``.

  Args:
    meta: the meta optimizer on ``beta`` after the climb (e.g. ``optax.adam(1e-3)``).
    rate: rise of ``beta = log(alpha)`` per step while climbing (``0.05``: the
      step sizes grow 10x every 46 steps).
    decay: ``rho``, the decay of the average of the total meta-gradient whose
      sign ends the climb.
    backoff: factor (> 0) by which the step sizes are divided when the climb
      ends, on top of the averaging lag (``1``: the lag alone; below 1 they are
      raised).

  Returns:
    An ``optax.GradientTransformation`` acting on the meta-parameters (a
    :class:`metaoptax.MetaParams`: the step sizes' ``beta`` climb, the learned
    hyperparameters follow ``meta``) with the meta-gradient as its input.

  Examples:
    >>> import jax.numpy as jnp, optax, metaoptax
    >>> from metaoptax import climb
    >>> tx = climb(optax.adam(1e-3), rate=0.05)
    >>> meta_params = metaoptax.MetaParams(step_size=jnp.zeros(1), hyperparams={})
    >>> state = tx.init(meta_params)
    >>> meta_grads = metaoptax.MetaParams(-jnp.ones(1), {})  # "raise alpha"
    >>> updates, state = tx.update(meta_grads, state, meta_params)
    >>> print(f"{float(updates.step_size[0]):.3f}")
    0.050
  """
  for name, value in (("rate", rate), ("decay", decay)):
    number = concrete_number(name, value)
    if number is not None and not 0 <= number < (1 if name == "decay" else float("inf")):
      raise ValueError(f"{name} must be in [0, {'1' if name == 'decay' else 'inf'}), "
                       f"got {value!r}.")
  number = concrete_number("backoff", backoff)
  if number is not None and not 0 < number < float("inf"):
    raise ValueError(f"backoff must be in (0, inf), got {backoff!r}.")
  # a Python float when concrete: backoff = 1 changes no bit of the lag's step back
  step_back = rate * decay / (1.0 - decay) + (math.log(number) if number is not None
                                              else jnp.log(backoff))

  def init_fn(meta_params: MetaParams):
    # The average in beta's precision (float32, or float64 for float64 params).
    leaves = jax.tree.leaves(meta_params)
    dtype = jnp.result_type(*leaves) if leaves else jnp.float32
    return ClimbState(average=jnp.zeros([], dtype), climbing=jnp.asarray(True),
                      climb_steps=jnp.zeros([], jnp.int32), ended=jnp.asarray(False),
                      meta_state=meta.init(meta_params))

  def update_fn(meta_grads: MetaParams, state, meta_params: MetaParams | None = None):
    meta_updates, meta_state = meta.update(meta_grads, state.meta_state, meta_params)
    dtype = state.average.dtype
    total = sum((jnp.sum(s.astype(dtype)) for s in jax.tree.leaves(meta_grads.step_size)),
                jnp.zeros([], dtype))
    average = (decay * state.average + (1 - decay) * total).astype(dtype)
    ends = state.climbing & (average > 0)
    climbing = state.climbing & ~ends
    shift = jnp.where(climbing, rate, jnp.where(ends, -step_back, 0.0))
    updates = meta_updates._replace(step_size=jax.tree.map(  # hyperparameters: meta's steps
        lambda u: jnp.where(state.climbing, shift, u).astype(u.dtype), meta_updates.step_size))
    return updates, ClimbState(average=average, climbing=climbing,
                               climb_steps=state.climb_steps + climbing.astype(jnp.int32),
                               ended=ends, meta_state=meta_state)

  return optax.GradientTransformation(init_fn, update_fn)
