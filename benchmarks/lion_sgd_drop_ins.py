"""``metaoptax.lion()`` and ``metaoptax.sgd(momentum=0.9)`` untuned vs their tuned optax namesakes.

    python benchmarks/lion_sgd_drop_ins.py                   # digits and MNIST-1D
    python benchmarks/lion_sgd_drop_ins.py --tasks digits --quick
    python benchmarks/lion_sgd_drop_ins.py --average-only    # the average on vs off alone

For each task (the suite's digits MLP and MNIST-1D MLP, ``benchmarks/suite_tasks/``),
at ``STEPS`` steps and 3 seeds, the train-loss metric (digits: train loss −
floor; MNIST-1D: train loss) at 10, 25, 50 and 100 % of the budget:

* ``optax.lion`` at every rate of ``LION_GRID`` (optax's default weight decay
  1e-3), ``metaoptax.lion()`` at its defaults, and the same drop-in with Adam
  instead of Lion on ``log(alpha)`` after the climb (the drop-in before Lion was
  its meta optimizer);
* ``optax.sgd(lr, momentum=0.9)`` at every rate of ``SGD_GRID``,
  ``metaoptax.sgd(momentum=0.9)`` at its defaults, the same with ``adamw``'s climb
  and horizon (``climb_rate=0.1, climb_backoff=1, gamma=0.99``: the drop-in before
  its careful climb and the paper's ``gamma``), and DoG (``optax.contrib.dog``), a
  parameter-free SGD;
* prodigy at its defaults, the strongest parameter-free optimizer of the suite.

The drop-ins above are scored on their iterates. Both keep an average of the
weights by default (``average``); the second table, ``lion_sgd_drop_ins_average.md``,
scores each drop-in with the average on (the default, evaluated at
``metaoptax.averaged_params(state)``) and off (``average=None``, its iterates) on the
held-out metric, the task's test accuracy, with the train-loss metric beside it.
``--average-only`` runs that table alone.

Writes ``lion_sgd_drop_ins.md``, ``.json``, ``lion_sgd_drop_ins_<task>.png`` (the
curves of both families) and ``lion_sgd_drop_ins_average.md`` and ``.json`` into
``--out`` (git-ignored ``benchmarks/out/`` unless given).
"""

from __future__ import annotations

import importlib
import json
import pathlib
import sys

import numpy as np
import optax

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _report  # pylint: disable=g-import-not-at-top,wrong-import-position
import metaoptax  # pylint: disable=g-import-not-at-top,wrong-import-position
from metaoptax.step_size import drop_ins  # pylint: disable=g-import-not-at-top,wrong-import-position

from suite_tasks import runner  # pylint: disable=g-import-not-at-top,wrong-import-position

#: The files under benchmarks/results/ that this script writes (glob patterns;
#: tests/integration/test_repository_shape.py checks every committed result against them).
OUTPUTS = ("lion_sgd_drop_ins/lion_sgd_drop_ins.md", "lion_sgd_drop_ins/lion_sgd_drop_ins.json",
           "lion_sgd_drop_ins/lion_sgd_drop_ins_*.png",
           "lion_sgd_drop_ins/lion_sgd_drop_ins_average.md",
           "lion_sgd_drop_ins/lion_sgd_drop_ins_average.json")


TASKS = ("digits", "mnist1d")
STEPS = {"digits": 12_000, "mnist1d": 10_000}
LION_GRID = (3e-5, 1e-4, 3e-4, 1e-3, 3e-3)
SGD_GRID = (1e-2, 3e-2, 1e-1, 3e-1, 1.0)
OUT = HERE / "out"
FRACTIONS = (0.1, 0.25, 0.5, 1.0)
# (key in the run logs, lower is better, label): the metric of each task.
METRIC = {"digits": ("train_loss", True, "train loss − floor"),
          "mnist1d": ("train_loss", True, "train loss")}
#: The held-out metric of both tasks (``RunLog.test``), on which the average is judged.
HELD_OUT = ("test", False, "test accuracy")


