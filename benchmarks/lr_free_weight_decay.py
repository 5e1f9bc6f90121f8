"""Issue 29 diagnostic: is the tuned rivals' lead on the networks that overfit their
regularization? AdamW's decoupled decay shrinks the weights by ``rate × λ`` per step,
so tuned schedule-free at a rate of 1e-1–3e-1 (λ = 0.1) decays them 5–15× faster than
``metaoptax.adamw()`` at its climbed 2e-2.

Runs ``metaoptax.adamw(weight_decay=λ)`` (the library's defaults otherwise, evaluated at
its averaged weights) for each λ of ``--decays`` on the tasks of ``lr_free.py`` (3
seeds), scored as there at 10 / 25 / 50 / 100 % of each budget. Beside it: the strongest
rival of the committed report (``results/lr_free/runs.txt`` combined), chosen on
validation. A λ chosen per task is tuning, so no λ here is a candidate default. The
point is the size of the gap a stronger decay closes.

    python benchmarks/lr_free_weight_decay.py                 # ~12 min on 2 cores
    python benchmarks/lr_free_weight_decay.py --tasks mnist1d --quick
"""

from __future__ import annotations

import json
import pathlib

import numpy as np

import _report
import lr_free
import metaoptax
from suite_tasks import runner
from suite_tasks.runner import Method

OUT = pathlib.Path(__file__).parent / "out" / "lr_free_weight_decay"
RUNS = pathlib.Path(__file__).parent / "results" / "lr_free" / "runs.txt"
TASKS = ("mnist1d", "blockwise", "cnn1d")
RIVALS = (lr_free.COSINE, "schedule-free AdamW, tuned", "prodigy")


def decay_methods(decays) -> list[Method]:
  return [Method(f"metaoptax.adamw(weight_decay={wd:g})", "metaoptax",
                 lambda _, wd=wd: metaoptax.adamw(weight_decay=wd),
                 eval_params=lr_free._averaged, learned_step_size=True,  # pylint: disable=protected-access
                 info=f"λ = {wd:g}") for wd in decays]


def committed_rivals() -> dict:
  """``{task: {fraction: (label, test values, val mean)}}``: the strongest rival of the
  committed report in each cell, chosen on validation."""
  paths = [pathlib.Path(__file__).parent.parent / p for p in RUNS.read_text().split()]
  results = lr_free.merge([r for p in paths for r in json.loads(p.read_text()).get("results", [])])
  rivals = {}
  for r in results:
    sign = -1.0 if r["higher_is_better"] else 1.0
    rivals[r["task"]] = {}
    for f, cells in r["cells"].items():
      present = [(label, cells[label]) for label in RIVALS if label in cells]
      label, cell = min(present, key=lambda lc: sign * np.mean(lc[1]["val"]))
      rivals[r["task"]][f] = (label, cell["test"], cell["train_loss"])
  return rivals


def main(argv=None):
  args = _report.task_arguments(__doc__.splitlines()[0], {t: None for t in TASKS}, OUT)
  args.add_argument("--decays", nargs="+", type=float, default=[0.1, 0.3, 1.0, 3.0])
  args = args.parse_args(argv)
  out = pathlib.Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  progress = _report.progress_bars()
  rivals = committed_rivals()
  commit = _report.git_commit(short=True)
  lines = ["# Issue 29: `metaoptax.adamw()` at a stronger weight decay, against the tuned "
           "rivals", "",
           f"Commit `{commit}`; {args.seeds} seeds; test metric at 10 / 25 / 50 / 100 % of "
           "each budget (mean ± std), train loss at 100 % in brackets; the rival is the "
           "committed report's strongest in each cell (chosen on validation, λ = 0.1)."
           f"{' A smoke run (--quick): not results.' if args.quick else ''}", ""]
  record = {"commit": commit, "decays": args.decays, "tasks": {}}
  for name in args.tasks:
    task = lr_free.TASKS[name]
    problem = task.make()
    steps = task.quick_steps if args.quick else task.steps
    chunk = steps // lr_free.CHECKPOINTS
    logs = [log for m in decay_methods(args.decays)
            for log in runner.train(problem, m, steps=steps, seeds=args.seeds, chunk=chunk,
                                    progress=progress)]
    index = {f: lr_free._index(steps, chunk, f) for f in lr_free.FRACTIONS}  # pylint: disable=protected-access
    lines += [f"## {name} ({steps} steps; {problem.test_name})", "",
              "| method | 10 % | 25 % | 50 % | 100 % |", "|---|---|---|---|---|"]
    record["tasks"][name] = {}
    for log in logs:
      cells = [lr_free._fmt(log.test[:, i]) for i in index.values()]  # pylint: disable=protected-access
      final = float(np.mean(log.train_loss[:, index[1.0]]))
      lines.append(f"| {log.method.name} | " + " | ".join(cells) + f" ({final:.3g}) |")
      record["tasks"][name][log.method.info] = {
          str(f): {"test": log.test[:, i].tolist(), "val": log.val[:, i].tolist(),
                   "train_loss": log.train_loss[:, i].tolist()} for f, i in index.items()}
    if not args.quick and name in rivals:
      row = rivals[name]
      lines.append("| strongest rival (committed) | " + " | ".join(
          f"{lr_free._fmt(row[str(f)][1])} {row[str(f)][0].split(',')[0]}"  # pylint: disable=protected-access
          for f in lr_free.FRACTIONS) + f" ({np.mean(row['1.0'][2]):.3g}) |")
    lines.append("")
  (out / "lr_free_weight_decay.json").write_text(json.dumps(record))
  _report.write_table(lines, str(out / "lr_free_weight_decay.md"))


if __name__ == "__main__":
  main()
