"""Issue 31's table: every target x sampler, per gradient and per second, with its targets.

Reads the committed results (no sampler runs): ``l2hmc_posteriors.json`` (the posteriors and
the mixture), ``l2hmc_posteriors_toys.json`` (the paper's other toys),
``l2hmc_posteriors_schools_long/`` (the centered schools at 4x NUTS's gradients) and
``l2hmc_mixture_dkd.json`` (the mixture's reflection sampler with position Verlet), and
writes one row per target and sampler: NUTS, the best tuned HMC, and the best committed
L2HMC configuration, each from the file and commit it was measured at (NUTS and HMC from the
same process as the L2HMC row, so per-second ratios compare one machine state).

The issue's targets, judged on the seeds' mean (R-hat on the worst seed):

* ESS per gradient of x and of x² at least NUTS's on the funnel, the centered eight schools,
  the logistic regression and the mixture; at least 0.5x NUTS's on the others;
* split R-hat of x and x² < 1.01 (at the protocol's 1,000 transitions; where a run at NUTS's
  gradient budget exists its R-hat is given too);
* ESS per second at least 0.5x NUTS's on the logistic regression and the funnel;
* the mixture: mode crossings in at least 50 % of transitions, and ESS of x² per gradient at
  least the best tuned HMC's (any K measured in that process).

The best L2HMC configuration of a target: the most targets met (R-hat counted met at 1,000
transitions or at NUTS's gradient budget), then the larger of the smaller ESS-per-gradient
ratio to NUTS (x or x²).

    python benchmarks/l2hmc_table.py --out benchmarks/results
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _report  # pylint: disable=g-import-not-at-top,wrong-import-position

#: The files under benchmarks/results/ that this script writes (glob patterns;
#: tests/integration/test_repository_shape.py checks every committed result against them).
OUTPUTS = ("l2hmc_table.json", "l2hmc_table.md",)

RESULTS = HERE / "results"
#: the result files in the format of ``l2hmc_posteriors.py`` (target -> record)
POSTERIOR_FILES = ("l2hmc_posteriors.json", "l2hmc_posteriors_toys.json",
                   "l2hmc_posteriors_schools_long/l2hmc_posteriors.json")
#: the file of ``l2hmc_mixture_dkd.py`` (one mixture record)
MIXTURE_FILES = ("l2hmc_mixture_dkd.json",)
#: the default's runs (``l2hmc_default.py --suite eight``), beside its own NUTS and ChEES-HMC
DEFAULT_FILE = "l2hmc_default_eight.json"
#: targets whose ESS per gradient must reach NUTS's (the others: half of it)
FULL_NUTS = ("funnel", "schools_centered", "logistic", "mixture")
#: targets whose ESS per second must reach half of NUTS's
PER_SECOND = ("logistic", "funnel")
ORDER = ("funnel", "schools_centered", "schools_noncentered", "logistic", "mixture",
         "correlated", "rough_well", "ill_conditioned")
RHAT = 1.01


def records(results: pathlib.Path = RESULTS) -> list[dict]:
  """Every (target, file) record in one form: ``name, target, file, commit, nuts, hmc (a list,
  with num_steps), l2hmc (label -> rows)``."""
  found = []
  for relative in POSTERIOR_FILES:
    path = results / relative
    if not path.exists():
      continue
    for name, record in json.loads(path.read_text()).items():
      if name == "transfer":
        continue
      hmc = [dict(record["hmc"], num_steps=record["protocol"]["num_steps"])]
      hmc += record.get("hmc_short", [])
      groups = {}
      for row in record["l2hmc"]:
        groups.setdefault(row["sampler"], []).append(row)
      found.append(dict(name=name, target=record["target"], file=relative,
                        commit=record["commit"], nuts=record["nuts"], hmc=hmc, l2hmc=groups))
  for relative in MIXTURE_FILES:
    path = results / relative
    if not path.exists():
      continue
    record = json.loads(path.read_text())
    hmc = [dict(record["hmc"], num_steps=record["protocol"]["num_steps"])]
    groups = {}
    for row in record["rows"]:
      groups.setdefault(row["sampler"], []).append(row)
    found.append(dict(name="mixture", target="mixture of two Gaussians (2-d)", file=relative,
                      commit=record["commit"], nuts=record["nuts"],
                      hmc=hmc + record["hmc_short"], l2hmc=groups))
  return found


def _per_second(row, key: str) -> float:
  return 1.0 / row[f"seconds_per_ess_{key}"]


def _mean(rows, key: str) -> float:
  return float(np.mean([r[key] for r in rows]))


def _ratios(rows, nuts, per: str) -> tuple[float, float]:
  """The seeds' mean over NUTS's, of x and x², per gradient (``"grad"``) or second (``"s"``)."""
  if per == "grad":
    return tuple(_mean(rows, f"ess_per_grad_{k}") / nuts[f"ess_per_grad_{k}"] for k in ("x", "x2"))
  return tuple(np.mean([_per_second(r, k) for r in rows]) / _per_second(nuts, k)
               for k in ("x", "x2"))


def _rhat(rows) -> float:
  return max(max(r["rhat_x"], r["rhat_x2"]) for r in rows)


def _budget_rhat(rows):
  """``(worst R-hat, gradient factor)`` of the runs at NUTS's gradient budget, or None."""
  runs = [r["budget"] for r in rows if "budget" in r]
  if len(runs) != len(rows):
    return None
  return _rhat(runs), runs[0].get("budget_factor", 1.0)