def values(log, task, floor, metric=None):
  key, _, _ = metric or METRIC[task]
  v = getattr(log, key)
  return v - floor if key == "train_loss" else v


def at(log, task, floor, fraction, metric=None):
  """The metric (the task's unless given) of every seed at ``fraction`` of the budget."""
  v = values(log, task, floor, metric)
  return v[:, int(round(fraction * (v.shape[1] - 1)))]


def fmt(v, digits=3):
  v = np.asarray(v, float)
  if not np.all(np.isfinite(v)):
    return "diverged"
  return f"{v.mean():.{digits}g} ± {v.std():.1g}"


def lion_with_adam_meta() -> optax.GradientTransformation:
  """``metaoptax.lion()`` with Adam, not Lion, on ``log(alpha)`` after the climb."""
  meta = metaoptax.climb(metaoptax.presets.meta_adam(drop_ins.META_STEP_SIZE),
                         rate=drop_ins.CLIMB_RATE, backoff=drop_ins.CLIMB_BACKOFF)
  return metaoptax.metaoptimize(optax.scale_by_lion(), meta,
                                init_step_size=drop_ins.INIT_STEP_SIZE, weight_decay=1e-3,
                                gamma=drop_ins.GAMMA)


def grid(name, make, rates) -> runner.Method:
  return runner.Method(f"{name} grid", "grid", make, values=tuple(rates),
                       names=tuple((f"{name} {lr:g}", f"lr {lr:g}") for lr in rates))


def averaged(log_name, make) -> list[runner.Method]:
  """The drop-in ``make(average)`` with its average (the default, scored on
  ``metaoptax.averaged_params``) and without (``average=None``, scored on its iterates)."""
  m = runner.Method
  return [m(f"{log_name}, average on (default)", "average", lambda _: make(drop_ins.AVERAGE),
            eval_params=lambda state, params: metaoptax.averaged_params(state),
            learned_step_size=True),
          m(f"{log_name}, average off (average=None)", "average", lambda _: make(None),
            learned_step_size=True)]


def average_methods():
  """(drop-in, [average on, average off]) for ``metaoptax.lion()`` and ``metaoptax.sgd()``."""
  return {"lion": averaged("metaoptax.lion()", lambda a: metaoptax.lion(average=a)),
          "sgd": averaged("metaoptax.sgd(momentum=0.9)",
                          lambda a: metaoptax.sgd(momentum=0.9, average=a))}


def methods():
  """(family, methods): the grids first, then the untuned ones."""
  m = runner.Method
  return {
      "lion": [grid("optax.lion", lambda lr: optax.lion(lr), LION_GRID),
               m("metaoptax.lion()", "metaoptax", lambda _: metaoptax.lion(),
                 learned_step_size=True),
               m("metaoptax.lion(), Adam meta", "metaoptax", lambda _: lion_with_adam_meta(),
                 learned_step_size=True)],
      "sgd": [grid("optax.sgd(momentum=0.9)", lambda lr: optax.sgd(lr, momentum=0.9), SGD_GRID),
              m("metaoptax.sgd(momentum=0.9)", "metaoptax",
                lambda _: metaoptax.sgd(momentum=0.9), learned_step_size=True),
              m("metaoptax.sgd(momentum=0.9), adamw's climb and gamma", "metaoptax",
                lambda _: metaoptax.sgd(momentum=0.9, climb_rate=drop_ins.CLIMB_RATE,
                                        climb_backoff=drop_ins.CLIMB_BACKOFF,
                                        gamma=drop_ins.GAMMA),
                learned_step_size=True),
              m("dog", "contrib", lambda _: optax.contrib.dog())],
      "any": [m("prodigy", "contrib", lambda _: optax.contrib.prodigy())],
  }


