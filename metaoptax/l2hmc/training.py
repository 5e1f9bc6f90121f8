r"""Training the sampler: expected squared jumped distance (Levy et al. 2018, eq. 8).

For a transition :math:`\xi \to \xi'` with acceptance :math:`A`,
:math:`\delta = \|x - x'\|^2 A(\xi'|\xi)` and

.. math::

  \ell_\lambda(\xi, \xi', A) = \frac{\lambda^2}{\delta} - \frac{\delta}{\lambda^2},

averaged over the current chain samples and over fresh samples from the initial
distribution (a standard normal), so the sampler learns both to mix and to
burn in. :math:`\lambda^2 = 0.1` and :math:`10^{-4}` added to :math:`\delta`, as in
the public code. The chains then move by the usual accept/reject (outside the
gradient).

Two options of the paper's experiments:

* Temperature annealing (``temperature``): iteration :math:`i` trains on the
  tempered target :math:`p(x)^{1/T_i}` (chains and fresh samples alike), with
  :math:`T_i` an optax schedule decreasing to 1, e.g. the public code's geometric
  ``optax.exponential_decay(10.0, 50, 0.98, staircase=True, end_value=1.0)``.
  Broad tempered modes overlap, so the sampler learns jumps between them (the
  mixture of Gaussians).
* First-order force gradients (``differentiate_force=False``): the loss's
  gradient treats :math:`\nabla\log p` inside the leapfrog as a constant (no
  second derivatives of :math:`\log p`; the forward pass is unchanged). On a
  rough target the Hessian is large (:math:`\sim 1/\eta = 100` on the rough well)
  and :math:`\partial x_K/\partial\theta`, a product of :math:`K` step Jacobians,
  can grow exponentially in :math:`K`, like a chaotic system's sensitivity, so
  the exact gradient explodes and clipping only bounds its size, not its
  direction. Cutting the curvature path keeps the gradient bounded
  (measurements in the L2HMC guide).

As in :mod:`metaoptax.l2o.training`, :func:`init_training` gives a
:class:`TrainingState` (parameters, optimizer state, chains, masks, PRNG key,
counters) and :func:`build_training_step` the jit-able ``step(state) -> (state,
info)`` of one iteration, whose PRNG key is ``fold_in(state.key,
state.iteration)``: a run is a pure function of its starting state, whatever
``log_every`` and wherever it was interrupted. Updates with a non-finite loss or
gradient are skipped and counted. :func:`train` runs the step, with progress,
the chains sharded over a ``jax.sharding.Mesh`` (``mesh=``) and orbax
checkpoints (``checkpoint_dir=``) from which a run resumes bit for bit.
"""

from __future__ import annotations

import functools
import os
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from metaoptax._src import loop
from metaoptax._src.data_parallel import (DataParallel, data_parallel, hashable_axis,
                                          on_local_device)
from metaoptax._src.finite_update import apply_if_finite
from metaoptax._src.progress import Progress
from metaoptax.l2hmc import local_step_sizes, trajectory_length
from metaoptax.l2hmc.adaptation import (CONVERGED_RHAT, SLOPES, BurnIn, _check_arguments,
                                        burn_in, lengthen_burn_in, pool_burn_in, settle)
from metaoptax.l2hmc.dynamics import L2HMCConfig, L2HMCParams, init_params, make_masks
from metaoptax.l2hmc.integrators import INTEGRATORS
from metaoptax.l2hmc.kernel import (L2HMCState, SamplingAlgorithm, draw_step_scale, init,
                                    is_divergent, l2hmc, propose)
from metaoptax.l2hmc.targets import Target
from metaoptax.l2hmc.whitening import Whitening, to_whitened

__all__ = ("TrainingConfig", "TrainingState", "TrainingInfo", "TrainingResult", "esjd_loss",
           "OBJECTIVES", "objective_loss", "default_optimizer", "init_training",
           "build_training_step", "train", "rotation_step_sizes")


class TrainingConfig(NamedTuple):
  """The chains and the loss of L2HMC training.

  The sampler's training (:class:`metaoptax.l2o.TrainingConfig` configures the
  meta-training of a learned optimizer).

  The defaults are the recipe for a posterior nobody configured for (with
  :class:`metaoptax.l2hmc.L2HMCConfig`'s): 32 chains, a warm-up, the objective
  ``"esjd_squares"`` on the chains alone, and non-finite chains dropped from the gradient.

  Attributes:
    num_chains: chains (vmapped; split over the mesh's data axis), started from
      a standard normal unless given (``positions=`` of :func:`init_training`).
    scale: :math:`\\lambda^2` of the loss.
    aux_weight: weight of the loss on fresh samples from the initial distribution.
    temperature: :math:`T`, a number or an optax schedule of the iteration;
      training targets :math:`p^{1/T}` (annealing if the schedule decreases to 1).
    differentiate_force: ``False``: no gradient through :math:`\\nabla \\log p`
      inside the leapfrog (for rough targets; see the module docstring).
    objective: ``"esjd"`` (the paper's), ``"esjd_squares"`` (also the jumps of
      :math:`z^2`, which reflections do not make) or ``"esjd_lag1"`` (a penalty
      on negative lag-1 autocorrelation) or ``"esjd_coordinates"`` (both terms of
      ``"esjd_squares"`` per coordinate) or ``"esjd_and_coordinates"`` (the
      paper's plus ``"esjd_coordinates"``); see :func:`objective_loss`.
    warmup_iterations: if > 0, :func:`init_training` first runs
      :func:`metaoptax.l2hmc.warmup` for this many HMC transitions of the
      chains. Then the sampler moves the standardized coordinates
      :math:`z = (x - \\hat\\mu)/\\hat\\sigma` (:mod:`metaoptax.l2hmc.whitening`;
      ``result.whitening`` for sampling), its step sizes start at the warm-up's
      :math:`h` (per coordinate with ``config.per_coordinate``), the chains start
      where the warm-up ended, and the objective measures jumps in :math:`z`.
      With ``config.local_step_sizes`` the tuning variable starts at the warm-up's
      fit (:func:`metaoptax.l2hmc.local_step_sizes.fit`).
    drop_nonfinite_chains: a chain whose contribution to the gradient is not
      finite (a diverging trajectory: its proposal, rejected, overflowed) adds
      nothing to it, instead of the whole update being skipped.
    local_fit: with ``config.local_step_sizes`` and a warm-up, how the warm-up fits the
      step sizes' dependence on the position: ``"saturating"`` (the default: the
      ``"curvature"`` fit with a cap on each coordinate's step size,
      :func:`metaoptax.l2hmc.local_step_sizes.fit_caps`, switched off where the step sizes
      hardly vary over the warm-up's positions,
      :func:`metaoptax.l2hmc.local_step_sizes.keep_if_varying`), ``"curvature"``
      (log-linear: the slopes of minus each coordinate's log curvature on the position,
      deterministic given the positions) or ``"squares"`` (log-linear in each
      coordinate's log square, the earliest fit: noisy, see ``docs/l2hmc.md``); the
      warm-up's ``slopes=`` (:func:`metaoptax.l2hmc.warmup`) is ``"curvature"`` for the
      first two.
    metric: the warm-up's whitening (:func:`metaoptax.l2hmc.warmup`): ``"dense"`` (the
      chains' covariance, for correlated coordinates), ``"low_rank"`` (diagonal plus low
      rank, where the warm-up confirms a correlation; for thousands of coordinates),
      ``"diagonal"``, or ``"auto"``: dense up to ``DENSE_MAX_DIM`` coordinates and low rank
      above, unless the sampler uses local step sizes, a reflection, a scale move or
      interweaving (whose moves are per coordinate: diagonal).
    burn_in_windows: the most burn-in windows of the warm-up (``max_burn_in_windows`` of
      :func:`metaoptax.l2hmc.warmup`; its transitions are jittered as ``config.jitter``), or
      ``None``: ``BURN_IN_WINDOWS``, and ``LOW_RANK_BURN_IN_WINDOWS`` where the warm-up's
      metric is low rank. Its burn-in travels with per-coordinate scales alone (the dense
      metric's with each chain's Newton metric), so on a posterior whose coordinates
      correlate strongly its chains take more windows to agree before the fit.
  """

  num_chains: int = 32
  scale: float = 0.1
  aux_weight: float = 0.0
  temperature: float | optax.Schedule = 1.0
  differentiate_force: bool = True
  objective: str = "esjd_squares"
  warmup_iterations: int = 300
  drop_nonfinite_chains: bool = True
  local_fit: str = "saturating"
  metric: str = "auto"
  burn_in_windows: int | None = None


