r"""Can a signal of training pick schedule-free AdamW's tuned rate? A range test against the grid.

    python benchmarks/lr_free_rate_signals.py                  # every task, 3 seeds
    python benchmarks/lr_free_rate_signals.py --tasks digits   # one task

Issue 29's strongest rival is schedule-free AdamW tuned over its rate: on the tasks of
``lr_free.py`` its best rate spans 0.01 to 0.3. An untuned design that reaches it has to
read the rate off something it can measure while training. This benchmark measures, on
each task of ``lr_free.py`` (``--tasks``; the transformers are left out, they need an
accelerator):

* **The tuned rate.** ``optax.contrib.schedule_free_adamw`` at every rate of
  ``lr_free.SF_GRID`` (warm-up 5 %, the task's weight decay, 3 seeds), scored as in
  ``lr_free.py``: at 10, 25, 50 and 100 % of the budget, the rate with the best mean
  validation metric, and the test metric of every rate.
* **The signals of a range test** (Smith 2017, arXiv:1506.01186): the same optimizer
  with no warm-up and a rate that grows by :math:`e^{c}` per step from 1e-6 (``--climb``
  :math:`c`), to 1e2. At each step, at the gradient's point :math:`y_t`, with schedule-free's
  base iterate :math:`z_t` and average :math:`x_t` (all three start at :math:`w_0`):

  - *meta-gradient turns (z)*: the rate at which the smoothed (:math:`\rho = 0.9`) Hessian-free
    meta-gradient of MetaOptimize at :math:`\gamma = 1`, :math:`g_t^\top (z_t - w_0)`, turns
    positive (after step 20): the greedy criterion of ``metaoptax.adamw()``'s climb;
  - *meta-gradient turns (x)*: the same with the average's sensitivity
    :math:`g_t^\top (x_t - w_0)` (:math:`\partial x_t / \partial \log\gamma` under the same
    approximation), which leaves out the iterate's oscillation that the average removes;
  - *lowest train loss*: the rate at the lowest smoothed minibatch loss at :math:`y_t`;
  - *train loss 2x its lowest*: the first rate after it where the smoothed loss doubles
    (where the run becomes unstable);
  - *best validation (x)*: the rate at the best smoothed validation metric of :math:`x_t`.

A rule ``rate = k * signal`` that is right on every task needs the ratio of the tuned
rate to the signal to be the same on every task (up to the grid's factor of 3). The
report gives the ratios and their spread (largest over smallest, over the tasks), at
every budget.

Writes ``lr_free_rate_signals.md``, ``.json`` and ``.png`` into ``--out`` (default
``benchmarks/out/lr_free_rate_signals``, git-ignored).
"""

from __future__ import annotations

import json
import math
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _report  # pylint: disable=g-import-not-at-top,wrong-import-position
import lr_free  # pylint: disable=g-import-not-at-top,wrong-import-position
from suite_tasks import runner  # pylint: disable=g-import-not-at-top,wrong-import-position

OUT = HERE / "out" / "lr_free_rate_signals"
TASKS = ("digits", "mnist1d", "blockwise", "cnn1d", "charlm")
START, END = 1e-6, 1e2
SMOOTHING = 0.9
SIGNALS = ("meta-gradient turns (z)", "meta-gradient turns (x)", "lowest train loss",
           "train loss 2x its lowest", "best validation (x)")


def range_test(problem, climb: float, seeds: int):
  """Per-step records of the range test, ``seeds`` runs side by side: the rates, and
  arrays ``(seeds, steps)`` of the loss at ``y``, ``g.(z - w0)``, ``g.(x - w0)`` and the
  validation metric of ``x``."""
  steps = int(math.log(END / START) / climb) + 1
  rates = START * np.exp(climb * np.arange(steps))
  opt = optax.contrib.schedule_free_adamw(lambda t: START * jnp.exp(climb * t),
                                          weight_decay=lr_free.WEIGHT_DECAY)

  def one(key):
    w0 = problem.init(jax.random.fold_in(key, 0))

    def body(carry, k):
      y, s = carry
      loss, g = jax.value_and_grad(problem.loss)(y, problem.batch(k))
      x = optax.contrib.schedule_free_eval_params(s, y)
      from_start = lambda a: optax.tree_utils.tree_vdot(g, jax.tree.map(jnp.subtract, a, w0))
      record = (loss, from_start(s.z), from_start(x), problem.evaluate(x)["val"])
      u, s = opt.update(g, s, y)
      return (optax.apply_updates(y, u), s), record

    keys = jax.random.split(jax.random.fold_in(key, 1), steps)
    return jax.lax.scan(body, (w0, opt.init(w0)), keys)[1]

  keys = jax.random.split(jax.random.key(2000), seeds)
  records = jax.device_get(jax.jit(jax.vmap(one))(keys))
  return rates, [np.asarray(r, np.float64) for r in records]


