r"""Parameter-space symmetries as pure group actions with their inverses.

A group action ``act(g, w)`` maps parameters to parameters on the same level set:
``f(act(g, w)) == f(w)``. Each constructor here returns ``(act, inverse)`` with
``inverse(g, act(g, w)) == w``.

* SO(2) conjugated by a bijection :math:`h` of :math:`\mathbb{R}^2`:
  :math:`x \mapsto h^{-1}(R_\theta h(x))`, a symmetry of every
  :math:`f_h(x) = \|h(x)\|^2` (the 2-D task families of Zhao et al.).
* The layer-pair action of :math:`GL(k)` on an MLP's consecutive weights:
  :math:`(W_1, W_2) \mapsto (g W_1, W_2 g^{-1})`, exact for a linear activation;
  for LeakyReLU it is data-dependent,
  :math:`W_2 \mapsto W_2\, \sigma(W_1 X)\, \sigma(g W_1 X)^+`. On the batch
  :math:`X` (one column per example) it is exact when :math:`\sigma(g W_1 X)`
  has full column rank, i.e. at most as many examples as units (then
  :math:`\sigma^+ \sigma = I`); with more examples it is exact only where no
  pre-activation changes sign (the linear regime), otherwise approximate.

References:
  Zhao, Dehmamy, Walters and Yu, `Symmetry Teleportation for Accelerated
  Optimization <https://arxiv.org/abs/2205.10637>`_, NeurIPS 2022.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp

__all__ = ("Bijection", "rotation", "conjugated_rotation", "solve_2x2", "affine_bijection",
           "rosenbrock_bijection", "linear_layer_pair", "leaky_relu", "leaky_relu_layer_pair")

#: A bijection of :math:`\mathbb{R}^2` as the pair ``(h, h_inverse)``.
Bijection = tuple[Callable, Callable]


def rotation(theta: jax.Array) -> jax.Array:
  r"""The 2x2 rotation matrix :math:`R_\theta`.

  Args:
    theta: the angle (a scalar).

  Returns:
    ``[[cos theta, -sin theta], [sin theta, cos theta]]``.
  """
  c, s = jnp.cos(theta), jnp.sin(theta)
  return jnp.array([[c, -s], [s, c]])


def conjugated_rotation(bijection: Bijection) -> tuple[Callable, Callable]:
  r"""SO(2) acting by :math:`x \mapsto h^{-1}(R_\theta h(x))`.

  It leaves any loss of the form :math:`\|h(x)\|^2` unchanged.

  Args:
    bijection: ``(h, h_inverse)``, a :data:`Bijection` of :math:`\mathbb{R}^2`.

  Returns:
    ``(act, inverse)``: ``act(theta, x)`` and its inverse ``inverse(theta, y)``
    (``act(-theta, y)``), ``theta`` a scalar angle.
  """
  h, h_inv = bijection

  def act(theta, x):
    return h_inv(rotation(theta) @ h(x))

  def inverse(theta, x):
    return act(-theta, x)

  return act, inverse


def solve_2x2(a: jax.Array, v: jax.Array) -> jax.Array:
  r""":math:`A^{-1} v` for a 2x2 ``A`` in closed form, :math:`\operatorname{adj}(A)\, v / \det A`.

  A handful of multiplies: under ``vmap``, ``scan`` and ``grad`` on CPU it is
  far cheaper than ``jnp.linalg.solve`` (an LU factorization per call).

  Args:
    a: :math:`A`, ``(2, 2)``, invertible.
    v: :math:`v`, ``(2,)``.

  Returns:
    :math:`A^{-1} v`, ``(2,)`` (not finite where :math:`\det A = 0`).
  """
  det = a[0, 0] * a[1, 1] - a[0, 1] * a[1, 0]
  return jnp.stack([a[1, 1] * v[0] - a[0, 1] * v[1], a[0, 0] * v[1] - a[1, 0] * v[0]]) / det


def affine_bijection(a: jax.Array, b: jax.Array) -> Bijection:
  """:math:`h(x) = A x + b` (generalized Booth / ellipse family).

  The inverse is :func:`solve_2x2` for a 2x2 ``A`` (the 2-D families), else
  ``jnp.linalg.solve``.

  Args:
    a: :math:`A`, ``(n, n)``, invertible.
    b: :math:`b`, ``(n,)``.

  Returns:
    A :data:`Bijection`, ``(h, h_inverse)``.
  """
  solve = solve_2x2 if jnp.shape(a) == (2, 2) else jnp.linalg.solve
  return (lambda x: a @ x + b), (lambda u: solve(a, u - b))


def rosenbrock_bijection(a, b, c: Callable, d: Callable) -> Bijection:
  r""":math:`h(x, y) = (c(x) y + d(x),\ a x + b)` (generalized Rosenbrock family).

  :math:`h^{-1}(u, v) = (x, (u - d(x)) / c(x))` with :math:`x = (v - b) / a`;
  ``a`` and ``c(x)`` must stay away from 0.

  Args:
    a, b: the scalars of the second coordinate, :math:`a x + b`.
    c, d: functions of :math:`x` (scalar to scalar): the first coordinate is
      :math:`c(x) y + d(x)`.

  Returns:
    A :data:`Bijection`, ``(h, h_inverse)``, on points ``(2,)``.
  """

  def h(p):
    x, y = p[0], p[1]
    return jnp.stack([c(x) * y + d(x), a * x + b])

  def h_inv(q):
    u, v = q[0], q[1]
    x = (v - b) / a
    return jnp.stack([x, (u - d(x)) / c(x)])

  return h, h_inv


def linear_layer_pair(g: jax.Array, w1: jax.Array, w2: jax.Array):
  r""":math:`(W_1, W_2) \mapsto (g W_1, W_2 g^{-1})`: exact for ``W2 @ (W1 @ X)``.

  Args:
    g: an invertible ``(k, k)`` matrix, :math:`g \in GL(k)`.
    w1: :math:`W_1`, ``(k, n)``: the first layer's weights.
    w2: :math:`W_2`, ``(m, k)``: the second layer's weights.

  Returns:
    ``(g @ w1, w2 @ inv(g))`` (the inverse by a linear solve).
  """
  return g @ w1, jnp.linalg.solve(g.T, w2.T).T


def leaky_relu(x, negative_slope=0.1):
  r"""LeakyReLU, :math:`\sigma(x) = x` for :math:`x \ge 0`, else ``negative_slope`` :math:`x`.

  Args:
    x: an array.
    negative_slope: the slope below 0 (nonzero, so :math:`\sigma` is invertible).

  Returns:
    An array of ``x``'s shape.
  """
  return jnp.where(x >= 0, x, negative_slope * x)


def leaky_relu_layer_pair(g, w1, w2, x, negative_slope=0.1):
  r""":math:`W_1 \mapsto g W_1`, :math:`W_2 \mapsto W_2 \sigma(W_1 X) \sigma(g W_1 X)^+`.

  Keeps ``W2 @ sigma(W1 @ X)`` unchanged on the batch ``X`` (columns are
  examples) when ``X`` has at most as many columns as ``W1`` has rows (and
  ``sigma(g W1 X)`` has full column rank); approximate otherwise.

  Args:
    g: an invertible ``(k, k)`` matrix.
    w1: :math:`W_1`, ``(k, n)``.
    w2: :math:`W_2`, ``(m, k)``.
    x: the batch :math:`X`, ``(n, examples)``.
    negative_slope: the LeakyReLU's slope below 0 (:func:`leaky_relu`).

  Returns:
    The new ``(w1, w2)`` (the pseudo-inverse by ``jnp.linalg.pinv``).
  """
  hidden = leaky_relu(w1 @ x, negative_slope)
  moved = leaky_relu(g @ w1 @ x, negative_slope)
  return g @ w1, w2 @ hidden @ jnp.linalg.pinv(moved)