class TrainingState(NamedTuple):
  """Everything a training run carries from one iteration to the next.

  Attributes:
    params: the :class:`L2HMCParams` being trained.
    opt_state: the optimizer's state.
    chains: the chains' :class:`L2HMCState`, leaves ``(num_chains, ...)``, split over the
      mesh's data axis.
    masks: ``(K, dim)``, the sampler's fixed masks.
    key: typed PRNG key; iteration ``i`` draws from ``fold_in(key, i)``.
    iteration: int32 scalar, the iterations done.
    skipped_updates: int32 scalar, the updates skipped (non-finite loss or gradient).
    whitening: the warm-up's :class:`Whitening`; ``None`` without a warm-up.
  """

  params: L2HMCParams
  opt_state: Any
  chains: L2HMCState
  masks: jax.Array
  key: jax.Array
  iteration: jax.Array
  skipped_updates: jax.Array
  whitening: Whitening | None = None


class TrainingInfo(NamedTuple):
  """What one iteration (:func:`build_training_step`) reports.

  Attributes:
    loss: the training loss of the iteration (:attr:`TrainingConfig.objective`).
    acceptance: the mean acceptance probability of the chains' proposals.
    finite: bool; false where the update was skipped (a non-finite loss or gradient).
    num_divergent: int32: the chains whose proposal diverged
      (``L2HMCInfo.is_divergent``: not finite).
  """

  loss: jax.Array
  acceptance: jax.Array
  finite: jax.Array
  num_divergent: jax.Array


class TrainingResult(NamedTuple):
  """What :func:`train` returns.

  Attributes:
    params: the trained :class:`L2HMCParams`.
    masks: ``(K, dim)``, the sampler's fixed masks of the coordinates each leapfrog step
      updates.
    losses: one loss per iteration of this call (NaN where the update was skipped).
    acceptance: the chains' mean acceptance probability, one per iteration of this call.
    seconds: the wall-clock time of this call.
    skipped_updates: the updates skipped for a non-finite loss or gradient (whole run).
    state: the :class:`TrainingState` to continue from (``init_state=``) or to checkpoint.
    whitening: the warm-up's :class:`Whitening` (already inside ``sampler``); ``None``
      without a warm-up.
    sampler: the trained sampler, its whitening included
      (:class:`SamplingAlgorithm`: ``init(position)``, ``step(rng_key, state)``).
    num_divergent: the chains' proposals in this call's iterations that diverged (not
      finite, rejected).
  """

  params: L2HMCParams
  masks: jax.Array
  losses: np.ndarray
  acceptance: np.ndarray
  seconds: float
  skipped_updates: int = 0
  state: TrainingState | None = None
  whitening: Whitening | None = None
  sampler: SamplingAlgorithm | None = None
  num_divergent: int = 0


def _accepted_jump(jump, acceptance):
  """``jump * acceptance``; 0 where the jump is not finite (a diverged, rejected proposal)."""
  return jnp.where(jnp.isfinite(jump), jump, 0.0) * acceptance


def esjd_loss(x_before, x_after, acceptance, scale: float = 0.1, eps: float = 1e-4):
  r""":math:`\lambda^2/\delta - \delta/\lambda^2`, :math:`\delta = \|x-x'\|^2 A + \epsilon`.

  The paper's loss on the expected squared jump distance: a non-finite proposal counts
  as no jump.

  Args:
    x_before: positions ``(..., dim)`` before the transition.
    x_after: the proposals ``(..., dim)``.
    acceptance: :math:`A`, their acceptance probabilities ``(...)``.
    scale: :math:`\lambda^2`.
    eps: :math:`\epsilon`, which keeps :math:`\delta > 0`.

  Returns:
    The loss per chain, shape ``(...)``.
  """
  delta = _accepted_jump(jnp.sum((x_before - x_after) ** 2, axis=-1), acceptance) + eps
  return scale / delta - delta / scale


#: With ``L2HMCConfig(reflection=True)``, the K leapfrog steps turn a whitened (unit-scale)
#: Gaussian coordinate by at most this angle: a quarter period, where its square
#: decorrelates (:func:`objective_loss`, ``"squares_coordinates"``;
#: :func:`rotation_step_sizes`).
QUARTER_PERIOD = 0.5 * np.pi


def rotation_step_sizes(step_size, num_steps: int, integrator: str = "velocity_verlet"):
  r"""The step sizes :math:`(\varepsilon_x, \varepsilon_v)` whose ``num_steps`` leapfrog
  steps turn a unit Gaussian coordinate exactly, by at most a quarter period.

  One leapfrog step (velocity Verlet: a half kick :math:`\varepsilon_v/2`, a drift
  :math:`\varepsilon_x`, a half kick) on :math:`U(z) = z^2/2` is the linear map

  .. math::

    \begin{pmatrix} z' \\ v' \end{pmatrix} = \begin{pmatrix} c & \varepsilon_x \\
    -\varepsilon_v(1 - \varepsilon_x\varepsilon_v/4) & c \end{pmatrix}
    \begin{pmatrix} z \\ v \end{pmatrix}, \qquad c = 1 - \varepsilon_x\varepsilon_v/2,

  of determinant 1. It is the rotation by :math:`\theta` (which keeps
  :math:`z^2 + v^2`: acceptance 1) if and only if :math:`\varepsilon_x = \sin\theta` and
  :math:`\varepsilon_v = 2\tan(\theta/2)`; position Verlet (a half drift, a kick, a half
  drift) swaps the roles, :math:`\varepsilon_x = 2\tan(\theta/2)`,
  :math:`\varepsilon_v = \sin\theta` (:mod:`metaoptax.l2hmc.integrators`). Equal step sizes
  :math:`h` turn by the same :math:`\theta = 2\arcsin(h/2)` (the same product
  :math:`\varepsilon_x\varepsilon_v = h^2`) but change the energy: at :math:`K = 1` and a
  quarter period (:math:`h = \sqrt2`) the acceptance is
  :math:`\min(1, e^{z^2/4 - v^2/2})`. Here :math:`\theta` is the angle of the warm-up's
  ``step_size`` :math:`h`, capped at :data:`QUARTER_PERIOD` over K.

  Args:
    step_size: the warm-up's (equal) step size :math:`h`, a number or an array.
    num_steps: K.
    integrator: ``L2HMCConfig.integrator``, the splitting the step sizes are for.

  Returns ``(eps_x, eps_v)`` (arrays of ``step_size``'s shape and dtype).
  """
  step_size = jnp.asarray(step_size)
  theta = jnp.minimum(2.0 * jnp.arcsin(jnp.minimum(0.5 * step_size, 1.0)),
                      QUARTER_PERIOD / num_steps)
  return INTEGRATORS[integrator].rotation(theta)


