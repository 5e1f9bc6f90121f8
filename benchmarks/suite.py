"""The metaoptax benchmark suite: untuned learned step sizes vs tuned AdamW and
optax.contrib's parameter-free optimizers, on five tasks.

    python benchmarks/suite.py                 # full suite (~2 h on one shared core)
    python benchmarks/suite.py --quick         # smoke run (~3 min)
    python benchmarks/suite.py --tasks digits charlm
    python benchmarks/suite.py --replot        # redraw the PNGs from saved curves

Tasks (``benchmarks/suite_tasks/``): ``digits`` (MLP, scikit-learn digits),
``mnist1d`` (MLP, MNIST-1D generated locally), ``charlm`` (character transformer
on the Python standard library's source), ``continual`` (Sutton 1992's tracking
task), ``blockwise`` (deep MLP with one step size per layer vs one scalar). Each
writes ``<task>.md``, ``<task>_curves.npz`` and PNG plots into ``--out`` (default
``benchmarks/results/suite``); this script writes ``summary.md`` with the git
commit measured at, followed by the hand-written analysis in ``summary_notes.md``
if that file exists.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import importlib
import json
import os
import pathlib
import platform
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _report  # pylint: disable=g-import-not-at-top,wrong-import-position
from suite_tasks import TASKS  # pylint: disable=g-import-not-at-top,wrong-import-position


def load_task(name):
  """The task module ``suite_tasks.<name>`` (see ``suite_tasks/__init__.py``)."""
  return importlib.import_module(f"suite_tasks.{name}")


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--quick", action="store_true", help="tiny budgets (smoke run)")
  parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS)
  parser.add_argument("--seeds", type=int, default=3)
  parser.add_argument("--out", type=pathlib.Path, default=HERE / "results" / "suite")
  parser.add_argument("--replot", action="store_true",
                      help="no training: redraw the PNGs from the saved <task>_curves.npz")
  args = parser.parse_args(argv)
  if args.replot:
    for name in args.tasks:
      try:
        load_task(name).run(quick=args.quick, seeds=args.seeds, out_dir=args.out,
                            progress=None, replot=True)
      except FileNotFoundError as e:  # no saved curves for this task in --out
        print(f"[suite] --replot: {name} skipped ({e})", flush=True)
        continue
      print(f"[suite] --replot: {name} redrawn", flush=True)
    return
  import tqdm  # pylint: disable=g-import-not-at-top

  args.out.mkdir(parents=True, exist_ok=True)
  commit = _report.git_commit()
  progress = functools.partial(tqdm.tqdm, leave=False, dynamic_ncols=True, mininterval=1.0)
  times = {}
  for name in args.tasks:
    module = load_task(name)
    print(f"[suite] task {name} ...", flush=True)
    start = time.perf_counter()
    result = module.run(quick=args.quick, seeds=args.seeds, out_dir=args.out, progress=progress)
    times[name] = time.perf_counter() - start
    print(result["table_md"], flush=True)
    print(f"[suite] task {name} done in {times[name]:.0f} s", flush=True)
    record = {"task": result["task"], "summary_lines": list(result["summary_lines"]),
              "seconds": times[name], "commit": commit, "quick": args.quick,
              "finished": f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC"}
    (args.out / f"{name}_summary.json").write_text(json.dumps(record, indent=1))

  write_summary(args.out, quick=args.quick, seeds=args.seeds)


def write_summary(out, *, quick, seeds):
  """``summary.md`` from every task's ``<task>_summary.json`` in ``out`` (so tasks can be
  run by separate invocations), each with the commit it was measured at."""
  import jax  # pylint: disable=g-import-not-at-top
  records = [json.loads((out / f"{t}_summary.json").read_text()) for t in TASKS
             if (out / f"{t}_summary.json").exists()]
  commits = sorted({r["commit"] for r in records})
  lines = ["# metaoptax benchmark suite: summary", "",
           f"Measured at commit{'s' if len(commits) > 1 else ''} "
           + ", ".join(f"`{c}`" for c in commits)
           + f" ({'QUICK smoke budgets, not results' if quick else 'full budgets'}), "
           f"{seeds} seeds, jax {jax.__version__}, {platform.machine()}, {os.cpu_count()} CPUs "
           f"shared with other jobs (wall times are noisy; compare within a table).",
           "", "Command: `python benchmarks/suite.py" + (" --quick" if quick else "") + "`", ""]
  for r in records:
    lines += [f"## {r['task']} ([table]({r['task']}.md), {r['seconds']:.0f} s total, "
              f"finished {r['finished']}, commit `{r['commit'][:12]}`"
              + (", QUICK" if r["quick"] else "") + ")", ""]
    lines += list(r["summary_lines"]) + [""]
  notes = out / "summary_notes.md"  # hand-written analysis (why targets are missed)
  if notes.exists():
    lines += [notes.read_text().rstrip(), ""]
  summary = "\n".join(lines)
  (out / "summary.md").write_text(summary)
  print(summary)


if __name__ == "__main__":
  main()
