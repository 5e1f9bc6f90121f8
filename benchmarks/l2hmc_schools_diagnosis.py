"""Centered eight schools: why R-hat stays above 1.01 at NUTS's gradient budget.

The trained L2HMC sampler of ``l2hmc_posteriors.py`` (``--variants``, default the saturating
local step sizes and the scale move), 3 training seeds, runs NUTS's gradient budget of the
committed table (the same protocol: 32 chains, warm-up 300, 300 training iterations,
burn-in 300, K = 10). Against the exact posterior (``metaoptax.l2hmc.schools_exact``, a
quadrature over log tau) it reports, per seed:

* per coordinate, the ESS count (Geyer's, all chains) of x and x^2 and the split R-hat, beside
  what R-hat is for chains that are converged but autocorrelated: with 2m half chains of
  ESS_total / 2m effective draws each, the half chains' means scatter by var/(ESS_total/2m),
  so :math:`\\hat R \\approx \\sqrt{1 - 1/n + 2m/\\mathrm{ESS}}`, i.e. :math:`\\hat R - 1 \\approx
  m/\\mathrm{ESS}`: R-hat < 1.01 with 32 chains needs an ESS of ~3,200 in every coordinate;
* the chains' log tau marginal against the exact one (mean, sd, the shares below the exact 1 %
  and 5 % quantiles: the neck), and the means' errors in Monte Carlo standard errors.

    taskset -c 0 python benchmarks/l2hmc_schools_diagnosis.py   # benchmarks/out/schools_diagnosis
    python benchmarks/l2hmc_schools_diagnosis.py --summarize benchmarks/results/l2hmc_schools_diagnosis
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

import jax
import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _report  # pylint: disable=g-import-not-at-top,wrong-import-position
import _sampler_metrics  # pylint: disable=g-import-not-at-top,wrong-import-position
import l2hmc_posteriors  # pylint: disable=g-import-not-at-top,wrong-import-position
from metaoptax import l2hmc  # pylint: disable=g-import-not-at-top,wrong-import-position
from metaoptax.l2hmc import schools_exact  # pylint: disable=g-import-not-at-top,wrong-import-position

LOG_TAU = 1


def per_coordinate(draws) -> dict:
  """ESS counts of x and x^2 and split R-hat, per coordinate."""
  draws = np.asarray(draws, np.float64)
  count = draws.shape[0] * draws.shape[1]
  out = dict(ess_x=[], ess_x2=[], rhat_x=[], rhat_x2=[])
  for d in range(draws.shape[-1]):
    x = draws[..., d:d + 1]
    out["ess_x"].append(l2hmc.ess.geyer_ess(x) * count)
    out["ess_x2"].append(l2hmc.ess.geyer_ess(x**2) * count)
    out["rhat_x"].append(_sampler_metrics.split_rhat(x))
    out["rhat_x2"].append(_sampler_metrics.split_rhat(x**2))
  return out


def predicted_rhat(ess, chains: int, samples: int):
  """R-hat of converged chains with ``ess`` effective draws in all (module docstring)."""
  half = samples // 2
  return np.sqrt(1.0 - 1.0 / half + 2.0 * chains / np.asarray(ess))


def against_exact(draws, exact) -> dict:
  draws = np.asarray(draws, np.float64)
  flat = draws.reshape(-1, draws.shape[-1])
  log_tau = flat[:, LOG_TAU]
  grid = schools_exact.GRID
  density = schools_exact.log_tau_density()
  cdf = np.concatenate([[0.0], np.cumsum(0.5 * (density[1:] + density[:-1]) * np.diff(grid))])
  q01, q05 = np.interp([0.01, 0.05], cdf / cdf[-1], grid)
  return dict(mean_error_sd=((flat.mean(0) - exact["mean"]) / exact["sd"]).tolist(),
              sd_ratio=(flat.std(0) / exact["sd"]).tolist(),
              log_tau_mean=float(log_tau.mean()), log_tau_sd=float(log_tau.std()),
              below_q01=float(np.mean(log_tau < q01)), below_q05=float(np.mean(log_tau < q05)),
              log_tau_move=float(np.mean(np.abs(np.diff(draws[:, :, LOG_TAU], axis=0)))),
              # per chain: the share of draws below the exact 5 % quantile
              chain_below_q05=np.mean(draws[:, :, LOG_TAU] < q05, axis=0).tolist())


def run(args) -> dict:
  target = l2hmc.posteriors.all_posteriors()["schools_centered"]
  committed = json.loads((HERE / "results" / "l2hmc_posteriors.json").read_text())
  record = committed["schools_centered"]
  gradients = record["protocol"]["samples"] * record["nuts"]["grads_per_transition"]
  exact = schools_exact.moments()
  rows, traces = [], {}
  jobs = [(variant, seed) for variant in args.variants for seed in range(args.seeds)]
  for variant, seed in _report.progress_bars()(jobs, desc="variants x seeds"):
    config, result, _ = l2hmc_posteriors.train(
        target, l2hmc_posteriors.VARIANTS[variant], args.objective, seed, args.iterations,
        args.chains, args.warmup, args.num_steps)
    grads = l2hmc_posteriors.gradients_per_transition(config)
    # NUTS's gradients over all its chains, spread over the sampled chains
    chains = args.sample_chains or args.chains
    transitions = int(round(gradients * record["protocol"]["chains"] / chains / grads))
    found = l2hmc_posteriors.sample_l2hmc(
        target, config, result.params, result.masks, result.whitening,
        jax.random.key(2000 + seed), chains, args.burn_in, transitions,
        result.state.chains.position[:chains])
    draws = found["draws"]
    row = dict(variant=variant, seed=seed, transitions=transitions,
               acceptance=found["acceptance"], **per_coordinate(draws),
               **against_exact(draws, exact))
    row["rhat_predicted_x"] = predicted_rhat(row["ess_x"], chains, transitions).tolist()
    row["rhat_predicted_x2"] = predicted_rhat(row["ess_x2"], chains, transitions).tolist()
    row["chains"] = chains
    # the training chains' log tau at the start of the measured run (after warm-up, training)
    row["start_log_tau"] = np.asarray(result.state.chains.position)[:, LOG_TAU].tolist()
    rows.append(row)
    traces[f"{variant}/{seed}"] = draws[:, :, LOG_TAU]
  return dict(rows=rows, exact={k: v.tolist() for k, v in exact.items()},
              objective=args.objective, num_steps=args.num_steps,
              commit=_report.git_commit(short=True)), traces


NAMES = ["mu", "log tau"] + [f"theta{j}" for j in range(1, 9)]


def report(result) -> list[str]:
  lines = ["# Centered eight schools at NUTS's gradient budget: a diagnosis", "",
           f"Commit `{result['commit']}`, {result['rows'][0]['chains']} chains sampled "
           f"({result['rows'][0]['transitions']} transitions, NUTS's total gradients), "
           f"K = {result.get('num_steps', 10)}, trained on "
           f"{result.get('objective', 'esjd_squares')}. Per seed: the coordinate "
           "with the worst split R-hat of x and of x^2, its ESS count and the R-hat that "
           "converged chains with that ESS would show (sqrt(1 - 1/n + 2m/ESS)); the log tau "
           "marginal against the exact one (mean 0.802, sd 1.171; share of draws below the "
           "exact 1 % and 5 % quantiles); the largest |mean error| in exact sds.", "",
           "| variant | seed | worst R-hat x (coord) | its ESS | predicted | worst R-hat x² "
           "(coord) | its ESS | predicted | min ESS x, x² | log tau mean, sd | below q1, q5 "
           "| log tau move | mean err |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
  for r in result["rows"]:
    i, j = int(np.argmax(r["rhat_x"])), int(np.argmax(r["rhat_x2"]))
    lines.append(
        f"| {r['variant']} | {r['seed']} | {r['rhat_x'][i]:.3f} ({NAMES[i]}) | "
        f"{r['ess_x'][i]:.0f} | {r['rhat_predicted_x'][i]:.3f} | {r['rhat_x2'][j]:.3f} "
        f"({NAMES[j]}) | {r['ess_x2'][j]:.0f} | {r['rhat_predicted_x2'][j]:.3f} | "
        f"{min(r['ess_x']):.0f}, {min(r['ess_x2']):.0f} | {r['log_tau_mean']:.3f}, "
        f"{r['log_tau_sd']:.3f} | {r['below_q01']:.4f}, {r['below_q05']:.4f} | "
        f"{r['log_tau_move']:.3f} | {max(abs(e) for e in r['mean_error_sd']):.3f} |")
  return lines


def plot(result, traces, path):
  plt = _report.pyplot()
  fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
  rows = result["rows"]
  ax = axes[0]
  for r in rows:
    ax.scatter(r["rhat_predicted_x"] + r["rhat_predicted_x2"], r["rhat_x"] + r["rhat_x2"],
               s=10, label=f"{r['variant']}, seed {r['seed']}")
  lim = [1.0, max(max(r["rhat_x"] + r["rhat_x2"]) for r in rows) + 0.005]
  ax.plot(lim, lim, "k", lw=0.8)
  ax.axhline(1.01, color="r", lw=0.8, ls="--")
  ax.set(xlabel="R-hat of converged chains with the measured ESS", ylabel="split R-hat",
         title="R-hat against its ESS prediction (all coords, x and x²)")
  ax.legend(fontsize=6)
  ax = axes[1]
  grid = schools_exact.GRID
  keep = (grid > -6) & (grid < 5)
  for key, trace in traces.items():
    ax.hist(np.ravel(trace), bins=80, range=(-6, 5), density=True, histtype="step", label=key)
  ax.plot(grid[keep], schools_exact.log_tau_density()[keep], "k", lw=1.5, label="exact")
  ax.set(xlabel="log tau", title="log tau: chains against the exact marginal")
  ax.legend(fontsize=6)
  ax = axes[2]
  key = next(iter(traces))
  for c in range(4):
    ax.plot(traces[key][:600, c], lw=0.6)
  ax.set(xlabel="transition", ylabel="log tau", title=f"log tau traces ({key}, 4 chains)")
  _report.save_figure(fig, path)


def summarize(folder: pathlib.Path) -> str:
  """One row per run under ``folder`` (its ``l2hmc_schools_diagnosis.json`` and those of its
  subfolders): worst R-hat of x, x^2 over seeds and coordinates, log tau's ESS and move;
  ``summary.md`` and ``summary.png`` (worst R-hat against log tau's ESS, per seed)."""
  runs = []
  for path in sorted(folder.glob("**/l2hmc_schools_diagnosis.json")):
    result = json.loads(path.read_text())
    for variant, rows in l2hmc_posteriors.grouped(result["rows"], "variant").items():
      name = path.parent.relative_to(folder).as_posix() or "."
      runs.append((name, variant, result, rows))
  lines = ["# Centered eight schools at NUTS's gradient budget: the remedies", "",
           "Worst split R-hat over coordinates and 3 training seeds; log tau's ESS count "
           "(all chains, x) per seed; its mean |change| per transition. The runs' tables and "
           "figures are in the folders named.", "",
           "| folder | variant | chains | K | objective | transitions | R-hat x, x² (worst) | "
           "log tau ESS (seeds) | log tau move | largest mean err (exact sds) |",
           "|---|---|---|---|---|---|---|---|---|---|"]
  plt = _report.pyplot()
  fig, ax = plt.subplots(figsize=(7, 4.5))
  for name, variant, result, rows in runs:
    ess = [r["ess_x"][LOG_TAU] for r in rows]
    worst = [max(max(r["rhat_x"]), max(r["rhat_x2"])) for r in rows]
    lines.append(
        f"| {name} | {variant} | {rows[0].get('chains', 32)} | {result.get('num_steps', 10)} "
        f"| {result.get('objective', 'esjd_squares')} | {rows[0]['transitions']} | "
        f"{max(max(r['rhat_x']) for r in rows):.3f}, {max(max(r['rhat_x2']) for r in rows):.3f}"
        f" | {', '.join(f'{e:.0f}' for e in ess)} | "
        f"{np.mean([r['log_tau_move'] for r in rows]):.2f} | "
        f"{max(max(abs(e) for e in r['mean_error_sd']) for r in rows):.3f} |")
    ax.scatter(ess, worst, label=f"{name}: {variant}", s=18)
  ax.axhline(1.01, color="r", lw=0.8, ls="--")
  ax.set(xscale="log", xlabel="log tau's ESS (all chains)", ylabel="worst split R-hat",
         title="Centered schools at NUTS's gradient budget")
  ax.legend(fontsize=6)
  _report.save_figure(fig, folder / "summary.png")
  return _report.write_table(lines, str(folder / "summary.md"))


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--variants", nargs="+", choices=list(l2hmc_posteriors.VARIANTS),
                      default=["local step sizes, saturating", "local step sizes, scale move"])
  parser.add_argument("--seeds", type=int, default=3)
  parser.add_argument("--chains", type=int, default=32)
  parser.add_argument("--sample-chains", type=int, default=None,
                      help="chains of the measured run (the first of the training chains; "
                      "default --chains), NUTS's total gradients spread over them")
  parser.add_argument("--burn-in", type=int, default=300)
  parser.add_argument("--warmup", type=int, default=300)
  parser.add_argument("--iterations", type=int, default=300)
  parser.add_argument("--num-steps", type=int, default=10)
  parser.add_argument("--objective", default="esjd_squares", choices=l2hmc.OBJECTIVES,
                      help="the training objective (esjd_coordinates charges a proposal that "
                      "leaves any one coordinate, log tau too, in place)")
  parser.add_argument("--out", type=pathlib.Path, default=HERE / "out" / "schools_diagnosis")
  parser.add_argument("--summarize", type=pathlib.Path, default=None,
                      help="only tabulate the runs found under this folder (summarize)")
  args = parser.parse_args(argv)
  if args.summarize is not None:
    return summarize(args.summarize)
  result, traces = run(args)
  args.out.mkdir(parents=True, exist_ok=True)
  (args.out / "l2hmc_schools_diagnosis.json").write_text(json.dumps(result, indent=1))
  plot(result, traces, args.out / "l2hmc_schools_diagnosis.png")
  return _report.write_table(report(result), str(args.out / "l2hmc_schools_diagnosis.md"))


if __name__ == "__main__":
  main()
