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

References:
  Bou-Rabee, Carpenter and Marsden, `GIST: Gibbs self-tuning for locally
  adaptive Hamiltonian Monte Carlo <https://arxiv.org/abs/2404.15253>`_, 2024.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

__all__ = ("LocalStepSizes", "fit")

INIT_EXPONENT = 0.1  # c without a fit: a +-10 % jitter, whose gradient moves beta
JITTER = 0.5  # largest |c_i| of a fit: the sd of log eps_i given z


class LocalStepSizes(NamedTuple):
  """:math:`w \\sim \\mathcal N(\\beta^\\top z, 1)`, :math:`\\log\\varepsilon_i \\mathrel{+}= c_i w`."""

  slope: jax.Array  # (dim,) beta
  exponent: jax.Array  # (dim,) c


def init_local(dim: int) -> LocalStepSizes:
  """:math:`\\beta = 0`, :math:`c = ` ``INIT_EXPONENT``."""
  return LocalStepSizes(jnp.zeros(dim, jnp.float32), jnp.full((dim,), INIT_EXPONENT, jnp.float32))


def fit(log_scale_slopes: jax.Array) -> LocalStepSizes:
  """:math:`\beta, c` from the warm-up's slopes :math:`H` (module docstring)."""
  left, singular, right = jnp.linalg.svd(log_scale_slopes)
  a, s, b = left[:, 0], singular[0], right[0]
  kappa = jnp.maximum(1.0, s * jnp.max(jnp.abs(b)) / JITTER)
  return LocalStepSizes(kappa * a, s / kappa * b)


def tuning_variable(local: LocalStepSizes, z: jax.Array, noise: jax.Array) -> jax.Array:
  """:math:`w = \\beta^\\top z + u` for a standard normal ``noise`` :math:`u`."""
  return jnp.dot(local.slope, z) + noise


def log_density(local: LocalStepSizes, w: jax.Array, z: jax.Array) -> jax.Array:
  """:math:`\\log\\mathcal N(w; \\beta^\\top z, 1)` up to its constant (which cancels)."""
  return -0.5 * (w - jnp.dot(local.slope, z)) ** 2


def shifted_log_step_sizes(local: LocalStepSizes, log_step_size: jax.Array,
                           w: jax.Array) -> jax.Array:
  """:math:`\\log\\varepsilon + c\\,w` for ``(steps, dim)`` per-coordinate log step sizes."""
  return log_step_size + local.exponent * w
