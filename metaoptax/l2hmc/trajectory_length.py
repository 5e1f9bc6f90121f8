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
its quarter period is :math:`s\,\pi/2`, and ``num_steps_for(h / s)`` reaches it (``adapt``
then divides the jitter by :math:`s`). Where the posterior is near Gaussian after whitening,
:math:`h` is near 1 and
:math:`K` is a few steps; where its curvature varies, the acceptance target makes
:math:`h` small and the trajectory keeps its length with more steps. Training then
adapts each step's sizes (the jittered trajectory's length varies around
:math:`K h`).
"""

from __future__ import annotations

import math

__all__ = ("MAX_NUM_STEPS", "QUARTER_PERIOD", "num_steps_for")

#: The trajectory's length in whitened units: a quarter period of a standard normal.
QUARTER_PERIOD = 0.5 * math.pi
#: The most leapfrog steps the rule gives.
MAX_NUM_STEPS = 16


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
