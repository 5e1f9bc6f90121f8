"""``benchmarks/lr_free.py``: AlgoPerf's self-tuning comparison, schedule-free AdamW at the
one rate best on validation over every task and budget (``one_rate``), the held-out tasks
choosing nothing; the per-rate cells of two runs of a task merge."""

import math

import lr_free  # benchmarks/ is on sys.path (conftest.py)

SF = lr_free.SCHEDULE_FREE


def _cell(val):
  return {"test": [val], "val": [val], "train_loss": [0.0]}


def _task(name, by_rate, higher=True):
  """A task whose rate ``q`` scores ``by_rate[q]`` on validation at every budget."""
  fractions = [str(f) for f in lr_free.FRACTIONS]
  return {"task": name, "steps": 10, "test_name": "acc", "higher_is_better": higher,
          "cells": {f: {f"ours: {lr_free.LIBRARY_DEFAULT}": _cell(0.5)} for f in fractions},
          "curves": {"ours": {}},
          "per_rate": {SF: {q: {f: _cell(v) for f in fractions} for q, v in by_rate.items()}}}


def test_the_rate_of_least_mean_relative_regret_the_held_out_task_aside():
  accuracy = _task("a", {"0.01": 0.9, "0.1": 0.6})  # regrets 0, 1/3 (0.3 / 0.9)
  bits = _task("b", {"0.01": 3.0, "0.1": 2.0}, higher=False)  # regrets 1/2, 0
  held_out = _task(lr_free.HELD_OUT_TASKS[0], {"0.01": 0.0, "0.1": 1.0})  # would pick 0.01
  rate, regret = lr_free.one_rate([accuracy, bits, held_out])
  assert math.isclose(regret["0.01"], 0.25) and math.isclose(regret["0.1"], 1 / 6)
  assert rate == "0.1"
  results, lines = lr_free.with_one_rate([accuracy, bits, held_out])
  # the held-out task is scored at the chosen rate; the inputs are not changed
  assert results[2]["cells"]["1.0"][lr_free.ONE_RATE]["test"] == [1.0]
  assert lr_free.ONE_RATE not in held_out["cells"]["1.0"]
  assert any("**0.1**" in line for line in lines)


def test_a_diverged_rate_is_never_chosen_and_no_rates_no_section():
  rate, regret = lr_free.one_rate([_task("a", {"0.01": 0.9, "1": float("nan")})])
  assert rate == "0.01" and regret["1"] == float("inf")
  bare = {**_task("a", {}), "per_rate": {}}
  assert lr_free.with_one_rate([bare]) == ([bare], [])


def test_per_rate_cells_of_two_runs_merge():
  (merged,) = lr_free.merge([_task("a", {"0.01": 0.9}), _task("a", {"0.1": 0.6})])
  assert set(merged["per_rate"][SF]) == {"0.01", "0.1"}