def best_hmc(record) -> dict:
  return max(record["hmc"], key=lambda r: r["ess_per_grad_x2"])


def verdicts(name: str, record: dict, rows: list) -> dict:
  """The issue's targets for one sampler's rows: target -> ``(met or None (not a target here),
  text)``."""
  nuts = record["nuts"]
  need = 1.0 if name in FULL_NUTS else 0.5
  gx, gx2 = _ratios(rows, nuts, "grad")
  out = {"ess/grad": (bool(min(gx, gx2) >= need), f"{gx:.2g}x, {gx2:.2g}x; needs {need:g}x")}
  rhat = _rhat(rows)
  budget = _budget_rhat(rows)
  text = f"{rhat:.3f}"
  met = bool(rhat < RHAT)
  if budget is not None:
    text += f"; {budget[0]:.3f} at {budget[1]:g}x NUTS's gradients"
    met_at_budget = bool(budget[0] < RHAT and budget[1] <= 1.0)
  else:
    met_at_budget = False
  out["R-hat"] = (met, text)
  out["R-hat at budget"] = (met_at_budget if budget is not None else None, "")
  if name in PER_SECOND:
    sx, sx2 = _ratios(rows, nuts, "s")
    out["ess/s"] = (bool(min(sx, sx2) >= 0.5), f"{sx:.2g}x, {sx2:.2g}x; needs 0.5x")
  else:
    out["ess/s"] = (None, "")
  if name == "mixture":
    crossings, hmc = _mean(rows, "crossings"), best_hmc(record)
    ours = _mean(rows, "ess_per_grad_x2")
    out["mixture"] = (bool(crossings >= 0.5 and ours >= hmc["ess_per_grad_x2"]),
                      f"crossings {crossings:.2f}; x² {ours / hmc['ess_per_grad_x2']:.2f}x HMC "
                      f"(K = {hmc['num_steps']})")
  else:
    out["mixture"] = (None, "")
  return out


def _rank(found: dict):
  met = sum(bool(v[0]) for k, v in found.items() if k not in ("R-hat", "R-hat at budget"))
  met += bool(found["R-hat"][0] or found["R-hat at budget"][0])
  return met


def best_l2hmc(name: str, candidates: list) -> tuple[dict, str, list]:
  """The best ``(record, label, rows)`` of a target's L2HMC configurations (module docstring)."""
  def key(item):
    record, _, rows = item
    return (_rank(verdicts(name, record, rows)), min(_ratios(rows, record["nuts"], "grad")))
  return max(candidates, key=key)


