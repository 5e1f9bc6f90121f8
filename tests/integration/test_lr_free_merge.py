"""``benchmarks/lr_free.py --combine``: runs over parts of a grid merge into the run over
the whole grid (each tuned baseline's cell keeps the better on validation)."""

import lr_free  # benchmarks/ is on sys.path (conftest.py)


def _result(cells, higher=True, curve="a"):
  return {"task": "t", "steps": 10, "test_name": "acc", "higher_is_better": higher,
          "cells": {"1.0": cells},
          "curves": {"steps": [0, 10], "ours": {}, "best_constant": {"name": curve}}}


def _cell(val, setting):
  return {"test": [val], "val": [val], "train_loss": [0.0], "setting": setting}


def test_tuned_baselines_keep_the_better_on_validation_others_the_later():
  first = _result({"AdamW best constant": _cell(0.8, "lr 0.01"), "prodigy": _cell(0.5, ""),
                   "ours: x": _cell(0.6, "untuned")}, curve="first")
  second = _result({"AdamW best constant": _cell(0.7, "lr 0.1"), "prodigy": _cell(0.4, ""),
                    "ours: x": _cell(0.65, "untuned")}, curve="second")
  (merged,) = lr_free.merge([first, second])
  cells = merged["cells"]["1.0"]
  assert cells["AdamW best constant"]["setting"] == "lr 0.01"  # better on validation
  assert merged["curves"]["best_constant"]["name"] == "first"
  assert cells["prodigy"]["val"] == [0.4] and cells["ours: x"]["val"] == [0.65]  # the later
  # the same in the other order: the better is kept wherever it comes
  (merged,) = lr_free.merge([second, first])
  assert merged["cells"]["1.0"]["AdamW best constant"]["setting"] == "lr 0.01"
  assert merged["curves"]["best_constant"]["name"] == "first"


def test_lower_is_better_and_a_diverged_run_loses():
  first = _result({"schedule-free AdamW, tuned": _cell(float("nan"), "lr 1")}, higher=False)
  second = _result({"schedule-free AdamW, tuned": _cell(2.5, "lr 0.03")}, higher=False)
  third = _result({"schedule-free AdamW, tuned": _cell(2.7, "lr 0.1")}, higher=False)
  (merged,) = lr_free.merge([first, second, third])
  assert merged["cells"]["1.0"]["schedule-free AdamW, tuned"]["setting"] == "lr 0.03"
