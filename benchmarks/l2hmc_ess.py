"""L2HMC with trained step sizes and networks vs tuned HMC: effective sample size.

For each target of the paper (50-d ill-conditioned Gaussian, 2-d strongly
correlated Gaussian, mixture of two Gaussians, rough well) an L2HMC sampler
(K = 10 leapfrog steps) is trained with the expected-squared-jumped-distance
loss; then 200 chains of it and of HMC with the same K and each step size of a
grid (the best is reported) run for a burn-in and then the measured samples,
starting from exact draws of the target where those exist.
ESS is reported both with Geyer's initial monotone sequence estimator and with
the public notebook's truncated estimator, as a fraction of the samples and per
gradient evaluation (K per transition for both samplers).

    python benchmarks/l2hmc_ess.py            # ~10 min on 2 CPU cores
    python benchmarks/l2hmc_ess.py --quick    # smoke run
"""

from __future__ import annotations

import argparse
import os
import subprocess
import time

import jax
import jax.numpy as jnp
import numpy as np

import _report
from metaoptax import l2hmc

# target: (training iterations, HMC step-size grid, L2HMC initial step size)
TARGETS = {
    "correlated": (5000, (0.1, 0.15, 0.2), 0.1),  # the notebook's grid and init
    # the smallest standard deviation is 0.1: at 0.1 the 50-d leapfrog accepts ~1%
    "ill_conditioned": (3000, (0.02, 0.03, 0.05, 0.1), 0.03),
    "mixture": (3000, (0.05, 0.1, 0.2, 0.3), 0.1),
    "rough_well": (3000, (0.01, 0.03, 0.1, 0.2), 0.1),
}


def run_chains(target, config, params, masks, key, chains, burn_in, samples):
  sampler = l2hmc.l2hmc(target.logdensity_fn, config, params, masks)
  k_start, k_burn, k_run = jax.random.split(key, 3)
  # Chains start from the target itself where it can be sampled exactly (so that
  # slow HMC chains are not penalised for burn-in), else from a standard normal.
  start = (target.sample(k_start, chains) if target.sample is not None
           else jax.random.normal(k_start, (chains, target.dim)))
  run = jax.jit(lambda k, x, n: l2hmc.sample_chains(sampler, k, x, n), static_argnums=2)
  warm, _ = run(k_burn, start, burn_in)
  draws, acceptance = run(k_run, warm[-1], samples)
  return np.asarray(draws), float(acceptance.mean())


def ess_both(target, draws):
  scale = None if target.covariance is None else float(np.sqrt(np.trace(target.covariance)))
  mean = 0.0 if target.mean is None else np.asarray(target.mean)
  return l2hmc.ess.geyer_ess(draws), l2hmc.ess.truncated_ess(draws, mean=mean, scale=scale)


