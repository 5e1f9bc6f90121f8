"""Learning-rate-free: ``metaoptax.adamw()`` untuned against the optimizers a user would tune.

    python benchmarks/lr_free.py                          # every task, 3 seeds
    python benchmarks/lr_free.py --tasks digits cnn1d     # some of them
    python benchmarks/lr_free.py --quick                  # a smoke run (not results): the
                                                          # library's designs, 2 rates a grid,
                                                          # 1 seed
    # on an accelerator with a time limit: a rerun trains only what the cache lacks
    python benchmarks/lr_free.py --tasks transformer-stdlib --with-baselines \
        --designs "climb x2, gamma=1 + average" --cache out/cache --no-warmup
    # one baseline's missing cells, then one report of every run file
    python benchmarks/lr_free.py --tasks transformer-stdlib --cosine-only 0.5 1.0 --out out/cos
    python benchmarks/lr_free.py --combine $(cat benchmarks/results/lr_free/runs.txt) \
        out/cos/lr_free.json --out out/report

The protocol, on each task at its budget ``T`` (``TASKS``), 3 seeds, scored at 10,
25, 50 and 100 % of ``T`` on the held-out metric (test accuracy, or test
bits/char), with the train loss beside it. Every choice among settings (a rate of a
grid, a design of ours) is made on the *validation* split, never on the test split:

* AdamW at every rate of ``GRID``; "best constant" is, at each checkpoint, the rate
  with the best mean validation metric there.
* AdamW with warm-up (5 %) + cosine to 0, tuned *for each budget*: for each
  fraction ``f`` a separate run of length ``f T`` at every peak of ``GRID``; the
  peak with the best validation metric at its end.
* Schedule-free AdamW (``optax.contrib.schedule_free_adamw``, warm-up 5 % of
  ``T``, evaluated at its averaged weights) at every rate of ``SF_GRID``, the best
  on validation at each checkpoint.
* prodigy and D-adaptation AdamW (``optax.contrib``) at their default rate 1.
* Ours, untuned (``DESIGNS``): ``metaoptax.adamw()`` and the variants of the
  ablation. The design whose validation metric is best over the tasks is the
  default; its test figures are reported.

Every method has the task's decoupled weight decay ``WEIGHT_DECAY``. The tasks
(``benchmarks/suite_tasks/``): digits MLP, MNIST-1D MLP, the 6-layer MNIST-1D MLP
(blockwise), a 1-D convnet on MNIST-1D, the suite's small character transformer
and a 1.3M-parameter character transformer (4 layers, width 160, context 128,
batch 32; ``transformer-stdlib``: the same model on the whole standard library's source,
~12M characters, where ``transformer``'s 452k characters overfit), each with a validation
split held out of its training data.

The warm-up check (digits): from every start 1e-8 ... 1e-4, the train loss of the
default at step 500 against the best AdamW of the grid at step 300.

Writes ``lr_free.md``, ``lr_free.json``, ``lr_free_<task>.png`` (held-out metric
and the learned step size against the tuned schedules) and ``lr_free_warmup.png``
into ``--out`` (default ``benchmarks/out/lr_free``, git-ignored).
"""

from __future__ import annotations

import json
import pathlib
import sys
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax
import numpy as np
import optax

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _report  # pylint: disable=g-import-not-at-top,wrong-import-position
import metaoptax  # pylint: disable=g-import-not-at-top,wrong-import-position
from metaoptax._src.arguments import DEFAULT_STEP_SIZE_BOUNDS  # pylint: disable=g-import-not-at-top,wrong-import-position
from metaoptax._src.rounding import _hash  # pylint: disable=g-import-not-at-top,wrong-import-position
from metaoptax._src import tree_utils  # pylint: disable=g-import-not-at-top,wrong-import-position
from metaoptax._src.loss_average import bias_corrected  # pylint: disable=g-import-not-at-top,wrong-import-position
from metaoptax._src.loss_average import exponential_average  # pylint: disable=g-import-not-at-top,wrong-import-position

from suite_tasks import blockwise  # pylint: disable=g-import-not-at-top,wrong-import-position
from suite_tasks import charlm  # pylint: disable=g-import-not-at-top,wrong-import-position
from suite_tasks import cnn1d  # pylint: disable=g-import-not-at-top,wrong-import-position
from suite_tasks import digits  # pylint: disable=g-import-not-at-top,wrong-import-position
from suite_tasks import mnist1d  # pylint: disable=g-import-not-at-top,wrong-import-position
from suite_tasks import runner  # pylint: disable=g-import-not-at-top,wrong-import-position
from suite_tasks.runner import Method  # pylint: disable=g-import-not-at-top,wrong-import-position

#: The files under benchmarks/results/ that this script writes (glob patterns;
#: tests/integration/test_repository_shape.py checks every committed result against them).
OUTPUTS = ("lr_free/lr_free.md", "lr_free/lr_free_*.png",
           # the lr_free.json of each run, renamed, listed in runs.txt and read by --combine
           "lr_free/run_*.json", "lr_free/runs.txt",
           # the bfloat16 trace and average against the default (--designs ... --out
           # benchmarks/results/lr_free_bfloat16, and with --seeds 8): not in the report
           "lr_free_bfloat16*/lr_free.json",
           # the state of issue 60 (item 1): the average and Adam's first moment (and the
           # trace) in bfloat16, and the trace read off averages of horizons 0.1, 0.3 and 1,
           # against the default (--designs ... --out benchmarks/results/lr_free_state_*), and
           # the designs on a schedule-free base, one folder a run
           # (lr_free_state_schedule_free_base/<run>/lr_free.json)
           "lr_free_state_*/lr_free.json",)


OUT = HERE / "out" / "lr_free"
FRACTIONS = (0.1, 0.25, 0.5, 1.0)
CHECKPOINTS = 20  # records per run: every 5 % of the budget
#: The grids end one step past the largest rate any task picked (3e-2 was the edge of
#: both on several tasks, then schedule-free's 3e-1 on the MNIST-1D MLP: widened); the
#: transformers ran with the grids before (they stopped at 3e-2, docs/benchmarks.md).
GRID = (1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1)
SF_GRID = (1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 3e-1, 1.0)
WEIGHT_DECAY = 0.1
WARMUP_FRACTION = 0.05
VALIDATION = 0.2
WARMUP_STARTS = (1e-8, 1e-7, 1e-6, 1e-5, 1e-4)
#: The drop-in with Adam's moments kept as they are when the climb ends (the former
#: default), restarted then (``climb_memory=0``), the restart followed by a second, short
#: climb (:func:`_restart_rewarm`; also with the faster meta step), moments that forget the
#: climb as it climbs (:func:`_alpha_weighted`), and the drop-in (its moments count as 3
#: steps when the climb ends, ``climb_memory=3``) with the paper's meta step and as it is
#: (meta step 3e-3).
WARMUP_VARIANTS = {
    "climb_memory=None, meta 1e-3 (the former default)": lambda: metaoptax.adamw(
        weight_decay=WEIGHT_DECAY, climb_memory=None, meta_step_size=1e-3),
    "climb_memory=0, meta 1e-3": lambda: metaoptax.adamw(
        weight_decay=WEIGHT_DECAY, climb_memory=0, meta_step_size=1e-3),
    "restart + rewarm": lambda: _restart_rewarm(),
    "restart + rewarm, meta 3e-3": lambda: _restart_rewarm(meta_step_size=3e-3),
    "alpha-weighted moments": lambda: _alpha_weighted(),
    "climb_memory=3, meta 1e-3": lambda: metaoptax.adamw(weight_decay=WEIGHT_DECAY,
                                                         meta_step_size=1e-3),
    "metaoptax.adamw()": lambda: metaoptax.adamw(weight_decay=WEIGHT_DECAY)}


class Task(NamedTuple):
  make: Callable[[], object]
  steps: int
  quick_steps: int


TASKS = {
    "digits": Task(lambda: digits.make_problem(VALIDATION), 3000, 200),
    "mnist1d": Task(lambda: mnist1d.make_problem(validation=VALIDATION), 6000, 200),
    "blockwise": Task(lambda: blockwise.make_problem(VALIDATION), 6000, 200),
    "cnn1d": Task(cnn1d.make_problem, 3000, 200),
    # the digits MLP on the plain cross-entropy (no label smoothing): its train loss goes
    # to 0 and its test loss overfits (issue 60's measurement)
    "digits-ce": Task(lambda: digits.make_problem(VALIDATION, label_smoothing=0.0,
                                                  name="digits-ce"), 3000, 200),
    # short runs (a few hundred steps), where the climb from the initial step size is a
    # large part of the budget: 10 % is 30 steps
    "digits-300": Task(lambda: digits.make_problem(VALIDATION), 300, 100),
    "mnist1d-300": Task(lambda: mnist1d.make_problem(validation=VALIDATION), 300, 100),
    "charlm": Task(lambda: charlm.make_problem(charlm.SMALL, held_out_test=True), 5000, 200),
    "transformer": Task(lambda: charlm.make_problem(charlm.LARGE, held_out_test=True,
                                                    name="transformer"), 5000, 20),
    # the same model on the whole standard library's source (~12M characters): the
    # 14 modules above are seen ~50 times in 5,000 steps and overfit
    "transformer-stdlib": Task(lambda: charlm.make_problem(
        charlm.LARGE, held_out_test=True, name="transformer-stdlib", corpus="stdlib"), 5000, 20),
}


def _averaged(state, params):
  del params
  return metaoptax.averaged_params(state)


def _design(**kwargs):
  """``metaoptax.adamw`` with the task's weight decay and ``kwargs`` (the design's settings;
  the library's defaults are the chosen design). Every design spells out
  ``climb_memory`` (the designs before it kept Adam's moments as they were: ``None``)."""
  kwargs.setdefault("climb_memory", None)
  return lambda: metaoptax.adamw(weight_decay=WEIGHT_DECAY, **kwargs)


class InterpolationState(NamedTuple):
  weight_sum: jax.Array  # sum of alpha_t^2 so far
  count: jax.Array  # steps taken
  base: optax.OptState  # the wrapped metaoptax.adamw(b1=0)'s state
  z: optax.Params  # the base iterates


def _average_weight(weight_sum, count, weight, horizon):
  """``(c, weight_sum + weight, count + 1)``: schedule-free's weight of the new iterate in the
  average, at least ``1 / (horizon * count + 1)`` where a horizon is given."""
  total = weight_sum + weight
  c = weight / total
  count = count + 1
  if horizon is not None:
    c = jnp.maximum(c, 1.0 / (horizon * count.astype(jnp.float32) + 1.0))
  return c, total, count


def _interpolated(b1: float = 0.9, horizon: float | None = None,
                  **kwargs) -> optax.GradientTransformation:
  """Schedule-free's interpolation (Defazio et al. 2024) around a learned step size.

  The base is ``metaoptax.adamw(b1=0, average=None, **kwargs)`` (its momentum
  replaced by the interpolation); the user's params are ``y``, its gradient is taken
  there, and ``z_{t+1} = z_t + u_t``, ``x_{t+1} = x_t + c_t (z_{t+1} - x_t)`` with
  ``c_t = alpha_t^2 / sum_{s<=t} alpha_s^2`` (schedule-free's ``lr^2`` weights, the
  learned ``alpha_t`` for ``lr``), ``y_{t+1} = b1 x_{t+1} + (1 - b1) z_{t+1}``.
  With a ``horizon`` :math:`h`, ``c_t`` is at least ``1 / (h t + 1)``: ``x`` averages
  over the last fraction :math:`h` of the steps at most, as the default's average.
  Evaluate ``x`` (:func:`_interpolated_eval`). A design of the ablation only."""
  base = metaoptax.adamw(b1=0.0, weight_decay=WEIGHT_DECAY, average=None,
                         climb_memory=None, **kwargs)

  def init(params):
    return InterpolationState(jnp.zeros([], jnp.float32), jnp.zeros([], jnp.int32),
                              base.init(params),
                              jax.tree.map(jnp.copy, params))

  def update(grads, state, params):
    u, base_state = base.update(grads, state.base, params)
    weight = jnp.mean(jnp.atleast_1d(metaoptax.step_sizes(base_state))) ** 2
    c, total, count = _average_weight(state.weight_sum, state.count, weight, horizon)
    z = jax.tree.map(jnp.add, state.z, u)
    x = jax.tree.map(lambda y, z0, z1: (1 - c) * (y - (1 - b1) * z0) / b1 + c * z1,
                     params, state.z, z)
    updates = jax.tree.map(lambda xi, zi, y: b1 * xi + (1 - b1) * zi - y, x, z, params)
    return updates, InterpolationState(total, count, base_state, z)

  return optax.GradientTransformation(init, update)


def schedule_free_average(params, z, b1=0.9):
  """``x = (y - (1 - b1) z) / b1``: schedule-free's average, from the gradient's point
  ``y = params`` and the base iterate ``z``."""
  return jax.tree.map(lambda y, zi: (y - (1 - b1) * zi) / b1, params, z)


def _interpolated_eval(state, params, b1=0.9):
  """The average that :func:`_interpolated` evaluates (:func:`schedule_free_average`)."""
  return schedule_free_average(params, state.z, b1)


def _toward_the_average(mu):
  """Evaluation at ``(1 - mu) w + mu avg``: between the iterate and the drop-in's average."""
  return lambda state, params: jax.tree.map(lambda w, a: (1 - mu) * w + mu * a, params,
                                            metaoptax.averaged_params(state))


def _toward_the_anchor(lam):
  """Evaluation at ``w - lam h`` with the stored trace ``h`` (gamma=1: ``h ~ w - w_0``), i.e.
  ``(1 - lam) w + lam w_0``: the only averages that (w, h) determine without a buffer."""
  return lambda state, params: jax.tree.map(lambda w, h: w - lam * h, params,
                                            metaoptax.sensitivity_trace(state))


def _count_sketch_signs(n: int) -> jax.Array:
  """The sketch's fixed random signs, +-1, one per entry (a hash of the entry's index)."""
  index = lax.broadcasted_iota(jnp.uint32, (n,), 0)
  return 1.0 - 2.0 * (_hash(index * jnp.uint32(0x9E3779B1) + jnp.uint32(12345)) >> 31).astype(
      jnp.float32)


