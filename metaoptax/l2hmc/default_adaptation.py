r"""One call from a log density to a ready sampler: warm-up, training and a check.

In blackjax's conventions (``blackjax.window_adaptation``, ``blackjax.chees_adaptation``)::

  (states, sampler), info = l2hmc.adapt(logdensity_fn).run(rng_key, positions, num_steps)

``positions`` is any pytree whose leaves have a leading axis of chains (the chains'
starts; ``jax.flatten_util.ravel_pytree`` inside). The ``num_steps`` transitions split ``SHARES``
between a warm-up (:func:`metaoptax.l2hmc.warmup`: the chains find the typical set, then the
whitening and step sizes), the training (:func:`metaoptax.l2hmc.train`) and a check with the
trained sampler. The warm-up runs with ``config.num_steps`` leapfrog steps per transition
(``WARMUP_NUM_STEPS`` where ``adapt`` is given no ``config``): it only has to find the
typical set, the scales and a step size, and short trajectories do that for fewer gradients;
its second window, whose draws the whitening is fitted to, makes fewer where a quarter period
at the burn-in's step size takes fewer
(:func:`metaoptax.l2hmc.trajectory_length.num_steps_for`, at most the burn-in's); where
the burn-in's chains still disagree and a quarter period at its step size needs more than
``trajectory_length.MAX_NUM_STEPS`` steps, the burn-in continues with that many, at most
``trajectory_length.LONG_MAX_NUM_STEPS`` (:func:`metaoptax.l2hmc.adaptation.lengthen_burn_in`),
each later window with a quarter period at the step size the window before it ended with
(at most the first window's steps), while each of its windows brings the chains together (its split R-hat at most
``training.LENGTHENED_RHAT_RATIO`` of the short burn-in's), and where it ends so (or below
the threshold) its later windows and the sampler's cap keep its last window's steps.
The sampler's steps follow from the warm-up's step size, a trajectory of a quarter period in
the whitened coordinates (:func:`metaoptax.l2hmc.trajectory_length.num_steps_for`), of the
widest whitened coordinate where the low-rank metric leaves one wider than 1
(``WarmupResult.whitened_spread``), lengthened where that would move the unit coordinates'
squares poorly (:func:`metaoptax.l2hmc.trajectory_length.num_steps_for_spread`).

Every gradient of the adaptation is counted, per chain, in
``info.num_gradient_evaluations``: the warm-ups' transitions (their repeated burn-in windows
included) and Hessians (``dim`` gradient-sized products each), the screens', the training's
(two proposals per iteration with ``TrainingConfig.aux_weight``) and the check's. A run's
total cost per chain is that plus ``l2hmc.gradient_evaluations(info.config)`` per draw.

Up to ``training.DENSE_MAX_DIM`` coordinates the warm-up's metric is dense
(``TrainingConfig(metric="auto")``): its burn-in moves each chain with its own Newton
metric, the inverse of its Hessian at the window's start. Where the curvature changes by
orders of magnitude over a window's travel (a 2PL item-response model, whose discriminations
are the exponential of a product of coordinates), those metrics fail to bring the chains
together, and a dense covariance of chains that disagree whitens badly. So where the dense
warm-up's chains do not agree on :math:`\log p` at its end (its split :math:`\hat R` over
the final window at least the warm-up's ``CONVERGED_RHAT``; chains in separate modes of
equal density agree on it, and no metric joins them), ``run`` warms up again from the same
starts with the diagonal metric, and keeps that warm-up, with the diagonal metric for the
rest of the run, where its chains agree better (:func:`_retry_diagonal`); the correlations
that whitening leaves set the trajectory's length (the quarter period of the widest whitened
direction: :mod:`metaoptax.l2hmc.trajectory_length`). Its gradients are counted. Where the
dense warm-up's log-scale slopes also find a driver (a centered hierarchy, whose chains sit
apart in its neck and mouth under either metric) and its chains are not in separate modes,
the screen for a non-centering (below) runs first, from the dense warm-up, and the fallback
only where it does not choose one (:func:`_noncentering_first`): else the fallback's warm-up, and
its lengthened burn-in, would be spent on the geometry the non-centering replaces.

Where the posterior's scale changes with the position (a funnel, a centered hierarchy), one
step size per coordinate cannot suit it everywhere. ``run`` screens for that after the
warm-up: each chain's Hessian diagonal (:func:`metaoptax.l2hmc.local_step_sizes.scales_vary`).
Where some coordinate's local scale varies across the chains, a second warm-up, from the
first one's chains, fits position-dependent step sizes
(:mod:`metaoptax.l2hmc.local_step_sizes`, ``TrainingConfig(local_fit="saturating")``) and the
sampler gets them with a scale move of sd ``LOCAL_SCALE_MOVE`` (``L2HMCConfig.scale_move``),
unless that fit finds the step sizes would hardly vary
(:func:`metaoptax.l2hmc.local_step_sizes.keep_if_varying`). Elsewhere the sampler is the one
the first warm-up gave. The second warm-up starts from chains already in the typical set, so
it runs ``SCREEN_WARMUP_SHARE`` of the first one's transitions. Where the screen for a
non-centering (below) ran first and read the local Gaussians, their slopes of the local
log-scales on the position are the ones that warm-up's fit follows: where a local model
fitted to them and to the local scales would not vary its step sizes by
``local_step_sizes.MIN_SPREAD`` (:func:`metaoptax.l2hmc.local_step_sizes.fit_varies`,
:func:`_local_model_varies`: the test that switches that warm-up's fit off), the screen for
local step sizes does not run. Both warm-ups' gradients
are counted. Above ``LOCAL_MAX_DIM``
coordinates there is no screen (its Hessian diagonals would cost dim gradients each).

Where a few coordinates set the scale of others (a funnel, a centered hierarchy, a
horseshoe), ``run`` screens for a non-centering (:mod:`metaoptax.l2hmc.noncentering`) after
the warm-up: where some coordinate's log square has a slope of at least
``noncentering.MIN_SLOPE`` on the position over the warm-up's final window
(``WarmupResult.log_scale_slopes``, at no extra cost; of either warm-up where the diagonal
one replaced the dense one: :func:`_shows_drivers`), the chains make
``NONCENTERING_DRAWS`` more transitions, each chain's local Gaussian (gradient and Hessian
diagonal) is read at ``NONCENTERING_CURVATURES`` of them, and where those find drivers
(:func:`metaoptax.l2hmc.noncentering.structure`) the transport they fit replaces the
target by its latent density: a second warm-up from the chains' latent positions, then the
training and the check there, and the sampler returned maps its states to and from it
(:func:`metaoptax.l2hmc.noncentering.transported`). The screen for local step sizes then
does not run, nor the screen for modes where the non-centering was chosen before the diagonal
fallback. The screen runs once: where it ran before the fallback, not again after it. An
independent Gaussian's slopes are 0: there the screen costs nothing (a correlated one's
log squares have slopes, through the conditional means, and the local Gaussians then find no
driver). Its draws, Hessian diagonals and warm-up are counted. Like the screen for local step sizes, it runs up to
``LOCAL_MAX_DIM`` coordinates (its Hessian diagonals cost ``dim`` gradients each). The transport is kept only where the second warm-up
measures it better (:func:`_latent_is_better`: its chains agree, and its trajectory needs
fewer leapfrog steps); else the sampler is the first warm-up's.

The sampler retries a trajectory that diverges (``L2HMCConfig(retry_divergent=
RETRY_REFINEMENT)``, where it allows it: networks off): from the same start and momentum,
with every step split into ``RETRY_REFINEMENT`` smaller ones, accepted by delayed rejection
(``metaoptax.l2hmc.kernel.retried_acceptance``), so that a stiff corner of the posterior
that a step size suited to the bulk throws the chains out of (the tail of a stochastic
volatility's persistence, where the volatilities below a tiny return make the exponential
likelihood steep; a funnel's neck) is still entered and left. A rejected trajectory that
did not diverge is retried with probability :math:`(1 - \alpha)^k` of its acceptance
probability :math:`\alpha` (``L2HMCConfig.retry_power`` :math:`= k`): seldom where the step
size suits the target. It costs ``RETRY_REFINEMENT + 1`` trajectories' gradients where one
is retried (counted in ``info.num_gradient_evaluations`` and each transition's
``L2HMCInfo.num_gradient_evaluations``). Where some of the check's proposals still diverge
(the refined trajectory too coarse to stand in for them: on a curved ridge, a trajectory
that overflows can leave the refined one an energy error of thousands, whose acceptance is
0), the sampler ``run`` returns refines by ``DIVERGENT_RETRY_REFINEMENT`` instead; the
kernel is exact for any refinement.

Where the warm-up leaves the chains in separate modes (the split :math:`\hat R` of some
coordinate or of :math:`\log p` over its final window at least ``MODES_RHAT``), no
whitening and no trajectory joins them. ``run`` then tries the reflection
:math:`x \to 2\mu - x` through the midpoint :math:`\mu` of the two groups of chains
(:func:`reflection_acceptance`): where its mean acceptance probability is at least
``REFLECTION_ACCEPTANCE``, the modes map onto each other, and a second warm-up from the
first one's chains (``SCREEN_WARMUP_SHARE`` of its transitions) gives the sampler
``L2HMCConfig(reflection=True)`` (each chain's own
spread as the whitening's scale, the midpoint as its location); this screen goes before
the one for local step sizes, which then does not run.

The check's draws give the diagnostics:

* the split :math:`\hat R` of every coordinate and of :math:`\log p`
  (:func:`metaoptax.l2hmc.diagnostics.split_rhat`) over the check's transitions;
* the mean acceptance probability;
* the fraction of finite positions;
* the fraction of divergent proposals: those whose position, log density, gradient or
  log-Jacobian is not finite (:func:`metaoptax.l2hmc.is_divergent`), counted as NUTS counts
  its divergences. They are rejected, so the chains stay out of where the log density
  fails: a log density that is NaN on part of the posterior gives draws of the rest, with
  every other check passing. The proposals of chains that mix land about where draws would,
  so the rate estimates the posterior mass the chains are kept out of, and
  ``MAX_DIVERGENT_RATE`` (one in a thousand) bounds the error that leaves in any probability
  to about as much, below the Monte Carlo error of a thousand draws. A log density finite
  wherever the chains go gives none but the overflows of a trajectory thrown far out (a
  funnel's neck, where NUTS diverges too). Where :math:`-\infty` marks the edge of a
  constrained support on purpose, the rate is the cost of the rejections: sample
  unconstrained coordinates;
* the Monte Carlo error of each coordinate's standard deviation (from the ESS of its squares):
  converged chains of a heavy-tailed posterior (a funnel's mouth) still give spreads that
  many more draws would change.

Where :math:`\hat R` exceeds ``max_rhat``, the acceptance is below ``min_acceptance`` or
above ``max_acceptance``, a position is not finite, more than ``max_divergent_rate`` of the
proposals diverge, or that error exceeds ``max_sd_error``, ``run`` warns
(:class:`ConvergenceWarning`) with what to do, and ``info.converged`` is ``False``. The
returned states are the check's last: the chains continue from there
(:func:`metaoptax.l2hmc.sample_chains`, or ``blackjax.util.run_inference_algorithm`` per
chain). ``info.num_divergent`` counts the whole adaptation's divergent proposals.

Before all that, ``run`` evaluates the log density and its gradient at every chain's start
(one vmapped call): where one is not finite, at all starts or some, it raises a
``ValueError`` that names the log density and the failing chains and their positions.
``positions`` must have a leading axis of chains on every leaf: a bare 1-D array is an
error (one position, or chains of a scalar, cannot be told apart), and so are leaves whose
leading axes differ (one lacks the axis). A leaf without the axis whose first axis happens
to equal the number of chains cannot be told from one with it; where it makes the log
density of one chain's position other than a scalar, that is an error too.
"""

