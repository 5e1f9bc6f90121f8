r"""Warm-up: per-coordinate step sizes from the chains, before training.

What window adaptation does for NUTS, for the generalized leapfrog's starting
point. HMC chains (the networks off) run in three windows:

1. burn-in, step sizes :math:`h\,\hat\sigma` with :math:`\hat\sigma = \mathbf 1` at first:
   :math:`h` adapts and the chains travel to the typical set, as in the first fast window of
   Stan's warm-up. The window repeats, :math:`\hat\sigma` re-estimated from the chains over
   its second half each time, until the chains agree: the split :math:`\hat R` of every
   coordinate and of :math:`\log p` over the window's second half below
   ``converged_rhat`` (or ``max_burn_in_windows`` windows made). While the chains are in
   transit their spread gives long steps along their way; the whitening is estimated only
   after, from chains that have arrived. With ``metric="dense"`` each chain instead moves
   with its own Newton metric, the inverse of its negative Hessian at the window's start
   (eigenvalues' magnitudes, floored at ``NEWTON_FLOOR``): far from the posterior, where
   the curvature can be many orders of magnitude larger than there (a regression with
   uncentred predictors), one step size then moves every chain;
2. :math:`\varepsilon = h\,\hat\sigma` with :math:`\hat\sigma` the per-coordinate
   standard deviation of the chains over the second half of the last burn-in window (dense:
   the chains' Newton metrics again), with ``scale_num_steps`` leapfrog steps per transition
   (the burn-in's by default; fewer suffice for draws from chains that have arrived:
   :func:`burn_in` and :func:`settle` split the warm-up there);
3. the same with :math:`\hat\sigma` re-estimated over the second half of window 2 (dense:
   the Cholesky factor of the chains' covariance there, :func:`_dense`; low rank: the
   diagonal-plus-low-rank fit of the draws and gradients there, :func:`_low_rank`).

After each window, a chain whose mean acceptance probability over the window's
second half is below 0.05 restarts from the state of a chain drawn at random
among the others: one shared :math:`h` suits the chains in the bulk, and a chain
started where the gradients are large (a standard normal start on a posterior
with sds ~0.1) can reject every proposal at that :math:`h`, never move, and spoil
the scales of the next window. So does a chain whose mean :math:`\log p` over the window's
second half is more than ``BEHIND_NATS`` per coordinate below the median chain's: it moves,
but in a minor mode (or still far out) that the others left, whose mass beside theirs is
negligible unless it is :math:`e^{20}` times wider in every coordinate; it can stay
there (each chain's own Newton metric in the dense burn-in never crosses to the bulk) and
its spread would spoil the whitening. The warm-up's positions are starting points, not
draws, so moving them leaves the sampler exact.

In every window :math:`\log h` follows the chains' mean acceptance probability
:math:`\bar a_t` towards a target :math:`a^*` (stochastic approximation, one
shared :math:`h`):

.. math::

  \log h_{t+1} = \log h_t + \kappa\,(\bar a_t - a^*),

and the result is :math:`\bar h` (:math:`\log\bar h` the mean of :math:`\log h_t` over
the second half of window 3) with the whitening :math:`(\hat\mu, \hat\sigma)` of
:mod:`metaoptax.l2hmc.whitening` (:math:`\hat\mu` from window 3): the sampler
moves :math:`z = (x - \hat\mu)/\hat\sigma` with step size :math:`\bar h`. With many chains
:math:`\bar a_t` is an average over chains, so one iteration's signal is
already precise. Per-coordinate step sizes :math:`\varepsilon_i = h\sigma_i` are
HMC with the inverse mass matrix :math:`\mathrm{diag}(\sigma^2)` (see
:mod:`metaoptax.l2hmc.dynamics`); the variance estimate is shrunk towards
:math:`10^{-3}` as Stan's is, :math:`\hat\sigma^2 \leftarrow \frac{n}{n+5}\hat\sigma^2 +
10^{-3}\frac{5}{n+5}` (:math:`n` the draws per coordinate).

For position-dependent step sizes (:mod:`metaoptax.l2hmc.local_step_sizes`), the
final window also measures how each coordinate's local scale varies with the
position: the least-squares slopes :math:`G` of :math:`\log(x_i - \bar x_i)^2` on
:math:`x` (a log-normal scale model: on the funnel, :math:`\log x_i^2 = v +
\log\epsilon_i^2` gives slope 1 on :math:`v`), halved and in whitened units,
:math:`H_{ji} = \tfrac12 G_{ji}\sigma_j`, with the diagonal (a coordinate on
itself, 0 for a symmetric one) set to 0.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from metaoptax.l2hmc.dynamics import L2HMCConfig, L2HMCParams, make_masks
from metaoptax.l2hmc.kernel import build_kernel, init
from metaoptax.l2hmc.local_step_sizes import diagonal_curvature
from metaoptax.l2hmc.low_rank import fisher_low_rank
from metaoptax.l2hmc.whitening import Whitening, dense_whitening, to_whitened

__all__ = ("WarmupResult", "warmup")

WINDOWS = (0.25, 0.35, 0.4)  # fractions of the warm-up: burn-in, first and final scales
SLOPES = ("squares", "curvature")  # what the final window's slopes regress (see warmup)
SCALES = ("pooled", "within")  # which variance gives the whitening's scale (see warmup)
LOCATIONS = ("mean", "midpoint")  # which centre gives the whitening's location (see warmup)
# the whitening's map: per-coordinate scales, a Cholesky factor, or diagonal plus low rank
METRICS = ("diagonal", "dense", "low_rank")
# the most coordinates whose windows accumulate dim x dim second moments (the covariance and the
# log-scale slopes of slopes="squares") where neither the dense metric nor slopes="curvature"
# needs them: above it their cost (dim squared per transition) would exceed the transitions'
MOMENTS_MAX_DIM = 256
LOW_RANK_DRAWS = 64  # the most transitions (of every chain) the low-rank fit keeps
CURVATURE_FLOOR = 1e-4  # least curvature of a whitened coordinate (log scale 4.6) in the fit
NEWTON_FLOOR = 1e-4  # least |curvature| of the burn-in's Newton metrics (sd at most 100)
STUCK = 0.05  # a chain's mean acceptance over a window's second half below which it restarts
# ... and a chain whose mean log p there is below the median chain's by more than this many nats
# per coordinate, left in a minor mode (or still far out): a mode whose chains' log p sits that
# far below the others' holds as much mass only where it is e^BEHIND_NATS (5e8) times wider in
# every coordinate. A funnel's mouth sits a few nats per coordinate below its neck
BEHIND_NATS = 20.0
CONVERGED_RHAT = 1.1  # the split R-hat below which the chains have found the typical set


class WarmupResult(NamedTuple):
  r"""What :func:`warmup` found.

  Attributes:
    step_size: :math:`h`, the step size in the whitened coordinates.
    whitening: the chains' :class:`Whitening` (their location and scale, and with the
      dense metric their Cholesky factor, with the low-rank one its vectors).
    positions: ``(chains, dim)``, the chains at the end of the warm-up.
    acceptance: the mean acceptance probability over the final window's second half.
    log_scale_slopes: ``(dim, dim)``: entry ``(j, i)`` is
      :math:`\partial \log(\text{local scale of } z_i) / \partial z_j`, diagonal 0
      (``slopes=``); ``None`` without, or above ``MOMENTS_MAX_DIM`` coordinates with
      ``slopes="squares"`` and no dense metric.
    log_scale_samples: with ``slopes="curvature"``: (positions :math:`z`, log local
      scales of :math:`z`) over the final window's second half, ``(transitions * chains,
      dim)`` each, for the saturating fit; ``None`` otherwise.
    rhat: ``(dim + 1,)``, the split R-hat of each coordinate and of :math:`\log p` over
      the final window's second half.
    num_transitions: int, the transitions the warm-up made.
    burn_in_rhat: the largest split R-hat of the last burn-in window.
    num_hessian_evaluations: int, the Hessians of :math:`\log p` each chain evaluated
      (the dense metric's Newton metrics: one per burn-in window but those that moved
      with the chains' pooled covariance, :func:`pool_burn_in`, and one for window 2 but
      after those;
      the curvature slopes' diagonal: one per transition of the final window's second
      half), each ``dim`` forward-over-reverse products.
    num_divergent: int, the warm-up's proposals that diverged (not finite, rejected), over
      every chain.
    widest_variance: with the diagonal metric, the largest eigenvalue of the chains'
      correlation matrix over the final window's second half: the variance, in the whitened
      coordinates, of the widest direction the diagonal whitening leaves (1 where the
      coordinates are uncorrelated); ``None`` with the dense and low-rank metrics (they
      whiten the correlations), or without the window's covariance (above
      ``MOMENTS_MAX_DIM`` coordinates).
    whitened_spread: with ``metric="low_rank"``, the largest standard deviation of a
      whitened coordinate :math:`z_i` over the final window's second half (over every
      chain's kept draws): 1 where the whitening is complete, more along a direction the
      low-rank fit left long (the sampler's trajectory covers its quarter period,
      :func:`metaoptax.l2hmc.trajectory_length.num_steps_for`); ``None`` otherwise.
    num_leapfrog_steps: int, per chain, the leapfrog steps (gradients) of the warm-up's
      transitions: ``num_steps`` per transition, ``scale_num_steps`` per transition of
      window 2 (its Hessians are ``num_hessian_evaluations``).
    num_steps: the leapfrog steps per transition of the final window (``num_steps``; more
      where :func:`metaoptax.l2hmc.adapt`'s warm-up lengthened its trajectories:
      :func:`lengthen_burn_in`); ``None`` where not recorded.
  """

  step_size: jax.Array
  whitening: Whitening
  positions: jax.Array
  acceptance: jax.Array
  log_scale_slopes: jax.Array | None = None
  log_scale_samples: tuple[jax.Array, jax.Array] | None = None
  rhat: jax.Array | None = None
  num_transitions: jax.Array | None = None
  burn_in_rhat: jax.Array | None = None
  num_hessian_evaluations: jax.Array | None = None
  num_divergent: jax.Array | None = None
  widest_variance: jax.Array | None = None
  whitened_spread: jax.Array | None = None
  num_leapfrog_steps: jax.Array | None = None
  num_steps: int | None = None


def _window(logdensity_fn, kernel, masks, key, states, log_h, whitening, length, target, rate,
            dim, local=None, curvature=False, moments=True, keep_draws=0):
  """``length`` HMC transitions of every chain in ``z = (x - location) / scale`` with step
  size ``h`` (with ``local``: times :math:`e^{c w}`, Gibbs self-tuning), ``log h`` adapted;
  the chains' mean and variance over the second half (pooled, and the mean of the chains'
  own variances, and the midpoint of their means: :func:`midpoint`), and the mean
  ``log h`` and acceptance there. With ``moments``, also the ``dim x dim`` covariance and
  the log-scale slopes (else ``None``: their cost grows as ``dim`` squared). With
  ``keep_draws``, the positions and gradients of at most that many transitions spread evenly
  over the second half (``(transitions, chains, dim)`` each; else ``None``)."""
  half = length // 2
  stride = max(half // keep_draws, 1) if keep_draws else 1
  num_kept = len(range(0, half, stride)) if keep_draws else 0
  # Sums of x - shift, with shift the chains' mean at the window's start: the
  # variance from E[(x-c)^2] - E[x-c]^2 keeps its float32 digits when the mean is
  # far from 0 relative to the spread (it cancels catastrophically for c = 0).
  shift = jnp.mean(states.position, 0)
  shift_logdensity = jnp.mean(states.logdensity)

  def transition(carry, inputs):
    states, log_h, sums, draws = carry
    key, t = inputs
    params = _hmc_params(log_h, local, dim)
    keys = jax.random.split(key, states.position.shape[0])
    # a whitening per chain (leaves with a leading chain axis: the burn-in's Newton metrics)
    per_chain = whitening.location.ndim == 2
    states, info = jax.vmap(lambda k, s, w: kernel(k, s, logdensity_fn, params, masks, w),
                            in_axes=(0, 0, 0 if per_chain else None))(keys, states, whitening)
    acceptance = jnp.mean(info.acceptance_rate)
    in_second_half = (t >= length - half).astype(states.position.dtype)
    x = states.position - shift
    if curvature:  # -log of the curvature: a local variance, without sampling noise
      log_square = jax.lax.cond(
          t >= length - half,
          lambda p: -jnp.log(jnp.maximum(
              jax.vmap(diagonal_curvature, (None, 0))(logdensity_fn, p),
              CURVATURE_FLOOR / whitening.scale**2)),
          lambda p: jnp.zeros_like(p), states.position)
    else:
      log_square = jnp.log(jnp.maximum(x * x, 1e-30))
    sums = (sums[0] + in_second_half * jnp.sum(x, 0),
            sums[1] + in_second_half * jnp.sum(x * x, 0),
            sums[2] + in_second_half * log_h, sums[3] + in_second_half * acceptance,
            sums[4] + in_second_half * info.acceptance_rate,
            sums[5] + in_second_half * x.T @ x if moments else sums[5],
            sums[6] + in_second_half * x.T @ log_square if moments else sums[6],
            sums[7] + in_second_half * jnp.sum(log_square, 0),
            sums[8] + in_second_half * x, sums[9] + in_second_half * x * x,
            *_quarter_sums(t, length, half, x, states.logdensity - shift_logdensity,
                           sums[10], sums[11]),
            sums[12] + jnp.sum(info.is_divergent, dtype=jnp.int32))
    log_h = log_h + rate * (acceptance - target)
    if keep_draws:  # the draws and gradients at every stride-th transition of the second half
      since = t - (length - half)
      index = jnp.clip(since // stride, 0, num_kept - 1)
      keep = (since >= 0) & (since % stride == 0)
      draws = tuple(
          buffer.at[index].set(jnp.where(keep, new, buffer[index]))
          for buffer, new in zip(draws, (states.position, states.logdensity_grad)))
    # the curvature fit's samples (second half only; the first half's are discarded)
    return (states, log_h, sums, draws), ((states.position, log_square) if curvature else None)

  zeros = jnp.zeros(dim, states.position.dtype)
  zero = jnp.zeros((), states.position.dtype)
  square = jnp.zeros((dim, dim) if moments else (), states.position.dtype)
  chains = jnp.zeros(states.position.shape[:1], states.position.dtype)
  per_chain = jnp.zeros_like(states.position)
  quarters = jnp.zeros((2, 2) + states.position.shape[:1] + (dim + 1,), states.position.dtype)
  anchor = jnp.zeros((dim + 1,), states.position.dtype)
  draws = ()
  if keep_draws:
    draws = (jnp.zeros((num_kept,) + states.position.shape, states.position.dtype),) * 2
  (states, log_h, sums, draws), kept = jax.lax.scan(
      transition, (states, log_h, (zeros, zeros, zero, zero, chains, square, square, zeros,
                                   per_chain, per_chain, quarters, anchor,
                                   jnp.zeros((), jnp.int32)), draws),
      (jax.random.split(key, length), jnp.arange(length)))
  s1, s2, s_log_h, s_acc, s_chain, s_xx, s_xl, s_l, c1, c2, quarters, _, divergent = sums
  n = half * states.position.shape[0]
  centred_mean = s1 / n
  variance = jnp.maximum(s2 / n - centred_mean**2, 0.0) * n / max(n - 1, 1)
  mean = shift + centred_mean
  variance = n / (n + 5.0) * variance + 1e-3 * 5.0 / (n + 5.0)
  within = jnp.mean(jnp.maximum(c2 / half - (c1 / half) ** 2, 0.0), 0) * half / max(half - 1, 1)
  within = n / (n + 5.0) * within + 1e-3 * 5.0 / (n + 5.0)
  slopes = covariance = None
  if moments:
    slopes = _log_scale_slopes(s_xx / n - jnp.outer(centred_mean, centred_mean),
                               s_xl / n - jnp.outer(centred_mean, s_l / n))
    covariance = (s_xx / n - jnp.outer(centred_mean, centred_mean)) * n / max(n - 1, 1)
  if kept is not None:  # (half * chains, dim) positions and log local variances
    kept = jax.tree.map(lambda a: a[length - half:].reshape(-1, dim), kept)
  rhat = _split_rhat(quarters, half // 2, half - half // 2)
  return (states, log_h, mean, variance, within, s_log_h / half, s_acc / half,
          s_chain / half, slopes, kept, midpoint(shift + c1 / half, mean), rhat, covariance,
          n, divergent, draws or None, _behind(quarters, half))


def _dense(location, covariance, variance, n):
  r"""The dense whitening of a window's covariance: its correlations shrunk towards the
  identity as Stan's dense metric is, :math:`\frac{n}{n+5} C + \frac{5}{n+5} I` (``n`` the
  draws per coordinate), times the (shrunk) standard deviations; the diagonal whitening
  where the Cholesky factor is not finite (a covariance too ill-conditioned for the
  dtype)."""
  scale = jnp.sqrt(variance)
  correlation = covariance / jnp.outer(scale, scale)
  eye = jnp.eye(covariance.shape[0], dtype=covariance.dtype)
  correlation = n / (n + 5.0) * correlation + 5.0 / (n + 5.0) * eye
  dense = dense_whitening(location, correlation * jnp.outer(scale, scale))
  finite = jnp.all(jnp.isfinite(dense.cholesky)) & jnp.all(jnp.isfinite(dense.inverse_cholesky))
  diagonal = Whitening(location, scale, jnp.diag(scale), jnp.diag(1.0 / scale))
  return jax.tree.map(lambda a, b: jnp.where(finite, a, b), dense, diagonal)


def _low_rank(key, positions, gradients, scale):
  r"""The diagonal-plus-low-rank whitening of a window's draws and gradients
  (:func:`metaoptax.l2hmc.low_rank.fisher_low_rank`, location 0) where the chains held out of
  choosing its directions confirm one (an eigenvalue outside :math:`[1/2, 2]`); else the
  diagonal ``scale`` (the window's standard deviations), with the same shapes (its
  eigenvalues 1)."""
  fitted = fisher_low_rank(key, positions, gradients, jnp.zeros_like(scale))
  diagonal = Whitening(fitted.location, scale, vectors=jnp.zeros_like(fitted.vectors),
                       eigenvalues=jnp.ones_like(fitted.eigenvalues))
  confirmed = jnp.any(fitted.eigenvalues != 1.0)
  return jax.tree.map(lambda a, b: jnp.where(confirmed, a, b), fitted, diagonal)


def _widest_variance(covariance):
  """The largest eigenvalue of the correlation matrix of ``covariance`` (``(dim, dim)``): the
  variance of the widest direction of the coordinates each scaled to unit variance."""
  scale = jnp.sqrt(jnp.maximum(jnp.diag(covariance), jnp.finfo(covariance.dtype).tiny))
  correlation = covariance / jnp.outer(scale, scale)
  return jnp.linalg.eigvalsh(0.5 * (correlation + correlation.T))[-1]


def _quarter_sums(t, length, half, x, logdensity, quarters, anchor):
  """Adds each chain's ``(x, log p)`` and its square to its sums over the third and the
  fourth quarter of a window (its second half split in two, for the split R-hat), both
  taken from the chains' mean at the second half's start (``anchor``, the same for every
  chain), so that the variances keep their float32 digits wherever the chains are."""
  y = jnp.concatenate([x, logdensity[:, None]], axis=1)
  anchor = jnp.where(t == length - half, jnp.mean(y, 0), anchor)
  y = y - anchor
  third = ((t >= length - half) & (t < length - half + half // 2)).astype(y.dtype)
  fourth = (t >= length - half + half // 2).astype(y.dtype)
  sums = jnp.stack([y, y * y])  # (2, chains, dim + 1)
  return quarters + jnp.stack([third * sums, fourth * sums], axis=1), anchor


def _split_rhat(quarters, n_third, n_fourth):
  r"""The split :math:`\hat R` of each coordinate and of ``log p`` (the last entry) over a
  window's second half: each chain's half cut in two sequences (Gelman et al., BDA3
  eq. 11.4, the sequences' means and variances from their sums)."""
  counts = jnp.asarray([n_third, n_fourth], quarters.dtype)[:, None, None]
  means = quarters[0] / counts  # (2, chains, dim + 1)
  variances = jnp.maximum(quarters[1] - counts * means**2, 0.0) / jnp.maximum(counts - 1, 1)
  means = means.reshape((-1,) + means.shape[2:])  # (2 * chains, dim + 1)
  n = 0.5 * (n_third + n_fourth)
  within = jnp.mean(variances.reshape(means.shape), 0)
  between = jnp.var(means, 0, ddof=1)
  pooled = (n - 1) / n * within + between
  return jnp.sqrt(pooled / jnp.maximum(within, jnp.finfo(quarters.dtype).tiny))


def _behind(quarters, half):
  """The chains whose mean log p over a window's second half (``half`` transitions; from the
  split R-hat's sums, ``quarters``) is below the median chain's by more than ``BEHIND_NATS``
  per coordinate: ``(chains,)`` bool."""
  means = jnp.sum(quarters[0, :, :, -1], 0) / half  # (chains,), less the common anchor
  dim = quarters.shape[-1] - 1
  return means < jnp.median(means) - BEHIND_NATS * dim


def _newton_whitening(logdensity_fn, position, floor=NEWTON_FLOOR):
  r"""A chain's own metric for travelling: the inverse of its negative Hessian at
  ``position``, each eigenvalue's magnitude clipped below at ``floor`` (a variance of at most
  :math:`1/\text{floor}` in any direction, where :math:`\log p` is flat or convex), as a
  square-root factor :math:`L = V \operatorname{diag}(|\lambda|^{-1/2})`."""
  hessian = jax.hessian(logdensity_fn)(position)
  hessian = 0.5 * (hessian + hessian.T)
  eigenvalues, vectors = jnp.linalg.eigh(-hessian)
  magnitude = jnp.maximum(jnp.abs(eigenvalues), floor)
  finite = jnp.all(jnp.isfinite(magnitude)) & jnp.all(jnp.isfinite(vectors))
  eye = jnp.eye(position.shape[0], dtype=position.dtype)
  root = jnp.where(finite, vectors * magnitude**-0.5, eye)
  inverse = jnp.where(finite, (vectors * magnitude**0.5).T, eye)
  return Whitening(jnp.zeros_like(position), jnp.sqrt(jnp.sum(root**2, axis=1)), root, inverse)


def midpoint(chain_means, mean):
  """Per coordinate, the midpoint of the average of the chains' means at or above ``mean``
  and of those below (``mean`` where they are all on one side)."""
  upper = chain_means >= mean
  counts = jnp.sum(upper, 0), jnp.sum(~upper, 0)
  high = jnp.sum(jnp.where(upper, chain_means, 0.0), 0) / jnp.maximum(counts[0], 1)
  low = jnp.sum(jnp.where(upper, 0.0, chain_means), 0) / jnp.maximum(counts[1], 1)
  return jnp.where((counts[0] > 0) & (counts[1] > 0), 0.5 * (high + low), mean)


def _log_scale_slopes(covariance, cross):
  r""":math:`G_{ji}/2 = \tfrac12\,\partial\log (x_i-\bar x_i)^2/\partial x_j`: the
  least-squares slopes of each coordinate's log square (or log inverse curvature) on the
  position (ridge :math:`10^{-6}` of the trace), halved (a scale), per unit of
  :math:`x_j` (times :math:`\sigma_j` of the whitening they are used with:
  :func:`_whitened`), diagonal 0."""
  dim = covariance.shape[0]
  ridge = 1e-6 * jnp.trace(covariance) / dim * jnp.eye(dim, dtype=covariance.dtype)
  slopes = 0.5 * jnp.linalg.solve(covariance + ridge, cross)
  return slopes * (1.0 - jnp.eye(dim, dtype=covariance.dtype))


def _whitened(slopes, scale):
  r"""Slopes per unit of :math:`x_j` -> per unit of :math:`z_j = x_j/\sigma_j`."""
  return slopes * scale[:, None]


def _restart_stuck(key, states, chain_acceptance, behind=None):
  """Chains whose mean acceptance is below ``STUCK``, or that are ``behind`` (:func:`_behind`;
  ``None``: none), move to the state of a moving chain drawn at random among the others
  (all kept if none moves)."""
  stuck = chain_acceptance < STUCK
  if behind is not None:
    stuck = stuck | behind
  moving = jnp.logical_not(stuck)
  weights = jnp.where(jnp.any(moving), moving.astype(jnp.float32), 1.0)
  donor = jax.random.choice(key, stuck.shape[0], stuck.shape, p=weights / jnp.sum(weights))
  stuck = stuck & jnp.any(moving)

  def restart(a):
    where = jnp.reshape(stuck, stuck.shape + (1,) * (a.ndim - 1))
    return jnp.where(where, a[donor], a)

  return jax.tree.map(restart, states)


def _hmc_params(log_h, local=None, dim=None):
  """One step size ``exp(log_h)`` for every step (the networks off); with ``local``, per
  coordinate (shape ``(1, dim)``) and shifted by the local model."""
  if local is None:
    log_eps = jnp.reshape(log_h, (1,))
    return L2HMCParams({}, log_eps, log_eps)
  log_eps = jnp.full((1, dim), log_h)
  return L2HMCParams({}, log_eps, log_eps, local)


def warmup(rng_key: jax.Array, logdensity_fn: Callable, positions: jax.Array, *,
           num_steps: int = 10, num_iterations: int = 300, init_step_size: float = 0.1,
           target_acceptance: float = 0.8, adaptation_rate: float = 1.0,
           slopes: str = "squares", scales: str = "pooled",
           location: str = "mean", max_burn_in_windows: int = 4,
           converged_rhat: float = CONVERGED_RHAT, jitter: float = 0.5,
           metric: str = "diagonal", scale_num_steps: int | None = None) -> WarmupResult:
  r"""Per-coordinate step sizes and burnt-in chains for an L2HMC sampler (module docstring).

  Args:
    rng_key: PRNG key.
    logdensity_fn: ``log p`` (up to a constant).
    positions: ``(chains, dim)`` starting points (e.g. the training chains').
    num_steps: ``K``, leapfrog steps per transition (the sampler's).
    num_iterations: transitions of the nominal warm-up (split 25 / 35 / 40 % into the
      windows); the burn-in window repeats while the chains have not found the typical
      set, so the warm-up may make up to ``max_burn_in_windows - 1`` burn-in windows more
      (``result.num_transitions``).
    init_step_size: :math:`h` at the start.
    target_acceptance: :math:`a^*`.
    adaptation_rate: :math:`\kappa`.
    slopes: what the final window regresses on the position to give
      ``log_scale_slopes`` (module docstring): ``"squares"``, each coordinate's log
      square, or ``"curvature"``, minus its log curvature
      :math:`-\log(-\partial^2\log p/\partial x_i^2)` (one Hessian-vector product per
      coordinate and chain at each transition of the window's second half).
    scales: the whitening's variance: ``"pooled"`` over the chains (Stan's), or
      ``"within"``, the mean of each chain's own variance over the window. On a
      multimodal target whose chains each stay in one mode, the pooled variance adds the
      spread between the modes, and a step size that moves the modes' width along that
      coordinate is then a fraction of :math:`\hat\sigma`; the within-chain variance is
      the modes' own. For samplers that cross modes by other means (``reflection=True``).
    location: the whitening's location: the chains' pooled ``"mean"`` over the final
      window's second half, or the ``"midpoint"`` of two groups of the chains' own means
      there (per coordinate: the average of those at or above the pooled mean and that of
      those below, halfway). The location is the centre of ``reflection=True``'s step
      :math:`x \to 2\mu - x`: on a target of two modes whose chains each stay in one, the
      mean is off the modes' midpoint by the chains' split between them, the midpoint is
      not, as long as one chain sits in each mode.
    max_burn_in_windows: the most burn-in windows (at least 1).
    converged_rhat: the burn-in ends once the split :math:`\hat R` of every coordinate
      and of ``log p`` over a window's second half is below this.
    metric: the whitening of windows 3 and after: ``"diagonal"``, per-coordinate scales
      (:math:`\hat\sigma`), or ``"dense"``, the Cholesky factor of the chains' covariance
      over window 2's second half (its correlations shrunk towards the identity by
      :math:`5/(n + 5)` as Stan's dense metric; the diagonal where the factor is not finite),
      for posteriors whose coordinates are correlated, or ``"low_rank"``, diagonal plus low
      rank (:func:`metaoptax.l2hmc.low_rank.fisher_low_rank`) from the draws and gradients of
      up to ``LOW_RANK_DRAWS`` transitions of window 2's second half, where the chains held
      out of choosing its directions confirm an eigenvalue outside :math:`[1/2, 2]`, else
      the diagonal: :math:`O(\text{dim}\,k)` per map, for thousands of coordinates.
      ``"dense"`` and ``"low_rank"`` need ``scales="pooled"`` and ``slopes="squares"``.
    jitter: the warm-up's transitions multiply :math:`h` by
      :math:`u \sim \mathcal U(1 - j, 1 + j)` (``L2HMCConfig.jitter``): a fixed
      trajectory whose length is near a whole period of a coordinate returns it to its start.
    scale_num_steps: the leapfrog steps per transition of window 2 (``None``:
      ``num_steps``). The burn-in travels; window 2 only draws, from chains that have
      arrived, the spread that the whitening is fitted to: a trajectory of a quarter period
      decorrelates its draws, and where the burn-in's step size makes that shorter than
      ``num_steps``, fewer steps draw as well for fewer gradients
      (:func:`metaoptax.l2hmc.adapt` chooses it so, between :func:`burn_in` and
      :func:`settle`, the two parts of this function). Window 3 keeps ``num_steps``: the
      step size it adapts is the sampler's start, and at a shorter trajectory it comes out
      smaller.

  Returns:
    A :class:`WarmupResult`: ``init_params(key, config, step_size=result.step_size)``
    and ``l2hmc(..., whitening=result.whitening)`` start the sampler there
    (per-coordinate step sizes all start at :math:`h`, multipliers of
    :math:`\hat\sigma`).

  Jit-able with the numbers static.
  """
  positions = jnp.asarray(positions)
  _check_arguments(positions, num_iterations=num_iterations,
                  target_acceptance=target_acceptance, init_step_size=init_step_size,
                  slopes=slopes, scales=scales, location=location, metric=metric,
                  max_burn_in_windows=max_burn_in_windows, converged_rhat=converged_rhat,
                  scale_num_steps=scale_num_steps)
  options = dict(num_iterations=num_iterations, target_acceptance=target_acceptance,
                 adaptation_rate=adaptation_rate, slopes=slopes, scales=scales, metric=metric,
                 jitter=jitter)
  burnt = burn_in(rng_key, logdensity_fn, positions, num_steps=num_steps,
                  init_step_size=init_step_size, max_burn_in_windows=max_burn_in_windows,
                  converged_rhat=converged_rhat, **options)
  return settle(rng_key, logdensity_fn, burnt, num_steps=num_steps,
                scale_num_steps=scale_num_steps, location=location, **options)


def _check_arguments(positions, *, num_iterations, target_acceptance, init_step_size, slopes,
                    scales, location, metric, max_burn_in_windows, converged_rhat,
                    scale_num_steps=None) -> None:
  """Raises ``ValueError`` for :func:`warmup`'s arguments out of range, naming the culprit."""
  if positions.ndim != 2:
    raise ValueError(f"positions must be (chains, dim), got shape {positions.shape}.")
  if positions.shape[0] < 2:
    raise ValueError(f"the warm-up needs at least 2 chains, got {positions.shape[0]}.")
  if num_iterations < 16:
    raise ValueError(f"num_iterations must be >= 16, got {num_iterations}.")
  if not 0.0 < target_acceptance < 1.0:
    raise ValueError(f"target_acceptance must be in (0, 1), got {target_acceptance}.")
  if not init_step_size > 0:
    raise ValueError(f"init_step_size must be > 0, got {init_step_size}.")
  if slopes not in SLOPES:
    raise ValueError(f"slopes must be one of {SLOPES}, got {slopes!r}.")
  if scales not in SCALES:
    raise ValueError(f"scales must be one of {SCALES}, got {scales!r}.")
  if location not in LOCATIONS:
    raise ValueError(f"location must be one of {LOCATIONS}, got {location!r}.")
  if metric not in METRICS:
    raise ValueError(f"metric must be one of {METRICS}, got {metric!r}.")
  if metric != "diagonal" and (scales != "pooled" or slopes != "squares"):
    raise ValueError(f'metric="{metric}" needs scales="pooled" and slopes="squares".')
  if isinstance(max_burn_in_windows, bool) or not (isinstance(max_burn_in_windows, int)
                                                   and max_burn_in_windows >= 1):
    raise ValueError(f"max_burn_in_windows must be an int >= 1, got {max_burn_in_windows!r}.")
  if not converged_rhat > 1.0:
    raise ValueError(f"converged_rhat must be > 1, got {converged_rhat}.")
  if scale_num_steps is not None and not (isinstance(scale_num_steps, int)
                                          and not isinstance(scale_num_steps, bool)
                                          and scale_num_steps >= 1):
    raise ValueError(f"scale_num_steps must be None or an int >= 1, got {scale_num_steps!r}.")


class BurnIn(NamedTuple):
  r"""The chains after :func:`burn_in`, the warm-up's first part, for :func:`settle`.

  Attributes:
    states: the chains' HMC states ``(chains, ...)``.
    log_h: :math:`\log h`, the step size's log at the burn-in's end.
    whitening: the diagonal whitening of the last burn-in window's spread (after
      :func:`pool_burn_in`, the dense one of its covariance).
    num_windows: int, the burn-in windows made.
    rhat: the largest split R-hat of the last burn-in window.
    num_divergent: int, the burn-in's divergent proposals, over every chain.
    num_leapfrog_steps: int, per chain, the leapfrog steps (gradients) of its transitions.
    widest_variance: the largest eigenvalue of the chains' correlation matrix over the last
      window's second half (as :attr:`WarmupResult.widest_variance`; 1 without its
      covariance, above ``MOMENTS_MAX_DIM`` coordinates with the diagonal metric).
    num_steps: the leapfrog steps per transition of its last windows (``burn_in``'s
      ``num_steps``, more after :func:`lengthen_burn_in`).
    num_pooled_windows: int, the windows that moved with the chains' pooled covariance
      (:func:`pool_burn_in`) rather than Newton metrics (they evaluate no Hessian).
  """

  states: Any
  log_h: jax.Array
  whitening: Whitening
  num_windows: jax.Array
  rhat: jax.Array
  num_divergent: jax.Array
  num_leapfrog_steps: jax.Array
  widest_variance: jax.Array
  num_steps: int = 0
  num_pooled_windows: Any = 0


def _lengths(num_iterations: int) -> list[int]:
  """The transitions of the burn-in window, window 2 and the final window."""
  lengths = [int(num_iterations * w) for w in WINDOWS[:2]]
  return lengths + [num_iterations - sum(lengths)]


def _windows(logdensity_fn, dim, num_steps, jitter, target_acceptance, adaptation_rate,
             moments):
  """``window(key, states, log_h, whitening, length, curvature, keep_draws)``: :func:`_window`
  with ``num_steps`` leapfrog steps per transition."""
  config = L2HMCConfig(dim=dim, num_steps=num_steps, use_networks=False,
                       step_sizes="shared", per_coordinate=False, jitter=jitter)
  kernel = build_kernel(config)
  masks = make_masks(jax.random.key(0), config)

  def window(key, states, log_h, whitening, length, curvature=False, keep_draws=0):
    return _window(logdensity_fn, kernel, masks, key, states, log_h, whitening, length,
                   target_acceptance, adaptation_rate, dim, curvature=curvature,
                   moments=moments, keep_draws=keep_draws)

  return window


def _moments(metric: str, slopes: str, dim: int) -> bool:
  """Whether the windows accumulate ``dim x dim`` second moments (``MOMENTS_MAX_DIM``)."""
  return metric == "dense" or slopes == "curvature" or dim <= MOMENTS_MAX_DIM


def _rescaled(found, scales: str):
  """A window's standard deviations: pooled over the chains, or within them (``scales``)."""
  return jnp.sqrt(found[3] if scales == "pooled" else found[4])


def _diagonal(scale):
  return Whitening(jnp.zeros_like(scale), scale)


def _travel_whitening(logdensity_fn, metric, states, whitening):
  """The burn-in's and window 2's whitening: dense, each chain's own Newton metric at its
  position (the local scales and correlations, wherever the chain is); else ``whitening``."""
  if metric == "dense":
    return jax.vmap(lambda x: _newton_whitening(logdensity_fn, x))(states.position)
  return whitening


def burn_in(rng_key: jax.Array, logdensity_fn: Callable, positions: jax.Array, *,
            num_steps: int = 10, num_iterations: int = 300, init_step_size: float = 0.1,
            target_acceptance: float = 0.8, adaptation_rate: float = 1.0,
            slopes: str = "squares", scales: str = "pooled", max_burn_in_windows: int = 4,
            converged_rhat: float = CONVERGED_RHAT, jitter: float = 0.5,
            metric: str = "diagonal") -> BurnIn:
  """The warm-up's burn-in (window 1 of the module docstring, repeated while the chains
  disagree), :func:`warmup`'s arguments (checked there): :func:`settle` continues from it.
  Jit-able with the numbers static."""
  positions = jnp.asarray(positions)
  dim = positions.shape[1]
  states = jax.vmap(lambda x: init(x, logdensity_fn))(positions)
  log_h = jnp.log(jnp.asarray(init_step_size, positions.dtype))
  zero = jnp.zeros((), jnp.int32)
  start = BurnIn(states, log_h, _diagonal(jnp.ones(dim, positions.dtype)), zero,
                 jnp.asarray(jnp.inf, positions.dtype), zero, zero,
                 jnp.ones((), positions.dtype), num_steps)
  return _burn_in_windows(rng_key, logdensity_fn, start, num_steps, num_iterations,
                          target_acceptance, adaptation_rate, slopes, scales,
                          max_burn_in_windows, converged_rhat, jitter, metric, first=True)


def lengthen_burn_in(rng_key: jax.Array, logdensity_fn: Callable, burnt: BurnIn, *,
                     num_steps: int, num_iterations: int = 300,
                     target_acceptance: float = 0.8, adaptation_rate: float = 1.0,
                     slopes: str = "squares", scales: str = "pooled",
                     max_burn_in_windows: int = 4, converged_rhat: float = CONVERGED_RHAT,
                     jitter: float = 0.5, metric: str = "diagonal",
                     max_rhat_ratio: float | None = None) -> BurnIn:
  """More burn-in windows from the chains, step size and whitening :func:`burn_in` left
  (``burnt``), with ``num_steps`` leapfrog steps per transition: up to
  ``max_burn_in_windows`` more, while the chains disagree (``converged_rhat``) and, with
  ``max_rhat_ratio``, while each window's split R-hat is at most that fraction of
  ``burnt``'s (the long trajectories bring the chains together, or they stop after the
  window that shows they do not). Where the
  burn-in's short trajectories leave the chains apart (a random walk at a small step size),
  trajectories of a quarter period let them travel; :func:`settle` continues from the result
  with the same ``num_steps``. Its counts (windows, divergent proposals, leapfrog steps) add
  to ``burnt``'s. :func:`burn_in`'s other arguments. Jit-able with the numbers static."""
  if max_rhat_ratio is not None and not max_rhat_ratio > 0:
    raise ValueError(f"max_rhat_ratio must be None or > 0, got {max_rhat_ratio}.")
  start = burnt._replace(rhat=jnp.asarray(jnp.inf, burnt.log_h.dtype), num_steps=num_steps)
  bound = jnp.inf if max_rhat_ratio is None else max_rhat_ratio * burnt.rhat
  return _burn_in_windows(rng_key, logdensity_fn, start, num_steps, num_iterations,
                          target_acceptance, adaptation_rate, slopes, scales,
                          max_burn_in_windows, converged_rhat, jitter, metric, first=True,
                          max_rhat=bound)


def pool_burn_in(rng_key: jax.Array, logdensity_fn: Callable, burnt: BurnIn, *,
                 num_steps: int, num_iterations: int = 300, target_acceptance: float = 0.8,
                 adaptation_rate: float = 1.0, slopes: str = "squares",
                 max_burn_in_windows: int = 8, converged_rhat: float = CONVERGED_RHAT,
                 jitter: float = 0.5) -> BurnIn:
  """More dense burn-in windows from the chains, step size and counts :func:`burn_in`
  (``metric="dense"``) left (``burnt``), with ``num_steps`` leapfrog steps per transition,
  while the chains disagree (``converged_rhat``), at most ``max_burn_in_windows``: the first
  moves each chain with its Newton metric, as the burn-in's windows do, and each later one
  every chain with the dense whitening of the chains' pooled covariance over the second half
  of the window before (:func:`_dense`, as :func:`settle`'s final window). A chain's Newton
  metric fits the curvature where its window starts; where that curvature changes along the
  chains' way (a hierarchy's scales, which set the curvature of the coordinates they scale),
  a step size that suits every chain's metric stays small and the chains creep, while the
  pooled covariance fits the region the chains span, their spread along their way included
  (a spread between chains in transit gives long steps along it, as the diagonal burn-in's
  scales do). Its counts add to ``burnt``'s; the result's whitening is the dense one of the
  last window's covariance, with which :func:`settle`'s window 2 moves the chains (the
  Newton metrics' small step size would have them creep again). :func:`burn_in`'s other
  arguments. Jit-able with the numbers static."""
  start = burnt._replace(rhat=jnp.asarray(jnp.inf, burnt.log_h.dtype), num_steps=num_steps)
  return _burn_in_windows(rng_key, logdensity_fn, start, num_steps, num_iterations,
                          target_acceptance, adaptation_rate, slopes, "pooled",
                          max_burn_in_windows, converged_rhat, jitter, "dense", first=True,
                          pooled=True)


def _burn_in_windows(rng_key, logdensity_fn, start: BurnIn, num_steps, num_iterations,
                     target_acceptance, adaptation_rate, slopes, scales, max_burn_in_windows,
                     converged_rhat, jitter, metric, first, max_rhat=jnp.inf,
                     pooled=False) -> BurnIn:
  """Burn-in windows of ``num_steps`` leapfrog steps from ``start`` while the chains disagree
  (and their split R-hat is at most ``max_rhat``), at most ``max_burn_in_windows``
  (``first``: at least one). With ``pooled`` (``metric="dense"``), the windows after the
  first move with the dense whitening of the window before's pooled covariance
  (:func:`pool_burn_in`)."""
  states = start.states
  dim = states.position.shape[1]
  dtype = states.position.dtype
  window = _windows(logdensity_fn, dim, num_steps, jitter, target_acceptance,
                    adaptation_rate, _moments(metric, slopes, dim))
  length = _lengths(num_iterations)[0]
  keys = jax.random.split(rng_key, 6)
  last = start.num_windows + max_burn_in_windows

  # burn-in: the chains travel to the typical set; it repeats until the chains agree (split
  # R-hat) or max_burn_in_windows are made. Diagonal: the scale re-estimated after each
  # window (a spread between chains in transit gives long steps along their way). Dense:
  # each chain moves with its own Newton metric, from its Hessian at the window's start
  def one(carry):
    states, log_h, whitening, count, _, divergent, _ = carry
    key = jax.random.fold_in(keys[0], count)
    # pooled: the window before's dense whitening where there is one (not the first window's)
    travel = (whitening if pooled and whitening.cholesky is not None
              else _travel_whitening(logdensity_fn, metric, states, whitening))
    found = window(key, states, log_h, travel, length)
    states = _restart_stuck(jax.random.fold_in(keys[3], count), found[0], found[7], found[16])
    widest = jnp.ones((), dtype)
    if metric == "diagonal" and found[12] is not None:
      widest = _widest_variance(found[12])
    spread = _diagonal(_rescaled(found, scales))
    if pooled:
      spread = _dense(jnp.zeros_like(spread.scale), found[12], found[3], found[13])
    return (states, found[5], spread, count + 1, jnp.max(found[11]), divergent + found[14],
            widest)

  def travelling(carry):
    return (carry[3] < last) & ~(carry[4] < converged_rhat) & ~(carry[4] > max_rhat)

  carry = (states, start.log_h, start.whitening, start.num_windows, start.rhat,
           start.num_divergent, start.widest_variance)
  if first:
    carry = one(carry)
  states, log_h, whitening, count, rhat, divergent, widest = jax.lax.while_loop(
      travelling, one, carry)
  steps = start.num_leapfrog_steps + (count - start.num_windows) * length * num_steps
  # pooled: every window but the first moved without Newton metrics
  pooled_windows = start.num_pooled_windows + pooled * (count - start.num_windows - 1)
  return BurnIn(states, log_h, whitening, count, rhat, divergent, steps, widest, num_steps,
                pooled_windows)


def settle(rng_key: jax.Array, logdensity_fn: Callable, burnt: BurnIn, *,
           num_steps: int = 10, num_iterations: int = 300, target_acceptance: float = 0.8,
           adaptation_rate: float = 1.0, slopes: str = "squares", scales: str = "pooled",
           location: str = "mean", jitter: float = 0.5,
           metric: str = "diagonal", scale_num_steps: int | None = None) -> WarmupResult:
  """The warm-up's windows 2 and 3 (module docstring) from the chains :func:`burn_in` left:
  window 2 with ``scale_num_steps`` leapfrog steps per transition (``None``: ``num_steps``),
  window 3 with ``num_steps``; :func:`warmup`'s other arguments, the same ``rng_key`` as
  the burn-in's. Jit-able with the numbers static."""
  states, log_h, whitening, count = burnt.states, burnt.log_h, burnt.whitening, burnt.num_windows
  dim = states.position.shape[1]
  scale_num_steps = scale_num_steps or num_steps
  moments = _moments(metric, slopes, dim)
  window = _windows(logdensity_fn, dim, num_steps, jitter, target_acceptance,
                    adaptation_rate, moments)
  scale_window = _windows(logdensity_fn, dim, scale_num_steps, jitter, target_acceptance,
                          adaptation_rate, moments)
  lengths = _lengths(num_iterations)
  keys = jax.random.split(rng_key, 6)

  def whitening_of(found):
    """The whitening that a window's statistics give (location 0: the leapfrog's moves do
    not depend on it)."""
    scale = _rescaled(found, scales)
    if metric == "dense":
      return _dense(jnp.zeros_like(scale), found[12], found[3], found[13])
    if metric == "low_rank":
      return _low_rank(jax.random.fold_in(keys[1], 1), *found[15], scale)
    return _diagonal(scale)

  # the whitening from chains that found the typical set: one window, then the final one;
  # window 2 moves with the pooled burn-in's dense whitening where it left one
  pooled_travel = whitening.cholesky is not None
  travel = (whitening if pooled_travel
            else _travel_whitening(logdensity_fn, metric, states, whitening))
  found = scale_window(keys[1], states, log_h, travel, lengths[1],
                 keep_draws=LOW_RANK_DRAWS if metric == "low_rank" else 0)
  states = _restart_stuck(keys[4], found[0], found[7], found[16])
  scale, log_h, whitening = _rescaled(found, scales), found[5], whitening_of(found)
  divergent = burnt.num_divergent + found[14]
  (states, _, mean, _, _, mean_log_h, acceptance, chain_acceptance, fitted, kept, midpoint,
   rhat, covariance, _, final_divergent, final_draws, behind) = window(
       keys[2], states, log_h, whitening, lengths[2], curvature=slopes == "curvature",
       keep_draws=LOW_RANK_DRAWS if metric == "low_rank" else 0)
  widest = None
  if metric == "diagonal" and covariance is not None:
    widest = _widest_variance(covariance)
  spread = None
  if metric == "low_rank":  # the widest whitened coordinate: what the fit left uncorrected
    spread = jnp.max(jnp.std(to_whitened(whitening._replace(location=mean), final_draws[0]),
                             axis=(0, 1)))
  states = _restart_stuck(keys[5], states, chain_acceptance, behind)
  samples = None
  if kept is not None:  # whitened positions and log local scales (halved log variances)
    samples = ((kept[0] - mean) / scale, 0.5 * kept[1] - jnp.log(scale))
  # the slopes in the units of the whitening that h was adapted with (window 2's scale)
  centre = mean if location == "mean" else midpoint
  return WarmupResult(jnp.exp(mean_log_h), whitening._replace(location=centre), states.position,
                      acceptance, None if fitted is None else _whitened(fitted, scale),
                      samples, rhat, count * lengths[0] + lengths[1] + lengths[2], burnt.rhat,
                      (count - burnt.num_pooled_windows + (not pooled_travel))
                      * (metric == "dense")
                      + (slopes == "curvature") * (lengths[2] - lengths[2] // 2),
                      divergent + final_divergent, widest, spread,
                      burnt.num_leapfrog_steps + lengths[1] * scale_num_steps
                      + lengths[2] * num_steps, num_steps)
