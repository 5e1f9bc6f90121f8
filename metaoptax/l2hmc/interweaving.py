r"""Interweaving: a Metropolis move of a hierarchy's location and scale in its non-centered
coordinates.

A hierarchical target declares a location :math:`\mu = x_a`, a log scale
:math:`\lambda = \log\tau = x_b` and members :math:`\theta_j = x_{m_j}` (:math:`j = 1..n`)
that are centered on :math:`\mu` with scale :math:`\tau` (:class:`Interweaving`; eight
schools: :math:`(\mu, \log\tau, \theta_{1..8})`). In these *centered* coordinates
:math:`\log\tau` given :math:`\theta` is pinned by :math:`\sum_j(\theta_j - \mu)^2/\tau^2`
(a conditional sd of :math:`\sim 1/\sqrt{2n}`), so a sampler moving them crawls along the
funnel and its chains make slow excursions into the neck. In the *non-centered* coordinates
:math:`\tilde\theta_j = (\theta_j - \mu)/\tau` the same :math:`\tau` is free to move where
the data say little (the neck). Interweaving (Yu and Meng 2011) alternates moves in the two
parametrisations; this move is the non-centered half: :math:`(\mu, \lambda)` move with
:math:`\tilde\theta` held fixed,

.. math::

  T_{s,t}:\quad \mu \to \mu + s, \qquad \lambda \to \lambda + t, \qquad
  \theta_j \to \mu + s + e^{t}(\theta_j - \mu),

the other coordinates unchanged. :math:`T_{s,t}` is a group action of
:math:`(\mathbb R^2, +)` (:math:`T_{s_2,t_2}T_{s_1,t_1} = T_{s_1+s_2,\,t_1+t_2}`,
:math:`T_{s,t}^{-1} = T_{-s,-t}`) with a triangular Jacobian of determinant
:math:`e^{nt}`. With :math:`(s, t) \sim \mathcal N(0, \mathrm{diag}(r_\mu^2, r_\lambda^2))`
(symmetric under :math:`(s,t) \to (-s,-t)`), accepting :math:`T_{s,t}x` with

.. math::

  A = \min\Big(1,\ \frac{p(T_{s,t}x)}{p(x)}\, e^{n t}\Big)

leaves :math:`p` invariant (a group move, Liu and Sabatti 2000; equivalently a random-walk
Metropolis step on :math:`(\mu, \lambda)` of the non-centered density
:math:`p(x(\mu, \lambda, \tilde\theta))\,\tau^{n}` at fixed :math:`\tilde\theta`). It is exact
for any density: the declared structure only decides whether the move is a good one. A
non-finite ratio rejects. ``num_moves`` such steps per transition, each costing one gradient
evaluation (the moved point's value and gradient, which the state carries).

The proposal scales :math:`r` are in the whitening's units (``Interweaving.scales`` times
the whitening's scales of :math:`\mu` and :math:`\lambda`; the target's units without one).

Reference:
  Yu and Meng, `To center or not to center: that is not the question - an
  ancillarity-sufficiency interweaving strategy (ASIS) for boosting MCMC efficiency
  <https://doi.org/10.1198/jcgs.2011.203main>`_, JCGS 2011.
  Liu and Sabatti, `Generalised Gibbs sampler and multigrid Monte Carlo for Bayesian
  computation <https://doi.org/10.1093/biomet/87.2.353>`_, Biometrika 2000.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

__all__ = ("Interweaving", "move", "proposal_scales", "gradient_evaluations")


class Interweaving(NamedTuple):
  r"""The declared hierarchy (indices into the position) and the move's settings (static).

  Attributes:
    location: the index of the hierarchy's location :math:`\mu`.
    log_scale: the index of its log scale :math:`\log\tau`.
    members: the indices of its members, :math:`\theta_j \sim (\mu, \tau)`.
    scales: the proposal standard deviations of :math:`(s, t)`, in whitened units.
    num_moves: the Metropolis steps per transition (one gradient evaluation each).
  """

  location: int
  log_scale: int
  members: tuple[int, ...]
  scales: tuple[float, float] = (1.0, 1.0)
  num_moves: int = 1


def validate(config: Interweaving, dim: int) -> None:
  indices = (config.location, config.log_scale) + tuple(config.members)
  if len(set(indices)) != len(indices) or not all(0 <= i < dim for i in indices):
    raise ValueError(f"interweaving: location, log_scale and members must be distinct indices "
                     f"in [0, {dim}), got {config}.")
  if not config.members or config.num_moves < 1 or min(config.scales) <= 0:
    raise ValueError("interweaving needs members, num_moves >= 1 and scales > 0.")


def move(config: Interweaving, x: jax.Array, s: jax.Array, t: jax.Array):
  r""":math:`(T_{s,t}x, \log|\det\partial T_{s,t}/\partial x|)` (module docstring).

  The location moves by :math:`s`, the log scale by :math:`t`, and the members keep
  their non-centered values: :math:`\theta_j \mapsto \mu + s + e^t (\theta_j - \mu)`.

  Args:
    config: the :class:`Interweaving` (which coordinates are which).
    x: the position ``(dim,)``.
    s: the shift of the location.
    t: the shift of the log scale.

  Returns:
    ``(moved, log_det)``: the moved position and :math:`n_\mathrm{members}\, t`.
  """
  members = jnp.asarray(config.members)
  mu = x[config.location]
  moved = x.at[members].set(mu + s + jnp.exp(t) * (x[members] - mu))
  moved = moved.at[config.location].add(s).at[config.log_scale].add(t)
  return moved, len(config.members) * t


def proposal_scales(config: Interweaving, whitening_scale: jax.Array | None) -> jax.Array:
  r"""The proposal standard deviations of ``(s, t)``.

  Args:
    config: the :class:`Interweaving`; its ``scales`` are in whitened units.
    whitening_scale: the whitening's ``scale`` ``(dim,)``, or ``None`` (unwhitened).

  Returns:
    ``(2,)``: ``config.scales`` times the whitening's scales of :math:`\mu` and
    :math:`\log\tau`.
  """
  scales = jnp.asarray(config.scales, jnp.float32)
  if whitening_scale is None:
    return scales
  return scales * whitening_scale[jnp.asarray([config.location, config.log_scale])]



def gradient_evaluations(config: Interweaving | None) -> int:
  """The gradient evaluations the moves add to a transition.

  Args:
    config: the :class:`Interweaving`, or ``None``.

  Returns:
    ``config.num_moves``, or 0 without interweaving.
  """
  return 0 if config is None else config.num_moves
