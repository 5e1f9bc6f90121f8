"""``benchmarks/l2hmc_table.py``: issue 31's table from the committed result files.

Oracles: the committed files themselves (every target gets NUTS, HMC and one L2HMC row; the
mixture's best configuration and its ratio to the best tuned HMC recomputed from the JSON),
and hand-made records whose verdicts are known (0.9x NUTS misses on the funnel and meets on
the non-centered schools; an R-hat of 1.02 misses).
"""

import json

import numpy as np

import l2hmc_table  # benchmarks/ is on sys.path (conftest.py)


def test_table_of_the_committed_files(tmp_path):
  table = l2hmc_table.main(["--out", str(tmp_path)])
  summary = json.loads((tmp_path / "l2hmc_table.json").read_text())
  assert set(summary) == set(l2hmc_table.ORDER)
  rows = [line for line in table.splitlines() if line.startswith("| ") and "`" in line]
  default_runs, _ = l2hmc_table.defaults()
  # NUTS, HMC, the best per-target L2HMC per target, and the default where it ran
  assert len(rows) == 3 * len(l2hmc_table.ORDER) + len(set(default_runs) & set(summary))
  assert sum("the default" in row for row in rows) == len(set(default_runs) & set(summary))
  for name, found in summary.items():
    assert (l2hmc_table.RESULTS / found["file"]).exists()
    assert found["ess/grad"] is not None and found["R-hat"] is not None
    assert (found["ess/s"] is None) is (name not in l2hmc_table.PER_SECOND)
    assert (found["mixture"] is None) is (name != "mixture")
  # the mixture: recomputed from the JSON it names
  mixture = summary["mixture"]
  record = json.loads((l2hmc_table.RESULTS / mixture["file"]).read_text())
  rows = [r for r in record.get("rows", []) if r["sampler"] == mixture["label"]]
  hmc = max([record["hmc"]] + record["hmc_short"], key=lambda r: r["ess_per_grad_x2"])
  ours = np.mean([r["ess_per_grad_x2"] for r in rows])
  crossings = np.mean([r["crossings"] for r in rows])
  assert mixture["mixture"] is bool(ours >= hmc["ess_per_grad_x2"] and crossings >= 0.5)


def _record(nuts_x, ours_x, rhat=1.001):
  def row(ess, rhat):
    return dict(ess_per_grad_x=ess, ess_per_grad_x2=ess, seconds_per_ess_x=1 / ess,
                seconds_per_ess_x2=1 / ess, rhat_x=rhat, rhat_x2=rhat, divergent=0.0,
                crossings=0.0)
  return dict(nuts=row(nuts_x, 1.0), hmc=[dict(row(nuts_x, 1.0), num_steps=10)]), [
      row(ours_x, rhat), row(ours_x, 1.0)]


def test_verdicts_of_known_records():
  record, rows = _record(1.0, 0.9)
  assert l2hmc_table.verdicts("funnel", record, rows)["ess/grad"][0] is False  # needs 1x
  assert l2hmc_table.verdicts("schools_noncentered", record, rows)["ess/grad"][0] is True
  assert l2hmc_table.verdicts("funnel", record, rows)["ess/s"][0] is True  # 0.9x >= 0.5x
  assert l2hmc_table.verdicts("schools_noncentered", record, rows)["ess/s"][0] is None
  record, rows = _record(1.0, 2.0, rhat=1.02)  # the worst seed's R-hat decides
  assert l2hmc_table.verdicts("logistic", record, rows)["R-hat"][0] is False