#: ``TrainingConfig.local_fit``'s choices: the warm-up's slopes (:data:`SLOPES`), or the
#: curvature's with caps (``"saturating"``).
LOCAL_FITS = SLOPES + ("saturating",)

#: The training objectives (:func:`objective_loss`).
OBJECTIVES = ("esjd", "esjd_squares", "esjd_lag1", "esjd_coordinates", "esjd_and_coordinates",
              "squares_coordinates")


def objective_loss(objective: str, z_before, z_after, acceptance, scale: float = 0.1,
                   eps: float = 1e-4):
  r"""The training loss of each chain's proposal, in (standardized) coordinates ``z``.

  With :math:`\ell(\delta) = \lambda^2/\delta - \delta/\lambda^2` (:func:`esjd_loss`) and
  :math:`A` the acceptance probability:

  * ``"esjd"``: :math:`\ell(A\|z - z'\|^2 + \epsilon)`, the paper's. It rewards
    :math:`z' = -z` (a symmetry of every target here) most, and a reflection mixes
    no even statistic.
  * ``"esjd_squares"``: :math:`\ell(A\|z - z'\|^2 + \epsilon) +
    \ell(\tfrac12 A\|z^2 - z'^2\|^2 + \epsilon)`. A reflection leaves :math:`z^2`
    in place, so its second term is :math:`\lambda^2/\epsilon`: only proposals
    that move both :math:`z` and :math:`z^2` score well (:math:`\tfrac12`: the
    variance of :math:`z^2` for a standard normal coordinate is 2).
  * ``"esjd_lag1"``: the paper's plus
    :math:`\frac{4}{\lambda^2}\,\overline{\|z\|^2}\,\max(0, -\hat\rho)`, with
    :math:`\hat\rho = \overline{A\, z\cdot z' + (1-A)\|z\|^2} / \overline{\|z\|^2}`
    the chains' lag-1 autocorrelation (bars: means over chains; the penalty is
    spread evenly over them). Since :math:`E\|z-z'\|^2A = 2E\|z\|^2(1-\rho)`,
    the penalty turns the reward for :math:`\rho < 0` into a cost: the optimum
    moves from :math:`\rho = -1` to :math:`\rho = 0`.
  * ``"esjd_coordinates"``: both terms of ``"esjd_squares"`` per coordinate,
    averaged over the :math:`d` coordinates:
    :math:`\frac1d\sum_i \big[\ell(A(z_i - z_i')^2 + \epsilon) +
    \ell(\tfrac12 A(z_i^2 - z_i'^2)^2 + \epsilon)\big]`. Every coordinate's barrier
    :math:`\lambda^2/\delta` charges a proposal that leaves that coordinate (or its
    square) in place, so a jump of the whole norm can no longer hide a coordinate
    that is stuck or only reflected (the ESS scores take the minimum over
    coordinates). A mode crossing that reflects one coordinate (the mixture's
    :math:`z_0 \to -z_0`) is not charged as long as :math:`z_0^2` moves within
    the mode and the other coordinates move as well.
  * ``"esjd_and_coordinates"``: the sum of ``"esjd"`` and ``"esjd_coordinates"``,
    mode crossings and within-mode mixing together. The paper's term rewards
    the long jump of a crossing in full (a reflection :math:`z \to -z` too); the
    per-coordinate terms charge a proposal that leaves a coordinate's value or
    square in place, so a pure reflection pays the squares' barrier while a
    crossing that lands elsewhere in the other mode scores on both.
  * ``"squares_coordinates"``: the jumps of each coordinate's square alone, through the
    logarithm of their mean over the chains,
    :math:`-\frac1d\sum_i \log\big(\overline{\tfrac12 A(z_i^2 - z_i'^2)^2} + \epsilon\big)`
    (the bar a mean over chains; spread evenly over them), for a sampler whose odd
    statistics mix by other means (``L2HMCConfig(reflection=True)``: the reflection
    through the centre flips every :math:`z_i`). For a standard normal coordinate moved by
    exact dynamics for a time :math:`T`, :math:`E(z^2 - z'^2)^2 = 4\sin^2 T`: the optimum is
    a quarter period, where :math:`z^2` decorrelates (lag-1 autocorrelation
    :math:`\cos^2 T`), not the half period that the jump of :math:`z` rewards. The logarithm
    weighs the coordinates alike whatever their scale, and the mean over chains replaces
    the per-chain barrier :math:`\lambda^2/\delta`, whose gradient is dominated by the
    few chains with a small jump.

  Args:
    objective: one of :data:`OBJECTIVES` (above).
    z_before: the chains' positions ``(chains, dim)`` before the transition.
    z_after: their proposals ``(chains, dim)``.
    acceptance: :math:`A`, the acceptance probabilities ``(chains,)``.
    scale: :math:`\lambda^2`.
    eps: :math:`\epsilon`.

  Returns:
    Per-chain losses ``(chains,)``.
  """
  loss = esjd_loss(z_before, z_after, acceptance, scale, eps)
  if objective == "esjd_squares":
    squares = _accepted_jump(0.5 * jnp.sum((z_before**2 - z_after**2) ** 2, axis=-1),
                             acceptance) + eps
    loss = loss + scale / squares - squares / scale
  elif objective == "esjd_lag1":
    norm = jnp.sum(z_before**2, axis=-1)
    lag1 = _accepted_jump(jnp.sum(z_before * z_after, axis=-1), acceptance) + (
        1.0 - acceptance) * norm
    rho = jnp.mean(lag1) / jnp.mean(norm)
    loss = loss + 4.0 / scale * jnp.mean(norm) * jnp.maximum(0.0, -rho)
  elif objective == "esjd_coordinates":
    loss = _coordinates_loss(z_before, z_after, acceptance, scale, eps)
  elif objective == "esjd_and_coordinates":
    loss = loss + _coordinates_loss(z_before, z_after, acceptance, scale, eps)
  elif objective == "squares_coordinates":
    squares = _accepted_jump(0.5 * (z_before**2 - z_after**2) ** 2, acceptance[..., None])
    loss = jnp.full_like(loss, -jnp.mean(jnp.log(jnp.mean(squares, axis=0) + eps)))
  elif objective != "esjd":
    raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}.")
  return loss


