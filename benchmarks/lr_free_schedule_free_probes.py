r"""Issue 29 diagnostic: can the climb hand schedule-free AdamW its rate?

    python benchmarks/lr_free_schedule_free_probes.py                 # cnn1d, mnist1d, charlm
    python benchmarks/lr_free_schedule_free_probes.py --tasks cnn1d   # one task

Tuned schedule-free AdamW (Defazio et al. 2024, arXiv:2405.15682) leads ``lr_free.py``'s
cells at 10-25 % of the budget at rates of 3e-2 to 3e-1, ~10x the rate that
``metaoptax.adamw()``'s climb finds. Two probes of a schedule-free design whose rate the
climb sets, against optax's schedule-free at the rate tuned for the task (warm-up 5 % of
the task's budget) and ``metaoptax.adamw()``, 3 seeds, validation metric at 20 / 30 / 50 /
100 % of ``--steps`` (default 1,000; records every 10 %):

* **The sensitivity carried through the interpolation** (:func:`interpolated_climb`).
  Schedule-free evaluates the gradient at :math:`y = b_1 x + (1 - b_1) z`, where :math:`z`
  takes the base steps and :math:`x` averages :math:`z` with weights :math:`\alpha_t^2`.
  ``lr_free.py``'s interpolation designs climb on the base's own Hessian-free trace
  :math:`h_z` (the sensitivity of :math:`z` to :math:`\log\alpha`). Here the meta-gradient is
  :math:`g_y^\top h_y` with :math:`h_y = b_1 h_x + (1 - b_1) h_z` and :math:`h_x` the same
  average of :math:`h_z`; :math:`\alpha` is held after the climb. Reported: the climbed
  :math:`\alpha` with each trace.
* **AdamW's climb, then schedule-free at k times its rate** (:func:`climb_then_schedule_free`):
  ``metaoptax.adamw(meta_step_size=0)`` climbs (x2) and holds; when the climb ends, the
  weights become schedule-free's :math:`x = z = y` and schedule-free AdamW takes over at
  :math:`k \alpha` (reached by a ramp of :math:`e^{0.1}` per step, the climb's rate), its
  average weighted by :math:`\alpha_t^2` from then on.

Writes ``lr_free_schedule_free_probes.md`` and ``.json`` into ``--out`` (default
``benchmarks/out/lr_free_schedule_free_probes``, git-ignored). Both probes compute the
climb's AdamW step beside schedule-free's (twice the work of one): diagnostics, not designs.
"""

from __future__ import annotations

import json
import pathlib
import sys
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _report  # pylint: disable=g-import-not-at-top,wrong-import-position
import lr_free  # pylint: disable=g-import-not-at-top,wrong-import-position
import metaoptax  # pylint: disable=g-import-not-at-top,wrong-import-position
from metaoptax._src import tree_utils  # pylint: disable=g-import-not-at-top,wrong-import-position
from suite_tasks import runner  # pylint: disable=g-import-not-at-top,wrong-import-position
from suite_tasks.runner import Method  # pylint: disable=g-import-not-at-top,wrong-import-position

OUT = HERE / "out" / "lr_free_schedule_free_probes"
TASKS = ("cnn1d", "mnist1d", "charlm")
#: schedule-free's rate tuned for each task at 10-25 % of its budget (``lr_free.md``)
TUNED_RATE = {"digits": 3e-2, "mnist1d": 1e-1, "blockwise": 3e-2, "cnn1d": 1e-1, "charlm": 3e-2}
MULTIPLES = (2.0, 3.0, 5.0)
RECORDS = 10
SHOWN = (2, 3, 5, 10)  # records shown: 20 / 30 / 50 / 100 % of the steps
B1 = 0.9


def _adam_step(grads, nu, count, params, alpha, b2, eps, weight_decay):
  """``(nu, step)``: schedule-free AdamW's base step (Adam without a first moment, decay
  at the gradient's point ``params``), ``-alpha (g / (sqrt(v_hat) + eps) + kappa y)``."""
  nu = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * g * g, nu, grads)
  correction = 1 - b2 ** count.astype(jnp.float32)
  return nu, jax.tree.map(lambda g, v, y: -alpha * (g / (jnp.sqrt(v / correction) + eps)
                                                    + weight_decay * y), grads, nu, params)


def _interpolate(params, z_old, z_new, c, b1=B1):
  """``x <- x + c (z_new - x)`` from ``y = params`` and ``z_old``; the update to the new ``y``."""
  average = lr_free.schedule_free_average(params, z_old, b1)
  x = jax.tree.map(lambda xi, zi: xi + c * (zi - xi), average, z_new)
  return jax.tree.map(lambda xi, zi, y: b1 * xi + (1 - b1) * zi - y, x, z_new, params)


