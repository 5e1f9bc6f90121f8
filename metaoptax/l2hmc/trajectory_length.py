r"""The number of leapfrog steps, from the warm-up's step size.

After the warm-up the sampler moves in whitened coordinates :math:`z`, in which the
posterior is near a standard normal, with a step size :math:`h` adapted to an acceptance
of 0.8. On a standard normal, exact Hamiltonian dynamics rotate :math:`(z, v)`; after a
quarter period, a trajectory of length :math:`\pi/2`, the new position is the old
momentum, independent of the old position, so both :math:`z` and :math:`z^2` decorrelate
in one transition. Shorter trajectories make a diffusion, and longer ones no more
independent draws per gradient, until the half period sends :math:`z \to -z`, which
leaves :math:`z^2` where it was. So the sampler takes

.. math::

  K = \min\big(\lceil \tfrac{\pi/2}{h} \rceil,\; K_\text{max}\big)

steps: the fewest whose trajectory reaches the quarter period. Where the whitening is
diagonal, correlated coordinates leave directions wider than the others in :math:`z`: the
step size follows the narrowest, and the quarter period of the widest direction, of
variance :math:`\lambda` (the largest eigenvalue of the coordinates' correlation matrix,
``WarmupResult.widest_variance``), is :math:`\sqrt\lambda` times longer, so

.. math::

  K = \min\big(\lceil \tfrac{\sqrt{\lambda}\,\pi/2}{h} \rceil,\; K_\text{max}\big),

with :math:`\lambda = 1` where the whitening fits the correlations (dense, low rank). Where
a coordinate stays wider than 1 after a diagonal-plus-low-rank whitening (its warm-up
measures the largest whitened standard deviation :math:`s`, ``WarmupResult.whitened_spread``),
its quarter period is :math:`s\,\pi/2`, and ``num_steps_for(h / s)`` reaches it (the
sampler then takes :func:`num_steps_for_spread`'s :math:`K`, below, at least that). Where
the posterior is near Gaussian after whitening,
:math:`h` is near 1 and
:math:`K` is a few steps; where its curvature varies, the acceptance target makes
:math:`h` small and the trajectory keeps its length with more steps. Training then
adapts each step's sizes (the jittered trajectory's length varies around
:math:`K h`).

A trajectory long enough for the widest coordinate can be a poor one for the unit ones.
Exact dynamics on a standard normal coordinate over a length :math:`t` give
:math:`z' = z\cos t + v\sin t`, so the squares' lag-one autocorrelation is
:math:`\cos^2 t`; with the step sizes jittered by :math:`u\sim\mathcal U(1-j, 1+j)`
(``L2HMCConfig.jitter``) and :math:`t = Khu`,

.. math::

  \rho(K) = \mathbb E_u\big[\cos^2(Khu)\big]
           = \tfrac12 + \tfrac12\cos(2Kh)\,\frac{\sin(2Khj)}{2Khj}

(:func:`square_autocorrelation`), and the squares' effective sample size per gradient is
:math:`(1-\rho)/((1+\rho)K)`. Near :math:`s = 2` the widest coordinate's quarter period
is a unit coordinate's half period, :math:`z \to -z`, and :math:`z^2` barely moves
(:math:`\rho \approx 0.8`): the folded split :math:`\hat R` of hundreds of unit
coordinates then fails. So where the warm-up measured :math:`s`
(:func:`num_steps_for_spread`), the sampler takes, of the :math:`K` from the widest
coordinate's quarter period up to :math:`K_\text{max}`, the one with the most effective
draws of a unit coordinate's square per gradient, its jitter :math:`j_0/s` scaled by
:math:`K_s/K` (:math:`K_s` the widest one's quarter period: a unit coordinate's phase
varies by as much on every trajectory length).

A cap of :math:`K_\text{max} = ` ``MAX_NUM_STEPS`` suits a posterior that the warm-up
whitens: its chains agree, and :math:`h` is not far below 1. Where the curvature bends
(a horseshoe's curved ridges, :math:`\beta_j = z_j\tau\lambda_j` pinned by the data) the
acceptance target makes :math:`h` a hundredth of the scale, and a trajectory capped at
:math:`K_\text{max}` steps covers a fraction of the quarter period: a random walk that
leaves the chains apart. So where the warm-up's burn-in ends with its chains disagreeing
and its step size's quarter period needs more than ``MAX_NUM_STEPS`` steps, the burn-in
continues with that quarter period, at most ``LONG_MAX_NUM_STEPS`` steps
(:func:`metaoptax.l2hmc.adaptation.lengthen_burn_in`, adapt's choice; it stops after a
window whose split R-hat is above half the short burn-in's), and where that brought the
chains together (its split R-hat below the threshold or at most half the short burn-in's)
the sampler's :math:`K` may reach ``LONG_MAX_NUM_STEPS`` too; where it did not
(a funnel's neck keeps chains apart at any length), the later windows and the sampler stay
at the short cap. Where the burn-in's chains agree, nothing changes.
"""

