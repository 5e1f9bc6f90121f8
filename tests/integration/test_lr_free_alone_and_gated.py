"""``benchmarks/lr_free.py``'s ``alone_and_gated``: the library's default alone and gated by a
validation loss, budgets within one std of the strongest rival and not worse than the best
constant, with the held-out tasks counted apart."""

import lr_free  # benchmarks/ is on sys.path (conftest.py)

ALONE = f"ours: {lr_free.LIBRARY_DEFAULT}"
GATED = f"ours: {lr_free.LIBRARY_GATED_DEFAULT}"


def _cell(*test):
  return {"test": list(test), "val": list(test), "train_loss": [0.0] * len(test)}


def _task(name, alone, gated, with_gated=True):
  """Accuracy at every budget: the rivals at 0.80 (std 0), the best constant at 0.70 (std 0),
  ours at ``alone`` and ``gated`` (3 seeds each)."""
  cells = {lr_free.COSINE: _cell(0.8, 0.8, 0.8), lr_free.SCHEDULE_FREE: _cell(0.8, 0.8, 0.8),
           "prodigy": _cell(0.5, 0.5, 0.5), "AdamW best constant": _cell(0.7, 0.7, 0.7),
           ALONE: _cell(*alone), **({GATED: _cell(*gated)} if with_gated else {})}
  return {"task": name, "steps": 10, "test_name": "acc", "higher_is_better": True,
          "cells": {str(f): cells for f in lr_free.FRACTIONS}, "curves": {"ours": {}}}


def test_counts_each_task_and_the_held_out_ones_apart():
  tasks = [
      # alone: 0.78 +- 0.05 is within one std of 0.80, not worse than 0.70; gated: 0.60 +- 0
      # is neither
      _task("a", (0.72, 0.78, 0.84), (0.60, 0.60, 0.60)),
      # alone: 0.65 +- 0 is neither; gated: 0.81 is better than the rivals
      _task("b", (0.65, 0.65, 0.65), (0.81, 0.81, 0.81)),
      _task(lr_free.HELD_OUT_TASKS[0], (0.80, 0.80, 0.80), (0.65, 0.65, 0.65)),
      _task("c", (0.80, 0.80, 0.80), (), with_gated=False),  # did not run the gate: left out
  ]
  lines = lr_free.alone_and_gated(tasks)
  assert "| a | 4 / 4 | 0 / 0 |" in lines
  assert "| b | 0 / 0 | 4 / 4 |" in lines
  assert f"| {lr_free.HELD_OUT_TASKS[0]} (held out) | 4 / 4 | 0 / 0 |" in lines
  assert not any(line.startswith("| c |") for line in lines)
  assert "| the tasks that choose (2 × 4 budgets) | 4 / 4 of 8 | 4 / 4 of 8 |" in lines
  assert "| held-out tasks (1 × 4 budgets) | 4 / 4 of 4 | 0 / 0 of 4 |" in lines


def test_no_task_ran_both_no_section():
  assert lr_free.alone_and_gated([_task("c", (0.8, 0.8, 0.8), (), with_gated=False)]) == []