from __future__ import annotations

import functools
import time
import warnings
from typing import Callable, NamedTuple

import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np
import optax

from metaoptax._src.multihost import is_main_process
from metaoptax._src.progress import Bar, Progress
from metaoptax.l2hmc import local_step_sizes, noncentering
from metaoptax.l2hmc.adaptation import CONVERGED_RHAT, CURVATURE_FLOOR, WarmupResult, midpoint
from metaoptax.l2hmc.diagnostics import ConvergenceWarning, split_rhat
from metaoptax.l2hmc.dynamics import L2HMCConfig
from metaoptax.l2hmc.ess import geyer_ess
from metaoptax.l2hmc.kernel import (L2HMCState, SamplingAlgorithm, acceptance_probability,
                                   gradient_evaluations, l2hmc, sample_chains)
from metaoptax.l2hmc.targets import Target
from metaoptax.l2hmc.training import (TrainingConfig, TrainingResult, _initial_state, _metric,
                                      train)

__all__ = ("Adaptation", "AdaptationInfo", "adapt")

SHARES = (0.4, 0.4, 0.2)  # of num_steps: warm-up, training, check
#: the warm-up's leapfrog steps per transition where ``adapt`` is given no ``config`` (the
#: sampler's are chosen after it: ``choose_num_steps``)
WARMUP_NUM_STEPS = 5
#: the second warm-up of a screen (local step sizes, reflection) as a fraction of the first's
#: transitions: it starts from the first one's chains, already in the typical set
SCREEN_WARMUP_SHARE = 0.5
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
# the check's largest fraction of divergent proposals (not finite: L2HMCInfo.is_divergent)
# of a converged run (adapt's max_divergent_rate; module docstring)
MAX_DIVERGENT_RATE = 1e-3
# the non-centering's screen: the transitions of every chain whose draws fit it
NONCENTERING_DRAWS = 64
# the split R-hat below which the latent warm-up's chains agree (the warm-up's CONVERGED_RHAT)
LATENT_RHAT = 1.1
# ... and at how many of them each chain's Hessian diagonal gives the fit its log-scale slopes
NONCENTERING_CURVATURES = 8
MAX_LISTED = 3  # the most chains whose failing starts run's ValueError lists
#: the sampler's retry of a divergent or rejected trajectory (``L2HMCConfig.retry_divergent``):
#: its steps split into this many, each as much smaller
RETRY_REFINEMENT = 4
#: the retry's refinement where some of the check's proposals diverged with the retry at
#: ``RETRY_REFINEMENT`` (its refined trajectory too coarse to stand in for them)
DIVERGENT_RETRY_REFINEMENT = 16


