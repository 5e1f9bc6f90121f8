r"""Position-dependent step sizes by Gibbs self-tuning (GIST).

A fixed step size cannot suit Neal's funnel: the scale of :math:`x_i` is
:math:`e^{v/2}`, so a step that moves the mouth diverges in the neck, and one
that enters the neck crawls in the mouth. Making the step size a deterministic
function of the start of the trajectory breaks reversibility (the reverse
trajectory starts elsewhere). Gibbs self-tuning (Bou-Rabee, Carpenter and
Marsden 2024) makes it exact: the step size's *tuning variable* is drawn from a
conditional distribution given the position, the leapfrog runs with it fixed, and
the Metropolis-Hastings ratio includes the tuning variable's conditional density at
both ends.

Here the tuning variable is one scalar :math:`w` per transition,

.. math::

  w \mid z \sim \mathcal N(\beta^\top z, 1), \qquad
  \log\varepsilon_i(w) = \log\varepsilon_i + c_i\, w,

with :math:`z` the sampler's (whitened) position, :math:`\beta, c \in \mathbb R^d`
trainable and :math:`\varepsilon_i` the per-coordinate step sizes of every
leapfrog step. For fixed :math:`w` the generalized leapfrog with direction flip
is an involution on :math:`(z, v, d)`, so the augmented target
:math:`p(z)\,\mathcal N(v; 0, I)\,\mathcal N(w; \beta^\top z, 1)` is left invariant by
accepting :math:`(z', v')` with

.. math::

  A = \min\Big(1,\ \exp\big(H(\xi) - H(\xi') + \log|\det J|\big)\,
      \frac{\mathcal N(w; \beta^\top z', 1)}{\mathcal N(w; \beta^\top z, 1)}\Big),

and marginally :math:`p(z)` (its :math:`w` is redrawn at every transition, a Gibbs
step). The extra factor is a cost of :math:`\tfrac12(\beta^\top(z'-z))^2` at
most: large :math:`\beta` makes the step size follow the position closely, at the
price of rejecting long moves along :math:`\beta`. With :math:`c = 0` the step
sizes do not depend on :math:`w`, :math:`\beta` has no effect on the dynamics and
the factor is the only trace of it.

On the funnel, :math:`\beta = b\,e_v` and :math:`c_{x_i} = \sigma_v/(2b)`,
:math:`c_v = 0` give :math:`\varepsilon_{x_i} \propto e^{v/2}` up to a log-normal
jitter of sd :math:`\sigma_v/(2b)`. Training (:mod:`metaoptax.l2hmc.training`)
differentiates through the reparameterisation :math:`w = \beta^\top z + u`,
:math:`u \sim \mathcal N(0, 1)`.

Starting point (:func:`fit`). Trained from :math:`\beta = 0` the expected squared
jump, dominated by the bulk, does not find the neck (measured in
``docs/l2hmc.md``), so the warm-up measures it (:func:`metaoptax.l2hmc.warmup`):
:math:`H_{ji} = \partial\log\hat\sigma_i(z)/\partial z_j`, the slopes of each
coordinate's log scale on the position. Its best rank-one approximation
:math:`s\,a b^\top` (:math:`\|a\| = \|b\| = 1`) gives :math:`\beta = \kappa a`,
:math:`c = (s/\kappa) b`, so that :math:`c\,\beta^\top z = s\,b\,a^\top z` follows the
fitted scales, with :math:`\kappa = \max(1, s\max_i|b_i| / \text{JITTER})`: the
step sizes' log-normal jitter :math:`|c_i|` is at most ``JITTER``, and
:math:`\kappa \geq 1` keeps the acceptance cost small where the slopes are small
(on a Gaussian, :math:`H \approx 0` and the sampler stays HMC).

Saturating step sizes (:func:`fit_caps`). A coordinate whose precision is a
position-dependent part plus a constant one (the centered eight schools' effect
:math:`\theta_j`: :math:`1/\tau^2 + 1/\sigma_j^2`) has a log scale with slope 1 in
:math:`\log\tau` in the neck and 0 where :math:`\tau \gg \sigma_j`; a log-linear model
fitted across both overshoots above. With caps :math:`u_i` the shift is the soft minimum

.. math::

  \log\varepsilon_i(w) = \log\varepsilon_i + m(c_i w, u_i) - m(0, u_i), \qquad
  m(a, u) = -\tfrac12\log\big(e^{-2a} + e^{-2u}\big),

so that :math:`\varepsilon_i(w)^{-2} \propto e^{-2c_i w} + e^{-2u_i}` (precisions add):
linear for :math:`c_i w \ll u_i` (:math:`u_i = \infty` is the log-linear model) and at
most :math:`u_i - m(0, u_i)` above. The step sizes are still a deterministic function of
:math:`w`, so the leapfrog with :math:`w` fixed is an involution and the acceptance ratio
above stays exact, unchanged.

The scale move (:func:`scale_move`, ``L2HMCConfig(scale_move=s)``). The model also
says how to move along the funnel: with the pivot :math:`k = \arg\max_j|\beta_j|` (the
funnel's :math:`v`, the schools' :math:`\log\tau`) and :math:`S_i(z_k) = m(c_i\beta_k z_k, u_i)`
the modelled log scale of :math:`z_i` as the pivot varies (:math:`c_i\beta_k z_k` without
caps),

.. math::

  T_t:\quad z_k \to z_k + t, \qquad
  z_i \to a_i + (z_i - a_i)\, e^{S_i(z_k + t) - S_i(z_k)}\ (i \neq k),

a one-parameter group (:math:`T_s T_t = T_{s+t}`, :math:`T_t^{-1} = T_{-t}`) with a
triangular Jacobian, :math:`\log|\det \partial T_t/\partial z| = \sum_{i\neq k}
S_i(z_k + t) - S_i(z_k)`. Drawing :math:`t \sim \mathcal N(0, s^2)` (symmetric) and
accepting :math:`T_t z` with :math:`\min(1, p(T_t z)|\det\partial T_t/\partial z| / p(z))`
leaves :math:`p` invariant (a group move, Liu and Sabatti 2000). On Neal's funnel with the
exact model (:math:`x_i` scaled by :math:`e^{t/2}` as :math:`v \to v + t`) the ratio is
:math:`\mathcal N(v + t; 0, 9)/\mathcal N(v; 0, 9)`: the move samples :math:`v` from its
marginal, where the leapfrog random-walks. One gradient evaluation per transition (the
moved point's). The centres :math:`a_i` (:func:`fit_centre`) are where the coordinates
contract to in the neck: the funnel's :math:`x_i` about 0, not about their whitening
location (0.2-1.0 away in the benchmark's warm-up, which cut the move's acceptance from
0.78 to 0.43 at :math:`s = 1`).

References:
  Liu and Sabatti, `Generalised Gibbs sampler and multigrid Monte Carlo for Bayesian
  computation <https://doi.org/10.1093/biomet/87.2.353>`_, Biometrika 2000.
  Bou-Rabee, Carpenter and Marsden, `GIST: Gibbs self-tuning for locally
  adaptive Hamiltonian Monte Carlo <https://arxiv.org/abs/2404.15253>`_, 2024.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ("LocalStepSizes", "fit", "fit_caps", "fit_centre", "keep_if_varying",
           "fit_varies", "scale_move", "scales_vary", "diagonal_curvature")

INIT_EXPONENT = 0.1  # c without a fit: a +-10 % jitter, whose gradient moves beta
JITTER = 0.5  # largest |c_i| of a fit: the sd of log eps_i given z


class LocalStepSizes(NamedTuple):
  r""":math:`w \sim \mathcal N(\beta^\top z, 1)`, :math:`\log\varepsilon_i \mathrel{+}= c_i w`
  (saturating with ``cap``).

  Attributes:
    slope: ``(dim,)``, :math:`\beta`.
    exponent: ``(dim,)``, :math:`c`.
    cap: ``(dim,)``, :math:`u`, the bound of the saturating shift; ``None``: log-linear.
    centre: ``(dim,)``, the point the scale move scales about; ``None``: 0.
  """

  slope: jax.Array
  exponent: jax.Array
  cap: jax.Array | None = None
  centre: jax.Array | None = None


def init_local(dim: int) -> LocalStepSizes:
  """:math:`\\beta = 0`, :math:`c = ` ``INIT_EXPONENT``."""
  return LocalStepSizes(jnp.zeros(dim, jnp.float32), jnp.full((dim,), INIT_EXPONENT, jnp.float32))


def fit(log_scale_slopes: jax.Array) -> LocalStepSizes:
  r""":math:`\beta, c` from the warm-up's slopes :math:`H` (module docstring).

  The leading singular triple :math:`(s, a, b)` of :math:`H`: :math:`\beta = \kappa a` and
  :math:`c = s b / \kappa`, with :math:`\kappa \ge 1` the least that keeps every
  :math:`|c_i|` at most ``JITTER``.

  Args:
    log_scale_slopes: :math:`H`, ``(dim, dim)``, the warm-up's ``log_scale_slopes``
      (:class:`~metaoptax.l2hmc.WarmupResult`).

  Returns:
    A log-linear :class:`LocalStepSizes` (no cap, no centre).
  """
  left, singular, right = jnp.linalg.svd(log_scale_slopes)
  a, s, b = left[:, 0], singular[0], right[0]
  kappa = jnp.maximum(1.0, s * jnp.max(jnp.abs(b)) / JITTER)
  return LocalStepSizes(kappa * a, s / kappa * b)


#: The caps :func:`fit_caps` tries: quantiles of the fitted shifts, the largest plus these,
#: and no cap.
CAP_QUANTILES = tuple(float(q) for q in np.linspace(0.5, 1.0, 11))
CAP_ABOVE = (0.25, 0.5, 1.0, 2.0)
#: Multipliers of the exponents :func:`fit_caps` tries with each cap: the least-squares
#: slope of a saturating log scale is lower than its slope below the cap.
EXPONENT_MULTIPLIERS = (1.0, 1.1, 1.2, 1.35, 1.5)


def fit_caps(local: LocalStepSizes, positions: jax.Array,
             log_scales: jax.Array) -> LocalStepSizes:
  r"""Caps :math:`u_i` (and exponents :math:`c_i`) of the saturating shift, by least squares.

  For each coordinate, over the warm-up's samples (``positions`` :math:`z_k` and
  ``log_scales`` :math:`\ell_{ki}`, the log local scales, both ``(n, dim)``) and
  :math:`p_k = \beta^\top z_k`: the exponent :math:`a` (``EXPONENT_MULTIPLIERS`` times
  :math:`c_i`) and the cap :math:`u` (``CAP_QUANTILES`` of :math:`a p_k`, the largest plus
  ``CAP_ABOVE``, or :math:`\infty`) that minimise
  :math:`\sum_k (\ell_{ki} - m(a p_k, u) - \overline{\ell_i - m(a p, u)})^2` (the intercept
  fitted). A log-linear scale keeps :math:`u_i = \infty`, :math:`a = c_i`. If the
  exponents exceed ``JITTER``, :math:`c` is scaled back to it and :math:`\beta` up by the
  same factor (:math:`c\beta^\top` and the caps unchanged).

  Args:
    local: the log-linear fit (:func:`fit`).
    positions: the warm-up's whitened positions :math:`z_k`, ``(n, dim)``.
    log_scales: their log local scales :math:`\ell_{ki}`, ``(n, dim)``.

  Returns:
    The :class:`LocalStepSizes` with its caps (and exponents, and slopes when rescaled).
  """
  projection = positions @ local.slope  # (n,)
  multipliers = jnp.asarray(EXPONENT_MULTIPLIERS, log_scales.dtype)
  exponents = multipliers[:, None] * local.exponent  # (M, dim)
  linear = exponents[:, None, :] * projection[None, :, None]  # (M, n, dim)
  top = jnp.max(linear, axis=1)  # (M, dim)
  caps = jnp.concatenate([
      jnp.quantile(linear, jnp.asarray(CAP_QUANTILES, log_scales.dtype), axis=1),
      top[None] + jnp.asarray(CAP_ABOVE, log_scales.dtype)[:, None, None],
      jnp.full((1,) + top.shape, jnp.inf, log_scales.dtype)])  # (U, M, dim)
  shifted = _soft_minimum(linear[None], caps[:, :, None, :])  # (U, M, n, dim)
  residual = log_scales - shifted
  error = jnp.mean((residual - jnp.mean(residual, axis=2, keepdims=True)) ** 2, axis=2)
  best = jnp.argmin(error.reshape(-1, error.shape[-1]), axis=0)  # (dim,) over (U, M)
  index = jnp.arange(error.shape[-1])
  cap = caps.reshape(-1, caps.shape[-1])[best, index]
  exponent = exponents[best % len(EXPONENT_MULTIPLIERS), index]
  kappa = jnp.maximum(1.0, jnp.max(jnp.abs(exponent)) / JITTER)
  return LocalStepSizes(local.slope * kappa, exponent / kappa, cap)


#: Least standard deviation over the warm-up's positions of some coordinate's log step-size
#: shift for :func:`keep_if_varying` to keep the local model (:math:`e^{0.4} = 1.5`).
MIN_SPREAD = 0.4


def keep_if_varying(local: LocalStepSizes, positions: jax.Array) -> LocalStepSizes:
  r"""``local``, or :math:`\beta = c = 0` (fixed step sizes) where its step sizes hardly vary.

  The shift of each coordinate's log step size at the warm-up's ``positions`` ``(n, dim)``
  (noise-free, :math:`w = \beta^\top z`) has a standard deviation over them; if the largest
  is below ``MIN_SPREAD`` the local model buys little and its tuning variable still costs
  acceptance (the ratio of its densities), so it is switched off (then training may still
  move :math:`\beta, c`). ``MIN_SPREAD`` and the spreads it separates:
  ``docs/design-decisions.md``.

  Args:
    local: the fitted :class:`LocalStepSizes`.
    positions: the warm-up's whitened positions ``(n, dim)``.

  Returns:
    ``local``, or a copy with zero slopes and exponents.
  """
  spread = _spread(local, positions)
  zero = jnp.zeros_like(local.exponent)
  off = LocalStepSizes(zero, zero, None if local.cap is None else jnp.full_like(local.cap,
                                                                                 jnp.inf),
                       local.centre)
  return jax.tree.map(lambda on, off: jnp.where(spread >= MIN_SPREAD, on, off), local, off)


def _spread(local: LocalStepSizes, positions: jax.Array) -> jax.Array:
  """The largest standard deviation over ``positions`` ``(n, dim)`` (whitened) of a
  coordinate's log step-size shift (noise-free, :math:`w = \beta^\top z`)."""
  w = positions @ local.slope
  shifts = shifted_log_step_sizes(local, jnp.zeros_like(local.exponent), w[:, None])
  return jnp.max(jnp.std(shifts, axis=0))