def _coordinates_loss(z_before, z_after, acceptance, scale, eps):
  """``"esjd_coordinates"``'s per-chain loss (:func:`objective_loss`)."""
  jumps = _accepted_jump((z_before - z_after) ** 2, acceptance[..., None]) + eps
  squares = _accepted_jump(0.5 * (z_before**2 - z_after**2) ** 2, acceptance[..., None]) + eps
  return jnp.mean(scale / jumps - jumps / scale + scale / squares - squares / scale, axis=-1)


@jax.custom_vjp
def _finite_cotangent(tree):
  """The identity; its cotangent is zeroed unless every entry is finite (vmapped over
  per-chain copies of the parameters: per chain, so a diverged chain drops out of the
  gradient)."""
  return tree


def _finite_cotangent_fwd(tree):
  return tree, None


def _finite_cotangent_bwd(_, cotangent):
  finite = jnp.all(jnp.stack([jnp.all(jnp.isfinite(a)) for a in jax.tree.leaves(cotangent)]))
  return (jax.tree.map(lambda a: jnp.where(finite, a, jnp.zeros_like(a)), cotangent),)


_finite_cotangent.defvjp(_finite_cotangent_fwd, _finite_cotangent_bwd)


def _first_order(logdensity_fn: Callable) -> Callable:
  """``logdensity_fn`` whose gradient is a constant to further differentiation."""

  @jax.custom_jvp
  def first_order(x):
    return logdensity_fn(x)

  @first_order.defjvp
  def _jvp(primals, tangents):
    value, grad = jax.value_and_grad(logdensity_fn)(primals[0])
    return value, jnp.vdot(jax.lax.stop_gradient(grad), tangents[0])

  return first_order


@functools.cache
def default_optimizer() -> optax.GradientTransformation:
  """The sampler's training optimizer by default: the paper's Adam.

  Adam with learning rate 1e-3, decayed by 0.96 every 1000 steps (staircase). Not
  :func:`metaoptax.l2o.default_optimizer`, the meta-optimizer of a learned optimizer.
  The same object on every call, so runs with the default share compiled steps.

  Returns:
    An ``optax.GradientTransformation``.
  """
  return optax.adam(optax.exponential_decay(1e-3, 1000, 0.96, staircase=True))


#: ``TrainingConfig(metric="auto")`` whitens with a dense covariance up to this dimension
#: (its cost per gradient grows as the square of the dimension, its estimate's error too), and
#: with diagonal plus low rank above.
DENSE_MAX_DIM = 256
METRICS = ("auto", "dense", "low_rank", "diagonal")
#: ``TrainingConfig(burn_in_windows=None)``'s most burn-in windows, and with the low-rank metric
BURN_IN_WINDOWS, LOW_RANK_BURN_IN_WINDOWS = 4, 12
#: the lengthened burn-in continues while each of its windows leaves the split R-hat at most
#: this fraction of the short burn-in's, and its later windows and the sampler's cap stay long
#: only where it ends so, or below ``CONVERGED_RHAT`` (:func:`_kept_lengthening`)
LENGTHENED_RHAT_RATIO = 0.5
#: the most windows of the dense burn-in's pooled continuation (:func:`_jitted_warmup`): where
#: the Newton metrics leave the chains apart at a small step size, the pooled covariance's
#: step size grows within a window or two and the chains then need a few windows at a
#: quarter period each to agree; twice the short burn-in's windows bound its cost
POOLED_BURN_IN_WINDOWS = 2 * BURN_IN_WINDOWS


def _burn_in_windows(config: L2HMCConfig, training: TrainingConfig) -> int:
  """The warm-up's most burn-in windows of ``training.burn_in_windows`` (``None`` decided from
  the metric)."""
  if training.burn_in_windows is not None:
    return training.burn_in_windows
  if _metric(config, training) == "low_rank":
    return LOW_RANK_BURN_IN_WINDOWS
  return BURN_IN_WINDOWS


def _metric(config: L2HMCConfig, training: TrainingConfig) -> str:
  """The warm-up's metric of ``training.metric`` (``"auto"`` decided from the sampler)."""
  per_coordinate_moves = (config.local_step_sizes or config.reflection or config.scale_move
                          or config.interweaving is not None)
  if training.metric in ("dense", "low_rank") and per_coordinate_moves:
    raise ValueError(f'metric="{training.metric}" does not go with local step sizes, a '
                     'reflection, a scale move or interweaving: use metric="diagonal" or "auto".')
  if training.metric != "auto":
    return training.metric
  if per_coordinate_moves:
    return "diagonal"
  return "dense" if config.dim <= DENSE_MAX_DIM else "low_rank"


def _check_training(training: TrainingConfig) -> None:
  """Raises ``ValueError`` for a ``TrainingConfig`` that no run can use."""
  temperature = training.temperature
  if not callable(temperature) and not temperature > 0:
    raise ValueError(f"temperature must be > 0 or a schedule, got {temperature}.")
  if training.num_chains < 1:
    raise ValueError(f"num_chains must be >= 1, got {training.num_chains}.")
  if training.objective not in OBJECTIVES:
    raise ValueError(f"objective must be one of {OBJECTIVES}, got {training.objective!r}.")
  windows = training.burn_in_windows
  if windows is not None and (isinstance(windows, bool)
                              or not (isinstance(windows, int) and windows >= 1)):
    raise ValueError(f"burn_in_windows must be None or an int >= 1, got "
                     f"{training.burn_in_windows!r}.")
  if training.metric not in METRICS:
    raise ValueError(f"metric must be one of {METRICS}, got {training.metric!r}.")
  if training.local_fit not in LOCAL_FITS:
    raise ValueError(f"local_fit must be one of {LOCAL_FITS}, got {training.local_fit!r}.")
  if training.warmup_iterations and training.warmup_iterations < 16:
    raise ValueError("warmup_iterations must be 0 or >= 16, got "
                     f"{training.warmup_iterations}.")
  if training.warmup_iterations and training.num_chains < 2:
    raise ValueError("the warm-up (warmup_iterations > 0) needs num_chains >= 2, got "
                     f"{training.num_chains}.")


def _with_dim(target: Target, config: L2HMCConfig) -> L2HMCConfig:
  """``config`` with ``dim`` filled from the target (an error where they differ)."""
  if not isinstance(target, Target):
    raise TypeError(f"target must be a metaoptax.l2hmc.Target, got {type(target).__name__}: "
                    "Target(logdensity_fn=..., dim=...) wraps a log density.")
  if config.dim is None:
    return config._replace(dim=target.dim)
  if config.dim != target.dim:
    raise ValueError(f"config.dim={config.dim} but the target has dim={target.dim}.")
  return config


def _tempered(logdensity_fn: Callable, temperature, differentiate_force: bool) -> Callable:
  """``iteration -> (x -> log p(x) / T(iteration))`` (first-order force if asked)."""
  base = logdensity_fn if differentiate_force else _first_order(logdensity_fn)

  def at(iteration):
    inverse_temperature = 1.0 / (temperature(iteration) if callable(temperature) else temperature)
    return lambda x: base(x) * inverse_temperature

  return at