class AdaptationInfo(NamedTuple):
  r"""What :func:`adapt`'s ``run`` found, and its checks of the chains.

  ``print(info)`` (and ``repr``) gives a summary of a few lines; the fields hold the rest.
  The check is the last 20 % of ``num_steps``: every chain's transitions with the trained
  sampler (module docstring).

  Attributes:
    converged: every check passed (no :class:`ConvergenceWarning`; ``messages`` empty).
    rhat: the largest split :math:`\hat R` over the coordinates and :math:`\log p`, over the
      check's transitions.
    rhat_per_coordinate: ``(dim + 1,)`` each flat coordinate's split :math:`\hat R` (in
      ``jax.flatten_util.ravel_pytree``'s order), then :math:`\log p`'s.
    acceptance: the mean acceptance probability of the check's transitions.
    finite: the fraction of the check's positions and log densities that are finite.
    sd_error: the largest relative Monte Carlo error of a coordinate's standard deviation
      over the check's draws (from the ESS of its squares).
    divergent_rate: the fraction of the check's proposals (transitions times chains) that
      diverged: their position, log density, gradient or log-Jacobian is not finite
      (:func:`metaoptax.l2hmc.is_divergent`; rejected, so the chains stay out of where the
      log density fails).
    num_divergent: the divergent proposals of the whole adaptation, over every chain: the
      warm-ups' (the screens' included), the training's and the check's.
    messages: the warnings issued, one string each (empty where converged).
    num_gradient_evaluations: per chain, the gradients of the warm-ups (a Hessian counted as
      ``dim`` gradients), the screens, the training and the check.
    warmup: the warm-up's :class:`metaoptax.l2hmc.WarmupResult` (the diagonal one where it
      replaced the dense one; the second one where a screen chose local step sizes or the
      reflection).
    training: the training's :class:`metaoptax.l2hmc.TrainingResult`.
    config: the sampler's :class:`metaoptax.l2hmc.L2HMCConfig` (``dim`` filled, ``num_steps``
      chosen, what the screens chose: ``local_step_sizes`` with ``scale_move``, or
      ``reflection``, and the retry's refinement ``retry_divergent``: the check ran with
      ``RETRY_REFINEMENT``, the sampler with ``DIVERGENT_RETRY_REFINEMENT`` where some of the
      check's proposals diverged).
    noncentering: the :class:`metaoptax.l2hmc.noncentering.NonCentering` the sampler moves
      the latent coordinates of, where the screen chose one (else ``None``).
  """

  converged: bool
  rhat: float
  rhat_per_coordinate: np.ndarray
  acceptance: float
  finite: float
  sd_error: float
  divergent_rate: float
  num_divergent: int
  messages: tuple[str, ...]
  num_gradient_evaluations: int
  warmup: WarmupResult
  training: TrainingResult
  config: L2HMCConfig
  noncentering: noncentering.NonCentering | None = None

  def __repr__(self) -> str:
    lines = [f"AdaptationInfo: {'converged' if self.converged else 'NOT converged'}",
             f"  split R-hat       {self.rhat:.4g} (the largest over "
             f"{self.rhat_per_coordinate.shape[0] - 1} coordinates and log p)",
             f"  acceptance        {self.acceptance:.3g} (mean); finite {self.finite:.0%}",
             f"  divergent         {self.divergent_rate:.2%} of the check's proposals; "
             f"{self.num_divergent:,} in all",
             f"  sd error          {self.sd_error:.1%} (the largest, relative)",
             f"  gradients         {self.num_gradient_evaluations:,} per chain"]
    if self.config is not None:
      chosen = [name for name, on in (("a non-centering", self.noncentering is not None),
                                      ("local step sizes", self.config.local_step_sizes),
                                      ("scale move", self.config.scale_move),
                                      ("reflection", self.config.reflection)) if on]
      lines.append(f"  sampler           K = {self.config.num_steps} leapfrog steps; "
                   f"screens chose {', '.join(chosen) or 'nothing'}")
    lines += [f"  warning: {message}" for message in self.messages]
    return "\n".join(lines)


class Adaptation(NamedTuple):
  """``run(rng_key, positions, num_steps=1000) -> ((states, sampler), info)``."""

  run: Callable


