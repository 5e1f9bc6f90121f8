r"""The interface of the MetaOptimize approximations, and what they share: the
step's configuration, the meta step and the weight change.

An approximation of the sensitivity recursion (paper Section 4) is an
:class:`Approximation`, a record of functions that :func:`metaoptax.metaoptimize`
calls and nothing else inspects: ``hessian_free.HESSIAN_FREE``, and
``exact.L_APPROX`` and ``exact.TWO_BY_TWO``. Each takes the meta step and the
weight change from :class:`StepConfig`:

.. math::

  \beta_{t+1} = \mathrm{clip}\big(\beta_t + \mathrm{meta}(s_t)\big), \qquad
  \Delta_t = -\sigma(\beta)_{b} \odot (d_t + \kappa w_t),

with :math:`\beta = \beta_t` (or :math:`\beta_{t+1}` when the meta update comes
first). The meta-parameters are always a :class:`~metaoptax._src.learned.MetaParams`
(``hyperparams == {}`` when only the step sizes are learned).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax

from metaoptax._src import learned
from metaoptax._src.blocks import BlockLayout
from metaoptax._src.learned import MetaParams


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
  sensitivity_radius: Any  # the exact variants' trust radius r (exact.stabilize)
  learn: tuple[str, ...] = ()  # hyperparameters learned beside the step sizes
  trace_dtype: Any = None  # the Hessian-free trace's storage (None: float32 or wider)

  def step_sizes(self, meta_params: MetaParams) -> Any:
    """``alpha = sigma(beta)``, one per block."""
    beta = meta_params.step_size
    return jax.tree.map(jnp.exp, beta) if self.log_parametrization else beta

  def decay(self, hyperparams: dict) -> Any:
    """``kappa``: the learned weight decay, or the constant one."""
    if learned.WEIGHT_DECAY in hyperparams:
      return learned.to_value(learned.WEIGHT_DECAY, hyperparams[learned.WEIGHT_DECAY])
    return self.weight_decay

  def base_state_for(self, meta_params: MetaParams, base_state: Any) -> Any:
    """The base state with the learned base hyperparameters injected."""
    return learned.inject(base_state, meta_params.hyperparams)

  def meta_step(self, meta_grad: MetaParams, meta_state: Any,
                meta_params: MetaParams) -> tuple[MetaParams, Any]:
    """``(beta_{t+1}, meta_state_{t+1})``: the meta update on ``s``, then the clip."""
    meta_updates, new_meta_state = self.meta.update(meta_grad, meta_state, meta_params)
    new = optax.apply_updates(meta_params, meta_updates)
    beta = jax.tree.map(lambda b: jnp.clip(b, *self.beta_bounds).astype(b.dtype), new.step_size)
    return MetaParams(beta, learned.clip(new.hyperparams)), new_meta_state

  def step_beta(self, beta: MetaParams, new_beta: MetaParams) -> MetaParams:
    """The meta-parameters the base step uses: ``beta_t``, or ``beta_{t+1}`` first."""
    return new_beta if self.meta_update_first else beta

  def weight_change(self, step_sizes: Any, kappa: Any, direction: Any, wide_params: Any) -> Any:
    """``Delta = -alpha_b * (d + kappa * w)``, in the widened params' dtypes.

    ``step_sizes`` are per weight (``layout.expand`` of :meth:`step_sizes`).
    """
    decay = not (isinstance(kappa, (int, float)) and kappa == 0)

    def leaf(a, d, w):
      d = d.astype(w.dtype)
      if decay:
        d = d + kappa.astype(w.dtype) * w if hasattr(kappa, "astype") else d + kappa * w
      # d / (-1 / a) == -a * d up to rounding (and == -d / (1 / a) exactly).
      # Written as a division, XLA (which does not duplicate a division into a
      # second consumer) writes Delta once and the Hessian-free trace update and
      # the new params read it, instead of writing d and recomputing Delta in two
      # kernels: one params-sized pass less per step (docs/design-decisions.md).
      # The sign sits in the divisor: XLA simplifies
      # -d / (1 / a) to the product -d * a when a is weight-wise, and a donated
      # step then also copies the params. The exact step's memory traffic is the same.
      return d / (-1 / a.astype(w.dtype))

    return jax.tree.map(leaf, step_sizes, direction, wide_params)


class Approximation(NamedTuple):
  """One approximation of the sensitivity recursion: the functions the engine calls.

  ``Trace`` is the approximation's own NamedTuple; ``Layout`` a
  :class:`~metaoptax._src.blocks.BlockLayout`; ``Config`` a :class:`StepConfig`.
  """

  #: ``(config, layout, wide_params, base_state, meta_state, meta_params) -> trace``:
  #: the trace a run starts from.
  init_trace: Callable[..., Any]
  #: ``(trace, meta_params) -> trace``: the trace a restart starts from (the guard's),
  #: with the structure of ``trace``.
  initial_trace: Callable[[Any, MetaParams], Any]
  #: ``(layout, trace, grads, meta_params, params) -> s``: :math:`s_t = H_t^\top g_t`, a
  #: ``MetaParams`` (one entry per block, one per learned hyperparameter).
  meta_gradient: Callable[[BlockLayout, Any, Any, MetaParams, Any], MetaParams]
  #: ``(config, layout, grads, state, meta_grad, params, extra_args) -> (delta, state)``:
  #: one step given that meta-gradient.
  step: Callable[..., tuple[Any, Any]]
  #: Whether the guard must check the new trace for non-finite values (see
  #: :mod:`metaoptax._src.guard`).
  checks_new_trace: bool
  #: Whether ``s`` may come from a held-out gradient (``update(..., meta_grads=)``).
  takes_held_out_gradient: bool
  #: ``(trace, params, updates) -> trace``, or ``None``: applied after the guard, to the
  #: updates as returned (the trace read off an average moves with the new iterate).
  after_update: Callable[[Any, Any, Any], Any] | None = None