from __future__ import annotations

import math

__all__ = ("LONG_MAX_NUM_STEPS", "MAX_NUM_STEPS", "QUARTER_PERIOD", "num_steps_for", "num_steps_for_spread",
           "square_autocorrelation")

#: The trajectory's length in whitened units: a quarter period of a standard normal.
QUARTER_PERIOD = 0.5 * math.pi
#: The most leapfrog steps the rule gives.
MAX_NUM_STEPS = 16
#: The most where the warm-up's chains disagree at a step size whose quarter period needs more
#: than ``MAX_NUM_STEPS`` (``metaoptax.l2hmc.adapt``'s warm-up then lengthens its trajectories).
LONG_MAX_NUM_STEPS = 128


def num_steps_for(step_size: float, max_num_steps: int = MAX_NUM_STEPS,
                  widest_variance: float = 1.0) -> int:
  r"""The leapfrog steps of a quarter period at ``step_size`` (module docstring).

  Args:
    step_size: the step size in whitened units (the warm-up's :math:`h`).
    max_num_steps: the most steps to give (at least 1).
    widest_variance: :math:`\lambda`, the variance of the widest whitened direction (the
      largest eigenvalue of the correlation matrix where the whitening is diagonal; 1 where
      it fits the correlations). Values below 1, or not finite, count as 1.

  Returns:
    ``ceil(sqrt(widest_variance) * QUARTER_PERIOD / step_size)``, at most
    ``max_num_steps``; ``max_num_steps`` where ``step_size`` is not a positive finite number.

  Raises:
    ValueError: ``max_num_steps < 1``.
  """
  if max_num_steps < 1:
    raise ValueError(f"max_num_steps must be >= 1, got {max_num_steps}.")
  step_size = float(step_size)
  if not (math.isfinite(step_size) and step_size > 0.0):
    return max_num_steps
  widest_variance = float(widest_variance)
  if not (math.isfinite(widest_variance) and widest_variance > 1.0):
    widest_variance = 1.0
  length = math.sqrt(widest_variance) * QUARTER_PERIOD
  return int(min(math.ceil(length / step_size), max_num_steps))


def square_autocorrelation(length: float, jitter: float) -> float:
  r""":math:`\rho = \mathbb E_u[\cos^2(t u)]`, :math:`u \sim \mathcal U(1-j, 1+j)`: the
  lag-one autocorrelation of :math:`z^2`, :math:`z` a standard normal coordinate moved by exact
  Hamiltonian dynamics over a jittered trajectory of length :math:`t` (module docstring).

  Args:
    length: :math:`t = Kh`, the trajectory's length in whitened units (radians of a unit
      coordinate's rotation).
    jitter: :math:`j \in [0, 1)`.

  Returns:
    A float in :math:`[0, 1]`.
  """
  x = 2.0 * length * jitter
  sinc = math.sin(x) / x if x else 1.0
  return 0.5 + 0.5 * math.cos(2.0 * length) * sinc


def num_steps_for_spread(step_size: float, spread: float, jitter: float,
                         max_num_steps: int = MAX_NUM_STEPS) -> tuple[int, float]:
  r"""The leapfrog steps and jitter where a whitened coordinate has standard deviation
  :math:`s` (module docstring): of the :math:`K` from ``num_steps_for(step_size / spread)``
  to ``max_num_steps``, the one with the largest :math:`(1-\rho)/((1+\rho)K)`
  (:func:`square_autocorrelation`), with the jitter ``jitter / spread`` times
  :math:`K_s/K`.

  Args:
    step_size: the step size :math:`h` in whitened units (the warm-up's).
    spread: :math:`s`, the largest whitened standard deviation (values below 1, or not
      finite, count as 1).
    jitter: :math:`j_0`, the jitter of a unit quarter period (``L2HMCConfig.jitter``).
    max_num_steps: the most steps to give (at least 1).

  Returns:
    ``(num_steps, jitter)``; ``(max_num_steps, jitter / spread)`` where the widest
    coordinate's quarter period already needs more steps, or ``step_size`` is not a
    positive finite number.
  """
  spread = float(spread)
  if not (math.isfinite(spread) and spread > 1.0):
    spread = 1.0
  shortest = num_steps_for(float(step_size) / spread, max_num_steps)
  step_size = float(step_size)
  if shortest >= max_num_steps or not (math.isfinite(step_size) and step_size > 0.0):
    return shortest, jitter / spread

  def per_gradient(k):
    rho = square_autocorrelation(k * step_size, jitter / spread * shortest / k)
    return (1.0 - rho) / ((1.0 + rho) * k)

  best = max(range(shortest, max_num_steps + 1), key=per_gradient)
  return best, jitter / spread * shortest / best
