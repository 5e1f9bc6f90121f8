"""The rates that ``l2o.ClimbedAdamConfig`` takes on the unseen networks: the climbed
scale and the learned multipliers (issue 30, the eighth attempt).

Reads the weights that ``l2o_transfer.py --learned-only --step-size climb --meta-seed K
--out DIR_K`` saved (``DIR_K/l2o_transfer_learned_only_network.npz``) and runs one
5,000-step run per network (optimizee seed 0) with them and with the zero read-out (the
start of meta-training: MetaOptimize's Adam, ``metaoptax.adamw(weight_decay=0,
average=None)``), recording at a few steps the found step size :math:`\\alpha_t` and the
effective rates :math:`\\alpha_t e^{s_t^{(i)}}` of the tensors (min / median / max).

    python benchmarks/l2o_transfer_climb_rates.py out/climb_seed0 out/climb_seed1 \\
        --name l2o_transfer_climb_COMMIT_rates
"""

from __future__ import annotations

import argparse
import json
import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np

import _report
import l2o_transfer

STEPS = (10, 100, 300, 1000, 2000, 3000, 5000)
TUNED_ADAM = {"digits MLP": "0.01 / 0.003", "MNIST-1D MLP": "0.003 / 0.003",
              "MNIST-1D CNN (unseen architecture)": "0.01 / 0.01"}


def traces(config, networks, problem, steps):
  """``(alpha (networks, steps), rates (networks, steps, tensors))`` of one run of ``problem``
  per network (one compiled program for all)."""
  params = problem.init(jax.random.key(0))

  @jax.jit
  @jax.vmap
  def run(network):
    def body(carry, key):
      p, s = carry
      p, s, info = config.step(network, s, p, jax.grad(problem.loss)(p, problem.batch(key)))
      return (p, s), (info["step_size"], info["log_scale"])
    return jax.lax.scan(body, (params, config.init_state(params)),
                        jax.random.split(jax.random.key(5), steps))[1]

  stacked = jax.tree.map(lambda *x: jnp.stack(x), *networks)
  alpha, log_scale = run(stacked)
  return np.asarray(alpha), np.asarray(alpha)[..., None] * np.exp(np.asarray(log_scale))


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("folders", nargs="+", help="the --out folders of the seeds' runs")
  parser.add_argument("--name", required=True, help="file name (without suffix) in --dir")
  parser.add_argument("--dir", type=pathlib.Path, default=l2o_transfer.RESULTS)
  parser.add_argument("--labels", nargs="+", default=None,
                      help="a row label per folder (default: 'meta seed K' from the record)")
  parser.add_argument("--drop-in", action="store_true",
                      help="weights of l2o_transfer.py --drop-in (metaoptax.adamw()'s weight "
                           "decay; its average does not change the iterates)")
  args = parser.parse_args(argv)
  start = time.perf_counter()
  config = l2o_transfer.climbed(l2o_transfer.CONFIG, args.drop_in)
  runs = [json.loads((pathlib.Path(f) / "l2o_transfer_learned_only.json").read_text())
          for f in args.folders]
  if args.labels is not None and len(args.labels) != len(args.folders):
    parser.error("--labels needs one label per folder")
  labels = ["start (zero read-out)"] + (args.labels or [f"meta seed {r['meta_seed']}"
                                                         for r in runs])
  networks = [config.init_network(jax.random.key(0))] + [
      l2o_transfer.load_network(config, pathlib.Path(f) / "l2o_transfer_learned_only_network.npz")
      for f in args.folders]
  record, rows = {}, []
  for name, problem in l2o_transfer.problems().items():
    alpha, rates = traces(config, networks, problem, max(STEPS))
    record[name] = {}
    for label, a, r in zip(labels, alpha, rates):
      cells = [f"{a[t - 1]:.2g} ({np.min(r[t - 1]):.2g} / {np.median(r[t - 1]):.2g} / "
               f"{np.max(r[t - 1]):.2g})" for t in STEPS]
      rows.append(f"| {name} | {TUNED_ADAM[name]} | {label} | " + " | ".join(cells) + " |")
      record[name][label] = {"alpha": [float(a[t - 1]) for t in STEPS],
                             "rates": [r[t - 1].tolist() for t in STEPS]}
  seconds = time.perf_counter() - start
  commit = _report.git_commit(short=True)
  lines = ["# The climbed step size and the learned rates of `l2o.ClimbedAdamConfig` on the "
           "unseen networks", "",
           f"measured at commit `{commit}`, jax {jax.__version__} "
           f"(`l2o_transfer_climb_rates.py`, {seconds / 60:.1f} min on 2 shared CPU cores); the "
           "weights are those `l2o_transfer.py --learned-only --step-size climb` selected and "
           "saved, and the zero read-out (MetaOptimize's Adam"
           + (", with metaoptax.adamw()'s weight decay: --drop-in" if args.drop_in else "")
           + "). One 5,000-step run per network "
           "(optimizee seed 0). Each cell: alpha_t (min / median / max over the tensors of "
           "alpha_t e^(s_t^(i)), the rate each tensor takes).", "",
           "| network | tuned Adam (1,000 / 5,000) | weights | "
           + " | ".join(f"step {t}" for t in STEPS) + " |",
           "|---|---|---|" + "---|" * len(STEPS)] + rows
  args.dir.mkdir(parents=True, exist_ok=True)
  _report.write_table(lines, str(args.dir / f"{args.name}.md"))
  (args.dir / f"{args.name}.json").write_text(json.dumps(
      {"commit": commit, "steps": STEPS, "record": record}, indent=1))
  print(f"wrote {args.dir / args.name}.md, .json")


if __name__ == "__main__":
  main()