def _count_sketch_back(g: jax.Array, ratio: int) -> jax.Array:
  """:math:`S^\\top S g` for the count sketch :math:`S` of :func:`_sketched_trace`: entry
  :math:`i` of ``g`` (flattened) into bucket :math:`i \\bmod k`, ``k = ceil(size / ratio)``,
  with the sign of :func:`_count_sketch_signs`."""
  n = g.size
  k = -(-n // ratio)
  sign = _count_sketch_signs(n).astype(g.dtype)
  x = jnp.pad(g.reshape(-1) * sign, (0, (-n) % k)).reshape(-1, k)
  return (jnp.broadcast_to(x.sum(0), x.shape).reshape(-1)[:n] * sign).reshape(g.shape)


def _sketched_trace(ratio: int, **kwargs) -> optax.GradientTransformation:
  r"""``metaoptax.adamw(**kwargs)`` whose meta-gradient reads a count sketch of its trace.

  The Hessian-free trace :math:`h` enters the step only through :math:`s = h \cdot g`, and
  its recursion is linear with scalar factors, so a linear sketch :math:`Sh` (each leaf's
  entries summed with random signs into ``ceil(size / ratio)`` buckets, entry :math:`i` into
  bucket :math:`i \bmod k`) could be stored in its place: :math:`1/\mathrm{ratio}` of a
  params-sized buffer, the state :math:`3 + 1/\mathrm{ratio}` times the params with Adam's
  moments and the average. :math:`s \approx (Sh)\cdot(Sg)`, unbiased over the signs. Here
  the trace is stored whole and the same :math:`s = h \cdot (S^\top S g)` is taken through
  ``meta_grads`` (equal in exact arithmetic): the quality of the sketch, not its memory. A
  design of the ablation only."""
  inner = metaoptax.adamw(weight_decay=WEIGHT_DECAY, **kwargs)

  def update(grads, state, params=None, **extra):
    meta_grads = jax.tree.map(lambda g: _count_sketch_back(g, ratio), grads)
    return inner.update(grads, state, params, meta_grads=meta_grads, **extra)

  return optax.GradientTransformationExtraArgs(inner.init, update)


def _scale_by_factored_adam(b1=0.9, b2=0.999, eps=1e-8) -> optax.GradientTransformation:
  """Adam whose second moment is factored over the last two axes of every array of 2 or more
  axes (Adafactor's rank-1 estimate, Shazeer & Stern 2018): row and column means of
  ``g^2`` with Adam's decay and bias correction, ``v_ij = r_i c_j / mean(r)``. An
  ``optax.ScaleByAdamState`` whose ``nu`` holds ``(rows, columns)`` per factored leaf, so
  that ``climb_memory`` shortens it as Adam's. A design of the ablation only."""

  def factored(g):
    return jnp.ndim(g) >= 2

  def init(params):
    nu = jax.tree.map(lambda p: (jnp.zeros(p.shape[:-1], jnp.float32),
                                 jnp.zeros(p.shape[:-2] + p.shape[-1:], jnp.float32))
                      if factored(p) else jnp.zeros(p.shape, jnp.float32), params)
    return optax.ScaleByAdamState(jnp.zeros([], jnp.int32),
                                  jax.tree.map(lambda p: jnp.zeros(p.shape, jnp.float32), params),
                                  nu)

  def update(grads, state, params=None):
    del params
    count = optax.safe_increment(state.count)
    mu = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, state.mu, grads)
    treedef = jax.tree.structure(grads)
    nus = treedef.flatten_up_to(state.nu)
    new_nu, directions = [], []
    for g, m, v in zip(jax.tree.leaves(grads), jax.tree.leaves(mu), nus):
      g2 = g * g + 1e-30
      if factored(g):
        rows = b2 * v[0] + (1 - b2) * jnp.mean(g2, axis=-1)
        cols = b2 * v[1] + (1 - b2) * jnp.mean(g2, axis=-2)
        new_nu.append((rows, cols))
        full = (rows[..., :, None] * cols[..., None, :]
                / jnp.mean(rows, axis=-1, keepdims=True)[..., None])
      else:
        full = b2 * v + (1 - b2) * g2
        new_nu.append(full)
      c1 = 1 - b1 ** count.astype(jnp.float32)
      c2 = 1 - b2 ** count.astype(jnp.float32)
      directions.append((m / c1) / (jnp.sqrt(full / c2) + eps))
    return (jax.tree.unflatten(treedef, directions),
            optax.ScaleByAdamState(count, mu, jax.tree.unflatten(treedef, new_nu)))

  return optax.GradientTransformation(init, update)


def _factored_default():
  """The default from 1e-3 (its stored trace, gamma = 1, and average), Adam's second moment
  factored (:func:`_scale_by_factored_adam`)."""
  def make():
    meta = metaoptax.climb(metaoptax.presets.meta_adam(3e-3), rate=0.1, backoff=0.5)
    return optax.chain(
        metaoptax.metaoptimize(_scale_by_factored_adam(), meta, init_step_size=1e-3,
                               gamma=1.0, weight_decay=WEIGHT_DECAY, climb_memory=3),
        metaoptax.average_iterates(0.1))
  return make


def _scale_by_adam_without_first_moment(b2: float = 0.999,
                                        eps: float = 1e-8) -> optax.GradientTransformation:
  r"""Adam's direction with ``b1 = 0``, :math:`g / (\sqrt{\hat v} + \epsilon)`, with no first
  moment stored (its first moment is the gradient): an ``optax.ScaleByAdamState`` whose
  ``mu`` holds one constant scalar per leaf (``1``, Adam's ``(1 - b1) g`` at ``g = 1``,
  which ``climb_memory`` reads as ``b1 = 0``), so that ``climb_memory`` shortens ``v`` as
  Adam's; one params-sized buffer. A design of the ablation only."""

  def init(params):
    return optax.ScaleByAdamState(jnp.zeros([], jnp.int32),
                                  jax.tree.map(lambda p: jnp.ones([], jnp.float32), params),
                                  jax.tree.map(lambda p: jnp.zeros(p.shape, jnp.float32), params))

  def update(grads, state, params=None):
    del params
    count = optax.safe_increment(state.count)
    nu = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * g * g, state.nu, grads)
    correction = 1 - b2 ** count.astype(jnp.float32)
    directions = jax.tree.map(lambda g, v: g / (jnp.sqrt(v / correction) + eps), grads, nu)
    return directions, optax.ScaleByAdamState(count, state.mu, nu)

  return optax.GradientTransformation(init, update)


def _meta_optimized_adam_without_first_moment(**kwargs) -> optax.GradientTransformation:
  """The default from 1e-3 (climb x2, meta 3e-3, gamma = 1, climb_memory = 3, the task's
  weight decay, at the params it is given) on :func:`_scale_by_adam_without_first_moment`,
  with no average: state ``v`` and the trace ``h``. ``kwargs`` override its settings."""
  settings = {**NEW_DEFAULT, "init_step_size": 1e-3, **kwargs}
  meta = metaoptax.climb(metaoptax.presets.meta_adam(settings["meta_step_size"]),
                         rate=0.1, backoff=settings["climb_backoff"])
  return metaoptax.metaoptimize(
      _scale_by_adam_without_first_moment(), meta, init_step_size=settings["init_step_size"],
      gamma=settings["gamma"], weight_decay=WEIGHT_DECAY,
      climb_memory=settings["climb_memory"])


def _schedule_free_base(b1: float = 0.9, **kwargs) -> optax.GradientTransformation:
  r"""Schedule-free's interpolation (Defazio et al. 2024) around the learned step, composed:
  ``optax.contrib.schedule_free(base, learning_rate=1.0, b1=b1)`` with ``base``
  :func:`_meta_optimized_adam_without_first_moment`. The user's params are
  :math:`y = (1 - b_1) z + b_1 x`; the gradient, the weight decay and the meta-gradient
  :math:`g(y)^\top h` are taken there; the base moves :math:`z` by
  :math:`-\alpha (d + \kappa y)` and its trace is :math:`h \approx dz/d\log\alpha`;
  :math:`x` is the uniform average of the :math:`z`'s (``learning_rate=1``: weights
  :math:`1^2`), read off :math:`(y, z)`, so the state is :math:`z, v, h`: 3 params-sized
  buffers. Evaluate ``optax.contrib.schedule_free_eval_params``. A design of the ablation
  only."""
  return optax.contrib.schedule_free(_meta_optimized_adam_without_first_moment(**kwargs),
                                     learning_rate=1.0, b1=b1)


class ScheduleFreeBaseState(NamedTuple):
  """State of :func:`_schedule_free_base_weighted`."""
  weight_sum: jax.Array  # sum of the average's weights so far
  max_step_size: jax.Array  # the largest learned step size so far
  count: jax.Array  # steps taken
  base: optax.OptState  # the meta-optimized base's state
  z: optax.Params  # the base iterates


def _schedule_free_base_weighted(b1: float = 0.9, horizon: float | None = None,
                                 weights: str = "max alpha^2", trace_of_y: bool = False,
                                 **kwargs) -> optax.GradientTransformation:
  r""":func:`_schedule_free_base` with schedule-free's warm-up weights: :math:`z_{t+1}` enters
  the average with weight :math:`\max_{s \le t} \alpha_s^2` (the learned step size for
  schedule-free's ``lr``), so that the climb's iterates weigh little (``weights="uniform"``:
  weight 1, as :func:`_schedule_free_base`); with a ``horizon``
  :math:`c`, the average's coefficient is at least :math:`1/(c\,t + 1)` (the last fraction
  :math:`c` of the steps at most). ``trace_of_y``: the trace follows the params
  :math:`y` instead of :math:`z`, :math:`h \leftarrow h + (y_{t+1} - y_t) - \Delta_t` after
  the base's :math:`h \leftarrow h + \Delta_t` (with :math:`\gamma = 1`,
  :math:`h \approx y - y_0 \approx dy/d\log\alpha`, the sensitivity of the point where the
  gradient is taken). State :math:`z, v, h`. Evaluate :func:`_interpolated_eval`. A design
  of the ablation only."""
  base = _meta_optimized_adam_without_first_moment(**kwargs)

  def init(params):
    return ScheduleFreeBaseState(jnp.zeros([], jnp.float32), jnp.zeros([], jnp.float32),
                                 jnp.zeros([], jnp.int32), base.init(params),
                                 jax.tree.map(jnp.copy, params))

  def update(grads, state, params):
    alpha = jnp.mean(jnp.atleast_1d(metaoptax.step_sizes(state.base)))  # this step's
    u, base_state = base.update(grads, state.base, params)
    largest = jnp.maximum(state.max_step_size, alpha)
    weight = largest ** 2 if weights == "max alpha^2" else jnp.ones([], jnp.float32)
    c, total, count = _average_weight(state.weight_sum, state.count, weight, horizon)
    z = jax.tree.map(jnp.add, state.z, u)
    updates = jax.tree.map(
        lambda y, z0, z1: b1 * ((1 - c) * (y - (1 - b1) * z0) / b1 + c * z1)
        + (1 - b1) * z1 - y, params, state.z, z)
    if trace_of_y:
      trace = base_state.trace
      base_state = base_state._replace(trace=trace._replace(weights=jax.tree.map(
          lambda h, du, dz: h + du - dz, trace.weights, updates, u)))
    return updates, ScheduleFreeBaseState(total, largest, count, base_state, z)

  return optax.GradientTransformation(init, update)


class ScheduleFreeReadTraceState(NamedTuple):
  """State of :func:`_schedule_free_trace_read_off`: two params-sized buffers."""
  count: jax.Array  # steps taken
  adam_count: jax.Array  # the steps the second moment counts (3 at the climb's end)
  beta: jax.Array  # log of the learned step size
  meta_state: optax.OptState  # the climb, then Adam on beta
  nu: optax.Params  # Adam's second moment
  z: optax.Params  # the base iterates


def _schedule_free_trace_read_off(b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8,
                                  init_step_size: float = 1e-3, climb_backoff: float = 0.5,
                                  meta_step_size: float = 3e-3,
                                  climb_memory: int = 3) -> optax.GradientTransformation:
  r"""Schedule-free's interpolation around Adam's direction with ``b1 = 0`` and a learned
  step size whose trace is read off the state: :math:`h = z - x = (z - y)/b_1`, the
  displacements :math:`\Delta_s` weighted by :math:`s/t` (the uniform average :math:`x`
  holds :math:`(t - s)/t` of each), so the meta-gradient :math:`g(y)^\top (z - y)/b_1` is
  the slope of the loss at :math:`y` toward the fast iterate :math:`z`: negative while
  :math:`z` leads downhill, positive once it overshoots. The climb (from
  ``init_step_size``, ``climb_backoff``), then Adam on :math:`\log\alpha`
  (``meta_step_size``), and Adam's second moment counted as ``climb_memory`` steps at the
  climb's end, as the default. :math:`z_{t+1} = z_t - \alpha(d_t + \kappa y_t)`,
  :math:`x_{t+1} = x_t + (z_{t+1} - x_t)/(t + 1)`, :math:`y = (1 - b_1) z + b_1 x`. State
  :math:`z, v`: 2 params-sized buffers (schedule-free AdamW's). Evaluate
  :func:`_interpolated_eval`. A design of the ablation only (no guard against
  non-finite gradients)."""
  meta = metaoptax.climb(metaoptax.presets.meta_adam(meta_step_size), rate=0.1,
                         backoff=climb_backoff)
  bounds = tuple(float(np.log(b)) for b in DEFAULT_STEP_SIZE_BOUNDS)

  def meta_params(beta):
    return metaoptax.MetaParams(beta, {})

  def init(params):
    beta = jnp.full([], np.log(init_step_size), jnp.float32)
    return ScheduleFreeReadTraceState(
        jnp.zeros([], jnp.int32), jnp.zeros([], jnp.int32), beta, meta.init(meta_params(beta)),
        jax.tree.map(lambda p: jnp.zeros(p.shape, jnp.float32), params),
        jax.tree.map(jnp.copy, params))

  def update(grads, state, params):
    s = sum(jnp.vdot(g, (z - y) / b1) for g, z, y in zip(
        jax.tree.leaves(grads), jax.tree.leaves(state.z), jax.tree.leaves(params)))
    climb, = tree_utils.instances_of(state.meta_state, metaoptax.ClimbState)
    meta_updates, meta_state = meta.update(meta_params(s), state.meta_state,
                                           meta_params(state.beta))
    beta = jnp.clip(state.beta + meta_updates.step_size, *bounds)
    alpha = jnp.exp(state.beta)
    # Adam's second moment counted as climb_memory steps once the climb has ended
    n = state.adam_count.astype(jnp.float32)
    scale = jnp.where(climb.ended, (1 - b2 ** climb_memory) / (1 - b2 ** jnp.maximum(n, 1.0)),
                      1.0)
    adam_count = jnp.where(climb.ended, climb_memory, state.adam_count) + 1
    nu = jax.tree.map(lambda v, g: scale * b2 * v + (1 - b2) * g * g, state.nu, grads)
    correction = 1 - b2 ** adam_count.astype(jnp.float32)
    count = state.count + 1
    c = 1.0 / count.astype(jnp.float32)

    def leaf(g, v, z, y):
      delta = -alpha * (g / (jnp.sqrt(v / correction) + eps) + WEIGHT_DECAY * y)
      z_new = z + delta
      x = (y - (1 - b1) * z) / b1
      return z_new, b1 * ((1 - c) * x + c * z_new) + (1 - b1) * z_new - y

    out = jax.tree.map(leaf, grads, nu, state.z, params)
    z = jax.tree.map(lambda o: o[0], out, is_leaf=lambda o: isinstance(o, tuple))
    updates = jax.tree.map(lambda o: o[1], out, is_leaf=lambda o: isinstance(o, tuple))
    return updates, ScheduleFreeReadTraceState(count, adam_count, beta, meta_state, nu, z)

  return optax.GradientTransformation(init, update)


class ClimbedDecayState(NamedTuple):
  """State of :func:`_decay_at_the_climbed_step_size`."""
  inner: optax.OptState  # the wrapped metaoptax.adamw(weight_decay=0)'s state
  reference: jax.Array  # the step size at the climb's end (the current one while it climbs)