def adapt(logdensity_fn: Callable, config: L2HMCConfig | None = None,
          training: TrainingConfig = TrainingConfig(), *,
          optimizer: optax.GradientTransformation | None = None,
          progress: str | Callable[[Progress], None] | None = "bar",
          max_rhat: float = 1.05, min_acceptance: float = 0.1,
          max_acceptance: float = 0.99, max_sd_error: float = 0.1,
          max_divergent_rate: float = MAX_DIVERGENT_RATE,
          choose_num_steps: bool = True,
          choose_local_step_sizes: bool = True,
          choose_reflection: bool = True,
          choose_noncentering: bool = True,
          choose_retry: bool = True) -> Adaptation:
  r"""An L2HMC sampler adapted to ``logdensity_fn`` (module docstring).

  Args:
    logdensity_fn: ``log p`` of one position (a pytree), up to a constant.
    config: the sampler (default: the default recipe, ``L2HMCConfig(num_steps=
      WARMUP_NUM_STEPS)``; ``dim`` comes from the positions; with ``choose_num_steps``,
      ``num_steps`` is the warm-up's and the sampler's is chosen).
    training: the training (default: the default recipe). Its ``num_chains`` and
      ``warmup_iterations`` are set by ``run`` from the positions and ``num_steps``.
    optimizer: the step sizes' optimizer (default
      :func:`metaoptax.l2hmc.default_optimizer`).
    progress: ``"bar"``: one tqdm bar over the whole run, labelled with its phase (the
      warm-up, the screens, the training with its loss, the check), counting every
      chain's transitions; a callable receiving a :class:`metaoptax.Progress` at the start
      and the end of each phase and every tenth of the training (``print`` prints a
      labelled line); or ``None`` for silence.
    max_rhat: the check's largest split R-hat of a converged run.
    min_acceptance, max_acceptance: the check's mean acceptance of a run that moves with
      steps of a useful size (near 0: the chains barely move; near 1: the steps are tiny).
    max_sd_error: the check's largest relative Monte Carlo error of a coordinate's standard
      deviation (heavy tails make it large; module docstring).
    max_divergent_rate: the check's largest fraction of divergent proposals (their log
      density or gradient not finite; module docstring).
    choose_num_steps: choose the sampler's leapfrog steps per transition from the
      warm-up's step size (module docstring); ``False``: ``config.num_steps`` throughout.
    choose_local_step_sizes: where the warm-up's chains show a local scale that varies,
      warm up again for local step sizes with a scale move (module docstring), up to
      ``LOCAL_MAX_DIM`` coordinates; ``False``: ``config`` as it is.
    choose_reflection: where the warm-up's chains sit in separate modes that a reflection
      through their midpoint maps onto each other, warm up again with
      ``L2HMCConfig(reflection=True)`` (module docstring); ``False``: ``config`` as it is.
    choose_noncentering: where the warm-up's chains show coordinates that set others'
      scales, sample in the latent coordinates of a non-centering fitted to them (module
      docstring); ``False``: the target's own coordinates.
    choose_retry: give the sampler ``L2HMCConfig(retry_divergent=RETRY_REFINEMENT)`` where
      it allows it (networks off) and ``config`` has none: a divergent
      trajectory is retried with smaller steps (module docstring), and
      ``DIVERGENT_RETRY_REFINEMENT`` where the check's proposals still diverge with that;
      ``False``: ``config`` as it is.

  Returns:
    An :class:`Adaptation`, whose ``run(rng_key, positions, num_steps=1000)`` returns
    ``((states, sampler), info)``: the chains' states (leaves with a leading chain axis),
    the trained :class:`metaoptax.l2hmc.SamplingAlgorithm` (its whitening included) and an
    :class:`AdaptationInfo`.

  Raises:
    ValueError: here, for settings out of range; from ``run``, before any sampling, for
      ``positions`` that are not a pytree whose leaves share a leading axis of at least 2
      chains (a bare 1-D array is an error: pass ``(num_chains, dim)``, a scalar parameter
      as ``(num_chains, 1)``), for a ``logdensity_fn`` that does not return a scalar, and
      where the log density or its gradient is not finite at the start of any chain, all
      or only some (the message names the function and lists the failing chains with their
      positions: move those starts).

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
  if config is None:
    config = L2HMCConfig(num_steps=WARMUP_NUM_STEPS)
  if not max_rhat > 1.0:
    raise ValueError(f"max_rhat must be > 1, got {max_rhat}.")
  if not max_sd_error > 0.0:
    raise ValueError(f"max_sd_error must be > 0, got {max_sd_error}.")
  if not 0.0 <= min_acceptance < max_acceptance <= 1.0:
    raise ValueError("need 0 <= min_acceptance < max_acceptance <= 1, got "
                     f"{min_acceptance} and {max_acceptance}.")
  if not 0.0 <= max_divergent_rate <= 1.0:
    raise ValueError(f"max_divergent_rate must be in [0, 1], got {max_divergent_rate}.")
  if not (progress is None or progress == "bar" or callable(progress)):
    raise ValueError(f"progress must be 'bar', a callable or None, got {progress!r}.")

  def run(rng_key: jax.Array, positions, num_steps: int = 1000):
    leaves = jax.tree.leaves(positions)
    if not leaves or any(jnp.ndim(leaf) < 1 for leaf in leaves):
      raise ValueError("positions must be a pytree of arrays with a leading axis of chains, "
                       f"got shapes {jax.tree.map(jnp.shape, positions)}.")
    if jax.tree_util.treedef_is_leaf(jax.tree.structure(positions)) and jnp.ndim(
        positions) == 1:
      raise ValueError(
          f"positions is one array of shape {jnp.shape(positions)}: one position with no "
          "axis of chains, or chains of a scalar? Pass an array of shape (num_chains, dim) "
          "(a scalar parameter as (num_chains, 1)), or a pytree whose leaves have a leading "
          "axis of chains (a scalar parameter as {'x': shape (num_chains,)}).")
    num_chains = jnp.shape(leaves[0])[0]
    if any(jnp.shape(leaf)[0] != num_chains for leaf in leaves):
      raise ValueError("every leaf of positions must have the same leading (chains) axis, "
                       f"got shapes {jax.tree.map(jnp.shape, positions)}: does a leaf lack "
                       "the axis of chains?")
    if num_chains < 2:
      raise ValueError(f"adapt needs at least 2 chains (to check them), got {num_chains}.")
    if isinstance(num_steps, bool) or not isinstance(num_steps, int) or num_steps < 100:
      raise ValueError(f"num_steps must be an int >= 100, got {num_steps!r}.")
    first = jax.tree.map(lambda leaf: leaf[0], positions)
    _, unravel = jax.flatten_util.ravel_pytree(first)
    flat = jax.vmap(lambda p: jax.flatten_util.ravel_pytree(p)[0])(positions)
    dim = flat.shape[1]
    flat_logdensity = lambda x: logdensity_fn(unravel(x))
    _check_starts(logdensity_fn, flat_logdensity, flat, first)
    target = Target("adapt", dim, flat_logdensity)
    num_warmup, num_training = (int(num_steps * share) for share in SHARES[:2])
    num_check = num_steps - num_warmup - num_training
    run_config = config._replace(dim=dim)
    run_training = training._replace(num_chains=num_chains, warmup_iterations=num_warmup)
    k_init, k_check = jax.random.split(rng_key)
    report = _Report(progress, num_steps)
    report("warm-up", 0)
    state, found, run_config = _initial_state(
        k_init, target, run_config, run_training, optimizer, flat, choose_num_steps)
    cost = _warmup_cost(found, dim)
    report("warm-up", cost.transitions - num_warmup, cost.transitions,
           acceptance=float(found.acceptance), step_size=float(found.step_size),
           divergent=cost.divergent)
    replaced = ()  # the warm-ups a later one replaced (their slopes still screen)
    screen_noncentering = (choose_noncentering and not config.local_step_sizes
                           and dim <= LOCAL_MAX_DIM)
    transport = None
    local_gaussians = None  # the non-centering screen's log-scale slopes, where it read them
    if _metric(run_config, run_training) == "dense" and not _agree_on_log_density(found):
      if screen_noncentering and _noncentering_first(found):
        # the re-parametrization first: where it is chosen, the fallback is not needed
        report("screen for a non-centering")
        chosen, screened, local_gaussians = _screen_noncentering(
            jax.random.fold_in(k_init, 3), target, config._replace(dim=dim), run_config,
            run_training, optimizer, state, found, choose_num_steps)
        cost += screened
        screen_noncentering = False  # screened once
        report("screen for a non-centering", screened.transitions, screened.transitions)
        if chosen is not None:
          state, found, run_config, target, transport = chosen
      if transport is None:
        report("warm-up, diagonal")
        diagonal, retried = _retry_diagonal(k_init, target, config._replace(dim=dim),
                                            run_training, optimizer, flat, found,
                                            choose_num_steps)
        cost += retried
        report("warm-up, diagonal", retried.transitions, retried.transitions)
        if diagonal is not None:
          replaced = (found,)
          state, found, run_config, run_training = diagonal
    reflected = None
    if (transport is None and choose_reflection and not config.reflection
        and not config.local_step_sizes):
      report("screen for modes")
      reflected, screened = _screen_reflection(
          jax.random.fold_in(k_init, 2), target, config._replace(dim=dim), run_training,
          optimizer, found, choose_num_steps)
      cost += screened
      report("screen for modes", screened.transitions, screened.transitions)
      if reflected is not None:
        state, found, run_config = reflected
    if transport is None and reflected is None and screen_noncentering:
      report("screen for a non-centering")
      chosen, screened, local_gaussians = _screen_noncentering(
          jax.random.fold_in(k_init, 3), target, config._replace(dim=dim), run_config,
          run_training, optimizer, state, found, choose_num_steps, replaced)
      cost += screened
      report("screen for a non-centering", screened.transitions, screened.transitions)
      if chosen is not None:
        state, found, run_config, target, transport = chosen
    if (reflected is None and transport is None and choose_local_step_sizes
        and not config.local_step_sizes and dim <= LOCAL_MAX_DIM
        and _local_model_varies(local_gaussians)):
      report("screen for local scales")
      chosen, screened = _screen_local_step_sizes(
          jax.random.fold_in(k_init, 1), target, config._replace(dim=dim), run_training,
          optimizer, found.positions, choose_num_steps)
      cost += screened
      report("screen for local scales", screened.transitions, screened.transitions)
      if chosen is not None:
        state, found, run_config, run_training = chosen
    retry_chosen = choose_retry and not (run_config.use_networks
                                         or run_config.retry_divergent)
    if retry_chosen:
      run_config = run_config._replace(retry_divergent=RETRY_REFINEMENT)
    result = train(k_init, target, run_config, run_training, num_iterations=num_training,
                   optimizer=optimizer, init_state=state, progress=report.training(),
                   log_every=max(num_training // 10, 1))
    flat_sampler = result.sampler
    report("check")
    draws, acceptance, states, divergent, diverged_at, check_gradients = _check(
        k_check, flat_sampler, result.state.chains, num_check)
    report("check", 0, num_check, acceptance=float(jnp.mean(acceptance)),
           divergent=int(divergent))
    report.close()
    if retry_chosen and int(divergent):
      # the check's retries could not stand in for some divergent trajectories: the sampler
      # returned retries with finer steps (an exact kernel for any refinement)
      run_config = run_config._replace(retry_divergent=DIVERGENT_RETRY_REFINEMENT)
    if transport is not None:  # the latent chains' draws and states, in x
      draws = jax.jit(jax.vmap(jax.vmap(functools.partial(_from_latent_draw, transport))))(draws)
      states = jax.jit(jax.vmap(functools.partial(noncentering.from_latent_state, transport)))(
          states)
      diverged_at = noncentering.forward(transport, diverged_at)[0]
    gradients = gradient_evaluations(run_config)
    # each training iteration makes one proposal per chain; with aux_weight one more
    per_iteration = gradients * (2 if run_training.aux_weight else 1)
    info = _diagnose(draws, acceptance, max_rhat, min_acceptance, max_acceptance,
                     cost.gradients + per_iteration * num_training
                     + int(round(float(check_gradients))),
                     found, result, num_steps, run_config, max_sd_error,
                     int(divergent), cost.divergent + result.num_divergent + int(divergent),
                     max_divergent_rate, diverged_at)
    if transport is None:
      sampler = l2hmc(logdensity_fn, run_config, result.params, result.masks, result.whitening)
    else:
      sampler = noncentering.transported(
          l2hmc(target.logdensity_fn, run_config, result.params, result.masks,
                result.whitening), transport)
      info = info._replace(noncentering=transport)
    states = L2HMCState(jax.vmap(unravel)(states.position), states.logdensity,
                        jax.vmap(unravel)(states.logdensity_grad))
    return (states, sampler), info

  return Adaptation(run)


def _agree_on_log_density(found: WarmupResult) -> bool:
  r"""Whether a warm-up's chains agree on :math:`\log p` at its end: its split R-hat over the
  final window below ``CONVERGED_RHAT``, the test the burn-in ends on. Chains in separate
  modes of equal density (a mixture's) agree on it where their coordinates do not, and no
  metric joins them; chains that have not all reached the typical set disagree on it."""
  return bool(found.rhat[-1] < CONVERGED_RHAT)


def _retry_diagonal(rng_key, target: Target, config: L2HMCConfig, training: TrainingConfig,
                    optimizer, positions, found: WarmupResult, choose_num_steps: bool):
  """The dense warm-up's fallback (module docstring) where its chains, ``found``, do not
  agree: a warm-up with the diagonal metric from the same starts ``positions``.
  ``(chosen, cost)``, ``chosen`` its ``(state, found, config, training)`` (``training``
  with ``metric="diagonal"``, for the screens and the training after it) where its chains
  agree better (a smaller largest split R-hat of the final window), else ``None``;
  ``cost`` what it cost (a :class:`_Cost`)."""
  training = training._replace(metric="diagonal")
  state, diagonal, diagonal_config = _initial_state(rng_key, target, config, training,
                                                    optimizer, positions, choose_num_steps)
  cost = _warmup_cost(diagonal, config.dim)
  if not float(jnp.max(diagonal.rhat)) < float(jnp.max(found.rhat)):
    return None, cost
  return (state, diagonal, diagonal_config, training), cost


def _screen_local_step_sizes(rng_key, target: Target, config: L2HMCConfig,
                             training: TrainingConfig, optimizer, positions,
                             choose_num_steps: bool):
  """The screen for local step sizes (module docstring) from the warm-up's ``positions``:
  ``(chosen, cost)``, ``chosen`` the second warm-up's ``(state, found, config,
  training)`` where the scales vary and its fit keeps them (else ``None``), ``cost`` what
  the screen and that warm-up cost (a :class:`_Cost`)."""
  curvatures = jax.jit(jax.vmap(
      lambda x: local_step_sizes.diagonal_curvature(target.logdensity_fn, x)))(positions)
  cost = _Cost(config.dim)  # one Hessian diagonal per chain
  if not bool(local_step_sizes.scales_vary(curvatures)):
    return None, cost
  local_config = config._replace(local_step_sizes=True, scale_move=LOCAL_SCALE_MOVE)
  local_training = training._replace(local_fit="saturating",
                                     warmup_iterations=_screen_warmup(training))
  state, found, local_config = _initial_state(rng_key, target, local_config, local_training,
                                              optimizer, positions, choose_num_steps)
  cost += _warmup_cost(found, config.dim)
  if not bool(jnp.any(state.params.local.exponent != 0)):  # keep_if_varying switched it off
    return None, cost
  return (state, found, local_config, local_training), cost


def _screen_noncentering(rng_key, target: Target, config: L2HMCConfig,
                         sampler_config: L2HMCConfig, training: TrainingConfig, optimizer,
                         state, found: WarmupResult, choose_num_steps: bool,
                         replaced: tuple[WarmupResult, ...] = ()):
  """The screen for a non-centering (module docstring) from the warm-up's ``state`` and
  result ``found`` (``sampler_config``: the sampler it chose): ``(chosen, cost,
  local_gaussians)``, ``chosen`` the second warm-up's ``(state, found, config, latent
  target, transport)`` where the log-scale slopes of ``found`` or of a warm-up it
  ``replaced`` find driven coordinates (:func:`_shows_drivers`) and the local Gaussians at
  the screen's draws do too (:func:`metaoptax.l2hmc.noncentering.structure`), else
  ``None``; ``cost`` what the draws for the fit and that warm-up cost (a :class:`_Cost`);
  ``local_gaussians`` the log-scale slopes the local Gaussians gave, the whitened positions
  they were read at and their log local scales, ``(slopes (dim, dim), positions (n, dim),
  log scales (n, dim))``, for the screen for local step sizes (:func:`_local_model_varies`),
  ``None`` where none were read."""
  if not _shows_drivers((found,) + tuple(replaced)):
    return None, _Cost(), None
  k_draws, k_warmup = jax.random.split(rng_key)
  sampler = l2hmc(target.logdensity_fn, sampler_config, state.params, state.masks,
                  state.whitening)
  draws, _ = _sample_chains(k_draws, sampler, state.chains, NONCENTERING_DRAWS)
  chains = draws[-1]
  # the local Gaussian at every chain's position at NONCENTERING_CURVATURES of the draws
  at = draws[::NONCENTERING_DRAWS // NONCENTERING_CURVATURES].reshape(-1, config.dim)
  gradients, curvatures = jax.jit(jax.vmap(functools.partial(
      noncentering.local_gaussian, target.logdensity_fn)))(at)
  cost = _Cost(NONCENTERING_DRAWS * gradient_evaluations(sampler_config)
               + NONCENTERING_CURVATURES * config.dim, NONCENTERING_DRAWS)
  location, scale = found.whitening.location, found.whitening.scale
  slopes, centre_slopes = jax.jit(noncentering.local_slopes)(at, gradients, curvatures,
                                                             location, scale)
  # the log local scales as the local warm-up's final window reads them (whitened, floored)
  local_gaussians = (slopes, (at - location) / scale,
                     -0.5 * jnp.log(jnp.maximum(curvatures * scale**2, CURVATURE_FLOOR)))
  driven, edges = noncentering.structure(slopes, centre_slopes)
  if not bool(jnp.any(driven)):
    return None, cost, local_gaussians
  transport = _fit_noncentering(draws.reshape(-1, config.dim), location, scale, driven, edges,
                                at, gradients, curvatures).transport
  latent = Target(f"{target.name}-latent", config.dim,
                  noncentering.latent_logdensity(target.logdensity_fn, transport))
  starts = jax.jit(jax.vmap(functools.partial(noncentering.inverse, transport)))(chains)
  latent_state, latent_found, latent_config = _initial_state(
      k_warmup, latent, config, training, optimizer, starts, choose_num_steps)
  cost += _warmup_cost(latent_found, config.dim)
  if not _latent_is_better(found, sampler_config, latent_found, latent_config):
    return None, cost, local_gaussians
  return (latent_state, latent_found, latent_config, latent, transport), cost, local_gaussians


def _local_model_varies(local_gaussians) -> bool:
  """Whether the screen for local step sizes runs after the screen for a non-centering
  read the local Gaussians ``local_gaussians`` (``(slopes, whitened positions, log local
  scales)`` of :func:`_screen_noncentering`; ``None``: not read, the screen runs): the
  slopes of the local log-scales on the position that they measured are those that the
  local warm-up's fit follows, and where the local model fitted to them would not vary its
  step sizes enough for :func:`metaoptax.l2hmc.local_step_sizes.keep_if_varying` to keep it
  (:func:`metaoptax.l2hmc.local_step_sizes.fit_varies`), the local warm-up, whose final
  window reads a Hessian diagonal at every transition of its second half, would be spent
  for a fit switched off."""
  if local_gaussians is None:
    return True
  return bool(local_step_sizes.fit_varies(*local_gaussians))


def _shows_drivers(warmups) -> bool:
  r"""The non-centering screen's trigger, at no extra cost: whether the log-scale slopes of
  any of ``warmups`` find a driver (:func:`metaoptax.l2hmc.noncentering.structure`).
  ``warmups``: the warm-up the run kept, and the dense one where the diagonal fallback
  replaced it. A coordinate that sets others' scales belongs to the target, not to the
  metric, and both warm-ups measured it from chains that disagreed on :math:`\log p` at the
  dense one's end (the fallback's trigger), whose final windows give noisy slopes (a
  centered hierarchy's chains in and out of its neck); a driver either finds has the local
  Gaussians read, and the screen's own tests decide."""
  return any(found.log_scale_slopes is not None
             and bool(jnp.any(noncentering.structure(found.log_scale_slopes)[0]))
             for found in warmups)


def _noncentering_first(found: WarmupResult) -> bool:
  r"""Whether ``run`` screens for a non-centering before the dense warm-up's diagonal
  fallback (``found``: the dense warm-up, whose chains disagree on :math:`\log p`): where its
  log-scale slopes find a driver (:func:`_shows_drivers`) and its chains are not in separate
  modes (the largest split R-hat of its final window below ``MODES_RHAT``, the reflection's
  screen's trigger). Chains apart in a centered hierarchy's neck and mouth disagree under
  either metric, and the fallback would spend its warm-up (and its lengthened burn-in,
  :func:`metaoptax.l2hmc.adaptation.lengthen_burn_in`) on the geometry that the
  non-centering replaces; where the non-centering is chosen, the fallback does not run."""
  return float(jnp.max(found.rhat)) < MODES_RHAT and _shows_drivers((found,))


def _latent_is_better(found: WarmupResult, config: L2HMCConfig, latent_found: WarmupResult,
                      latent_config: L2HMCConfig) -> bool:
  """The non-centering's test on the two warm-ups' own measurements: the latent one's chains
  agree (the largest split R-hat of its final window below ``LATENT_RHAT``, the warm-up's own
  test of chains that found the typical set), and its
  trajectory needs fewer leapfrog steps (a larger step size in whitened units), or as many
  with chains that agree better."""
  rhat, latent_rhat = float(jnp.max(found.rhat)), float(jnp.max(latent_found.rhat))
  if not latent_rhat < LATENT_RHAT:
    return False
  if latent_config.num_steps == config.num_steps:
    return latent_rhat < rhat
  return latent_config.num_steps < config.num_steps


_fit_noncentering = jax.jit(noncentering.fit)


_sample_chains = jax.jit(sample_chains, static_argnums=(1, 3))


def _from_latent_draw(transport, draw):
  """A latent draw ``(u, latent log p)`` as ``(x, log p)``."""
  x, log_det = noncentering.forward(transport, draw[:-1])
  return jnp.concatenate([x, (draw[-1] - log_det)[None]])


def _screen_reflection(rng_key, target: Target, config: L2HMCConfig,
                       training: TrainingConfig, optimizer, found: WarmupResult,
                       choose_num_steps: bool):
  """The screen for the reflection (module docstring) from the warm-up's result ``found``:
  ``(chosen, cost)``, ``chosen`` the second warm-up's ``(state, found, config)`` where
  the chains sit in separate modes that the reflection maps onto each other (else
  ``None``), ``cost`` what the screen and that warm-up cost (a :class:`_Cost`)."""
  cost = _Cost(1)  # log p at each chain's reflected point
  if not float(jnp.max(found.rhat)) >= MODES_RHAT:
    return None, _Cost()
  if not float(reflection_acceptance(target.logdensity_fn, found.positions)) >= (
      REFLECTION_ACCEPTANCE):
    return None, cost
  reflect_config = config._replace(reflection=True)
  training = training._replace(warmup_iterations=_screen_warmup(training))
  state, found, reflect_config = _initial_state(rng_key, target, reflect_config, training,
                                                optimizer, found.positions, choose_num_steps)
  cost += _warmup_cost(found, config.dim)
  return (state, found, reflect_config), cost


@functools.partial(jax.jit, static_argnums=0)
def reflection_acceptance(logdensity_fn: Callable, positions: jax.Array) -> jax.Array:
  r"""The mean over the chains ``positions`` (chains, dim) of the Metropolis acceptance
  probability of the reflection :math:`x \to 2\mu - x` through their midpoint :math:`\mu`
  (``metaoptax.l2hmc.warmup(location="midpoint")``, from one position per chain)."""
  center = midpoint(positions, jnp.mean(positions, 0))
  before = jax.vmap(logdensity_fn)(positions)
  after = jax.vmap(logdensity_fn)(2.0 * center - positions)
  return jnp.mean(acceptance_probability(-before, -after, 0.0))


def _screen_warmup(training: TrainingConfig) -> int:
  """A screen's second warm-up's transitions: ``SCREEN_WARMUP_SHARE`` of the first's, at
  least the warm-up's least (16)."""
  return max(int(SCREEN_WARMUP_SHARE * training.warmup_iterations), 16)


class _Cost(NamedTuple):
  """What a phase of ``run`` cost: ``+`` adds two phases' costs."""

  gradients: int = 0  # per chain
  transitions: int = 0  # per chain
  divergent: int = 0  # proposals that diverged, over the chains

  def __add__(self, other: "_Cost") -> "_Cost":
    return _Cost(*(a + b for a, b in zip(self, other)))


def _warmup_cost(found: WarmupResult, dim: int) -> _Cost:
  """A warm-up's cost: per chain, its transitions and their gradients (their leapfrog steps,
  and its Hessians of ``dim`` gradient-sized products each), and its divergent proposals."""
  return _Cost(int(found.num_leapfrog_steps) + int(found.num_hessian_evaluations) * dim,
               int(found.num_transitions), int(found.num_divergent))


def _check(rng_key, sampler: SamplingAlgorithm, states: L2HMCState, num_check: int):
  """``num_check`` transitions of every chain: ``(draws with log p (num_check, chains,
  dim + 1), acceptance (num_check, chains), last states, divergent proposals (an int),
  the last of them (dim,), NaN where none, gradients per chain (a float: the retries of
  divergent trajectories included))``."""

  @jax.jit
  def run(rng_key, states):
    def one(carry, key):
      states, divergent, diverged_at, gradients = carry
      keys = jax.random.split(key, states.position.shape[0])
      states, info = jax.vmap(sampler.step)(keys, states)
      drawn = jnp.concatenate([states.position, states.logdensity[:, None]], axis=1)
      diverged_at = jnp.where(jnp.any(info.is_divergent),
                              info.proposal[jnp.argmax(info.is_divergent)], diverged_at)
      divergent = divergent + jnp.sum(info.is_divergent, dtype=jnp.int32)
      gradients = gradients + jnp.mean(info.num_gradient_evaluations.astype(jnp.float32))
      return (states, divergent, diverged_at, gradients), (drawn, info.acceptance_rate)

    start = (states, jnp.zeros((), jnp.int32), jnp.full_like(states.position[0], jnp.nan),
             jnp.zeros((), jnp.float32))
    (states, divergent, diverged_at, gradients), (draws, acceptance) = jax.lax.scan(
        one, start, jax.random.split(rng_key, num_check))
    return draws, acceptance, states, divergent, diverged_at, gradients

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
              result, num_steps, config, max_sd_error, divergent=0, num_divergent=0,
              max_divergent_rate=MAX_DIVERGENT_RATE, diverged_at=None) -> AdaptationInfo:
  """The checks of :func:`adapt` and their warnings (``divergent``: the check's divergent
  proposals, ``diverged_at`` the flat position of one of them; ``num_divergent``: the
  whole adaptation's)."""
  # counted on the host in float64: float32's mean of millions of ones is 1 - 6e-8
  finite = float(np.mean(np.isfinite(np.asarray(draws)), dtype=np.float64))
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
  proposals = draws.shape[0] * draws.shape[1]
  divergent_rate = divergent / proposals
  if not divergent_rate <= max_divergent_rate:
    example = ""
    if diverged_at is not None:
      example = f" (one of them at the flat position {_brief(diverged_at)})"
    messages.append(
        f"{divergent} of the check's {proposals} proposals ({divergent_rate:.2%} > "
        f"{max_divergent_rate:.2%}) diverged: the log density or its gradient is not finite "
        f"there (NaN or infinite){example}, so the chains were kept out of a region they "
        "should perhaps visit, and their draws may miss part of the posterior. Check the log "
        "density where it fails; where -inf marks the edge of the support on purpose, sample "
        "unconstrained coordinates instead (a log or logit transform).")
  for message in messages:
    warnings.warn(message, ConvergenceWarning, stacklevel=3)
  return AdaptationInfo(not messages, largest, rhat, mean_acceptance, finite, sd_error,
                        divergent_rate, int(num_divergent), tuple(messages),
                        int(gradients), found, result, config)


