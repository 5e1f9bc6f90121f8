r"""The S, Q, T networks of the generalized leapfrog (Levy et al. 2018, public code's shapes).

Each input (position, momentum or gradient, time embedding) goes through its own
``Dense(hidden)``; the results are summed, then ReLU, ``Dense(hidden)``, ReLU, and
three heads of the data's dimension:

.. math::

  S = e^{a_S} \tanh(W_S h), \qquad Q = e^{a_Q} \tanh(W_Q h), \qquad T = W_T h,

with trainable scales :math:`a_S, a_Q` (initialised to 0) and output layers
initialised to zero, so that training starts from exactly HMC. (The public code
initialises them at variance scale 1e-3; where the inputs are large, e.g.
gradients of a badly scaled target, that is already far from HMC.)
"""

from __future__ import annotations

import math
from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

__all__ = ()

OUTPUT_INIT = nn.initializers.zeros


class SQTNetwork(nn.Module):
  """``inputs -> (S, Q, T)``, each of shape ``(dim,)``."""

  dim: int
  hidden: int = 10

  @nn.compact
  def __call__(self, inputs: Sequence[jax.Array]):
    h = sum(nn.Dense(self.hidden, name=f"input_{i}")(a) for i, a in enumerate(inputs))
    h = nn.relu(nn.Dense(self.hidden, name="hidden")(nn.relu(h)))
    scale_s = self.param("scale_s", nn.initializers.zeros, (self.dim,))
    scale_q = self.param("scale_q", nn.initializers.zeros, (self.dim,))
    s = jnp.exp(scale_s) * jnp.tanh(nn.Dense(self.dim, kernel_init=OUTPUT_INIT, name="s")(h))
    q = jnp.exp(scale_q) * jnp.tanh(nn.Dense(self.dim, kernel_init=OUTPUT_INIT, name="q")(h))
    t = nn.Dense(self.dim, kernel_init=OUTPUT_INIT, name="t")(h)
    return s, q, t


def time_embedding(step: jax.Array, num_steps: int) -> jax.Array:
  """:math:`(\\cos 2\\pi k/K, \\sin 2\\pi k/K)` of leapfrog step ``k`` of ``K``."""
  angle = 2 * math.pi * step / num_steps
  return jnp.stack([jnp.cos(angle), jnp.sin(angle)])


def init_networks(key: jax.Array, dim: int, hidden: int = 10) -> dict:
  """Weights of the position network (inputs ``m*x, v, t``) and the momentum
  network (inputs ``x, grad U(x), t``)."""
  k_x, k_v = jax.random.split(key)
  net = SQTNetwork(dim, hidden)
  dummy = (jnp.zeros(dim), jnp.zeros(dim), jnp.zeros(2))
  return {"x_net": net.init(k_x, dummy), "v_net": net.init(k_v, dummy)}
