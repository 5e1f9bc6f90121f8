r"""A learned non-centering: HMC in the latent coordinates of a conditional affine transport.

A funnel's or a centered hierarchy's scale changes from place to place, and no whitening
(one affine map) makes it a standard normal. A non-centering does: :math:`x_i = e^{v/2}
u_i` turns Neal's funnel into independent normals, :math:`\theta_j = \mu + \tau u_j` the
centered eight schools into nearly so. This module learns such a map with no knowledge of
the model, from a warm-up's draws and the local Gaussians there.

In the whitening's coordinates :math:`z = (x - m)/\sigma`, some coordinates are *driven*
(the set :math:`\mathcal D`, mask ``driven``): each is a Gaussian given the others (the
*parents*, which pass through), with a centre and a log-scale that depend on the parents:

.. math::

  z_i = u_i \quad (i \notin \mathcal D), \qquad
  z_i = c_i(z) + e^{s_i(z)}\,u_i \quad (i \in \mathcal D),

  s_i = -\tfrac12\log\big(e^{-2(a_i + A_i z)} + \kappa_i\big), \qquad
  c_i = b_i + B_i z + \rho_i\,(b'_i + B'_i z), \quad \rho_i = \kappa_i e^{2 s_i},

with :math:`A, B, B'` nonzero only on parent columns: :math:`A` on the *drivers* among
them, :math:`B, B'` on the others (a member's centre moves with its scale's drivers only
through :math:`\rho_i`, as a conjugate member's does; a weight on them would run off
linearly beyond the draws, where the scale saturates). The local precision
:math:`e^{-2 s_i}` is a part that the drivers scale plus a floor
:math:`\kappa_i` (a centered hierarchy's member: :math:`1/\tau^2` from the prior,
:math:`1/\sigma_j^2` from its data), and the centre moves from the prior's
(:math:`b + Bz`, where the scale is small) to the data's (where the floor holds the
precision, :math:`\rho \to 1`): both exact for a conjugate Gaussian member, and for the
funnel (:math:`\kappa = 0`). So :math:`x = T(u) = m + \sigma\odot z`. The Jacobian is
block triangular, :math:`\log|\det\partial x/\partial u| = \sum_i\log\sigma_i +
\sum_{i\in\mathcal D} s_i`, and the inverse is closed form (:func:`inverse`: the parents
first, then :math:`u_i = (z_i - c_i)e^{-s_i}`). HMC samples the latent density
:math:`\log p(T(u)) + \log|\det \partial T/\partial u|` (:func:`latent_logdensity`),
exact for any fixed transport, at one gradient of :math:`\log p` per gradient; its draws
map back by :math:`T`.

The fit (:func:`fit`) reads each coordinate's local Gaussian given all the others at some
of the draws (:func:`local_gaussian`: the gradient :math:`g` and the Hessian diagonal
:math:`-c`): centre :math:`x_i + g_i/c_i`, log-scale :math:`-\tfrac12\log c_i`. Both are
exact wherever the draws are, so a warm-up that has not yet reached a funnel's neck still
finds the slope of its scale. Which coordinates drive, and which they drive, comes from the
slopes of those log-scales and centres on the position (:func:`local_slopes`) by
:func:`structure`: a driver's strongest log-scale slope out is at least ``MIN_SLOPE`` and
stronger than its strongest slope in (the funnel's :math:`x_i` have a slope 1.5 on
:math:`v`; :math:`v`'s on :math:`x_i` is 0 by symmetry); the other coordinates are driven,
each by the drivers with a slope on it of at least ``MIN_EDGE``, except those on which the
others' centres rest (the schools' :math:`\mu`), which stay parents. A Gaussian has every
slope 0, so there it finds no driver and the sampler is left as it was. A forward fit from
the draws, at no gradient of :math:`\log p` beyond the Hessian diagonals: reverse KL, as
NeuTra fits its flow, seeks a mode.

:func:`transported` wraps a sampler of the latent density as a sampler of :math:`p`: its
states hold :math:`x`, :math:`\log p(x)` and :math:`\nabla_x\log p(x)`, each step maps them
to the latent ones (:math:`\nabla_u = J^\top\nabla_x + \nabla_u\log|\det|`), steps, and maps
back (:math:`\nabla_x = J_{T^{-1}}^\top(\nabla_u L - \nabla_u\log|\det|)`), with no further
evaluation of :math:`\log p`.

References:
  Hoffman, Sountsov, Dillon, Langmore, Tran and Vasudevan, `NeuTra-lizing bad geometry in
  Hamiltonian Monte Carlo using neural transport <https://arxiv.org/abs/1903.03704>`_, 2019.
  Papaspiliopoulos, Roberts and Sköld, `A general framework for the parametrization of
  hierarchical models <https://doi.org/10.1214/088342307000000014>`_, Statistical Science
  2007.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.flatten_util
import jax.numpy as jnp

import optax

from metaoptax.l2hmc.kernel import L2HMCState, SamplingAlgorithm

__all__ = ("NonCentering", "identity", "structure", "forward", "inverse",
           "latent_logdensity", "local_gaussian", "local_slopes", "fit", "FitResult",
           "to_latent_state", "from_latent_state", "transported")

MIN_SLOPE = 0.3  # the least strongest |log-scale slope| (whitened) out of a driver
MIN_EDGE = 0.1  # the least |log-scale slope| of an edge driver -> driven (structure)
MIN_CORRELATION = 0.3  # local_slopes regresses a row on the coordinates this correlated with it
HUB_RATIO = 2.0  # a driven coordinate the others' centres rest on this much more stays a parent
# ... and on which they rest this much at least (summed |centre slopes|, whitened): the funnel's
# x_i, on which no centre rests, have centre slopes of rounding error, whose ratio made some of
# them parents left in the funnel (structure)
MIN_HUB = 0.1
RIDGE = 1e-4  # the fit's ridge on the weights (per point, whitened units): the log-scales', and
# the centre's without the local Gaussians (with them: CENTRE_RIDGE)
# fit: the centre's ridge, a fraction of each column's own weighted sum of squares (the normal
# equations' diagonal). A neck divides the centre's error by its scale e^s, down to 1e-4 of the spread (a centered hierarchy's
# members at small tau), and a ridge shrinks the weights by about its fraction: 1e-4 left a
# centre many local sds off there
CENTRE_RIDGE = 1e-6
CENTRE_RIDGE_FLOOR = 1e-12  # ... of at least this fraction of the weights' sum (a column of 0s)
FIT_ROUNDS = 3  # the fit's rounds of weighted least squares (fit)
LOG_CHI2_SHIFT = 0.635  # -E[log chi^2_1] / 2: a standard normal's mean log |u| is -0.635
SATURATING_ITERATIONS = 300  # Adam's iterations of the saturating scale's fit
SATURATING_LEARNING_RATE = 0.05
MAX_LOG_SCALE = 10.0  # |s_i(u)| is clipped there (a bound on e^s that keeps T finite)


class NonCentering(NamedTuple):
  r""":math:`x = m + \sigma\odot z(u)` (module docstring).

  Attributes:
    location: ``(dim,)``, :math:`m`, the whitening's location.
    scale: ``(dim,)``, :math:`\sigma > 0`, the whitening's scale.
    driven: ``(dim,)`` bool, :math:`\mathcal D`.
    shift: ``(dim,)``, :math:`b` (0 off :math:`\mathcal D`).
    shift_weights: ``(dim, dim)``, :math:`B`, nonzero only at (driven row, parent column
      other than the row's drivers).
    log_scale: ``(dim,)``, :math:`a` (0 off :math:`\mathcal D`).
    scale_weights: ``(dim, dim)``, :math:`A`, nonzero only at (driven row, driver column).
    precision_floor: ``(dim,)``, :math:`\kappa \ge 0` (0 off :math:`\mathcal D`).
    far_shift: ``(dim,)``, :math:`b'` (0 off :math:`\mathcal D`).
    far_shift_weights: ``(dim, dim)``, :math:`B'`, nonzero only at (driven row, parent column
      other than the row's drivers).
  """

  location: jax.Array
  scale: jax.Array
  driven: jax.Array
  shift: jax.Array
  shift_weights: jax.Array
  log_scale: jax.Array
  scale_weights: jax.Array
  precision_floor: jax.Array
  far_shift: jax.Array
  far_shift_weights: jax.Array


def identity(location: jax.Array, scale: jax.Array) -> NonCentering:
  r"""The transport that only whitens: no coordinate driven.

  Args:
    location: ``(dim,)``, the whitening's location :math:`m`.
    scale: ``(dim,)``, the whitening's scale :math:`\sigma > 0`.

  Returns:
    A :class:`NonCentering` with :math:`x = m + \sigma\odot u`.
  """
  dim = location.shape[0]
  zeros, square = jnp.zeros_like(location), jnp.zeros((dim, dim), location.dtype)
  return NonCentering(location, scale, jnp.zeros(dim, bool), zeros, square, zeros, square,
                      zeros, zeros, square)


def structure(slopes: jax.Array, centre_slopes: jax.Array | None = None,
              min_slope: float = MIN_SLOPE, min_edge: float = MIN_EDGE,
              hub_ratio: float = HUB_RATIO, min_hub: float = MIN_HUB):
  r"""``(driven, edges)`` from the log-scale slopes ``slopes`` ``(dim, dim)`` (entry
  ``(j, i)``: :math:`H_{ji}`, whitened; module docstring): ``driven`` ``(dim,)`` bool,
  ``edges`` ``(dim, dim)`` bool with entry ``(i, j)`` where parent ``j`` may drive the
  driven ``i``'s scale.

  The drivers are the coordinates whose strongest slope out, :math:`\max_i |H_{ji}|`, is
  at least ``min_slope`` and above their strongest slope in; every other coordinate is
  driven (the fit gives the ones the drivers do not move a scale of about constant), with
  an edge from each driver whose slope on it is at least ``min_edge``. No coordinate is
  driven where no driver is found (a Gaussian: every slope 0).

  With ``centre_slopes`` (:math:`C_{ji} = \partial(\text{centre of } z_i)/\partial z_j`,
  :func:`local_slopes`), a driven coordinate on which the others' centres depend
  ``hub_ratio`` times more than its own centre depends on them (summed over the driven
  ones), and at least ``min_hub``, stays a parent: the centered schools' :math:`\mu`, whose
  scale :math:`\tau` also sets, but on which every :math:`\theta_j`'s centre rests
  (non-centered, :math:`\theta_j = \mu + \tau u_j` needs :math:`\mu` a parent).

  Args:
    slopes: ``(dim, dim)``, the log-scale slopes :math:`H` (``WarmupResult.log_scale_slopes``
      or :func:`local_slopes`' first).
    centre_slopes: ``(dim, dim)`` or ``None``, the centres' slopes :math:`C`
      (:func:`local_slopes`' second).
    min_slope: a driver's least strongest slope out.
    min_edge: the least slope of a driver on a driven coordinate for an edge.
    hub_ratio: how many times more the others' centres must rest on a driven coordinate than
      its own on them for it to stay a parent.
    min_hub: how much at least (summed centre slopes) they must rest on it.

  Returns:
    ``(driven, edges)`` as above.
  """
  strength = jnp.abs(jnp.where(jnp.isfinite(slopes), slopes, 0.0))
  strength = strength * (1.0 - jnp.eye(slopes.shape[0], dtype=strength.dtype))
  into, out = jnp.max(strength, axis=0), jnp.max(strength, axis=1)
  drivers = (out >= min_slope) & (out > into)
  driven = ~drivers & jnp.any(drivers)
  if centre_slopes is not None:
    centre = jnp.abs(jnp.where(jnp.isfinite(centre_slopes), centre_slopes, 0.0))
    centre = centre * (1.0 - jnp.eye(slopes.shape[0], dtype=centre.dtype)) * driven[None, :]
    centre_out, centre_in = jnp.sum(centre, axis=1), jnp.sum(centre, axis=0)
    driven = driven & ~((centre_out > hub_ratio * centre_in) & (centre_out >= min_hub))
  edges = (strength.T >= min_edge) & driven[:, None] & drivers[None, :]
  return driven, edges


def local_slopes(positions: jax.Array, gradients: jax.Array, curvatures: jax.Array,
                 location: jax.Array, scale: jax.Array, ridge: float = RIDGE):
  r"""``(H, C)``, ``(dim, dim)`` each: the least-squares slopes of each coordinate's local
  log-scale :math:`-\tfrac12\log(c_i\sigma_i^2)` and of its local centre
  :math:`(x_i + g_i/c_i - m_i)/\sigma_i` (:func:`local_gaussian`'s ``gradients`` and
  ``curvatures`` at ``positions``, ``(n, dim)`` each) on the whitened position
  :math:`(x - m)/\sigma` (``location``, ``scale``), entry ``(j, i)``, over the positions
  where :math:`c_i > 0` (ridge ``ridge`` per point), diagonal 0: :func:`structure`'s input.
  Each row regresses on the coordinates whose correlation with its target is at least
  ``MIN_CORRELATION`` only (the others' slopes 0): with hundreds of coordinates and a few
  hundred positions, a regression on all of them is mostly noise.
  The local Gaussian is the coordinate's given all the others, so only the coordinates that
  set it have a slope (the centered schools' :math:`\theta_j` on :math:`\log\tau`, not on
  a :math:`\theta_k` that merely goes with :math:`\tau`).

  Args:
    positions: ``(n, dim)``, where the local Gaussians were read.
    gradients: ``(n, dim)``, :math:`g` there (:func:`local_gaussian`).
    curvatures: ``(n, dim)``, :math:`c` there (:func:`local_gaussian`).
    location: ``(dim,)``, the whitening's location :math:`m`.
    scale: ``(dim,)``, the whitening's scale :math:`\sigma`.
    ridge: the ridge per point on the slopes.

  Returns:
    ``(H, C)`` as above.
  """
  z = (positions - location) / scale
  m, dim = z.shape
  design = jnp.concatenate([jnp.ones((m, 1), z.dtype), z - jnp.mean(z, 0)], axis=1)
  positive = curvatures > 0
  curvature = jnp.where(positive, curvatures, 1.0)
  local = -0.5 * jnp.log(curvature * scale**2)
  centres = z + gradients / curvature / scale
  penalty = jnp.diag(jnp.concatenate([jnp.full(1, 1e-9), jnp.full(dim, ridge)]).astype(z.dtype))

  off_diagonal = 1.0 - jnp.eye(dim, dtype=z.dtype)
  identity = jnp.eye(dim + 1, dtype=z.dtype)

  def row(weights, target):
    count = jnp.maximum(jnp.sum(weights), 1.0)
    mean = jnp.sum(weights * target) / count
    centred = (target - mean) * weights
    spread = jnp.sqrt(jnp.sum(centred**2) / count) * jnp.sqrt(jnp.mean(design[:, 1:]**2, 0))
    correlation = (centred @ design[:, 1:]) / count / jnp.maximum(spread, 1e-30)
    columns = jnp.concatenate([jnp.ones(1, bool),
                               jnp.abs(correlation) >= MIN_CORRELATION]).astype(z.dtype)
    x = design * columns
    masked = jnp.where(columns > 0, penalty * count, identity)
    return jnp.linalg.solve(x.T @ (x * weights[:, None]) + masked, x.T @ (weights * target))[1:]

  weights = positive.astype(z.dtype)
  return tuple(jax.vmap(row, in_axes=(1, 1))(weights, target).T * off_diagonal
               for target in (local, centres))


def _scale_exponent(transport: NonCentering, parents_z: jax.Array) -> jax.Array:
  r""":math:`s_i = -\tfrac12\log(e^{-2(a_i + A_i z)} + \kappa_i)`, :math:`a_i + A_i z` clipped
  to :math:`\pm` ``MAX_LOG_SCALE``."""
  s = jnp.clip(transport.log_scale + transport.scale_weights @ parents_z, -MAX_LOG_SCALE,
               MAX_LOG_SCALE)
  return s - 0.5 * jnp.log1p(transport.precision_floor * jnp.exp(2.0 * s))


def _centre(transport: NonCentering, parents_z: jax.Array, s: jax.Array) -> jax.Array:
  r""":math:`b + B z + \rho\,(b' + B' z)`, :math:`\rho = \kappa e^{2 s}` (the share of the
  local precision that the floor holds: 0 where the scale is small, 1 where it saturates)."""
  rho = transport.precision_floor * jnp.exp(2.0 * s)
  return (transport.shift + transport.shift_weights @ parents_z
          + rho * (transport.far_shift + transport.far_shift_weights @ parents_z))


def forward(transport: NonCentering, u: jax.Array):
  """``(x, log|det dx/du|)`` of one latent position.

  Args:
    transport: the :class:`NonCentering`.
    u: ``(dim,)``, the latent position.

  Returns:
    ``(x, log_det)``: the position ``(dim,)`` and the log Jacobian determinant (a scalar).
  """
  parents = jnp.where(transport.driven, 0.0, u)
  s = _scale_exponent(transport, parents)
  z = jnp.where(transport.driven, _centre(transport, parents, s) + jnp.exp(s) * u, u)
  log_det = jnp.sum(jnp.log(transport.scale)) + jnp.sum(jnp.where(transport.driven, s, 0.0))
  return transport.location + transport.scale * z, log_det


def inverse(transport: NonCentering, x: jax.Array) -> jax.Array:
  """The latent position of one position (:func:`forward`'s inverse, closed form).

  Args:
    transport: the :class:`NonCentering`.
    x: ``(dim,)``, the position.

  Returns:
    ``u`` ``(dim,)`` with ``forward(transport, u)[0] == x``.
  """
  z = (x - transport.location) / transport.scale
  parents = jnp.where(transport.driven, 0.0, z)
  s = _scale_exponent(transport, parents)
  return jnp.where(transport.driven, (z - _centre(transport, parents, s)) * jnp.exp(-s), z)


def latent_logdensity(logdensity_fn: Callable, transport: NonCentering) -> Callable:
  r""":math:`u \mapsto \log p(T(u)) + \log|\det J_T(u)|`, the density HMC samples
  (``logdensity_fn`` of a flat position).

  Args:
    logdensity_fn: :math:`\log p` of a flat position ``(dim,)``.
    transport: the :class:`NonCentering` :math:`T`.

  Returns:
    The latent log density, a function of ``u`` ``(dim,)``.
  """

  def logdensity(u):
    x, log_det = forward(transport, u)
    return logdensity_fn(x) + log_det

  return logdensity


def _log_det(transport: NonCentering, u: jax.Array) -> jax.Array:
  return forward(transport, u)[1]


def to_latent_state(transport: NonCentering, state: L2HMCState) -> L2HMCState:
  r"""The latent state of a flat state in :math:`x` (its log density and gradient mapped,
  module docstring; no evaluation of :math:`\log p`).

  Args:
    transport: the :class:`NonCentering`.
    state: an :class:`metaoptax.l2hmc.L2HMCState` of flat arrays in :math:`x`.

  Returns:
    The :class:`metaoptax.l2hmc.L2HMCState` in :math:`u`: position, latent log density and
    its gradient.
  """
  u = inverse(transport, state.position)
  (_, log_det), pullback = jax.vjp(lambda v: forward(transport, v), u)
  (grad,) = pullback((state.logdensity_grad, jnp.ones_like(log_det)))
  return L2HMCState(u, state.logdensity + log_det, grad)


def from_latent_state(transport: NonCentering, state: L2HMCState) -> L2HMCState:
  r"""The flat state in :math:`x` of a latent state (:func:`to_latent_state`'s inverse).

  Args:
    transport: the :class:`NonCentering`.
    state: an :class:`metaoptax.l2hmc.L2HMCState` in :math:`u`.

  Returns:
    The :class:`metaoptax.l2hmc.L2HMCState` in :math:`x`: position, :math:`\log p` and its
    gradient.
  """
  x, log_det = forward(transport, state.position)
  log_det_grad = jax.grad(lambda v: _log_det(transport, v))(state.position)
  _, pullback = jax.vjp(lambda y: inverse(transport, y), x)
  (grad,) = pullback(state.logdensity_grad - log_det_grad)
  return L2HMCState(x, state.logdensity - log_det, grad)


class FitResult(NamedTuple):
  """What :func:`fit` found.

  Attributes:
    transport: the fitted :class:`NonCentering`.
    loss: the fit's final negative log likelihood per draw (of the driven coordinates,
      whitened).
  """

  transport: NonCentering
  loss: jax.Array


def local_gaussian(logdensity_fn: Callable, position: jax.Array):
  r"""``(gradient, curvature)`` of :math:`\log p` at ``position`` ``(dim,)``: its gradient
  :math:`g` and the diagonal of minus its Hessian :math:`c_i = -\partial^2\log p/\partial
  x_i^2` (one forward-over-reverse product per coordinate, the gradient their primal). Each
  coordinate's conditional given the others, approximated as a Gaussian there, has centre
  :math:`x_i + g_i/c_i` and scale :math:`c_i^{-1/2}` (exact for a conditionally Gaussian
  coordinate: the funnel's :math:`x_i`, a centered hierarchy's members).

  Args:
    logdensity_fn: :math:`\log p` of a flat position.
    position: ``(dim,)``.

  Returns:
    ``(gradient, curvature)``, ``(dim,)`` each.
  """
  grad = jax.grad(logdensity_fn)
  basis = jnp.eye(position.shape[0], dtype=position.dtype)
  grads, columns = jax.vmap(lambda e: jax.jvp(grad, (position,), (e,)))(basis)
  return grads[0], -jnp.diagonal(columns)


def fit(draws: jax.Array, location: jax.Array, scale: jax.Array, driven: jax.Array,
        edges: jax.Array, positions: jax.Array | None = None,
        gradients: jax.Array | None = None, curvatures: jax.Array | None = None,
        num_rounds: int = FIT_ROUNDS, ridge: float = RIDGE) -> FitResult:
  r"""The transport that fits ``draws`` ``(n, dim)`` (module docstring): each driven
  coordinate a Gaussian given the parents, :math:`B, B'` on every parent but the row's
  ``edges``, :math:`A` on ``edges`` (from :func:`structure`).

  With the local Gaussians (:func:`local_gaussian`: ``gradients`` and ``curvatures`` at
  ``positions``, ``(m, dim)`` each; the points where the curvature is positive):
  :math:`(a_i, A_i, \kappa_i)` by least squares of the local log-scales
  :math:`-\tfrac12\log(c_i\sigma_i^2)` (the log-linear fit, then Adam on the saturating
  one, :math:`\kappa` from a thousandth of the least local precision), then :math:`(b_i,
  B_i, b'_i, B'_i)` by least squares of the centres :math:`(x_i + g_i/c_i - m_i)/\sigma_i`
  on :math:`(1, z, \rho, \rho z)`, weighted by the local precision (a centre's error counts
  in units of the local scale: an error :math:`\delta` where the scale is :math:`e^{s}`
  leaves a funnel in the latent coordinates wherever :math:`e^{s} \ll \delta`). Without
  them (``draws`` only): :math:`(b_i, B_i)` by least squares weighted by :math:`e^{-2 s_i}`
  and :math:`(a_i, A_i)` by least squares of :math:`\log|r_i| + 0.635` on the parents
  (:math:`r` the residuals; the log-normal scale model's regression, consistent where the
  draws are the posterior's), ``num_rounds`` rounds from :math:`s = 0`, :math:`\kappa = B'
  = 0`. Ridge ``ridge`` (per point) on the weights, but for the centre's with the local
  Gaussians: ``CENTRE_RIDGE`` of each column's own weighted sum of squares (a shrinkage of
  the weights by about that fraction, which a neck's scale magnifies in the latent
  coordinates).

  Args:
    draws: ``(n, dim)``, the warm-up's draws.
    location: ``(dim,)``, the whitening's location :math:`m`.
    scale: ``(dim,)``, the whitening's scale :math:`\sigma`.
    driven: ``(dim,)`` bool, from :func:`structure`.
    edges: ``(dim, dim)`` bool, from :func:`structure`.
    positions: ``(m, dim)`` or ``None``, where the local Gaussians were read.
    gradients: ``(m, dim)`` or ``None``, :func:`local_gaussian`'s gradients there.
    curvatures: ``(m, dim)`` or ``None``, :func:`local_gaussian`'s curvatures there.
    num_rounds: the rounds of the fit from the draws alone.
    ridge: the ridge per point (the log-scales' weights; the centre's without the local
      Gaussians).

  Returns:
    A :class:`FitResult`.
  """
  z = (draws - location) / scale
  n, dim = z.shape
  ones = lambda count: jnp.ones((count, 1), z.dtype)
  design = jnp.concatenate([ones(n), jnp.where(driven, 0.0, z)], axis=1)
  # a driven coordinate's centre rests on the parents other than its scale's drivers: a
  # hierarchy's member moves with its location (mu), and with its scale (tau) only through
  # rho, the prior's share of its precision (exact for a conjugate member)
  shift_columns = jnp.concatenate([jnp.ones((dim, 1), bool), ~driven[None, :] & ~edges],
                                  axis=1)
  scale_columns = jnp.concatenate([jnp.ones((dim, 1), bool), edges], axis=1)
  eye = jnp.eye(dim + 1, dtype=z.dtype)

  def solve(x, columns, weights, target):
    """Weighted least squares of ``target`` on the design ``x``'s ``columns``, ridge on all
    but the intercept; the other columns' coefficients 0."""
    x = x * columns
    count = jnp.maximum(jnp.sum(weights > 0), 1)
    penalty = jnp.where(columns, ridge * count, 1.0) * eye
    penalty = penalty.at[0, 0].set(jnp.where(columns[0], 1e-9 * count, 1.0))
    return jnp.linalg.solve(x.T @ (x * weights[:, None]) + penalty, x.T @ (weights * target))

  if curvatures is not None:
    at = (positions - location) / scale
    at_design = jnp.concatenate([ones(at.shape[0]), jnp.where(driven, 0.0, at)], axis=1)
    positive = curvatures > 0
    weights = positive.astype(z.dtype)
    curvature = jnp.where(positive, curvatures, 1.0)
    centres = at + gradients / curvature / scale
    local = -0.5 * jnp.log(curvature * scale**2)
    # the centres' errors in units of the local scale: weights the local precision
    precision = weights * curvature * scale**2
    precision = precision / jnp.maximum(jnp.mean(precision, axis=0), 1e-30)
    linear = jax.vmap(lambda c, w, t: solve(at_design, c, w, t), in_axes=(0, 1, 1))(
        scale_columns, weights, local)
    log_scale, floor = _saturating(at_design, scale_columns, weights, local, linear)
    # rho = kappa e^{2 s} at the positions: the centre's second part's weight
    s_at = jnp.clip(at_design @ log_scale.T, -MAX_LOG_SCALE, MAX_LOG_SCALE)
    s_at = s_at - 0.5 * jnp.log1p(floor * jnp.exp(2.0 * s_at))
    rho = floor * jnp.exp(2.0 * s_at)  # (m, dim)
    big_eye = jnp.eye(2 * (dim + 1), dtype=z.dtype)

    def centre_row(columns, w, r, t):
      both = jnp.concatenate([columns, columns])
      x = jnp.concatenate([at_design, r[:, None] * at_design], axis=1) * both
      gram = x.T @ (x * w[:, None])
      # the ridge a fraction CENTRE_RIDGE of each column's own weighted sum of squares: rho's
      # columns are small where the floor holds little of the precision, a ridge per point
      # shrinks their weights most, and the intercept takes up what they lose, an error that
      # is divided by the neck's scale e^s in the latent coordinates
      own = jnp.maximum(jnp.diagonal(gram), CENTRE_RIDGE_FLOOR * jnp.sum(w))
      penalty = jnp.where(both, CENTRE_RIDGE * own, 1.0) * big_eye
      penalty = penalty.at[0, 0].set(1e-9 * own[0])
      return jnp.linalg.solve(gram + penalty, x.T @ (w * t))

    coefficients = jax.vmap(centre_row, in_axes=(0, 1, 1, 1))(shift_columns, precision, rho,
                                                              centres)
    shift, far = coefficients[:, :dim + 1], coefficients[:, dim + 1:]
  else:
    floor = jnp.zeros(dim, z.dtype)
    far = jnp.zeros((dim, dim + 1), z.dtype)
    s = jnp.zeros_like(z)
    for _ in range(num_rounds):
      shift = jax.vmap(lambda c, w, t: solve(design, c, w, t), in_axes=(0, 1, 1))(
          shift_columns, jnp.exp(-2 * s), z)
      log_abs = 0.5 * jnp.log((z - design @ shift.T) ** 2 + 1e-12) + LOG_CHI2_SHIFT
      log_scale = jax.vmap(lambda c, t: solve(design, c, jnp.ones(n, z.dtype), t),
                           in_axes=(0, 1))(scale_columns, log_abs)
      s = jnp.clip(design @ log_scale.T, -MAX_LOG_SCALE, MAX_LOG_SCALE)
  keep = driven[:, None]
  transport = NonCentering(location, scale, driven, jnp.where(driven, shift[:, 0], 0.0),
                           jnp.where(keep, shift[:, 1:], 0.0),
                           jnp.where(driven, log_scale[:, 0], 0.0),
                           jnp.where(keep & edges, log_scale[:, 1:], 0.0),
                           jnp.where(driven, floor, 0.0), jnp.where(driven, far[:, 0], 0.0),
                           jnp.where(keep, far[:, 1:], 0.0))
  u = jax.vmap(lambda v: inverse(transport, location + scale * v))(z)
  s = jax.vmap(lambda v: _scale_exponent(transport, jnp.where(driven, 0.0, v)))(z)
  r = u
  nll = jnp.where(driven, s + 0.5 * r**2, 0.0)
  return FitResult(transport, jnp.sum(jnp.mean(nll, 0)) / jnp.maximum(jnp.sum(driven), 1))


def _saturating(design, columns, weights, local, linear, num_iterations=SATURATING_ITERATIONS):
  r"""The saturating local scale :math:`s = -\tfrac12\log(e^{-2(a + A z)} + \kappa)` of each
  row that fits the local log-scales ``local`` ``(m, dim)`` at ``design`` ``(m, dim + 1)``
  (least squares over ``weights``, the ``columns`` of each row): Adam from the log-linear
  fit ``linear`` ``(dim, dim + 1)`` and :math:`\kappa` a thousandth of the least local
  precision. ``(coefficients (dim, dim + 1), kappa (dim,))``."""
  precision = jnp.where(weights > 0, jnp.exp(-2.0 * local), jnp.inf)
  least = jnp.min(precision, axis=0)
  start = (linear * columns, jnp.log(1e-3 * jnp.where(jnp.isfinite(least), least, 1.0)))

  def loss(params):
    coefficients, log_floor = params
    s = jnp.clip(design @ (coefficients * columns).T, -MAX_LOG_SCALE, MAX_LOG_SCALE)
    fitted = -0.5 * jnp.logaddexp(-2.0 * s, log_floor)
    return jnp.sum(weights * (fitted - local) ** 2) / jnp.maximum(jnp.sum(weights), 1.0)

  optimizer = optax.adam(SATURATING_LEARNING_RATE)

  def step(carry, _):
    params, state = carry
    grads = jax.grad(loss)(params)
    updates, state = optimizer.update(grads, state, params)
    return (optax.apply_updates(params, updates), state), None

  (params, _), _ = jax.lax.scan(step, (start, optimizer.init(start)), None,
                                length=num_iterations)
  coefficients, log_floor = params
  return coefficients * columns, jnp.exp(log_floor)


def transported(latent: SamplingAlgorithm, transport: NonCentering) -> SamplingAlgorithm:
  """A sampler of :math:`p` from ``latent``, a sampler of the flat latent density
  (:func:`latent_logdensity`): its positions are pytrees in :math:`x`, its states hold
  :math:`\\log p` and its gradient (module docstring), its info's ``proposal`` is in
  :math:`x`.

  Args:
    latent: a sampler (``init``, ``step``) of :func:`latent_logdensity`, flat positions.
    transport: the :class:`NonCentering` it samples the latent coordinates of.

  Returns:
    A :class:`metaoptax.l2hmc.SamplingAlgorithm` whose states are in :math:`x`.
  """

  def init_fn(position, rng_key=None):
    vector, unravel = jax.flatten_util.ravel_pytree(position)
    state = from_latent_state(transport, latent.init(inverse(transport, vector), rng_key))
    return L2HMCState(position, state.logdensity, unravel(state.logdensity_grad))

  def step_fn(rng_key, state):
    vector, unravel = jax.flatten_util.ravel_pytree(state.position)
    grad = jax.flatten_util.ravel_pytree(state.logdensity_grad)[0]
    latent_state = to_latent_state(transport, L2HMCState(vector, state.logdensity, grad))
    new, info = latent.step(rng_key, latent_state)
    new = from_latent_state(transport, new)
    proposal = forward(transport, info.proposal)[0]
    return (L2HMCState(unravel(new.position), new.logdensity, unravel(new.logdensity_grad)),
            info._replace(proposal=unravel(proposal)))

  return SamplingAlgorithm(init_fn, step_fn)
