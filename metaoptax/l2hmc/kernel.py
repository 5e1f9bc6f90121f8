r"""The L2HMC transition kernel, blackjax-style.

A transition draws a fresh momentum :math:`v \sim \mathcal N(0, I)` and a direction
:math:`d \in \{+1, -1\}` (each with probability 1/2), runs the generalized
leapfrog :math:`\xi' = L_d(\xi)` and accepts with the Metropolis-Hastings
probability

.. math::

  A(\xi'|\xi) = \min\big(1,\ \exp\big(H(\xi) - H(\xi') + \log|\det J_{L_d}(\xi)|\big)\big),
  \qquad H(x, v) = U(x) + \tfrac12 \|v\|^2,

which is exact because flipping :math:`d` after :math:`L_d` is an involution. A
non-finite acceptance probability counts as 0 (the proposal is rejected). A proposal whose
position, :math:`\log p`, gradient or log-Jacobian is not finite is also counted
(``info.is_divergent``, :func:`is_divergent`), as NUTS counts its divergences: the
trajectory left the region where the log density is defined (or overflowed), and the
chains cannot enter it.
With ``config.retry_divergent`` :math:`= r`, a trajectory whose proposal is rejected is
tried again, with probability :math:`(1 - \alpha_1)^k` (``config.retry_power`` :math:`= k`;
:func:`retry_probability`), from the same start, momentum, direction and jitter with every
step split into :math:`r` steps :math:`r` times smaller, and accepted by delayed rejection
(:func:`retried_acceptance`): where a step size that suits the bulk is too long for a
stiff corner of the posterior (the tail of a stochastic volatility's persistence), the
refined trajectory moves where the first one threw the chain out. A divergent trajectory
(:math:`\alpha_1 = 0`) is always retried; one that a step size suited to the target
rejects by chance seldom is. Vmapped over chains, the retry runs only on transitions where
some chain retries.

With ``config.local_step_sizes`` a transition also draws the step sizes' tuning
variable :math:`w \mid x` and the ratio gains its conditional densities
(:mod:`metaoptax.l2hmc.local_step_sizes`).

With ``config.reflection`` a transition starts with a Metropolis step on the point
reflection through the whitening's location :math:`\mu` (the origin without whitening),

.. math::

  x \to 2\mu - x, \qquad A = \min\big(1,\ p(2\mu - x)/p(x)\big),

an involution of unit Jacobian, so the step leaves :math:`p` invariant, and so does its
composition with the leapfrog move (one gradient evaluation more per transition; none with
``integrator="position_verlet"``, whose trajectories read no gradient at their end points:
then the reflected point costs one evaluation of :math:`\log p` alone,
:mod:`metaoptax.l2hmc.integrators`). It is the
closed form of what the paper's sampler learns on symmetric targets (a reflection),
composed with a move that mixes the even statistics the reflection leaves in place: on a
mixture of two modes symmetric about :math:`\mu` it crosses at every accepted step.

With ``config.interweaving`` (an :class:`metaoptax.l2hmc.interweaving.Interweaving`, a
declared hierarchy :math:`\mu, \log\tau, \theta_j`) a transition then makes
``num_moves`` Metropolis steps on :math:`(\mu, \log\tau)` with
:math:`\tilde\theta = (\theta - \mu)/\tau` held fixed, accepted with
:math:`\min(1, p(T_{s,t}x)\,e^{nt}/p(x))` (one gradient evaluation each): the
non-centered half of an interweaving strategy.

With ``config.scale_move`` :math:`= s > 0` (and local step sizes) a transition then makes a
Metropolis group move along the local model, :math:`z \to T_t z`,
:math:`t \sim \mathcal N(0, s^2)`, accepted with :math:`\min(1, p(T_t z)|\det\partial T_t/
\partial z|/p(z))` (:func:`metaoptax.l2hmc.local_step_sizes.scale_move`; one gradient
evaluation more).

Each move between trajectories evaluates its proposal with the integrator's ``evaluate``
(:math:`\log p` and its gradient for velocity Verlet, :math:`\log p` alone for position
Verlet), and :func:`gradient_evaluations` counts the gradients a transition evaluates.

Usage::

  sampler = metaoptax.l2hmc.l2hmc(target.logdensity_fn, config, params, masks)
  state = sampler.init(position)
  state, info = jax.jit(sampler.step)(rng_key, state)
"""

from __future__ import annotations

import math
import warnings
from typing import Callable, NamedTuple

import jax
import jax.flatten_util
import jax.numpy as jnp
import optax