def _decay_at_the_climbed_step_size(**kwargs) -> optax.GradientTransformation:
  r"""The default whose decoupled weight decay does not anneal with the learned step size:
  :math:`w_{t+1} = w_t - \alpha_t d_t - \kappa \alpha_c w_t`, with :math:`\alpha_c` the
  step size at the climb's end (:math:`\alpha_t` while it climbs), instead of
  :math:`\kappa \alpha_t w_t`. After the climb the meta-gradient anneals
  :math:`\alpha_t` toward memorizing the training set (issue 60); this keeps the
  regularization at the climbed strength meanwhile, without validation data. The trace
  takes the decay's shrinking, :math:`h_{t+1} = (1 - \kappa\alpha_c)(h_t - \alpha_t d_t)`
  (:math:`\alpha_c` held fixed; the factor on the last term is the wrapper's shortcut).
  The average is chained after. A design of the ablation only."""
  inner = metaoptax.adamw(weight_decay=0.0, average=None, **kwargs)
  is_meta = lambda x: isinstance(x, metaoptax.MetaOptimizeState)

  def init(params):
    return ClimbedDecayState(inner.init(params),
                             jnp.asarray(kwargs.get("init_step_size", 1e-3), jnp.float32))

  def update(grads, state, params, **extra):
    updates, inner_state = inner.update(grads, state.inner, params, **extra)
    alpha = jnp.mean(jnp.atleast_1d(metaoptax.step_sizes(inner_state)))
    climb, = tree_utils.instances_of(inner_state, metaoptax.ClimbState)
    reference = jnp.where(climb.climbing | climb.ended, alpha, state.reference)
    shrink = 1.0 - WEIGHT_DECAY * reference
    updates = jax.tree.map(lambda u, w: u - WEIGHT_DECAY * reference * w, updates, params)
    inner_state = jax.tree.map(
        lambda s: s._replace(trace=s.trace._replace(weights=jax.tree.map(
            lambda h: (shrink * h).astype(h.dtype), s.trace.weights))) if is_meta(s) else s,
        inner_state, is_leaf=is_meta)
    return updates, ClimbedDecayState(inner_state, reference)

  return optax.chain(optax.GradientTransformationExtraArgs(init, update),
                     metaoptax.average_iterates(NEW_DEFAULT["average"]))


def _gate_back_to_the_climbs_end(**settings) -> optax.GradientTransformation:
  r"""``metaoptax.overfitting_gate(metaoptax.adamw(**settings))`` as it was until issue 60's
  change: when it closes, each step size goes back to where the climb ended even where
  the meta-gradient had raised it above (the library's gate holds the larger of the two).
  A design of the ablation only (the runs of "the default from 1e-3, held once validation
  trends up (overfitting_gate)")."""
  gate = metaoptax.overfitting_gate(metaoptax.adamw(weight_decay=WEIGHT_DECAY, **settings))
  is_meta = lambda x: isinstance(x, metaoptax.MetaOptimizeState)

  def update(grads, state, params, **extra):
    updates, new = gate.update(grads, state, params, **extra)
    closing = new.held & ~state.held  # before this step, climbed is the climb's end
    held = jax.tree.map(lambda c, e: jnp.where(closing, e, c), new.climbed, state.climbed)
    inner = jax.tree.map(
        lambda s: s._replace(meta_params=s.meta_params._replace(step_size=jax.tree.map(
            lambda b, h: jnp.where(new.held, h, b), s.meta_params.step_size, held)))
        if is_meta(s) else s, new.inner, is_leaf=is_meta)
    return updates, new._replace(inner=inner, climbed=held)

  return optax.GradientTransformationExtraArgs(gate.init, update)


def _rsqrt_after_climb() -> optax.GradientTransformation:
  r"""The meta optimizer after the climb of an anytime design: no meta-gradient,
  :math:`\beta_{t+1} = \beta_t - \tfrac12\log(1 + 1/t)`, i.e.
  :math:`\alpha_t = \alpha_{t_0}\sqrt{t_0/t}` from the climb's end :math:`t_0` (the
  inverse-square-root schedule of Vaswani et al. 2017, which needs no budget).
  :func:`metaoptax.climb` ignores its updates while it climbs."""

  def init(meta_params):
    del meta_params
    return jnp.zeros([], jnp.int32)

  def update(meta_grads, count, meta_params=None):
    del meta_params
    t = (count + 1).astype(jnp.float32)
    shift = -0.5 * jnp.log1p(1.0 / t)
    return jax.tree.map(lambda g: jnp.full_like(g, shift), meta_grads), count + 1

  return optax.GradientTransformation(init, update)


def _anytime(average: float = 0.1) -> optax.GradientTransformation:
  r"""``metaoptax.adamw()``'s climb (x2), then the step size decays as
  :math:`1/\sqrt t` (:func:`_rsqrt_after_climb`) instead of following its meta-gradient;
  the average of the weights as the default's. A design of the ablation only."""
  return _adam_with_meta(metaoptax.climb(_rsqrt_after_climb(), rate=0.1, backoff=0.5),
                         average)


def _adam_with_meta(meta: optax.GradientTransformation, average: float,
                    climb_memory: int | None = None,
                    base: optax.GradientTransformation | None = None
                    ) -> optax.GradientTransformation:
  """``metaoptax.adamw()``'s construction (Adam's direction from 1e-6, gamma = 1, the task's
  weight decay, the average) around another meta optimizer ``meta`` (and ``base``
  instead of Adam's direction, if given)."""
  return optax.chain(
      metaoptax.metaoptimize(base or optax.scale_by_adam(), meta, init_step_size=1e-6,
                             weight_decay=WEIGHT_DECAY, gamma=1.0,
                             climb_memory=climb_memory),
      metaoptax.average_iterates(average))


class RewarmState(NamedTuple):
  climb: optax.OptState  # the wrapped climb's state (climb_memory finds it)
  left: jax.Array  # int32: steps of the second climb still to go


def _rewarmed(climb: optax.GradientTransformation, steps: int = 23,
              rate: float = 0.1) -> optax.GradientTransformation:
  r"""``climb``, whose end is followed by a second, short climb: when it ends,
  :math:`\log\alpha` steps back by ``rate * steps`` more (10x at the defaults) and rises
  by ``rate`` per step for ``steps`` steps, whatever the meta-gradient says; then the
  climb's meta optimizer. With ``climb_memory=0`` Adam's fresh moments take
  their first, sign-like steps at a tenth of the climbed step size (a warm-up, as
  optax's schedules give Adam). A design of the ablation only."""

  def init(meta_params):
    return RewarmState(climb.init(meta_params), jnp.zeros([], jnp.int32))

  def update(meta_grads, state, meta_params=None):
    updates, climb_state = climb.update(meta_grads, state.climb, meta_params)
    (found,) = tree_utils.instances_of(climb_state, metaoptax.ClimbState)
    ended, rewarming = found.ended, state.left > 0
    shift = jnp.where(rewarming, rate, jnp.where(ended, -rate * steps, 0.0))
    step_size = jax.tree.map(lambda u: jnp.where(rewarming, shift, u + shift).astype(u.dtype),
                             updates.step_size)
    left = jnp.where(ended, steps, jnp.maximum(state.left - 1, 0))
    return updates._replace(step_size=step_size), RewarmState(climb_state, left)

  return optax.GradientTransformation(init, update)


def _restart_rewarm(average: float = 0.1,
                    meta_step_size: float = 1e-3) -> optax.GradientTransformation:
  """The default's design with Adam's moments restarted when the climb ends and a
  second, short climb from a tenth of the climbed step size (:func:`_rewarmed`)."""
  meta = _rewarmed(metaoptax.climb(metaoptax.presets.meta_adam(meta_step_size), rate=0.1,
                                   backoff=0.5))
  return _adam_with_meta(meta, average, climb_memory=0)


class AlphaWeightedAdamState(NamedTuple):
  mu: optax.Updates  # sum of b1^(t-s) (1 - b1) (alpha_s / alpha_t) g_s
  nu: optax.Updates  # sum of b2^(t-s) (1 - b2) (alpha_s / alpha_t)^2 g_s^2
  mu_weight: jax.Array  # the same sums of the weights alone: mu's bias correction
  nu_weight: jax.Array
  ratio: jax.Array  # alpha_{t-1} / alpha_t, at most 1 (:func:`_alpha_weighted` sets it)


def alpha_weighted_direction(state: AlphaWeightedAdamState, eps: float = 1e-8):
  """Adam's direction from the step-size-weighted moments: each normalized by its weights."""
  return jax.tree.map(lambda m, v: (m / state.mu_weight) / (jnp.sqrt(v / state.nu_weight) + eps),
                      state.mu, state.nu)


def _scale_by_alpha_weighted_adam(b1: float = 0.9, b2: float = 0.999,
                                  eps: float = 1e-8) -> optax.GradientTransformation:
  r"""Adam whose moments weight each gradient by its step size, as prodigy weights
  them by :math:`d_t` (Mishchenko & Defazio 2023, arXiv:2306.06101):

  .. math::

    m_t = b_1 r_t m_{t-1} + (1 - b_1) g_t, \quad
    v_t = b_2 r_t^2 v_{t-1} + (1 - b_2) g_t^2, \quad
    d_t = \frac{m_t / W^m_t}{\sqrt{v_t / W^v_t} + \epsilon},

  with :math:`r_t` the state's ``ratio`` (:math:`\alpha_{t-1}/\alpha_t`, at most 1) and
  :math:`W^m_t, W^v_t` the same sums of the weights alone (for :math:`r \equiv 1`,
  :math:`1 - b^t`: Adam's bias correction, and the direction is Adam's). The moments
  hold :math:`\sum_s (\alpha_s/\alpha_t)\,\cdot` of their terms: while the step size
  climbs they forget its gradients at the rate it climbs."""

  def init(params):
    zeros = lambda: jax.tree.map(jnp.zeros_like, params)
    zero = jnp.zeros([], jnp.float32)
    return AlphaWeightedAdamState(zeros(), zeros(), zero, zero, jnp.ones([], jnp.float32))

  def update(grads, state, params=None):
    del params
    r = state.ratio
    mu = jax.tree.map(lambda m, g: b1 * r * m + (1 - b1) * g, state.mu, grads)
    nu = jax.tree.map(lambda v, g: b2 * r**2 * v + (1 - b2) * jnp.square(g), state.nu, grads)
    mu_weight = b1 * r * state.mu_weight + (1 - b1)
    nu_weight = b2 * r**2 * state.nu_weight + (1 - b2)
    new = AlphaWeightedAdamState(mu, nu, mu_weight, nu_weight, r)
    return alpha_weighted_direction(new, eps), new

  return optax.GradientTransformation(init, update)


class AlphaWeightedState(NamedTuple):
  inner: optax.OptState  # metaoptimize's and the average's states
  step_size: jax.Array  # alpha after the last step


def _alpha_weighted(meta_step_size: float = 1e-3,
                    average: float = 0.1) -> optax.GradientTransformation:
  r"""The default's design (climb x2, Adam on :math:`\log\alpha` at :math:`\gamma = 1`,
  the average) around :func:`_scale_by_alpha_weighted_adam`: after each step the base's
  ``ratio`` becomes :math:`\min(1, \alpha_{t-1}/\alpha_t)` of the step sizes just
  learned, so the climb's gradients (x10 every 23 steps) fade from Adam's moments
  within ~5 steps instead of ~1,000, without a restart; once the step size stops rising
  it is Adam. A design of the ablation only."""
  inner = _adam_with_meta(metaoptax.climb(metaoptax.presets.meta_adam(meta_step_size),
                                          rate=0.1, backoff=0.5), average,
                          base=_scale_by_alpha_weighted_adam())
  scalar = lambda state: jnp.mean(jnp.atleast_1d(metaoptax.step_sizes(state)))

  def init(params):
    state = inner.init(params)
    return AlphaWeightedState(state, scalar(state))

  def update(grads, state, params):
    updates, (meta, averaged) = inner.update(grads, state.inner, params)
    alpha = scalar(meta)
    ratio = jnp.minimum(1.0, state.step_size / alpha)
    meta = meta._replace(base_state=meta.base_state._replace(ratio=ratio))
    return updates, AlphaWeightedState((meta, averaged), alpha)

  return optax.GradientTransformation(init, update)


class ValidationGateState(NamedTuple):
  inner: optax.OptState  # the default's state (metaoptimize's and the average's)
  loss_average: jax.Array  # exponential average of the validation minibatch loss
  average_weight: jax.Array  # 1 - rho^k: its bias correction
  best: jax.Array  # the lowest bias-corrected average since the climb ended (inf before)
  slow_average: jax.Array  # the same loss's slower exponential average (``slow_rho``)
  slow_weight: jax.Array
  above: jax.Array  # int32: consecutive steps the average has been above the margin
  held: jax.Array  # bool: overfitting was detected; the step size is held from then on
  climbed: Any  # the log step sizes held once the gate closes (the climb's end by default)
  boost: jax.Array  # added to the held log step sizes (``raise_per_step``; 0 without)


def _validation_gated(rho: float = 0.99, margin: float = 0.01, patience: int = 1,
                      restore: bool = True, slow_rho: float | None = None,
                      raise_per_step: float = 0.0, raise_cap: float = 4.0,
                      **design) -> optax.GradientTransformation:
  r"""The default's design, whose annealing a held-out loss may stop: the issue's lead
  "held-out meta-gradients that decide only the annealing", as a gate rather than a
  gradient. ``update`` takes ``validation_loss``, the loss on a minibatch of held-out
  data (what a user's evaluation loop computes, here at every step).

  After the climb, :math:`\log\alpha` follows the default's meta-gradient of the
  *training* loss (Adam, :math:`\gamma = 1`) while the bias-corrected exponential average
  (``rho``: ~100 steps) of the validation loss stays within ``margin`` (relative) of its
  lowest value since the climb ended. Once it has been above that for ``patience``
  consecutive steps (a rise that lasts, not a loss spike), the network is overfitting
  (with ``slow_rho``, the rise is measured against a slower average of the same loss
  instead of the lowest value: a trend, free of the running minimum's downward bias):
  the step size goes back to where the climb ended (or, with ``restore=False``, stays
  where it is) and is held there for the rest of the run ("climb x2, hold", the best
  design on the networks that overfit:
  a larger step generalizes better there, docs/design-decisions.md), while on data that
  do not overfit (the character model, the transformer on the whole standard library)
  the validation loss keeps falling and the default anneals as before. A non-finite
  validation loss is ignored. ``design``: settings of :func:`_design` other than the former
  default's (e.g. the new default's ``meta_step_size=3e-3, climb_memory=3``). A design of
  the ablation only."""
  inner = _design(**{**dict(climb_backoff=0.5, meta_step_size=1e-3, gamma=1.0, average=0.1),
                     **design})()

  def init(params):
    state = inner.init(params)
    (meta,) = tree_utils.instances_of(state, metaoptax.MetaOptimizeState)
    zero = jnp.zeros([], jnp.float32)
    return ValidationGateState(state, zero, zero, jnp.full([], jnp.inf), zero, zero,
                               jnp.zeros([], jnp.int32), jnp.asarray(False),
                               meta.meta_params.step_size, zero)

  def update(grads, state, params, validation_loss):
    updates, (meta, averaged) = inner.update(grads, state.inner, params)
    (climb,) = tree_utils.instances_of(meta, metaoptax.ClimbState)
    beta = meta.meta_params.step_size
    # the log step sizes to hold: the climb's end, or without restore those of this step
    # until the gate closes
    keep = climb.ended if restore else ~state.held
    climbed = jax.tree.map(lambda b, c: jnp.where(keep, b, c), beta, state.climbed)
    loss_average, average_weight = exponential_average(
        state.loss_average, state.average_weight, validation_loss, rho)
    smoothed = bias_corrected(loss_average, average_weight)
    slow_average, slow_weight = state.slow_average, state.slow_weight  # unused without slow_rho
    if slow_rho is not None:
      slow_average, slow_weight = exponential_average(
          slow_average, slow_weight, validation_loss, slow_rho)
    after_climb = ~climb.climbing & ~climb.ended  # from the step after the climb's end
    best = jnp.where(after_climb, jnp.minimum(state.best, smoothed), state.best)
    reference = (best if slow_rho is None else
                 bias_corrected(slow_average, slow_weight))
    above = jnp.where(after_climb & (smoothed > reference * (1 + margin)), state.above + 1, 0)
    held = state.held | (above >= patience)
    boost = jnp.where(above >= patience,
                      jnp.minimum(state.boost + raise_per_step, jnp.log(raise_cap)), state.boost)
    beta = jax.tree.map(lambda b, c: jnp.where(held, c + boost, b), beta, climbed)
    meta = meta._replace(meta_params=meta.meta_params._replace(step_size=beta))
    return updates, ValidationGateState((meta, averaged), loss_average, average_weight, best,
                                        slow_average, slow_weight, above, held, climbed, boost)

  return optax.GradientTransformationExtraArgs(init, update)