class InterpolatedClimbState(NamedTuple):
  count: jax.Array
  nu: optax.Params  # Adam's second moment (schedule-free AdamW has no first)
  z: optax.Params
  hz: optax.Params  # Hessian-free sensitivity of z to log(alpha)
  hx: optax.Params  # ... of the average x
  beta: metaoptax.MetaParams
  meta_state: optax.OptState
  weight_sum: jax.Array


def interpolated_climb(carried: bool, b2: float = 0.999, eps: float = 1e-8,
                       weight_decay: float = lr_free.WEIGHT_DECAY, climb_rate: float = 0.1
                       ) -> optax.GradientTransformation:
  """Schedule-free AdamW from 1e-6 whose :math:`\\log\\alpha` climbs on
  :math:`g_y^\\top h_y` (``carried``) or :math:`g_y^\\top h_z`, then is held (module
  docstring). The Hessian-free traces at :math:`\\gamma = 1`: :math:`h_z \\leftarrow h_z -
  \\alpha\\kappa h_y + u` with :math:`u` the base step, :math:`h_x \\leftarrow (1 - c) h_x
  + c h_z`."""
  meta = metaoptax.climb(optax.sgd(0.0), rate=climb_rate)

  def init(params):
    zeros = lambda: jax.tree.map(jnp.zeros_like, params)
    beta = metaoptax.MetaParams(jnp.full([1], jnp.log(1e-6), jnp.float32), {})
    return InterpolatedClimbState(jnp.zeros([], jnp.int32), zeros(), jax.tree.map(jnp.copy, params),
                                  zeros(), zeros(), beta, meta.init(beta), jnp.zeros([]))

  def update(grads, state, params):
    hy = (jax.tree.map(lambda a, b: B1 * a + (1 - B1) * b, state.hx, state.hz) if carried
          else state.hz)
    s = sum(jnp.sum(g * h) for g, h in zip(jax.tree.leaves(grads), jax.tree.leaves(hy)))
    steps, meta_state = meta.update(metaoptax.MetaParams(jnp.reshape(s, [1]), {}),
                                    state.meta_state, state.beta)
    alpha = jnp.exp(state.beta.step_size[0])
    count = state.count + 1
    nu, u = _adam_step(grads, state.nu, count, params, alpha, b2, eps, weight_decay)
    z = jax.tree.map(jnp.add, state.z, u)
    hz = jax.tree.map(lambda h, h_y, ui: h - alpha * weight_decay * h_y + ui, state.hz, hy, u)
    total = state.weight_sum + alpha ** 2
    c = alpha ** 2 / total
    hx = jax.tree.map(lambda h, h_z: (1 - c) * h + c * h_z, state.hx, hz)
    return _interpolate(params, state.z, z, c), InterpolatedClimbState(
        count, nu, z, hz, hx, optax.apply_updates(state.beta, steps), meta_state, total)

  return optax.GradientTransformation(init, update)


class SwitchState(NamedTuple):
  climb: optax.OptState  # metaoptax.adamw(meta_step_size=0)'s state
  nu: optax.Params
  z: optax.Params
  count: jax.Array
  switched: jax.Array  # bool: the climb has ended and schedule-free runs
  since: jax.Array  # steps since the switch
  weight_sum: jax.Array


def climb_then_schedule_free(multiple: float, b2: float = 0.999, eps: float = 1e-8,
                             weight_decay: float = lr_free.WEIGHT_DECAY, ramp: float = 0.1
                             ) -> optax.GradientTransformation:
  """``metaoptax.adamw``'s climb (x2, then held); once it ends, schedule-free AdamW at
  ``multiple`` times the climbed rate, reached by a ramp of ``e^ramp`` per step."""
  climber = metaoptax.adamw(weight_decay=weight_decay, average=None, meta_step_size=0.0)

  def init(params):
    return SwitchState(climber.init(params), jax.tree.map(jnp.zeros_like, params),
                       jax.tree.map(jnp.copy, params), jnp.zeros([], jnp.int32),
                       jnp.asarray(False), jnp.zeros([], jnp.int32), jnp.zeros([]))

  def update(grads, state, params):
    adamw_updates, climb_state = climber.update(grads, state.climb, params)
    (found,) = tree_utils.instances_of(climb_state, metaoptax.ClimbState)
    count = state.count + 1
    switching = ~found.climbing & ~state.switched
    switched = state.switched | ~found.climbing
    since = jnp.where(switched, state.since + 1, 0)
    alpha = _switch_rate(climb_state, since, multiple, ramp)
    z_old = jax.tree.map(lambda z, p: jnp.where(switching, p, z), state.z, params)
    nu, step = _adam_step(grads, state.nu, count, params, alpha, b2, eps, weight_decay)
    z = jax.tree.map(jnp.add, z_old, step)
    weight = jnp.where(switched, alpha ** 2, 0.0)
    total = jnp.where(switching, 0.0, state.weight_sum) + weight
    sf_updates = _interpolate(params, z_old, z, weight / jnp.maximum(total, 1e-30))
    updates = jax.tree.map(lambda a, b: jnp.where(switched, a, b), sf_updates, adamw_updates)
    z = jax.tree.map(lambda a, p, u: jnp.where(switched, a, p + u), z, params, adamw_updates)
    return updates, SwitchState(climb_state, nu, z, count, switched, since, total)

  return optax.GradientTransformation(init, update)


