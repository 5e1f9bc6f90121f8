"""Learning-rate-free: ``metaoptax.adamw()`` untuned vs tuned AdamW, prodigy and schedule-free.

    python benchmarks/lr_free.py                       # the four tasks at full budget
    python benchmarks/lr_free.py --tasks digits --quick

For each task of the suite (digits, MNIST-1D, the character transformer, the
blockwise MLP; ``benchmarks/suite_tasks/``), at its full budget and 3 seeds:

1. ``metaoptax.adamw(1e-6, weight_decay=0.1)``: every other setting at its
   default (climb rate, meta step), the same weight decay as the AdamW grid.
2. The baselines of the suite, read from its saved curves
   (``benchmarks/results/suite/<task>_curves.npz``, measured at the commits of
   ``summary.md``): AdamW at every rate of the grid, warm-up + cosine at the
   tuned peak, prodigy and schedule-free AdamW at their defaults, the paper's
   (AdamW, Adam) preset. Those the suite did not run on a task are run here.
3. The climb: from every start ``1e-8 ... best rate / 2`` (decades), the first
   step at which the learned step size reaches half the best constant rate
   (every step recorded, 3 seeds, ``CLIMB_STEPS`` steps).

The metric is the issue's per task: digits train loss − floor, MNIST-1D train
loss (test accuracy reported), the character model's validation bits/char, the
blockwise MLP's test accuracy. "Best constant" is the grid's rate with the best
final metric; "best at budget" is the best rate of the grid at that budget.
Writes ``lr_free.md``, ``lr_free.json`` and ``lr_free_<task>.png`` into ``--out``.
"""

from __future__ import annotations

import importlib
import json
import pathlib
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _report  # pylint: disable=g-import-not-at-top,wrong-import-position
import metaoptax  # pylint: disable=g-import-not-at-top,wrong-import-position

from suite_tasks import methods as M  # pylint: disable=g-import-not-at-top,wrong-import-position
from suite_tasks import runner  # pylint: disable=g-import-not-at-top,wrong-import-position

TASKS = ("digits", "mnist1d", "charlm", "blockwise")
# (key in the run logs, lower is better, label): the metric of each task.
METRIC = {"digits": ("train_loss", True, "train loss − floor"),
          "mnist1d": ("train_loss", True, "train loss"),
          "charlm": ("test", True, "validation bits/char"),
          "blockwise": ("test", False, "test accuracy")}
FRACTIONS = (0.1, 0.25, 0.5, 1.0)
INIT = 1e-6
CLIMB_STEPS = 1000
DROP_IN = "metaoptax.adamw()"
BASELINES = ("AdamW warm-up+cosine", "prodigy", "schedule_free_adamw", "(AdamW, Adam) scalar")


def drop_in_method(init=INIT) -> runner.Method:
  return runner.Method(DROP_IN, "metaoptax",
                       lambda _: metaoptax.adamw(init, weight_decay=M.WEIGHT_DECAY),
                       learned_step_size=True, info=f"start {init:g}, weight decay 0.1")


def saved_logs(task: str) -> dict:
  """Every run in the suite's saved curves, by name."""
  data = np.load(HERE / "results" / "suite" / f"{task}_curves.npz")
  logs = {}
  for i, name in enumerate(str(n) for n in data["names"]):
    logs[name] = runner.RunLog(
        method=runner.Method(name, "saved", make=None), steps=data[f"{i}_steps"],
        train_loss=data[f"{i}_train_loss"], test=data[f"{i}_test"],
        step_sizes=data[f"{i}_step_sizes"] if f"{i}_step_sizes" in data else None,
        seconds=float(data["seconds"][i]))
  return logs


def values(log, task, floor):
  key, _, _ = METRIC[task]
  v = getattr(log, key)
  return v - floor if key == "train_loss" else v


def at(log, task, floor, fraction):
  """The metric of every seed at ``fraction`` of the budget."""
  v = values(log, task, floor)
  return v[:, int(round(fraction * (v.shape[1] - 1)))]


def better_or_within(ours, theirs, lower_is_better):
  """Better in the mean, or within one seed std (the larger of the two)."""
  diff = (ours.mean() - theirs.mean()) * (1 if lower_is_better else -1)
  return bool(np.isfinite(ours.mean()) and diff <= max(ours.std(), theirs.std()))


def climb_steps(problem, best_lr, starts, seeds, steps):
  """First step at which alpha >= best_lr / 2, per start and seed (``steps`` if never)."""
  keys = jax.random.split(jax.random.key(1000), seeds)
  hs = jnp.repeat(jnp.log(jnp.asarray(starts, jnp.float32)), seeds)
  keys = jnp.tile(keys, (len(starts),))

  def one(key, log_a0):
    opt = metaoptax.adamw(INIT, weight_decay=M.WEIGHT_DECAY)
    p = problem.init(jax.random.fold_in(key, 0))
    s = M.set_start(opt.init(p), jnp.exp(log_a0))

    def body(carry, k):
      p, s = carry
      u, s = opt.update(jax.grad(problem.loss)(p, problem.batch(k)), s, p)
      return (optax.apply_updates(p, u), s), metaoptax.step_sizes(s)[0]

    _, alphas = jax.lax.scan(body, (p, s), jax.random.split(jax.random.fold_in(key, 1), steps))
    return alphas

  alphas = np.asarray(jax.jit(jax.vmap(one))(keys, hs)).reshape(len(starts), seeds, steps)
  reached = alphas >= best_lr / 2
  first = np.where(reached.any(-1), reached.argmax(-1) + 1, steps)
  return first, alphas


