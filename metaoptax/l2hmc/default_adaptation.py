r"""One call from a log density to a ready sampler: warm-up, training and a check.

In blackjax's conventions (``blackjax.window_adaptation``, ``blackjax.chees_adaptation``)::

  (states, sampler), info = l2hmc.adapt(logdensity_fn).run(rng_key, positions, num_steps)

``positions`` is any pytree whose leaves have a leading axis of chains (the chains'
starts; ``jax.flatten_util.ravel_pytree`` inside). The ``num_steps`` transitions split
40 % warm-up (:func:`metaoptax.l2hmc.warmup`: the chains find the typical set, then the
whitening and step sizes), 40 % training (:func:`metaoptax.l2hmc.train`) and 20 % a check
with the trained sampler. The warm-up runs with ``config.num_steps`` leapfrog steps per
transition; the sampler's follow from the warm-up's step size, a trajectory of a quarter
period in the whitened coordinates (:func:`metaoptax.l2hmc.trajectory_length.num_steps_for`).

Where the posterior's scale changes with the position (a funnel, a centered hierarchy), one
step size per coordinate cannot suit it everywhere. ``run`` screens for that after the
warm-up: each chain's Hessian diagonal (:func:`metaoptax.l2hmc.local_step_sizes.scales_vary`).
Where some coordinate's local scale varies across the chains, a second warm-up, from the
first one's chains, fits position-dependent step sizes
(:mod:`metaoptax.l2hmc.local_step_sizes`, ``TrainingConfig(local_fit="saturating")``) and the
sampler gets them with a scale move of sd ``LOCAL_SCALE_MOVE`` (``L2HMCConfig.scale_move``),
unless that fit finds the step sizes would hardly vary
(:func:`metaoptax.l2hmc.local_step_sizes.keep_if_varying`). Elsewhere the sampler is the one
the first warm-up gave. Both warm-ups' gradients are counted. Above ``LOCAL_MAX_DIM``
coordinates there is no screen (its Hessian diagonals would cost dim gradients each).

Where the warm-up leaves the chains in separate modes (the split :math:`\hat R` of some
coordinate or of :math:`\log p` over its final window at least ``MODES_RHAT``), no
whitening and no trajectory joins them. ``run`` then tries the reflection
:math:`x \to 2\mu - x` through the midpoint :math:`\mu` of the two groups of chains
(:func:`reflection_acceptance`): where its mean acceptance probability is at least
``REFLECTION_ACCEPTANCE``, the modes map onto each other, and a second warm-up from the
first one's chains gives the sampler ``L2HMCConfig(reflection=True)`` (each chain's own
spread as the whitening's scale, the midpoint as its location); this screen goes before
the one for local step sizes, which then does not run.

The check's draws give the diagnostics:

* the split :math:`\hat R` of every coordinate and of :math:`\log p`
  (:func:`metaoptax.l2hmc.diagnostics.split_rhat`) over the check's transitions;
* the mean acceptance probability;
* the fraction of finite positions;
* the Monte Carlo error of each coordinate's standard deviation (from the ESS of its squares):
  converged chains of a heavy-tailed posterior (a funnel's mouth) still give spreads that
  many more draws would change.

Where :math:`\hat R` exceeds ``max_rhat``, the acceptance is below ``min_acceptance`` or
above ``max_acceptance``, a position is not finite, or that error exceeds ``max_sd_error``,
``run`` warns
(:class:`ConvergenceWarning`) with what to do, and ``info.converged`` is ``False``. The
returned states are the check's last: the chains continue from there
(:func:`metaoptax.l2hmc.sample_chains`, or ``blackjax.util.run_inference_algorithm`` per
chain).
"""

from __future__ import annotations

import functools
import warnings
from typing import Callable, NamedTuple

import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np
import optax

from metaoptax._src.progress import Progress
from metaoptax.l2hmc import local_step_sizes
from metaoptax.l2hmc.adaptation import WarmupResult, midpoint
from metaoptax.l2hmc.diagnostics import split_rhat
from metaoptax.l2hmc.dynamics import L2HMCConfig
from metaoptax.l2hmc.ess import geyer_ess
from metaoptax.l2hmc.kernel import (L2HMCState, SamplingAlgorithm, acceptance_probability,
                                   gradient_evaluations, l2hmc)
