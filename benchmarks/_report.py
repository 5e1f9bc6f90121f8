"""Shared output helpers of the benchmark scripts: markdown tables, headless plots, the commit."""

from __future__ import annotations

import os
import pathlib
import subprocess


def write_table(lines: list[str], path: str) -> str:
  """Joins ``lines`` into a markdown table, prints it and writes it to ``path``."""
  table = "\n".join(lines) + "\n"
  print(table)
  os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
  with open(path, "w") as f:
    f.write(table)
  return table


def pyplot():
  """``matplotlib.pyplot`` on the headless Agg backend."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  return plt


def save_figure(fig, path) -> None:
  """Lays out ``fig``, writes it to ``path`` as a PNG (110 dpi) and closes it."""
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def bars_by_size(ax, names: list[str], values: dict, fontsize: int = 8) -> None:
  """Horizontal bars, one group per name and one bar per size: ``values`` maps each size
  to its values in the order of ``names``."""
  height = 0.8 / len(values)
  for k, (size, row) in enumerate(values.items()):
    ax.barh([i + k * height for i in range(len(names))], row, height=height, label=size)
  ax.axvline(1.0, color="black", lw=0.8)
  ax.set_yticks([i + 0.4 - height / 2 for i in range(len(names))], names, fontsize=fontsize)
  if not ax.yaxis_inverted():  # the first name on top (axes sharing y are inverted once)
    ax.invert_yaxis()


def git_commit(short: bool = False) -> str:
  """The commit of the working tree (with a note if it has uncommitted changes), or "unknown"."""
  here = pathlib.Path(__file__).resolve().parent
  try:
    commit = subprocess.run(["git", "rev-parse"] + (["--short"] if short else []) + ["HEAD"],
                            cwd=here, capture_output=True, text=True, check=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                           capture_output=True, text=True, check=True).stdout.strip()
    return commit + (" (with uncommitted changes)" if dirty else "")
  except (OSError, subprocess.CalledProcessError):
    return "unknown"


def task_arguments(description: str, tasks, out):
  """The task benchmarks' command line: ``--tasks``, ``--quick``, ``--seeds``, ``--out``."""
  import argparse  # pylint: disable=g-import-not-at-top
  parser = argparse.ArgumentParser(description=description)
  parser.add_argument("--tasks", nargs="+", default=list(tasks), choices=tasks)
  parser.add_argument("--quick", action="store_true", help="smoke-run budgets, not results")
  parser.add_argument("--seeds", type=int, default=3)
  parser.add_argument("--out", type=pathlib.Path, default=out)
  return parser


def progress_bars():
  """``tqdm.tqdm`` for one bar per run, cleared when the run ends."""
  import functools  # pylint: disable=g-import-not-at-top
  import tqdm  # pylint: disable=g-import-not-at-top
  return functools.partial(tqdm.tqdm, leave=False, dynamic_ncols=True, mininterval=1.0)
