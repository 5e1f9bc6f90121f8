r"""The two symmetric splittings of the plain leapfrog (networks off): velocity and position
Verlet.

With the networks off a leapfrog step is a composition of shears of
:math:`H(x, v) = U(x) + \tfrac12\|v\|^2`, a kick :math:`v \leftarrow v - b\,\nabla U(x)`
and a drift :math:`x \leftarrow x + a\,v` (step sizes :math:`\varepsilon_x, \varepsilon_v`,
scalars or per-coordinate vectors, in the sampler's whitened coordinates). Two symmetric
orders exist (Leimkuhler and Reich 2004, ch. 2.6; Verlet 1967):

* **velocity Verlet** (kick-drift-kick, ``"velocity_verlet"``, the default):

  .. math::

    v_{1/2} = v - \tfrac{\varepsilon_v}{2}\nabla U(x), \quad
    x' = x + \varepsilon_x v_{1/2}, \quad
    v' = v_{1/2} - \tfrac{\varepsilon_v}{2}\nabla U(x');

  the end point's gradient is the next step's first: K gradients for K steps, given the
  start's. A move that changes the position between trajectories (the reflection, a scale
  or interweaving move) must evaluate the gradient at its proposal: one more each.

* **position Verlet** (drift-kick-drift, ``"position_verlet"``):

  .. math::

    x_{1/2} = x + \tfrac{\varepsilon_x}{2} v, \quad
    v' = v - \varepsilon_v \nabla U(x_{1/2}), \quad
    x' = x_{1/2} + \tfrac{\varepsilon_x}{2} v';

  one gradient per step, at the midpoint, and none at a trajectory's end points: the
  Metropolis ratio needs :math:`\log p(x')` only, and so do the moves between
  trajectories. K gradients a transition with or without them (plus :math:`\log p`
  evaluations, one at the trajectory's end and one per such move).

Both are volume preserving (each shear has unit Jacobian, also with
:math:`\varepsilon_x \ne \varepsilon_v` per coordinate), and symmetric, so the step with
the momentum flipped, or with the step sizes negated, is its exact inverse: the Metropolis
correction of :mod:`metaoptax.l2hmc.kernel` stays exact.

On a unit Gaussian, :math:`U = z^2/2`, one step is linear. Velocity Verlet:

.. math::

  \begin{pmatrix} c & \varepsilon_x \\ -\varepsilon_v(1 - \varepsilon_x\varepsilon_v/4) & c
  \end{pmatrix}, \qquad c = 1 - \varepsilon_x\varepsilon_v / 2,

position Verlet the same with the roles swapped,

.. math::

  \begin{pmatrix} c & \varepsilon_x(1 - \varepsilon_x\varepsilon_v/4) \\ -\varepsilon_v & c
  \end{pmatrix}.

Each is the rotation by :math:`\theta` (:math:`z^2 + v^2` kept: acceptance 1) if and only if
:math:`c = \cos\theta` and the off-diagonal entries are :math:`\pm\sin\theta`: velocity Verlet
at :math:`\varepsilon_x = \sin\theta, \varepsilon_v = 2\tan(\theta/2)`, position Verlet at
:math:`\varepsilon_x = 2\tan(\theta/2), \varepsilon_v = \sin\theta` (then
:math:`\varepsilon_x(1 - \varepsilon_x\varepsilon_v/4) = \tan(\theta/2)(1 + \cos\theta) =
\sin\theta`). At a quarter period both map :math:`(z, v) \to (v, -z)`.

The :class:`Integrator` record holds what the sampler calls; nothing outside it checks which
one it is. The networks' generalized leapfrog (:mod:`metaoptax.l2hmc.dynamics`) is
velocity Verlet's form only.

Examples:
  >>> import jax, jax.numpy as jnp
  >>> from metaoptax import l2hmc
  >>> eps_x, eps_v = l2hmc.integrators.position_verlet.rotation(jnp.pi / 2)  # a quarter period
  >>> round(float(eps_x), 5), round(float(eps_v), 5)
  (2.0, 1.0)
  >>> config = l2hmc.L2HMCConfig(dim=2, num_steps=1, use_networks=False, reflection=True,
  ...                            integrator="position_verlet")
  >>> l2hmc.gradient_evaluations(config), l2hmc.logdensity_evaluations(config)
  (1, 2)

References:
  Verlet, `Computer "experiments" on classical fluids
  <https://doi.org/10.1103/PhysRev.159.98>`_, Phys. Rev. 1967; Leimkuhler and Reich,
  Simulating Hamiltonian Dynamics, Cambridge University Press 2004; Tuckerman, Berne and
  Martyna, `Reversible multiple time scale molecular dynamics
  <https://doi.org/10.1063/1.463137>`_, J. Chem. Phys. 1992.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

__all__ = ("Integrator", "INTEGRATORS", "velocity_verlet", "position_verlet")


class Integrator(NamedTuple):
  r"""A leapfrog splitting: its step, its end-point evaluation and its exact rotation.

  Attributes:
    step: ``(state, eps_x, eps_v, logdensity_and_grad) -> state``: one step with signed
      step sizes (negated: the inverse step); the state has fields ``x``, ``v``,
      ``logdensity``, ``grad``.
    finish: ``(state, logdensity_fn) -> state``: :math:`\log p` (and what the next step
      needs) at the end point.
    evaluate: ``(position, logdensity_fn) -> (log p, grad log p or zeros)``: a point a
      move between trajectories proposes.
    rotation: ``theta -> (eps_x, eps_v)``: the step sizes of the exact rotation by
      :math:`\theta` on a unit Gaussian.
    end_point_gradients: the gradients evaluated at each point a move between
      trajectories proposes (0 or 1).
    end_point_values: the evaluations of :math:`\log p` alone (no gradient) at each end
      point, the trajectory's and each move's proposal (0 or 1).
    with_networks: whether the networks' generalized leapfrog
      (:mod:`metaoptax.l2hmc.dynamics`) has this form.
  """

  step: Callable
  finish: Callable
  evaluate: Callable
  rotation: Callable
  end_point_gradients: int
  end_point_values: int
  with_networks: bool


def _kick_drift_kick(state, eps_x, eps_v, logdensity_and_grad):
  """Velocity Verlet; the carried gradient is the start's, the end point's is computed."""
  v = state.v + 0.5 * eps_v * state.grad
  x = state.x + eps_x * v
  logdensity, grad = logdensity_and_grad(x)
  return state._replace(x=x, v=v + 0.5 * eps_v * grad, logdensity=logdensity, grad=grad)


def _drift_kick_drift(state, eps_x, eps_v, logdensity_and_grad):
  """Position Verlet; one gradient at the midpoint, log p at the end left to ``finish``."""
  half = state.x + 0.5 * eps_x * state.v
  _, grad = logdensity_and_grad(half)
  v = state.v + eps_v * grad
  return state._replace(x=half + 0.5 * eps_x * v, v=v)


def _with_gradient(position, logdensity_fn):
  return jax.value_and_grad(logdensity_fn)(position)


def _without_gradient(position, logdensity_fn):
  return logdensity_fn(position), jnp.zeros_like(position)


def _finish_without_gradient(state, logdensity_fn):
  return state._replace(logdensity=logdensity_fn(state.x), grad=jnp.zeros_like(state.x))


#: Kick-drift-kick: the end point's gradient is carried to the next step (the default).
velocity_verlet = Integrator(
    step=_kick_drift_kick, finish=lambda state, logdensity_fn: state,
    evaluate=_with_gradient,
    rotation=lambda theta: (jnp.sin(theta), 2.0 * jnp.tan(0.5 * theta)),
    end_point_gradients=1, end_point_values=0, with_networks=True)

#: Drift-kick-drift: one gradient per step, at its midpoint; the state's gradient is neither
#: read nor kept (zeros after a transition).
position_verlet = Integrator(
    step=_drift_kick_drift, finish=_finish_without_gradient, evaluate=_without_gradient,
    rotation=lambda theta: (2.0 * jnp.tan(0.5 * theta), jnp.sin(theta)),
    end_point_gradients=0, end_point_values=1, with_networks=False)

#: ``L2HMCConfig.integrator``'s choices.
INTEGRATORS = {"velocity_verlet": velocity_verlet, "position_verlet": position_verlet}
