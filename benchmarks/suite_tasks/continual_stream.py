r"""Sutton's (1992) tracking stream and the exact asymptotic MSE of LMS on it.

The task of the paper that introduced IDBD (Sutton, *Adapting Bias by Gradient
Descent: An Incremental Version of Delta-Bar-Delta*, AAAI 1992, Experiments 1-2):
20 inputs :math:`x_t \sim \mathcal N(0, I)`, i.i.d. each example; target
:math:`y^*_t = \sum_{i<5} s_i x_i` with signs :math:`s_i = \pm 1` (the other 15
inputs are irrelevant); every 20 examples one of the five signs, chosen at
random, flips; no noise. A linear learner predicts :math:`y = w^\top x` and
learns online from :math:`f_t(w) = \tfrac12 (w^\top x_t - y^*_t)^2`, one example
per step.

LMS has a closed form here (:func:`lms_asymptotic_mse`): for Gaussian inputs the
diagonal of :math:`E[v v^\top]`, :math:`v = w^* - w`, obeys a closed linear
recursion,

.. math::

  d_i' = (1 - 2\alpha_i + 2\alpha_i^2)\, d_i + \alpha_i^2 \textstyle\sum_j d_j,

and a flip of relevant input :math:`i` adds :math:`4 - 4\,E[s_i v_i]` to :math:`d_i`,
where :math:`E[s_i v_i]` decays by :math:`1 - \alpha_i` per example and maps
:math:`m \mapsto 2 - m` at a flip. The periodic steady state of this recursion gives
the exact asymptotic MSE: 3.35 for the best single step size (alpha = 0.034) and
1.372 for the best per-input step sizes (0.138 on the relevant inputs, 0 on the
irrelevant ones), the figures Sutton reports as ~3.5 and ~1.37 (at his 0.13).
"""

from __future__ import annotations

import math
from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

NUM_INPUTS = 20
NUM_RELEVANT = 5
FLIP_EVERY = 20


class TrackingStream(NamedTuple):
  """One run's examples: inputs ``(T, 20)``, targets ``(T,)``, relevant signs ``(T, 5)``."""

  inputs: jax.Array
  targets: jax.Array
  signs: jax.Array


def make_stream(key: jax.Array, num_examples: int, *, num_inputs: int = NUM_INPUTS,
                num_relevant: int = NUM_RELEVANT, flip_every: int = FLIP_EVERY) -> TrackingStream:
  """Sutton's stream: one relevant sign flips every ``flip_every`` examples.

  The signs start at random; example ``t`` uses the signs of period
  ``t // flip_every``, and each period after the first flips one sign chosen
  uniformly among the ``num_relevant``.
  """
  k_inputs, k_signs, k_flips = jax.random.split(key, 3)
  num_periods = -(-num_examples // flip_every)
  inputs = jax.random.normal(k_inputs, (num_examples, num_inputs), jnp.float32)
  initial = jax.random.rademacher(k_signs, (num_relevant,), jnp.float32)
  flipped = jax.random.randint(k_flips, (num_periods,), 0, num_relevant)
  flips = jax.nn.one_hot(flipped, num_relevant, dtype=jnp.int32).at[0].set(0)
  parity = jnp.cumsum(flips, axis=0) % 2
  signs = jnp.repeat(initial * (1 - 2 * parity).astype(jnp.float32), flip_every,
                     axis=0)[:num_examples]
  targets = jnp.sum(inputs[:, :num_relevant] * signs, axis=-1)
  return TrackingStream(inputs, targets, signs)


def lms_asymptotic_mse(step_sizes: Sequence[float], *, num_relevant: int = NUM_RELEVANT,
                       flip_every: int = FLIP_EVERY) -> float:
  r"""Exact asymptotic MSE of LMS with per-input step sizes on the tracking task.

  ``step_sizes`` has one entry per input (the first ``num_relevant`` relevant).
  Returns ``inf`` when LMS is unstable (spectral radius of the recursion >= 1).
  Derivation in the module docstring; float64 NumPy.
  """
  a = np.asarray(step_sizes, np.float64)
  relevant = np.arange(a.size) < num_relevant
  # An input with step size 0 keeps its weight at 0: its error share is constant,
  # s_i^2 = 1 if relevant and 0 if not, and it feeds nothing into the others.
  constant = float(np.sum(relevant & (a == 0)))
  active = a > 0
  a, relevant = a[active], relevant[active]
  n = a.size
  recursion = np.diag(1 - 2 * a + 2 * a**2) + np.outer(a**2, np.ones(n))
  if n and np.max(np.abs(np.linalg.eigvals(recursion))) >= 1:
    return math.inf
  p = 1.0 / num_relevant
  decay = (1 - a[relevant]) ** flip_every
  # E[s_i v_i] right after a flip boundary (m+) and just before the next one (m-).
  m_plus = 2 * p / (1 - (1 - 2 * p) * decay)
  m_minus = decay * m_plus
  jump = np.zeros(n)
  jump[relevant] = p * (4 - 4 * m_minus)
  power = np.linalg.matrix_power(recursion, flip_every)
  d_plus = np.linalg.solve(np.eye(n) - power, jump)
  total, d = 0.0, d_plus
  for _ in range(flip_every):
    total += d.sum()
    d = recursion @ d
  return float(total / flip_every + constant)


def best_lms_closed_form(grid=np.linspace(0.001, 0.09, 891)) -> tuple[float, float]:
  """(alpha, MSE) of the best single step size, by the closed form on a fine grid."""
  mses = [lms_asymptotic_mse(np.full(NUM_INPUTS, a)) for a in grid]
  i = int(np.argmin(mses))
  return float(grid[i]), float(mses[i])


def best_per_input_closed_form(grid=np.linspace(0.01, 0.4, 391)) -> tuple[float, float]:
  """(alpha, MSE) of the best relevant-input step size with the irrelevant ones at 0."""
  mses = [lms_asymptotic_mse(per_input_step_sizes(a)) for a in grid]
  i = int(np.argmin(mses))
  return float(grid[i]), float(mses[i])


def per_input_step_sizes(relevant):
  """Step sizes ``relevant`` on the relevant inputs and 0 on the irrelevant ones."""
  return jnp.concatenate([jnp.full(NUM_RELEVANT, relevant, jnp.float32),
                          jnp.zeros(NUM_INPUTS - NUM_RELEVANT, jnp.float32)])

