"""Which rate the held-out *error* of the meta-training classifiers asks for (issue 30,
the check before the twelfth attempt).

Adam with the cosine of its budget (``optax.cosine_decay_schedule(rate, T)``) at each
rate of ``--rates``, on ``--tasks`` held-out tasks of each of the six training
classifiers of ``l2o_transfer.py`` (its defaults: 1,024 examples per task, label
smoothing 0.1), each scored on ``--held-out`` examples it does not train on
(``l2o.tasks.mlp_minibatch(held_out=N, metric="error")``): the fraction misclassified
at the end of each budget ``T``. The twelfth attempt's meta-loss is that error; this
table says which rates it rewards, against the 2-3.5e-2 that the training loss asked for.

    python benchmarks/l2o_transfer_cosine_error.py            # ~5 min on 2 cores
    python benchmarks/l2o_transfer_cosine_error.py --quick    # a smoke run (not results)
    python benchmarks/l2o_transfer_cosine_error.py --out benchmarks/results/l2o_transfer_cosine_error
"""

from __future__ import annotations

import argparse
import json
import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

import _report
import l2o_transfer
from metaoptax import l2o
from suite_tasks import digits
from suite_tasks import mnist1d

OUT = pathlib.Path(__file__).parent / "out" / "l2o_transfer_cosine_error"


def held_out_errors(families, rates, budgets, num_tasks, key, progress):
  """``errors[family][budget]``: the mean held-out error at the end of the budget, one
  entry per rate (the same tasks and starts for every rate, as ``l2o.evaluate`` draws
  them from ``key``). The rates run side by side: one compiled program per family and
  budget, the peak a traced value of ``optax.cosine_decay_schedule``."""
  errors = {}
  with progress(total=len(families) * len(budgets), desc="cosine Adam, held-out error") as bar:
    for family in families:
      errors[family.name] = {}
      tasks, params, _ = l2o.sample_problems(key, family, l2o.L2OConfig(), num_tasks)
      for budget in budgets:
        run = lambda rate, budget=budget: l2o.evaluation.trajectory_losses(
            optax.adam(optax.cosine_decay_schedule(rate, budget)), family, tasks, params,
            steps=budget)[:, budget]
        ends = jax.jit(jax.vmap(run))(jnp.asarray(rates, jnp.float32))
        errors[family.name][budget] = [float(e) for e in np.mean(np.asarray(ends), axis=1)]
        bar.update()
  return errors


def report(errors, rates, budgets, header) -> list[str]:
  lines = [header, "",
           "| classifier | " + " | ".join(f"T = {b}: {r:g}" for b in budgets for r in rates)
           + " |", "|---|" + "---|" * (len(budgets) * len(rates))]
  lowest = {b: 0 for b in budgets}
  for name, by_budget in errors.items():
    cells = []
    for b in budgets:
      row = by_budget[b]
      best = int(np.argmin(row))
      lowest[b] += rates[best] <= 1e-2
      cells += [f"**{e:.4f}**" if i == best else f"{e:.4f}" for i, e in enumerate(row)]
    lines.append(f"| {name} | " + " | ".join(cells) + " |")
  lines += ["", "Lowest error (bold) at a rate of at most 1e-2: "
            + ", ".join(f"{lowest[b]} of {len(errors)} classifiers over {b} steps"
                        for b in budgets) + "."]
  return lines


def plot(errors, rates, budgets, path):
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, axes = plt.subplots(1, len(budgets), figsize=(5 * len(budgets), 3.6), sharey=False)
  for ax, b in zip(np.atleast_1d(axes), budgets):
    for name, by_budget in errors.items():  # the classifiers' errors differ 25x: relative
      row = np.asarray(by_budget[str(b)] if str(b) in by_budget else by_budget[b])
      ax.plot(rates, row / row.min(), "o-", label=name)
    ax.set_xscale("log")
    ax.set_xlabel("Adam's peak rate (cosine over the budget)")
    ax.set_ylabel("held-out error / its lowest over the rates")
    ax.set_title(f"budget {b} steps")
  np.atleast_1d(axes)[-1].legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--rates", nargs="+", type=float, default=[5e-3, 1e-2, 1.65e-2, 3e-2])
  parser.add_argument("--budgets", nargs="+", type=int, default=[1000, 5000])
  parser.add_argument("--tasks", type=int, default=8, help="held-out tasks per classifier")
  parser.add_argument("--held-out", type=int, default=400,
                      help="examples each task scores and does not train on")
  parser.add_argument("--seed", type=int, default=777, help="the key of the tasks and starts")
  parser.add_argument("--quick", action="store_true", help="a smoke run (not results)")
  parser.add_argument("--out", type=pathlib.Path, default=OUT)
  parser.add_argument("--replot", action="store_true",
                      help="train nothing: redraw the figure from the JSON in --out")
  args = parser.parse_args(argv)
  if args.replot:
    saved = json.loads((args.out / "l2o_transfer_cosine_error.json").read_text())
    plot(saved["errors"], saved["rates"], saved["budgets"],
         args.out / "l2o_transfer_cosine_error.png")
    return
  if args.quick:
    args.budgets, args.tasks, args.rates = [20, 40], 2, args.rates[:2]
  start = time.perf_counter()
  x_digits, y_digits, _, _ = digits.load_split()
  x_m1d, y_m1d, _, _ = mnist1d.load_data()
  families = l2o_transfer.training_families((x_digits, y_digits), (x_m1d, y_m1d), 1024, 0.1,
                                            held_out=args.held_out, metric="error")[:6]
  # (the six classifiers; the seventh family, a regression, has no error)
  errors = held_out_errors(families, args.rates, args.budgets, args.tasks,
                           jax.random.key(args.seed), _report.progress_bars())
  seconds = time.perf_counter() - start
  commit = _report.git_commit(short=True)
  header = (f"# Held-out error of Adam with the cosine of its budget, by peak rate\n\n"
            f"Commit `{commit}`; {args.tasks} held-out tasks of each training classifier "
            f"(key {args.seed}), {args.held_out} held-out examples each; mean error at the "
            f"end of each budget; {seconds:.0f} s in all. Command: `python "
            f"benchmarks/l2o_transfer_cosine_error.py"
            f"{' --quick' if args.quick else ''}`.")
  args.out.mkdir(parents=True, exist_ok=True)
  (args.out / "l2o_transfer_cosine_error.json").write_text(json.dumps(
      {"commit": commit, "rates": args.rates, "budgets": args.budgets, "tasks": args.tasks,
       "held_out": args.held_out, "seconds": seconds, "errors": errors}))
  plot(errors, args.rates, args.budgets, args.out / "l2o_transfer_cosine_error.png")
  _report.write_table(report(errors, args.rates, args.budgets, header),
                      str(args.out / "l2o_transfer_cosine_error.md"))


if __name__ == "__main__":
  main()
