r"""The default L2HMC sampler as a numpyro ``MCMCKernel``: :class:`NumPyroL2HMC`.

::

  mcmc = numpyro.infer.MCMC(l2hmc.NumPyroL2HMC(model), num_warmup=1000, num_samples=1000,
                            num_chains=32, chain_method="vectorized")
  mcmc.run(rng_key, *model_args)
  mcmc.print_summary(); mcmc.get_samples(); arviz.from_numpyro(mcmc)

runs :func:`metaoptax.l2hmc.adapt` on the model's potential (the log density is
:math:`-U(z)` on numpyro's unconstrained scale) and samples with the adapted sampler.

``adapt`` adapts all chains together: its warm-up whitens with the chains' covariance and
its check computes the split :math:`\hat R` across them. So the kernel needs every chain at
once, which numpyro gives only with ``chain_method="vectorized"``: ``init`` then receives
one key per chain (``MCMC`` splits its key) and runs the whole adaptation, with
``num_steps=num_warmup`` (at least 100). It runs on the host (``adapt`` reads its checks),
so ``init`` cannot be traced: under ``"parallel"`` or ``"sequential"`` (one chain per
call), or with fewer than 2 chains, it raises a ``ValueError`` that says so.

``MCMC`` then calls :meth:`~NumPyroL2HMC.sample` ``num_warmup + num_samples`` times. The
adaptation is already done, so the first ``num_warmup`` calls leave the state unchanged
(a ``lax.cond`` on the state's iteration counter ``i``) and evaluate no gradient; the
following ones make one transition of every chain each. The gradients a run evaluates, per
chain, are therefore

* the initialization's (``numpyro.infer.util.initialize_model``: one per attempt at a
  valid start, one where the start is valid at once);
* the adaptation's, ``kernel.adaptation_info.num_gradient_evaluations`` (warm-up, screens,
  training and check);
* the draws', ``num_gradient_evaluations`` of each state (0 in the warm-up, then
  :func:`metaoptax.l2hmc.gradient_evaluations` of the adapted configuration; collect it
  with ``mcmc.run(..., extra_fields=("num_gradient_evaluations",))``).

A draw whose proposal diverged (its log density or gradient not finite) is rejected and
marked in the ``diverging`` field, which ``print_summary`` counts; a run's first one warns
(:class:`metaoptax.l2hmc.ConvergenceWarning`), as :func:`metaoptax.l2hmc.sample_chains`
warns. The warning is a host callback inside the step, made only at a run's first draw and
where a chain diverged.

After ``run``, ``kernel.adaptation_info`` is ``adapt``'s
:class:`metaoptax.l2hmc.AdaptationInfo`; where a check failed ``adapt`` has warned
(:class:`metaoptax.l2hmc.ConvergenceWarning`) and ``adaptation_info.converged`` is
``False``.

The adapted sampler's parameters, masks and whitening travel in the state
(:class:`NumPyroL2HMCState`), its configuration as static pytree data, so that
``mcmc.post_warmup_state`` continues with the sampler it was adapted with, and a second
``run`` (a new adaptation) never reuses a transition compiled for the first one's sampler.

This module imports numpyro; :mod:`metaoptax.l2hmc` imports it only on first access of
``l2hmc.NumPyroL2HMC`` (numpyro is an optional dependency).
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
from numpyro.infer.initialization import init_to_uniform
from numpyro.infer.mcmc import MCMCKernel
from numpyro.infer.util import ParamInfo, initialize_model
from numpyro.util import is_prng_key

from metaoptax.l2hmc.default_adaptation import AdaptationInfo, adapt
from metaoptax.l2hmc.dynamics import L2HMCConfig, L2HMCParams
from metaoptax.l2hmc.diagnostics import ConvergenceWarning
from metaoptax.l2hmc.kernel import L2HMCState, l2hmc
from metaoptax.l2hmc.training import TrainingConfig
from metaoptax.l2hmc.whitening import Whitening

__all__ = ("NumPyroL2HMC", "NumPyroL2HMCState")

MIN_WARMUP = 100  # adapt's fewest transitions


@jax.tree_util.register_static
@dataclasses.dataclass(frozen=True)
class _Static:
  """What the transition compiles in: the adapted configuration and ``num_warmup``."""

  config: L2HMCConfig
  num_warmup: int


class _AdaptedSampler(NamedTuple):
  """The adapted sampler: the arrays of :func:`metaoptax.l2hmc.l2hmc` and its static part
  (shared by the chains: no chain axis)."""

  params: L2HMCParams
  masks: jax.Array
  whitening: Whitening | None
  static: _Static


class NumPyroL2HMCState(NamedTuple):
  """The chains of :class:`NumPyroL2HMC` (each leaf but ``sampler``'s with a leading chain
  axis); numpyro's names where ``HMCState`` has the field.

  Attributes:
    i: int32, the transitions ``sample`` was called for, warm-up included.
    z: the unconstrained position (numpyro's sample field).
    potential_energy: :math:`-\\log p(z)`.
    z_grad: the gradient of the potential energy.
    accept_prob: the last transition's acceptance probability (0 in the warm-up).
    mean_accept_prob: the mean over the transitions after the warm-up.
    num_gradient_evaluations: int32, the last call's gradients (0 in the warm-up).
    diverging: bool, the last transition's proposal diverged (its position, log density or
      gradient was not finite: :func:`metaoptax.l2hmc.is_divergent`); ``False`` in the
      warm-up. A default field, as for numpyro's NUTS, so ``print_summary`` counts the
      divergences and ``arviz.from_numpyro`` puts them in ``sample_stats``.
    sampler: the adapted sampler (its parameters and whitening), shared by the chains.
    rng_key: the chain's key.
  """

  i: jax.Array
  z: Any
  potential_energy: jax.Array
  z_grad: Any
  accept_prob: jax.Array
  mean_accept_prob: jax.Array
  num_gradient_evaluations: jax.Array
  diverging: jax.Array
  sampler: _AdaptedSampler
  rng_key: jax.Array


def _negative(tree):
  return jax.tree.map(jnp.negative, tree)


class NumPyroL2HMC(MCMCKernel):
  r"""L2HMC with :func:`metaoptax.l2hmc.adapt`'s default adaptation, as a numpyro kernel.

  Run it with ``numpyro.infer.MCMC(..., num_warmup>=100, num_chains>=2,
  chain_method="vectorized")``: ``init`` adapts all the chains together (module docstring),
  and the ``num_warmup`` calls of :meth:`sample` that follow cost nothing.

  Args:
    model: a numpyro model (its potential, starts and map back to the constrained sites
      come from ``numpyro.infer.util.initialize_model``).
    potential_fn: instead of ``model``, :math:`U(z) = -\log p(z)` of one position; then
      ``mcmc.run(..., init_params=...)`` gives the starts (leaves with a chain axis).
    config: the sampler (``adapt``'s ``config``; ``None``: its default).
    training: the training (``adapt``'s ``training``).
    init_strategy: numpyro's per-site initialization, on the unconstrained scale
      (``init_to_uniform`` as numpyro's ``NUTS``).
    **adapt_options: further keyword arguments of :func:`metaoptax.l2hmc.adapt`
      (``progress``, ``max_rhat``, ``optimizer``, ...), checked here.

  Attributes:
    adaptation_info: after ``init`` (``mcmc.run``), the adaptation's
      :class:`metaoptax.l2hmc.AdaptationInfo` (``None`` before).

  Examples:
    >>> import jax, numpyro, numpyro.distributions as dist
    >>> from numpyro.infer import MCMC
    >>> from metaoptax import l2hmc
    >>> def model():
    ...   numpyro.sample("loc", dist.Normal(1.0, 2.0))
    >>> kernel = l2hmc.NumPyroL2HMC(model, progress=None)
    >>> mcmc = MCMC(kernel, num_warmup=400, num_samples=100, num_chains=8,
    ...             chain_method="vectorized", progress_bar=False)
    >>> mcmc.run(jax.random.key(0))
    >>> mcmc.get_samples()["loc"].shape, kernel.adaptation_info.converged
    ((800,), True)
  """

  sample_field = "z"
  default_fields = ("z", "diverging")  # collected unasked, as by numpyro's NUTS

  def __init__(self, model: Callable | None = None, potential_fn: Callable | None = None, *,
               config: L2HMCConfig | None = None,
               training: TrainingConfig = TrainingConfig(),
               init_strategy: Callable = init_to_uniform, **adapt_options):
    if (model is None) == (potential_fn is None):
      raise ValueError("NumPyroL2HMC needs exactly one of model= and potential_fn=.")
    self._model = model
    self._potential_fn = potential_fn
    self._init_strategy = init_strategy
    # adapt checks its arguments when called: a bad option fails here, not after init
    self._adaptation = lambda logdensity_fn: adapt(logdensity_fn, config, training,
                                                   **adapt_options)
    self._adaptation(lambda position: 0.0)
    self._potential_fn_gen = None  # with a model: (*model_args, **model_kwargs) -> U
    self._postprocess_fn_gen = None
    self._sample_fn = None  # numpyro's MCMC skips init where it is set (post_warmup_state)
    self._warned = False  # this run's divergences warned already (host side)
    self.adaptation_info: AdaptationInfo | None = None

  @property
  def model(self):
    return self._model

  def _potential(self, model_args, model_kwargs) -> Callable:
    if self._potential_fn is not None:
      return self._potential_fn
    return self._potential_fn_gen(*model_args, **(model_kwargs or {}))

  def init(self, rng_key, num_warmup, init_params=None, model_args=(), model_kwargs=None):
    """Adapts every chain (``rng_key``: one key per chain) with ``adapt(...).run(...,
    num_steps=num_warmup)``; returns the chains' :class:`NumPyroL2HMCState`."""
    if is_prng_key(rng_key):
      raise ValueError(
          "NumPyroL2HMC adapts all chains together (its whitening and R-hat checks need "
          "every chain at once), so it runs only with MCMC(..., num_chains=N >= 2, "
          "chain_method='vectorized'); it got one chain per call (chain_method='parallel' "
          "or 'sequential', or num_chains=1).")
    num_chains = jnp.shape(rng_key)[0]  # typed keys (chains,), raw ones (chains, 2)
    if num_chains < 2:
      raise ValueError(f"NumPyroL2HMC needs num_chains >= 2 (got {num_chains}): its "
                       "adaptation checks the chains against each other.")
    if isinstance(num_warmup, bool) or not isinstance(num_warmup, int) or (
        num_warmup < MIN_WARMUP):
      raise ValueError(f"NumPyroL2HMC runs l2hmc.adapt with num_steps=num_warmup, which must "
                       f"be an int >= {MIN_WARMUP}: got MCMC(num_warmup={num_warmup!r}).")
    keys = jax.vmap(lambda key: jax.random.split(key, 3))(rng_key)
    sample_keys, init_keys, adapt_key = keys[:, 0], keys[:, 1], keys[0, 2]
    model_kwargs = {} if model_kwargs is None else model_kwargs
    if self._model is not None:
      info = initialize_model(init_keys, self._model, init_strategy=self._init_strategy,
                              dynamic_args=True, model_args=model_args,
                              model_kwargs=model_kwargs)
      self._potential_fn_gen = info.potential_fn
      self._postprocess_fn_gen = info.postprocess_fn
      if init_params is None:
        init_params = info.param_info.z
    if init_params is None:
      raise ValueError("NumPyroL2HMC(potential_fn=...) needs the chains' starts: "
                       "mcmc.run(..., init_params=...) with a leading axis of chains.")
    if isinstance(init_params, ParamInfo):
      init_params = init_params.z
    potential_fn = self._potential(model_args, model_kwargs)
    (states, sampler), adaptation_info = self._adaptation(
        lambda z: -potential_fn(z)).run(adapt_key, init_params, num_steps=num_warmup)
    self.adaptation_info = adaptation_info
    trained = adaptation_info.training
    adapted = _AdaptedSampler(trained.params, trained.masks, trained.whitening,
                              _Static(adaptation_info.config, num_warmup))
    zeros = jnp.zeros_like(states.logdensity)
    self._sample_fn = self._transition
    return NumPyroL2HMCState(
        i=jnp.zeros(num_chains, jnp.int32), z=states.position,
        potential_energy=-states.logdensity, z_grad=_negative(states.logdensity_grad),
        accept_prob=zeros, mean_accept_prob=zeros,
        num_gradient_evaluations=jnp.zeros(num_chains, jnp.int32),
        diverging=jnp.zeros(num_chains, bool), sampler=adapted,
        rng_key=sample_keys)

  def _transition(self, state: NumPyroL2HMCState, model_args, model_kwargs):
    static = state.sampler.static
    potential_fn = self._potential(model_args, model_kwargs)
    sampler = l2hmc(lambda z: -potential_fn(z), static.config, state.sampler.params,
                    state.sampler.masks, state.sampler.whitening)

    def move(state):
      keys = jax.vmap(jax.random.split)(state.rng_key)
      chains = L2HMCState(state.z, -state.potential_energy, _negative(state.z_grad))
      chains, info = jax.vmap(sampler.step)(keys[:, 1], chains)
      accept_prob = info.acceptance_rate.astype(state.accept_prob.dtype)
      count = (state.i - static.num_warmup + 1).astype(state.accept_prob.dtype)
      mean = state.mean_accept_prob + (accept_prob - state.mean_accept_prob) / count
      return state._replace(
          i=state.i + 1, z=chains.position, potential_energy=-chains.logdensity,
          z_grad=_negative(chains.logdensity_grad), accept_prob=accept_prob,
          mean_accept_prob=mean,
          num_gradient_evaluations=info.num_gradient_evaluations.astype(jnp.int32),
          diverging=info.is_divergent, rng_key=keys[:, 0])

    def warn_if_divergent(state):  # a host call at a run's first draw and where one diverged
      i = state.i[0] - 1
      jax.lax.cond(jnp.any(state.diverging) | (i == static.num_warmup),
                   lambda: jax.debug.callback(self._warn_divergent, i,
                                              jnp.sum(state.diverging), static.num_warmup),
                   lambda: None)
      return state

    def wait(state):  # the warm-up's calls: the adaptation ran in init
      return state._replace(i=state.i + 1)

    return jax.lax.cond(state.i[0] >= static.num_warmup,
                        lambda state: warn_if_divergent(move(state)), wait, state)

  def _warn_divergent(self, i, num_divergent, num_warmup):
    """Warns of a run's first divergent transition, as :func:`metaoptax.l2hmc.sample_chains`
    warns (a run starts at transition ``num_warmup``; one continued from
    ``mcmc.last_state`` is the same run); ``print_summary`` counts them all."""
    if int(i) == int(num_warmup):
      self._warned = False
    if self._warned or not int(num_divergent):
      return
    self._warned = True
    warnings.warn(
        f"NumPyroL2HMC: at draw {int(i) - int(num_warmup)}, {int(num_divergent)} chain(s)' "
        "proposals diverged (log p or its gradient not finite; rejected): where the sampler "
        "could not step, the draws may under-sample the posterior. mcmc.print_summary() "
        "counts the run's divergences; mcmc.get_extra_fields()['diverging'] marks them.",
        ConvergenceWarning, stacklevel=2)

  def sample(self, state: NumPyroL2HMCState, model_args, model_kwargs) -> NumPyroL2HMCState:
    """One transition of every chain; during the first ``num_warmup`` calls, none."""
    if self._sample_fn is None:
      raise RuntimeError("NumPyroL2HMC.init must run (mcmc.run does) before sample.")
    return self._sample_fn(state, model_args, model_kwargs)

  def postprocess_fn(self, model_args, model_kwargs):
    """The map from an unconstrained position to the model's sites (identity without a
    model); numpyro vmaps it over the chains."""
    if self._postprocess_fn_gen is None:
      return lambda z: z
    return self._postprocess_fn_gen(*model_args, **(model_kwargs or {}))

  def get_diagnostics_str(self, state: NumPyroL2HMCState) -> str:
    return (f"{int(jnp.max(state.num_gradient_evaluations))} gradients per transition, "
            f"acc. prob={float(jnp.mean(state.mean_accept_prob)):.2f}")