def fit_varies(log_scale_slopes: jax.Array, positions: jax.Array,
               log_scales: jax.Array) -> jax.Array:
  r"""Whether the saturating fit of the log-scale slopes :math:`H` (``(dim, dim)``, whitened,
  as :func:`fit` takes them) and of the log local scales ``log_scales`` at ``positions``
  (``(n, dim)`` each, whitened, as :func:`fit_caps` takes them) passes
  :func:`keep_if_varying` there: :func:`fit`, :func:`fit_caps`, then the largest spread of a
  coordinate's log step-size shift at least ``MIN_SPREAD``.

  A test before the warm-up that fits local step sizes, from local scales measured already
  (the local Gaussians of :mod:`metaoptax.l2hmc.noncentering`'s screen: the same slopes of
  the log local scales on the position that this warm-up's final window measures): where it
  fails, that warm-up's fit would be switched off by :func:`keep_if_varying`, up to the two
  measurements' difference.

  Args:
    log_scale_slopes: :math:`H`, ``(dim, dim)``.
    positions: ``(n, dim)``, whitened positions where the local scales were read.
    log_scales: ``(n, dim)``, their log local scales.

  Returns:
    A bool scalar.
  """
  local = fit_caps(fit(log_scale_slopes), positions, log_scales)
  return _spread(local, positions) >= MIN_SPREAD