def run_task(task, *, quick, seeds, progress, out):
  module = importlib.import_module(f"suite_tasks.{task}")
  problem, config = module.make_problem(), module.CONFIG
  key, lower_is_better, label = METRIC[task]
  floor = problem.train_loss_floor if key == "train_loss" else 0.0
  steps = config.quick_steps if quick else config.steps
  chunk = config.quick_chunk if quick else config.chunk
  kw = dict(steps=steps, seeds=seeds, chunk=chunk, progress=progress)
  saved = saved_logs(task)
  if quick:  # smoke run: nothing saved is at this budget; run a small grid
    grid = {f"AdamW {lr:g}": log for lr, log in zip(
        (1e-3, 1e-2), runner.train(problem, M.adamw_grid((1e-3, 1e-2)), **kw))}
    base = {}
  else:
    grid = {f"AdamW {lr:g}": saved[f"AdamW {lr:g}"] for lr in M.ADAMW_GRID}
    base = {n: saved[n] for n in BASELINES if n in saved}
  missing = [m for m in M.contrib() if m.name in BASELINES and m.name not in base]
  run_here = [m.name for m in missing]
  for m in missing:
    (base[m.name],) = runner.train(problem, m, **kw)
  sign = 1 if lower_is_better else -1
  finals = {n: sign * float(np.mean(at(l, task, floor, 1.0))) for n, l in grid.items()}
  best_name = min(finals, key=lambda n: finals[n] if np.isfinite(finals[n]) else np.inf)
  best_lr = float(best_name.split()[1])
  start = time.perf_counter()
  (ours,) = runner.train(problem, drop_in_method(), **kw)
  seconds = time.perf_counter() - start
  starts = [a for a in 10.0 ** np.arange(-8, -1) if a <= best_lr / 2]
  first, alphas = climb_steps(problem, best_lr, starts, seeds, 200 if quick else CLIMB_STEPS)

  rows, checks = [], {}
  budget_best = {}
  for f in FRACTIONS:
    scores = {n: sign * float(np.mean(at(l, task, floor, f))) for n, l in grid.items()}
    budget_best[f] = min(scores, key=lambda n: scores[n] if np.isfinite(scores[n]) else np.inf)
  named = {DROP_IN: ours, f"AdamW best constant ({best_lr:g})": grid[best_name], **base}
  for name, log in named.items():
    rows.append((name, [at(log, task, floor, f) for f in FRACTIONS]))
  rows.append(("AdamW best at each budget", [at(grid[budget_best[f]], task, floor, f)
                                             for f in FRACTIONS]))
  for f in FRACTIONS:
    o = at(ours, task, floor, f)
    checks[f"vs best constant @{f:g}"] = better_or_within(o, at(grid[best_name], task, floor, f),
                                                          lower_is_better)
    checks[f"vs best at budget @{f:g}"] = better_or_within(
        o, at(grid[budget_best[f]], task, floor, f), lower_is_better)
  for n in ("prodigy", "schedule_free_adamw", "AdamW warm-up+cosine"):
    if n in base:
      o, t = at(ours, task, floor, 1.0), at(base[n], task, floor, 1.0)
      checks[f"beats {n} @1"] = bool(sign * (o.mean() - t.mean()) < 0)
  test_rows = []
  if key != "test":
    for name, log in named.items():
      test_rows.append((name, [log.test[:, int(round(f * (log.test.shape[1] - 1)))]
                               for f in FRACTIONS]))
  plot(task, problem, label, named, grid, best_lr, starts, alphas, floor, key, out)
  a = np.exp(np.log(ours.step_sizes).mean((0, 2)))
  return {"task": task, "label": label, "steps": steps, "best_lr": best_lr,
          "budget_best": {str(f): budget_best[f] for f in FRACTIONS},
          "rows": [(n, [v.tolist() for v in vs]) for n, vs in rows],
          "test_rows": [(n, [v.tolist() for v in vs]) for n, vs in test_rows],
          "checks": checks, "starts": starts, "climb_first": first.tolist(),
          "alpha_at": {str(f): float(a[int(round(f * (len(a) - 1)))]) for f in FRACTIONS},
          "seconds": seconds, "test_name": problem.test_name, "run_here": run_here}


def fmt(v, digits=3):
  v = np.asarray(v, float)
  if not np.all(np.isfinite(v)):
    return "diverged"
  return f"{v.mean():.{digits}g} ± {v.std():.1g}"


