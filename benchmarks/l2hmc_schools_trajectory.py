"""Centered eight schools: does a longer or shorter trajectory move log tau further?

The trained L2HMC sampler of ``l2hmc_posteriors.py`` with saturating local step sizes (the
networks off), at K = 5, 10, 20 and 40 leapfrog steps, 3 training seeds each, runs NUTS's
gradient budget of the committed table (its 1,000 transitions x its gradients per transition
over K transitions; the same protocol otherwise: 32 chains, warm-up 300, 300 training
iterations, burn-in 300) and reports, per K, split R-hat of x and x^2 (worst seed), ESS per
gradient (min over dimensions), the acceptance, and how far log tau moves per transition
(the mean |change| over transitions and chains) against its sd over the draws.

    taskset -c 0 python benchmarks/l2hmc_schools_trajectory.py --out benchmarks/results
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

VARIANT = "local step sizes, saturating"
LOG_TAU = 1  # the centered schools' coordinates: mu, log tau, the 8 effects


def run(args) -> dict:
  target = l2hmc.posteriors.all_posteriors()["schools_centered"]
  committed = json.loads((HERE / "results" / "l2hmc_posteriors.json").read_text())
  record = committed["schools_centered"]
  gradients = record["protocol"]["samples"] * record["nuts"]["grads_per_transition"]
  rows = []
  jobs = [(steps, seed) for steps in args.steps for seed in range(args.seeds)]
  for steps, seed in _report.progress_bars()(jobs, desc="K x seeds"):
    config, result, _ = l2hmc_posteriors.train(
        target, l2hmc_posteriors.VARIANTS[VARIANT], "esjd_squares", seed, args.iterations,
        args.chains, args.warmup, steps)
    transitions = int(round(gradients / steps))
    found = l2hmc_posteriors.sample_l2hmc(
        target, config, result.params, result.masks, result.whitening,
        jax.random.key(2000 + seed), args.chains, args.burn_in, transitions,
        result.state.chains.position)
    scores = l2hmc_posteriors.checked(
        _sampler_metrics.score(found["draws"], steps, found["seconds"]), found["draws"],
        record["reference"])
    log_tau = found["draws"][:, :, LOG_TAU]
    rows.append(dict(steps=steps, seed=seed, transitions=transitions,
                     rhat_x=scores["rhat_x"], rhat_x2=scores["rhat_x2"],
                     ess_per_grad_x=scores["ess_per_grad_x"],
                     ess_per_grad_x2=scores["ess_per_grad_x2"],
                     acceptance=found["acceptance"],
                     log_tau_move=float(np.mean(np.abs(np.diff(log_tau, axis=0)))),
                     log_tau_sd=float(np.std(log_tau))))
  return dict(rows=rows, commit=_report.git_commit(short=True), nuts=record["nuts"],
              nuts_commit=record["commit"], seeds=args.seeds,
              nuts_transitions=record["protocol"]["samples"])


def report(result: dict) -> list[str]:
  nuts = result["nuts"]
  lines = ["# Centered eight schools: trajectory length against log tau's random walk", "",
           f"L2HMC ({VARIANT}), {result['seeds']} training seeds per K, each run at NUTS's "
           f"gradient budget ({nuts['grads_per_transition']:.1f} gradients per transition x "
           f"{result['nuts_transitions']} transitions, NUTS of the committed "
           "`l2hmc_posteriors` table at "
           f"`{result['nuts_commit']}`). Mean ± std over seeds; R-hat: worst seed. "
           "log tau move: mean |change| per transition; sd: over the draws. "
           f"Commit `{result['commit']}`.", "",
           "| K | transitions | ESS/grad x | ESS/grad x² | R-hat x, x² | accept | "
           "log tau move | log tau sd |", "|---|---|---|---|---|---|---|---|"]
  cells = l2hmc_posteriors.spread_cells
  for steps, rows in l2hmc_posteriors.grouped(result["rows"], "steps").items():
    ess = cells(rows, ("ess_per_grad_x", "ess_per_grad_x2"))
    rhat = f"{max(r['rhat_x'] for r in rows):.3f}, {max(r['rhat_x2'] for r in rows):.3f}"
    rest = cells(rows, ("acceptance", "log_tau_move", "log_tau_sd"))
    lines.append(f"| {steps} | {rows[0]['transitions']} | {ess} | {rhat} | {rest} |")
  lines.append(f"| NUTS | {result['nuts_transitions']} | {nuts['ess_per_grad_x']:.3g} | "
               f"{nuts['ess_per_grad_x2']:.3g} | {nuts['rhat_x']:.3f}, {nuts['rhat_x2']:.3f} | "
               f"{nuts['acceptance']:.3g} | | |")
  return lines


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--steps", type=int, nargs="+", default=[5, 10, 20, 40])
  parser.add_argument("--seeds", type=int, default=3)
  parser.add_argument("--chains", type=int, default=32)
  parser.add_argument("--burn-in", type=int, default=300)
  parser.add_argument("--warmup", type=int, default=300)
  parser.add_argument("--iterations", type=int, default=300)
  parser.add_argument("--out", type=pathlib.Path, default=HERE / "out")
  args = parser.parse_args(argv)
  result = run(args)
  args.out.mkdir(parents=True, exist_ok=True)
  (args.out / "l2hmc_schools_trajectory.json").write_text(json.dumps(result, indent=1))
  return _report.write_table(report(result), str(args.out / "l2hmc_schools_trajectory.md"))


if __name__ == "__main__":
  main()