from metaoptax._src import tree_utils
from metaoptax.l2hmc import interweaving, local_step_sizes
from metaoptax.l2hmc.diagnostics import ConvergenceWarning
from metaoptax.l2hmc.dynamics import L2HMCConfig, L2HMCParams, leapfrog, validate
from metaoptax.l2hmc.integrators import INTEGRATORS, Integrator
from metaoptax.l2hmc.whitening import (Whitening, from_whitened, gradient_from_whitened,
                                       gradient_to_whitened, to_whitened, whitened_logdensity)

__all__ = ("L2HMCState", "L2HMCInfo", "SamplingAlgorithm", "init", "acceptance_probability",
           "gradient_evaluations", "logdensity_evaluations", "propose", "is_divergent",
           "draw_step_scale", "build_kernel", "l2hmc",
           "SampleInfo", "sample_chains")


class L2HMCState(NamedTuple):
  r"""Position of a chain, with its log density and gradient (carried, not recomputed).

  Attributes:
    position: the chain's position, a pytree as ``logdensity_fn`` takes.
    logdensity: :math:`\log p` at ``position``, a scalar.
    logdensity_grad: :math:`\nabla \log p` at ``position``, shaped as ``position``.
  """

  position: jax.Array
  logdensity: jax.Array
  logdensity_grad: jax.Array


class L2HMCInfo(NamedTuple):
  r"""What one transition did.

  Attributes:
    acceptance_rate: :math:`A(\xi'|\xi)`, the Metropolis acceptance probability of the
      proposal (with ``config.retry_divergent``, of the retry's where it retried).
    is_accepted: bool, whether the proposal was accepted.
    direction: the trajectory's direction :math:`d`, +1 or -1.
    log_det_jacobian: :math:`\log|\det \partial\xi'/\partial\xi|` of the proposal's map
      (0 for the networks-off leapfrog, which preserves volume).
    proposal: :math:`x'`, the proposed position (accepted or not).
    num_gradient_evaluations: int32, the gradients of :math:`\log p` the transition
      evaluated (:func:`gradient_evaluations`, and with ``config.retry_divergent`` :math:`r`,
      :math:`(r + 1)K` more where it retried a rejected trajectory).
    is_divergent: bool, the proposal's position, log p, gradient or log-Jacobian is not
      finite (rejected; :func:`is_divergent`); blackjax's name, whose NUTS also counts
      energy errors above 1000. With ``config.retry_divergent``, where the retry could
      not stand in for the divergent trajectory: its acceptance probability is 0 (its
      proposal diverged too; :func:`retried_acceptance`).
  """

  acceptance_rate: jax.Array
  is_accepted: jax.Array
  direction: jax.Array
  log_det_jacobian: jax.Array
  proposal: jax.Array
  num_gradient_evaluations: jax.Array
  is_divergent: jax.Array

  @property
  def num_integration_steps(self) -> jax.Array:
    """The gradients a transition evaluates (:func:`gradient_evaluations`: the leapfrog steps K,
    plus one per move between trajectories with velocity Verlet), under blackjax's name."""
    return self.num_gradient_evaluations


class SamplingAlgorithm(NamedTuple):
  """``init(position, rng_key=None) -> state`` and ``step(rng_key, state) -> (state, info)``.

  The fields and signatures of ``blackjax.base.SamplingAlgorithm``, so a sampler
  runs in blackjax's loops (``blackjax.util.run_inference_algorithm``) without
  metaoptax depending on blackjax.

  Attributes:
    init: ``(position, rng_key=None) -> L2HMCState``: a chain's state at ``position``.
    step: ``(rng_key, state) -> (state, info)``: one transition
      (:class:`L2HMCState`, :class:`L2HMCInfo`).
  """

  init: Callable
  step: Callable


def init(position: jax.Array, logdensity_fn: Callable) -> L2HMCState:
  """The state of a chain at ``position``: its log density and gradient, evaluated once.

  Args:
    position: the chain's position, an array ``(dim,)``.
    logdensity_fn: ``position -> log p(position)``, up to a constant.

  Returns:
    An :class:`L2HMCState`. (:func:`l2hmc`'s ``init`` takes any pytree of positions.)
  """
  logdensity, grad = jax.value_and_grad(logdensity_fn)(position)
  return L2HMCState(position, logdensity, grad)


def _moves(config: L2HMCConfig) -> int:
  """The Metropolis moves a transition makes before its trajectory."""
  return (config.reflection + (config.scale_move > 0)
          + interweaving.gradient_evaluations(config.interweaving))


