r"""Learning-rate-free drop-ins for ``optax.adamw``, ``optax.lion`` and ``optax.sgd``.

Each takes the arguments of its optax namesake, except that ``learning_rate``
becomes ``init_step_size``, a starting point that need not be tuned: the step
size is meta-optimized while training runs (MetaOptimize, Hessian-free, one
scalar step size by default). They differ from the paper-faithful
:mod:`metaoptax.presets` in:

* a fast start, :func:`metaoptax.climb`: every :math:`\log\alpha` rises by
  ``climb_rate`` per step until the total meta-gradient turns positive, so a
  start many orders of magnitude below a good step size costs tens to a few
  hundred steps instead of thousands (:func:`sgd` climbs more carefully);
* a finite horizon for :func:`lion`, ``gamma = 0.99``: the Hessian-free trace
  forgets displacements older than ~100 steps. :func:`sgd` keeps the paper's
  ``gamma = 1`` (with a 100-step horizon SGD's step size stalls far below the best
  fixed rate), and so does :func:`adamw`, whose climb ends at twice the point where
  the meta-gradient turned (chosen on validation splits, ``benchmarks/lr_free.py``);
* optax's defaults (``weight_decay=1e-4`` for AdamW, ``1e-3`` for Lion, ``eps_root=0``);
* an average of the weights (``average=0.1`` by default, ``None`` for none): its
  horizon is the fraction :math:`c` of the steps taken
  (:func:`metaoptax.average_iterates`), and it is kept beside the iterates, which it
  does not change; evaluate :func:`metaoptax.averaged_params` of the state. The average removes the noise
  of the last iterates, as a decaying schedule would, without shrinking the step.
  With ``gamma=None`` the average also holds the Hessian-free trace
  (``metaoptimize(..., average=)``): one params-sized buffer less.

After the climb, the paper's meta optimizer for the base tracks
:math:`\log\alpha` for the rest of the run (meta step ``meta_step_size``): Adam
for :func:`adamw` and :func:`sgd`, Lion for :func:`lion` (the paper's (Lion, Lion)
pair). Lion's sign steps oscillate about a minimum with an amplitude of
:math:`\alpha`, so the meta-gradient changes sign from step to step with a small
positive mean; Adam's step (:math:`\eta` times mean over RMS) then shrinks to a
few percent of :math:`\eta` and the step size hardly anneals, while Lion on
:math:`\log\alpha` moves it by :math:`\pm\eta` per step after the sign of its
momentum, and anneals it by :math:`e^{-1}` every :math:`1/\eta` steps once the run
oscillates.

Use these when you want an optimizer without a learning rate; use
:mod:`metaoptax.presets` to reproduce the paper's settings.
"""

from __future__ import annotations

from typing import Any

import optax

from metaoptax._src import learned
from metaoptax._src.averaging import average_iterates
from metaoptax._src.forwarding import forwarding_metaoptimize_keywords
from metaoptax.step_size import presets
from metaoptax.step_size.climbing import climb
from metaoptax._src.transform import metaoptimize

__all__ = ("adamw", "lion", "sgd")

