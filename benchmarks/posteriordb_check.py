r"""The posteriordb suite's log densities against posteriordb's gold-standard moments.

Each posterior of ``_posteriordb.NAMES`` is sampled with blackjax NUTS after
``window_adaptation`` (diagonal mass matrix), every chain adapted from its own Stan
initial point (``sampler_baselines.nuts``). Each constrained parameter's mean and
standard deviation are compared with those of posteriordb's reference draws (10 Stan
chains, 10,000 draws):

* mean: :math:`|\bar x - \mu_{\mathrm{ref}}| \le 4\sqrt{\mathrm{MCSE}^2
  + \mathrm{MCSE}_{\mathrm{ref}}^2}`,
  or within 0.05 reference sds; :math:`\mathrm{MCSE} = s/\sqrt{\mathrm{ESS}}`, the ESS by
  Geyer's estimator over all chains (``metaoptax.l2hmc.ess.geyer_ess``), the reference's
  from its bulk ESS;
* sd: within 10 % of the reference's, or within 4 of its MCSE, the delta method on
  the variance: :math:`\mathrm{MCSE}(s) = \mathrm{sd}((x - \bar x)^2)
  / (2 s \sqrt{\mathrm{ESS}((x - \bar x)^2)})`.

A posterior passes when every parameter does and the chains agree (split R-hat at most
1.01, posteriordb's own bound on its reference, and an ESS of at least 100 for every
parameter, so that the MCSE means something). A chain whose own mean of some parameter
lies more than one reference sd from the reference mean is counted as away from it (a
chain in another mode).

A wrong transform, Jacobian or prior moves a mean or a scale by far more. The table
reports, per posterior, the largest mean error in reference sds, the sd ratio furthest
from 1, the split R-hat, NUTS's gradients per transition and the wall time.

    python benchmarks/posteriordb_check.py                           # all 15
    python benchmarks/posteriordb_check.py --quick --names kidiq-kidscore_momhsiq
    python benchmarks/posteriordb_check.py --out benchmarks/results  # the committed files

``--suite tuningfork`` makes the reference moments of tuningfork's classes that have no
closed form (``_tuningfork``; the reference being made, not checked against): NUTS as
above from uniform(-2, 2) starts, 8 chains, 2,000 draws each by default, and per coordinate
of the unconstrained vector its mean, sd, arviz's rank-normalized bulk ESS and split R-hat.
A class passes when every R-hat is at most 1.01, every bulk ESS at least 1,000 (a Monte
Carlo error of a mean at most 0.032 sd, against the benchmarks' tolerance of 0.1 sd) and no
transition diverged. A rerun of some classes keeps the others' rows.

    python benchmarks/posteriordb_check.py --suite tuningfork --out benchmarks/results
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

import jax
import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _posteriordb  # pylint: disable=g-import-not-at-top,wrong-import-position
import _report  # pylint: disable=g-import-not-at-top,wrong-import-position
import _sampler_metrics  # pylint: disable=g-import-not-at-top,wrong-import-position
import _tuningfork  # pylint: disable=g-import-not-at-top,wrong-import-position
import sampler_baselines  # pylint: disable=g-import-not-at-top,wrong-import-position
from metaoptax import l2hmc  # pylint: disable=g-import-not-at-top,wrong-import-position

OUTPUTS = ("posteriordb_check.json", "posteriordb_check.md", "tuningfork_reference.json",
           "tuningfork_reference.md")
OUT = HERE / "out" / "posteriordb_check"  # git-ignored; the committed files: --out results
MCSE_BOUND = 4.0  # the pass bound, in Monte Carlo standard errors
MEAN_SLACK = 0.05  # a mean within this many reference sds passes whatever its MCSE
SD_TOLERANCE = 0.10  # an sd within this relative error passes whatever its MCSE
RHAT_BOUND = 1.01  # the largest split R-hat of a passing posterior
MIN_ESS = 100  # the smallest ESS of a passing posterior's parameters
AWAY = 1.0  # a chain whose mean is this many reference sds off is away from the reference
REFERENCE_MIN_ESS = 1000  # tuningfork: the smallest bulk ESS of a passing reference


def effective_sample_size(draws) -> float:
  """Geyer's ESS of ``(samples, chains)`` draws of one scalar, as a count."""
  draws = np.asarray(draws, np.float64)
  return l2hmc.ess.geyer_ess(draws[..., None]) * draws.size


