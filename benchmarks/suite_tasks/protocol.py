"""The protocol shared by the supervised tasks: grid, methods, tables, plots.

1. AdamW at every rate of ``methods.ADAMW_GRID``; the best rate is the one with
   the best final ``select_by`` metric (mean over seeds; diverged runs lose).
2. Every other method at the same budget and seeds: AdamW warm-up + cosine at the
   best rate, ``metaoptax.adamw()`` untuned from 1e-6, the metaoptax presets scalar and blockwise from ``best / 100``, the
   exact 2x2 where ``exact``, Adam-HD, optax.contrib's parameter-free optimizers,
   and the initial-step-size sweep of the default (AdamW, Adam).
3. ``<task>.md`` (tables at 10 %, 25 %, 50 % and 100 % of the budget), ``<task>_loss.png``,
   ``<task>_step_sizes.png``, ``<task>_init_sweep.png``, ``<task>_curves.npz``.
"""

from __future__ import annotations

import dataclasses
import pathlib

import numpy as np

from suite_tasks import methods as M
from suite_tasks import plots
from suite_tasks import runner

QUICK_GRID = (1e-3, 1e-2)
QUICK_SWEEP = (1e-6, 1e-4)
QUICK_CONTRIB = ("prodigy", "schedule_free_adamw")
BUDGET_FRACTIONS = (0.1, 0.25, 0.5, 1.0)


@dataclasses.dataclass(frozen=True)
class TaskConfig:
  """Per-task settings (budgets and what is run); nothing here is tuned per method."""

  title: str
  description: str
  steps: int
  quick_steps: int
  chunk: int
  quick_chunk: int
  select_by: str  # "train_loss" or "test": how the best AdamW rate is chosen
  exact: bool = False  # run the exact 2x2 (AdamW, Adam)
  contrib: bool = True
  init_sweep: bool = True
  hypergradient: bool = True
  cosine: bool = True
  presets: tuple = tuple(M.PRESETS)
  blockwise_presets: tuple = tuple(M.PRESETS)
  extra_blocks: tuple = ()  # (label, blocks) of further block layouts for the default
  blocks_label: str = "blockwise"


def _final(log, key):
  return getattr(log, key)[:, -1]


def _score(log, key, higher_is_better):
  """Mean final metric, oriented so that lower is better; NaN (diverged) is +inf."""
  v = float(np.mean(_final(log, key)))
  if not np.isfinite(v):
    return np.inf
  return -v if (key == "test" and higher_is_better) else v


def plateau_step(log):
  """First recorded step at which the mean (over seeds and blocks, in log space)
  learned step size reaches half its peak; ``(step, peak, step of peak)``."""
  a = np.exp(np.mean(np.log(np.maximum(log.step_sizes, 1e-30)), axis=(0, 2)))
  peak = int(np.argmax(a))
  reached = int(np.argmax(a >= a[peak] / 2))
  return int(log.steps[reached]), float(a[peak]), int(log.steps[peak])


