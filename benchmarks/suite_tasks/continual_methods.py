"""The learners compared on Sutton's (1992) tracking task and how one run is made.

Every method sees the same stream per seed:

* LMS with a fixed step size (a grid), and LMS with per-input step sizes, the
  irrelevant ones 0 and the relevant ones on a grid (Sutton's Figure 5).
* ``metaoptax.idbd`` (Sutton's IDBD, theta grid, alpha_0 = 0.05 as in the paper).
* ``metaoptax.metaoptimize`` with an SGD base (``optax.identity()``), weight-wise
  step sizes (``blocks="per_param"``), meta SGD / Adam / Lion, Hessian-free and
  the exact ``l_approx`` / ``2x2`` variants; ``metaoptax.xu_idbd``;
  ``metaoptax.hypergradient_descent`` (scalar and weight-wise).

A method's grid runs in one compiled program (``vmap`` over the grid and the
seeds, ``lax.scan`` over the examples).
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

import metaoptax
from suite_tasks.continual_stream import NUM_INPUTS, NUM_RELEVANT, TrackingStream
from suite_tasks.continual_stream import per_input_step_sizes

BIN_SIZE = 1000  # examples per bin of the learning curves
INIT_STEP_SIZE = 0.05  # Sutton's initial alpha for IDBD; used for every adaptive method


class RunResult(NamedTuple):
  """Binned record of one run: mean squared error and step sizes at the end of each bin."""

  squared_error: jax.Array  # (num_bins,)
  step_sizes: jax.Array  # (num_bins, NUM_INPUTS), or whatever ``step_sizes_of`` records


def run_learner(opt: optax.GradientTransformation, step_sizes_of: Callable[[Any], jax.Array],
                stream: TrackingStream, *, bin_size: int = BIN_SIZE) -> RunResult:
  """Online linear regression on ``stream`` with ``opt``, one example per step.

  Each step passes ``hessian_diagonal = x**2`` (for IDBD) and ``obj_fn`` (for the
  exact variants) as extra arguments; transformations ignore what they do not use.
  """
  opt = optax.with_extra_args_support(opt)
  num_bins = stream.inputs.shape[0] // bin_size
  inputs = stream.inputs[:num_bins * bin_size].reshape(num_bins, bin_size, -1)
  targets = stream.targets[:num_bins * bin_size].reshape(num_bins, bin_size)
  params = jnp.zeros(stream.inputs.shape[-1], stream.inputs.dtype)

  def example(carry, xy):
    params, state = carry
    x, y = xy
    error = params @ x - y
    obj_fn = lambda w: 0.5 * (w @ x - y) ** 2
    updates, state = opt.update(error * x, state, params, hessian_diagonal=x * x,
                                obj_fn=obj_fn)
    return (optax.apply_updates(params, updates), state), error**2

  def one_bin(carry, xy):
    carry, squared_errors = jax.lax.scan(example, carry, xy)
    return carry, (jnp.mean(squared_errors), step_sizes_of(carry[1]))

  _, (squared_error, step_sizes) = jax.lax.scan(one_bin, (params, opt.init(params)),
                                                (inputs, targets))
  return RunResult(squared_error, step_sizes)


class Method(NamedTuple):
  """A learner family with one hyperparameter swept over ``grid`` (vmapped)."""

  name: str
  make: Callable[[jax.Array], optax.GradientTransformation]  # hyperparameter -> optimizer
  step_sizes_of: Callable[[Any, jax.Array], jax.Array]  # (state, hyper) -> (NUM_INPUTS,)
  hyper_name: str
  grid: tuple[float, ...]
  diagnostic: bool = False  # a variant run to explain a miss, not one of the compared methods


def _metaoptimize_step_sizes(state, hyper):
  del hyper
  return jnp.broadcast_to(metaoptax.step_sizes(state), (NUM_INPUTS,))  # scalar blocks: (1,)


def _idbd_step_sizes(state, hyper):
  del hyper
  return jnp.exp(state.log_step_sizes)


def _lms_step_sizes(state, alpha):
  del state
  return jnp.full((NUM_INPUTS,), alpha)


def _per_input_step_sizes(state, alpha_relevant):
  del state
  return per_input_step_sizes(alpha_relevant)


def _meta(kind: str):
  """The meta optimizer on beta = log alpha; Lion without weight decay (it would pull beta to 0)."""
  if kind == "SGD":
    return optax.sgd
  if kind == "Adam":
    return lambda lr: optax.adam(lr, eps_root=1e-30)
  if kind == "Lion":
    return lambda lr: optax.lion(lr, b1=0.9, b2=0.99, weight_decay=0.0)
  raise ValueError(kind)


META_GRIDS = {
    "SGD": (1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2),
    "Adam": (1e-4, 3e-4, 1e-3, 3e-3, 1e-2),
    "Lion": (1e-5, 3e-5, 1e-4, 3e-4, 1e-3),
}
DEFAULT_META_STEP_SIZE = 1e-3  # the paper's (and metaoptax.presets') eta
LMS_GRID = (0.005, 0.01, 0.02, 0.03, 0.035, 0.04, 0.05, 0.06, 0.08)
PER_INPUT_GRID = (0.05, 0.07, 0.09, 0.11, 0.13, 0.14, 0.15, 0.17, 0.19, 0.21, 0.25)
IDBD_GRID = (1e-4, 3e-4, 1e-3, 2e-3, 5e-3, 1e-2, 2e-2)
HD_GRID = (1e-6, 1e-5, 1e-4, 1e-3)
SMALL_INIT_STEP_SIZE = 3.4e-4  # 100x below the best fixed LMS step size (the paper's convention)


def _metaoptimize(approximation, kind, *, gamma=1.0, init_step_size=INIT_STEP_SIZE,
                  diagnostic=False, suffix="", **kwargs):
  """``kwargs``: more arguments of ``metaoptimize`` (``sensitivity_radius``)."""
  name = f"MetaOptimize {approximation} (SGD, {kind})" + suffix
  return Method(
      name,
      lambda eta: metaoptax.metaoptimize(
          optax.identity(), _meta(kind)(eta), init_step_size=init_step_size,
          blocks="per_param", approximation=approximation, gamma=gamma, **kwargs),
      _metaoptimize_step_sizes, "eta", META_GRIDS[kind], diagnostic)


def _idbd(init_step_size=INIT_STEP_SIZE, diagnostic=False, suffix=""):
  return Method(
      "IDBD (metaoptax.idbd)" + suffix,
      lambda t: metaoptax.idbd(meta_step_size=t, init_step_size=init_step_size),
      _idbd_step_sizes, "theta", IDBD_GRID, diagnostic)


IDBD_NAME = "IDBD (metaoptax.idbd)"
LMS_NAME = "LMS"
PER_INPUT_NAME = "LMS per-input (irrelevant 0)"


def methods() -> list[Method]:
  """Every learner of the benchmark, with its hyperparameter grid.

  The compared methods use the paper defaults (gamma = 1, alpha_0 = 0.05); the
  diagnostic variants change one setting to test an explanation of a miss.
  """
  out = [
      Method(LMS_NAME, optax.sgd, _lms_step_sizes, "alpha", LMS_GRID),
      Method(PER_INPUT_NAME,
             lambda a: optax.scale(-per_input_step_sizes(a)), _per_input_step_sizes,
             "alpha_relevant", PER_INPUT_GRID),
      _idbd(),
  ]
  out += [_metaoptimize(approximation, kind) for approximation in ("hessian_free", "l_approx", "2x2")
          for kind in ("SGD", "Adam", "Lion")]
  out += [
      Method("Xu et al. IDBD (metaoptax.xu_idbd)",
             lambda t: metaoptax.xu_idbd(meta_step_size=t, init_step_size=INIT_STEP_SIZE),
             _metaoptimize_step_sizes, "theta", META_GRIDS["SGD"]),
      Method("hypergradient descent, scalar",
             lambda eta: metaoptax.hypergradient_descent(
                 meta_step_size=eta, init_step_size=INIT_STEP_SIZE),
             _metaoptimize_step_sizes, "eta", HD_GRID),
      Method("hypergradient descent, per-input",
             lambda eta: metaoptax.hypergradient_descent(
                 meta_step_size=eta, init_step_size=INIT_STEP_SIZE, blocks="per_param"),
             _metaoptimize_step_sizes, "eta", HD_GRID),
  ]
  # Diagnostics. Hessian-free with gamma = 1 keeps the whole history of weight
  # changes in its trace (h_t = w_t - w_0 for an SGD base); gamma < 1 stands in for
  # the dropped Hessian factor 1 - alpha x^2 (~0.87 on the relevant inputs).
  out += [_metaoptimize("hessian_free", kind, gamma=gamma, diagnostic=True,
                        suffix=f", gamma={gamma:g}")
          for gamma in (0.9, 0.99) for kind in ("SGD", "Adam")]
  # 2x2 with gamma = 1: the exact sensitivity of beta_t to beta_0 decays to 0 (and
  # below); gamma < 1 re-injects (1 - gamma) I every step.
  out += [_metaoptimize("2x2", kind, gamma=0.999, diagnostic=True, suffix=", gamma=0.999")
          for kind in ("SGD", "Adam")]
  # Robustness to the initial step size: 100x below the best fixed LMS rate.
  small = f", alpha_0={SMALL_INIT_STEP_SIZE:g}"
  out += [
      _idbd(SMALL_INIT_STEP_SIZE, diagnostic=True, suffix=small),
      _metaoptimize("l_approx", "SGD", init_step_size=SMALL_INIT_STEP_SIZE, diagnostic=True,
                    suffix=small),
      _metaoptimize("l_approx", "Adam", init_step_size=SMALL_INIT_STEP_SIZE, diagnostic=True,
                    suffix=small),
      _metaoptimize("l_approx", "Lion", init_step_size=SMALL_INIT_STEP_SIZE, diagnostic=True,
                    suffix=small),
      _metaoptimize("hessian_free", "Adam", gamma=0.9, init_step_size=SMALL_INIT_STEP_SIZE,
                    diagnostic=True, suffix=", gamma=0.9" + small),
  ]
  return out


def run_method(method: Method, streams: TrackingStream, *, bin_size: int = BIN_SIZE) -> RunResult:
  """``method`` at every grid value on every seed's stream: arrays ``(seeds, grid, bins, ...)``."""

  def one(stream, hyper):
    return run_learner(method.make(hyper), lambda state: method.step_sizes_of(state, hyper),
                       stream, bin_size=bin_size)

  over_grid = jax.vmap(one, in_axes=(None, 0))
  result = jax.jit(jax.vmap(over_grid, in_axes=(0, None)))(
      streams, jnp.asarray(method.grid, jnp.float32))
  return jax.tree.map(np.asarray, result)