@functools.cache
def _jitted_burn_in(logdensity_fn: Callable, num_steps: int, num_iterations: int,
                    init_step_size: float, slopes: str, scales: str, metric: str,
                    max_burn_in_windows: int, jitter: float) -> Callable:
  """The jitted :func:`metaoptax.l2hmc.adaptation.burn_in` of one target and configuration
  (runs from other seeds reuse its compilation)."""
  return jax.jit(lambda positions, key: burn_in(
      key, logdensity_fn, positions, num_steps=num_steps, num_iterations=num_iterations,
      init_step_size=init_step_size, slopes=slopes, scales=scales, metric=metric,
      max_burn_in_windows=max_burn_in_windows, jitter=jitter))


@functools.cache
def _jitted_lengthen_burn_in(logdensity_fn: Callable, num_steps: int, num_iterations: int,
                             slopes: str, scales: str, metric: str, max_burn_in_windows: int,
                             jitter: float) -> Callable:
  """The jitted :func:`metaoptax.l2hmc.adaptation.lengthen_burn_in` of one target and
  configuration, stopped after a window whose split R-hat exceeds ``LENGTHENED_RHAT_RATIO``
  of the short burn-in's (:func:`_kept_lengthening`)."""
  return jax.jit(lambda burnt, key: lengthen_burn_in(
      key, logdensity_fn, burnt, num_steps=num_steps, num_iterations=num_iterations,
      slopes=slopes, scales=scales, metric=metric, max_burn_in_windows=max_burn_in_windows,
      jitter=jitter, max_rhat_ratio=LENGTHENED_RHAT_RATIO))


@functools.cache
def _jitted_pool_burn_in(logdensity_fn: Callable, num_steps: int, num_iterations: int,
                         slopes: str, jitter: float) -> Callable:
  """The jitted :func:`metaoptax.l2hmc.adaptation.pool_burn_in` of one target and
  configuration, at most ``POOLED_BURN_IN_WINDOWS`` windows."""
  return jax.jit(lambda burnt, key: pool_burn_in(
      key, logdensity_fn, burnt, num_steps=num_steps, num_iterations=num_iterations,
      slopes=slopes, max_burn_in_windows=POOLED_BURN_IN_WINDOWS, jitter=jitter))


@functools.cache
def _jitted_settle(logdensity_fn: Callable, num_steps: int, num_iterations: int, slopes: str,
                   scales: str, location: str, metric: str, jitter: float,
                   scale_num_steps: int) -> Callable:
  """The jitted :func:`metaoptax.l2hmc.adaptation.settle` of one target and configuration."""
  return jax.jit(lambda burnt, key: settle(
      key, logdensity_fn, burnt, num_steps=num_steps, num_iterations=num_iterations,
      slopes=slopes, scales=scales, location=location, metric=metric, jitter=jitter,
      scale_num_steps=scale_num_steps))


def _jitted_warmup(logdensity_fn: Callable, num_steps: int, num_iterations: int,
                   init_step_size: float, slopes: str = "squares",
                   scales: str = "pooled", location: str = "mean",
                   metric: str = "diagonal", max_burn_in_windows: int = 4,
                   jitter: float = 0.5, shorten: bool = False,
                   lengthen: bool = False) -> Callable:
  """The jitted warm-up (:func:`metaoptax.l2hmc.warmup`) of one target and configuration,
  ``(positions, key) -> WarmupResult``, its burn-in and its later windows jitted apart. With
  ``shorten``, window 2 makes the fewer leapfrog steps of a quarter period at the burn-in's
  step size (:func:`_settle_num_steps`), where that is fewer than ``num_steps``. With
  ``lengthen``, where the burn-in's chains still disagree and its step size makes a quarter
  period longer than ``trajectory_length.MAX_NUM_STEPS`` steps, the dense burn-in first
  continues with the chains' pooled covariance (:func:`metaoptax.l2hmc.adaptation.pool_burn_in`,
  at most ``POOLED_BURN_IN_WINDOWS`` windows of ``num_steps``: the Newton metrics' small step
  size, not the trajectory's length, left the chains apart), and where its chains still
  disagree at such a step size (the diagonal burn-in's at once), the burn-in continues with
  that many (:func:`_lengthened_num_steps`), each later window a quarter period at the step
  size the one before it ended with, at most the first's (:func:`_lengthen_by_quarter_periods`),
  and windows 2 and
  3 keep its last window's steps where that brought the chains together
  (:func:`_kept_lengthening`)."""

  def run(positions, key):
    _check_arguments(jnp.asarray(positions), num_iterations=num_iterations,
                     target_acceptance=0.8, init_step_size=init_step_size, slopes=slopes,
                     scales=scales, location=location, metric=metric,
                     max_burn_in_windows=max_burn_in_windows, converged_rhat=CONVERGED_RHAT)
    burnt = _jitted_burn_in(logdensity_fn, num_steps, num_iterations, init_step_size, slopes,
                            scales, metric, max_burn_in_windows, jitter)(positions, key)
    steps = num_steps
    longer = _lengthened_num_steps(burnt) if lengthen else None
    if longer is not None and longer > num_steps and metric == "dense":
      # the Newton metrics' small step size: the pooled covariance first, longer trajectories
      # only where its chains still disagree at a small step size
      burnt = _jitted_pool_burn_in(logdensity_fn, num_steps, num_iterations, slopes,
                                   jitter)(burnt, jax.random.fold_in(key, 2))
      longer = _lengthened_num_steps(burnt)
    if longer is not None and longer > num_steps:
      lengthened = _lengthen_by_quarter_periods(
          logdensity_fn, burnt, longer, num_steps, num_iterations, slopes, scales, metric,
          max_burn_in_windows, jitter, jax.random.fold_in(key, 1))
      burnt, steps = _kept_lengthening(burnt, lengthened, num_steps)
    scale_num_steps = _settle_num_steps(burnt, steps) if shorten else steps
    return _jitted_settle(logdensity_fn, steps, num_iterations, slopes, scales, location,
                          metric, jitter, scale_num_steps)(burnt, key)

  return run


def _lengthened_num_steps(burnt: BurnIn) -> int | None:
  """The burn-in's leapfrog steps from here where its chains still disagree (its split R-hat
  at least ``CONVERGED_RHAT``) and a quarter period of the widest whitened direction at its
  step size takes more than ``trajectory_length.MAX_NUM_STEPS`` steps: that quarter period,
  at most ``trajectory_length.LONG_MAX_NUM_STEPS`` steps (short trajectories at a small step
  size make a random walk that leaves the chains apart); else ``None``."""
  if float(burnt.rhat) < CONVERGED_RHAT:
    return None
  steps = trajectory_length.num_steps_for(
      float(jnp.exp(burnt.log_h)), trajectory_length.LONG_MAX_NUM_STEPS,
      widest_variance=float(burnt.widest_variance))
  return steps if steps > trajectory_length.MAX_NUM_STEPS else None