def gradient_evaluations(config: L2HMCConfig) -> int:
  """The gradients of ``log p`` one transition evaluates.

  One per leapfrog step, and with velocity Verlet one at each point a move between
  trajectories proposes (the reflection, the scale move, each interweaving move);
  position Verlet evaluates none there.

  Args:
    config: the sampler's :class:`L2HMCConfig`.

  Returns:
    An int (:attr:`L2HMCInfo.num_gradient_evaluations` of every transition).
  """
  return config.num_steps + INTEGRATORS[config.integrator].end_point_gradients * _moves(config)


def logdensity_evaluations(config: L2HMCConfig) -> int:
  """The evaluations of ``log p`` without its gradient one transition makes.

  None with velocity Verlet; with position Verlet one at the trajectory's end point and
  one per move between trajectories.

  Args:
    config: the sampler's :class:`L2HMCConfig`.

  Returns:
    An int.
  """
  return INTEGRATORS[config.integrator].end_point_values * (1 + _moves(config))


def _evaluated(position: jax.Array, logdensity_fn: Callable,
               integrator: Integrator) -> L2HMCState:
  """A proposed point's state: ``log p`` and, where the integrator reads it, its gradient."""
  return L2HMCState(position, *integrator.evaluate(position, logdensity_fn))


def acceptance_probability(energy_before, energy_after, log_det):
  r"""``min(1, exp(H - H' + log|det J|))``; non-finite -> 0.

  Args:
    energy_before: :math:`H`, the energy (:math:`-\log p` plus the kinetic energy)
      before the trajectory.
    energy_after: :math:`H'`, the energy at the proposal.
    log_det: :math:`\log|\det J|` of the trajectory's map (0 for the plain leapfrog).

  Returns:
    The Metropolis acceptance probability, of the inputs' broadcast shape; 0 where the
    log ratio is not finite (a diverging trajectory).
  """
  log_ratio = energy_before - energy_after + log_det
  return jnp.where(jnp.isfinite(log_ratio), jnp.exp(jnp.minimum(log_ratio, 0.0)), 0.0)


def is_divergent(proposal: L2HMCState, log_det: jax.Array = 0.0) -> jax.Array:
  """Whether a proposal (of :func:`propose`) diverged.

  A proposal diverged where its position, ``log p``, gradient (zeros where the integrator
  reads none) or log-Jacobian is not finite. Its acceptance probability is then 0
  (:func:`acceptance_probability`). Jit- and vmap-able (vmapped: one per chain).

  Args:
    proposal: the proposed :class:`L2HMCState`.
    log_det: the proposal map's log-Jacobian.

  Returns:
    A boolean scalar: ``True`` where the proposal diverged.
  """
  finite = jnp.isfinite(proposal.logdensity) & jnp.all(jnp.isfinite(log_det))
  for leaf in (proposal.position, proposal.logdensity_grad):
    finite = finite & jnp.all(jnp.isfinite(leaf))
  return ~finite


def propose(config: L2HMCConfig, params: L2HMCParams, masks: jax.Array,
            logdensity_fn: Callable, state: L2HMCState, momentum: jax.Array,
            direction: jax.Array, whitening: Whitening | None = None,
            tuning_noise: jax.Array | None = None, step_scale: jax.Array | None = None):
  r"""The proposal and its acceptance probability (differentiable in ``params``).

  ``step_scale``: the transition's jitter :math:`u` (:func:`draw_step_scale`), which
  multiplies every step size (``None``: 1).

  With ``whitening``, the leapfrog moves :math:`z = (x - \mu)/\sigma`
  (:mod:`metaoptax.l2hmc.whitening`); the states stay in :math:`x`. With
  ``config.local_step_sizes``, ``tuning_noise`` (a standard normal scalar
  :math:`u`) gives the tuning variable :math:`w = \beta^\top z + u`
  (:mod:`metaoptax.l2hmc.local_step_sizes`).

  Args:
    config: the sampler's :class:`L2HMCConfig`.
    params: its :class:`L2HMCParams`.
    masks: ``(num_steps, dim)``, from :func:`make_masks`.
    logdensity_fn: ``x (dim,) -> log p(x)``.
    state: the chain's :class:`L2HMCState` (flat positions).
    momentum: the velocity :math:`v`, a standard normal draw of the position's shape.
    direction: the trajectory's direction :math:`d`, +1 or -1.
    whitening: the :class:`Whitening` the leapfrog moves in; ``None``: none.
    tuning_noise: :math:`u` of the local step sizes; ``None`` without them.
    step_scale: the jitter :math:`u`; ``None``: 1.

  Returns:
    ``(proposed_state, acceptance, log_det)``: an :class:`L2HMCState`, the acceptance
    probability and :math:`\log|\det J|` of the trajectory's map.
  """
  return _propose(config, params, masks, logdensity_fn, state, momentum, direction,
                  whitening, tuning_noise, step_scale)[:3]