def _switch_rate(climb_state, since, multiple, ramp):
  """The rate: the climb's, then ramped up to ``multiple`` times it."""
  climbed = jnp.mean(metaoptax.step_sizes(climb_state))
  return climbed * jnp.minimum(multiple, jnp.exp(ramp * since.astype(jnp.float32)))


def methods(task: str) -> list[Method]:
  c = optax.contrib
  warmup = max(1, int(lr_free.WARMUP_FRACTION * lr_free.TASKS[task].steps))
  rate = TUNED_RATE[task]
  sf_eval = lambda s, p: lr_free.schedule_free_average(p, s.z)
  out = [Method(f"schedule-free AdamW {rate:g} (tuned), warm-up {warmup}", "contrib",
                lambda _: c.schedule_free_adamw(rate, warmup_steps=warmup,
                                                weight_decay=lr_free.WEIGHT_DECAY),
                eval_params=lambda s, p: c.schedule_free_eval_params(s, p)),
         Method("metaoptax.adamw()", "metaoptax",
                lambda _: metaoptax.adamw(weight_decay=lr_free.WEIGHT_DECAY),
                eval_params=lambda s, p: metaoptax.averaged_params(s), learned_step_size=True)]
  for carried in (False, True):
    out.append(Method(f"interpolation, climb on h_{'y' if carried else 'z'}", "probe",
                      lambda _, carried=carried: interpolated_climb(carried), eval_params=sf_eval,
                      learned_step_size=True, step_sizes_of=lambda s: jnp.exp(s.beta.step_size)))
  for k in MULTIPLES:
    out.append(Method(f"AdamW's climb, then schedule-free at {k:g}x", "probe",
                      lambda _, k=k: climb_then_schedule_free(k), eval_params=sf_eval,
                      learned_step_size=True,
                      step_sizes_of=lambda s, k=k: jnp.reshape(
                          _switch_rate(s.climb, s.since, k, 0.1), [1])))
  return out


def main(argv=None):
  args = _report.task_arguments(__doc__.splitlines()[0], TASKS, OUT)
  args.add_argument("--steps", type=int, default=1000)
  args = args.parse_args(argv)
  steps = 100 if args.quick else args.steps
  progress = _report.progress_bars()
  rows = []
  for task in args.tasks:
    problem = lr_free.TASKS[task].make()
    for method in methods(task):
      (log,) = runner.train(problem, method, steps=steps, seeds=args.seeds,
                            chunk=steps // RECORDS, progress=progress)
      alpha = (None if log.step_sizes is None
               else float(np.mean(log.step_sizes[:, -1, 0])))
      rows.append({"task": task, "method": method.name, "metric": problem.test_name,
                   "steps": log.steps[list(SHOWN)].tolist(),
                   "val": log.val.mean(0)[list(SHOWN)].tolist(), "alpha_end": alpha})
  lines = [f"# Issue 29 diagnostic: schedule-free with the climb's rate ({args.seeds} seeds, "
           f"{steps} steps, commit `{_report.git_commit()}`)", "",
           "Validation metric (mean of the seeds) at the steps shown; α at the end.", "",
           "| task | method | " + " | ".join(f"{int(100 * i / RECORDS)} %" for i in SHOWN)
           + " | α at the end |", "|---|---|" + "---|" * (len(SHOWN) + 1)]
  for r in rows:
    alpha = "—" if r["alpha_end"] is None else f"{r['alpha_end']:.3g}"
    lines.append(f"| {r['task']} | {r['method']} | " + " | ".join(f"{v:.3f}" for v in r["val"])
                 + f" | {alpha} |")
  args.out.mkdir(parents=True, exist_ok=True)
  _report.write_table(lines, args.out / "lr_free_schedule_free_probes.md")
  (args.out / "lr_free_schedule_free_probes.json").write_text(json.dumps(rows, indent=1))
  print("\n".join(lines))


if __name__ == "__main__":
  main()