def diagonal_curvature(logdensity_fn, position):
  r""":math:`-\partial^2\log p/\partial x_i^2` for every ``i``.

  One Hessian-vector product per coordinate, forward over reverse (``dim`` of them,
  vmapped).

  Args:
    logdensity_fn: ``x (dim,) -> log p(x)``.
    position: ``x``, ``(dim,)``.

  Returns:
    ``(dim,)``, the diagonal of minus the Hessian of :math:`\log p` at ``position``.
  """
  grad = jax.grad(logdensity_fn)
  basis = jnp.eye(position.shape[0], dtype=position.dtype)
  column = jax.vmap(lambda e: jax.jvp(grad, (position,), (e,))[1])(basis)
  return -jnp.diagonal(column)


def scales_vary(curvatures: jax.Array) -> jax.Array:
  r"""Whether some coordinate's local scale varies across the chains: its curvature
  :math:`-\partial^2\log p/\partial x_i^2` (``curvatures``, ``(chains, dim)``, one row per
  chain's position) is positive at every chain and :math:`\tfrac12\log` of it has a
  standard deviation over the chains of at least ``MIN_SPREAD``.

  A cheap screen (one Hessian diagonal per chain) before a warm-up for local step sizes:
  a Gaussian's curvature is the same everywhere (spread 0), the funnel's :math:`x_i` have
  :math:`e^{-v}` (spread :math:`\tfrac12\mathrm{sd}(v)`), and a coordinate whose curvature
  changes sign somewhere (a non-log-concave direction) has no local scale to follow.
  Whether a position-dependent step size then follows the variation is
  :func:`keep_if_varying`'s decision, on the warm-up's fit.

  Args:
    curvatures: ``(chains, dim)``, :func:`diagonal_curvature` at each chain's position.

  Returns:
    A bool scalar.
  """
  positive = jnp.all(curvatures > 0, axis=0)
  half_log = 0.5 * jnp.log(jnp.where(curvatures > 0, curvatures, 1.0))
  return jnp.any(positive & (jnp.std(half_log, axis=0) >= MIN_SPREAD))


