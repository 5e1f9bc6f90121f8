r"""Convergence diagnostics of many chains: the split :math:`\hat R`.

Each chain's draws are cut in two halves, and the :math:`2M` sequences of :math:`n` draws
compared (Gelman et al., *Bayesian Data Analysis*, 3rd ed., eq. 11.4):

.. math::

  W = \frac{1}{2M}\sum_j s_j^2, \qquad \frac{B}{n} = \operatorname{var}_j(\bar x_j),
  \qquad \hat R = \sqrt{\frac{\frac{n-1}{n} W + \frac{B}{n}}{W}},

per coordinate (:math:`\bar x_j, s_j^2`: the mean and unbiased variance of sequence
:math:`j`; :math:`\operatorname{var}_j` with :math:`2M - 1` degrees of freedom). Chains that
have not forgotten their starts, or that sit in different places, have
:math:`\hat R > 1`; a drifting chain too, as its halves differ.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ("ConvergenceWarning", "split_rhat")


class ConvergenceWarning(UserWarning):
  """The chains failed a check (:func:`metaoptax.l2hmc.adapt`'s, or divergent transitions
  in :func:`metaoptax.l2hmc.sample_chains`): their draws may not be the posterior's."""


def split_rhat(draws: jax.Array) -> jax.Array:
  """The split R-hat of each coordinate of ``draws``.

  Each chain is split in halves, and the halves' between- and within-chain variances
  compared (Gelman et al., BDA3 11.4). A coordinate that never moves in any chain has
  R-hat 1, or ``inf`` where the chains sit at different values.

  Args:
    draws: ``(num_samples, num_chains, ...)``, with ``num_samples`` at least 4 (an odd
      last draw is left out) and ``num_chains`` at least 1.

  Returns:
    An array of the shape of one draw.

  Raises:
    ValueError: ``draws`` has fewer than 2 axes, 4 samples or 1 chain.
  """
  draws = jnp.asarray(draws)
  if draws.ndim < 2 or draws.shape[0] < 4 or draws.shape[1] < 1:
    raise ValueError(f"draws must be (num_samples >= 4, num_chains >= 1, ...), got shape "
                     f"{draws.shape}.")
  n = draws.shape[0] // 2
  halves = jnp.concatenate([draws[:n], draws[n:2 * n]], axis=1)  # (n, 2M, ...)
  means = jnp.mean(halves, 0)
  within = jnp.mean(jnp.var(halves, 0, ddof=1), 0)
  between = jnp.var(means, 0, ddof=1) if means.shape[0] > 1 else jnp.zeros_like(within)
  pooled = (n - 1) / n * within + between
  tiny = jnp.finfo(pooled.dtype).tiny
  # a coordinate that never moves in any chain (within = between = 0) is not evidence of
  # disagreement: R-hat 1 there, unless the chains sit at different values (then inf)
  return jnp.where(within > tiny, jnp.sqrt(pooled / jnp.maximum(within, tiny)),
                   jnp.where(between > tiny, jnp.inf, 1.0))