def _brief(vector) -> str:
  """A vector's numbers, a few at most (``...`` between its first and last three)."""
  return np.array2string(np.asarray(vector), precision=4, threshold=6, edgeitems=3,
                         separator=", ")


def _name(fn: Callable) -> str:
  """A function's name for an error message: its module and qualified name where it has
  them, else its ``repr``."""
  name = getattr(fn, "__qualname__", None)
  if name is None:
    return repr(fn)
  module = getattr(fn, "__module__", None)
  return name if module in (None, "__main__") else f"{module}.{name}"


def _check_starts(logdensity_fn: Callable, flat_logdensity: Callable, flat: jax.Array,
                  first) -> None:
  """Raises ``ValueError`` unless ``logdensity_fn`` gives a scalar at one chain's position
  ``first``, and a finite log density and gradient at every chain's start (``flat``:
  ``(chains, dim)``; one vmapped, jitted call), naming the function and the failing chains'
  indices and flat positions (the first ``MAX_LISTED``)."""
  shape = jax.eval_shape(logdensity_fn, first).shape
  if shape != ():
    raise ValueError(
        f"the log density {_name(logdensity_fn)} must return a scalar for one chain's "
        f"position, got shape {shape}: do the leaves of positions have a leading axis of "
        "chains, and does the function sum over the coordinates?")
  values, grads = jax.jit(jax.vmap(jax.value_and_grad(flat_logdensity)))(flat)
  value_finite = np.isfinite(np.asarray(values))
  finite = value_finite & np.all(np.isfinite(np.asarray(grads)), axis=1)
  if finite.all():
    return
  failing = np.flatnonzero(~finite)
  listed = "; ".join(
      f"chain {i} at {_brief(flat[i])}: log p = {float(values[i]):.4g}"
      + (", its gradient not finite" if value_finite[i] else "") for i in failing[:MAX_LISTED])
  more = f" (and {failing.size - MAX_LISTED} more)" if failing.size > MAX_LISTED else ""
  raise ValueError(
      f"the log density {_name(logdensity_fn)} or its gradient is not finite at the starts of "
      f"{failing.size} of the {flat.shape[0]} chains (flat positions, in "
      f"jax.flatten_util.ravel_pytree's order): {listed}{more}. Start every chain where the "
      "log density and its gradient are finite (inside the support), or check the function "
      "there.")