def fit_centre(positions: jax.Array, log_scales: jax.Array) -> jax.Array:
  r""":math:`a_i = \sum_k w_{ki} z_{ki} / \sum_k w_{ki}`, :math:`w_{ki} = e^{-2\ell_{ki}}`: each
  coordinate's mean over the warm-up's samples weighted by its local precision, dominated
  by the samples deepest in the neck (the point the scale move contracts towards).

  Args:
    positions: the warm-up's whitened positions :math:`z_{ki}`, ``(n, dim)``.
    log_scales: their log local scales :math:`\ell_{ki}`, ``(n, dim)``.

  Returns:
    :math:`a`, ``(dim,)``: the ``centre`` of :class:`LocalStepSizes`.
  """
  weights = jnp.exp(-2.0 * (log_scales - jnp.min(log_scales, axis=0)))
  return jnp.sum(weights * positions, axis=0) / jnp.sum(weights, axis=0)


def scale_move(local: LocalStepSizes, z: jax.Array, t: jax.Array):
  r""":math:`(T_t z, \log|\det\partial T_t/\partial z|)` of the scale move (module docstring).

  The pivot coordinate (the largest :math:`|\beta_k|`) moves by :math:`t`; every other
  coordinate is scaled about ``local.centre`` by the change of its local step size.

  Args:
    local: the :class:`LocalStepSizes`.
    z: the whitened position ``(dim,)``.
    t: the move's size along the pivot.

  Returns:
    ``(moved, log_det)``.
  """
  pivot = jnp.argmax(jnp.abs(local.slope))
  rate = local.exponent * local.slope[pivot]  # d S_i / d z_k below the caps
  other = jnp.arange(z.shape[0]) != pivot
  def log_scale(z_k):
    if local.cap is None:
      return rate * z_k
    return _soft_minimum(rate * z_k, local.cap)
  change = jnp.where(other, log_scale(z[pivot] + t) - log_scale(z[pivot]), 0.0)
  centre = jnp.zeros_like(z) if local.centre is None else local.centre
  moved = jnp.where(other, centre + (z - centre) * jnp.exp(change), z + t)
  return moved, jnp.sum(change)


