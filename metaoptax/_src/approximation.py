r"""What the MetaOptimize approximations share: the step's configuration, the meta
step and the weight change.

An approximation of the sensitivity recursion (paper Section 4) is a module with

* ``init_trace(config, layout, wide_params, base_state, meta_state, beta)``: the
  trace a run starts from;
* ``meta_gradient(layout, trace, grads, beta)``: :math:`s_t = H_t^\top g_t`, a
  beta tree (one entry per block);
* ``step(config, layout, grads, state, meta_grad, params, extra_args)``: one
  step given that meta-gradient, returning ``(delta, new_state)``;
* ``CHECKS_NEW_TRACE``: whether the guard must check the new trace for
  non-finite values (see :mod:`metaoptax._src.guard`).

:mod:`metaoptax._src.hessian_free` and :mod:`metaoptax._src.exact` are the two.
Both take the meta step and the weight change from :class:`StepConfig`:

.. math::

  \beta_{t+1} = \mathrm{clip}\big(\beta_t + \mathrm{meta}(s_t)\big), \qquad
  \Delta_t = -\sigma(\beta)_{b} \odot (d_t + \kappa w_t),

with :math:`\beta = \beta_t` (or :math:`\beta_{t+1}` when the meta update comes
first).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import optax

from metaoptax._src import learned
from metaoptax._src.blocks import BlockLayout


@dataclasses.dataclass(frozen=True)
class StepConfig:
  """The static choices and hyperparameters of one :func:`metaoptax.metaoptimize`.

  ``gamma`` and ``weight_decay`` may be traced (``optax.inject_hyperparams``,
  a meta-gradient with respect to them); everything else is static.
  """

  base: optax.GradientTransformationExtraArgs  # the direction d_t
  meta: optax.GradientTransformation  # acts on beta
  gamma: Any  # discount of future losses
  weight_decay: Any  # kappa, decoupled, scaled by the step size
  log_parametrization: bool  # alpha = exp(beta) if True, else alpha = beta
  beta_bounds: tuple[float, float]  # beta is clipped to this range
  meta_update_first: bool  # the base step uses beta_{t+1} (IDBD's ordering)
  approximation: str  # "hessian_free", "l_approx" or "2x2"
  learn: tuple[str, ...] = ()  # hyperparameters learned beside the step sizes

  # The meta-parameters are beta, or learned.MetaParams(beta, {name: phi}) when
  # hyperparameters are learned (learn non-empty); the methods take either.

  def step_sizes(self, meta_params: Any) -> Any:
    """``alpha = sigma(beta)``."""
    beta, _ = learned.split(meta_params)
    return jax.tree.map(jnp.exp, beta) if self.log_parametrization else beta

  def decay(self, meta_params: Any) -> Any:
    """``kappa``: the learned weight decay, or the constant one."""
    _, hyperparams = learned.split(meta_params)
    if learned.WEIGHT_DECAY in hyperparams:
      return learned.to_value(learned.WEIGHT_DECAY, hyperparams[learned.WEIGHT_DECAY])
    return self.weight_decay

  def base_state_for(self, meta_params: Any, base_state: Any) -> Any:
    """The base state with the learned base hyperparameters injected."""
    return learned.inject(base_state, learned.split(meta_params)[1])

  def meta_step(self, meta_grad: Any, meta_state: Any, meta_params: Any) -> tuple[Any, Any]:
    """``(beta_{t+1}, meta_state_{t+1})``: the meta update on ``s``, then the clip."""
    meta_updates, new_meta_state = self.meta.update(meta_grad, meta_state, meta_params)
    new = optax.apply_updates(meta_params, meta_updates)
    beta, hyperparams = learned.split(new)
    beta = jax.tree.map(lambda b: jnp.clip(b, *self.beta_bounds).astype(b.dtype), beta)
    if isinstance(new, learned.MetaParams):
      return learned.MetaParams(beta, learned.clip(hyperparams)), new_meta_state
    return beta, new_meta_state

  def step_beta(self, beta: Any, new_beta: Any) -> Any:
    """The meta-parameters the base step uses: ``beta_t``, or ``beta_{t+1}`` first."""
    return new_beta if self.meta_update_first else beta

  def weight_change(self, layout: BlockLayout, meta_params: Any, direction: Any,
                    wide_params: Any) -> Any:
    """``Delta = -alpha_b * (d + kappa * w)``, in the widened params' dtypes."""
    alpha = layout.expand(self.step_sizes(meta_params), like=wide_params)
    kappa = self.decay(meta_params)
    decay = not (isinstance(kappa, (int, float)) and kappa == 0)

    def leaf(a, d, w):
      d = d.astype(w.dtype)
      if decay:
        d = d + kappa.astype(w.dtype) * w if hasattr(kappa, "astype") else d + kappa * w
      # d / (-1 / a) == -a * d up to rounding (and == -d / (1 / a) exactly).
      # Written as a division, XLA (which does not duplicate a division into a
      # second consumer) writes Delta once and the Hessian-free trace update and
      # the new params read it, instead of writing d and recomputing Delta in two
      # kernels: one params-sized pass less per step (docs/benchmarks.md,
      # "Implementation choices"). The sign sits in the divisor: XLA simplifies
      # -d / (1 / a) to the product -d * a when a is weight-wise, and a donated
      # step then also copies the params. The exact step's memory traffic is the same.
      return d / (-1 / a.astype(w.dtype))

    return jax.tree.map(leaf, alpha, direction, wide_params)
