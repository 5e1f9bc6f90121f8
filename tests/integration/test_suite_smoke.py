"""Smoke test of the benchmark suite: one tiny task config end to end (tables, plots)."""

import importlib
import pathlib

import numpy as np
import pytest

from suite_tasks import digits  # benchmarks/ is on sys.path (conftest.py)
from suite_tasks import protocol


class _NoBar:

  def __init__(self, *args, **kwargs):
    pass

  def update(self, n):
    pass

  def set_postfix_str(self, s):
    pass

  def close(self):
    pass


def test_tiny_digits_protocol_end_to_end(tmp_path):
  config = protocol.TaskConfig(
      title="tiny", description="tiny digits config", steps=8, quick_steps=8, chunk=2,
      quick_chunk=2, select_by="train_loss", contrib=False, hypergradient=False,
      cosine=False, presets=("(AdamW, Adam)",), blockwise_presets=())
  result = protocol.run_task(digits.make_problem(), config, quick=True, seeds=2,
                             out_dir=tmp_path, progress=_NoBar)
  assert result["task"] == "digits" and result["best_lr"] in protocol.QUICK_GRID
  table = (tmp_path / "digits.md").read_text()
  assert "(AdamW, Adam) scalar" in table and "grid total" in table
  assert "metaoptax.adamw()" in table
  assert table.count("train loss − floor @") == 2 * len(protocol.BUDGET_FRACTIONS) == 8
  for suffix in ("_loss.png", "_step_sizes.png", "_init_sweep.png", "_curves.npz"):
    assert (tmp_path / f"digits{suffix}").stat().st_size > 0
  curves = np.load(tmp_path / "digits_curves.npz")
  assert np.all(np.isfinite(curves["0_train_loss"]))
  assert any("MET" in line or "MISSED" in line for line in result["summary_lines"])


BENCHMARKS = sorted(p.stem for p in (pathlib.Path(__file__).resolve().parents[2]
                                     / "benchmarks").glob("*.py") if not p.stem.startswith("_"))


@pytest.mark.parametrize("script", BENCHMARKS)
def test_every_benchmark_script_imports(script):
  """Each script's imports resolve and it parses ``--help`` (a broken import fails here,
  not hours into a benchmark run)."""
  module = importlib.import_module(script)
  with pytest.raises(SystemExit) as exit_info:
    module.main(["--help"])
  assert exit_info.value.code == 0