def _spread(values) -> str:
  values = np.asarray(values, np.float64)
  return f"{values.mean():.3g} ± {values.std():.2g}" if len(values) > 1 else f"{values[0]:.3g}"


def _cell(found: tuple) -> str:
  met, text = found
  if met is None:
    return "—"
  return f"**{'met' if met else 'missed'}** ({text})" if text else ("met" if met else "missed")


def defaults(results: pathlib.Path = RESULTS) -> tuple[dict, str]:
  """``(target -> {"l2hmc", "nuts", "chees": rows}, commit)`` of the default's runs (empty
  where not run)."""
  path = results / DEFAULT_FILE
  if not path.exists():
    return {}, ""
  record = json.loads(path.read_text())
  return record["results"], record["commit"]


def _default_line(target: str, runs: dict, commit: str) -> str:
  """The default's row: its scores, and its ratios to the NUTS run of its own file."""
  rows, nuts = runs["l2hmc"], runs["nuts"]
  spread = lambda key: _spread([r[key] for r in rows])
  per_second = lambda key: _spread([_per_second(r, key) for r in rows])
  gx, gx2 = (_mean(rows, f"ess_per_grad_{k}") / _mean(nuts, f"ess_per_grad_{k}")
             for k in ("x", "x2"))
  sx, sx2 = (np.mean([_per_second(r, k) for r in rows]) / np.mean([_per_second(r, k)
                                                                    for r in nuts])
             for k in ("x", "x2"))
  rhat = _rhat(rows)
  warned = sum(r["warned"] for r in rows)
  return (f"| {target} | **L2HMC, the default** (`l2hmc.adapt`, no per-target argument; "
          f"warned on {warned} of {len(rows)} seeds) | `{DEFAULT_FILE}` (`{commit}`) | "
          f"{spread('ess_per_grad_x')} | {spread('ess_per_grad_x2')} | {per_second('x')} | "
          f"{per_second('x2')} | {max(r['rhat_x'] for r in rows):.3f}, "
          f"{max(r['rhat_x2'] for r in rows):.3f} | — | "
          f"{_cell((bool(min(gx, gx2) >= 1.0), f'{gx:.2g}x, {gx2:.2g}x its own NUTS'))} | "
          f"{_cell((bool(rhat < RHAT), f'{rhat:.3f}'))} | "
          f"{_cell((bool(min(sx, sx2) >= 0.5), f'{sx:.2g}x, {sx2:.2g}x'))} | — |")


