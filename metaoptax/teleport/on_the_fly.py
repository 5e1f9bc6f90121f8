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
  r"""Runs Algorithm 2 (teleporting on the fly) for ``steps`` steps under ``lax.scan``.

  :math:`y_t = g_{\theta_t}(x_t)`, :math:`x_{t+1} = y_t - \alpha \nabla f(y_t)`,
  :math:`\theta_{t+1} = \theta_t - \beta \nabla_{\theta_t} f(x_{t+1})`, the last by
  autodiff.

  Args:
    obj_fn: :math:`f`, ``params -> scalar``.
    act: the group action, ``(theta, params) -> params``, with
      ``obj_fn(act(theta, x)) == obj_fn(x)``.
    x0: the starting parameters (a pytree).
    theta0: the starting group parameter (a pytree).
    step_size: :math:`\alpha`, gradient descent's step size.
    meta_step_size: :math:`\beta`, the step size on :math:`\theta`.
    steps: the number of steps.

  Returns:
    A per-step record, a NamedTuple with leaves of leading axis ``steps``: ``loss``,
    :math:`f(x_{t+1})`; ``group_param``, :math:`\theta_{t+1}`; ``position``,
    :math:`x_{t+1}`.
  """

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
  r"""The paper's closed form (Appendix B) of :math:`\nabla_\theta f(x_{t+1})` for
  :math:`f(x) = \|Bx\|^2`.

  :math:`2 (Bx)^\top R(-\theta) (I - 2 \alpha A)^2 R(\theta + \pi/2) (Bx)`, with
  :math:`A = B^\top B`: an oracle for the autodiff of :func:`teleport_on_the_fly`.

  Args:
    b: :math:`B`, ``(2, 2)``.
    x: :math:`x`, ``(2,)``.
    theta: :math:`\theta`, the rotation's angle.
    step_size: :math:`\alpha`, gradient descent's step size.

  Returns:
    A scalar, the derivative with respect to :math:`\theta`.
  """
  a = b.T @ b
  m = jnp.eye(a.shape[0]) - 2 * step_size * a
  bx = b @ x
  return 2 * bx @ rotation(-theta) @ m @ m @ rotation(theta + jnp.pi / 2) @ bx