class RangeTestState(NamedTuple):
  climbing: jax.Array  # bool: the range test is on
  log_rate: jax.Array  # log of schedule-free's rate
  loss_average: jax.Array  # the loss's exponential average (not bias-corrected)
  average_weight: jax.Array  # 1 - rho^k: its bias correction
  best_loss: jax.Array  # the lowest bias-corrected average so far
  best_log_rate: jax.Array  # log_rate at that step
  weight_sum: jax.Array  # sum of rate^2 since the (re)start
  rms_count: jax.Array  # int32: steps of the second moment
  nu: optax.Params  # the second moment of the gradient (b2 = 0.999)
  z: optax.Params  # schedule-free's base iterate
  x: optax.Params  # schedule-free's average (evaluated)
  best_x: optax.Params  # x at the lowest average loss
  best_nu: optax.Params  # nu there
  best_rms_count: jax.Array


def _range_test(climb: float = 0.05, stop: float = 2.0, factor: float = 1.0,
                init_rate: float = 1e-6, b1: float = 0.9, b2: float = 0.999,
                eps: float = 1e-8, rho: float = 0.9) -> optax.GradientTransformation:
  r"""Schedule-free AdamW (Defazio et al. 2024) whose rate is found by a range test in
  the run (Smith 2017, arXiv:1506.01186), with a rollback.

  The rate starts at ``init_rate`` and grows by :math:`e^{\text{climb}}` per step while
  the bias-corrected exponential average (``rho``) of the minibatch loss at the
  gradient's point :math:`y_t` falls; once it exceeds ``stop`` times its lowest value
  (or is not finite), the run goes back to the average :math:`x` and Adam's second
  moment of the step with the lowest average loss, and holds ``factor`` times that
  step's rate for the rest of the run, schedule-free's average (restarted at the
  rollback) doing the annealing. A range test (docs/design-decisions.md) measured the rate of the
  lowest average loss of such a range test (climb 0.05) within 0.6-2.1x of schedule-free's
  tuned rate at 10 % of every CPU task's budget. The schedule-free step, with
  :math:`d_t = g_t / (\sqrt{\hat\nu_t} + \epsilon) + \lambda y_t` and rate :math:`\gamma_t`:
  :math:`z_{t+1} = z_t - \gamma_t d_t`, :math:`x_{t+1} = (1 - c_t) x_t + c_t z_{t+1}` with
  :math:`c_t = \gamma_t^2 / \sum_s \gamma_s^2`, :math:`y_{t+1} = b_1 x_{t+1} + (1 - b_1)
  z_{t+1}`. Needs the loss (``obj_fn``); evaluate :math:`x` (``state.x``). A design of
  the ablation only."""

  def init(params):
    zero = jnp.zeros([], jnp.float32)
    copy = lambda: jax.tree.map(jnp.copy, params)
    return RangeTestState(
        jnp.asarray(True), jnp.log(jnp.float32(init_rate)), zero,
        zero, jnp.full([], jnp.inf), jnp.log(jnp.float32(init_rate)), zero,
        jnp.zeros([], jnp.int32), jax.tree.map(jnp.zeros_like, params), copy(), copy(), copy(),
        jax.tree.map(jnp.zeros_like, params), jnp.zeros([], jnp.int32))

  def update(grads, state, params, obj_fn):
    loss = obj_fn(params)
    # the range test's bookkeeping (a non-finite loss ends it)
    loss_average = rho * state.loss_average + (1 - rho) * jnp.where(jnp.isfinite(loss), loss,
                                                                   jnp.inf)
    average_weight = rho * state.average_weight + (1 - rho)
    smoothed = loss_average / average_weight
    lower = state.climbing & (smoothed < state.best_loss)
    best_loss = jnp.where(lower, smoothed, state.best_loss)
    best_log_rate = jnp.where(lower, state.log_rate, state.best_log_rate)
    keep = lambda new, old: jax.tree.map(lambda a, b: jnp.where(lower, a, b), new, old)
    best_x, best_nu = keep(state.x, state.best_x), keep(state.nu, state.best_nu)
    best_rms_count = jnp.where(lower, state.rms_count, state.best_rms_count)
    ends = state.climbing & ~(smoothed <= stop * best_loss)
    # schedule-free AdamW's step at the current rate
    rate = jnp.exp(state.log_rate)
    rms_count = state.rms_count + 1
    nu = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * jnp.square(g), state.nu, grads)
    correction = 1 - b2 ** rms_count.astype(jnp.float32)
    z = jax.tree.map(lambda zi, g, v, y: zi - rate * (g / (jnp.sqrt(v / correction) + eps)
                                                      + WEIGHT_DECAY * y),
                     state.z, grads, nu, params)
    weight_sum = state.weight_sum + rate ** 2
    c = rate ** 2 / weight_sum
    x = jax.tree.map(lambda xi, zi: (1 - c) * xi + c * zi, state.x, z)
    # the rollback: x = z = y = the best average, its second moment, the average restarted
    back = lambda best, now: jax.tree.map(lambda a, b: jnp.where(ends, a, b), best, now)
    x, z, nu = back(best_x, x), back(best_x, z), back(best_nu, nu)
    rms_count = jnp.where(ends, best_rms_count, rms_count)
    weight_sum = jnp.where(ends, 0.0, weight_sum)
    log_rate = jnp.where(ends, best_log_rate + jnp.log(factor),
                         state.log_rate + jnp.where(state.climbing, climb, 0.0))
    updates = jax.tree.map(lambda xi, zi, y: b1 * xi + (1 - b1) * zi - y, x, z, params)
    return updates, RangeTestState(
        state.climbing & ~ends, log_rate, loss_average, average_weight,
        best_loss, best_log_rate, weight_sum, rms_count, nu, z, x, best_x, best_nu,
        best_rms_count)

  return optax.GradientTransformationExtraArgs(init, update)


def _range_test_rate(state):
  return jnp.exp(state.log_rate)


#: Ours, untuned: name -> (optimizer, evaluate the averaged weights). Each design's
#: settings are spelled out, so the ablation runs the same at any commit. An earlier
#: round (the grids then stopped at 1e-2) also ran a faster climb (``climb_rate=0.3``):
#: it ended the climb lower and lost on every task (docs/benchmarks.md).
# the former default's settings (its 100-step horizon spelled out: the default is now 1)
FORMER = dict(climb_backoff=1.0, meta_step_size=1e-3, gamma=0.99)
# the default since the moments were shortened at the climb's end, spelled out
NEW_DEFAULT = dict(init_step_size=1e-6, climb_backoff=0.5, meta_step_size=3e-3, gamma=1.0,
                   average=0.1, climb_memory=3)