def autocorrelation(draws, lags=200):
  acov = l2hmc.ess.lagged_products(draws - draws.mean(axis=0, keepdims=True)).sum(axis=(1, 2))
  return acov[:lags] / acov[0]


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--chains", type=int, default=200)
  parser.add_argument("--burn-in", type=int, default=1000)
  parser.add_argument("--samples", type=int, default=2000)
  parser.add_argument("--num-steps", type=int, default=10)
  parser.add_argument("--step-sizes", default="per_step", choices=("shared", "per_step"))
  parser.add_argument("--hidden", type=int, default=50,
                      help="width of the S/Q/T networks (the public code uses 10)")
  parser.add_argument("--targets", default=",".join(TARGETS))
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
  parser.add_argument("--quick", action="store_true")
  args = parser.parse_args()
  all_targets = l2hmc.targets.all_targets()
  rows, curves, traces = [], {}, {}
  start = time.perf_counter()
  for name in args.targets.split(","):
    target = all_targets[name]
    iterations, grid, init_step_size = TARGETS[name]
    if args.quick:
      iterations, args.chains, args.burn_in, args.samples = 40, 16, 20, 100
    config = l2hmc.L2HMCConfig(dim=target.dim, num_steps=args.num_steps,
                               init_step_size=init_step_size, step_sizes=args.step_sizes,
                               hidden=args.hidden)
    print(f"{target.name}: training L2HMC for {iterations} iterations", flush=True)
    result = l2hmc.train(target, config, num_iterations=iterations, seed=args.seed,
                         log_every=max(1, iterations // 5), progress=lambda i, loss, acc: print(
                             f"  iteration {i:5d}  loss {loss:12.4f}  acceptance {acc:.3f}",
                             flush=True))
    key = jax.random.key(args.seed + 1)
    draws, acc = run_chains(target, config, result.params, result.masks, key, args.chains,
                            args.burn_in, args.samples)
    geyer, truncated = ess_both(target, draws)
    eps_x = np.exp(np.asarray(result.params.log_step_size_x))
    eps_v = np.exp(np.asarray(result.params.log_step_size_v))
    step = (f"x {eps_x[0]:.3g}, v {eps_v[0]:.3g}" if eps_x.size == 1 else
            f"x {eps_x.min():.3g}-{eps_x.max():.3g}, v {eps_v.min():.3g}-{eps_v.max():.3g}")
    l2 = dict(sampler=f"L2HMC (trained, {config.step_sizes} step sizes)", step=step, acc=acc,
              geyer=geyer, truncated=truncated, seconds=result.seconds)
    curves[(name, "L2HMC")] = autocorrelation(draws)
    traces[(name, "L2HMC")] = draws[:500, 0]
    hmc_config = config._replace(use_networks=False, step_sizes="shared")
    best = None
    for eps in grid:
      params = l2hmc.init_params(jax.random.key(0), hmc_config._replace(init_step_size=eps))
      hmc_draws, hmc_acc = run_chains(target, hmc_config, params, result.masks, key,
                                      args.chains, args.burn_in, args.samples)
      g, t = ess_both(target, hmc_draws)
      print(f"  HMC eps {eps}: acceptance {hmc_acc:.3f}  ESS geyer {g:.4f}  truncated {t:.4f}",
            flush=True)
      if best is None or g > best["geyer"]:
        best = dict(sampler=f"HMC (best of {grid})", step=f"{eps}", acc=hmc_acc, geyer=g,
                    truncated=t, seconds=0.0)
        curves[(name, "HMC")] = autocorrelation(hmc_draws)
        traces[(name, "HMC")] = hmc_draws[:500, 0]
    for row in (l2, best):
      rows.append((target.name, row))
    rows.append((target.name, dict(sampler="ratio L2HMC / HMC", step="", acc=float("nan"),
                                   geyer=l2["geyer"] / best["geyer"],
                                   truncated=l2["truncated"] / best["truncated"], seconds=0.0,
                                   ratio=True)))
    print(f"  L2HMC ESS geyer {geyer:.4f} truncated {truncated:.4f} (acceptance {acc:.3f})",
          flush=True)
  commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True, cwd=os.path.dirname(__file__)).stdout.strip()
  k = args.num_steps
  lines = [f"# L2HMC vs HMC: effective sample size\n",
           f"K = {k} leapfrog steps, {args.step_sizes} step sizes, networks of width "
           f"{args.hidden}, {args.chains} chains, {args.burn_in} burn-in + "
           f"{args.samples} samples each; commit `{commit}`, "
           f"{time.perf_counter() - start:.0f} s on {os.cpu_count()} CPU cores"
           f"{' (--quick)' if args.quick else ''}. ESS as a fraction of samples; per gradient "
           f"evaluation divide by K = {k} (the same K for both samplers).", "",
           "| target | sampler | step size | acceptance | ESS (Geyer) | ESS (truncated) |"
           " ESS/grad (Geyer) | training (s) |", "|---|---|---|---|---|---|---|---|"]
  for target_name, r in rows:
    if r.get("ratio"):
      lines.append(f"| {target_name} | **{r['sampler']}** | | | **{r['geyer']:.1f}x** |"
                   f" **{r['truncated']:.1f}x** | | |")
    else:
      lines.append(f"| {target_name} | {r['sampler']} | {r['step']} | {r['acc']:.3f} |"
                   f" {r['geyer']:.4f} | {r['truncated']:.4f} | {r['geyer'] / k:.5f} |"
                   f" {r['seconds']:.0f} |")
  _report.write_table(lines, os.path.join(args.out, "l2hmc_ess.md"))
  plot(curves, traces, all_targets, args.targets.split(","), os.path.join(args.out, "l2hmc_ess.png"))


def plot(curves, traces, all_targets, names, path):
  plt = _report.pyplot()
  fig, axes = plt.subplots(2, len(names), figsize=(4.5 * len(names), 7), squeeze=False)
  for j, name in enumerate(names):
    for sampler, style in (("L2HMC", "-"), ("HMC", "--")):
      if (name, sampler) in curves:
        axes[0, j].plot(curves[(name, sampler)], style, label=sampler)
        axes[1, j].plot(traces[(name, sampler)][:, 0], style, lw=0.8, label=sampler)
    axes[0, j].set(title=all_targets[name].name, xlabel="lag", ylabel="autocorrelation")
    axes[1, j].set(xlabel="transition", ylabel="x[0] of chain 0")
    axes[0, j].legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)
  print(f"wrote {path}")


if __name__ == "__main__":
  main()