def plot(task, label, families, floor, out):
  """One panel per family: the metric's mean over seeds against the step."""
  plt = _report.pyplot()
  fig, axes = plt.subplots(1, len(families), figsize=(6.2 * len(families), 4.6))
  for ax, (family, logs) in zip(axes, families.items()):
    for name, log in logs.items():
      grid = name.split()[0].startswith("optax")
      ax.plot(log.steps, np.nanmean(values(log, task, floor), 0), label=name,
              lw=1.0 if grid else 2.0, ls=":" if grid else ("-" if "metaoptax" in name else "--"))
    ax.set(xlabel="step", ylabel=label, yscale="log", title=f"{task}: {family} (mean of seeds)")
    ax.legend(fontsize=7)
  _report.save_figure(fig, out / f"lion_sgd_drop_ins_{task}.png")


def train_families(task, families, *, quick, seeds, progress):
  """``(out, logs)``: every family's methods on ``task``; ``out`` holds per row the
  task's metric (``"metric"``), the held-out one (``"held_out"``) and the learned α at
  ``FRACTIONS`` of the budget, ``logs`` the run logs by family and name."""
  module = importlib.import_module(f"suite_tasks.{task}")
  problem, config = module.make_problem(), module.CONFIG
  key, _, label = METRIC[task]
  floor = problem.train_loss_floor if key == "train_loss" else 0.0
  steps = config.quick_steps if quick else STEPS[task]
  chunk = config.quick_chunk if quick else 500
  out = {"task": task, "label": label, "held_out": HELD_OUT[2], "steps": steps,
         "floor": floor, "families": {}}
  logs = {}
  for family, ms in families.items():
    rows = logs.setdefault(family, {})
    for method in ms:
      for log in runner.train(problem, method, steps=steps, seeds=seeds, chunk=chunk,
                              progress=progress):
        rows[log.method.name] = log
    out["families"][family] = {
        name: {"metric": [at(log, task, floor, f).tolist() for f in FRACTIONS],
               "held_out": [at(log, task, floor, f, HELD_OUT).tolist() for f in FRACTIONS],
               "alpha": (None if log.step_sizes is None else
                         [float(np.exp(np.log(log.step_sizes[:, int(round(f * (
                             log.step_sizes.shape[1] - 1)))]).mean()))
                          for f in FRACTIONS])}
        for name, log in rows.items()}
  return out, logs


def run_task(task, *, quick, seeds, progress, out_dir):
  out, logs = train_families(task, methods(), quick=quick, seeds=seeds, progress=progress)
  sign = 1 if METRIC[task][1] else -1
  for family in logs:
    graded = {n: r for n, r in out["families"][family].items() if " grid" not in n}
    finals = {n: sign * np.mean(r["metric"][-1]) for n, r in graded.items()
              if n.split()[0].startswith("optax")}
    if finals:
      out["families"][family]["best of the grid (final)"] = graded[min(
          finals, key=lambda n: finals[n] if np.isfinite(finals[n]) else np.inf)]
  prodigy = logs.pop("any")
  plot(task, out["label"], {f: {**rows, **prodigy} for f, rows in logs.items()}, out["floor"],
       out_dir)
  return out


def no_worse(on, off):
  """Whether ``on``'s mean held-out metric (higher is better) is at most one seed
  standard deviation (of ``off``) below ``off``'s."""
  return bool(np.mean(on) >= np.mean(off) - np.std(off))