def _propose(config, params, masks, logdensity_fn, state, momentum, direction,
             whitening=None, tuning_noise=None, step_scale=None):
  r""":func:`propose`'s ``(proposed_state, acceptance, log_det)``, the momentum at the
  trajectory's end and the log acceptance ratio :math:`H - H' + \log|\det J|`."""
  position, grad = state.position, state.logdensity_grad
  if whitening is not None:
    position, grad = (to_whitened(whitening, position),
                      gradient_to_whitened(whitening, grad))
    logdensity_fn = whitened_logdensity(logdensity_fn, whitening)
  tuning_before = tuning_after = 0.0
  if step_scale is not None:
    log_u = jnp.log(step_scale)
    params = params._replace(log_step_size_x=params.log_step_size_x + log_u,
                             log_step_size_v=params.log_step_size_v + log_u)
  if config.local_step_sizes:
    local = params.local
    w = local_step_sizes.tuning_variable(local, position, tuning_noise)
    params = params._replace(
        log_step_size_x=local_step_sizes.shifted_log_step_sizes(local, params.log_step_size_x,
                                                                 w),
        log_step_size_v=local_step_sizes.shifted_log_step_sizes(local, params.log_step_size_v,
                                                                 w))
    tuning_before = -local_step_sizes.log_density(local, w, position)
  x, v, logdensity, grad, log_det = leapfrog(
      config, params, masks, logdensity_fn, position, momentum, state.logdensity,
      grad, direction)
  if config.local_step_sizes:
    tuning_after = -local_step_sizes.log_density(local, w, x)
  if whitening is not None:
    x, grad = from_whitened(whitening, x), gradient_from_whitened(whitening, grad)
  # -log q(w | x) joins the energy: the augmented target's extra factor
  energy_before = -state.logdensity + 0.5 * jnp.sum(momentum**2) + tuning_before
  energy_after = -logdensity + 0.5 * jnp.sum(v**2) + tuning_after
  acceptance = acceptance_probability(energy_before, energy_after, log_det)
  return (L2HMCState(x, logdensity, grad), acceptance, log_det, v,
          energy_before - energy_after + log_det)


def refined(config: L2HMCConfig, params: L2HMCParams, masks: jax.Array, factor: int):
  """The trajectory of ``config`` and ``params`` with every leapfrog step split into
  ``factor`` steps ``factor`` times smaller: ``(config, params, masks)`` with ``factor``
  times the steps (networks off: the masks are unused and repeated)."""
  def split(log_step_size):
    repeated = (jnp.repeat(log_step_size, factor, axis=0) if config.step_sizes == "per_step"
                else log_step_size)
    return repeated - jnp.log(jnp.asarray(factor, log_step_size.dtype))

  params = params._replace(log_step_size_x=split(params.log_step_size_x),
                           log_step_size_v=split(params.log_step_size_v))
  return (config._replace(num_steps=config.num_steps * factor, retry_divergent=0), params,
          jnp.repeat(masks, factor, axis=0))


def retry_probability(acceptance: jax.Array, power: float) -> jax.Array:
  r"""The probability :math:`g(\alpha_1) = (1 - \alpha_1)^k` that a rejected trajectory of
  acceptance probability :math:`\alpha_1` is retried (``config.retry_power`` :math:`= k`).

  1 where the trajectory diverged (:math:`\alpha_1 = 0`), at least :math:`e^{-1}` where it
  failed (:math:`\alpha_1 \le 1/k`), and small where a trajectory that suits the target
  was rejected by chance (the default :math:`k = 16`: :math:`g(0.3) < 0.004`). The ghost's
  factor :math:`(1 - \alpha_1(\eta))^{k+1}` in :func:`retried_acceptance` is the price: a
  retry whose ghost would likely be accepted is seldom accepted. :math:`k = 0` retries every
  rejected trajectory (the classic delayed rejection).

  Args:
    acceptance: :math:`\alpha_1`, the first stage's acceptance probability.
    power: :math:`k \ge 0`.

  Returns:
    :math:`g(\alpha_1)`, of ``acceptance``'s shape.
  """
  return (1.0 - acceptance) ** power