def smoothed(x):
  """Bias-corrected exponential average along the last axis; non-finite values count as
  1e30 (a diverged run stays diverged)."""
  x = np.where(np.isfinite(x), x, 1e30)
  out, avg, weight = np.empty_like(x), np.zeros(x.shape[:-1]), 0.0
  for t in range(x.shape[-1]):
    avg = SMOOTHING * avg + (1 - SMOOTHING) * x[..., t]
    weight = SMOOTHING * weight + (1 - SMOOTHING)
    out[..., t] = avg / weight
  return out


def signals(rates, records, higher_is_better) -> dict:
  """Each of ``SIGNALS`` per seed (``None`` where it never happens)."""
  loss, meta_z, meta_x, val = records
  steps = np.arange(len(rates))
  out = {name: [] for name in SIGNALS}
  for s in range(loss.shape[0]):
    first = lambda mask: float(rates[np.argmax(mask)]) if mask.any() else None
    out["meta-gradient turns (z)"].append(first((smoothed(meta_z[s]) > 0) & (steps > 20)))
    out["meta-gradient turns (x)"].append(first((smoothed(meta_x[s]) > 0) & (steps > 20)))
    l = smoothed(loss[s])
    low = int(np.argmin(l))
    out["lowest train loss"].append(float(rates[low]))
    out["train loss 2x its lowest"].append(first((l > 2 * l[low]) & (steps > low)))
    v = smoothed(val[s] if higher_is_better else -val[s])
    out["best validation (x)"].append(float(rates[int(np.argmax(v))]))
  return out


def tuned_rates(problem, steps: int, seeds: int, progress) -> dict:
  """Schedule-free over ``SF_GRID``: per budget, the rate best on validation and the mean
  test metric of every rate."""
  chunk = steps // lr_free.CHECKPOINTS
  logs = runner.train(problem, lr_free.schedule_free_grid(steps), steps=steps, seeds=seeds,
                      chunk=chunk, progress=progress)
  sign = 1.0 if problem.higher_is_better else -1.0
  out = {}
  for f in lr_free.FRACTIONS:
    i = int(round(f * steps / chunk))
    val = [sign * float(np.nanmean(np.where(np.isfinite(log.val[:, i]), log.val[:, i], -sign * np.inf)))
           for log in logs]
    out[str(f)] = {"best": lr_free.SF_GRID[int(np.argmax(val))],
                   "test": {f"{r:g}": float(np.mean(log.test[:, i]))
                            for r, log in zip(lr_free.SF_GRID, logs)}}
  return out


def geometric_mean(values):
  values = [v for v in values if v is not None]
  return float(np.exp(np.mean(np.log(values)))) if values else None


