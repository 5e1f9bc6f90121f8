r"""Learning to teleport on the fly (Algorithm 2 of the L2O-teleportation paper).

.. math::

  y_t = g_{\theta_t}(x_t), \qquad x_{t+1} = y_t - \alpha \nabla f(y_t), \qquad
  \theta_{t+1} = \theta_t - \beta\, \nabla_{\theta_t} f(x_{t+1}).

For :math:`f(x) = x^\top A x`, :math:`A = B^\top B` (``B`` symmetric) and
:math:`g_\theta(x) = B^{-1} R_\theta B x` the gradient has the closed form
(Appendix B) :math:`\nabla_\theta f(x_{t+1}) = 2 (B x_t)^\top R_{-\theta}
(I - 2\alpha A)^2 R_{\theta + \pi/2} (B x_t)`.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from metaoptax.teleport.groups import rotation

__all__ = ("teleport_on_the_fly", "closed_form_group_gradient")


class OnTheFlyTrace(NamedTuple):
  """Per-step record of :func:`teleport_on_the_fly`."""

  loss: jax.Array  # f(x_{t+1})
  group_param: jax.Array  # theta_{t+1}
  position: jax.Array  # x_{t+1}


def teleport_on_the_fly(obj_fn: Callable, act: Callable, x0: Any, theta0: Any, *,
                        step_size: float, meta_step_size: float, steps: int):
  """Runs Algorithm 2 for ``steps`` steps under ``lax.scan``; returns an OnTheFlyTrace."""

  def body(carry, _):
    x, theta = carry

    def next_x(theta):
      y = act(theta, x)
      return jax.tree.map(lambda a, g: a - step_size * g, y, jax.grad(obj_fn)(y))

    x_next = next_x(theta)
    grad_theta = jax.grad(lambda th: obj_fn(next_x(th)))(theta)
    theta_next = jax.tree.map(lambda t, g: t - meta_step_size * g, theta, grad_theta)
    return (x_next, theta_next), OnTheFlyTrace(obj_fn(x_next), theta_next, x_next)

  _, trace = jax.lax.scan(body, (x0, theta0), None, length=steps)
  return trace


def closed_form_group_gradient(b: jax.Array, x: jax.Array, theta, step_size) -> jax.Array:
  """Appendix B: ``2 (Bx)^T R(-theta) (I - 2 alpha A)^2 R(theta + pi/2) (Bx)``, A = B^T B."""
  a = b.T @ b
  m = jnp.eye(a.shape[0]) - 2 * step_size * a
  bx = b @ x
  return 2 * bx @ rotation(-theta) @ m @ m @ rotation(theta + jnp.pi / 2) @ bx