#: Default start of :func:`lion` and :func:`sgd`: far below any sensible step size; the
#: climb finds the range.
INIT_STEP_SIZE = 1e-6
#: :func:`adamw`'s start: ``optax.adamw``'s usual rate. The climb takes it up within tens
#: of steps where a larger one trains better, and ends at once where it does not; from
#: 1e-6 the first ~100 steps are lost to the climb, which a run of a few hundred steps
#: cannot spare (chosen on validation splits, ``benchmarks/lr_free.py``: the short
#: tasks ``digits-300`` and ``mnist1d-300``).
ADAMW_INIT_STEP_SIZE = 1e-3
#: Meta step size of the Adam that follows the climb (the paper's).
META_STEP_SIZE = 1e-3
#: Rise of ``log(alpha)`` per step during the climb (10x every 23 steps).
CLIMB_RATE = 0.1
#: Extra factor by which :func:`adamw` and :func:`lion` divide ``alpha`` when the
#: climb ends (1: the averaging lag alone; their steps are bounded by ``alpha``).
CLIMB_BACKOFF = 1.0
#: :func:`sgd`'s climb: slower (10x every 77 steps), and ``alpha`` divided by 10
#: at its end. SGD's steps are not normalized: an overshoot of the stability limit
#: grows exponentially (see :func:`metaoptax.climb`).
SGD_CLIMB_RATE = 0.03
SGD_CLIMB_BACKOFF = 10.0
#: Discount of the sensitivity trace: a horizon of ~100 steps (the paper uses 1).
GAMMA = 0.99
#: Horizon of every drop-in's average of the weights: the last ~10 % of the steps.
AVERAGE = 0.1
#: :func:`adamw`: the climb ends 2x above the point where the meta-gradient turned
#: (backoff 1/2: the greedy ~100-step meta-gradient stops below the rate that serves
#: a long run, and the average removes the noise of the larger steps), and Adam then
#: follows on log(alpha) with the paper's unbounded horizon (gamma = 1).
#: Chosen on validation splits (``benchmarks/lr_free.py``: the ablation of
#: docs/benchmarks.md).
ADAMW_CLIMB_BACKOFF = 0.5
ADAMW_GAMMA = 1.0
#: :func:`adamw`: when the climb ends, Adam's moments keep their bias-corrected values
#: but count as 3 steps (``metaoptimize(..., climb_memory=3)``), so the climb's gradients
#: fade from the second moment within tens of steps (chosen on validation splits,
#: ``benchmarks/lr_free.py``).
ADAMW_CLIMB_MEMORY = 3
#: :func:`adamw`'s meta step after the climb: 3x the paper's, so that log(alpha) can
#: follow the meta-gradient within a few thousand steps (chosen with ``climb_memory=3``
#: on validation splits, ``benchmarks/lr_free.py``).
ADAMW_META_STEP_SIZE = 3e-3
#: :func:`sgd`'s discount: the paper's (see the module's docstring).
SGD_GAMMA = 1.0


def _meta(meta_step_size, climb_rate, climb_backoff, follow=presets.meta_adam):
  """The climb, then ``follow(meta_step_size)`` on ``beta``."""
  return climb(follow(meta_step_size), rate=climb_rate, backoff=climb_backoff)


def _metaoptimize(direction, meta, *, average, average_dtype, gamma, **kwargs):
  """:func:`metaoptimize` with the average of the weights: holding the trace
  (``gamma=None``: ``metaoptimize(..., average=)``), or chained after a stored trace of
  discount ``gamma`` (:func:`average_iterates`), or none (``average=None``)."""
  if gamma is None:
    if average_dtype is not None:
      raise ValueError(f"average_dtype={average_dtype} with gamma=None: the trace is read off "
                       "the average, which stays in float32 (its rounding in bfloat16 would "
                       "swamp the trace). For less memory keep Adam's first moment in "
                       "bfloat16 (mu_dtype=jnp.bfloat16), or store the trace (gamma=1).")
    return metaoptimize(direction, meta, gamma=None, average=average, **kwargs)
  transform = metaoptimize(direction, meta, gamma=gamma, **kwargs)
  if average is None:
    return transform
  return optax.chain(transform, average_iterates(average, average_dtype))


def _direction_with_decay(direction, weight_decay, mask, learn=()):
  """``direction`` and the weight decay: inside metaoptimize, or masked in the base."""
  if mask is None:
    return direction, weight_decay
  if "weight_decay" in learn:
    raise ValueError("learn=('weight_decay', ...) with a mask is not supported: the masked "
                     "decay lives in the base. Learn it unmasked, or keep it fixed.")
  return optax.chain(direction, optax.add_decayed_weights(weight_decay, mask)), 0.0