def retried_acceptance(config: L2HMCConfig, params: L2HMCParams, masks: jax.Array,
                       logdensity_fn: Callable, state: L2HMCState, momentum: jax.Array,
                       direction: jax.Array, first_acceptance: jax.Array,
                       whitening: Whitening | None = None,
                       step_scale: jax.Array | None = None,
                       tuning_noise: jax.Array | None = None):
  r"""The second stage of a rejected trajectory: the proposal of the refined trajectory
  (:func:`refined`, ``config.retry_divergent`` times the steps) from the same start, and
  its delayed-rejection acceptance probability.

  The first stage :math:`\Phi_1` (the trajectory of ``config``) and the second
  :math:`\Phi_2` (the refined one) are each an involution of :math:`(x, v, d)` that
  preserves volume (networks off). The first is accepted with probability
  :math:`\alpha_1(\xi)`; where it is rejected, the second is tried with probability
  :math:`g(\alpha_1(\xi))` (:func:`retry_probability`). Detailed balance of the second
  stage (Tierney and Mira 1999; Green and Mira 2001; Modi, Barnett and Carpenter 2023),
  :math:`\pi(\xi)(1 - \alpha_1(\xi))g(\alpha_1(\xi))\alpha_2(\xi) = \pi(\eta)(1 -
  \alpha_1(\eta))g(\alpha_1(\eta))\alpha_2(\eta)`, holds with

  .. math::

    \alpha_2(\xi) = \min\Big(1, \frac{\pi(\eta)\,(1 - \alpha_1(\eta))^{k + 1}}
        {\pi(\xi)\,(1 - \alpha_1(\xi))^{k + 1}}\Big), \qquad \eta = \Phi_2(\xi),

  :math:`\pi` the density of :math:`(x, v)` (:math:`e^{-H}`), and :math:`\alpha_1(\eta)`
  that of the *ghost* first stage from :math:`\eta` (the trajectory of ``config`` from the
  refined one's end, direction reversed). With ``config.local_step_sizes`` the state holds
  the tuning variable :math:`w` too (:mod:`metaoptax.l2hmc.local_step_sizes`): both stages
  and the ghost keep the transition's :math:`w`, and :math:`\pi` includes its conditional
  density. It costs ``retry_divergent + 1`` times the trajectory's gradients.

  Args:
    config, params, masks: the sampler (``config.retry_divergent >= 2``).
    logdensity_fn: ``x (dim,) -> log p(x)``.
    state: the transition's start (flat positions).
    momentum, direction, step_scale: the transition's draws (those of the first stage).
    first_acceptance: :math:`\alpha_1(\xi)`, the first stage's acceptance probability.
    whitening: the :class:`Whitening` the leapfrog moves in; ``None``: none.
    tuning_noise: :math:`u` of the local step sizes (:math:`w = \beta^\top z + u` at the
      start); ``None`` without them.

  Returns:
    ``(proposed_state, acceptance)``: the acceptance is 0 where the refined trajectory
    diverged (its log ratio not finite) or the ghost's :math:`\alpha_1(\eta) = 1`.
  """
  fine_config, fine_params, fine_masks = refined(config, params, masks,
                                                 config.retry_divergent)
  proposal, _, _, v, log_ratio = _propose(fine_config, fine_params, fine_masks,
                                          logdensity_fn, state, momentum, direction,
                                          whitening, tuning_noise, step_scale)
  ghost_noise = None
  if config.local_step_sizes:  # the ghost keeps w: its u is w - beta^T z at eta
    whitened = lambda x: x if whitening is None else to_whitened(whitening, x)
    ghost_noise = tuning_noise + jnp.dot(params.local.slope, whitened(state.position)
                                         - whitened(proposal.position))
  ghost_acceptance = _propose(config, params, masks, logdensity_fn, proposal, v, -direction,
                              whitening, ghost_noise, step_scale)[1]
  # log pi(eta)/pi(xi) is the refined trajectory's log ratio (not finite where it diverged)
  log_ratio = log_ratio + (config.retry_power + 1.0) * (jnp.log1p(-ghost_acceptance)
                                                        - jnp.log1p(-first_acceptance))
  acceptance = jnp.where(jnp.isfinite(log_ratio), jnp.exp(jnp.minimum(log_ratio, 0.0)), 0.0)
  return proposal, acceptance


def draw_step_scale(rng_key, config: L2HMCConfig, shape=(), dtype=jnp.float32):
  r"""The jitter :math:`u \sim \mathcal U(1 - j, 1 + j)` of ``config.jitter`` :math:`= j`.

  Args:
    rng_key: PRNG key of the draw.
    config: the :class:`L2HMCConfig`.
    shape: the shape of the draw (``()``: one factor for the whole transition).
    dtype: its dtype.

  Returns:
    The factor that multiplies all the transition's step sizes, or ``None`` where
    :math:`j = 0`.
  """
  if not config.jitter:
    return None
  return jax.random.uniform(rng_key, shape, dtype, 1.0 - config.jitter, 1.0 + config.jitter)