DESIGNS = {
    "adamw()": (_design(**FORMER, average=None), False),
    "adamw() + average": (_design(**FORMER, average=0.1), True),
    "climb, hold + average": (_design(climb_backoff=1.0, meta_step_size=0.0, average=0.1), True),
    "gamma=1 + average": (_design(**{**FORMER, "gamma": 1.0}, average=0.1), True),
    "climb x2, hold + average": (_design(climb_backoff=0.5, meta_step_size=0.0, average=0.1),
                                 True),
    "climb x2, gamma=1 + average": (_design(climb_backoff=0.5, meta_step_size=1e-3, gamma=1.0,
                                            average=0.1), True),
    "interpolation, climb x2, hold": (lambda: _interpolated(climb_backoff=0.5,
                                                            meta_step_size=0.0), _interpolated_eval),
    # the same interpolation with the default's meta updates (gamma = 1) after the climb
    "interpolation, climb x2, gamma=1": (lambda: _interpolated(
        climb_backoff=0.5, meta_step_size=1e-3, gamma=1.0), _interpolated_eval),
    # Adam's moments restart when the climb ends (climb_memory=0): the climb's gradients
    # no longer shrink the steps after it
    "climb x2, gamma=1 + average, restart": (_design(
        climb_backoff=0.5, meta_step_size=1e-3, gamma=1.0, average=0.1,
        climb_memory=0), True),
    "climb x2, hold + average, restart": (_design(
        climb_backoff=0.5, meta_step_size=0.0, average=0.1, climb_memory=0), True),
    # a longer average (the last ~30 % of the steps) does more of the annealing: the
    # held step size overfits less where data are few (the transformer) and the average
    # removes more of its noise where capacity is the limit (the character model)
    "climb x2, hold + average 0.3": (_design(climb_backoff=0.5, meta_step_size=0.0,
                                             average=0.3), True),
    "climb x2, gamma=1 + average 0.3": (_design(climb_backoff=0.5, meta_step_size=1e-3,
                                                gamma=1.0, average=0.3), True),
    # the default with a meta step 3x faster or slower: how fast the learned step size
    # can anneal (a cosine over T steps moves log alpha by ~4.6/T per step)
    "climb x2, gamma=1, meta 3e-3 + average": (_design(climb_backoff=0.5, meta_step_size=3e-3,
                                                       gamma=1.0, average=0.1), True),
    "climb x2, gamma=1, meta 3e-4 + average": (_design(climb_backoff=0.5, meta_step_size=3e-4,
                                                       gamma=1.0, average=0.1), True),
    # a fixed anytime decay after the climb: alpha_t = alpha_end sqrt(t_end / t)
    "climb x2, rsqrt + average": (_anytime, True),
    # schedule-free's interpolation, its average limited to the last 10 % of the steps
    "interpolation 0.1, climb x2, hold": (lambda: _interpolated(
        climb_backoff=0.5, meta_step_size=0.0, horizon=0.1), _interpolated_eval),
    "interpolation 0.1, climb x2, gamma=1": (lambda: _interpolated(
        climb_backoff=0.5, meta_step_size=1e-3, gamma=1.0, horizon=0.1), _interpolated_eval),
    # the restart, its first Adam steps taken at a tenth of the climbed step size
    "climb x2, gamma=1 + average, restart + rewarm": (_restart_rewarm, True),
    # the same with the meta step that validation chose among the meta speeds
    "climb x2, gamma=1, meta 3e-3 + average, restart + rewarm": (
        lambda: _restart_rewarm(meta_step_size=3e-3), True),
    # the interpolation at 2x the climbed step size: schedule-free, tuned, picks 3e-2 on
    # most tasks, where the interpolation's climb x2 ends at 1.1e-2 (the CNN) to 2.4e-2
    "interpolation, climb x4, hold": (lambda: _interpolated(
        climb_backoff=0.25, meta_step_size=0.0), _interpolated_eval),
    # the gradient taken halfway between the average and the iterate (schedule-free's
    # b1 = 0.5): nearer Adam's own iterate, which the networks that overfit prefer
    "interpolation b1=0.5, climb x2, hold": (lambda: _interpolated(
        b1=0.5, climb_backoff=0.5, meta_step_size=0.0), lambda s, p: _interpolated_eval(
            s, p, b1=0.5)),
    # a criterion other than the greedy meta-gradient's turn: schedule-free's rate where
    # a range test's training loss is lowest (docs/design-decisions.md), held after it
    "schedule-free, range test, hold": (_range_test, lambda s, p: s.x,
                                         dict(needs_obj=True, step_sizes_of=_range_test_rate)),
    # Adam's moments weighted by the step size (prodigy's d_t weights): the climb's
    # gradients fade as it climbs, without restarting the moments when it ends
    "climb x2, gamma=1 + average, alpha-weighted moments": (_alpha_weighted, True),
    # a held-out loss decides only whether to anneal: once it rises, the climbed step
    # size comes back and is held (the networks that overfit want it)
    "climb x2, gamma=1 + average, held once validation rises": (
        _validation_gated, True, dict(needs_validation_loss=True)),
    # the same, the rise lasting 250 steps: on the character model the first gate closed
    # on transient rises (its step size held 1.5x higher from ~10 % of the run)
    "climb x2, gamma=1 + average, held once validation rises for 250 steps": (
        lambda: _validation_gated(patience=250), True, dict(needs_validation_loss=True)),
    # the same without going back: the annealing stops where the gate closes (a late
    # rise, as on the character model, then holds a step size near the default's)
    "climb x2, gamma=1 + average, annealing stops once validation rises for 250 steps": (
        lambda: _validation_gated(patience=250, restore=False), True,
        dict(needs_validation_loss=True)),
    # the rise measured as a trend (the ~100-step average above the ~500-step one), not
    # against the lowest value so far, which noise biases low: on the character model
    # the gate above closed late on two seeds of three while its validation loss still fell
    "climb x2, gamma=1 + average, held once validation trends up for 250 steps": (
        lambda: _validation_gated(patience=250, slow_rho=0.998), True,
        dict(needs_validation_loss=True)),
    # the same, the held step size raised (x2 per 250 steps, up to x4) while the trend
    # stays up: a larger step regularizes the networks that overfit (schedule-free's
    # tuned rate there is ~8x the climbed one)
    "climb x2, gamma=1 + average, raised while validation trends up": (
        lambda: _validation_gated(patience=250, slow_rho=0.998,
                                  raise_per_step=float(np.log(2.0)) / 250, raise_cap=4.0),
        True, dict(needs_validation_loss=True)),
    # the same up to x2: at x4 one MNIST-1D seed of three lost stability (train loss 1.1)
    "climb x2, gamma=1 + average, raised up to x2 while validation trends up": (
        lambda: _validation_gated(patience=250, slow_rho=0.998,
                                  raise_per_step=float(np.log(2.0)) / 250, raise_cap=2.0),
        True, dict(needs_validation_loss=True)),
    # Adam's moments kept, counted as 3 steps when the climb ends (climb_memory=3): the
    # climb's gradients fade from the second moment within tens of steps, without a
    # restart's shock
    "climb x2, gamma=1 + average, moments shortened at the climb's end": (_design(
        climb_backoff=0.5, meta_step_size=1e-3, gamma=1.0, average=0.1, climb_memory=3), True),
    # the same with the faster meta step that validation ranks first without it
    "climb x2, gamma=1, meta 3e-3 + average, moments shortened at the climb's end": (_design(
        climb_backoff=0.5, meta_step_size=3e-3, gamma=1.0, average=0.1, climb_memory=3), True),
    # around the new default: the climb ending 3x above the turn, and a faster meta step
    "climb x3, gamma=1, meta 3e-3 + average, moments shortened at the climb's end": (_design(
        climb_backoff=1 / 3, meta_step_size=3e-3, gamma=1.0, average=0.1, climb_memory=3), True),
    "climb x2, gamma=1, meta 1e-2 + average, moments shortened at the climb's end": (_design(
        climb_backoff=0.5, meta_step_size=1e-2, gamma=1.0, average=0.1, climb_memory=3), True),
    # the default with a climb twice as fast (10x every 12 steps): from 1e-6 it reaches
    # 1e-2 by step ~50 instead of ~100, where schedule-free's linear warm-up is there by
    # step ~15 (the 10 % cells of the CNN and the character model are ~300 and 500 steps)
    "climb rate 0.2, gamma=1, meta 3e-3 + average, moments shortened at the climb's end": (
        _design(climb_backoff=0.5, meta_step_size=3e-3, gamma=1.0, average=0.1,
                climb_memory=3, climb_rate=0.2), True),
    # the default started at 1e-4 instead of 1e-6: the same climb, ~46 steps shorter
    "init 1e-4, gamma=1, meta 3e-3 + average, moments shortened at the climb's end": (
        _design(init_step_size=1e-4, climb_backoff=0.5, meta_step_size=3e-3, gamma=1.0,
                average=0.1, climb_memory=3), True),
    # the default with its trace, then also its average, stored in bfloat16 (stochastically
    # rounded): 1.5 and 2.5 parameter-sized passes less per step on a GPU
    "the default, its trace in bfloat16": (_design(
        climb_backoff=0.5, meta_step_size=3e-3, gamma=1.0, average=0.1, climb_memory=3,
        trace_dtype=jnp.bfloat16), True),
    "the default, its trace and average in bfloat16": (_design(
        climb_backoff=0.5, meta_step_size=3e-3, gamma=1.0, average=0.1, climb_memory=3,
        trace_dtype=jnp.bfloat16, average_dtype=jnp.bfloat16), True),
    # the default with its trace read off the average (gamma=None: no stored trace, state
    # 3x params instead of 4x): the trace's horizon is the average's, ~10 % of the steps
    "the default, its trace read off the average": (_design(
        climb_backoff=0.5, meta_step_size=3e-3, gamma=None, average=0.1, climb_memory=3), True),
    # and the held step size (the best design on the MLPs and the small-corpus transformer)
    "climb x2, hold + average, moments shortened at the climb's end": (_design(
        climb_backoff=0.5, meta_step_size=0.0, average=0.1, climb_memory=3), True),
    # the new default, held at the climb's end once validation trends up (the trend gate)
    # (the library's metaoptax.overfitting_gate around the drop-in)
    "the new default, held once validation trends up for 250 steps": (
        lambda: metaoptax.overfitting_gate(metaoptax.adamw(weight_decay=WEIGHT_DECAY),
                                           decay=0.99, trend_decay=0.998, patience=250), True,
        dict(needs_validation_loss=True)),
    # the same gate, quicker: ~50- and ~200-step averages and a patience of 100 steps (on
    # the MNIST-1D MLPs the gate above closes ~1,000 steps after the overfitting starts);
    # first of all the designs on validation: the library gate's defaults
    "the new default, held once validation trends up for 100 steps (quicker averages)": (
        lambda: metaoptax.overfitting_gate(metaoptax.adamw(weight_decay=WEIGHT_DECAY)), True,
        dict(needs_validation_loss=True)),
    # generalization (issue 60): the drop-in's meta-gradient taken on a minibatch of the
    # validation split (``update(..., meta_grads=...)``), so that the step size tunes the
    # held-out loss, as the rivals' rates are tuned on validation
    "the default, its meta-gradient on a held-out batch": (
        _design(**NEW_DEFAULT), True, dict(needs_validation_grads=True)),
    "the default, its meta-gradient on a held-out batch, meta 1e-3": (
        _design(**{**NEW_DEFAULT, "meta_step_size": 1e-3}), True,
        dict(needs_validation_grads=True)),
    # without validation data: the climb ending where the meta-gradient turned (x1), and a
    # longer average
    "the default, climb x1": (_design(**{**NEW_DEFAULT, "climb_backoff": 1.0}), True),
    "the default, average 0.3": (_design(**{**NEW_DEFAULT, "average": 0.3}), True),
    # a quicker start (issue 60, item 4): the climb from optax.adamw's usual rate
    "the default from 1e-3": (_design(**{**NEW_DEFAULT, "init_step_size": 1e-3}), True),
    "the default from 1e-3, its meta-gradient on a held-out batch": (
        _design(**{**NEW_DEFAULT, "init_step_size": 1e-3}), True, dict(needs_validation_grads=True)),
    "the default from 1e-4, climb rate 0.2": (
        _design(**{**NEW_DEFAULT, "init_step_size": 1e-4, "climb_rate": 0.2}), True),
    # generalization without validation data (issue 60): the step size held where the climb
    # from 1e-3 ends (no annealing after it: the greedy meta-gradient on the training loss
    # anneals toward memorization on the networks that overfit)
    "the default from 1e-3, held after the climb": (
        _design(**{**NEW_DEFAULT, "init_step_size": 1e-3, "meta_step_size": 0.0}), True),
    # the start at 10 % of a 300-step run (issue 60, item 4): the best constant rate there is
    # 1e-2 to 3e-2, which the climb from 1e-3 reaches in ~23 steps; twice as fast, ~12
    "the default from 1e-3, climb rate 0.2": (
        _design(**{**NEW_DEFAULT, "init_step_size": 1e-3, "climb_rate": 0.2}), True),
    # the state (issue 60, item 1): the drop-in's average and Adam's first moment stored in
    # bfloat16 (3 params-sized float32 buffers instead of 4), and the trace too (2.5)
    "the default from 1e-3, its average and first moment in bfloat16": (
        _design(**{**NEW_DEFAULT, "init_step_size": 1e-3, "average_dtype": jnp.bfloat16,
                   "mu_dtype": jnp.bfloat16}), True),
    "the default from 1e-3, its trace, average and first moment in bfloat16": (
        _design(**{**NEW_DEFAULT, "init_step_size": 1e-3, "average_dtype": jnp.bfloat16,
                   "mu_dtype": jnp.bfloat16, "trace_dtype": jnp.bfloat16}), True),
    # issue 60, item 1 (state at most 3 float32 buffers): the stored trace replaced by a count
    # sketch of it (it enters only through s = h . g), 1/16 and 1/256 of the params
    "the default from 1e-3, its trace count-sketched to 1/16": (
        lambda: _sketched_trace(16, **{**NEW_DEFAULT, "init_step_size": 1e-3,
                                       "climb_memory": 3}), True),
    "the default from 1e-3, its trace count-sketched to 1/256": (
        lambda: _sketched_trace(256, **{**NEW_DEFAULT, "init_step_size": 1e-3,
                                        "climb_memory": 3}), True),
    # which of the three bfloat16 buffers costs the CNN (issue 60, item 1): the trace and the
    # average alone (3.0x), and Adam's first moment alone (3.5x)
    "the default from 1e-3, its trace and average in bfloat16": (
        _design(**{**NEW_DEFAULT, "init_step_size": 1e-3, "average_dtype": jnp.bfloat16,
                   "trace_dtype": jnp.bfloat16}), True),
    "the default from 1e-3, its first moment in bfloat16": (
        _design(**{**NEW_DEFAULT, "init_step_size": 1e-3, "mu_dtype": jnp.bfloat16}), True),
    # the trace read off the average (gamma=None: 3 buffers, and no trace kernel) with a
    # longer average, whose horizon is the trace's: 30 % of the steps, and all of them
    "the default from 1e-3, its trace read off an average of 0.3": (
        _design(**{**NEW_DEFAULT, "init_step_size": 1e-3, "gamma": None, "average": 0.3}), True),
    # issue 60, item 1 (state at most 3 float32 buffers): one buffer for the trace and the
    # average ties their horizons. Which horizon each needs: the default's stored trace
    # with a uniform average (c = 1), and a trace read off averages of 0.5
    "the default from 1e-3, average 1": (
        _design(**{**NEW_DEFAULT, "init_step_size": 1e-3, "average": 1.0}), True),
    "the default from 1e-3, its trace read off an average of 0.5": (
        _design(**{**NEW_DEFAULT, "init_step_size": 1e-3, "gamma": None, "average": 0.5}), True),
    "the default from 1e-3, its trace read off an average of 1": (
        _design(**{**NEW_DEFAULT, "init_step_size": 1e-3, "gamma": None, "average": 1.0}), True),
    # the long average's trace, evaluated between the iterate and the average
    "the default from 1e-3, its trace read off an average of 1, the iterate": (
        _design(**{**NEW_DEFAULT, "init_step_size": 1e-3, "gamma": None, "average": 1.0}),
        _toward_the_average(0.0)),
    "the default from 1e-3, its trace read off an average of 1, halfway": (
        _design(**{**NEW_DEFAULT, "init_step_size": 1e-3, "gamma": None, "average": 1.0}),
        _toward_the_average(0.5)),
    "the default from 1e-3, its trace read off an average of 1, 3/4 of the way": (
        _design(**{**NEW_DEFAULT, "init_step_size": 1e-3, "gamma": None, "average": 1.0}),
        _toward_the_average(0.75)),
    # the short average's trace (its meta-gradient less noisy than the stored trace's)
    # with slower meta steps
    "the default from 1e-3, its trace read off the average, meta 1e-3": (
        _design(**{**NEW_DEFAULT, "init_step_size": 1e-3, "gamma": None,
                   "meta_step_size": 1e-3}), True),
    "the default from 1e-3, its trace read off the average, meta 3e-4": (
        _design(**{**NEW_DEFAULT, "init_step_size": 1e-3, "gamma": None,
                   "meta_step_size": 3e-4}), True),
    # the same at meta 1e-3, the climb ending 3x above the turn: the stored trace raises
    # alpha after the climb on the CNN, the short average's does not
    "the default from 1e-3, its trace read off the average, meta 1e-3, climb x3": (
        _design(**{**NEW_DEFAULT, "init_step_size": 1e-3, "gamma": None,
                   "meta_step_size": 1e-3, "climb_backoff": 1 / 3}), True),
    "the default from 1e-3, its trace read off the average, meta 1e-4": (
        _design(**{**NEW_DEFAULT, "init_step_size": 1e-3, "gamma": None,
                   "meta_step_size": 1e-4}), True),
    # the stored trace (gamma = 1: h ~ w - w_0) and no average: (w, h) determine only the
    # points between the iterate and the start
    "the default from 1e-3 without its average, evaluated 0.1 toward the trace's anchor": (
        _design(**{**NEW_DEFAULT, "init_step_size": 1e-3, "average": None}),
        _toward_the_anchor(0.1)),
    # the stored trace and the average kept, Adam's second moment factored (Adafactor's)
    "the default from 1e-3, Adam's second moment factored": (_factored_default(), True),
    # the stored trace and the average kept, Adam's first moment dropped (b1 = 0: RMSProp's
    # direction, bias-corrected; its state would be the second moment alone)
    "the default from 1e-3, b1 = 0": (_design(**{**NEW_DEFAULT, "init_step_size": 1e-3,
                                                "b1": 0.0}), True),
    "the default from 1e-3, its trace read off the average": (
        _design(**{**NEW_DEFAULT, "init_step_size": 1e-3, "gamma": None}), True),
    # issue 60, item 1: a schedule-free base (Defazio et al. 2024): Adam's first moment
    # replaced by the interpolation y = (1 - b1) z + b1 x, and the average x read off the
    # params y and the base iterate z; state z, v and the trace h (3 params-sized buffers)
    "the default from 1e-3 on a schedule-free base": (
        _schedule_free_base, lambda s, p: optax.contrib.schedule_free_eval_params(s, p)),
    # the same with schedule-free's warm-up weights (the climb's iterates weigh little)
    "the default from 1e-3 on a schedule-free base, weights max alpha^2": (
        _schedule_free_base_weighted, _interpolated_eval),
    # the learned step size there is an order of magnitude below tuned schedule-free AdamW's
    # rate on MNIST-1D: the climb ending 10x above the turn, and the trace of y (the
    # gradient's point) instead of z's
    "the default from 1e-3 on a schedule-free base, climb x10": (
        lambda: _schedule_free_base(climb_backoff=0.1),
        lambda s, p: optax.contrib.schedule_free_eval_params(s, p)),
    "the default from 1e-3 on a schedule-free base, the trace of y": (
        lambda: _schedule_free_base_weighted(weights="uniform", trace_of_y=True),
        _interpolated_eval),
    # the trace of y with the step size held after the climb (schedule-free's constant
    # rate), and with the paper's meta step
    "the default from 1e-3 on a schedule-free base, the trace of y, held": (
        lambda: _schedule_free_base_weighted(weights="uniform", trace_of_y=True,
                                             meta_step_size=0.0), _interpolated_eval),
    "the default from 1e-3 on a schedule-free base, the trace of y, meta 1e-3": (
        lambda: _schedule_free_base_weighted(weights="uniform", trace_of_y=True,
                                             meta_step_size=1e-3), _interpolated_eval),
    # the CNN (where tuned schedule-free AdamW itself trails the default): the average over
    # the last 10 % of the steps at most, and a slower interpolation (b1 = 0.95)
    "the default from 1e-3 on a schedule-free base, the trace of y, meta 1e-3, average 0.1": (
        lambda: _schedule_free_base_weighted(weights="uniform", trace_of_y=True,
                                             meta_step_size=1e-3, horizon=0.1),
        _interpolated_eval),
    "the default from 1e-3 on a schedule-free base, the trace of y, meta 1e-3, b1 = 0.95": (
        lambda: _schedule_free_base_weighted(b1=0.95, weights="uniform", trace_of_y=True,
                                             meta_step_size=1e-3),
        lambda s, p: _interpolated_eval(s, p, 0.95)),
    # and the climb ending 3x above the turn, toward tuned schedule-free AdamW's rate there
    "the default from 1e-3 on a schedule-free base, the trace of y, meta 1e-3, climb x3": (
        lambda: _schedule_free_base_weighted(weights="uniform", trace_of_y=True,
                                             meta_step_size=1e-3, climb_backoff=1 / 3),
        _interpolated_eval),
    # the trace read off the state, h = z - x = (z - y) / b1 (state z, v: 2 buffers)
    "the default from 1e-3 on a schedule-free base, its trace read off z - y": (
        _schedule_free_trace_read_off, _interpolated_eval,
        dict(step_sizes_of=lambda state: jnp.exp(state.beta))),
    # the overfitting gate around the default from 1e-3 (the gate's design above ran around
    # the former default, from 1e-6): a validation loss at every step. As the library's gate
    # was when it ran: closing, it took alpha back to the climb's end
    "the default from 1e-3, held once validation trends up (overfitting_gate)": (
        lambda: _gate_back_to_the_climbs_end(**{**NEW_DEFAULT, "init_step_size": 1e-3}), True,
        dict(needs_validation_loss=True)),
    # the library's gate (issue 60): closing, it holds the larger of the climb's end and the
    # step size it closes at (ran as a wrapper of the gate above, at c1f33cf: the same steps)
    "the default from 1e-3, held once validation trends up, never lowered": (
        lambda: metaoptax.overfitting_gate(metaoptax.adamw(
            weight_decay=WEIGHT_DECAY, **{**NEW_DEFAULT, "init_step_size": 1e-3})), True,
        dict(needs_validation_loss=True)),
    # generalization without validation data (issue 60): the weight decay kept at the climbed
    # step size while the meta-gradient anneals alpha (the held step size generalizes better
    # on the MLPs and the CNN, the annealing is needed on the character model)
    "the default from 1e-3, its weight decay at the climbed step size": (
        lambda: _decay_at_the_climbed_step_size(
            **{k: v for k, v in {**NEW_DEFAULT, "init_step_size": 1e-3}.items()
               if k != "average"}), True),
}


