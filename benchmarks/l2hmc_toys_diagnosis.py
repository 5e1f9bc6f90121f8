"""Which coordinate limits L2HMC's ESS of x on a toy of ``l2hmc_posteriors`` (``TOYS``), and why.

Trains the toy's row (``l2hmc_posteriors.toy_runs``: ``l2hmc_ess``'s settings) from each seed,
runs the protocol's measured chains (``l2hmc_posteriors.sample_l2hmc``: 32 chains, 300
burn-in, 1,000 transitions, from the training chains) and reports per coordinate: the target's
sd, the warm-up's whitening scale over it, the trained step sizes' sum over the K leapfrog
steps in the target's sd units (``theta``: the angle a leapfrog trajectory of a Gaussian
coordinate turns, for small steps), the lag-1 autocorrelation of x, Geyer's ESS per
transition of x and x^2 and split R-hat of x. The coordinates with the lowest ESS of x come
first.

    python benchmarks/l2hmc_toys_diagnosis.py --target ill_conditioned --seeds 0 1 2
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

OUT = HERE / "out" / "l2hmc_toys_diagnosis"  # git-ignored


def per_coordinate(draws, fn) -> np.ndarray:
  """``fn`` of each coordinate's ``(samples, chains, 1)`` draws."""
  return np.array([fn(draws[..., d:d + 1]) for d in range(draws.shape[-1])])


def diagnose(name: str, seed: int, chains=32, burn_in=300, samples=1000) -> dict:
  target = l2hmc_posteriors.targets()[name]
  runs, iterations = l2hmc_posteriors.toy_runs(name, False)
  label, variant, objective, anneal, warmup, aux_weight = runs[0]
  config, result, _ = l2hmc_posteriors.train(target, variant, objective, seed, iterations,
                                             chains, warmup, 10, anneal, aux_weight)
  run = l2hmc_posteriors.sample_l2hmc(target, config, result.params, result.masks,
                                      result.whitening, jax.random.key(1000 + seed), chains,
                                      burn_in, samples, result.state.chains.position)
  draws = np.asarray(run["draws"], np.float64)
  sd = np.sqrt(np.diag(np.asarray(target.covariance))) if target.covariance is not None \
      else draws.reshape(-1, draws.shape[-1]).std(0)
  scale = np.asarray(result.whitening.scale) / sd
  theta = np.exp(np.asarray(result.params.log_step_size_x)).sum(0) * scale
  centred = draws - draws.mean((0, 1))
  lag1 = (centred[1:] * centred[:-1]).mean((0, 1)) / centred.var((0, 1))
  ess_x = per_coordinate(draws, l2hmc.ess.geyer_ess)
  ess_x2 = per_coordinate(draws**2, l2hmc.ess.geyer_ess)
  rhat = per_coordinate(draws, _sampler_metrics.split_rhat)
  order = np.argsort(ess_x)
  return dict(target=target.name, sampler=label, seed=seed, acceptance=run["acceptance"],
              rows=[dict(coordinate=int(d), sd=float(sd[d]), scale_over_sd=float(scale[d]),
                         theta=float(theta[d]), lag1=float(lag1[d]), ess_x=float(ess_x[d]),
                         ess_x2=float(ess_x2[d]), rhat_x=float(rhat[d])) for d in order],
              theta_range=[float(theta.min()), float(theta.max())],
              corr_ess_theta=float(np.corrcoef(ess_x, theta)[0, 1]))


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--target", default="ill_conditioned", choices=l2hmc_posteriors.TOYS)
  parser.add_argument("--seeds", type=int, nargs="+", default=[0])
  parser.add_argument("--show", type=int, default=6, help="coordinates shown per seed")
  parser.add_argument("--out", type=pathlib.Path, default=OUT)
  args = parser.parse_args(argv)
  args.out.mkdir(parents=True, exist_ok=True)
  progress = _report.progress_bars()
  found = [diagnose(args.target, seed) for seed in progress(args.seeds, desc="seeds")]
  commit = _report.git_commit(short=True)
  (args.out / f"{args.target}.json").write_text(json.dumps(dict(commit=commit, runs=found),
                                                           indent=1))
  lines = [f"# {found[0]['target']}: {found[0]['sampler']}, per coordinate (commit `{commit}`)",
           "", "ESS: Geyer's, per transition (K = 10 gradients), 32 chains x 1,000. theta: the "
           "trained step sizes summed over the K steps, times the whitening scale, in the "
           "target's sd units. Lowest ESS of x first.", "",
           "| seed | accept | corr(ESS x, theta) | coordinate | sd | scale/sd | theta | lag-1 "
           "autocorr. x | ESS x | ESS x² | R-hat x |", "|" + "---|" * 11]
  for run in found:
    for row in run["rows"][:args.show]:
      lines.append(f"| {run['seed']} | {run['acceptance']:.3f} | {run['corr_ess_theta']:.2f} | "
                   f"{row['coordinate']} | {row['sd']:.3g} | {row['scale_over_sd']:.3f} | "
                   f"{row['theta']:.3f} | {row['lag1']:.3f} | {row['ess_x']:.3f} | "
                   f"{row['ess_x2']:.3f} | {row['rhat_x']:.4f} |")
    lines.append(f"| {run['seed']} | | | theta over all coordinates | | | "
                 f"{run['theta_range'][0]:.3f}-{run['theta_range'][1]:.3f} | | | | |")
  return _report.write_table(lines, str(args.out / f"{args.target}.md"))


if __name__ == "__main__":
  main()