def _reflection_step(rng_key, state: L2HMCState, logdensity_fn: Callable,
                     whitening: Whitening | None, integrator: Integrator) -> L2HMCState:
  """Metropolis on :math:`x \\to 2\\mu - x` (module docstring)."""
  center = 0.0 if whitening is None else whitening.location
  reflected = _evaluated(2.0 * center - state.position, logdensity_fn, integrator)
  return _metropolis(rng_key, acceptance_probability(-state.logdensity, -reflected.logdensity,
                                                     0.0), reflected, state)[0]


def _metropolis(rng_key, acceptance, proposal: L2HMCState, state: L2HMCState):
  """``(proposal, True)`` with probability ``acceptance`` (:func:`acceptance_probability`),
  else ``(state, False)``."""
  accepted = jax.random.uniform(rng_key) < acceptance
  return optax.tree_utils.tree_where(accepted, proposal, state), accepted


def _scale_move_step(rng_key, state: L2HMCState, logdensity_fn: Callable,
                     whitening: Whitening | None, local, size: float,
                     integrator: Integrator) -> L2HMCState:
  r"""Metropolis on the scale move :math:`T_t`, :math:`t \sim \mathcal N(0, s^2)`, in the
  whitened coordinates (:func:`metaoptax.l2hmc.local_step_sizes.scale_move`)."""
  k_t, k_accept = jax.random.split(rng_key)
  z = state.position if whitening is None else to_whitened(whitening, state.position)
  t = size * jax.random.normal(k_t, (), z.dtype)
  moved, log_det = local_step_sizes.scale_move(local, z, t)
  return _group_move(k_accept, state, moved if whitening is None
                     else from_whitened(whitening, moved), log_det, logdensity_fn,
                     integrator)[0]


def _group_move(rng_key, state: L2HMCState, moved: jax.Array, log_det: jax.Array,
                logdensity_fn: Callable, integrator: Integrator):
  """Metropolis on a group move's point ``moved`` (of log Jacobian ``log_det``):
  ``(state, accepted)``."""
  proposal = _evaluated(moved, logdensity_fn, integrator)
  return _metropolis(rng_key, acceptance_probability(-state.logdensity, -proposal.logdensity,
                                                     log_det), proposal, state)


def _interweaving_steps(rng_key, state: L2HMCState, logdensity_fn: Callable,
                        whitening: Whitening | None, config: interweaving.Interweaving,
                        integrator: Integrator):
  r"""``config.num_moves`` Metropolis steps on the non-centered move :math:`T_{s,t}`
  (:mod:`metaoptax.l2hmc.interweaving`)."""
  scales = interweaving.proposal_scales(config, None if whitening is None else whitening.scale)

  def one(state, key):
    k_move, k_accept = jax.random.split(key)
    s, t = scales * jax.random.normal(k_move, (2,), state.position.dtype)
    moved, log_det = interweaving.move(config, state.position, s, t)
    return _group_move(k_accept, state, moved, log_det, logdensity_fn, integrator)

  return jax.lax.scan(one, state, jax.random.split(rng_key, config.num_moves))[0]