def _lengthen_by_quarter_periods(logdensity_fn: Callable, burnt: BurnIn, longer: int,
                                 num_steps: int, num_iterations: int, slopes: str, scales: str,
                                 metric: str, max_burn_in_windows: int, jitter: float,
                                 key: jax.Array) -> BurnIn:
  """The lengthened burn-in (:func:`metaoptax.l2hmc.adaptation.lengthen_burn_in`) from
  ``burnt``, one window at a time, up to ``max_burn_in_windows``: the first with ``longer``
  leapfrog steps per transition (:func:`_lengthened_num_steps`), each later one with a
  quarter period at the step size the window before it ended with, at most ``longer``
  (:func:`_lengthened_window_num_steps`); it stops after a window whose chains agree (split
  R-hat below ``CONVERGED_RHAT``) or whose split R-hat exceeds ``LENGTHENED_RHAT_RATIO`` of
  ``burnt``'s (the long trajectories do not bring the chains together). The burn-in's step
  size grows as its whitening (the dense metric's Newton metrics, the diagonal one's scales)
  fits the chains' spread better, and a trajectory of the first window's length would then
  run past the quarter period that lets the chains travel, for more gradients; where it
  falls (chains still crossing a steeper region), the trajectory stays the first window's,
  so that no window costs more than the first."""
  bound = LENGTHENED_RHAT_RATIO * float(burnt.rhat)
  lengthened, steps = burnt, longer
  for _ in range(max_burn_in_windows):
    lengthened = _jitted_lengthen_burn_in(logdensity_fn, steps, num_iterations, slopes, scales,
                                          metric, 1, jitter)(lengthened, key)
    rhat = float(lengthened.rhat)
    if rhat < CONVERGED_RHAT or not rhat <= bound:
      break
    steps = _lengthened_window_num_steps(lengthened, num_steps, longer)
  return lengthened


def _lengthened_window_num_steps(lengthened: BurnIn, num_steps: int, longer: int) -> int:
  """The leapfrog steps per transition of the lengthened burn-in's next window: a quarter
  period of the widest whitened direction at the step size its last window ended with
  (:func:`metaoptax.l2hmc.trajectory_length.num_steps_for`), between the short burn-in's
  ``num_steps`` and the first lengthened window's ``longer``."""
  return max(num_steps, trajectory_length.num_steps_for(
      float(jnp.exp(lengthened.log_h)), longer,
      widest_variance=float(lengthened.widest_variance)))


def _kept_lengthening(burnt: BurnIn, lengthened: BurnIn, num_steps: int) -> tuple[BurnIn, int]:
  """The burn-in the warm-up continues from after :func:`_lengthened_num_steps` lengthened
  ``burnt`` (its ``num_steps``) into ``lengthened``, and the leapfrog steps of its later
  windows: ``lengthened`` and its steps where they brought the chains together (its split
  R-hat below ``CONVERGED_RHAT`` or at most ``LENGTHENED_RHAT_RATIO`` times ``burnt``'s),
  else ``lengthened``'s chains, step size and counts with ``num_steps`` (the long
  trajectories did not make the chains travel, the chains disagree for another reason, a
  funnel's neck, and the later windows and the sampler's cap stay short)."""
  rhat, before = float(lengthened.rhat), float(burnt.rhat)
  if rhat < CONVERGED_RHAT or rhat <= LENGTHENED_RHAT_RATIO * before:
    return lengthened, int(lengthened.num_steps)
  return lengthened._replace(num_steps=num_steps), num_steps


def _settle_num_steps(burnt: BurnIn, num_steps: int) -> int:
  """The leapfrog steps per transition of the warm-up's window 2 (``scale_num_steps`` of
  :func:`metaoptax.l2hmc.adaptation.settle`) where ``adapt`` chooses them: a quarter period
  of the widest whitened direction at the burn-in's last step size
  (:func:`metaoptax.l2hmc.trajectory_length.num_steps_for`, as the sampler's are chosen
  after the warm-up), at most the burn-in's ``num_steps``. The chains have arrived; a quarter
  period decorrelates the draws the whitening is fitted to, and the burn-in's long
  trajectories, made for travel, would cost more gradients for no better draws."""
  return trajectory_length.num_steps_for(
      float(jnp.exp(burnt.log_h)), max(num_steps, 1),
      widest_variance=float(burnt.widest_variance))


def init_training(rng_key: jax.Array, target: Target, config: L2HMCConfig = L2HMCConfig(),
                  training: TrainingConfig = TrainingConfig(), *,
                  optimizer: optax.GradientTransformation | None = None,
                  positions: jax.Array | None = None) -> TrainingState:
  """The state before the first iteration.

  Parameters, masks and the chains' starting points (a standard normal, or
  ``positions`` of shape ``(num_chains, dim)``) are drawn from ``rng_key``; the chains'
  ``log p`` is at the temperature of iteration 0. With ``training.warmup_iterations``,
  the warm-up (:func:`metaoptax.l2hmc.warmup`, on the target at temperature 1) sets the
  step sizes, the chains and the standardized coordinates. Arguments as in :func:`train`
  (``optimizer`` must be the one the step uses). The state is committed to the
  default device, as :func:`train` places it: a loop over
  :func:`build_training_step` shares its compilation.

  Args:
    rng_key: PRNG key of the parameters, masks, starting points and warm-up.
    target: the :class:`Target` to sample.
    config: the sampler's :class:`L2HMCConfig` (``dim`` filled from the target).
    training: the :class:`TrainingConfig`.
    optimizer: the optax optimizer of the sampler's parameters (default
      :func:`default_optimizer`).
    positions: the chains' starting points ``(num_chains, dim)``; ``None``: standard
      normal draws.

  Returns:
    A :class:`TrainingState`.
  """
  return _initial_state(rng_key, target, config, training, optimizer, positions)[0]


