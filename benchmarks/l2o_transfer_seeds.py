"""The transfer table of several meta-training seeds, from ``l2o_transfer.py --learned-only``.

Reads the JSON records that ``l2o_transfer.py --learned-only --meta-seed K --out DIR_K``
writes (``DIR_K/l2o_transfer_learned_only.json``, one per meta-training seed) and the
baselines of a full run (``results/l2o_transfer.json``: the per-network tuned Adam and
``metaoptax.adamw()``, which do not depend on meta-training), and writes one table:
per network and budget, train loss / test accuracy (means over the 3 optimizee seeds) of
tuned Adam, ``adamw()`` and each meta-training seed, the target's verdict per seed
(``l2o_transfer.target``: learned >= tuned Adam on train loss and test accuracy at both
budgets), the non-finite runs, the meta-training time and the held-out whole-run score
at every validation.

With ``--cosine`` (records of ``l2o_transfer_baselines.py --cosine``) more columns: Adam
with a cosine over each budget at each rate of ``--cosine-rates`` (the first the start of a
``--cosine-decay`` learned optimizer, e.g. a second its largest multiplier times that) and
at the Adam grid's best rate per network and budget (the lowest mean train loss, as for
the tuned Adam).

    python benchmarks/l2o_transfer_seeds.py out/pes_seed0 out/pes_seed1 out/pes_seed2 \\
        --name l2o_transfer_pes_COMMIT --title "..."
"""

from __future__ import annotations

import argparse
import json
import pathlib

import numpy as np

import _report
import l2o_transfer

LEARNED = "learned (scaled_adam)"


def load(folders, baseline):
  base = {**json.loads(pathlib.Path(baseline).read_text()), "file": pathlib.Path(baseline).name}
  runs = [json.loads((pathlib.Path(f) / "l2o_transfer_learned_only.json").read_text())
          for f in folders]
  return base, runs


def rows_of(base, run):
  """``l2o_transfer.summary``-shaped rows: the baselines and this run's learned optimizer."""
  rows = {}
  for key, row in base["rows"].items():
    name, budget = key.rsplit(" @ ", 1)
    baselines = {k: v for k, v in row.items() if k != LEARNED}
    rows[(name, int(budget))] = {**baselines, LEARNED: run["rows"][key]}
  return rows


def cell(v):
  return f"{np.mean(v['train_loss']):.3g} / {np.mean(v['test']):.4f}"


def cosine_cells(cosine, key, rates):
  """The ``--cosine`` columns of one row: at each of ``rates``, and the best of the grid."""
  row = cosine[key]
  grid = [f"cosine lr {r:g}" for r in l2o_transfer.ADAM_GRID]
  best = min(grid, key=lambda k: np.mean(row[k]["train_loss"]))
  return [cell(row[f"cosine lr {r:g}"]) for r in rates] + [f"{cell(row[best])} ({best[7:]})"]


