r"""Persistent evolution strategies (PES): a meta-gradient that crosses truncations.

Vicol, Metz and Sohl-Dickstein 2021, "Unbiased gradient estimation in unrolled
computation graphs with persistent evolution strategies" (ICML,
https://arxiv.org/abs/2112.13835).

Method. An unrolled computation :math:`s_t = f(s_{t-1}; \theta)` is run in
truncations :math:`k = 1, \dots, K`; truncation :math:`k` has the loss
:math:`L_k(\theta_1, \dots, \theta_k)`, where :math:`\theta_j` is the parameter
used in truncation :math:`j` (all equal to :math:`\theta`). Its total derivative
:math:`\nabla_\theta L_k = \sum_{j \le k} \partial_{\theta_j} L_k` runs through the
state carried from every earlier truncation, which truncated back-propagation (and
truncated ES) drop. PES keeps :math:`N` particles, each with its own state
:math:`s^{(i)}` and the sum of its perturbations
:math:`\xi^{(i)}_k = \sum_{j \le k} \epsilon^{(i)}_j`,
:math:`\epsilon^{(i)}_j \sim \mathcal N(0, \sigma^2 I)`: in truncation :math:`k`
particle :math:`i` runs with :math:`\theta + \epsilon^{(i)}_k` from its own state,
and

.. math::

  \hat g_k = \frac{1}{N \sigma^2} \sum_{i=1}^N \xi^{(i)}_k\,
  L_k\big(\theta + \epsilon^{(i)}_1, \dots, \theta + \epsilon^{(i)}_k\big),

an unbiased estimate of :math:`\nabla_\theta\, \mathbb E_\epsilon[L_k(\theta +
\epsilon_1, \dots, \theta + \epsilon_k)]`, the gradient of the Gaussian-smoothed
loss through the whole unroll (to first order in :math:`\sigma`, of :math:`L_k`
itself): :math:`\mathbb E[\xi_k L_k] = \sum_{j \le k} \mathbb E[\epsilon_j
\epsilon_j^\top] \partial_{\theta_j} L_k = \sigma^2 \nabla_\theta L_k`. Truncated
ES, with :math:`\xi_k = \epsilon_k`, estimates only :math:`\partial_{\theta_k} L_k`.
The particles come in antithetic pairs :math:`(\epsilon, -\epsilon)` with separate
states, so that :math:`\xi^- = -\xi^+` and a pair contributes
:math:`\xi^+ (L^+ - L^-)`; a pair whose loss is not finite contributes nothing and
the mean is over the finite pairs. At the start of a new unroll the states restart
and the sums are zeroed (:func:`init`).

Everything is a pure, jit-able function of arrays: the particles are a leading axis
of the states (``jax.vmap``), with no host round-trip within a truncation.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

__all__ = ("PES", "PESState", "init", "gradient")


class PES(NamedTuple):
  """How :func:`~metaoptax.l2o.train` estimates the meta-gradient with PES.

  Attributes:
    pairs: antithetic pairs of particles per task (``2 * pairs`` particles).
    sigma: :math:`\\sigma`, the standard deviation of each perturbation.
    perturb: perturb (and train) only the leaves of the network whose path
      (``jax.tree_util.keystr``) contains this string, e.g. ``"log_scale"`` for the
      read-out of :class:`~metaoptax.l2o.TensorLSTM`; ``None``: every leaf. Fewer
      perturbed numbers give a less noisy estimate (its variance grows with their
      count).
  """

  pairs: int = 8
  sigma: float = 0.01
  perturb: str | None = None


class PESState(NamedTuple):
  r"""The particles of one unroll.

  Attributes:
    states: each particle's state, with a leading axis of ``N`` particles (the pairs
      interleaved).
    accumulated: :math:`\theta`-shaped leaves with a leading axis ``N``: each particle's
      sum of perturbations :math:`\xi` so far.
  """

  states: Any
  accumulated: Any


def init(theta: Any, states: Any) -> PESState:
  """The particles at the start of an unroll, with zero sums of perturbations.

  Args:
    theta: the network's weights (only their shapes and dtypes are read).
    states: each particle's state, leaves with a leading axis ``N``, an even number:
      particles ``2p`` and ``2p + 1`` are the antithetic pair ``p``.

  Returns:
    A :class:`PESState`.

  Raises:
    ValueError: ``N`` is odd.
  """
  count = jax.tree.leaves(states)[0].shape[0]
  if count % 2:
    raise ValueError(f"PES needs an even number of particles (antithetic pairs), got {count}.")
  return PESState(states, jax.tree.map(lambda t: jnp.zeros((count,) + jnp.shape(t),
                                                           jnp.result_type(t)), theta))


def perturbations(rng_key: jax.Array, theta: Any, count: int, sigma: float, mask: Any = None):
  """``count`` antithetic perturbations of ``theta`` (leading axis; ``2p + 1`` is minus
  ``2p``), :math:`\\mathcal N(0, \\sigma^2)` entries, zero on the leaves where ``mask``
  (a pytree of bools like ``theta``; ``None``: all) is False."""
  leaves, treedef = jax.tree.flatten(theta)
  masks = [True] * len(leaves) if mask is None else treedef.flatten_up_to(mask)
  out = []
  for k, leaf, keep in zip(jax.random.split(rng_key, len(leaves)), leaves, masks):
    half = sigma * jax.random.normal(k, (count // 2,) + jnp.shape(leaf), jnp.result_type(leaf))
    pair = jnp.stack([half, -half], axis=1).reshape((count,) + jnp.shape(leaf))
    out.append(pair if keep else jnp.zeros_like(pair))
  return jax.tree.unflatten(treedef, out)


def gradient(rng_key: jax.Array, truncation: Callable[[Any, Any], tuple[jax.Array, Any]],
             theta: Any, pes_state: PESState, sigma: float, mask: Any = None
             ) -> tuple[Any, jax.Array, PESState, jax.Array]:
  """One truncation of every particle and the PES estimate of its loss's gradient.

  Args:
    rng_key: PRNG key of this truncation's perturbations.
    truncation: ``(theta, state) -> (loss, new_state)`` of one particle (vmapped here).
    theta: the parameters (a pytree of arrays).
    pes_state: the particles (:func:`init`, or the previous call's).
    sigma: :math:`\\sigma`.
    mask: perturb only the leaves of ``theta`` where this pytree of bools is True
      (the others get a zero gradient); ``None``: all.

  Returns:
    ``(estimate, losses (N,), new_pes_state, finite_pairs (N // 2,))``: the estimate
    :math:`\\hat g_k` (``theta``-shaped), each particle's loss, the particles after
    the truncation, and which pairs had finite losses (the others contribute zero).
  """
  count = jax.tree.leaves(pes_state.accumulated)[0].shape[0]
  eps = perturbations(rng_key, theta, count, sigma, mask)
  accumulated = jax.tree.map(jnp.add, pes_state.accumulated, eps)
  perturbed = jax.tree.map(lambda t, e: t + e, theta, eps)
  losses, states = jax.vmap(truncation)(perturbed, pes_state.states)
  pair = losses.reshape(-1, 2)
  finite = jnp.all(jnp.isfinite(pair), axis=1)
  difference = jnp.where(finite, pair[:, 0] - pair[:, 1], 0.0)
  scale = 1.0 / (2 * jnp.maximum(jnp.sum(finite), 1) * sigma**2)

  def estimate(xi):
    plus = xi[0::2]  # xi of the minus particle is -plus
    return scale * jnp.tensordot(difference.astype(xi.dtype), plus, axes=1)

  return (jax.tree.map(estimate, accumulated), losses, PESState(states, accumulated), finite)