def report(results, commit, command) -> list[str]:
  lines = ["# Can a signal of training pick schedule-free AdamW's tuned rate?", "",
           f"Commit `{commit}`; command: `{command}`. Range tests climb the rate by "
           f"e^{results[0]['climb']:g} per step from {START:g}; each signal is the geometric "
           "mean of the seeds' (seeds where it never happened left out). The tuned rate is "
           "schedule-free AdamW's best on validation over "
           f"{', '.join(f'{r:g}' for r in lr_free.SF_GRID)} at each budget.", ""]
  lines += ["## The tuned rate and the signals", "",
            "| task | tuned 10 % | tuned 25 % | tuned 50 % | tuned 100 % | "
            + " | ".join(SIGNALS) + " |", "|---" * (5 + len(SIGNALS)) + "|"]
  for r in results:
    tuned = [f"{r['tuned'][str(f)]['best']:g}" for f in lr_free.FRACTIONS]
    sig = [geometric_mean(r["signals"][name]) for name in SIGNALS]
    lines.append(f"| {r['task']} | " + " | ".join(tuned) + " | "
                 + " | ".join("never" if s is None else f"{s:.3g}" for s in sig) + " |")
  lines += ["", "## Tuned rate / signal, and the spread over the tasks (largest / smallest)",
            "", "A rule `rate = k * signal` right on every task needs a spread of at most ~3 "
            "(the grid's step).", "",
            "| signal | budget | " + " | ".join(r["task"] for r in results) + " | spread |",
            "|---|---|" + "---|" * len(results) + "---|"]
  for name in SIGNALS:
    for f in lr_free.FRACTIONS:
      ratios = []
      for r in results:
        s = geometric_mean(r["signals"][name])
        ratios.append(None if s is None else r["tuned"][str(f)]["best"] / s)
      known = [x for x in ratios if x is not None]
      spread = max(known) / min(known) if len(known) > 1 else None
      lines.append(f"| {name} | {int(f * 100)} % | "
                   + " | ".join("—" if x is None else f"{x:.3g}" for x in ratios)
                   + f" | {'—' if spread is None else f'{spread:.1f}'} |")
  lines += ["", "## Schedule-free AdamW's test metric at each rate (mean of the seeds)", "",
            "| task | budget | " + " | ".join(f"{r:g}" for r in lr_free.SF_GRID) + " |",
            "|---|---|" + "---|" * len(lr_free.SF_GRID)]
  for r in results:
    for f in lr_free.FRACTIONS:
      cell = r["tuned"][str(f)]
      lines.append(f"| {r['task']} | {int(f * 100)} % | " + " | ".join(
          (f"**{v:.3f}**" if float(k) == cell["best"] else f"{v:.3f}")
          for k, v in cell["test"].items()) + " |")
  return lines


def plot(results, path) -> None:
  plt = _report.pyplot()
  fig, axes = plt.subplots(1, len(results), figsize=(3.6 * len(results), 3.2), squeeze=False)
  colors = dict(zip(SIGNALS, ("C1", "C2", "C3", "C4", "C5")))
  for ax, r in zip(axes[0], results):
    for f, style in ((0.25, ":"), (1.0, "-")):
      cell = r["tuned"][str(f)]
      ax.plot([float(k) for k in cell["test"]], list(cell["test"].values()), "o" + style,
              color="C0", label=f"schedule-free, {int(f * 100)} % of the budget")
    for name in SIGNALS:
      s = geometric_mean(r["signals"][name])
      if s is not None:
        ax.axvline(s, color=colors[name], lw=1.2, label=name)
    ax.set_xscale("log")
    ax.set_title(r["task"])
    ax.set_xlabel("rate")
    ax.set_ylabel(r["test_name"])
    if r["higher_is_better"]:
      ax.set_ylim(max(0.0, min(v for v in r["tuned"]["1.0"]["test"].values() if v > 0.3) - 0.05),
                  None)
    else:
      ax.set_ylim(None, min(max(r["tuned"]["0.25"]["test"].values()), 4.0))
  axes[0][0].legend(fontsize=6)
  _report.save_figure(fig, path)


def main(argv=None):
  args = _report.task_arguments(__doc__.splitlines()[0], TASKS, OUT)
  args.add_argument("--climb", type=float, default=0.05,
                    help="rise of log(rate) per step in the range test")
  args = args.parse_args(argv)
  progress = _report.progress_bars()
  out = pathlib.Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  commit = _report.git_commit()
  command = "python benchmarks/lr_free_rate_signals.py " + " ".join(
      argv if argv is not None else sys.argv[1:])
  results = []
  for name in args.tasks:
    task = lr_free.TASKS[name]
    problem = task.make()
    steps = task.quick_steps if args.quick else task.steps
    rates, records = range_test(problem, args.climb, args.seeds)
    results.append({"task": name, "climb": args.climb, "test_name": problem.test_name,
                    "higher_is_better": problem.higher_is_better,
                    "signals": signals(rates, records, problem.higher_is_better),
                    "tuned": tuned_rates(problem, steps, args.seeds, progress)})
    (out / "lr_free_rate_signals.json").write_text(json.dumps(
        {"commit": commit, "command": command, "results": results}))
  plot(results, out / "lr_free_rate_signals.png")
  _report.write_table(report(results, commit, command), str(out / "lr_free_rate_signals.md"))


if __name__ == "__main__":
  main()
