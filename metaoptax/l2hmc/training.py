r"""Training the sampler: expected squared jumped distance (Levy et al. 2018, eq. 8).

For a transition :math:`\xi \to \xi'` with acceptance :math:`A`,
:math:`\delta = \|x - x'\|^2 A(\xi'|\xi)` and

.. math::

  \ell_\lambda(\xi, \xi', A) = \frac{\lambda^2}{\delta} - \frac{\delta}{\lambda^2},

averaged over the current chain samples and over fresh samples from the initial
distribution (a standard normal), so the sampler learns both to mix and to
burn in. :math:`\lambda^2 = 0.1` and :math:`10^{-4}` added to :math:`\delta`, as in
the public code. The chains then move by the usual accept/reject (outside the
gradient).

Two options of the paper's experiments:

* Temperature annealing (``temperature``): iteration :math:`i` trains on the
  tempered target :math:`p(x)^{1/T_i}` (chains and fresh samples alike), with
  :math:`T_i` an optax schedule decreasing to 1, e.g. the public code's geometric
  ``optax.exponential_decay(10.0, 50, 0.98, staircase=True, end_value=1.0)``.
  Broad tempered modes overlap, so the sampler learns jumps between them (the
  mixture of Gaussians).
* First-order force gradients (``differentiate_force=False``): the loss's
  gradient treats :math:`\nabla\log p` inside the leapfrog as a constant (no
  second derivatives of :math:`\log p`; the forward pass is unchanged). On a
  rough target the Hessian is large (:math:`\sim 1/\eta = 100` on the rough well)
  and :math:`\partial x_K/\partial\theta`, a product of :math:`K` step Jacobians,
  grows like a chaotic system's: the exact gradient's norm climbed from 5e3 to
  1e7 within 1000 iterations, the updates became random and the acceptance fell
  to 0 (gradient clipping did not help). Cutting the curvature path keeps the
  gradient's norm ~3e2 and training improves steadily.
"""

from __future__ import annotations

import time
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from metaoptax.l2hmc.dynamics import L2HMCConfig, L2HMCParams, init_params, make_masks
from metaoptax.l2hmc.kernel import init, propose
from metaoptax.l2hmc.targets import Target
from metaoptax.metaoptimize import _tree


class TrainingResult(NamedTuple):
  """What :func:`train` returns."""

  params: L2HMCParams
  masks: jax.Array
  losses: np.ndarray  # one per iteration
  acceptance: np.ndarray  # mean acceptance of the chains, one per iteration
  seconds: float


def esjd_loss(x_before, x_after, acceptance, scale: float = 0.1, eps: float = 1e-4):
  """:math:`\\lambda^2/\\delta - \\delta/\\lambda^2`, :math:`\\delta = \\|x-x'\\|^2 A + \\epsilon`
  (``scale`` is :math:`\\lambda^2`)."""
  delta = jnp.sum((x_before - x_after) ** 2, axis=-1) * acceptance + eps
  return scale / delta - delta / scale


def _first_order(logdensity_fn: Callable) -> Callable:
  """``logdensity_fn`` whose gradient is a constant to further differentiation."""

  @jax.custom_jvp
  def first_order(x):
    return logdensity_fn(x)

  @first_order.defjvp
  def _jvp(primals, tangents):
    value, grad = jax.value_and_grad(logdensity_fn)(primals[0])
    return value, jnp.vdot(jax.lax.stop_gradient(grad), tangents[0])

  return first_order


def default_optimizer() -> optax.GradientTransformation:
  """Adam, learning rate 1e-3 decayed by 0.96 every 1000 steps (the paper's)."""
  return optax.adam(optax.exponential_decay(1e-3, 1000, 0.96, staircase=True))