def build_kernel(config: L2HMCConfig):
  """The transition kernel of a configuration, with the sampler's parameters as arguments.

  ``kernel(rng_key, state, logdensity_fn, params, masks, whitening=None) -> (state, info)``:
  the moves ``config`` asks for (the reflection, the scale move, interweaving), then one
  trajectory of :func:`propose` from a fresh momentum and direction, accepted by
  Metropolis. :func:`l2hmc` binds the parameters and takes pytree positions.

  Args:
    config: the sampler's :class:`L2HMCConfig` (checked here: e.g. position Verlet with
      the networks raises a ``ValueError``).

  Returns:
    The ``kernel`` function above, returning an :class:`L2HMCState` and an
    :class:`L2HMCInfo`.
  """
  validate(config)  # e.g. position Verlet with the networks: a ValueError here
  integrator = INTEGRATORS[config.integrator]
  gradients = gradient_evaluations(config)

  def kernel(rng_key, state: L2HMCState, logdensity_fn: Callable, params: L2HMCParams,
             masks: jax.Array, whitening: Whitening | None = None):
    k_momentum, k_direction, k_accept = jax.random.split(rng_key, 3)
    if config.reflection:
      state = _reflection_step(jax.random.fold_in(rng_key, 2), state, logdensity_fn,
                               whitening, integrator)
    if config.scale_move:
      state = _scale_move_step(jax.random.fold_in(rng_key, 3), state, logdensity_fn,
                               whitening, params.local, config.scale_move, integrator)
    if config.interweaving is not None:
      state = _interweaving_steps(jax.random.fold_in(rng_key, 4), state, logdensity_fn,
                                  whitening, config.interweaving, integrator)
    momentum = jax.random.normal(k_momentum, state.position.shape, state.position.dtype)
    direction = jnp.where(jax.random.bernoulli(k_direction), 1, -1)
    noise = None
    if config.local_step_sizes:  # its own key: the other draws keep their streams
      noise = jax.random.normal(jax.random.fold_in(rng_key, 1), (), state.position.dtype)
    step_scale = draw_step_scale(jax.random.fold_in(rng_key, 5), config,
                                 dtype=state.position.dtype)
    proposal, acceptance, log_det = propose(config, params, masks, logdensity_fn, state,
                                            momentum, direction, whitening, noise, step_scale)
    divergent = is_divergent(proposal, log_det)
    used = jnp.asarray(gradients, jnp.int32)
    accepted = jax.random.uniform(k_accept) < acceptance
    if config.retry_divergent:
      # a rejected trajectory is retried with probability g(alpha_1) (retry_probability): a
      # loop of at most one pass, so vmapped over chains it runs only where one retries
      retry = ~accepted & (jax.random.uniform(jax.random.fold_in(rng_key, 6))
                           < retry_probability(acceptance, config.retry_power))

      def second_stage(carry):
        _, proposal, acceptance, accepted, divergent, used = carry
        retried, retried_acceptance_ = retried_acceptance(
            config, params, masks, logdensity_fn, state, momentum, direction, acceptance,
            whitening, step_scale, noise)
        accepted = jax.random.uniform(jax.random.fold_in(rng_key, 7)) < retried_acceptance_
        # a divergent first stage stays counted where the retry cannot stand in for it
        divergent = divergent & ~(retried_acceptance_ > 0)
        extra = (config.retry_divergent + 1) * config.num_steps
        return (jnp.zeros((), bool), retried, retried_acceptance_, accepted, divergent,
                used + extra)

      _, proposal, acceptance, accepted, divergent, used = jax.lax.while_loop(
          lambda carry: carry[0], second_stage,
          (retry, proposal, acceptance, accepted, divergent, used))
    new_state = optax.tree_utils.tree_where(accepted, proposal, state)
    info = L2HMCInfo(acceptance, accepted, direction, log_det, proposal.position, used,
                     divergent)
    return new_state, info

  return kernel


def l2hmc(logdensity_fn: Callable, config: L2HMCConfig, params: L2HMCParams,
          masks: jax.Array, whitening: Whitening | None = None) -> SamplingAlgorithm:
  """A trained (or untrained) L2HMC sampler: ``init(position)``, ``step(rng_key, state)``.

  Most users get one ready-made from :func:`metaoptax.l2hmc.adapt` (or ``result.sampler``
  of :func:`metaoptax.l2hmc.train`), with its whitening. Built by hand, ``whitening`` must
  be the one the step sizes were trained in (``result.whitening`` after a warm-up): the
  leapfrog moves the standardized coordinates; the states' positions are in the target's
  coordinates either way.

  A position is any pytree of arrays (``jax.flatten_util.ravel_pytree`` inside: the
  sampler moves the flat vector of its leaves, in that order); the state's position and
  gradient have the position's structure.

  With ``config.use_networks=False``, ``config.step_sizes="shared"``,
  ``config.per_coordinate=False`` and ``config.jitter=0`` it is HMC with step size
  ``exp(params.log_step_size_x[0])`` and ``config.num_steps`` leapfrog steps.

  Args:
    logdensity_fn: ``position -> log p(position)`` up to a constant, on the pytree
      positions the sampler will take.
    config: the sampler's :class:`L2HMCConfig`, ``dim`` the number of numbers in a
      position.
    params: its :class:`L2HMCParams` (trained, or :func:`init_params`).
    masks: ``(num_steps, dim)``, from :func:`make_masks` (``result.masks`` after
      training).
    whitening: the :class:`Whitening` the step sizes were trained in; ``None``: none.

  Returns:
    A :class:`SamplingAlgorithm`: ``init(position)`` and ``step(rng_key, state) ->
    (state, info)``, with :class:`L2HMCState` and :class:`L2HMCInfo`.

  Examples:
    >>> import jax, jax.numpy as jnp
    >>> from metaoptax import l2hmc
    >>> target = l2hmc.targets.strongly_correlated_gaussian()
    >>> config = l2hmc.L2HMCConfig(dim=2, num_steps=5)
    >>> params = l2hmc.init_params(jax.random.key(0), config)
    >>> masks = l2hmc.make_masks(jax.random.key(1), config)
    >>> sampler = l2hmc.l2hmc(target.logdensity_fn, config, params, masks)
    >>> state = sampler.init(jnp.zeros(2))
    >>> state, info = jax.jit(sampler.step)(jax.random.key(2), state)
    >>> state.position.shape, bool(0 <= info.acceptance_rate <= 1)
    ((2,), True)

  References:
    Levy, Hoffman and Sohl-Dickstein, `Generalizing Hamiltonian Monte Carlo with
    Neural Networks <https://arxiv.org/abs/1711.09268>`_, ICLR 2018.
  """
  kernel = build_kernel(config)
  integrator = INTEGRATORS[config.integrator]

  def flat(position):
    """The flat position, its unravel, and ``log p`` of flat positions."""
    vector, unravel = jax.flatten_util.ravel_pytree(position)
    if vector.shape != (config.dim,):
      raise ValueError(f"a position must hold dim={config.dim} numbers, got {vector.shape[0]} "
                       f"(structure {jax.tree.structure(position)}).")
    return vector, unravel, lambda x: logdensity_fn(unravel(x))

  def init_fn(position, rng_key=None):
    del rng_key  # blackjax's signature; the state is deterministic
    vector, unravel, flat_logdensity = flat(position)
    # log p and, where the integrator reads it (velocity Verlet), its gradient
    state = _evaluated(vector, flat_logdensity, integrator)
    return L2HMCState(position, state.logdensity, unravel(state.logdensity_grad))

  def step_fn(rng_key, state):
    vector, unravel, flat_logdensity = flat(state.position)
    grad = jax.flatten_util.ravel_pytree(state.logdensity_grad)[0]
    new, info = kernel(rng_key, L2HMCState(vector, state.logdensity, grad), flat_logdensity,
                       params, masks, whitening)
    return (L2HMCState(unravel(new.position), new.logdensity, unravel(new.logdensity_grad)),
            info._replace(proposal=unravel(info.proposal)))

  return SamplingAlgorithm(init_fn, step_fn)