def run_task(problem, config: TaskConfig, *, quick: bool, seeds: int,
             out_dir: pathlib.Path, progress, replot: bool = False) -> dict | None:
  """Runs the whole protocol on ``problem``; writes the outputs; returns the summary.

  ``replot=True``: no training; redraws the PNGs from the saved curves
  (``<task>_curves.npz``) and returns None.
  """
  out_dir = pathlib.Path(out_dir)
  if replot:
    _plot(problem, config, out_dir, *_load_curves(out_dir / f"{problem.name}_curves.npz"))
    return None
  out_dir.mkdir(parents=True, exist_ok=True)
  steps = config.quick_steps if quick else config.steps
  chunk = config.quick_chunk if quick else config.chunk
  kw = dict(steps=steps, seeds=seeds, chunk=chunk, progress=progress)

  grid = QUICK_GRID if quick else M.ADAMW_GRID
  grid_logs = runner.train(problem, M.adamw_grid(grid), **kw)
  scores = [_score(l, config.select_by, problem.higher_is_better) for l in grid_logs]
  best_i = int(np.argmin(scores))
  best_lr, best_log = grid[best_i], grid_logs[best_i]
  best_log = best_log._replace(method=best_log.method._replace(
      name=f"AdamW best constant ({best_lr:g})", family="adamw"))
  grid_cost = sum(l.seconds for l in grid_logs)
  start = best_lr / M.START_BELOW_BEST

  presets, blockwise_presets = config.presets, config.blockwise_presets
  contrib = M.contrib() if config.contrib else []
  if quick:  # smoke run: one of each kind (compile time dominates tiny budgets)
    presets = tuple(p for p in presets if p == M.DEFAULT)
    blockwise_presets = tuple(p for p in blockwise_presets if p == M.DEFAULT)
    contrib = [m for m in contrib if m.name in QUICK_CONTRIB]
  todo = []
  if config.cosine:
    todo.append(M.adamw_cosine(best_lr, steps))
  todo.append(M.drop_in())
  todo += [M.preset(label, start) for label in presets]
  todo += [M.preset(label, start, blocks=problem.blocks, blocks_label=config.blocks_label)
           for label in blockwise_presets]
  todo += [M.preset(M.DEFAULT, start, blocks=b, blocks_label=lbl)
           for lbl, b in config.extra_blocks]
  if config.exact:
    todo.append(M.preset(M.DEFAULT, start, approximation="2x2"))
  if config.hypergradient:
    todo.append(M.adam_hd(start))
  todo += contrib
  logs = [best_log] + [log for m in todo for log in runner.train(problem, m, **kw)]
  sweep_logs = []
  if config.init_sweep:
    sweep_logs = runner.train(
        problem, M.init_sweep(QUICK_SWEEP if quick else M.INIT_SWEEP), **kw)

  default = next(l for l in logs if l.method.name == f"{M.DEFAULT} scalar")
  table = _tables(problem, config, steps, seeds, best_lr, start, grid_logs, grid_cost,
                  logs, sweep_logs)
  (out_dir / f"{problem.name}.md").write_text(table)
  _plot(problem, config, out_dir, best_lr, logs, sweep_logs)
  _save_curves(out_dir / f"{problem.name}_curves.npz", grid_logs + logs + sweep_logs)
  summary = _summary(problem, config, steps, best_lr, grid_cost, logs, default)
  return {"task": problem.name, "table_md": table, "summary_lines": summary,
          "best_lr": best_lr, "steps": steps}


def _fmt(x, digits=3):
  x = np.asarray(x, dtype=float)
  if not np.all(np.isfinite(x)):
    return "diverged"
  m, s = float(x.mean()), float(x.std())
  return f"{m:.{digits}g} ± {s:.1g}" if len(x) > 1 else f"{m:.{digits}g}"


def _at(log, key, fraction, floor=0.0):
  i = int(round(fraction * (len(log.steps) - 1)))
  return getattr(log, key)[:, i] - floor