def average_report(results, commit, quick):
  """The average on vs off: the held-out metric, the train-loss metric, the verdict."""
  lines = ["# The drop-ins' average of the weights: on (default) vs off", "",
           f"Commit `{commit}`{' (QUICK smoke budgets, not results)' if quick else ''}; "
           "3 seeds, mean ± std; `metaoptax.lion()` and `metaoptax.sgd(momentum=0.9)` at "
           "their defaults, with the average (scored on `metaoptax.averaged_params(state)`) "
           "and with `average=None` (scored on the iterates). Command: "
           "`python benchmarks/lion_sgd_drop_ins.py --average-only`. A cell of the verdict "
           "is `ok` where the average's mean held-out metric is at most one seed std (of "
           "off) below off's.", ""]
  for r in results:
    fr = [int(f * r["steps"]) for f in FRACTIONS]
    lines += [f"## {r['task']} ({r['steps']} steps; held out: {r['held_out']})", "",
              "| drop-in | average | " + " | ".join(f"{r['held_out']} @{s}" for s in fr)
              + " | " + " | ".join(f"{r['label']} @{s}" for s in fr) + " |",
              "|---" * (2 + 2 * len(fr)) + "|"]
    for rows in r["families"].values():
      (on_name, on), (_, off) = rows.items()
      name = on_name.split(", average")[0]
      for which, row in (("on (default)", on), ("off (`average=None`)", off)):
        lines.append(f"| {name} | {which} | " + " | ".join(fmt(v, 4) for v in row["held_out"])
                     + " | " + " | ".join(fmt(v) for v in row["metric"]) + " |")
      verdict = ["ok" if no_worse(a, b) else "**worse**"
                 for a, b in zip(on["held_out"], off["held_out"])]
      lines.append(f"| {name} | on no worse than off? | " + " | ".join(verdict)
                   + " |" + "  |" * len(fr))
    lines.append("")
  return lines


def run_average(tasks, *, quick, seeds, progress, out_dir, commit):
  """The average on vs off on every task: ``lion_sgd_drop_ins_average.md`` and ``.json``."""
  results = [train_families(t, average_methods(), quick=quick, seeds=seeds,
                            progress=progress)[0] for t in tasks]
  (out_dir / "lion_sgd_drop_ins_average.json").write_text(
      json.dumps({"commit": commit, "results": results}, indent=1))
  _report.write_table(average_report(results, commit, quick),
                      out_dir / "lion_sgd_drop_ins_average.md")
  print(f"wrote {out_dir / 'lion_sgd_drop_ins_average.md'} and lion_sgd_drop_ins_average.json")


def report(results, commit, quick):
  lines = ["# `metaoptax.lion()` and `metaoptax.sgd(momentum=0.9)` vs tuned optax", "",
           f"Commit `{commit}`{' (QUICK smoke budgets, not results)' if quick else ''}; "
           "3 seeds, mean ± std; drop-ins at their defaults (start 1e-6), nothing set. "
           "Command: `python benchmarks/lion_sgd_drop_ins.py`.", ""]
  for r in results:
    fr = [int(f * r["steps"]) for f in FRACTIONS]
    lines += [f"## {r['task']} ({r['steps']} steps; metric: {r['label']})", "",
              "| method | " + " | ".join(f"@{s}" for s in fr) + " | learned α (10/25/50/100 %) |",
              "|---" * (len(fr) + 2) + "|"]
    for family in r["families"].values():
      for name, row in family.items():
        alpha = ("" if row["alpha"] is None else
                 ", ".join(f"{a:.2g}" for a in row["alpha"]))
        lines.append(f"| {name} | " + " | ".join(fmt(v) for v in row["metric"])
                     + f" | {alpha} |")
    lines.append("")
  return lines


def main(argv=None):
  parser = _report.task_arguments(__doc__.splitlines()[0], TASKS, OUT)
  parser.add_argument("--average-only", action="store_true",
                      help="only the drop-ins with the average on vs off")
  args = parser.parse_args(argv)
  args.out.mkdir(parents=True, exist_ok=True)
  progress = _report.progress_bars()
  commit = _report.git_commit()
  run_average(args.tasks, quick=args.quick, seeds=args.seeds, progress=progress,
              out_dir=args.out, commit=commit)
  if args.average_only:
    return None
  results = [run_task(t, quick=args.quick, seeds=args.seeds, progress=progress, out_dir=args.out)
             for t in args.tasks]
  (args.out / "lion_sgd_drop_ins.json").write_text(
      json.dumps({"commit": commit, "results": results}, indent=1))
  table = _report.write_table(report(results, commit, args.quick),
                              args.out / "lion_sgd_drop_ins.md")
  print(f"wrote {args.out / 'lion_sgd_drop_ins.md'}, lion_sgd_drop_ins.json and "
        "lion_sgd_drop_ins_<task>.png")
  return table


if __name__ == "__main__":
  main()