def compare(draws, reference: dict) -> dict:
  """One parameter's ``(samples, chains)`` draws against its reference entry."""
  draws = np.asarray(draws, np.float64)
  mean, sd = float(draws.mean()), float(draws.std(ddof=1))
  ess = effective_sample_size(draws)
  squares = (draws - mean) ** 2
  mcse_mean = sd / np.sqrt(ess)
  mcse_sd = float(squares.std(ddof=1) / np.sqrt(effective_sample_size(squares))
                  / (2 * max(sd, 1e-300)))
  ref_mean, ref_sd = reference["mean"], reference["sd"]
  mcse_ref = ref_sd / np.sqrt(reference["ess_bulk"])
  error = abs(mean - ref_mean)
  mean_ok = error <= MCSE_BOUND * np.hypot(mcse_mean, mcse_ref) or error <= MEAN_SLACK * ref_sd
  sd_ok = abs(sd / ref_sd - 1) <= SD_TOLERANCE or abs(sd - ref_sd) <= MCSE_BOUND * mcse_sd
  return dict(mean=mean, sd=sd, ref_mean=ref_mean, ref_sd=ref_sd, ess=float(ess),
              mcse_mean=float(mcse_mean), mcse_sd=mcse_sd,
              mean_error_in_ref_sd=float(error / ref_sd),
              mean_error_in_mcse=float(error / np.hypot(mcse_mean, mcse_ref)),
              sd_ratio=float(sd / ref_sd), mean_ok=bool(mean_ok), sd_ok=bool(sd_ok))


def compare_all(draws: dict, reference: dict) -> tuple[dict, bool]:
  """Every parameter's ``(samples, chains)`` draws against the reference, and the verdict:
  every parameter passes and the chains agree (R-hat, ESS)."""
  parameters = {}
  for parameter, values in draws.items():
    parameters[parameter] = compare(values, reference[parameter])
    parameters[parameter]["rhat"] = _sampler_metrics.split_rhat(values[..., None])
  converged = (max(p["rhat"] for p in parameters.values()) <= RHAT_BOUND
               and min(p["ess"] for p in parameters.values()) >= MIN_ESS)
  return parameters, converged and all(p["mean_ok"] and p["sd_ok"] for p in parameters.values())


def check(name: str, key, chains: int, warmup: int, samples: int) -> dict:
  """NUTS on posterior ``name`` and every parameter's comparison with the reference."""
  start = time.perf_counter()
  posterior = _posteriordb.load(name)
  reference = _posteriordb.read_reference(name)["parameters"]
  k_init, k_nuts = jax.random.split(key)
  run = sampler_baselines.nuts(posterior.logdensity_fn, k_nuts,
                               posterior.initial_positions(k_init, chains), warmup, samples)
  draws = run["draws"]  # (samples, chains, dim)
  flat = draws.reshape(-1, posterior.dim)
  constrained = jax.jit(jax.vmap(posterior.constrain))(flat)
  values = {p: np.asarray(constrained[p]).reshape(draws.shape[:2])
            for p in posterior.parameter_names}
  away = np.zeros(chains, bool)
  for parameter, value in values.items():
    offset = np.abs(value.mean(axis=0) - reference[parameter]["mean"])
    away |= offset > AWAY * reference[parameter]["sd"]
  parameters, passed = compare_all(values, reference)
  passed_near = None  # the verdict on the chains near the reference, when some are away
  if away.any() and (~away).sum() >= 2:
    passed_near = compare_all({p: v[:, ~away] for p, v in values.items()}, reference)[1]
  worst_sd = max(parameters.values(), key=lambda p: abs(np.log(p["sd_ratio"])))
  return dict(
      name=name, split=posterior.split, dim=posterior.dim, passed=passed,
      chains_away=[int(c) for c in np.nonzero(away)[0]], passed_chains_near=passed_near,
      max_mean_error_in_ref_sd=max(p["mean_error_in_ref_sd"] for p in parameters.values()),
      max_mean_error_in_mcse=max(p["mean_error_in_mcse"] for p in parameters.values()),
      worst_sd_ratio=worst_sd["sd_ratio"],
      min_ess=min(p["ess"] for p in parameters.values()),
      max_rhat=max(p["rhat"] for p in parameters.values()),
      grads_per_transition=run["grads_per_transition"],
      warmup_grads_per_chain=float(np.mean(run["warmup_grads"])),
      acceptance=run["acceptance"], divergent=run["divergent"],
      sampling_seconds=run["seconds"], seconds=time.perf_counter() - start,
      parameters=parameters)