def _initial_state(rng_key, target, config, training, optimizer, positions,
                   choose_num_steps=False):
  """:func:`init_training`'s state, the warm-up's :class:`WarmupResult` (``None``
  without a warm-up) and the configuration. With ``choose_num_steps`` (and a warm-up),
  the warm-up runs with ``config.num_steps`` leapfrog steps, and the sampler's number of
  steps then follows from the warm-up's step size
  (:func:`metaoptax.l2hmc.trajectory_length.num_steps_for`), or, where the warm-up measured
  a ``whitened_spread`` :math:`s` (low rank), from the widest whitened coordinate's quarter
  period, the steps and jitter of
  :func:`metaoptax.l2hmc.trajectory_length.num_steps_for_spread` (the most effective draws
  of a unit coordinate's square per gradient); the configuration returned has both."""
  _check_training(training)
  config = _with_dim(target, config)
  optimizer = optimizer or default_optimizer()
  k_params, k_masks, k_chains, key = jax.random.split(rng_key, 4)
  logdensity_fn = _tempered(target.logdensity_fn, training.temperature,
                            training.differentiate_force)(0)
  if positions is None:
    positions = jax.random.normal(k_chains, (training.num_chains, config.dim))
  elif jnp.shape(positions) != (training.num_chains, config.dim):
    raise ValueError(f"positions must have shape (num_chains, dim) = "
                     f"({training.num_chains}, {config.dim}), got {jnp.shape(positions)}.")
  whitening = found = None
  if training.warmup_iterations:
    k_chains, k_warmup = jax.random.split(k_chains)
    # at the target itself (temperature 1): its scales are where the sampler must end
    # the slopes matter only to local step sizes (the curvature's cost too)
    slopes = "squares"
    if config.local_step_sizes:
      slopes = "curvature" if training.local_fit == "saturating" else training.local_fit
    found = _jitted_warmup(target.logdensity_fn, config.num_steps,
                           training.warmup_iterations, config.init_step_size,
                           slopes, "within" if config.reflection else "pooled",
                           "midpoint" if config.reflection else "mean",
                           _metric(config, training), _burn_in_windows(config, training),
                           config.jitter,
                           shorten=choose_num_steps and _metric(config, training) != "low_rank",
                           lengthen=choose_num_steps)(positions, k_warmup)
    positions, whitening = found.positions, found.whitening
    step_size = step_size_v = found.step_size
    if choose_num_steps:
      # the widest whitened direction where the diagonal metric is asked for (adapt's
      # fallback from the dense one): the per-coordinate moves' warm-ups keep the quarter period
      widest = 1.0
      if training.metric == "diagonal" and found.widest_variance is not None:
        widest = found.widest_variance
      # the cap: longer where the warm-up lengthened its trajectories (_lengthened_num_steps)
      cap = trajectory_length.MAX_NUM_STEPS
      if found.num_steps is not None and int(found.num_steps) > config.num_steps:
        cap = trajectory_length.LONG_MAX_NUM_STEPS
      if found.whitened_spread is None:
        config = config._replace(num_steps=trajectory_length.num_steps_for(
            step_size, cap, widest_variance=widest))
      else:  # from the widest coordinate's quarter period, the one that mixes z^2 best
        num_steps, jitter = trajectory_length.num_steps_for_spread(
            float(step_size), float(found.whitened_spread), config.jitter, cap)
        config = config._replace(num_steps=num_steps, jitter=jitter)
    if config.reflection:  # the leapfrog mixes z^2 within a mode: at most a quarter period
      step_size, step_size_v = rotation_step_sizes(step_size, config.num_steps,
                                                    config.integrator)
    if config.per_coordinate:
      step_size = jnp.full((config.dim,), step_size)
    params = init_params(k_params, config, step_size=step_size)
    if config.reflection:  # the exact rotation's momentum step
      params = params._replace(log_step_size_v=jnp.full_like(params.log_step_size_v,
                                                             jnp.log(step_size_v)))
    if config.local_step_sizes:
      local = local_step_sizes.fit(found.log_scale_slopes)
      if training.local_fit == "saturating":
        local = local_step_sizes.fit_caps(local, *found.log_scale_samples)._replace(
            centre=local_step_sizes.fit_centre(*found.log_scale_samples))
        local = local_step_sizes.keep_if_varying(local, found.log_scale_samples[0])
      params = params._replace(local=local)
  else:
    params = init_params(k_params, config)
  chains = jax.vmap(lambda x: init(x, logdensity_fn))(positions)
  zero = jnp.zeros([], jnp.int32)
  return on_local_device(
      TrainingState(params, optimizer.init(params), chains, make_masks(k_masks, config),
                    key, zero, zero, whitening)), found, config


def build_training_step(
    target: Target,
    config: L2HMCConfig = L2HMCConfig(),
    training: TrainingConfig = TrainingConfig(),
    *,
    optimizer: optax.GradientTransformation | None = None,
    mesh: jax.sharding.Mesh | None = None,
    data_axis: str | Sequence[str] | None = None,
) -> Callable[[TrainingState], tuple[TrainingState, TrainingInfo]]:
  """``step(state) -> (state, info)``: one optimizer step, every chain moved once.

  The iteration's key is ``fold_in(state.key, state.iteration)``. The loss
  (module docstring) is averaged over the chains' proposals and over fresh
  standard-normal draws' proposals; the update is skipped (and counted) when
  the loss or its gradient is not finite; then each chain accepts its proposal
  with its acceptance probability. Pure and jit-able.

  With ``mesh``, the chains (and the fresh draws, momenta, proposals) are split
  over the devices of ``data_axis`` (default: every axis of the mesh), the
  parameters and optimizer state are replicated, and the means over chains
  become all-reduces. Arguments as in :func:`train`.

  Args:
    target: the :class:`Target` to sample.
    config: the sampler's :class:`L2HMCConfig` (``dim`` filled from the target).
    training: the :class:`TrainingConfig`.
    optimizer: the optax optimizer of the sampler's parameters; the one
      :func:`init_training` was given (default :func:`default_optimizer`).
    mesh: a ``jax.sharding.Mesh`` to split the chains over; ``None``: one device.
    data_axis: the mesh axes the chains are split over (default: every axis).

  Returns:
    The pure function ``step(state) -> (state, info)``: a :class:`TrainingState` and a
    :class:`TrainingInfo`.
  """
  _check_training(training)
  config = _with_dim(target, config)
  # one step object per configuration: its jit shares train's compilation
  return loop.built(_build_step, target.logdensity_fn, config, training,
                    optimizer or default_optimizer(), mesh, hashable_axis(data_axis))


def _build_step(logdensity_fn: Callable, config: L2HMCConfig, training: TrainingConfig,
                optimizer: optax.GradientTransformation, mesh: jax.sharding.Mesh | None,
                data_axis: str | tuple[str, ...] | None):
  """:func:`build_training_step` of a checked configuration (hashable arguments)."""
  num_chains, scale, aux_weight, temperature, differentiate_force = training[:5]
  objective = training.objective
  drop = training.drop_nonfinite_chains
  parallel = data_parallel(mesh, data_axis, num_chains, "num_chains")
  tempered = _tempered(logdensity_fn, temperature, differentiate_force)

  def transitions(params, masks, states, key, logdensity_fn, whitening):
    k_v, k_d = jax.random.split(key)
    momenta = parallel.shard_batch(jax.random.normal(k_v, states.position.shape))
    directions = parallel.shard_batch(
        jnp.where(jax.random.bernoulli(k_d, shape=(num_chains,)), 1, -1))
    # the local step sizes' tuning noise (reparameterised: w = beta.z + u); zeros unused
    noise = jnp.zeros((num_chains,))
    if config.local_step_sizes:
      noise = jax.random.normal(jax.random.fold_in(key, 1), (num_chains,))
    noise = parallel.shard_batch(noise)
    # the jitter of each chain's step sizes (ones where config.jitter is 0)
    scales = draw_step_scale(jax.random.fold_in(key, 2), config, (num_chains,))
    scales = parallel.shard_batch(jnp.ones((num_chains,)) if scales is None else scales)
    if drop:  # a copy of the parameters per chain, so that each has its own cotangent
      per_chain = jax.tree.map(lambda a: jnp.broadcast_to(a, (num_chains,) + a.shape), params)
      proposals, acceptance, log_det = jax.vmap(
          lambda p, s, v, d, u, c: propose(config, _finite_cotangent(p), masks, logdensity_fn,
                                           s, v, d, whitening, u, c))(
              per_chain, states, momenta, directions, noise, scales)
    else:
      proposals, acceptance, log_det = jax.vmap(
          lambda s, v, d, u, c: propose(config, params, masks, logdensity_fn, s, v, d,
                                        whitening, u, c))(states, momenta, directions, noise,
                                                          scales)
    divergent = jax.vmap(is_divergent)(jax.lax.stop_gradient(proposals),
                                       jax.lax.stop_gradient(log_det))
    return parallel.shard_batch((proposals, acceptance, divergent))

  def chain_losses(before, after, acceptance, whitening):
    if objective == "esjd" and whitening is None:  # the paper's loss, as written
      return esjd_loss(before, after, acceptance, scale)
    if whitening is not None:
      before, after = to_whitened(whitening, before), to_whitened(whitening, after)
    return objective_loss(objective, before, after, acceptance, scale)

  def loss_fn(params, masks, chains, key, logdensity_fn, whitening):
    k_chain, k_fresh, k_init = jax.random.split(key, 3)
    proposals, acceptance, divergent = transitions(params, masks, chains, k_chain,
                                                   logdensity_fn, whitening)
    loss = jnp.mean(chain_losses(chains.position, proposals.position, acceptance, whitening))
    if aux_weight:
      fresh = jax.vmap(lambda x: init(x, logdensity_fn))(
          parallel.shard_batch(jax.random.normal(k_init, (num_chains, config.dim))))
      fresh_proposals, fresh_acceptance, _ = transitions(params, masks, fresh, k_fresh,
                                                         logdensity_fn, whitening)
      loss = loss + aux_weight * jnp.mean(chain_losses(
          fresh.position, fresh_proposals.position, fresh_acceptance, whitening))
    return loss, (proposals, acceptance, divergent)

  def step(state: TrainingState) -> tuple[TrainingState, TrainingInfo]:
    logdensity_fn = tempered(state.iteration)
    chains = state.chains
    if callable(temperature):  # log p and its gradient at this iteration's temperature
      chains = jax.vmap(lambda x: init(x, logdensity_fn))(chains.position)
    chains = parallel.shard_batch(chains)
    k_loss, k_accept = jax.random.split(jax.random.fold_in(state.key, state.iteration))
    (loss, (proposals, acceptance, divergent)), grads = jax.value_and_grad(
        loss_fn, has_aux=True)(
        state.params, state.masks, chains, k_loss, logdensity_fn, state.whitening)
    params, opt_state, finite = apply_if_finite(optimizer, grads, loss, state.params,
                                                state.opt_state)
    params, opt_state = parallel.replicate((params, opt_state))
    accepted = jax.random.uniform(k_accept, acceptance.shape) < acceptance
    chains = parallel.shard_batch(jax.tree.map(
        lambda p, c: jnp.where(accepted.reshape((-1,) + (1,) * (p.ndim - 1)), p, c),
        jax.lax.stop_gradient(proposals), chains))
    skipped = state.skipped_updates + (~finite).astype(jnp.int32)
    new_state = state._replace(params=params, opt_state=opt_state, chains=chains,
                               iteration=state.iteration + 1,
                               skipped_updates=parallel.replicate(skipped))
    return new_state, TrainingInfo(loss, jnp.mean(acceptance), finite,
                                   jnp.sum(divergent, dtype=jnp.int32))

  return step