def design_methods(names=None) -> list[Method]:
  """Our designs (``names`` of ``DESIGNS``, default all); ``average`` is ``True`` for
  the drop-in's average, or the design's own evaluation; a third entry, if any, sets
  more fields of the ``Method``."""
  return [Method(f"ours: {name}", "metaoptax", lambda _, make=make: make(),
                 eval_params=(_averaged if average is True else average or None),
                 learned_step_size=True, info="untuned", **(more[0] if more else {}))
          for name, (make, average, *more) in DESIGNS.items() if names is None or name in names]


def adamw_grid(grid=GRID) -> Method:
  return Method("AdamW constant", "adamw", lambda lr: optax.adamw(lr, weight_decay=WEIGHT_DECAY),
                values=grid, names=tuple((f"AdamW {lr:g}", f"lr {lr:g}") for lr in grid))


def cosine_grid(steps: int, grid=GRID) -> Method:
  warmup = max(1, int(WARMUP_FRACTION * steps))

  unit = optax.warmup_cosine_decay_schedule(0.0, 1.0, warmup, steps, 0.0)

  def make(peak):  # peak is traced (the grid runs side by side): scale a unit schedule
    return optax.adamw(lambda t: peak * unit(t), weight_decay=WEIGHT_DECAY)

  return Method(f"AdamW cosine {steps}", "adamw", make, values=grid,
                names=tuple((f"cosine {steps} {lr:g}", f"peak {lr:g}") for lr in grid))


def schedule_free_grid(total: int, grid=SF_GRID) -> Method:
  c = optax.contrib
  warmup = max(1, int(WARMUP_FRACTION * total))
  return Method("schedule-free AdamW", "contrib",
                lambda lr: c.schedule_free_adamw(lr, warmup_steps=warmup,
                                                 weight_decay=WEIGHT_DECAY),
                eval_params=lambda s, p: c.schedule_free_eval_params(s, p), values=grid,
                names=tuple((f"schedule-free {lr:g}", f"lr {lr:g}") for lr in grid))


def contrib_methods() -> list[Method]:
  c = optax.contrib
  return [Method("prodigy", "contrib", lambda _: c.prodigy(weight_decay=WEIGHT_DECAY)),
          Method("D-adaptation", "contrib",
                 lambda _: c.dadapt_adamw(weight_decay=WEIGHT_DECAY))]


COSINE = "AdamW warm-up + cosine, tuned for this budget"
SCHEDULE_FREE = "schedule-free AdamW, tuned"
#: AlgoPerf's self-tuning comparison: schedule-free AdamW at the one rate of ``SF_GRID`` that
#: is best on validation over every task and budget (:func:`one_rate`), not tuned per task.
ONE_RATE = "schedule-free AdamW, one rate for all tasks"
#: Tasks that choose nothing: not the one rate of ``ONE_RATE`` (nor, since issue 60, any
#: default of ours). Their cells are run once, at the end, with what the others chose.
HELD_OUT_TASKS = ("blockwise",)
#: AdamW at the constant rate of the grid with the lowest validation *loss* at each
#: checkpoint (the tuned AdamW against which a classifier's test loss is compared).
CONSTANT_ON_LOSS = "AdamW best constant on validation loss"


def _oriented(x, higher_is_better):
  """Lower is better; NaN (diverged) is worst."""
  x = -x if higher_is_better else x
  return np.where(np.isfinite(x), x, np.inf)


def _index(steps, chunk, fraction):
  return int(round(fraction * steps / chunk))


def _cell(log, i):
  return {"test": log.test[:, i].tolist(), "val": log.val[:, i].tolist(),
          "train_loss": log.train_loss[:, i].tolist(),
          **{k: getattr(log, k)[:, i].tolist() for k in runner.OPTIONAL_METRICS
             if getattr(log, k) is not None}}


def _best(logs, i, higher):
  """The log with the best mean validation metric at record ``i``."""
  scores = [float(np.mean(_oriented(l.val[:, i], higher))) for l in logs]
  return logs[int(np.argmin(scores))]


def _best_loss(logs, i):
  """The log with the lowest mean validation loss at record ``i``."""
  return logs[int(np.argmin([float(np.mean(_oriented(l.val_loss[:, i], False)))
                             for l in logs]))]


def run_designs(name, task, designs, *, quick, seeds, progress):
  """Only ``designs`` of ours on one task (no baselines): cells and curves that
  ``--combine`` merges into an earlier full run of the task."""
  problem = task.make()
  steps = task.quick_steps if quick else task.steps
  chunk = steps // CHECKPOINTS
  ours = [log for m in design_methods(designs)
          for log in runner.train(problem, m, steps=steps, seeds=seeds, chunk=chunk,
                                  progress=progress)]
  cells = {str(f): {log.method.name: {**_cell(log, _index(steps, chunk, f)), "setting": "untuned"}
                    for log in ours} for f in FRACTIONS}
  curves = {"steps": ours[0].steps.tolist(),
            "ours": {log.method.name: {"test": log.test.tolist(), "val": log.val.tolist(),
                                       "alpha": log.step_sizes[..., 0].tolist()}
                     for log in ours}}
  return {"task": name, "steps": steps, "test_name": problem.test_name,
          "higher_is_better": problem.higher_is_better, "cells": cells, "curves": curves}


#: The baselines tuned over a grid: merging two runs of a task keeps, in each cell, the
#: one with the better mean validation metric (a run over part of a grid, ``--rates``,
#: then completes an earlier run over the rest of it).
TUNED = ("AdamW best constant", COSINE, "schedule-free AdamW, tuned")
#: The curves of the plots that come from a tuned baseline's cell at 100 % of the budget.
TUNED_CURVES = {"best_constant": "AdamW best constant", "cosine_full": COSINE}


def merge(results) -> list:
  """Results of the same task (a full run and runs of more designs) as one: a later
  result replaces what it shares with an earlier one, except the baselines tuned over a
  grid (``TUNED``), of which each cell keeps the better on validation."""
  merged = {}
  for r in results:
    if r["task"] not in merged:
      merged[r["task"]] = json.loads(json.dumps(r))
      continue
    m = merged[r["task"]]
    if m["steps"] != r["steps"]:
      raise ValueError(f"{r['task']}: runs of {m['steps']} and {r['steps']} steps")
    score = lambda cell: float(np.mean(_oriented(np.asarray(cell["val"]), r["higher_is_better"])))
    for f, cells in r["cells"].items():
      for label, cell in cells.items():
        kept = m["cells"][f].get(label)
        if label not in TUNED or kept is None or score(cell) < score(kept):
          m["cells"][f][label] = cell
          if f == "1.0":
            m["curves"].update({k: r["curves"][k] for k, tuned in TUNED_CURVES.items()
                                if tuned == label and k in r["curves"]})
    m["curves"]["ours"].update(r["curves"]["ours"])
    for method, rates in r.get("per_rate", {}).items():
      m.setdefault("per_rate", {}).setdefault(method, {}).update(rates)
  return list(merged.values())


def run_task(name, task, *, quick, seeds, progress, designs=None, cache=None,
             cached_only=False, grid=GRID, sf_grid=SF_GRID, only=None, fractions=FRACTIONS):
  """Every method on one task (of ours, ``designs`` or all); returns the scores at each
  budget and the curves. The baselines are tuned over ``grid`` (AdamW, the cosine's
  peak) and ``sf_grid`` (schedule-free); an empty grid is not run. With ``cache`` (a folder), each method's logs are kept there
  and a rerun trains only the methods it lacks; with ``cached_only`` too, the tuned
  cosine of a budget that the cache lacks is left out of the cells (reported as not
  run); every other method must be there. The cells are those of ``fractions`` of the
  budget. With ``only="cosine"``, only the tuned cosine of those budgets is trained and
  scored (to combine with an earlier run, :func:`merge`); with ``only="tuned"``, only the
  baselines tuned over the grids (a run over part of them, to combine likewise)."""
  if only not in (None, "cosine", "tuned", "schedule-free"):
    raise ValueError(f"only must be None, 'cosine', 'tuned' or 'schedule-free', not {only!r}")
  problem = task.make()
  steps = task.quick_steps if quick else task.steps
  chunk = steps // CHECKPOINTS

  def train(method, n=steps):
    key = f"{name}-{method.name}-{n}-{seeds}{'-quick' if quick else ''}".replace(" ", "_")
    logs = runner.train_cached(cache, key.replace("/", "_"), problem, method, steps=n,
                               seeds=seeds, chunk=chunk, progress=progress,
                               cached_only=cached_only)
    if logs is None and not method.name.startswith("AdamW cosine"):
      raise ValueError(f"--cached-only: {key} is not in {cache}")
    return logs

  higher = problem.higher_is_better
  if only == "cosine":
    ours, constant, schedule_free, contrib = [], [], [], []
  elif only == "schedule-free":  # its grid alone, for the cells of every rate (ONE_RATE)
    ours, constant, contrib = [], [], []
    schedule_free = train(schedule_free_grid(steps, sf_grid))
  else:
    # a run over part of the grids (only="tuned") trains the tuned baselines alone
    tuned_only = only == "tuned"
    ours = [] if tuned_only else [log for m in design_methods(designs) for log in train(m)]
    # a grid that --rates leaves empty is not run (its cells come from another run)
    constant = train(adamw_grid(grid)) if grid else []
    schedule_free = train(schedule_free_grid(steps, sf_grid)) if sf_grid else []
    contrib = [] if tuned_only else [log for m in contrib_methods() for log in train(m)]
  cosine = {f: train(cosine_grid(int(f * steps), grid), int(f * steps))
            if grid and only != "schedule-free" else None for f in fractions}
  cosine = {f: logs for f, logs in cosine.items() if logs is not None}

  cells = {}
  for f in fractions:
    i = _index(steps, chunk, f)
    rows = {"AdamW best constant": (_best(constant, i, higher), i)} if constant else {}
    if constant and constant[0].val_loss is not None:
      rows[CONSTANT_ON_LOSS] = (_best_loss(constant, i), i)
    if f in cosine:
      rows[COSINE] = (_best(cosine[f], -1, higher), -1)
    if schedule_free:
      rows[SCHEDULE_FREE] = (_best(schedule_free, i, higher), i)
    rows.update({log.method.name: (log, i) for log in contrib + ours})
    cells[f] = {label: {**_cell(log, j), "setting": log.method.info or ""}
                for label, (log, j) in rows.items()}
  curves = {**({"steps": contrib[0].steps.tolist()} if contrib else {}),
            "ours": {log.method.name: {"test": log.test.tolist(), "val": log.val.tolist(),
                                       "alpha": log.step_sizes[..., 0].tolist()}
                     for log in ours},
            **({"best_constant": {"name": _best(constant, -1, higher).method.name,
                                  "test": _best(constant, -1, higher).test.tolist()}}
               if constant else {}),
            **({"cosine_full": {"name": _best(cosine[1.0], -1, higher).method.name,
                                "test": _best(cosine[1.0], -1, higher).test.tolist()}}
               if 1.0 in cosine else {})}
  # every rate's cells (the grid's logs are in its order), for the one rate of ONE_RATE
  per_rate = ({SCHEDULE_FREE: {f"{lr:g}": {str(f): _cell(log, _index(steps, chunk, f))
                                           for f in fractions}
                               for lr, log in zip(sf_grid, schedule_free)}}
              if schedule_free else {})
  return {"task": name, "steps": steps, "test_name": problem.test_name,
          "higher_is_better": higher, "cells": {str(f): c for f, c in cells.items()},
          "curves": curves, "per_rate": per_rate}