def table(found: list, default_runs: tuple[dict, str] = ({}, "")) -> tuple[list[str], dict]:
  """The table's lines, and per target the verdicts of its best L2HMC configuration."""
  lines = ["# L2HMC against NUTS and tuned HMC: every target, per gradient and per second", "",
           "Built by `benchmarks/l2hmc_table.py` from the committed results (no run): each row "
           "names its file (under `benchmarks/results/`) and the commit its L2HMC rows were "
           "measured at; NUTS and HMC are the same file's, run in the same process as its "
           "reference. L2HMC: the best committed configuration of the target (the most of the "
           "issue's targets met, then the larger of the smaller ESS-per-gradient ratio to "
           "NUTS), mean ± std over its 3 training seeds; NUTS and HMC: one run each (HMC: the "
           "best of its step-size grid at each K measured; the row shown is the best ESS of x² "
           "per gradient). ESS: Geyer's, min over dimensions; /s: per second of sampling on a "
           "shared CPU core (compare within a target). R-hat: split, max of x and x² over "
           "dimensions, worst seed, at 1,000 transitions. Diverg.: NUTS/HMC divergent "
           "transitions; L2HMC proposals at acceptance 0 (worst seed). Target cells: met or "
           "missed, with the seeds' mean over NUTS's (x, x²), or the mixture's crossings and "
           "ESS of x² over the best tuned HMC's; — where the issue sets no such target. "
           "**The default** (`l2hmc_default.py --suite eight`: `l2hmc.adapt` with no argument, "
           "chains started from a standard normal, its adaptation's gradients not counted "
           "here) is compared with the NUTS run of its own file, which is not the NUTS row "
           "shown (another start and protocol); the per-target rows need the settings their "
           "label names.", "",
           "| target | sampler | source (commit) | ESS/grad x | ESS/grad x² | ESS/s x | ESS/s x² "
           "| R-hat | diverg. | ESS/grad vs NUTS | R-hat < 1.01 | ESS/s vs NUTS | mixture |",
           "|" + "---|" * 13]
  summary = {}
  by_name = {}
  for record in found:
    by_name.setdefault(record["name"], []).append(record)
  for name in [n for n in ORDER if n in by_name] + [n for n in by_name if n not in ORDER]:
    candidates = [(record, label, rows) for record in by_name[name]
                  for label, rows in record["l2hmc"].items()]
    record, label, rows = best_l2hmc(name, candidates)
    commits = sorted({r.get("commit") or record["commit"] for r in rows})
    source = f"`{record['file']}` (`{'`, `'.join(commits)}`)"
    base = f"`{record['file']}` (`{record['commit']}`)"

    def scores(rows):
      return (f"{_spread([r['ess_per_grad_x'] for r in rows])} | "
              f"{_spread([r['ess_per_grad_x2'] for r in rows])} | "
              f"{_spread([_per_second(r, 'x') for r in rows])} | "
              f"{_spread([_per_second(r, 'x2') for r in rows])} | "
              f"{max(r['rhat_x'] for r in rows):.3f}, {max(r['rhat_x2'] for r in rows):.3f} | "
              f"{max(r['divergent'] for r in rows):.4f}")

    nuts, hmc = record["nuts"], best_hmc(record)
    rhat_only = lambda rows: _cell((_rhat(rows) < RHAT, f"{_rhat(rows):.3f}"))
    lines.append(f"| {record['target']} | NUTS (window adaptation) | {base} | {scores([nuts])} "
                 f"| — | {rhat_only([nuts])} | — | — |")
    lines.append(f"| {record['target']} | HMC (K = {hmc['num_steps']}, step "
                 f"{hmc['step_size']:.3g}) | {base} | {scores([hmc])} | — | "
                 f"{rhat_only([hmc])} | — | — |")
    found_verdicts = verdicts(name, record, rows)
    if name in default_runs[0]:
      lines.append(_default_line(record["target"], default_runs[0][name], default_runs[1]))
    lines.append(f"| {record['target']} | **L2HMC, {label}** (per-target settings) | {source} "
                 f"| {scores(rows)} | "
                 f"{_cell(found_verdicts['ess/grad'])} | {_cell(found_verdicts['R-hat'])} | "
                 f"{_cell(found_verdicts['ess/s'])} | {_cell(found_verdicts['mixture'])} |")
    summary[name] = dict(label=label, file=record["file"], commits=commits,
                         **{k: v[0] for k, v in found_verdicts.items()})
  lines += ["", "| issue target | met on | missed on |", "|---|---|---|"]
  for key, title in (("ess/grad", "ESS per gradient (x, x²) vs NUTS"),
                     ("R-hat", "R-hat < 1.01 at 1,000 transitions"),
                     ("R-hat at budget", "R-hat < 1.01 at NUTS's gradient budget (where run)"),
                     ("ess/s", "ESS per second >= 0.5x NUTS"),
                     ("mixture", "mixture: crossings >= 50 %, ESS x² >= HMC")):
    met = [n for n, s in summary.items() if s[key] is True]
    missed = [n for n, s in summary.items() if s[key] is False]
    lines.append(f"| {title} | {', '.join(met) or '—'} | {', '.join(missed) or '—'} |")
  return lines, summary


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--results", type=pathlib.Path, default=RESULTS,
                      help="where the committed result files are")
  parser.add_argument("--out", type=pathlib.Path, default=HERE / "out")
  args = parser.parse_args(argv)
  lines, summary = table(records(args.results), defaults(args.results))
  args.out.mkdir(parents=True, exist_ok=True)
  (args.out / "l2hmc_table.json").write_text(json.dumps(summary, indent=1))
  return _report.write_table(lines, str(args.out / "l2hmc_table.md"))


if __name__ == "__main__":
  main()
