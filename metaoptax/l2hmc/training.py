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

The loop is explicit for long runs, as in :mod:`metaoptax.l2o.meta_training`:
:func:`init_training` gives a :class:`TrainingState` (parameters, optimizer
state, chains, masks, PRNG key, counters) and :func:`build_training_step` the
jit-able ``step(state) -> (state, info)`` of one iteration, whose PRNG key is
``fold_in(state.key, state.iteration)``: a run is a pure function of its seed,
whatever ``log_every`` and wherever it was interrupted. Updates with a
non-finite loss or gradient are skipped and counted. :func:`train` drives the
step, with the chains sharded over a ``jax.sharding.Mesh`` (``mesh=``) and orbax
checkpoints (``checkpoint_dir=``) from which a run resumes bit for bit.
"""

from __future__ import annotations

import functools
import os
import time
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from metaoptax import checkpoint
from metaoptax._training_loop import check_schedule, hashable_axis
from metaoptax._data_parallel import DataParallel, data_parallel
from metaoptax.l2hmc.dynamics import L2HMCConfig, L2HMCParams, init_params, make_masks
from metaoptax.l2hmc.kernel import L2HMCState, init, propose
from metaoptax.l2hmc.targets import Target
from metaoptax._src import tree_utils as _tree


class TrainingState(NamedTuple):
  """Everything a training run carries from one iteration to the next."""

  params: L2HMCParams
  opt_state: Any  # the optimizer's state
  chains: L2HMCState  # leaves (num_chains, ...): split over the mesh's chain axis
  masks: jax.Array  # (K, dim) the sampler's fixed masks
  key: jax.Array  # typed PRNG key; iteration i draws from fold_in(key, i)
  iteration: jax.Array  # int32 iterations done
  skipped_updates: jax.Array  # int32 updates skipped (non-finite loss or gradient)


class TrainingInfo(NamedTuple):
  """What one iteration (:func:`build_training_step`) reports."""

  loss: jax.Array
  acceptance: jax.Array  # mean acceptance probability of the chains' proposals
  finite: jax.Array  # bool; False where the update was skipped


class TrainingResult(NamedTuple):
  """What :func:`train` returns."""

  params: L2HMCParams
  masks: jax.Array
  losses: np.ndarray  # one per iteration of this call (NaN where skipped)
  acceptance: np.ndarray  # mean acceptance of the chains, one per iteration
  seconds: float
  skipped_updates: int = 0  # updates skipped for a non-finite loss or gradient (whole run)
  state: TrainingState | None = None  # to continue (``init_state=``) or checkpoint


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


@functools.cache
def default_optimizer() -> optax.GradientTransformation:
  """Adam, learning rate 1e-3 decayed by 0.96 every 1000 steps (the paper's).

  The same object on every call, so runs with the default share compiled steps.
  """
  return optax.adam(optax.exponential_decay(1e-3, 1000, 0.96, staircase=True))


def _check(target: Target, config: L2HMCConfig, num_chains: int, temperature) -> None:
  if config.dim != target.dim:
    raise ValueError(f"config.dim={config.dim} but the target has dim={target.dim}.")
  if not callable(temperature) and not temperature > 0:
    raise ValueError(f"temperature must be > 0 or a schedule, got {temperature}.")
  if num_chains < 1:
    raise ValueError(f"num_chains must be >= 1, got {num_chains}.")


def _tempered(logdensity_fn: Callable, temperature, differentiate_force: bool) -> Callable:
  """``iteration -> (x -> log p(x) / T(iteration))`` (first-order force if asked)."""
  base = logdensity_fn if differentiate_force else _first_order(logdensity_fn)

  def at(iteration):
    inverse_temperature = 1.0 / (temperature(iteration) if callable(temperature) else temperature)
    return lambda x: base(x) * inverse_temperature

  return at


def init_training(target: Target, config: L2HMCConfig, *, num_chains: int = 200,
                  optimizer: optax.GradientTransformation | None = None,
                  temperature: float | optax.Schedule = 1.0, differentiate_force: bool = True,
                  seed: int = 0) -> TrainingState:
  """The state before the first iteration.

  Parameters, masks and the chains' starting points (a standard normal) are
  drawn from ``seed``; the chains' ``log p`` is at the temperature of iteration
  0. Arguments as in :func:`train` (``optimizer`` must be the one the step uses).
  """
  _check(target, config, num_chains, temperature)
  optimizer = optimizer or default_optimizer()
  k_params, k_masks, k_chains, key = jax.random.split(jax.random.key(seed), 4)
  params = init_params(k_params, config)
  logdensity_fn = _tempered(target.logdensity_fn, temperature, differentiate_force)(0)
  chains = jax.vmap(lambda x: init(x, logdensity_fn))(
      jax.random.normal(k_chains, (num_chains, config.dim)))
  zero = jnp.zeros([], jnp.int32)
  return TrainingState(params, optimizer.init(params), chains, make_masks(k_masks, config),
                       key, zero, zero)


def build_training_step(
    target: Target,
    config: L2HMCConfig,
    *,
    num_chains: int = 200,
    optimizer: optax.GradientTransformation | None = None,
    scale: float = 0.1,
    aux_weight: float = 1.0,
    temperature: float | optax.Schedule = 1.0,
    differentiate_force: bool = True,
    mesh: jax.sharding.Mesh | None = None,
    chain_axis: str | Sequence[str] | None = None,
) -> Callable[[TrainingState], tuple[TrainingState, TrainingInfo]]:
  """``step(state) -> (state, info)``: one optimizer step, every chain moved once.

  The iteration's key is ``fold_in(state.key, state.iteration)``. The loss
  (module docstring) is averaged over the chains' proposals and over fresh
  standard-normal draws' proposals; the update is skipped (and counted) when
  the loss or its gradient is not finite; then each chain accepts its proposal
  with its acceptance probability. Pure and jit-able.

  With ``mesh``, the chains (and the fresh draws, momenta, proposals) are split
  over the devices of ``chain_axis`` (default: every axis of the mesh), the
  parameters and optimizer state are replicated, and the means over chains
  become all-reduces. Arguments as in :func:`train`.
  """
  _check(target, config, num_chains, temperature)
  parallel = data_parallel(mesh, chain_axis, num_chains, "num_chains")
  optimizer = optimizer or default_optimizer()
  tempered = _tempered(target.logdensity_fn, temperature, differentiate_force)

  def transitions(params, masks, states, key, logdensity_fn):
    k_v, k_d = jax.random.split(key)
    momenta = parallel.shard_batch(jax.random.normal(k_v, states.position.shape))
    directions = parallel.shard_batch(
        jnp.where(jax.random.bernoulli(k_d, shape=(num_chains,)), 1, -1))
    proposals, acceptance, _ = jax.vmap(
        lambda s, v, d: propose(config, params, masks, logdensity_fn, s, v, d))(
            states, momenta, directions)
    return parallel.shard_batch((proposals, acceptance))

  def loss_fn(params, masks, chains, key, logdensity_fn):
    k_chain, k_fresh, k_init = jax.random.split(key, 3)
    proposals, acceptance = transitions(params, masks, chains, k_chain, logdensity_fn)
    loss = jnp.mean(esjd_loss(chains.position, proposals.position, acceptance, scale))
    fresh = jax.vmap(lambda x: init(x, logdensity_fn))(
        parallel.shard_batch(jax.random.normal(k_init, (num_chains, config.dim))))
    fresh_proposals, fresh_acceptance = transitions(params, masks, fresh, k_fresh,
                                                    logdensity_fn)
    loss = loss + aux_weight * jnp.mean(
        esjd_loss(fresh.position, fresh_proposals.position, fresh_acceptance, scale))
    return loss, (proposals, acceptance)

  def step(state: TrainingState) -> tuple[TrainingState, TrainingInfo]:
    logdensity_fn = tempered(state.iteration)
    chains = state.chains
    if callable(temperature):  # log p and its gradient at this iteration's temperature
      chains = jax.vmap(lambda x: init(x, logdensity_fn))(chains.position)
    chains = parallel.shard_batch(chains)
    k_loss, k_accept = jax.random.split(jax.random.fold_in(state.key, state.iteration))
    (loss, (proposals, acceptance)), grads = jax.value_and_grad(loss_fn, has_aux=True)(
        state.params, state.masks, chains, k_loss, logdensity_fn)
    finite = _tree.all_finite(grads) & jnp.isfinite(loss)
    updates, new_opt_state = optimizer.update(grads, state.opt_state, state.params)
    params, opt_state = parallel.replicate(_tree.select(
        finite, (optax.apply_updates(state.params, updates), new_opt_state),
        (state.params, state.opt_state)))
    accepted = jax.random.uniform(k_accept, acceptance.shape) < acceptance
    chains = parallel.shard_batch(jax.tree.map(
        lambda p, c: jnp.where(accepted.reshape((-1,) + (1,) * (p.ndim - 1)), p, c),
        jax.lax.stop_gradient(proposals), chains))
    skipped = state.skipped_updates + (~finite).astype(jnp.int32)
    new_state = TrainingState(params, opt_state, chains, state.masks, state.key,
                              state.iteration + 1, parallel.replicate(skipped))
    return new_state, TrainingInfo(loss, jnp.mean(acceptance), finite)

  return step


def _place(parallel: DataParallel, state: TrainingState) -> TrainingState:
  """The state on the devices, outside jit: chains split, everything else replicated
  (one device without a mesh, committed so fresh and restored states share a compile)."""
  if parallel.batch is None:
    return jax.device_put(state, jax.devices()[0])
  chains = jax.device_put(state.chains, parallel.batch)
  return jax.device_put(state._replace(chains=None), parallel.replicated)._replace(chains=chains)


class _StepSettings(NamedTuple):
  """The static arguments of :func:`build_training_step` (hashable, so compiles are reused;
  the target enters only through its log density, as its arrays are not hashable)."""

  logdensity_fn: Callable
  dim: int
  config: L2HMCConfig
  num_chains: int
  optimizer: optax.GradientTransformation
  scale: float
  aux_weight: float
  temperature: Any
  differentiate_force: bool
  mesh: jax.sharding.Mesh | None
  chain_axis: str | tuple | None

  def build(self):
    kwargs = {k: v for k, v in self._asdict().items() if k not in ("logdensity_fn", "dim")}
    return build_training_step(Target("", self.dim, self.logdensity_fn, None, None), **kwargs)


@functools.partial(jax.jit, static_argnames="settings")
def _jitted_step(state: TrainingState, settings: _StepSettings):
  """One compile per distinct settings (a resumed run, a repeated call, reuse it)."""
  return settings.build()(state)


def train(target: Target, config: L2HMCConfig, *, num_iterations: int = 5000,
          num_chains: int = 200, optimizer: optax.GradientTransformation | None = None,
          scale: float = 0.1, aux_weight: float = 1.0,
          temperature: float | optax.Schedule = 1.0, differentiate_force: bool = True,
          seed: int = 0, progress: Callable[[int, float, float], None] | None = print,
          log_every: int = 500, mesh: jax.sharding.Mesh | None = None,
          chain_axis: str | Sequence[str] | None = None,
          init_state: TrainingState | None = None,
          checkpoint_dir: str | os.PathLike | None = None,
          checkpoint_every: int = 0) -> TrainingResult:
  """Trains the networks and step sizes of an L2HMC sampler on ``target``.

  The run is a pure function of its arguments: the same ``seed`` gives the
  same result bit for bit, whatever ``log_every``, and so does a run
  interrupted and resumed from a checkpoint (or ``init_state``). The host
  waits for the devices only at progress reports and checkpoints.

  Args:
    target: the distribution.
    config: the sampler's configuration (``dim`` must match the target).
    num_iterations: optimizer steps in the whole run (a resumed run does the
      remaining ones); each moves every chain once.
    num_chains: chains (vmapped), started from a standard normal.
    optimizer: optax optimizer of the parameters (default :func:`default_optimizer`).
    scale: :math:`\\lambda^2` of the loss.
    aux_weight: weight of the loss on fresh samples from the initial distribution.
    temperature: :math:`T`, a number or an optax schedule of the iteration;
      training targets :math:`p^{1/T}` (annealing if the schedule decreases to 1).
    differentiate_force: ``False``: no gradient through :math:`\\nabla \\log p`
      inside the leapfrog (for rough targets; see the module docstring).
    seed: PRNG seed (parameters, masks, chains, then each iteration's draws).
    progress: ``progress(iteration, loss, acceptance)`` every ``log_every``
      iterations and at the end (means over those iterations, skipped ones'
      losses left out); ``None`` for silence.
    log_every: how often to report.
    mesh: split the chains over this ``jax.sharding.Mesh`` (data parallel; see
      :func:`build_training_step`). Same results as on one device up to the
      order of float32 sums over chains. Tested with ``Auto`` mesh axes (what
      ``Mesh(devices, names)`` makes); the sampler itself also runs with
      chains sharded over an ``Explicit`` mesh.
    chain_axis: the mesh axis (or axes) the chains are split over (default all).
    init_state: continue from this state (e.g. ``result.state`` of an earlier
      call) instead of ``seed``.
    checkpoint_dir: write the state to ``checkpoint_dir/<iteration>`` (orbax,
      :mod:`metaoptax.checkpoint`) every ``checkpoint_every`` iterations and at
      the end. If it already holds checkpoints, the run resumes from the latest
      (taking precedence over ``init_state``), so re-running the same call after
      an interruption finishes the run.
    checkpoint_every: iterations between checkpoints (0: only at the end).

  Returns:
    A :class:`TrainingResult`.
  """
  _check(target, config, num_chains, temperature)
  check_schedule(log_every, checkpoint_every, checkpoint_dir)
  optimizer = optimizer or default_optimizer()
  settings = _StepSettings(
      target.logdensity_fn, target.dim, config, num_chains, optimizer, scale, aux_weight,
      temperature, differentiate_force, mesh,
      hashable_axis(chain_axis))
  try:
    hash(settings)
    step = functools.partial(_jitted_step, settings=settings)
  except TypeError:  # an unhashable setting: compile for this call only
    step = jax.jit(settings.build())
  parallel = data_parallel(mesh, chain_axis, num_chains, "num_chains")
  if init_state is None:
    init_state = init_training(target, config, num_chains=num_chains, optimizer=optimizer,
                               temperature=temperature,
                               differentiate_force=differentiate_force, seed=seed)
  elif init_state.chains.position.shape != (num_chains, config.dim):
    raise ValueError(f"init_state has chains of shape {init_state.chains.position.shape}, "
                     f"expected ({num_chains}, {config.dim}).")
  state = _place(parallel, init_state)
  latest = checkpoint.latest_step(checkpoint_dir) if checkpoint_dir is not None else None
  if latest is not None:
    state = checkpoint.restore(os.path.join(checkpoint_dir, str(latest)), like=state)

  infos, reported = [], 0
  start = time.perf_counter()
  for done in range(int(state.iteration) + 1, num_iterations + 1):
    state, info = step(state)
    infos.append(info)  # stays on the device until a report
    if progress is not None and (done % log_every == 0 or done == num_iterations):
      losses, acceptance, _ = _stack(infos[reported:])
      finite = np.isfinite(losses)
      progress(done, float(np.mean(losses[finite])) if finite.any() else np.nan,
               float(np.mean(acceptance)))
      reported = len(infos)
    if checkpoint_dir is not None and (
        (checkpoint_every and done % checkpoint_every == 0) or done == num_iterations):
      checkpoint.save(os.path.join(checkpoint_dir, str(done)), state, overwrite=True)
  losses, acceptance, _ = _stack(infos)
  return TrainingResult(state.params, state.masks, losses, acceptance,
                        time.perf_counter() - start, int(state.skipped_updates), state)


def _stack(infos: list[TrainingInfo]) -> tuple[np.ndarray, ...]:
  """Per-iteration infos as host arrays ``(losses, acceptance, finite)``."""
  if not infos:
    return np.zeros(0, np.float32), np.zeros(0, np.float32), np.zeros(0, bool)
  return tuple(np.asarray(jnp.stack(x)) for x in zip(*infos))