@forwarding_metaoptimize_keywords
def adamw(
    init_step_size: float = ADAMW_INIT_STEP_SIZE,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    eps_root: float = 0.0,
    mu_dtype: Any = None,
    weight_decay: float = 1e-4,
    mask: Any = None,
    *,
    nesterov: bool = False,
    meta_step_size: float = ADAMW_META_STEP_SIZE,
    climb_rate: float = CLIMB_RATE,
    climb_backoff: float = ADAMW_CLIMB_BACKOFF,
    gamma: float = ADAMW_GAMMA,
    average: float | None = AVERAGE,
    average_dtype: Any = None,
    climb_memory: int | None = ADAMW_CLIMB_MEMORY,
    **kwargs,
) -> optax.GradientTransformationExtraArgs:
  r"""AdamW without a learning rate: a drop-in for ``optax.adamw``.

  .. math::

    w_{t+1} = w_t - \alpha_t\,\big(\hat m_t / (\sqrt{\hat v_t + \epsilon_{root}} + \epsilon)
    + \kappa w_t\big),

  with :math:`\alpha_t` found by MetaOptimize's meta-gradient: an exponential
  climb from ``init_step_size`` (:func:`metaoptax.climb`) that ends once raising
  :math:`\alpha` stops lowering the loss of the next ~100 steps, at twice that
  point (``climb_backoff=0.5``); then Adam on
  :math:`\log\alpha_t` (meta step ``3e-3``, 3x the paper's) with the paper's
  unbounded horizon (``gamma=1``), whose meta-gradient anneals less greedily than a
  short one. When the climb ends Adam's moments keep their values but count as 3 steps
  (``climb_memory=3``), so the climb's large early gradients do not shrink the steps
  that follow. Beside the iterates the drop-in keeps the average of the weights

  .. math::

    \bar w_t = \bar w_{t-1} + (w_t - \bar w_{t-1}) / (c\,t + 1)

  over the last :math:`c = 10\,\%` of the steps (:func:`metaoptax.average_iterates`).
  **Evaluate** :func:`metaoptax.averaged_params` **of the state**: it removes the noise
  of the last iterates as a decaying schedule would, at any budget, without knowing
  the budget (the schedule-free view, Defazio et al. 2024,
  https://arxiv.org/abs/2405.15682). Greedy meta-gradients anneal :math:`\alpha` too
  early (short-horizon bias, Wu et al. 2018, https://arxiv.org/abs/1803.02021): the
  doubled end of the climb, the long horizon and the average each counter it.
  ``average=None`` drops the average.

  Args:
    init_step_size: starting step size; anything from ``1e-8`` up to a good step
      size works. The default ``1e-3`` (``optax.adamw``'s usual rate) trains from the
      first step; from ``1e-6`` the climb takes ~100 steps to reach a useful rate.
    b1, b2, eps, eps_root, mu_dtype, nesterov: as in ``optax.adamw``.
      ``mu_dtype=jnp.bfloat16`` with ``trace_dtype`` and ``average_dtype`` in bfloat16
      keeps the state in the bytes of 2.5 params-sized float32 buffers instead of 4.
    weight_decay: decoupled weight decay :math:`\kappa` (scaled by the learned step size).
    mask: as in ``optax.adamw``: which params are decayed.
    meta_step_size: Adam's step on :math:`\log\alpha` after the climb (and on the
      learned hyperparameters); 0 holds the step size. The default ``3e-3`` was chosen
      on validation splits with ``climb_memory=3`` (``benchmarks/lr_free.py``).
    climb_rate: rise of :math:`\log\alpha` per step during the climb.
    climb_backoff: factor by which :math:`\alpha` is divided when the climb
      ends, beyond the averaging lag (:func:`metaoptax.climb`; 0.5: doubled).
    gamma: discount :math:`\gamma` of the sensitivity trace after the climb (1: the
      whole run, the paper's; 0.99: ~100 steps), or ``None``: the trace is read off the
      average of the weights (``metaoptimize(..., average=)``), whose horizon it takes,
      the last ~``average`` of the steps. The state then holds Adam's moments and the
      average, 3 params-sized buffers instead of 4, and the step size anneals sooner
      after the climb (a shorter horizon's meta-gradient is greedier; pair it with
      ``meta_step_size=1e-3``, which anneals less, on the validation splits of
      ``benchmarks/lr_free.py``). It misses the long horizon's signal: where the stored
      trace raises the step size after the climb (the suite's CNN), this one lowers it.
    average: horizon :math:`c` of the average of the weights
      (:func:`metaoptax.average_iterates`), or ``None`` to keep none.
    average_dtype: the average's storage, ``None`` (float32) or ``jnp.bfloat16``
      (:func:`metaoptax.average_iterates`' ``dtype``). The trace's is
      :func:`metaoptax.metaoptimize`'s ``trace_dtype``, a keyword of ``**kwargs``.
    climb_memory: how many steps Adam's moments count as when the climb ends
      (:func:`metaoptax.metaoptimize`; their bias-corrected values are kept). The
      climb's gradients, taken while the weights hardly moved, otherwise fill Adam's
      second moment for ~1,000 steps and shrink the steps that follow. ``0`` restarts
      the moments (Adam's sign-like first steps at the climbed step size shock the
      character transformer: 3.33 against 3.17 bits/char at 10 % of the budget);
      ``None`` keeps them as they are. The default ``3``, chosen on the validation
      splits of ``benchmarks/lr_free.py``, reaches tuned AdamW's step-300 loss by step
      500 from every start ``1e-8`` ... ``1e-4`` on its digits MLP.
    **kwargs: any keyword of :func:`metaoptax.metaoptimize` (``blocks``,
      ``approximation``, ``step_size_bounds``, ``learn`` ...). ``learn`` may name
      ``b1``, ``b2``, ``eps`` and ``weight_decay`` (:func:`lion`: ``b1``, ``b2``,
      ``weight_decay``; :func:`sgd`: ``momentum``, ``weight_decay``), each then
      meta-optimized from the value given here.

  Returns:
    An ``optax.GradientTransformationExtraArgs``; ``update`` needs ``params``. With a
    validation split, prefer :func:`metaoptax.overfitting_gate` to ``meta_grads=``
    (:func:`metaoptax.metaoptimize`'s held-out meta-gradient): :math:`\alpha` tuned
    on a held-out batch from the start stops the climb early and underfits.

  Examples:
    >>> import jax.numpy as jnp, optax, metaoptax
    >>> opt = metaoptax.adamw()           # instead of optax.adamw(learning_rate)
    >>> params = {"w": jnp.ones(3)}
    >>> state = opt.init(params)
    >>> updates, state = opt.update({"w": jnp.array([0.1, -0.2, 0.3])}, state, params)
    >>> evaluate_these = metaoptax.averaged_params(state)   # the weights to evaluate
  """
  learn = learned.check_learn(kwargs.get("learn", ()), like=optax.adamw)
  direction, decay = _direction_with_decay(
      learned.learnable(optax.scale_by_adam, learn, b1=b1, b2=b2, eps=eps, eps_root=eps_root,
                        mu_dtype=mu_dtype, nesterov=nesterov), weight_decay, mask, learn)
  return _metaoptimize(direction, _meta(meta_step_size, climb_rate, climb_backoff),
                       average=average, average_dtype=average_dtype, gamma=gamma,
                       init_step_size=init_step_size, weight_decay=decay,
                       climb_memory=climb_memory, **kwargs)


