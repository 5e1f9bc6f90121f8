"""Smoke test of the benchmark suite: one tiny task config end to end (tables, plots)."""

import importlib
import pathlib

import numpy as np
import pytest

import jax
import jax.numpy as jnp
import optax

from suite_tasks import digits  # benchmarks/ is on sys.path (conftest.py)
from suite_tasks import protocol
from suite_tasks import runner
from suite_tasks.problem import Problem


class _NoBar:

  def __init__(self, *args, **kwargs):
    pass

  def update(self, n):
    pass

  def set_postfix_str(self, s):
    pass

  def close(self):
    pass


@pytest.mark.system  # the benchmark protocol end to end
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


def _quadratic():
  return Problem(
      name="quadratic", init=lambda key: {"w": jax.random.normal(key, (3,))},
      loss=lambda p, batch: jnp.sum((p["w"] - batch) ** 2),
      batch=lambda key: 0.1 * jax.random.normal(key, (3,)),
      evaluate=lambda p: {"train_loss": jnp.sum(p["w"] ** 2), "test": jnp.sum(p["w"])},
      test_name="sum", higher_is_better=False, train_loss_floor=0.0, blocks="per_leaf",
      block_names=("w",))


def test_seed_per_value_runs_value_i_with_seed_i_only():
  """``runner.train(seed_per_value=True)``: run i is the grid's (value i, seed i) run."""
  problem = _quadratic()
  method = runner.Method("SGD", "sgd", optax.sgd, values=(0.01, 0.1),
                         names=(("SGD 0.01", ""), ("SGD 0.1", "")))
  kw = dict(steps=4, seeds=2, chunk=2, progress=_NoBar)
  grid = runner.train(problem, method, **kw)
  (paired,) = runner.train(problem, method, seed_per_value=True, **kw)
  assert paired.train_loss.shape == grid[0].train_loss.shape == (2, 3)
  for i in range(2):
    np.testing.assert_allclose(paired.train_loss[i], grid[i].train_loss[i], rtol=1e-5)
    np.testing.assert_allclose(paired.test[i], grid[i].test[i], rtol=1e-5)
  assert not np.allclose(paired.train_loss[1], grid[1].train_loss[0], rtol=1e-3)
  with pytest.raises(ValueError, match="one value per seed"):
    runner.train(problem, method, seed_per_value=True, steps=4, seeds=3, chunk=2,
                 progress=_NoBar)


def test_train_cached_reads_back_what_it_trained(tmp_path):
  """``runner.train_cached``: the second call reads the logs (names, curves) from the cache
  instead of training; ``cached_only`` returns None for a method the cache lacks."""
  problem = _quadratic()
  method = runner.Method("SGD", "sgd", optax.sgd, values=(0.01, 0.1),
                         names=(("SGD 0.01", "lr 0.01"), ("SGD 0.1", "lr 0.1")))
  kw = dict(steps=4, seeds=2, chunk=2, progress=_NoBar)
  assert runner.train_cached(tmp_path, "sgd", problem, method, cached_only=True, **kw) is None
  trained = runner.train_cached(tmp_path, "sgd", problem, method, **kw)
  broken = method._replace(make=None)  # would fail if it were trained again
  read = runner.train_cached(tmp_path, "sgd", problem, broken, cached_only=True, **kw)
  assert [l.method.name for l in read] == ["SGD 0.01", "SGD 0.1"]
  assert [l.method.info for l in read] == ["lr 0.01", "lr 0.1"]
  for a, b in zip(trained, read):
    np.testing.assert_array_equal(a.train_loss, b.train_loss)
    np.testing.assert_array_equal(a.test, b.test)
    np.testing.assert_array_equal(a.steps, b.steps)
    assert b.step_sizes is None and a.seconds == b.seconds


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


def test_charlm_corpora():
  """The transformer's corpus: the whole standard library's source is >10x the 14 modules
  and holds them; an unknown corpus is an error."""
  from suite_tasks import charlm  # pylint: disable=g-import-not-at-top
  modules, stdlib = charlm.load_text("modules"), charlm.load_text("stdlib")
  assert len(stdlib) > 10 * len(modules)
  assert "class HelpFormatter" in stdlib and "def dedent" in stdlib  # argparse, textwrap
  with pytest.raises(ValueError, match="corpus"):
    charlm.load_text("wikipedia")