SENSITIVITY_RUNS = (  # (label, meta kind, eta, gamma) of the 2x2 sensitivity diagnostic
    ("2x2 (SGD, SGD), theta=0.01, gamma=1", "SGD", 1e-2, 1.0),
    ("2x2 (SGD, Adam), eta=1e-3, gamma=1", "Adam", 1e-3, 1.0),
    ("2x2 (SGD, Adam), eta=1e-3, gamma=0.999", "Adam", 1e-3, 0.999),
)


def sensitivity_diagnostic(stream: TrackingStream, *, bin_size: int = BIN_SIZE) -> dict:
  r"""The 2x2 variant's :math:`Y^\beta_t = \partial\beta_t/\partial\beta_0` (its diagonal) over a run.

  Returns, per run of ``SENSITIVITY_RUNS``, arrays ``(bins,)``: the diagonal of
  :math:`Y^\beta` and the step size, each averaged over the relevant inputs, and the MSE.
  """
  out = {}
  for label, kind, eta, gamma in SENSITIVITY_RUNS:
    opt = metaoptax.metaoptimize(optax.identity(), _meta(kind)(eta), init_step_size=INIT_STEP_SIZE,
                                 blocks="per_param", approximation="2x2", gamma=gamma)

    def record(state):
      y_beta = jnp.diagonal(state.trace.meta_params.step_size)
      return jnp.stack([y_beta[:NUM_RELEVANT].mean(),
                        metaoptax.step_sizes(state)[:NUM_RELEVANT].mean()])

    result = jax.jit(lambda s, opt=opt, record=record: run_learner(opt, record, s,
                                                                   bin_size=bin_size))(stream)
    recorded = np.asarray(result.step_sizes)
    out[label] = dict(y_beta=recorded[:, 0], alpha=recorded[:, 1],
                      mse=np.asarray(result.squared_error))
  return out