class SampleInfo(NamedTuple):
  """What :func:`sample_chains` records of every transition; leaves ``(num_samples, chains)``.

  Attributes:
    acceptance_rate: the proposal's acceptance probability (:attr:`L2HMCInfo.acceptance_rate`).
    is_divergent: bool, the proposal diverged (:attr:`L2HMCInfo.is_divergent`; rejected).
    num_gradient_evaluations: int32, the gradients of :math:`\\log p` the transition
      evaluated, retries included (:attr:`L2HMCInfo.num_gradient_evaluations`).
  """

  acceptance_rate: jax.Array
  is_divergent: jax.Array
  num_gradient_evaluations: jax.Array


def sample_chains(rng_key: jax.Array, sampler: SamplingAlgorithm, states: L2HMCState,
                  num_samples: int):
  """Runs the chains of ``states`` for ``num_samples`` transitions, vmapped over the chains.

  Where a transition's proposal diverged (its log density or gradient not finite), the call
  warns (:class:`ConvergenceWarning`), as Stan does of NUTS's divergent transitions after its
  warm-up: the proposal was rejected, so the draws stay valid, but a region the sampler could
  not step into may be under-sampled. Under ``jax.jit`` the count is not known when the call
  is traced and nothing warns: read ``info.is_divergent``.

  Args:
    rng_key: PRNG key of the run.
    sampler: a :class:`SamplingAlgorithm`, e.g. ``result.sampler`` of :func:`train` or
      the sampler of :func:`adapt`'s ``run``.
    states: the chains' states, leaves with a leading chain axis (e.g.
      ``jax.vmap(sampler.init)(positions)``).
    num_samples: the transitions to run.

  Returns:
    ``(draws, info)``: the positions after each transition, with leaves
    ``(num_samples, chains, ...)``, and a :class:`SampleInfo` of every transition.
  """
  num_chains = jax.tree.leaves(states.position)[0].shape[0]

  def one(states, key):
    keys = jax.random.split(key, num_chains)
    states, info = jax.vmap(sampler.step)(keys, states)
    return states, (states.position, SampleInfo(info.acceptance_rate, info.is_divergent,
                                                info.num_gradient_evaluations))

  _, (draws, info) = jax.lax.scan(one, states, jax.random.split(rng_key, num_samples))
  num_divergent = jnp.sum(info.is_divergent)
  if not isinstance(num_divergent, jax.core.Tracer) and int(num_divergent):
    warnings.warn(f"{int(num_divergent)} of the {info.is_divergent.size} transitions' proposals "
                  "diverged (log p or its gradient not finite; rejected): where the sampler "
                  "could not step, the draws may under-sample the posterior. "
                  "info.is_divergent marks them.", ConvergenceWarning, stacklevel=2)
  return draws, info