def _tables(problem, config, steps, seeds, best_lr, start, grid_logs, grid_cost, logs,
            sweep_logs):
  floor = problem.train_loss_floor
  loss_name = "train loss − floor" if floor else "train loss"
  budgets = [int(f * steps) for f in BUDGET_FRACTIONS]
  lines = [f"# {config.title}", "", config.description.strip(), "",
           f"Budget {steps} steps, {seeds} seeds (mean ± std over seeds), evaluated every "
           f"{(logs[0].steps[1])} steps. Train loss on the full train set"
           + (f" minus its floor {floor:.4f}" if floor else "") + f"; {problem.test_name} on "
           f"held-out data. Wall time: training steps of all {seeds} seeds together "
           "(vmapped, one process, compile excluded).", "",
           f"Best constant AdamW rate (by final {'train loss' if config.select_by == 'train_loss' else problem.test_name}): "
           f"**{best_lr:g}**; the grid itself cost **{grid_cost:.1f} s**. metaoptax methods start "
           f"at best / {M.START_BELOW_BEST:g} = {start:.2g} with the paper's default meta "
           "settings (η = 1e-3, γ = 1).", "",
           "| method | " + " | ".join(f"{loss_name} @{b}" for b in budgets) + " | "
           + " | ".join(f"{problem.test_name} @{b}" for b in budgets)
           + " | wall time (s) | tuning cost (s) | α: peak (step) / plateau step / final | settings |",
           "|---" * (2 * len(budgets) + 5) + "|---|"]

  def row(log, tuning=""):
    cells = [_fmt(_at(log, "train_loss", f, floor)) for f in BUDGET_FRACTIONS]
    cells += [_fmt(_at(log, "test", f), 4) for f in BUDGET_FRACTIONS]
    alpha = ""
    if log.step_sizes is not None and np.all(np.isfinite(log.step_sizes)):
      plateau, peak, peak_step = plateau_step(log)
      final = np.exp(np.mean(np.log(np.maximum(log.step_sizes[:, -1], 1e-30))))
      alpha = f"{peak:.2g} ({peak_step}) / {plateau} / {final:.2g}"
    return (f"| {log.method.name} | " + " | ".join(cells) +
            f" | {log.seconds:.1f} | {tuning} | {alpha} | {log.method.info} |")

  for log in logs:
    lines.append(row(log, f"{grid_cost:.1f} (grid)" if log.method.family == "adamw" else "0"))
  lines += ["", "AdamW grid (constant rates):", "",
            f"| lr | final {loss_name} | final {problem.test_name} | wall time (s) |",
            "|---|---|---|---|"]
  for log in grid_logs:
    lines.append(f"| {log.method.info} | {_fmt(_final(log, 'train_loss') - floor)} | "
                 f"{_fmt(_final(log, 'test'), 4)} | {log.seconds:.1f} |")
  lines.append(f"| **grid total** | | | **{grid_cost:.1f}** |")
  if sweep_logs:
    lines += ["", f"Initial-step-size sweep, {M.DEFAULT} scalar (paper Figs. 2-3):", "",
              "| start | " + " | ".join(f"{loss_name} @{b}" for b in budgets)
              + f" | final {problem.test_name} | α: peak (step) / plateau step / final |",
              "|---" * (len(budgets) + 3) + "|"]
    for log in sweep_logs:
      r = row(log).split(" | ")
      # r: name, the losses, the tests (one per budget), wall, tuning, alpha, settings
      n = len(BUDGET_FRACTIONS)
      lines.append(f"| {log.method.info} | " + " | ".join(r[1:1 + n])
                   + f" | {r[2 * n]} | {r[2 * n + 3]} |")
  return "\n".join(lines) + "\n"