def report(base, runs, title, command, cosine=None, rates=()):
  budgets = sorted({int(k.rsplit(" @ ", 1)[1]) for k in base["rows"]})
  per_seed = [rows_of(base, run) for run in runs]
  verdicts = [l2o_transfer.target(rows, budgets) for rows in per_seed]
  seeds = [run["meta_seed"] for run in runs]
  lines = [f"# {title}", "",
           f"measured at commit `{runs[0]['commit']}` (meta seeds {', '.join(map(str, seeds))}; "
           f"baselines from `{base['file']}` at `{base['commit']}`, the same networks, "
           "seeds and protocol).", "", f"Command: {command}", "",
           "Train loss / test accuracy, means over 3 optimizee seeds (**bold**: the learned "
           "optimizer at least tuned Adam on both).", "",
           "| network, steps | tuned Adam | adamw() | "
           + "".join(f"Adam, cosine, {r:g}{' (the start)' if i == 0 else ''} | "
                     for i, r in enumerate(rates if cosine else ()))
           + ("Adam, cosine, tuned | " if cosine else "")
           + " | ".join(f"meta seed {s}" for s in seeds) + " |",
           "|---|---|---|" + "---|" * (len(seeds) + (len(rates) + 1 if cosine else 0))]
  for (name, budget) in per_seed[0]:
    row = per_seed[0][(name, budget)]
    adam_label = next(k for k in row if k.startswith("best Adam"))
    adam = row[adam_label]
    learned = []
    for rows in per_seed:
      mine = rows[(name, budget)][LEARNED]
      ok = (np.mean(mine["train_loss"]) <= np.mean(adam["train_loss"])
            and np.mean(mine["test"]) >= np.mean(adam["test"]))
      learned.append(f"**{cell(mine)}**" if ok else cell(mine))
    lines.append(f"| {name}, {budget} | {cell(adam)} {adam_label[10:]} | "
                 f"{cell(row['metaoptax.adamw()'])} | "
                 + "".join(c + " | " for c in (cosine_cells(cosine, f"{name} @ {budget}", rates)
                                               if cosine else []))
                 + " | ".join(learned) + " |")
  lines += ["", "| meta seed | networks meeting the target | non-finite runs | meta-training "
            "| selected batch | held-out score per validation (batch: score) | skipped / "
            "diverged |", "|---|---|---|---|---|---|---|"]
  for run, verdict in zip(runs, verdicts):
    non_finite = sum(v["non_finite"] for k, v in run["rows"].items()
                     if k.endswith(f"@ {budgets[-1]}"))
    met = [name for name, ok in verdict.items() if ok]
    lines.append(f"| {run['meta_seed']} | {len(met)} ({', '.join(met) or 'none'}) | "
                 f"{non_finite} of {3 * len(verdict)} | {run['meta_training_seconds']:.0f} s | "
                 f"{run['best_iteration']} | "
                 + ", ".join(f"{int(i)}: {s:.4g}" for i, s in run["validation_scores"])
                 + f" | {run['skipped_updates']} / {run['diverged_tasks']} |")
  if all("schedule" in run for run in runs):
    steps = runs[0]["schedule"]["steps"]
    lines += ["", "Learned rates on the digits MLP told the budget (the base rate times the "
              "multipliers, median over the tensors; optimizee seed 0):", "",
              "| meta seed, budget | " + " | ".join(f"step {s}" for s in steps) + " |",
              "|---" * (1 + len(steps)) + "|"]
    for run in runs:
      for budget, rates in run["schedule"]["rates"].items():
        lines.append(f"| {run['meta_seed']}, {budget} | " + " | ".join(
            "—" if r is None else f"{r[1]:.2g}" for r in rates) + " |")
  record = {"seeds": seeds, "baseline_commit": base["commit"],
            "target": {str(s): v for s, v in zip(seeds, verdicts)}, "runs": runs}
  return lines, record


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("folders", nargs="+", help="the --out folders of the seeds' runs")
  parser.add_argument("--baseline", default=str(l2o_transfer.RESULTS / "l2o_transfer.json"))
  parser.add_argument("--name", required=True, help="file name (without suffix) in --dir")
  parser.add_argument("--title", default="A learned optimizer on unseen networks, per "
                      "meta-training seed")
  parser.add_argument("--command", default="see the records' recipe")
  parser.add_argument("--dir", type=pathlib.Path, default=l2o_transfer.RESULTS)
  parser.add_argument("--cosine", type=pathlib.Path, nargs="+", default=None,
                      help="records of l2o_transfer_baselines.py --cosine (their rows merged): "
                           "a column per --cosine-rates and the grid's best")
  parser.add_argument("--cosine-rates", type=float, nargs="+", default=(1e-2,),
                      help="the cosine columns' rates, the first the learned optimizer's base "
                           "rate (its start)")
  args = parser.parse_args(argv)
  cosine = None
  for path in args.cosine or ():
    for key, row in json.loads(path.read_text())["rows"].items():
      cosine = cosine or {}
      cosine.setdefault(key, {}).update(row)
  lines, record = report(*load(args.folders, args.baseline), args.title, args.command, cosine,
                         tuple(args.cosine_rates))
  args.dir.mkdir(parents=True, exist_ok=True)
  _report.write_table(lines, str(args.dir / f"{args.name}.md"))
  (args.dir / f"{args.name}.json").write_text(json.dumps(record, indent=1))
  print(f"wrote {args.dir / args.name}.md, .json")


if __name__ == "__main__":
  main()
