"""Shared output helpers of the benchmark scripts: markdown tables and headless plots."""

from __future__ import annotations

import os


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