def warmup_check(*, quick, seeds, progress):
  """Digits: train loss of the default from every start at step 500, against the best
  AdamW of the grid at step 300 (records every 10 steps)."""
  problem = digits.make_problem(VALIDATION)
  steps, chunk = (100, 10) if quick else (600, 10)
  grid = runner.train(problem, adamw_grid(), steps=steps, seeds=seeds, chunk=chunk,
                      progress=progress)
  at = lambda log, step: log.train_loss[:, step // chunk] - problem.train_loss_floor
  target_step, check_step = (50, 80) if quick else (300, 500)
  best = min(grid, key=lambda l: float(np.mean(at(l, target_step))))
  target = float(np.mean(at(best, target_step)))

  def set_start(state, start):
    is_meta = lambda s: isinstance(s, metaoptax.MetaOptimizeState)
    return jax.tree.map(lambda s: s._replace(meta_params=jax.tree.map(
        lambda b: jnp.full_like(b, jnp.log(start)), s.meta_params)) if is_meta(s) else s,
                        state, is_leaf=is_meta)

  rows = []
  for variant, make in WARMUP_VARIANTS.items():
    sweep = runner.train(problem, Method(
        f"{variant}, start sweep", "metaoptax", lambda _, make=make: make(),
        learned_step_size=True, values=WARMUP_STARTS, prepare=set_start,
        names=tuple((f"from {a:g}", f"start {a:g}") for a in WARMUP_STARTS)),
                         steps=steps, seeds=seeds, chunk=chunk, progress=progress)
    for start, log in zip(WARMUP_STARTS, sweep):
      loss = (log.train_loss - problem.train_loss_floor).mean(0)
      reached = np.nonzero(loss <= target)[0]
      rows.append({"variant": variant, "start": start,
                   "loss_at_check": float(loss[check_step // chunk]),
                   "first_step_at_target": int(log.steps[reached[0]]) if reached.size else None,
                   "loss": loss.tolist(), "alpha": log.step_sizes[..., 0].mean(0).tolist()})
  return {"target_step": target_step, "check_step": check_step, "best_rate": best.method.info,
          "target": target, "steps": grid[0].steps.tolist(), "rows": rows,
          "grid_loss": {l.method.info: (l.train_loss - problem.train_loss_floor).mean(0).tolist()
                        for l in grid}}




def _fmt(values):
  v = np.asarray(values, float)
  return f"{np.mean(v):.3f} ± {np.std(v):.3f}"


def task_table(result) -> list[str]:
  higher = result["higher_is_better"]
  steps = result["steps"]
  head = [f"## {result['task']} ({steps} steps; {result['test_name']}, mean ± std of the seeds)",
          "", "| method | " + " | ".join(f"{int(f * 100)} % ({int(f * steps)})" for f in FRACTIONS)
          + " | train loss at 100 % |", "|---|" + "---|" * (len(FRACTIONS) + 1)]
  cells = result["cells"]
  labels = list(dict.fromkeys(k for f in FRACTIONS for k in cells[str(f)]))
  winners = {}
  for f in FRACTIONS:
    c = cells[str(f)]
    winners[f] = min(c, key=lambda k: float(np.mean(_oriented(np.asarray(c[k]["test"]),
                                                                    higher))))
  lines = []
  for label in labels:
    row = []
    for f in FRACTIONS:
      if label not in cells[str(f)]:
        row.append("not run")
        continue
      c = cells[str(f)][label]
      text = _fmt(c["test"])
      if label == winners[f]:
        text = f"**{text}**"
      if c["setting"] and not label.startswith("ours") and label not in ("prodigy",
                                                                          "D-adaptation"):
        text += f" ({c['setting']})"
      row.append(text)
    last = cells["1.0"].get(label)
    train_loss = f"{np.mean(last['train_loss']):.3g}" if last else "not run"
    lines.append(f"| {label} | " + " | ".join(row) + f" | {train_loss} |")
  if any(c == "not run" for line in lines for c in line.split(" | ")):
    lines += ["", "not run: the method was not trained for that budget (the command says why); "
              "the targets compare with the rivals that were."]
  return head + lines + [""]


def loss_table(result) -> list[str]:
  """The test loss (a classifier's plain cross-entropy) of every method that recorded it, at
  each budget; empty for a task without it. The lowest of each column is in bold."""
  cells = result["cells"]
  labels = [k for k in dict.fromkeys(k for f in FRACTIONS for k in cells[str(f)])
            if all("test_loss" in cells[str(f)].get(k, {"test_loss": 0}) for f in FRACTIONS)
            and any(k in cells[str(f)] for f in FRACTIONS)]
  if not labels:
    return []
  steps = result["steps"]
  lines = [f"### {result['task']}: test loss (cross-entropy, mean ± std of the seeds)", "",
           "| method | " + " | ".join(f"{int(f * 100)} % ({int(f * steps)})" for f in FRACTIONS)
           + " |", "|---|" + "---|" * len(FRACTIONS)]
  lowest = {f: min((k for k in labels if k in cells[str(f)]),
                   key=lambda k: float(np.mean(cells[str(f)][k]["test_loss"])))
            for f in FRACTIONS}
  for label in labels:
    row = []
    for f in FRACTIONS:
      c = cells[str(f)].get(label)
      if c is None:
        row.append("not run")
        continue
      text = _fmt(c["test_loss"])
      row.append(f"**{text}**" if label == lowest[f] else text)
    lines.append(f"| {label} | " + " | ".join(row) + " |")
  return lines + [""]


RIVALS = (COSINE, "schedule-free AdamW, tuned", "prodigy")


def _target_cell(c, label, split, higher):
  """For the method ``label`` in one cell ``c``: the best of ``RIVALS`` other than itself
  (on ``split``), whether ``label`` is within one seed std of it or better, and whether
  it is not worse than the best constant AdamW (within one std or better)."""
  ours = np.asarray(c[label][split])
  rivals = [k for k in RIVALS if k in c and k != label]
  best = min(rivals, key=lambda k: float(np.mean(_oriented(np.asarray(c[k][split]), higher))))
  theirs = np.asarray(c[best][split])
  gap = float(np.mean(_oriented(ours, higher)) - np.mean(_oriented(theirs, higher)))
  within = gap <= max(ours.std(), theirs.std())
  const = np.asarray(c["AdamW best constant"][split])
  not_worse = float(np.mean(_oriented(ours, higher)) - np.mean(_oriented(const, higher))) <= max(
      ours.std(), const.std())
  return best, within, not_worse


def target_lines(result, design, split="test") -> list:
  """Whether ``design`` is within one seed std of, or better than, the best of the tuned
  cosine, tuned schedule-free and prodigy, and not worse than the best constant, on the
  ``split`` ("test", or "val": the same criteria on the validation split)."""
  return [(f, *_target_cell(result["cells"][str(f)], f"ours: {design}", split,
                            result["higher_is_better"])) for f in FRACTIONS]


def target_for_each_method(results) -> list[str]:
  """The issue's first target applied to every method, ours (the library's default,
  :func:`default_in`) and each rival against the best of the *other* rivals (test split):
  how many budgets of each task it meets, and the tasks where it meets all four. It
  measures how far the target lies beyond what tuning each baseline for each budget
  reaches; it does not replace the target."""
  ours = "metaoptax.adamw()"
  methods = [ours, *RIVALS]
  lines = ["## The first target applied to each method (test split)", "",
           "Each method against the best of the rivals other than itself (tuned cosine, tuned "
           "schedule-free, prodigy), within one seed std or better: budgets met of 4 "
           "(metaoptax.adamw(): the library's default; † the former default, where the "
           "task did not run the current one).", "",
           "| task | " + " | ".join(methods) + " |", "|---|" + "---|" * len(methods)]
  every = {m: 0 for m in methods}
  for r in results:
    label = {ours: f"ours: {default_in(r)}"}
    met = {m: sum(_target_cell(r["cells"][str(f)], label.get(m, m), "test",
                               r["higher_is_better"])[1] for f in FRACTIONS)
           for m in methods if label.get(m, m) in r["cells"]["1.0"]}
    for m, n in met.items():
      every[m] += n == len(FRACTIONS)
    mark = "" if default_in(r) == LIBRARY_DEFAULT else " †"
    lines.append(f"| {r['task']} | " + " | ".join(
        str(met.get(m, "—")) + (mark if m == ours else "") for m in methods) + " |")
  lines += ["| tasks where all four are met | "
            + " | ".join(f"{every[m]} / {len(results)}" for m in methods) + " |", ""]
  return lines


def ablation(results) -> list[str]:
  """Mean validation metric of each design at each checkpoint (— where a task did not run
  it), the best of each row in bold."""
  designs = designs_run(results, every=False)
  lines = ["## Ablation of our designs (validation metric: accuracy ↑ or bits/char ↓)", "",
           "| task | budget | " + " | ".join(designs) + " |", "|---|---|" + "---|" * len(designs)]
  for r in results:
    for f in FRACTIONS:
      c = r["cells"][str(f)]
      vals = [float(np.mean(c[f"ours: {d}"]["val"])) if f"ours: {d}" in c else np.nan
              for d in designs]
      best = (np.nanargmax if r["higher_is_better"] else np.nanargmin)(vals)
      cells = ["—" if np.isnan(v) else f"**{v:.4f}**" if j == best else f"{v:.4f}"
               for j, v in enumerate(vals)]
      lines.append(f"| {r['task']} | {int(f * 100)} % | " + " | ".join(cells) + " |")
  return lines + [""]


def loss_ablation(results) -> list[str]:
  """Mean validation loss of each design at each checkpoint, on the tasks that recorded
  it (— where a task did not run the design), the lowest of each row in bold."""
  results = [r for r in results if any("val_loss" in c for c in r["cells"]["1.0"].values())]
  designs = [d for d in designs_run(results, every=False)
             if any("val_loss" in r["cells"]["1.0"].get(f"ours: {d}", {}) for r in results)]
  if not designs:
    return []
  lines = ["## Ablation of our designs (validation loss ↓)", "",
           "| task | budget | " + " | ".join(designs) + " |", "|---|---|" + "---|" * len(designs)]
  for r in results:
    for f in FRACTIONS:
      c = r["cells"][str(f)]
      vals = [float(np.mean(c[f"ours: {d}"]["val_loss"]))
              if "val_loss" in c.get(f"ours: {d}", {}) else np.nan for d in designs]
      best = np.nanargmin(vals)
      cells = ["—" if np.isnan(v) else f"**{v:.4f}**" if j == best else f"{v:.4f}"
               for j, v in enumerate(vals)]
      lines.append(f"| {r['task']} | {int(f * 100)} % | " + " | ".join(cells) + " |")
  return lines + [""]


def plot_task(result, out):
  """The held-out metric and the learned α(t) of the library's default, of its overfitting
  gate and of the former default (every other design is in the tables), against the
  tuned constant and cosine."""
  plt = _report.pyplot()
  curves = result["curves"]
  steps = np.asarray(curves["steps"])
  fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.5))
  shown = {f"ours: {LIBRARY_DEFAULT}": ("metaoptax.adamw() (the default)", "C3", 2.2),
           f"ours: {LIBRARY_GATE}": ("metaoptax.overfitting_gate(metaoptax.adamw())", "C2",
                                     1.4),
           **{f"ours: {d}": (label, color, 1.2) for d, label, color in zip(
               FORMER_DEFAULTS, ("the default from 1e-6", "an older default"), ("C0", "C7"))}}
  ours = {k: v for k, v in curves["ours"].items() if k in shown}
  for name, c in ours.items():
    label, color, width = shown[name]
    ax1.plot(steps, np.mean(c["test"], 0), color=color, lw=width, label=label)
    ax2.plot(steps, np.exp(np.mean(np.log(np.maximum(c["alpha"], 1e-12)), 0)),
             color=color, lw=width, label=label)
  for key, style in (("best_constant", ":"), ("cosine_full", "--")):
    if key in curves:
      ax1.plot(steps, np.mean(curves[key]["test"], 0), style, color="k",
               label=curves[key]["name"])
  if "cosine_full" in curves:
    peak = float(curves["cosine_full"]["name"].split()[-1])
    total = result["steps"]
    warm = max(1, int(WARMUP_FRACTION * total))
    schedule = optax.warmup_cosine_decay_schedule(0.0, peak, warm, total, 0.0)
    ax2.plot(steps, [float(schedule(s)) for s in steps], "--", color="k",
             label=f"tuned cosine (peak {peak:g})")
  ax1.set(xlabel="step", ylabel=result["test_name"], title=f"{result['task']}: held-out metric")
  if not ours:  # none of the shown designs ran: the axes' own limits
    pass
  elif result["higher_is_better"]:
    top = max(np.max(np.mean(c["test"], 0)) for c in ours.values())
    ax1.set_ylim(top - 0.15, top + 0.02)
  else:
    low = min(np.min(np.mean(c["test"], 0)) for c in ours.values())
    ax1.set_ylim(low - 0.05, low + 0.8)
  ax2.set(xlabel="step", ylabel="step size", yscale="log", ylim=(1e-7, 1e-1),
          title="learned α(t), mean of the seeds")
  ax1.legend(fontsize=7)
  ax2.legend(fontsize=7)
  _report.save_figure(fig, out / f"lr_free_{result['task']}.png")


def plot_warmup(warm, out):
  plt = _report.pyplot()
  fig, ax = plt.subplots(figsize=(7, 4.5))
  steps = np.asarray(warm["steps"])
  for info, loss in warm["grid_loss"].items():
    ax.plot(steps, loss, ":", lw=1, label=f"AdamW {info}")
  ax.axhline(warm["target"], color="k", lw=0.8,
             label=f"best AdamW at step {warm['target_step']}")
  ax.axvline(warm["check_step"], color="grey", lw=0.8)
  for i, row in enumerate(warm["rows"]):
    if "loss" in row:
      style = "-" if row.get("variant", "metaoptax.adamw()") == "metaoptax.adamw()" else "--"
      ax.plot(steps, row["loss"], style, color=f"C{i % len(WARMUP_STARTS)}", lw=1.2,
              label=f"{row.get('variant', 'metaoptax.adamw()')} from {row['start']:g}")
  ax.set(yscale="log", xlabel="step", ylabel="train loss − floor",
         title=f"warm-up from every start ({', '.join(f'{n:g}' for n in WARMUP_STARTS)})")
  ax.legend(fontsize=6, ncol=2)
  _report.save_figure(fig, out / "lr_free_warmup.png")


def designs_run(results, every=True) -> list[str]:
  """Our designs that every task in ``results`` ran (``every``) or any task ran, in the
  order in which they first appear."""
  labels = list(dict.fromkeys(k[len("ours: "):] for r in results for k in r["cells"]["1.0"]
                              if k.startswith("ours: ")))
  test = all if every else any
  return [d for d in labels if test(f"ours: {d}" in r["cells"]["1.0"] for r in results)]


#: The design that ``metaoptax.adamw()``'s defaults are: the design chosen on validation over
#: digits, MNIST-1D, the CNN and the character model, started at ``optax.adamw``'s usual
#: rate (chosen on the short tasks ``digits-300`` and ``mnist1d-300``). The report also names
#: the validation choice over the tasks it combines, when that differs.
LIBRARY_DEFAULT = "the default from 1e-3"
#: The design that ``metaoptax.overfitting_gate(metaoptax.adamw())``'s defaults are (first
#: of all the designs on validation; it reads a validation loss at every step).
LIBRARY_GATE = "the new default, held once validation trends up for 100 steps (quicker averages)"
#: ``metaoptax.overfitting_gate(metaoptax.adamw())`` with the library's defaults (the default
#: from 1e-3): the README's first example, fed a validation minibatch's loss every step.
LIBRARY_GATED_DEFAULT = "the default from 1e-3, held once validation trends up, never lowered"
#: The defaults before it, latest first, reported (marked †) on a task that did not run the
#: current one: the same design started at 1e-6, then Adam's moments kept as they are when
#: the climb ends (the one design of ours that ran on the transformers, which need an
#: accelerator).
FORMER_DEFAULTS = ("climb x2, gamma=1, meta 3e-3 + average, moments shortened at the climb's end",
                   "climb x2, gamma=1 + average")


#: ``--quick`` (a smoke run, not results): the library's two designs, the grids' rates
#: among these, unless ``--designs`` or ``--rates`` say otherwise, and one seed.
QUICK_DESIGNS = (LIBRARY_DEFAULT, LIBRARY_GATE)
QUICK_RATES = (1e-3, 1e-1)
QUICK_SEEDS = 1


def default_in(result) -> str:
  """The library's default, or the latest former default that ``result``'s task ran."""
  return next((d for d in (LIBRARY_DEFAULT, *FORMER_DEFAULTS)
               if f"ours: {d}" in result["cells"]["1.0"]), FORMER_DEFAULTS[-1])


def validation_scores(results) -> dict:
  """Per design of ours, on the validation split over every task and budget: the cells not
  worse than the best constant, the cells within one std of the strongest rival (the
  issue's two targets), and the mean rank among our designs (0 is best)."""
  designs = designs_run(results)
  ranks = {d: [] for d in designs}
  for r in results:
    for f in FRACTIONS:
      c = r["cells"][str(f)]
      scores = {d: float(np.mean(_oriented(np.asarray(c[f"ours: {d}"]["val"]),
                                           r["higher_is_better"]))) for d in designs}
      for rank, d in enumerate(sorted(scores, key=scores.get)):
        ranks[d].append(rank)
  out = {}
  for d in designs:
    cells = [cell for r in results for cell in target_lines(r, d, split="val")]
    out[d] = (sum(c[3] for c in cells), sum(c[2] for c in cells), float(np.mean(ranks[d])))
  return out


def reads_validation(design: str) -> bool:
  """Whether ``design`` needs a validation loss at every step (``optax.adamw``'s contract
  does not give one: such a design cannot be the drop-in's default)."""
  more = DESIGNS[design][2:] if design in DESIGNS else ()
  return bool(more and more[0].get("needs_validation_loss"))


def chosen_design(results, drop_in: bool = False) -> str:
  """The default, chosen without the test split: on validation, the design of ours with
  the most cells not worse than the best constant AdamW (the target that must always
  hold), then the most cells within one std of the strongest rival, then the best mean
  rank; with ``drop_in``, among the designs that read no validation loss."""
  scores = validation_scores(results)
  eligible = [d for d in scores if not (drop_in and reads_validation(d))]
  return max(eligible, key=lambda d: (scores[d][0], scores[d][1], -scores[d][2]))


def plot_summary(results, out):
  """The headline figure: each task's held-out metric at every budget, ours (the library's
  default, untuned; the former default where the task did not run it) against the
  per-budget tuned cosine, tuned schedule-free and prodigy."""
  plt = _report.pyplot()
  fig, axes = plt.subplots(1, len(results), figsize=(3.4 * len(results), 3.4), squeeze=False)
  for ax, r in zip(axes[0], results):
    design = default_in(r)
    rows = {f"ours: {design}": ("metaoptax.adamw() (untuned)" if design == LIBRARY_DEFAULT
                                else "the former default (untuned)"),
            COSINE: "AdamW + cosine, tuned per budget",
            "schedule-free AdamW, tuned": "schedule-free AdamW, tuned",
            "prodigy": "prodigy", "AdamW best constant": "AdamW, best constant"}
    budgets = [int(f * r["steps"]) for f in FRACTIONS]
    for key, label in rows.items():
      ran = [(b, r["cells"][str(f)][key]["test"]) for b, f in zip(budgets, FRACTIONS)
             if key in r["cells"][str(f)]]
      if not ran:  # a design that this task did not run
        continue
      x, v = [b for b, _ in ran], np.asarray([t for _, t in ran], float)
      colors = {COSINE: "C0", "schedule-free AdamW, tuned": "C1", "prodigy": "C2",
                "AdamW best constant": "0.5"}
      style = (dict(lw=2.4, color="C3", ls="-" if design == LIBRARY_DEFAULT else "--")
               if key.startswith("ours") else dict(lw=1.1, color=colors[key]))
      ax.errorbar(x, v.mean(1), yerr=v.std(1), marker="o", ms=3, capsize=2,
                  label=label, **style)
    title = r["task"] + ("" if design == LIBRARY_DEFAULT else "\n(ours, dashed: the former default)")
    ax.set(xscale="log", xlabel="budget (steps)", title=title, ylabel=r["test_name"])
    ax.set_xticks(budgets, [f"{b:,}" for b in budgets], fontsize=7)
    ax.minorticks_off()
    # the view: ours and the two tuned rivals beyond 10 % of the budget (prodigy and the
    # constant may sit far off and are then cut)
    shown = [np.mean(r["cells"][str(f)][key]["test"]) for f in FRACTIONS[1:]
             for key in (f"ours: {design}", COSINE, "schedule-free AdamW, tuned")
             if key in r["cells"][str(f)]]
    low, high = min(shown), max(shown)
    pad = 0.25 * (high - low) + (0.005 if r["higher_is_better"] else 0.02)
    ax.set_ylim(low - pad, high + pad)
  axes[0][0].legend(fontsize=7)
  _report.save_figure(fig, out / "lr_free_summary.png")


def one_rate(results, method=SCHEDULE_FREE):
  """AlgoPerf's self-tuning choice: the rate of ``method``'s grid with the lowest mean
  relative regret on validation (against the best rate of each task and budget) over the
  tasks of ``results`` that recorded every rate (``per_rate``), less ``HELD_OUT_TASKS``.
  Returns the rate (``None`` if no task recorded one) and each rate's mean regret."""
  tasks = [r for r in results if method in r.get("per_rate", {})
           and r["task"] not in HELD_OUT_TASKS]
  if not tasks:
    return None, {}
  rates = sorted(set.intersection(*(set(r["per_rate"][method]) for r in tasks)), key=float)
  regrets = {q: [] for q in rates}
  for r in tasks:
    for f in FRACTIONS:
      scores = {q: float(np.mean(_oriented(np.asarray(r["per_rate"][method][q][str(f)]["val"]),
                                           r["higher_is_better"]))) for q in rates}
      best = min(scores.values())
      for q in rates:
        regrets[q].append((scores[q] - best) / abs(best))
  regret = {q: float(np.mean(v)) for q, v in regrets.items()}
  return min(rates, key=regret.get), regret


def with_one_rate(results) -> tuple[list, list[str]]:
  """``results`` with the cells of ``ONE_RATE`` (:func:`one_rate`) added on every task that
  recorded its rate, and the report's section on it (empty if no task recorded the rates)."""
  rate, regret = one_rate(results)
  if rate is None:
    return results, []
  results = json.loads(json.dumps(results))
  chooses = [r["task"] for r in results if SCHEDULE_FREE in r.get("per_rate", {})
             and r["task"] not in HELD_OUT_TASKS]
  for r in results:
    cells = r.get("per_rate", {}).get(SCHEDULE_FREE, {}).get(rate)
    for f in FRACTIONS if cells else ():
      r["cells"][str(f)][ONE_RATE] = {**cells[str(f)], "setting": f"lr {rate}"}
  lines = [f"## AlgoPerf's self-tuning comparison: {ONE_RATE}", "",
           f"Schedule-free AdamW at the one rate of its grid with the lowest mean relative "
           f"regret on validation over {', '.join(chooses)} and every budget: **{rate}** "
           f"(held out, run once with it: {', '.join(HELD_OUT_TASKS)}).", "",
           "| rate | " + " | ".join(regret) + " |", "|---|" + "---|" * len(regret),
           "| mean relative regret (validation) | "
           + " | ".join(f"{v:.4f}" for v in regret.values()) + " |", "",
           "| task | budget | metaoptax.adamw() (test) | one rate (test) | within one std or "
           "better |", "|---|---|---|---|---|"]
  for r in results:
    ours = f"ours: {default_in(r)}"
    for f in FRACTIONS if ONE_RATE in r["cells"]["1.0"] else ():
      c = r["cells"][str(f)]
      a, b = np.asarray(c[ours]["test"]), np.asarray(c[ONE_RATE]["test"])
      gap = float(np.mean(_oriented(a, r["higher_is_better"]))
                  - np.mean(_oriented(b, r["higher_is_better"])))
      mark = "" if default_in(r) == LIBRARY_DEFAULT else " †"
      lines.append(f"| {r['task']}{mark} | {int(f * 100)} % | {_fmt(a)} | {_fmt(b)} | "
                   f"{'yes' if gap <= max(a.std(), b.std()) else 'NO'} |")
  return results, lines + [""]


def alone_and_gated(results) -> list[str]:
  """The library's default alone and gated by a validation loss (``LIBRARY_GATED_DEFAULT``,
  the README's first example), on the tasks that ran both: budgets within one std of the
  strongest rival and not worse than the best constant, of 4 each, and the totals over the
  tasks that choose (the held-out tasks, ``HELD_OUT_TASKS``, counted apart). Empty when no
  task ran both."""
  alone, gated = f"ours: {LIBRARY_DEFAULT}", f"ours: {LIBRARY_GATED_DEFAULT}"
  both = [r for r in results if alone in r["cells"]["1.0"] and gated in r["cells"]["1.0"]]
  if not both:
    return []
  lines = [f"## The library's default alone and gated by a validation loss ({LIBRARY_GATED_DEFAULT})",
           "", "Budgets of 4 within one std of the strongest rival / not worse than the best "
           "constant (test split).", "",
           "| task | alone | gated |", "|---|---|---|"]
  totals = {False: [0, 0, 0, 0, 0], True: [0, 0, 0, 0, 0]}
  for r in both:
    met = [[sum(cell[i] for cell in target_lines(r, d[len("ours: "):])) for i in (2, 3)]
           for d in (alone, gated)]
    held_out = r["task"] in HELD_OUT_TASKS
    total = totals[held_out]
    total[0] += 1
    for j, n in enumerate(met[0] + met[1]):
      total[1 + j] += n
    lines.append(f"| {r['task']}{' (held out)' if held_out else ''} | {met[0][0]} / {met[0][1]} "
                 f"| {met[1][0]} / {met[1][1]} |")
  for held_out, (n, a_in, a_nw, g_in, g_nw) in totals.items():
    if n:
      lines.append(f"| {'held-out tasks' if held_out else 'the tasks that choose'} ({n} × 4 "
                   f"budgets) | {a_in} / {a_nw} of {4 * n} | {g_in} / {g_nw} of {4 * n} |")
  return lines + [""]


def report(results, warm, commits, seeds, command) -> list[str]:
  """The markdown report of ``results`` (one per task) and the warm-up check."""
  design = LIBRARY_DEFAULT
  lines = ["# Learning-rate-free: `metaoptax.adamw()` on held-out metrics", "",
           f"Commit(s) `{', '.join(sorted(set(commits)))}`; {seeds} seeds, mean ± std; "
           f"command: `{command}`. The winner of each column is in bold (test metric). "
           "Settings in brackets were chosen on the validation split.", ""]
  results, self_tuning = with_one_rate(results)
  for r in results:
    lines += task_table(r) + loss_table(r)
  if results:
    lines += ablation(results) + loss_ablation(results)
    everything = designs_run(results, every=False)
    complete = [r for r in results if all(f"ours: {d}" in r["cells"]["1.0"] for d in everything)]
    # tasks that ran one design alone (ours against the baselines) choose nothing
    compared = [r for r in results if sum(k.startswith("ours: ") for k in r["cells"]["1.0"]) > 1]
    groups = [(results, "every task")]
    for group, over in ((compared, "the tasks that ran more than one design"),
                        (complete, "the tasks that ran every design")):
      if len(group) not in (0, len(results)) and all(len(g) != len(group) for g, _ in groups):
        groups.append((group, f"{over} ({', '.join(r['task'] for r in group)})"))
    for group, over in groups:
      scores = validation_scores(group)
      if not scores:  # no design of ours ran on every task of the group
        continue
      chosen = chosen_design(group)
      lines += [f"## The default, chosen on the validation split of {over}", "",
                "| design | cells not worse than the best constant | cells within one std of "
                "the strongest rival | mean rank among ours |", "|---|---|---|---|"]
      lines += [f"| {d} | {a} / {n} | {b} / {n} | {rank:.2f} |"
                for d, (a, b, rank) in scores.items() for n in [4 * len(group)]]
      drop_in = chosen_design(group, drop_in=True)
      lines += ["", f"Chosen (most cells not worse than the best constant, then most within "
                f"one std of the strongest rival, then mean rank): **{chosen}**"
                + ("" if drop_in == chosen else
                   f"; among the designs that read no validation loss (a drop-in's "
                   f"contract): **{drop_in}**")
                + ("." if drop_in == design else f"; the library's default is **{design}**."),
                ""]
    lines += [f"## Targets for the library's default ({design})", "",
              "| task | budget | strongest rival (test) | within one std or better | "
              "not worse than the best constant |", "|---|---|---|---|---|"]
    for r in results:
      former = "" if default_in(r) == design else " (the former default: not run with this one)"
      for f, rival, within, not_worse in target_lines(r, default_in(r)):
        lines.append(f"| {r['task']}{former} | {int(f * 100)} % | {rival} | "
                     f"{'yes' if within else 'NO'} | {'yes' if not_worse else 'NO'} |")
    lines += [""] + alone_and_gated(results) + target_for_each_method(results) + self_tuning
  lines.append("")
  if warm is not None:
    lines += [f"## Warm-up (digits): train loss − floor at step {warm['check_step']} against "
              f"the best AdamW ({warm['best_rate']}) at step {warm['target_step']}: "
              f"{warm['target']:.4g}", "",
              "| variant | start | loss at the check | first step at the target |",
              "|---|---|---|---|"]
    lines += [f"| {r.get('variant', 'metaoptax.adamw()')} | {r['start']:g} | "
              f"{r['loss_at_check']:.4g} | {r['first_step_at_target']} |" for r in warm["rows"]]
  return lines


def main(argv=None):
  args = _report.task_arguments(__doc__.splitlines()[0], TASKS, OUT)
  args.add_argument("--no-warmup", action="store_true", help="skip the warm-up check")
  args.add_argument("--warmup-only", action="store_true",
                    help="only the warm-up check (to --combine with earlier runs)")
  args.add_argument("--designs", nargs="+", choices=list(DESIGNS), metavar="DESIGN",
                    help="run only these designs of ours (no baselines), to --combine with "
                         "an earlier full run")
  args.add_argument("--with-baselines", action="store_true",
                    help="with --designs: a full run (the baselines too) with only these designs")
  args.add_argument("--cache", type=pathlib.Path, metavar="DIR",
                    help="keep each method's logs in DIR; a rerun trains only what DIR lacks")
  args.add_argument("--cached-only", action="store_true",
                    help="with --cache: train nothing; report what the cache holds (a tuned "
                         "cosine it lacks is reported as not run)")
  args.add_argument("--rates", nargs="+", type=float, metavar="RATE",
                    help="tune the baselines over these rates of GRID and SF_GRID only (to "
                         "--combine with a run over the rest: each cell keeps the better on "
                         "validation); only the tuned baselines are trained")
  args.add_argument("--cosine-only", nargs="+", type=float, choices=FRACTIONS,
                    metavar="FRACTION",
                    help="train only the cosine tuned for these fractions of the budget (to "
                         "--combine with an earlier run that lacks them)")
  args.add_argument("--schedule-free-only", action="store_true",
                    help="train only schedule-free AdamW's grid, every rate's cells kept (to "
                         "--combine: AlgoPerf's one rate for all tasks)")
  args.add_argument("--combine", nargs="+", type=pathlib.Path, metavar="JSON",
                    help="no training: one report of the lr_free.json files of earlier runs")
  args = args.parse_args(argv)
  grid, sf_grid = ((GRID, SF_GRID) if not args.rates else
                    (tuple(r for r in g if r in args.rates) for g in (GRID, SF_GRID)))
  if args.quick and not (args.rates or args.combine):  # a smoke run of every code path
    grid, sf_grid = (tuple(r for r in g if r in QUICK_RATES) for g in (GRID, SF_GRID))
    args.seeds = QUICK_SEEDS
    if not args.designs:
      args.designs, args.with_baselines = list(QUICK_DESIGNS), True
  out = pathlib.Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  command = "python benchmarks/lr_free.py " + " ".join(argv if argv is not None else sys.argv[1:])
  if args.combine:
    runs = [json.loads(path.read_text()) for path in args.combine]
    # a file with "rows" is a warm-up check alone (``warmup_check``'s dict)
    warm = next((run.get("warmup") or run for run in runs
                 if run.get("warmup") or "rows" in run), None)
    runs = [run for run in runs if "results" in run]
    results = merge([r for run in runs for r in run["results"]])
    commits = [run["commit"] for run in runs]
    command = "; ".join(run.get("command") or "python benchmarks/lr_free.py --no-warmup --tasks "
                        + " ".join(r["task"] for r in run["results"]) for run in runs)
    if warm is not None:
      command += (f"; the warm-up check: warmup_check() with DEFAULT = {warm['design']!r}"
                  if "design" in warm else "")
  else:
    progress = _report.progress_bars()
    commits = [_report.git_commit()]
    results = []
    for name in [] if args.warmup_only else args.tasks:
      if args.designs and not args.with_baselines:
        results.append(run_designs(name, TASKS[name], args.designs, quick=args.quick,
                                   seeds=args.seeds, progress=progress))
      else:
        results.append(run_task(name, TASKS[name], quick=args.quick, seeds=args.seeds,
                                progress=progress, designs=args.designs, cache=args.cache,
                                cached_only=args.cached_only, grid=grid, sf_grid=sf_grid,
                                only=("cosine" if args.cosine_only else
                                      "schedule-free" if args.schedule_free_only else
                                      "tuned" if args.rates else None),
                                fractions=args.cosine_only or FRACTIONS))
      (out / "lr_free.json").write_text(json.dumps(
          {"commit": commits[0], "command": command, "results": results}))
    warm = None if (args.no_warmup or args.cosine_only or args.schedule_free_only or args.designs and not args.with_baselines) else warmup_check(quick=args.quick, seeds=args.seeds,
                                                    progress=progress)
    (out / "lr_free.json").write_text(json.dumps(
        {"commit": commits[0], "command": command, "results": results, "warmup": warm}))
  if (args.designs and not args.with_baselines or args.rates or args.cosine_only
      or args.schedule_free_only) and not args.combine:
    print(f"wrote {out / 'lr_free.json'}: combine it with a full run (--combine)")
    return
  for r in results:
    plot_task(r, out)
  if warm is not None:
    plot_warmup(warm, out)
  if results:
    plot_summary(results, out)
  _report.write_table(report(results, warm, commits, args.seeds, command),
                      str(out / "lr_free.md"))


if __name__ == "__main__":
  main()