def _summary(problem, config, steps, best_lr, grid_cost, logs, default):
  """Markdown lines for summary.md: the suite's targets (the untuned default matches
  or beats the best constant AdamW and beats optax.contrib), met or missed."""
  key = config.select_by
  metric = "train loss" if key == "train_loss" else problem.test_name
  hib = problem.higher_is_better and key == "test"
  by_name = {l.method.name: l for l in logs}
  best = logs[0]

  def val(log):
    return _final(log, key)

  d, b = val(default), val(best)
  tol = max(d.std(), b.std())
  diff = (d.mean() - b.mean()) * (-1 if hib else 1)  # > 0: default worse
  met = bool(np.isfinite(diff) and diff <= tol)
  contrib = [l for l in logs if l.method.family == "contrib"]
  beaten = [l.method.name for l in contrib
            if not np.isfinite(val(l).mean()) or
            ((val(l).mean() - d.mean()) * (-1 if hib else 1)) > 0]
  plateau, peak, peak_step = plateau_step(default)
  lines = [
      f"**{config.title}** ({steps} steps; metric: final {metric}"
      + (" − floor" if key == "train_loss" and problem.train_loss_floor else "") + "): "
      f"metaoptax default {_fmt(d - (problem.train_loss_floor if key == 'train_loss' else 0))}"
      f" vs best constant AdamW ({best_lr:g}) "
      f"{_fmt(b - (problem.train_loss_floor if key == 'train_loss' else 0))} → target "
      f"'matches or beats' {'MET' if met else 'MISSED'} (tolerance: the larger seed std); "
      f"beats {len(beaten)}/{len(contrib)} optax.contrib optimizers"
      + (f" ({', '.join(beaten)})" if beaten else "") + "; "
      f"learned α peaked at {peak:.2g} (step {peak_step}), reached half its peak at step "
      f"{plateau}; grid search cost {grid_cost:.0f} s vs {default.seconds:.0f} s for the "
      f"default's single run.",
  ]
  if "(AdamW, Adam) " + config.blocks_label in by_name:
    bw = by_name["(AdamW, Adam) " + config.blocks_label]
    floor = problem.train_loss_floor if key == "train_loss" else 0.0
    lines.append(f"  {config.blocks_label} (AdamW, Adam): {_fmt(val(bw) - floor)} vs scalar "
                 f"{_fmt(d - floor)}.")
  return lines


def _save_curves(path, logs):
  arrays = {}
  for i, log in enumerate(logs):
    arrays[f"{i}_steps"] = log.steps
    arrays[f"{i}_train_loss"] = log.train_loss
    arrays[f"{i}_test"] = log.test
    if log.step_sizes is not None:
      arrays[f"{i}_step_sizes"] = log.step_sizes
  arrays["names"] = np.array([l.method.name for l in logs])
  arrays["seconds"] = np.array([l.seconds for l in logs])
  np.savez_compressed(path, **arrays)


def _plot(problem, config, out_dir, best_lr, logs, sweep_logs):
  name = out_dir / problem.name
  plots.loss_curves(problem, logs, f"{name}_loss.png", config.title)
  plots.step_sizes(problem, [l for l in logs if l.step_sizes is not None], best_lr,
                   f"{name}_step_sizes.png", config.title)
  if sweep_logs:
    plots.init_sweep(problem, sweep_logs, best_lr, f"{name}_init_sweep.png", config.title)


_BEST = "AdamW best constant ("
_FROM = " from "


def _family(name: str) -> str:
  """The :class:`runner.Method` family of a saved run, from its name."""
  if name.startswith(_BEST) or name == "AdamW warm-up+cosine":
    return "adamw"
  if name.startswith("AdamW "):
    return "adamw_grid"
  if name == "Adam-HD":
    return "hypergradient"
  if name in {m.name for m in M.contrib()}:
    return "contrib"
  return "init_sweep" if _FROM in name else "metaoptax"


def _load_curves(path):
  """``(best_lr, logs, sweep_logs)`` as :func:`run_task` plotted them, from ``_save_curves``."""
  data = np.load(path)
  logs, sweep_logs, best_lr = [], [], None
  for i, name in enumerate(str(n) for n in data["names"]):
    family = _family(name)
    if name.startswith(_BEST):
      best_lr = float(name[len(_BEST):-1])
    info = f"start {name.split(_FROM)[1]}" if family == "init_sweep" else ""
    log = runner.RunLog(
        method=runner.Method(name, family, make=None, info=info),
        steps=data[f"{i}_steps"], train_loss=data[f"{i}_train_loss"], test=data[f"{i}_test"],
        step_sizes=data[f"{i}_step_sizes"] if f"{i}_step_sizes" in data else None,
        seconds=float(data["seconds"][i]))
    if family == "init_sweep":
      sweep_logs.append(log)
    elif family != "adamw_grid":
      logs.append(log)
  return best_lr, logs, sweep_logs