@forwarding_metaoptimize_keywords
def lion(
    init_step_size: float = INIT_STEP_SIZE,
    b1: float = 0.9,
    b2: float = 0.99,
    mu_dtype: Any = None,
    weight_decay: float = 1e-3,
    mask: Any = None,
    *,
    meta_step_size: float = META_STEP_SIZE,
    climb_rate: float = CLIMB_RATE,
    climb_backoff: float = CLIMB_BACKOFF,
    gamma: float = GAMMA,
    average: float | None = AVERAGE,
    average_dtype: Any = None,
    **kwargs,
) -> optax.GradientTransformationExtraArgs:
  r"""Lion without a learning rate: a drop-in for ``optax.lion``.

  :math:`w_{t+1} = w_t - \alpha_t(\operatorname{sign}(b_1 m_t + (1-b_1) g_t) + \kappa w_t)`,
  :math:`\alpha_t` learned as in :func:`adamw`, except that Lion, not Adam, moves
  :math:`\log\alpha_t` after the climb (see the module's docstring).

  Args:
    init_step_size: where the climb starts, as in :func:`adamw`.
    b1, b2, mu_dtype: Lion's interpolation and moment decays and the moment's dtype, as
      in ``optax.lion``.
    weight_decay: decoupled weight decay :math:`\kappa` (optax's Lion default), scaled by
      the learned step size.
    mask: as in ``optax.lion``: which params are decayed.
    meta_step_size: Lion's step on :math:`\log\alpha` after the climb.
    climb_rate, climb_backoff, gamma, average, average_dtype: as in :func:`adamw`.
    **kwargs: any keyword of :func:`metaoptax.metaoptimize`, as in :func:`adamw`.

  Returns:
    An ``optax.GradientTransformationExtraArgs``; ``update`` needs ``params``. Evaluate
    :func:`metaoptax.averaged_params` of its state.

  Examples:
    >>> import metaoptax
    >>> opt = metaoptax.lion()
  """
  learn = learned.check_learn(kwargs.get("learn", ()), like=optax.lion)
  direction, decay = _direction_with_decay(
      learned.learnable(optax.scale_by_lion, learn, b1=b1, b2=b2, mu_dtype=mu_dtype),
      weight_decay, mask, learn)
  meta = _meta(meta_step_size, climb_rate, climb_backoff, follow=presets.meta_lion)
  return _metaoptimize(direction, meta, average=average, average_dtype=average_dtype,
                       gamma=gamma, init_step_size=init_step_size, weight_decay=decay,
                       **kwargs)