class _Report:
  """``run``'s progress: a report at the start and the end of each phase (and the training's
  own), from the host between the jitted phases, to one labelled bar (``"bar"``), a callable
  taking a :class:`metaoptax.Progress`, or nowhere (``None``). Its iterations are the
  transitions of every chain: ``num_steps``, and more where a warm-up ran longer or a screen
  warmed up again."""

  LABEL = "L2HMC adapt"

  def __init__(self, progress, total: int):
    self._total, self._done = total, 0
    self._since, self._time = 0, time.perf_counter()
    self._show = None
    if progress is not None and is_main_process():
      self._show = Bar(f"{self.LABEL}: warm-up", 0, total) if progress == "bar" else progress

  def __call__(self, phase: str, more: int = 0, done: int = 0, loss: float = float("nan"),
               skipped: int = 0, **metrics) -> None:
    """Reports ``phase`` after ``done`` more transitions, ``more`` of them beyond the
    nominal ``num_steps``."""
    self._total, self._done = self._total + more, self._done + done
    if self._show is None:
      return
    now = time.perf_counter()
    rate = (self._done - self._since) / max(now - self._time, 1e-12)
    self._since, self._time = self._done, now
    self._show(Progress(f"{self.LABEL}: {phase}", self._done, self._total, loss, skipped,
                        rate, metrics))

  def training(self):
    """The training's ``progress``: its reports as this run's (``None`` where silent)."""
    if self._show is None:
      return None
    start = self._done

    def report(training: Progress) -> None:
      self("training", 0, start + training.iteration - self._done, training.loss,
           training.skipped_updates, **training.metrics)

    return report

  def close(self) -> None:
    if isinstance(self._show, Bar):
      self._show.close()