def train(target: Target, config: L2HMCConfig, *, num_iterations: int = 5000,
          num_chains: int = 200, optimizer: optax.GradientTransformation | None = None,
          scale: float = 0.1, aux_weight: float = 1.0,
          temperature: float | optax.Schedule = 1.0, differentiate_force: bool = True,
          seed: int = 0, progress: Callable[[int, float, float], None] | None = print,
          log_every: int = 500) -> TrainingResult:
  """Trains the networks and step sizes of an L2HMC sampler on ``target``.

  Args:
    target: the distribution.
    config: the sampler's configuration (``dim`` must match the target).
    num_iterations: optimizer steps; each moves every chain once.
    num_chains: chains (vmapped), started from a standard normal.
    optimizer: optax optimizer of the parameters (default :func:`default_optimizer`).
    scale: :math:`\\lambda^2` of the loss.
    aux_weight: weight of the loss on fresh samples from the initial distribution.
    temperature: :math:`T`, a number or an optax schedule of the iteration;
      training targets :math:`p^{1/T}` (annealing if the schedule decreases to 1).
    differentiate_force: ``False``: no gradient through :math:`\\nabla \\log p`
      inside the leapfrog (for rough targets; see the module docstring).
    seed: PRNG seed (parameters, masks, chains); runs are deterministic under it.
    progress: ``progress(iteration, loss, acceptance)`` every ``log_every``
      iterations; ``None`` for silence.

  Returns:
    A :class:`TrainingResult`.
  """
  if config.dim != target.dim:
    raise ValueError(f"config.dim={config.dim} but the target has dim={target.dim}.")
  if not callable(temperature) and not temperature > 0:
    raise ValueError(f"temperature must be > 0 or a schedule, got {temperature}.")
  optimizer = optimizer or default_optimizer()
  key = jax.random.key(seed)
  k_params, k_masks, k_chains, key = jax.random.split(key, 4)
  params = init_params(k_params, config)
  masks = make_masks(k_masks, config)
  opt_state = optimizer.init(params)
  base_logdensity_fn = (target.logdensity_fn if differentiate_force else
                        _first_order(target.logdensity_fn))

  def tempered(iteration):
    inverse_temperature = 1.0 / (temperature(iteration) if callable(temperature) else temperature)
    return lambda x: base_logdensity_fn(x) * inverse_temperature

  chains = jax.vmap(lambda x: init(x, tempered(0)))(
      jax.random.normal(k_chains, (num_chains, config.dim)))

  def transitions(params, states, key, logdensity_fn):
    k_v, k_d = jax.random.split(key)
    momenta = jax.random.normal(k_v, states.position.shape)
    directions = jnp.where(jax.random.bernoulli(k_d, shape=(num_chains,)), 1, -1)
    proposals, acceptance, _ = jax.vmap(
        lambda s, v, d: propose(config, params, masks, logdensity_fn, s, v, d))(
            states, momenta, directions)
    return proposals, acceptance

  def loss_fn(params, chains, key, logdensity_fn):
    k_chain, k_fresh, k_init = jax.random.split(key, 3)
    proposals, acceptance = transitions(params, chains, k_chain, logdensity_fn)
    loss = jnp.mean(esjd_loss(chains.position, proposals.position, acceptance, scale))
    fresh = jax.vmap(lambda x: init(x, logdensity_fn))(
        jax.random.normal(k_init, (num_chains, config.dim)))
    fresh_proposals, fresh_acceptance = transitions(params, fresh, k_fresh, logdensity_fn)
    loss = loss + aux_weight * jnp.mean(
        esjd_loss(fresh.position, fresh_proposals.position, fresh_acceptance, scale))
    return loss, (proposals, acceptance)

  def iteration(carry, inputs):
    params, opt_state, chains = carry
    key, step = inputs
    logdensity_fn = tempered(step)
    if callable(temperature):  # log p and its gradient at this iteration's temperature
      chains = jax.vmap(lambda x: init(x, logdensity_fn))(chains.position)
    k_loss, k_accept = jax.random.split(key)
    (loss, (proposals, acceptance)), grads = jax.value_and_grad(loss_fn, has_aux=True)(
        params, chains, k_loss, logdensity_fn)
    finite = _tree.all_finite(grads)
    updates, new_opt_state = optimizer.update(grads, opt_state, params)
    new_params = optax.apply_updates(params, updates)
    params, opt_state = _tree.select(finite, (new_params, new_opt_state), (params, opt_state))
    accepted = jax.random.uniform(k_accept, acceptance.shape) < acceptance
    chains = jax.tree.map(
        lambda p, c: jnp.where(accepted.reshape((-1,) + (1,) * (p.ndim - 1)), p, c),
        jax.lax.stop_gradient(proposals), chains)
    return (params, opt_state, chains), (loss, jnp.mean(acceptance))

  @jax.jit
  def run(carry, inputs):
    return jax.lax.scan(iteration, carry, inputs)

  carry = (params, opt_state, chains)
  losses, acceptances = [], []
  start = time.perf_counter()
  done = 0
  while done < num_iterations:
    n = min(log_every, num_iterations - done)
    key, sub = jax.random.split(key)
    carry, (loss, acc) = run(carry, (jax.random.split(sub, n), jnp.arange(done, done + n)))
    losses.append(np.asarray(loss))
    acceptances.append(np.asarray(acc))
    done += n
    if progress is not None:
      progress(done, float(np.mean(losses[-1])), float(np.mean(acceptances[-1])))
  return TrainingResult(carry[0], masks, np.concatenate(losses), np.concatenate(acceptances),
                        time.perf_counter() - start)