@forwarding_metaoptimize_keywords
def sgd(
    init_step_size: float = INIT_STEP_SIZE,
    momentum: float | None = None,
    nesterov: bool = False,
    accumulator_dtype: Any = None,
    *,
    weight_decay: float = 0.0,
    meta_step_size: float = META_STEP_SIZE,
    climb_rate: float = SGD_CLIMB_RATE,
    climb_backoff: float = SGD_CLIMB_BACKOFF,
    gamma: float = SGD_GAMMA,
    average: float | None = AVERAGE,
    average_dtype: Any = None,
    **kwargs,
) -> optax.GradientTransformationExtraArgs:
  r"""SGD (with optional heavy-ball or Nesterov momentum) without a learning rate.

  A drop-in for ``optax.sgd``: :math:`w_{t+1} = w_t - \alpha_t (d_t + \kappa w_t)`
  with :math:`d_t = g_t`, or the momentum trace :math:`m_t = \mu m_{t-1} + g_t`
  (``optax.trace``); :math:`\alpha_t` learned as in :func:`adamw`, except for a
  more careful climb: 0.3 of the rate, and :math:`\alpha` divided by
  ``climb_backoff = 10`` when it ends (SGD's steps are not normalized, and an
  overshoot of the stability limit :math:`2/\lambda_{\max}` diverges, and
  :func:`adamw`'s climb can end above it),
  and the paper's ``gamma = 1``.

  Args:
    init_step_size: where the climb starts, as in :func:`adamw`.
    momentum: :math:`\mu`, the decay of the momentum trace; ``None``: plain SGD.
    nesterov, accumulator_dtype: as in ``optax.sgd``.
    weight_decay: decoupled weight decay :math:`\kappa`, scaled by the learned step size.
    meta_step_size: Adam's step on :math:`\log\alpha` after the climb.
    climb_rate, climb_backoff, gamma: the climb's rate, its back-off and the trace's
      discount, as in :func:`adamw` (with the defaults above).
    average, average_dtype: the average of the weights, as in :func:`adamw`.
    **kwargs: any keyword of :func:`metaoptax.metaoptimize`, as in :func:`adamw`
      (``learn`` may name ``momentum``, which needs a starting ``momentum``).

  Returns:
    An ``optax.GradientTransformationExtraArgs``; ``update`` needs ``params``. Evaluate
    :func:`metaoptax.averaged_params` of its state.

  Examples:
    >>> import metaoptax
    >>> opt = metaoptax.sgd(momentum=0.9)
  """
  learn = learned.check_learn(kwargs.get("learn", ()), like=optax.sgd)
  if "momentum" in learn:
    if momentum is None:
      raise ValueError("learn=('momentum', ...) needs a starting momentum, e.g. momentum=0.9.")
    learn = tuple("decay" if k == "momentum" else k for k in learn)  # optax.trace's name
    kwargs["learn"] = learn
  direction = (optax.identity() if momentum is None else
               learned.learnable(optax.trace, learn, decay=momentum, nesterov=nesterov,
                                 accumulator_dtype=accumulator_dtype))
  return _metaoptimize(direction, _meta(meta_step_size, climb_rate, climb_backoff),
                       average=average, average_dtype=average_dtype, gamma=gamma,
                       init_step_size=init_step_size, weight_decay=weight_decay, **kwargs)


#: Every drop-in by name: ``{"adamw": adamw, "lion": lion, "sgd": sgd}``.
DROP_INS = {"adamw": adamw, "lion": lion, "sgd": sgd}