from metaoptax.l2hmc.targets import Target
from metaoptax.l2hmc.training import TrainingConfig, TrainingResult, _initial_state, train

__all__ = ("Adaptation", "AdaptationInfo", "ConvergenceWarning", "adapt")

SHARES = (0.4, 0.4, 0.2)  # of num_steps: warm-up, training, check
LOCAL_SCALE_MOVE = 2.0  # the scale move's sd where adapt turns local step sizes on
# the most coordinates adapt screens for local step sizes: the screen evaluates dim
# Hessian-vector products per chain, and the local warm-up as many per transition of its
# final window (memory and time that grow as dim squared)
LOCAL_MAX_DIM = 256
# the reflection's screen: the warm-up's chains sit in separate modes (the split R-hat of some
# coordinate or of log p over its final window at least MODES_RHAT) and the reflection through
# their midpoint is accepted with a mean probability of at least REFLECTION_ACCEPTANCE
MODES_RHAT = 2.0
REFLECTION_ACCEPTANCE = 0.5


class ConvergenceWarning(UserWarning):
  """The chains of :func:`adapt` failed a check: their draws may not be the posterior's."""


class AdaptationInfo(NamedTuple):
  """What :func:`adapt`'s ``run`` found, and its checks of the chains."""

  converged: bool  # every check passed
  rhat: float  # the largest split R-hat over coordinates and log p (check transitions)
  rhat_per_coordinate: np.ndarray  # (dim + 1,): each flat coordinate's, then log p's
  acceptance: float  # mean acceptance probability of the check's transitions
  finite: float  # the fraction of finite positions in the check
  sd_error: float  # the largest relative Monte Carlo error of a coordinate's sd (check's draws)
  messages: tuple[str, ...]  # the warnings issued (empty where converged)
  # per chain: warm-up (a Hessian counted as dim gradients), training and check
  num_gradient_evaluations: int
  warmup: WarmupResult
  training: TrainingResult
  config: L2HMCConfig  # the sampler's (dim filled; num_steps chosen)


class Adaptation(NamedTuple):
  """``run(rng_key, positions, num_steps=1000) -> ((states, sampler), info)``."""

  run: Callable