def _place(parallel: DataParallel, state: TrainingState) -> TrainingState:
  """The state on the devices, outside jit: chains split, everything else replicated."""
  return parallel.place(state._replace(chains=None))._replace(
      chains=parallel.place_batch(state.chains))


def _summarize(infos: TrainingInfo) -> tuple[float, dict]:
  return loop.finite_mean(infos.loss), {"acceptance": float(np.mean(infos.acceptance))}


def train(rng_key: jax.Array, target: Target, config: L2HMCConfig = L2HMCConfig(),
          training: TrainingConfig = TrainingConfig(), *, num_iterations: int = 300,
          optimizer: optax.GradientTransformation | None = None,
          init_state: TrainingState | None = None,
          progress: str | Callable[[Progress], None] | None = "bar",
          log_every: int = 100, mesh: jax.sharding.Mesh | None = None,
          data_axis: str | Sequence[str] | None = None,
          checkpoint_dir: str | os.PathLike | None = None, checkpoint_every: int = 0
          ) -> TrainingResult:
  """Trains the step sizes (and networks, with ``config.use_networks``) of an L2HMC sampler.

  The run is a pure function of its starting state: the same ``init_state``
  gives the same result bit for bit, whatever ``log_every``, and so does a run
  interrupted and resumed from a checkpoint. The host waits for the devices
  only at progress reports and checkpoints.

  Args:
    rng_key: PRNG key of the starting state (:func:`init_training`; unused with
      ``init_state``).
    target: the distribution.
    config: the sampler's configuration (``dim``: the target's where ``None``).
    training: chains, loss and temperature (:class:`TrainingConfig`).
    num_iterations: optimizer steps in the whole run (a resumed run does the
      remaining ones); each moves every chain once.
    optimizer: optax optimizer of the parameters (default :func:`default_optimizer`).
    init_state: the starting state (:func:`init_training`; or ``result.state``
      of an earlier call, to continue). Default: ``init_training(rng_key, target, config,
      training, optimizer=optimizer)``.
    progress: ``"bar"`` (a tqdm bar with the loss, the skipped updates, the
      acceptance and the rate), a callable receiving a
      :class:`metaoptax.Progress` every ``log_every`` iterations and at the
      end (means over those iterations, skipped ones' losses left out;
      ``print`` prints a labelled line), or ``None`` for silence.
    log_every: iterations between progress reports.
    mesh: split the chains over this ``jax.sharding.Mesh`` (data parallel; see
      :func:`build_training_step`). Same results as on one device up to the
      order of float32 sums over chains. Tested with ``Auto`` mesh axes (what
      ``Mesh(devices, names)`` makes); the sampler itself also runs with
      chains sharded over an ``Explicit`` mesh.
    data_axis: the mesh axis (or axes) the chains are split over (default all).
    checkpoint_dir: write the state to ``checkpoint_dir/<iteration>`` (orbax,
      :mod:`metaoptax.checkpoint`) every ``checkpoint_every`` iterations and at
      the end. If it already holds checkpoints, the run resumes from the latest,
      so re-running the same call after an interruption finishes the run. An
      ``init_state`` that is neither the checkpointed run's start nor its
      latest state is an error.
    checkpoint_every: iterations between checkpoints (0: only at the end).

  Returns:
    A :class:`TrainingResult`.
  """
  _check_training(training)
  data_axis = hashable_axis(data_axis)
  config = _with_dim(target, config)
  optimizer = optimizer or default_optimizer()
  chosen = init_state is not None
  if init_state is None:
    init_state = init_training(rng_key, target, config, training, optimizer=optimizer)
  elif init_state.chains.position.shape != (training.num_chains, config.dim):
    raise ValueError(f"init_state has chains of shape {init_state.chains.position.shape}, "
                     f"expected ({training.num_chains}, {config.dim}).")
  parallel = data_parallel(mesh, data_axis, training.num_chains, "num_chains")
  step = loop.jitted(_build_step, target.logdensity_fn, config, training, optimizer, mesh,
                     data_axis)
  run = loop.run(step, init_state, num_iterations=num_iterations,
                 count=lambda s: s.iteration, summarize=_summarize, label="L2HMC training",
                 chosen=chosen, place=functools.partial(_place, parallel), progress=progress,
                 log_every=log_every, checkpoint_dir=checkpoint_dir,
                 checkpoint_every=checkpoint_every)
  return TrainingResult(run.state.params, run.state.masks, run.infos.loss,
                        run.infos.acceptance, run.seconds, int(run.state.skipped_updates),
                        run.state, run.state.whitening,
                        l2hmc(target.logdensity_fn, config, run.state.params, run.state.masks,
                              run.state.whitening), int(np.sum(run.infos.num_divergent)))
