"""Demonstration: ``metaoptax.adamw()``, untuned, against a grid of hand-set AdamW rates.

An MLP (64-128-128-10, ReLU, He init) learns scikit-learn's digits with minibatches
of 128 and cross-entropy with label smoothing 0.1, which gives the train loss a
floor (the entropy of the smoothed targets) that the tables subtract. Two method
families, each one compiled program over its five settings and three seeds:

* ``optax.adamw(lr, weight_decay=0.1)`` for ``lr`` in 1e-4, 3e-4, 1e-3, 3e-3, 1e-2;
* ``metaoptax.adamw(init_step_size=a0, weight_decay=0.1)`` for ``a0`` in 1e-8 ...
  1e-4, every other setting at its default: the step size is learned while
  training (an exponential climb, then Adam on its logarithm).

The table gives, as mean ± std over the seeds, the train loss above its floor at
10 %, 25 %, 50 % and 100 % of the budget, the final test accuracy, the learned
step size at those checkpoints, and the first step at which it reaches half of
the best AdamW rate of the grid (best: lowest final train loss). The figure shows
the learned step sizes and the loss curves against the AdamW grid.

    python benchmarks/demo_digits.py              # 155-190 s of CPU time (see below)
    python benchmarks/demo_digits.py --quick      # smoke run: 200 steps

The full run needs 155-190 s of CPU time (four measured runs), most of it in the
2 x 15 runs of 6,000 steps: 1.5-3 min of wall time on two free cores; on a 2-core
machine shared with other work it took 9-14.5 min.

Writes ``demo_digits.md`` and ``demo_digits.png`` into ``--out`` (by default
``benchmarks/out/``, not tracked by git) and prints their paths.
"""

from __future__ import annotations

import argparse
import functools
import pathlib
import time

import numpy as np

import _report
import metaoptax
from suite_tasks import digits
from suite_tasks import methods
from suite_tasks import runner

#: The files under benchmarks/results/ that this script writes (glob patterns;
#: tests/integration/test_repository_shape.py checks every committed result against them).
OUTPUTS = ("demo_digits.md", "demo_digits.png",)


GRID = (1e-4, 3e-4, 1e-3, 3e-3, 1e-2)
STARTS = (1e-8, 1e-7, 1e-6, 1e-5, 1e-4)
SEEDS = 3
STEPS, CHUNK = 6_000, 20  # the loss and the step sizes are recorded every CHUNK steps
QUICK_STEPS, QUICK_CHUNK = 200, 20
CHECKPOINTS = (0.1, 0.25, 0.5, 1.0)  # fractions of the budget reported in the table
LINEAR_UP_TO = 200  # the figure's step axis is linear up to here (the climb), log after
SMOOTHING = 0.2  # the loss curves are smoothed over steps within ±20 % (log-step axis)
OUT = pathlib.Path(__file__).resolve().parent / "out"


def drop_in_starts(starts) -> runner.Method:
  """``metaoptax.adamw`` from every start in ``starts``, side by side, defaults otherwise;
  evaluated at its averaged weights (``metaoptax.averaged_params``), as a user would."""
  return runner.Method(
      "metaoptax.adamw() starts", "metaoptax",
      lambda a0: metaoptax.adamw(init_step_size=a0, weight_decay=methods.WEIGHT_DECAY),
      eval_params=lambda state, params: metaoptax.averaged_params(state),
      learned_step_size=True, values=tuple(starts),
      names=tuple((f"metaoptax.adamw() from {a0:g}", f"start {a0:g}") for a0 in starts))


def at(log, fraction):
  """Index of the record at ``fraction`` of the budget."""
  return int(round(fraction * (len(log.steps) - 1)))


def best_rate_index(grid_logs, record):
  """Index of the grid rate with the lowest mean train loss at ``record`` (NaN loses)."""
  means = np.array([np.mean(log.train_loss[:, record]) for log in grid_logs])
  return int(np.argmin(np.where(np.isfinite(means), means, np.inf)))


def fmt(x, digits=3):
  x = np.asarray(x, dtype=float)
  if not np.all(np.isfinite(x)):
    return "diverged"
  return f"{x.mean():.{digits}g} ± {x.std():.1g}"