def adapt(logdensity_fn: Callable, config: L2HMCConfig = L2HMCConfig(),
          training: TrainingConfig = TrainingConfig(), *,
          optimizer: optax.GradientTransformation | None = None,
          progress: str | Callable[[Progress], None] | None = "bar",
          max_rhat: float = 1.05, min_acceptance: float = 0.1,
          max_acceptance: float = 0.99, max_sd_error: float = 0.1,
          choose_num_steps: bool = True,
          choose_local_step_sizes: bool = True,
          choose_reflection: bool = True) -> Adaptation:
  r"""An L2HMC sampler adapted to ``logdensity_fn`` (module docstring).

  Args:
    logdensity_fn: ``log p`` of one position (a pytree), up to a constant.
    config: the sampler (default: the default recipe; ``dim`` comes from the positions;
      with ``choose_num_steps``, ``num_steps`` is the warm-up's and the sampler's is chosen).
    training: the training (default: the default recipe). Its ``num_chains`` and
      ``warmup_iterations`` are set by ``run`` from the positions and ``num_steps``.
    optimizer: the step sizes' optimizer (default
      :func:`metaoptax.l2hmc.default_optimizer`).
    progress: the training's progress (:func:`metaoptax.l2hmc.train`).
    max_rhat: the check's largest split R-hat of a converged run.
    min_acceptance, max_acceptance: the check's mean acceptance of a run that moves with
      steps of a useful size (near 0: the chains barely move; near 1: the steps are tiny).
    max_sd_error: the check's largest relative Monte Carlo error of a coordinate's standard
      deviation (heavy tails make it large; module docstring).
    choose_num_steps: choose the sampler's leapfrog steps per transition from the
      warm-up's step size (module docstring); ``False``: ``config.num_steps`` throughout.
    choose_local_step_sizes: where the warm-up's chains show a local scale that varies,
      warm up again for local step sizes with a scale move (module docstring), up to
      ``LOCAL_MAX_DIM`` coordinates; ``False``: ``config`` as it is.
    choose_reflection: where the warm-up's chains sit in separate modes that a reflection
      through their midpoint maps onto each other, warm up again with
      ``L2HMCConfig(reflection=True)`` (module docstring); ``False``: ``config`` as it is.

  Returns:
    An :class:`Adaptation`, whose ``run(rng_key, positions, num_steps=1000)`` returns
    ``((states, sampler), info)``: the chains' states (leaves with a leading chain axis),
    the trained :class:`metaoptax.l2hmc.SamplingAlgorithm` (its whitening included) and an
    :class:`AdaptationInfo`.

  Examples:
    >>> import jax, jax.numpy as jnp
    >>> from metaoptax import l2hmc
    >>> def logdensity_fn(p):
    ...   return -0.5 * jnp.sum(p["w"] ** 2) - 0.5 * (p["b"] / 3.0) ** 2
    >>> keys = jax.random.split(jax.random.key(0), 3)
    >>> positions = {"w": jax.random.normal(keys[0], (16, 2)),
    ...              "b": jax.random.normal(keys[1], (16,))}
    >>> (states, sampler), info = l2hmc.adapt(logdensity_fn, progress=None).run(
    ...     keys[2], positions, num_steps=500)
    >>> states.position["w"].shape, info.converged
    ((16, 2), True)
  """
  if not max_rhat > 1.0:
    raise ValueError(f"max_rhat must be > 1, got {max_rhat}.")
  if not max_sd_error > 0.0:
    raise ValueError(f"max_sd_error must be > 0, got {max_sd_error}.")
  if not 0.0 <= min_acceptance < max_acceptance <= 1.0:
    raise ValueError("need 0 <= min_acceptance < max_acceptance <= 1, got "
                     f"{min_acceptance} and {max_acceptance}.")

  def run(rng_key: jax.Array, positions, num_steps: int = 1000):
    leaves = jax.tree.leaves(positions)
    if not leaves or any(jnp.ndim(leaf) < 1 for leaf in leaves):
      raise ValueError("positions must be a pytree of arrays with a leading axis of chains.")
    num_chains = jnp.shape(leaves[0])[0]
    if any(jnp.shape(leaf)[0] != num_chains for leaf in leaves):
      raise ValueError("every leaf of positions must have the same leading (chains) axis, "
                       f"got {[jnp.shape(leaf) for leaf in leaves]}.")
    if num_chains < 2:
      raise ValueError(f"adapt needs at least 2 chains (to check them), got {num_chains}.")
    if isinstance(num_steps, bool) or not isinstance(num_steps, int) or num_steps < 100:
      raise ValueError(f"num_steps must be an int >= 100, got {num_steps!r}.")
    first = jax.tree.map(lambda leaf: leaf[0], positions)
    _, unravel = jax.flatten_util.ravel_pytree(first)
    flat = jax.vmap(lambda p: jax.flatten_util.ravel_pytree(p)[0])(positions)
    dim = flat.shape[1]
    flat_logdensity = lambda x: logdensity_fn(unravel(x))
    target = Target("adapt", dim, flat_logdensity)
    num_warmup, num_training = (int(num_steps * share) for share in SHARES[:2])
    num_check = num_steps - num_warmup - num_training
    run_config = config._replace(dim=dim)
    run_training = training._replace(num_chains=num_chains, warmup_iterations=num_warmup)
    k_init, k_check = jax.random.split(rng_key)
    state, found, run_config = _initial_state(
        k_init, target, run_config, run_training, optimizer, flat, choose_num_steps)
    warmup_gradients = _warmup_gradients(found, config.num_steps, dim)
    reflected = None
    if choose_reflection and not config.reflection and not config.local_step_sizes:
      reflected, screened = _screen_reflection(
          jax.random.fold_in(k_init, 2), target, config._replace(dim=dim), run_training,
          optimizer, found, choose_num_steps)
      warmup_gradients += screened
      if reflected is not None:
        state, found, run_config = reflected
    if (reflected is None and choose_local_step_sizes and not config.local_step_sizes
        and dim <= LOCAL_MAX_DIM):
      chosen, screened = _screen_local_step_sizes(
          jax.random.fold_in(k_init, 1), target, config._replace(dim=dim), run_training,
          optimizer, found.positions, choose_num_steps)
      warmup_gradients += screened
      if chosen is not None:
        state, found, run_config, run_training = chosen
    result = train(k_init, target, run_config, run_training, num_iterations=num_training,
                   optimizer=optimizer, init_state=state, progress=progress,
                   log_every=max(num_training // 10, 1))
    flat_sampler = result.sampler
    draws, acceptance, states = _check(k_check, flat_sampler, result.state.chains, num_check)
    gradients = gradient_evaluations(run_config)
    # each training iteration makes one proposal per chain; with aux_weight one more
    per_iteration = gradients * (2 if run_training.aux_weight else 1)
    info = _diagnose(draws, acceptance, max_rhat, min_acceptance, max_acceptance,
                     warmup_gradients + per_iteration * num_training + gradients * num_check,
                     found, result, num_steps, run_config, max_sd_error)
    sampler = l2hmc(logdensity_fn, run_config, result.params, result.masks, result.whitening)
    states = L2HMCState(jax.vmap(unravel)(states.position), states.logdensity,
                        jax.vmap(unravel)(states.logdensity_grad))
    return (states, sampler), info

  return Adaptation(run)


def _screen_local_step_sizes(rng_key, target: Target, config: L2HMCConfig,
                             training: TrainingConfig, optimizer, positions,
                             choose_num_steps: bool):
  """The screen for local step sizes (module docstring) from the warm-up's ``positions``:
  ``(chosen, gradients)``, ``chosen`` the second warm-up's ``(state, found, config,
  training)`` where the scales vary and its fit keeps them (else ``None``), ``gradients``
  per chain what the screen and that warm-up cost."""
  curvatures = jax.jit(jax.vmap(
      lambda x: local_step_sizes.diagonal_curvature(target.logdensity_fn, x)))(positions)
  gradients = config.dim  # one Hessian diagonal per chain
  if not bool(local_step_sizes.scales_vary(curvatures)):
    return None, gradients
  local_config = config._replace(local_step_sizes=True, scale_move=LOCAL_SCALE_MOVE)
  local_training = training._replace(local_fit="saturating")
  state, found, local_config = _initial_state(rng_key, target, local_config, local_training,
                                              optimizer, positions, choose_num_steps)
  gradients += _warmup_gradients(found, config.num_steps, config.dim)
  if not bool(jnp.any(state.params.local.exponent != 0)):  # keep_if_varying switched it off
    return None, gradients
  return (state, found, local_config, local_training), gradients


def _screen_reflection(rng_key, target: Target, config: L2HMCConfig,
                       training: TrainingConfig, optimizer, found: WarmupResult,
                       choose_num_steps: bool):
  """The screen for the reflection (module docstring) from the warm-up's result ``found``:
  ``(chosen, gradients)``, ``chosen`` the second warm-up's ``(state, found, config)`` where
  the chains sit in separate modes that the reflection maps onto each other (else
  ``None``), ``gradients`` per chain what the screen and that warm-up cost."""
  gradients = 1  # log p at each chain's reflected point
  if not float(jnp.max(found.rhat)) >= MODES_RHAT:
    return None, 0
  if not float(reflection_acceptance(target.logdensity_fn, found.positions)) >= (
      REFLECTION_ACCEPTANCE):
    return None, gradients
  reflect_config = config._replace(reflection=True)
  state, found, reflect_config = _initial_state(rng_key, target, reflect_config, training,
                                                optimizer, found.positions, choose_num_steps)
  gradients += _warmup_gradients(found, config.num_steps, config.dim)
  return (state, found, reflect_config), gradients


@functools.partial(jax.jit, static_argnums=0)
def reflection_acceptance(logdensity_fn: Callable, positions: jax.Array) -> jax.Array:
  r"""The mean over the chains ``positions`` (chains, dim) of the Metropolis acceptance
  probability of the reflection :math:`x \to 2\mu - x` through their midpoint :math:`\mu`
  (``metaoptax.l2hmc.warmup(location="midpoint")``, from one position per chain)."""
  center = midpoint(positions, jnp.mean(positions, 0))
  before = jax.vmap(logdensity_fn)(positions)
  after = jax.vmap(logdensity_fn)(2.0 * center - positions)
  return jnp.mean(acceptance_probability(-before, -after, 0.0))


def _warmup_gradients(found: WarmupResult, num_steps: int, dim: int) -> int:
  """The gradients of a warm-up per chain: its transitions of ``num_steps`` leapfrog steps,
  and its Hessians (``dim`` gradient-sized products each)."""
  return int(found.num_transitions) * num_steps + int(found.num_hessian_evaluations) * dim


def _check(rng_key, sampler: SamplingAlgorithm, states: L2HMCState, num_check: int):
  """``num_check`` transitions of every chain: ``(draws with log p (num_check, chains,
  dim + 1), acceptance (num_check, chains), last states)``."""

  @jax.jit
  def run(rng_key, states):
    def one(states, key):
      keys = jax.random.split(key, states.position.shape[0])
      states, info = jax.vmap(sampler.step)(keys, states)
      drawn = jnp.concatenate([states.position, states.logdensity[:, None]], axis=1)
      return states, (drawn, info.acceptance_rate)

    states, (draws, acceptance) = jax.lax.scan(one, states, jax.random.split(rng_key,
                                                                             num_check))
    return draws, acceptance, states

  return run(rng_key, states)


def _sd_monte_carlo_error(draws: np.ndarray) -> float:
  r"""The largest relative Monte Carlo standard error of a coordinate's standard deviation
  estimated from ``draws`` ``(transitions, chains, dim)``: with :math:`q = (x - \bar x)^2`,
  :math:`\tfrac12\,\mathrm{sd}(q) / (\bar q\sqrt{\mathrm{ESS}(q)})` (the delta method,
  :math:`\hat\sigma = \sqrt{\bar q}`; ESS: Geyer's over the chains)."""
  squares = (draws - draws.mean(axis=(0, 1))) ** 2
  count = squares.shape[0] * squares.shape[1]
  errors = []
  for d in range(squares.shape[2]):
    q = squares[..., d:d + 1]
    if not np.std(q) > 0:
      continue
    ess = geyer_ess(q) * count
    errors.append(0.5 * np.std(q) / (np.mean(q) * np.sqrt(ess)))
  return float(max(errors, default=0.0))


def _diagnose(draws, acceptance, max_rhat, min_acceptance, max_acceptance, gradients, found,
              result, num_steps, config, max_sd_error) -> AdaptationInfo:
  """The checks of :func:`adapt` and their warnings."""
  finite = float(jnp.mean(jnp.isfinite(draws)))
  rhat = np.asarray(split_rhat(jnp.where(jnp.isfinite(draws), draws, 0.0)))
  largest = float(np.max(rhat))
  mean_acceptance = float(jnp.mean(acceptance))
  longer = f"num_steps={2 * num_steps}"
  messages = []
  if not largest < max_rhat:
    worst = int(np.argmax(rhat))
    which = "log p" if worst == rhat.shape[0] - 1 else f"coordinate {worst}"
    messages.append(
        f"the chains have not converged: split R-hat {largest:.3g} (of {which}) > {max_rhat} "
        f"over the last {draws.shape[0]} transitions of adaptation, so their draws are not "
        f"yet the posterior's. Run a longer adaptation ({longer}), or more chains; where the "
        "chains started far from the posterior, start them closer.")
  if not mean_acceptance >= min_acceptance:
    messages.append(
        f"the mean acceptance is {mean_acceptance:.3g} < {min_acceptance}: the chains barely "
        f"move. Run a longer adaptation ({longer}); check the log density for regions where "
        "it is not finite or has a very large gradient.")
  if not mean_acceptance <= max_acceptance:
    messages.append(
        f"the mean acceptance is {mean_acceptance:.3g} > {max_acceptance}: the step sizes are "
        f"tiny and the chains move slowly. Run a longer adaptation ({longer}).")
  sd_error = _sd_monte_carlo_error(np.asarray(draws[..., :-1], np.float64))
  if finite == 1.0 and not sd_error <= max_sd_error:
    messages.append(
        f"the draws' spread is poorly determined: the Monte Carlo error of a standard "
        f"deviation over the check's {draws.shape[0] * draws.shape[1]} draws is "
        f"{sd_error:.0%} (heavy tails, or slow mixing of the squares). Sample many more draws "
        "before trusting standard deviations or tail quantiles (the error falls as one over "
        "the square root of the draws); check that the posterior has finite variance.")
  if finite < 1.0:
    messages.append(f"{1.0 - finite:.3g} of the chains' positions or log densities are not "
                    "finite: check the log density (and its gradient) where it fails.")
  for message in messages:
    warnings.warn(message, ConvergenceWarning, stacklevel=3)
  return AdaptationInfo(not messages, largest, rhat, mean_acceptance, finite, sd_error,
                        tuple(messages),
                        int(gradients), found, result, config)