def report(results, commit, quick) -> list[str]:
  lines = ["# Learning-rate-free: `metaoptax.adamw()` vs tuned AdamW, prodigy, schedule-free", "",
           f"Commit `{commit}`{' (QUICK smoke budgets, not results)' if quick else ''}; "
           "3 seeds, mean ± std. `metaoptax.adamw(1e-6, weight_decay=0.1)`, nothing else "
           "set. Baselines: the suite's saved runs (`results/suite/`, commits in its "
           "summary.md) unless marked *run here*. Command: `python benchmarks/lr_free.py`.", ""]
  for r in results:
    fr = [int(f * r["steps"]) for f in FRACTIONS]
    lines += [f"## {r['task']} ({r['steps']} steps; metric: {r['label']})", "",
              f"Best constant AdamW rate (final metric): {r['best_lr']:g}; best rate at each "
              "budget: " + ", ".join(f"{int(float(f) * r['steps'])}: {n.split()[1]}"
                                     for f, n in r["budget_best"].items()) + ".", "",
              "| method | " + " | ".join(f"@{s} ({int(f * 100)} %)" for s, f in zip(fr, FRACTIONS))
              + " |", "|---" * (len(fr) + 1) + "|"]
    for name, vs in r["rows"]:
      mark = " (*run here*)" if name in r.get("run_here", ()) else ""
      lines.append(f"| {name}{mark} | " + " | ".join(fmt(v) for v in vs) + " |")
    if r["test_rows"]:
      lines += ["", f"{r['test_name']} (reported):", "",
                "| method | " + " | ".join(f"@{s}" for s in fr) + " |", "|---" * (len(fr) + 1) + "|"]
      for name, vs in r["test_rows"]:
        lines.append(f"| {name} | " + " | ".join(fmt(v, 4) for v in vs) + " |")
    lines += ["", "Targets (better, or within one seed std): "
              + "; ".join(f"{k}: {'yes' if v else 'NO'}" for k, v in r["checks"].items()) + ".",
              "", f"Learned α at 10/25/50/100 %: "
              + ", ".join(f"{v:.2g}" for v in r["alpha_at"].values())
              + f"; wall time of the drop-in's 3 seeds: {r['seconds']:.0f} s.", "",
              f"Climb: first step at which α ≥ best rate / 2 = {r['best_lr'] / 2:g} "
              "(per seed; the cap means never within the window):", "",
              "| start | seeds |", "|---|---|"]
    for a, steps in zip(r["starts"], r["climb_first"]):
      lines.append(f"| {a:g} | {', '.join(str(s) for s in steps)} |")
    lines.append("")
  return lines


def plot(task, problem, label, named, grid, best_lr, starts, alphas, floor, key, out):
  plt = _report.pyplot()
  fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.8))
  for name, log in named.items():
    v = values(log, task, floor)
    ax1.plot(log.steps, np.nanmean(v, 0), lw=2.2 if name == DROP_IN else 1.2,
             ls="-" if name == DROP_IN else ("--" if "metaoptax" in name or "(" in name[:1]
                                             else ":"), label=name)
  ax1.set(xlabel="step", ylabel=label, title=f"{task}: {label} (mean of 3 seeds)")
  if key == "train_loss":
    ax1.set_yscale("log")
  ax1.legend(fontsize=7)
  t = np.arange(1, alphas.shape[-1] + 1)
  for a0, run in zip(starts, alphas):
    ax2.plot(t, np.exp(np.log(run).mean(0)), label=f"start {a0:g}")
  for lr in M.ADAMW_GRID:
    ax2.axhline(lr, color="gray", lw=0.6, ls="--" if lr == best_lr else ":")
  ax2.axhline(best_lr / 2, color="k", lw=1, ls="-.", label="best rate / 2")
  ax2.set(yscale="log", xlabel="step", ylabel="learned α",
          title=f"the climb: α from every start (grid rates dotted, best dashed)")
  ax2.legend(fontsize=7, ncol=2)
  _report.save_figure(fig, out / f"lr_free_{task}.png")


OUT = HERE / "results" / "lr_free"


def main(argv=None):
  args = _report.task_arguments(__doc__.splitlines()[0], TASKS, OUT).parse_args(argv)
  out = args.out
  out.mkdir(parents=True, exist_ok=True)
  progress = _report.progress_bars()
  commit = _report.git_commit()
  results = []
  for task in args.tasks:
    path = out / f"lr_free_{task}.json"
    results.append(run_task(task, quick=args.quick, seeds=args.seeds, progress=progress,
                            out=out))
    results[-1]["commit"] = commit
    path.write_text(json.dumps(results[-1], indent=1))
    print(f"wrote {path}", flush=True)
  # the report covers every task measured so far (tasks may be run separately)
  every = [json.loads((out / f"lr_free_{t}.json").read_text()) for t in TASKS
           if (out / f"lr_free_{t}.json").exists()]
  commits = sorted({r["commit"] for r in every})
  table = _report.write_table(report(every, ", ".join(commits), args.quick), out / "lr_free.md")
  print(f"wrote {out / 'lr_free.md'} and lr_free_<task>.png")
  return table


if __name__ == "__main__":
  main()
