"""The benchmark suite's protocol end to end on a tiny budget, so the suite cannot rot.

Runs the digits task's whole protocol (AdamW grid, best-rate selection, a metaoptax
preset started 100x below the best rate, an optax.contrib optimizer, tables and plots)
for 20 steps and one seed, and checks what it wrote.
"""

import dataclasses
import functools
import pathlib
import sys

import numpy as np
import pytest

pytest.importorskip("sklearn")
pytest.importorskip("matplotlib")
tqdm = pytest.importorskip("tqdm")

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))

from suite_tasks import digits  # pylint: disable=g-import-not-at-top,wrong-import-position
from suite_tasks import methods  # pylint: disable=g-import-not-at-top,wrong-import-position
from suite_tasks import protocol  # pylint: disable=g-import-not-at-top,wrong-import-position


def test_digits_protocol_runs_and_reports(tmp_path, monkeypatch):
  monkeypatch.setattr(protocol, "QUICK_GRID", (1e-3, 1e-2))
  monkeypatch.setattr(protocol, "QUICK_CONTRIB", ("dog",))
  config = dataclasses.replace(digits.CONFIG, quick_steps=20, quick_chunk=10, exact=False,
                               init_sweep=False, hypergradient=False, cosine=False)
  result = protocol.run_task(digits.make_problem(), config, quick=True, seeds=1,
                             out_dir=tmp_path,
                             progress=functools.partial(tqdm.tqdm, disable=True))
  assert result["task"] == "digits" and result["steps"] == 20
  assert result["best_lr"] in (1e-3, 1e-2)
  table = (tmp_path / "digits.md").read_text()
  assert f"{methods.DEFAULT} scalar" in table and "dog" in table
  assert (tmp_path / "digits_loss.png").stat().st_size > 0
  assert (tmp_path / "digits_step_sizes.png").stat().st_size > 0
  curves = np.load(tmp_path / "digits_curves.npz")
  assert all(np.isfinite(curves[k]).all() for k in curves.files if curves[k].dtype.kind == "f")