def _soft_minimum(a, u):
  r""":math:`m(a, u) = -\tfrac12\log(e^{-2a} + e^{-2u})` (:math:`a` where :math:`u = \infty`)."""
  return -0.5 * jnp.logaddexp(-2.0 * a, -2.0 * u)


def tuning_variable(local: LocalStepSizes, z: jax.Array, noise: jax.Array) -> jax.Array:
  """:math:`w = \\beta^\\top z + u` for a standard normal ``noise`` :math:`u`."""
  return jnp.dot(local.slope, z) + noise


def log_density(local: LocalStepSizes, w: jax.Array, z: jax.Array) -> jax.Array:
  """:math:`\\log\\mathcal N(w; \\beta^\\top z, 1)` up to its constant (which cancels)."""
  return -0.5 * (w - jnp.dot(local.slope, z)) ** 2


def shifted_log_step_sizes(local: LocalStepSizes, log_step_size: jax.Array,
                           w: jax.Array) -> jax.Array:
  """:math:`\\log\\varepsilon + c\\,w` for ``(steps, dim)`` per-coordinate log step sizes;
  with caps, :math:`\\log\\varepsilon + m(c\\,w, u) - m(0, u)` (module docstring)."""
  if local.cap is None:
    return log_step_size + local.exponent * w
  return (log_step_size + _soft_minimum(local.exponent * w, local.cap)
          - _soft_minimum(jnp.zeros_like(local.cap), local.cap))