def reach_step(log, target):
  """Per seed: first recorded step at which the step size is >= ``target`` (NaN if never)."""
  alpha = log.step_sizes.mean(-1)  # (seeds, records); one step size per run (scalar)
  hit = alpha >= target
  return np.where(hit.any(1), log.steps[np.argmax(hit, 1)], np.nan)


def fmt_reach(steps):
  if np.all(np.isnan(steps)):
    return "not reached"
  text = fmt(steps[~np.isnan(steps)], 3)
  missing = int(np.isnan(steps).sum())
  return text + (f" ({missing} of {len(steps)} seeds never)" if missing else "")


def table(problem, grid_logs, start_logs, best, steps, chunk, seconds):
  floor = problem.train_loss_floor
  pct = [f"{int(100 * f)} %" for f in CHECKPOINTS]
  lines = [
      f"Digits MLP 64-128-128-10, batch {digits.BATCH}, label smoothing "
      f"{digits.LABEL_SMOOTHING} (train-loss floor {floor:.4f}), {steps} steps, "
      f"{SEEDS} seeds (mean ± std), weight decay {methods.WEIGHT_DECAY}. Best AdamW rate of "
      f"the grid (lowest final train loss): {best:g}. Loss and step size recorded every "
      f"{chunk} steps. Training time: AdamW grid {seconds[0]:.0f} s, metaoptax.adamw() "
      f"{seconds[1]:.0f} s ({len(GRID) * SEEDS} runs each, compilation excluded).", "",
      "Train loss − floor at each share of the budget, final test accuracy:", "",
      "| method | " + " | ".join(f"{p} ({int(f * steps)})" for p, f in zip(pct, CHECKPOINTS))
      + " | test accuracy |",
      "|---" * (len(CHECKPOINTS) + 2) + "|"]

  def row(name, log):
    cells = [fmt(log.train_loss[:, at(log, f)] - floor) for f in CHECKPOINTS]
    return f"| {name} | " + " | ".join(cells) + f" | {fmt(log.test[:, -1], 4)} |"

  for lr, log in zip(GRID, grid_logs):
    lines.append(row(log.method.name + (" (best)" if lr == best else ""), log))
  best_at = []
  for f in CHECKPOINTS:
    i = best_rate_index(grid_logs, at(grid_logs[0], f))
    best_at.append(fmt(grid_logs[i].train_loss[:, at(grid_logs[i], f)] - floor)
                   + f" (lr {GRID[i]:g})")
  lines.append("| AdamW, best rate of the grid at each checkpoint | " + " | ".join(best_at)
               + " | |")
  lines += [row(log.method.name, log) for log in start_logs]
  lines += ["", f"Learned step size at each share of the budget; first step at which it "
            f"reaches half the best AdamW rate ({best / 2:g}):", "",
            "| metaoptax.adamw() from | " + " | ".join(pct)
            + " | step reaching half the best rate |",
            "|---" * (len(CHECKPOINTS) + 2) + "|"]
  for a0, log in zip(STARTS, start_logs):
    cells = [fmt(log.step_sizes[:, at(log, f)].mean(-1)) for f in CHECKPOINTS]
    lines.append(f"| {a0:g} | " + " | ".join(cells)
                 + f" | {fmt_reach(reach_step(log, best / 2))} |")
  return lines


def smoothed(steps, y, spread=SMOOTHING):
  """Geometric mean of ``y`` over the records within a factor ``1 ± spread`` of each step."""
  log_y = np.log(np.maximum(y, 1e-12))
  return np.exp([log_y[(steps >= t / (1 + spread)) & (steps <= t * (1 + spread))].mean()
                 for t in steps])


