r"""The generalized leapfrog with trainable step sizes (Levy, Hoffman and Sohl-Dickstein 2018).

One leapfrog step ``k`` of ``K`` in the forward direction (:math:`d = +1`), with
:math:`\nabla U = -\nabla \log p`, a binary mask :math:`m_k` (:math:`\bar m_k = 1-m_k`),
time embedding :math:`t_k` and step sizes :math:`\varepsilon^k_x, \varepsilon^k_v`:

.. math::

  \Gamma^+:\ v &\leftarrow v \odot e^{\frac{\varepsilon_v}{2} S_v(\zeta_v)}
      - \tfrac{\varepsilon_v}{2}\big(\nabla U(x) \odot e^{\varepsilon_v Q_v(\zeta_v)}
      + T_v(\zeta_v)\big), \qquad \zeta_v = (x, \nabla U(x), t_k) \\
  \Lambda^+:\ x &\leftarrow m \odot x + \bar m \odot \big[x \odot e^{\varepsilon_x S_x(\zeta_x)}
      + \varepsilon_x \big(v \odot e^{\varepsilon_x Q_x(\zeta_x)} + T_x(\zeta_x)\big)\big],
      \qquad \zeta_x = (m \odot x, v, t_k)

then :math:`\Lambda^+` again with the roles of :math:`m` and :math:`\bar m` swapped,
then :math:`\Gamma^+` at the new position. The translations :math:`T` sit inside
the step-size brackets, as in the paper. (Written outside them, unscaled,
:math:`T_v`, whose network reads :math:`\nabla U`, would kick the momentum by O(1)
per half-step where gradients are large, and an untrained sampler would accept almost
none of its proposals there. The public code flips the sign of :math:`T_v`; as
:math:`T` is learned, sign and scale are a parametrisation.)

Each update is a triangular map whose inputs :math:`\zeta` do not depend on the
coordinates it changes, so the Jacobian's log-determinant is exact:

.. math::

  \log|\det J| = \sum_k \Big(\tfrac{\varepsilon^k_v}{2} \textstyle\sum S_v(\zeta_v^{(1)})
      + \varepsilon^k_x \sum \bar m\, S_x(\zeta_x^{(1)})
      + \varepsilon^k_x \sum m\, S_x(\zeta_x^{(2)})
      + \tfrac{\varepsilon^k_v}{2} \sum S_v(\zeta_v^{(2)})\Big).

The backward direction (:math:`d = -1`) is the exact inverse: the same steps'
inverses in reverse order (``k = K-1, ..., 0``), with the negated log-determinant.
Both directions run in one ``lax.scan`` whose elementwise updates select between
the two closed forms (no ``lax.cond``): under ``vmap`` over chains with mixed
directions a cond would compute both trajectories, the select computes the
networks and gradients once.
With the networks off (:math:`S = Q = T = 0`) this is the plain leapfrog of HMC,
and each step is computed as one kick-drift-kick with the step sizes negated for
:math:`d = -1`, instead of two masked half-updates with a select between the
directions' closed forms (the same work as blackjax's HMC transition); or, with
``integrator="position_verlet"``, as one drift-kick-drift, whose
gradient is at the step's midpoint and none at the trajectory's end points
(:mod:`metaoptax.l2hmc.integrators`).

Per-coordinate step sizes (``per_coordinate=True``): :math:`\varepsilon_x,
\varepsilon_v \in \mathbb R^d_{>0}` act elementwise, and each
:math:`\varepsilon\sum S` above becomes :math:`\sum_i \varepsilon_i S_i`. With the
networks off and :math:`\varepsilon_x = \varepsilon_v = h\,\sigma`, this is HMC with
step size :math:`h` and the diagonal inverse mass matrix :math:`\mathrm{diag}(\sigma^2)`
(momentum :math:`p = M^{1/2} v`): what window adaptation gives NUTS, here a
starting point that training moves (:func:`metaoptax.l2hmc.warmup`).
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

from metaoptax.l2hmc.integrators import INTEGRATORS
from metaoptax.l2hmc.interweaving import Interweaving, validate as validate_interweaving
from metaoptax.l2hmc.local_step_sizes import LocalStepSizes, init_local
from metaoptax.l2hmc.networks import SQTNetwork, init_networks, time_embedding

__all__ = ("L2HMCConfig", "L2HMCParams", "init_params", "make_masks", "leapfrog")

STEP_SIZE_MODES = ("shared", "per_step")


class L2HMCConfig(NamedTuple):
  r"""Static configuration of the sampler.

  The defaults are the recipe for a posterior nobody configured for: HMC's leapfrog
  (networks off) with a trained step size per leapfrog step and coordinate, whose
  trajectory length is jittered so that it cannot resonate. ``dim`` is filled from the
  target by :func:`metaoptax.l2hmc.train` and :func:`metaoptax.l2hmc.adapt`.

  Attributes:
    dim: the number of coordinates of the (flattened) position; ``None`` until the
      target fills it.
    num_steps: :math:`K`, the leapfrog steps per transition.
    hidden: the hidden units of each layer of the S, Q, T networks (``use_networks``).
    init_step_size: the step size the training starts from (without a warm-up, whose
      step size replaces it).
    step_sizes: ``"per_step"``, one :math:`(\varepsilon_x, \varepsilon_v)` pair per
      leapfrog step, or ``"shared"``, one pair for all.
    use_networks: ``True``: the S, Q, T networks of the paper; ``False``:
      :math:`S = Q = T = 0`, HMC's leapfrog with trained step sizes.
    per_coordinate: the step sizes are ``(dim,)`` vectors (a diagonal mass matrix)
      rather than scalars.
    local_step_sizes: the step sizes follow the position (Gibbs self-tuning,
      :mod:`metaoptax.l2hmc.local_step_sizes`).
    reflection: each transition first proposes :math:`x \to 2\mu - x` (:math:`\mu`: the
      whitening's location), accepted by Metropolis.
    scale_move: if > 0 (with ``local_step_sizes``), each transition first makes a
      Metropolis scale move along the local model, :math:`t \sim \mathcal N(0,
      \mathrm{scale\_move}^2)` (:func:`metaoptax.l2hmc.local_step_sizes.scale_move`).
    interweaving: a declared hierarchy
      (:class:`metaoptax.l2hmc.interweaving.Interweaving`): each transition first makes
      Metropolis moves of its location and log scale at fixed non-centered members;
      ``None``: none.
    integrator: the networks-off leapfrog's splitting, a key of
      :data:`metaoptax.l2hmc.integrators.INTEGRATORS`: ``"velocity_verlet"``
      (kick-drift-kick) or ``"position_verlet"`` (drift-kick-drift, no gradient at the
      end points; networks off only).
    jitter: every transition multiplies all its step sizes by
      :math:`u \sim \mathrm{Uniform}(1 - \mathrm{jitter}, 1 + \mathrm{jitter})`, drawn
      independently of the state (a mixture of exact kernels: still exact), so the
      trajectory's length varies and cannot return to its start on every transition.
    retry_divergent: ``0``: off; ``r >= 2``: a trajectory whose proposal is rejected is
      retried once, with probability ``(1 - acceptance) ** retry_power`` (always where it
      diverged), from the same momentum, direction and jitter, with every step split
      into ``r`` steps ``r`` times smaller, and accepted by delayed rejection
      (:mod:`metaoptax.l2hmc.kernel`); networks off.
    retry_power: :math:`k \ge 0` of the retry's probability :math:`(1 - \alpha_1)^k`
      (:func:`metaoptax.l2hmc.kernel.retry_probability`): the larger, the fewer retries
      of trajectories rejected by chance, and the smaller the retry's acceptance where
      its ghost trajectory (from the retry's end) would be accepted.
  """

  dim: int | None = None
  num_steps: int = 10
  hidden: int = 10
  init_step_size: float = 0.1
  step_sizes: str = "per_step"
  use_networks: bool = False
  per_coordinate: bool = True
  local_step_sizes: bool = False
  reflection: bool = False
  scale_move: float = 0.0
  interweaving: Interweaving | None = None
  integrator: str = "velocity_verlet"
  jitter: float = 0.5
  retry_divergent: int = 0
  retry_power: float = 16.0


class L2HMCParams(NamedTuple):
  r"""Trainable parameters: the two networks and the log step sizes.

  Attributes:
    networks: the weights of the networks of the position and of the velocity
      updates (their S, Q, T outputs; unused with ``use_networks=False``).
    log_step_size_x: the log step sizes :math:`\log\varepsilon_x` of the position
      updates: ``(1,)`` shared or ``(K,)`` per step; ``(1, dim)`` or ``(K, dim)`` per
      coordinate.
    log_step_size_v: the log step sizes :math:`\log\varepsilon_v` of the velocity
      updates, shaped as ``log_step_size_x``.
    local: with ``config.local_step_sizes``, the tuning variable's slopes and exponents
      (:class:`metaoptax.l2hmc.local_step_sizes.LocalStepSizes`); ``None`` otherwise.
  """

  networks: dict
  log_step_size_x: jax.Array
  log_step_size_v: jax.Array
  local: LocalStepSizes | None = None


def validate(config: L2HMCConfig) -> None:
  if config.dim is None:
    raise ValueError("config.dim is None: set it, or let l2hmc.train / l2hmc.adapt fill it "
                     "from the target.")
  if not 0.0 <= config.jitter < 1.0:
    raise ValueError(f"jitter must be in [0, 1), got {config.jitter}.")
  if config.dim < 1 or config.num_steps < 1 or config.hidden < 1:
    raise ValueError("dim, num_steps and hidden must be >= 1.")
  if config.step_sizes not in STEP_SIZE_MODES:
    raise ValueError(f"step_sizes must be one of {STEP_SIZE_MODES}, got {config.step_sizes!r}.")
  if not config.init_step_size > 0:
    raise ValueError(f"init_step_size must be > 0, got {config.init_step_size}.")
  if config.local_step_sizes and not config.per_coordinate:
    raise ValueError("local_step_sizes needs per_coordinate=True.")
  if config.scale_move < 0 or (config.scale_move and not config.local_step_sizes):
    raise ValueError("scale_move must be >= 0, and > 0 only with local_step_sizes=True.")
  if config.interweaving is not None:
    validate_interweaving(config.interweaving, config.dim)
  if config.retry_divergent and (config.retry_divergent < 2 or config.use_networks):
    raise ValueError(f"retry_divergent must be 0 or >= 2, got {config.retry_divergent}, and "
                     "needs use_networks=False.")
  if not 0.0 <= config.retry_power < math.inf:
    raise ValueError(f"retry_power must be finite and >= 0, got {config.retry_power}.")
  if config.integrator not in INTEGRATORS:
    raise ValueError(f"integrator must be one of {tuple(INTEGRATORS)}, got "
                     f"{config.integrator!r}.")
  if config.use_networks and not INTEGRATORS[config.integrator].with_networks:
    raise ValueError(f"integrator={config.integrator!r} needs use_networks=False: the "
                     "networks' generalized leapfrog is kick-drift-kick only (its momentum "
                     "update reads the gradient at the step's end points).")


def init_params(key: jax.Array, config: L2HMCConfig,
                step_size: jax.Array | float | None = None) -> L2HMCParams:
  r"""Networks drawn from ``key`` (output layers zero: HMC), and the log step sizes.

  Args:
    key: PRNG key of the networks' weights.
    config: the sampler.
    step_size: the initial step size of every leapfrog step (default
      ``config.init_step_size``): a number, or with ``config.per_coordinate`` a
      ``(dim,)`` vector (e.g. ``warmup(...).step_size``). Both
      :math:`\varepsilon_x` and :math:`\varepsilon_v` start there.
  """
  validate(config)
  n = config.num_steps if config.step_sizes == "per_step" else 1
  if step_size is None:
    log_eps = jnp.full((n,), jnp.log(config.init_step_size), jnp.float32)
    if config.per_coordinate:
      log_eps = jnp.broadcast_to(log_eps[:, None], (n, config.dim))
  else:
    step_size = jnp.asarray(step_size, jnp.float32)
    expected = ((), (config.dim,)) if config.per_coordinate else ((),)
    if step_size.shape not in expected:
      raise ValueError(f"step_size must have shape {' or '.join(map(str, expected))} "
                       f"(per_coordinate={config.per_coordinate}), got {step_size.shape}.")
    if not bool(jnp.all(step_size > 0) & jnp.all(jnp.isfinite(step_size))):
      raise ValueError("step_size must be finite and > 0.")
    shape = (n, config.dim) if config.per_coordinate else (n,)
    log_eps = jnp.broadcast_to(jnp.log(step_size), shape)
  local = init_local(config.dim) if config.local_step_sizes else None
  return L2HMCParams(init_networks(key, config.dim, config.hidden), log_eps, log_eps, local)


def make_masks(key: jax.Array, config: L2HMCConfig) -> jax.Array:
  """One random half-mask per leapfrog step, ``(K, dim)`` of 0/1 (fixed for a sampler).

  Each mask has ``dim // 2`` ones: the coordinates its step's position update changes
  first (the paper's :math:`m^t`).

  Args:
    key: PRNG key of the masks.
    config: the :class:`L2HMCConfig`; its ``dim`` and ``num_steps`` set the shape.

  Returns:
    A float32 array ``(num_steps, dim)``.
  """
  keys = jax.random.split(key, config.num_steps)
  ones = config.dim // 2

  def mask(k):
    return (jax.random.permutation(k, config.dim) < ones).astype(jnp.float32)

  return jax.vmap(mask)(keys)


class _Leapfrog(NamedTuple):
  x: jax.Array
  v: jax.Array
  logdensity: jax.Array
  grad: jax.Array  # grad log p(x) = -grad U(x)
  log_det: jax.Array


def _heads(config, params, name, inputs):
  # Networks off never gets here: the leapfrog takes its integrator's step instead.
  return SQTNetwork(config.dim, config.hidden).apply(params.networks[name], inputs)


def _scaled_sum(eps, s):
  r""":math:`\varepsilon \sum_i s_i` for one step size, :math:`\sum_i \varepsilon_i s_i` per
  coordinate."""
  return eps * jnp.sum(s) if jnp.ndim(eps) == 0 else jnp.sum(eps * s)


def _step_sizes(config, params, k):
  index = k if config.step_sizes == "per_step" else 0
  return jnp.exp(params.log_step_size_x[index]), jnp.exp(params.log_step_size_v[index])


def _momentum(config, params, state, t, eps_v, forward):
  """Gamma^+ (``forward`` True) or its inverse (False); x is unchanged.

  ``forward`` may be traced (a chain's direction): both closed forms are cheap
  elementwise expressions of the same network outputs, and a select picks one.
  """
  grad_u = -state.grad
  s, q, tr = _heads(config, params, "v_net", (state.x, grad_u, t))
  force = 0.5 * eps_v * (grad_u * jnp.exp(eps_v * q) + tr)
  v = jnp.where(forward, state.v * jnp.exp(0.5 * eps_v * s) - force,
                (state.v + force) * jnp.exp(-0.5 * eps_v * s))
  sign = jnp.where(forward, 1.0, -1.0).astype(s.dtype)
  return state._replace(v=v, log_det=state.log_det + _scaled_sum(sign * 0.5 * eps_v, s))


def _position(config, params, state, t, eps_x, update, forward, logdensity_and_grad=None):
  """Lambda^+ (``forward`` True) or its inverse on the coordinates where ``update`` is 1.

  ``log p`` and its gradient are re-evaluated only if ``logdensity_and_grad`` is
  given (after the second half-update; the first needs neither).
  """
  keep = 1.0 - update
  s, q, tr = _heads(config, params, "x_net", (keep * state.x, state.v, t))
  drift = eps_x * (state.v * jnp.exp(eps_x * q) + tr)
  moved = jnp.where(forward, state.x * jnp.exp(eps_x * s) + drift,
                    (state.x - drift) * jnp.exp(-eps_x * s))
  sign = jnp.where(forward, 1.0, -1.0).astype(s.dtype)
  x = keep * state.x + update * moved
  logdensity, grad = (state.logdensity, state.grad) if logdensity_and_grad is None else (
      logdensity_and_grad(x))
  return _Leapfrog(x, state.v, logdensity, grad,
                   state.log_det + _scaled_sum(sign * eps_x, update * s))


def _explicit_mesh() -> bool:
  """Whether tracing happens under a mesh with ``Explicit`` axes (``jax.set_mesh``)."""
  mesh = jax.sharding.get_abstract_mesh()
  return jax.sharding.AxisType.Explicit in tuple(getattr(mesh, "axis_types", None) or ())


def leapfrog(config: L2HMCConfig, params: L2HMCParams, masks: jax.Array,
             logdensity_fn: Callable, x: jax.Array, v: jax.Array, logdensity: jax.Array,
             grad: jax.Array, direction: jax.Array):
  """``K`` generalized leapfrog steps in ``direction`` (+1 or -1).

  Args:
    config, params, masks: the sampler.
    logdensity_fn: ``log p`` (up to a constant).
    x, v: position and momentum.
    logdensity, grad: ``log p(x)`` and its gradient (carried, not recomputed).
    direction: +1 (forward) or -1 (the exact inverse).

  Returns:
    ``(x', v', log p(x'), grad log p(x'), log|det J|)``; ``K`` gradient evaluations. With
    ``config.integrator="position_verlet"`` the carried gradient is not read, and the one
    returned is zeros (the gradients are at the steps' midpoints; ``log p(x')`` is one
    evaluation of ``logdensity_fn`` more).
  """
  logdensity_and_grad = jax.value_and_grad(logdensity_fn)
  integrator = INTEGRATORS[config.integrator]
  start = _Leapfrog(x, v, logdensity, grad, jnp.zeros((), x.dtype))
  K = config.num_steps
  forward = direction > 0

  def step(state, i):
    # forward: steps k = 0..K-1, each Gamma, Lambda(1-m), Lambda(m), Gamma; backward:
    # k = K-1..0, each the inverse updates in reverse order (masks swapped)
    # (the step's inputs are selected, not indexed by a per-chain k: a gather with
    # batched indices has no sharding rule on explicit meshes)
    pick = lambda a, b: jax.tree.map(lambda u, w: jnp.where(forward, u, w), a, b)
    t = pick(time_embedding(i, K), time_embedding(K - 1 - i, K))
    eps_x, eps_v = pick(_step_sizes(config, params, i), _step_sizes(config, params, K - 1 - i))
    if not config.use_networks:
      # the plain leapfrog (S = Q = T = 0): the inverse step is the step with the step sizes
      # negated, the same floating-point operations as the general path without its two
      # masked half-updates and per-update selects (the log-determinant stays 0)
      sign = jnp.where(forward, 1.0, -1.0).astype(state.x.dtype)
      return integrator.step(state, sign * eps_x, sign * eps_v, logdensity_and_grad), None
    m = pick(masks[i], masks[K - 1 - i])
    first = jnp.where(forward, 1.0 - m, m)  # 1 - first is m or 1 - m exactly (0/1 masks)
    state = _momentum(config, params, state, t, eps_v, forward)
    state = _position(config, params, state, t, eps_x, first, forward)
    state = _position(config, params, state, t, eps_x, 1.0 - first, forward,
                      logdensity_and_grad)
    return _momentum(config, params, state, t, eps_v, forward), None

  if _explicit_mesh():
    # JAX 0.10.2's scan batching rule fails on chains sharded over an explicit
    # mesh ("not found in mesh: ()"); the same steps, unrolled, trace fine
    end = start
    for i in range(K):
      end = step(end, jnp.asarray(i, jnp.int32))[0]
  else:
    end = jax.lax.scan(step, start, jnp.arange(K))[0]
  end = integrator.finish(end, logdensity_fn)  # log p at the end point where not yet known
  return end.x, end.v, end.logdensity, end.grad, end.log_det