def report(records: list[dict], settings: dict) -> list[str]:
  """Markdown: the settings and one row per posterior."""
  lines = [
      "# posteriordb: the suite's log densities against the reference moments\n",
      f"blackjax NUTS, `window_adaptation` (diagonal mass matrix) on each of "
      f"{settings['chains']} chains from Stan's uniform(-2, 2) initial points, "
      f"{settings['warmup']} adaptation steps, {settings['samples']} draws per chain; seed "
      f"{settings['seed']}; blackjax {settings['blackjax']}, commit `{settings['commit']}`"
      f"{' (--quick)' if settings['quick'] else ''}. Reference: posteriordb's 10 Stan chains "
      "(10,000 draws). A parameter passes when its mean is within 4 MCSE of the reference's "
      "(NUTS's and the reference's combined) or 0.05 reference sds, and its sd within 10 % or "
      "4 MCSE, and the chains agree: split R-hat at most 1.01 and every ESS at least 100. "
      "Chains away: those whose own mean of some parameter is more than 1 reference sd off; "
      "where some are, the last column is the same check on the other chains alone. "
      "Mean error: the largest |mean - reference| over the parameters, in reference "
      "sds (and in MCSE); sd ratio: the one furthest from 1; R-hat: split, the largest; "
      "seconds: the whole run (compilation, adaptation, sampling).", "",
      "| posterior | split | dim | mean error (ref sd) | mean error (MCSE) | sd ratio | "
      "min ESS | R-hat | chains away | divergent | grads/transition | warm-up grads/chain | "
      "seconds | pass | pass (chains near) |",
      "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
  for r in records:
    lines.append(
        f"| {r['name']} | {r['split']} | {r['dim']} | {r['max_mean_error_in_ref_sd']:.3f} |"
        f" {r['max_mean_error_in_mcse']:.2f} | {r['worst_sd_ratio']:.3f} | {r['min_ess']:.0f} |"
        f" {r['max_rhat']:.3f} | {len(r['chains_away'])}/{settings['chains']} |"
        f" {r['divergent']:.4f} | {r['grads_per_transition']:.1f} |"
        f" {r['warmup_grads_per_chain']:.0f} | {r['seconds']:.0f} |"
        f" {'pass' if r['passed'] else 'FAIL'} | {_verdict(r['passed_chains_near'])} |")
  failing = [(r["name"], p, v) for r in records if not r["passed"]
             for p, v in r["parameters"].items()
             if not (v["mean_ok"] and v["sd_ok"] and v["rhat"] <= RHAT_BOUND
                     and v["ess"] >= MIN_ESS)]
  if failing:
    lines += ["", "The parameters that miss a bound, of the posteriors that fail:", "",
              "| posterior | parameter | mean | reference mean | MCSE | sd | reference sd |"
              " R-hat |",
              "|---|---|---|---|---|---|---|---|"]
    for name, parameter, v in failing:
      lines.append(f"| {name} | {parameter} | {v['mean']:.4g} | {v['ref_mean']:.4g} |"
                   f" {v['mcse_mean']:.2g} | {v['sd']:.4g} | {v['ref_sd']:.4g} | {v['rhat']:.3f} |")
  return lines


def _verdict(passed) -> str:
  return "—" if passed is None else ("pass" if passed else "FAIL")


def reference_run(name: str, key, chains: int, warmup: int, samples: int) -> dict:
  """NUTS on tuningfork's class ``name``: every coordinate's mean, sd, bulk ESS, R-hat."""
  start = time.perf_counter()
  model = _tuningfork.load(name)
  k_init, k_nuts = jax.random.split(key)
  run = sampler_baselines.nuts(model.logdensity_fn, k_nuts,
                               model.initial_positions(k_init, chains), warmup, samples)
  draws = np.asarray(run["draws"], np.float64)
  flat = draws.reshape(-1, model.dim)
  ess = _sampler_metrics.bulk_ess(draws)
  rhat = _sampler_metrics.rank_rhat(draws)
  divergent = int(round(run["divergent"] * samples * chains))
  passed = bool(rhat.max() <= RHAT_BOUND and ess.min() >= REFERENCE_MIN_ESS and divergent == 0)
  worst = int(np.argmin(ess))
  return dict(name=name, split=model.split, dim=model.dim, chains=chains, warmup=warmup,
              samples=samples, mean=flat.mean(0).tolist(), sd=flat.std(0).tolist(),
              ess_bulk=ess.tolist(), rhat=rhat.tolist(), min_ess=float(ess.min()),
              min_ess_coordinate=model.coordinate_names[worst], max_rhat=float(rhat.max()),
              max_mcse_in_sd=float(1 / np.sqrt(ess.min())), divergent=divergent,
              grads_per_transition=run["grads_per_transition"],
              warmup_grads_per_chain=float(np.mean(run["warmup_grads"])),
              seconds=time.perf_counter() - start, passed=passed)


def reference_report(records: dict, settings: dict) -> list[str]:
  """Markdown: one row per tuningfork class."""
  lines = [
      "# tuningfork: reference moments from long NUTS runs\n",
      f"blackjax {settings['blackjax']} NUTS, `window_adaptation` (diagonal mass matrix) on "
      "each chain from uniform(-2, 2) starts; per class its chains, adaptation steps and "
      f"draws per chain below; seed {settings['seed']}, commit `{settings['commit']}`"
      f"{' (--quick)' if settings['quick'] else ''}. Per coordinate of the unconstrained "
      "vector: mean and sd over all draws, arviz's rank-normalized bulk ESS and split R-hat. "
      "MCSE: the largest Monte Carlo error of a mean, in sds (1 / sqrt(min ESS)). Pass: every "
      f"R-hat at most {RHAT_BOUND}, every bulk ESS at least {REFERENCE_MIN_ESS}, no divergent "
      "transition. The classes with a closed form (" + ", ".join(_tuningfork.EXACT)
      + ") need no run.", "",
      "| class | split | dim | chains x draws | warm-up | min bulk ESS (coordinate) | "
      "max R-hat | max MCSE (sd) | divergent | grads/transition | seconds | pass |",
      "|---|---|---|---|---|---|---|---|---|---|---|---|"]
  for r in records.values():
    lines.append(
        f"| {r['name']} | {r['split']} | {r['dim']} | {r['chains']} x {r['samples']} |"
        f" {r['warmup']} | {r['min_ess']:.0f} ({r['min_ess_coordinate']}) |"
        f" {r['max_rhat']:.4f} | {r['max_mcse_in_sd']:.3f} | {r['divergent']} |"
        f" {r['grads_per_transition']:.1f} | {r['seconds']:.0f} |"
        f" {'pass' if r['passed'] else 'FAIL'} |")
  return lines


def main_tuningfork(args):
  """``--suite tuningfork``: the reference moments, merged into the file in ``--out``."""
  import blackjax  # pylint: disable=g-import-not-at-top
  names = args.names or [n for n in _tuningfork.NAMES if n not in _tuningfork.EXACT]
  chains, warmup, samples = args.chains, args.warmup, args.samples
  if args.quick:
    chains, warmup, samples = 2, 100, 100
  settings = dict(seed=args.seed, quick=args.quick, blackjax=blackjax.__version__,
                  commit=_report.git_commit(short=True))
  args.out.mkdir(parents=True, exist_ok=True)
  path = args.out / "tuningfork_reference.json"
  records = json.loads(path.read_text())["records"] if path.exists() else {}
  for name in names:
    key = jax.random.fold_in(jax.random.key(args.seed), _tuningfork.NAMES.index(name))
    records[name] = dict(reference_run(name, key, chains, warmup, samples),
                         commit=settings["commit"])
    r = records[name]
    print(f"{name}: {'pass' if r['passed'] else 'FAIL'}, min ESS {r['min_ess']:.0f} "
          f"({r['min_ess_coordinate']}), R-hat {r['max_rhat']:.4f}, {r['divergent']} divergent,"
          f" {r['grads_per_transition']:.1f} grads/transition ({r['seconds']:.0f} s)", flush=True)
    ordered = {n: records[n] for n in _tuningfork.NAMES if n in records}
    reference = {n: dict(mean=r["mean"], sd=r["sd"], passed=r["passed"])
                 for n, r in ordered.items()}
    path.write_text(json.dumps(dict(settings=settings, reference=reference, records=ordered))
                    + "\n")
    _report.write_table(reference_report(ordered, settings),
                        str(args.out / "tuningfork_reference.md"))
  return records


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--suite", choices=("posteriordb", "tuningfork"), default="posteriordb",
                      help="posteriordb: check the densities against posteriordb's references;"
                      " tuningfork: make the references of tuningfork's classes")
  parser.add_argument("--names", nargs="+", choices=_posteriordb.NAMES + _tuningfork.NAMES)
  parser.add_argument("--chains", type=int, default=8)
  parser.add_argument("--warmup", type=int, default=1000, help="window-adaptation steps")
  parser.add_argument("--samples", type=int, default=None,
                      help="draws per chain (default 1,000; tuningfork 2,000)")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--quick", action="store_true",
                      help="4 chains, 500 adaptation steps, 500 draws: a smoke run")
  parser.add_argument("--out", type=pathlib.Path, default=OUT)
  args = parser.parse_args(argv)
  if args.samples is None:
    args.samples = 2000 if args.suite == "tuningfork" else 1000
  if args.suite == "tuningfork":
    return main_tuningfork(args)
  args.names = args.names or list(_posteriordb.NAMES)
  import blackjax  # pylint: disable=g-import-not-at-top
  import tqdm  # pylint: disable=g-import-not-at-top
  chains, warmup, samples = args.chains, args.warmup, args.samples
  if args.quick:
    chains, warmup, samples = 4, 500, 500
  settings = dict(chains=chains, warmup=warmup, samples=samples, seed=args.seed,
                  quick=args.quick, blackjax=blackjax.__version__,
                  commit=_report.git_commit(short=True))
  records = []
  bar = tqdm.tqdm(args.names, desc="posteriordb NUTS check", dynamic_ncols=True)
  for name in bar:
    bar.set_postfix_str(name)
    key = jax.random.fold_in(jax.random.key(args.seed), _posteriordb.NAMES.index(name))
    record = check(name, key, chains, warmup, samples)
    records.append(record)
    tqdm.tqdm.write(f"{name}: {'pass' if record['passed'] else 'FAIL'}, mean error "
                    f"{record['max_mean_error_in_ref_sd']:.3f} ref sd, sd ratio "
                    f"{record['worst_sd_ratio']:.3f}, R-hat {record['max_rhat']:.3f}, "
                    f"{len(record['chains_away'])} chains away "
                    f"({record['seconds']:.0f} s)")
  args.out.mkdir(parents=True, exist_ok=True)
  (args.out / "posteriordb_check.json").write_text(
      json.dumps(dict(settings=settings, records=records), indent=1) + "\n")
  _report.write_table(report(records, settings), str(args.out / "posteriordb_check.md"))
  return records


if __name__ == "__main__":
  main()