def plot(problem, grid_logs, start_logs, best, path):
  plt = _report.pyplot()
  fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(14, 5))
  colors = plt.cm.viridis(np.linspace(0.0, 0.85, len(start_logs)))
  steps = grid_logs[0].steps
  steps_after_0 = steps[1:]

  def loss_curve(log):  # mean over seeds, then smoothed along the (logarithmic) step axis
    return smoothed(steps_after_0, (log.train_loss - problem.train_loss_floor)[:, 1:].mean(0))

  grays = plt.cm.Greys(np.linspace(0.35, 0.8, len(GRID)))  # darker: larger rate
  for lr, log, gray in zip(GRID, grid_logs, grays):
    is_best = lr == best
    label = f"AdamW {lr:g}" + (" (best)" if is_best else "")
    style = dict(color="black" if is_best else gray, lw=1.4 if is_best else 1.1,
                 ls="--" if is_best else ":")
    ax1.axhline(lr, **style)
    ax1.annotate(label, xy=(1.0, lr), xycoords=("axes fraction", "data"), xytext=(3, 0),
                 textcoords="offset points", fontsize=7, va="center", color=style["color"])
    ax2.plot(steps_after_0, loss_curve(log), label=label, **style)
  ax1.axhline(best / 2, color="tab:red", lw=0.9, ls="-.", label="half the best AdamW rate")
  for log, color in zip(start_logs, colors):
    alpha = log.step_sizes.mean(-1)
    ax1.plot(steps, alpha.mean(0), color=color, lw=1.8, label=log.method.name)
    ax1.fill_between(steps, alpha.min(0), alpha.max(0), color=color, alpha=0.25, lw=0)
    ax2.plot(steps_after_0, loss_curve(log), color=color, lw=1.6, label=log.method.name)
  linear_up_to = min(LINEAR_UP_TO, int(steps[-1]))
  later = (500, 1000, 2000, 5000, 10_000, 20_000)
  ax1.set_xscale("symlog", linthresh=linear_up_to, linscale=1.5)
  ax1.set(xlim=(0, steps[-1]), yscale="log", ylabel="step size α",
          xlabel=f"step (linear to {linear_up_to}, logarithmic after)",
          title=f"learned step size α(t), {SEEDS} seeds (line: mean, band: min–max)")
  ax2.set(xscale="log", xlim=(steps[1], steps[-1]), yscale="log",
          ylabel="train loss − floor (full train set)", xlabel="step",
          title=f"training loss, mean of {SEEDS} seeds (smoothed over ±{SMOOTHING:.0%} of the step)")
  for ax, ticks in ((ax1, (0, 50, 100, 150, 200) + later), (ax2, (20, 50, 100, 200) + later)):
    ticks = [t for t in ticks if ax.get_xlim()[0] <= t <= steps[-1]]
    ax.set_xticks(ticks, [str(t) for t in ticks])
    ax.set_xticks([], minor=True)
    for f in CHECKPOINTS[:-1]:  # the table's checkpoints
      ax.axvline(f * steps[-1], color="0.75", lw=0.8, ls=":", zorder=0)
  ax1.legend(fontsize=7, loc="lower right")
  ax2.legend(fontsize=7, loc="lower left", ncol=2)
  fig.text(0.5, 0.005, "vertical dotted lines: " + ", ".join(
      f"{int(100 * f)} %" for f in CHECKPOINTS[:-1]) + " of the budget (the table's checkpoints)",
      ha="center", fontsize=8, color="0.4")
  _report.save_figure(fig, path)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--steps", type=int, default=STEPS)
  parser.add_argument("--out", type=pathlib.Path, default=OUT,
                      help="output folder (default: benchmarks/out/, git-ignored)")
  parser.add_argument("--quick", action="store_true", help="smoke run: 200 steps")
  args = parser.parse_args(argv)
  import tqdm  # pylint: disable=g-import-not-at-top
  steps, chunk = (QUICK_STEPS, QUICK_CHUNK) if args.quick else (args.steps, CHUNK)
  problem = digits.make_problem()
  progress = functools.partial(tqdm.tqdm, dynamic_ncols=True, mininterval=0.5)
  start = time.perf_counter()
  kw = dict(steps=steps, seeds=SEEDS, chunk=chunk, progress=progress)
  grid_logs = runner.train(problem, methods.adamw_grid(GRID), **kw)
  start_logs = runner.train(problem, drop_in_starts(STARTS), **kw)
  best = GRID[best_rate_index(grid_logs, -1)]
  seconds = (sum(l.seconds for l in grid_logs), sum(l.seconds for l in start_logs))
  args.out.mkdir(parents=True, exist_ok=True)
  md, png = args.out / "demo_digits.md", args.out / "demo_digits.png"
  lines = table(problem, grid_logs, start_logs, best, steps, chunk, seconds)
  lines.append(f"\nCommit `{_report.git_commit(short=True)}`.")
  _report.write_table(lines, md)
  plot(problem, grid_logs, start_logs, best, png)
  print(f"wrote {md}\nwrote {png}")
  print(f"total {time.perf_counter() - start:.0f} s (data, compilation and training)")


if __name__ == "__main__":
  main()
