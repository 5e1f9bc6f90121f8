"""A learned optimizer meta-trained on small MLP tasks, applied to the digits MLP, vs tuned Adam.

1. Meta-training (Algorithm 1 of Chen et al. 2022, as ``metaoptax.l2o.train``):
   coordinate-wise LSTM optimizers, vanilla L2O (the step itself) and
   LSTM(lr, momentum) (a step size and a momentum coefficient per coordinate),
   each once per seed on ``l2o.tasks.mlp_classifier`` (a 64-32-10 ReLU MLP, each
   task a fixed minibatch of 128 training images of scikit-learn's digits; the test
   images are never seen), 100-step trajectories in truncations of 10, log
   meta-loss, diverged tasks masked and restarted (``mask_diverged_tasks``).
2. Application: each trained network, as an optax transformation
   (``config.transformation``), trains the benchmark suite's digits classifier
   (``suite_tasks/digits.py``: MLP 64-128-128-10, a fresh minibatch of 128 per
   step, label smoothing 0.1; 11x the parameters and 10x the steps of its
   training tasks) for 1,000 steps; seed ``k`` pairs network ``k`` with the
   classifier's initialization and minibatches of seed ``k``.
3. Baseline: ``optax.adam`` at every rate of a grid on the same seeds; the best
   constant rate is the one with the lowest mean final train loss (chosen on these
   runs: the train loss is what every method minimizes; the test split is not used
   to choose).
4. In distribution, for comparison: every network and Adam on 20 unseen tasks of
   its training family (fixed minibatches, 64-32-10), loss at the training
   horizon (step 100) and at 3x the horizon.

Reports, as mean ± std over the 3 seeds, the train loss (full training split)
above the label-smoothing floor and the test accuracy after 100, 250, 500 and
1,000 steps, and plots both curves.

    python benchmarks/l2o_digits.py            # 14 min on 2 busy cores
    python benchmarks/l2o_digits.py --quick    # smoke run: tiny budgets

Writes ``l2o_digits.md`` and ``l2o_digits.png`` into ``--out`` (by default
``benchmarks/out/``, not tracked by git) and prints their paths.
"""

from __future__ import annotations

import argparse
import functools
import os
import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

import _report
from metaoptax import l2o
from suite_tasks import digits
from suite_tasks import runner

#: The files under benchmarks/results/ that this script writes (glob patterns;
#: tests/integration/test_repository_shape.py checks every committed result against them).
OUTPUTS = ("l2o_digits.md", "l2o_digits.png",)


#: name -> (heads, extra L2OConfig fields) of the learned optimizers.
VARIANTS = {
    "vanilla L2O": (("update",), {}),
    "LSTM(lr, momentum)": (("learning_rate", "momentum"), {}),
}
ADAM_GRID = (1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2)
SEEDS = 3
STEPS = 1000
CHECKPOINTS = (0.1, 0.25, 0.5, 1.0)  # shares of the budget in the table: steps 100 ... 1000
OUT = pathlib.Path(__file__).resolve().parent / "out"
#: One meta-optimizer (Adam 1e-3, clipped) for every network: ``l2o.train`` then
#: reuses the compiled meta step of a variant across seeds.
META_OPTIMIZER = l2o.default_optimizer()


def meta_train_variant(name, heads, extra, family, args, seed):
  """One learned optimizer: ``(config, training, result)`` of its meta-training on ``family``."""
  config = l2o.L2OConfig(heads=heads, **extra)
  training = l2o.TrainingConfig(tasks_per_step=args.tasks_per_step, horizon=args.horizon,
                                unroll=args.unroll, log_loss=True,
                                mask_diverged_tasks=True)
  print(f"meta-training {name} (seed {seed}) on {family.name}", flush=True)
  result = l2o.train(jax.random.key(seed), family, config, training,
                     num_iterations=args.meta_iterations, optimizer=META_OPTIMIZER,
                     log_every=max(1, args.meta_iterations // 20))
  return config, training, result


def learned_method(name, config, networks) -> runner.Method:
  """The learned optimizer with network ``k`` on seed ``k`` (``seed_per_value``)."""
  stacked = jax.tree.map(lambda *leaves: jnp.stack(leaves), *networks)

  def make(index):
    net = jax.tree.map(lambda leaf: leaf[index.astype(jnp.int32)], stacked)
    return config.transformation(net)

  return runner.Method(name, "l2o", make, values=tuple(float(k) for k in range(len(networks))))


def adam_grid(grid) -> runner.Method:
  """``optax.adam`` at every rate of ``grid``, side by side in one compiled program."""
  return runner.Method("Adam grid", "adam", optax.adam, values=tuple(grid),
                       names=tuple((f"Adam {lr:g}", f"lr {lr:g}") for lr in grid))


def at(log, fraction):
  """Index of the record at ``fraction`` of the budget."""
  return int(round(fraction * (len(log.steps) - 1)))


def fmt(x, digits_=3):
  """Mean ± std over the seeds; those whose value is not finite are left out and counted."""
  x = np.asarray(x, dtype=float)
  finite = np.isfinite(x)
  if not finite.any():
    return f"diverged ({x.size} of {x.size} seeds)"
  text = f"{x[finite].mean():.{digits_}g} ± {x[finite].std():.1g}"
  return text if finite.all() else text + f" ({int(np.sum(~finite))} of {x.size} seeds diverged)"


def best_adam(logs):
  """The grid's log with the lowest mean final train loss (a diverged rate loses)."""
  means = np.array([np.mean(log.train_loss[:, -1]) for log in logs])
  return logs[int(np.argmin(np.where(np.isfinite(means), means, np.inf)))]


def table(problem, adam_logs, best, learned, training_rows, steps, seconds):
  floor = problem.train_loss_floor
  heads = " | ".join(f"{int(f * steps)}" for f in CHECKPOINTS)
  rule = "|---" * (len(CHECKPOINTS) + 1) + "|"
  lines = [
      f"Digits MLP 64-128-128-10, minibatches of {digits.BATCH}, label smoothing "
      f"{digits.LABEL_SMOOTHING} (train-loss floor {floor:.4f}), {steps} steps, {SEEDS} "
      f"seeds (mean ± std; learned: network k on seed k). Adam grid "
      f"{', '.join(f'{lr:g}' for lr in ADAM_GRID)}; best constant rate (lowest mean final "
      f"train loss): {best.method.info}. Total {seconds:.0f} s on {os.cpu_count()} CPU cores "
      "(meta-training, compilation and training).", "",
      "Train loss − floor (full training split) after each number of steps:", "",
      f"| method | {heads} |", rule]

  def rows(metric, digits_):
    out = []
    for log in adam_logs:
      name = log.method.name + (" (best)" if log is best else "")
      out.append(f"| {name} | " + " | ".join(
          fmt(metric(log)[:, at(log, f)], digits_) for f in CHECKPOINTS) + " |")
    for log in learned:
      out.append(f"| {log.method.name} | " + " | ".join(
          fmt(metric(log)[:, at(log, f)], digits_) for f in CHECKPOINTS) + " |")
    return out

  lines += rows(lambda log: log.train_loss - floor, 3)
  lines += ["", "Test accuracy (360 held-out images) after each number of steps:", "",
            f"| method | {heads} |", rule]
  lines += rows(lambda log: log.test, 4)
  lines += ["", "Meta-training on `mlp_classifier` (64-32-10 on minibatches of the "
            "training split):", "",
            "| method | seed | iterations x tasks | horizon / unroll | meta-updates/s "
            "(with compilation) | skipped | diverged tasks | final meta-loss (log) |",
            "|---|---|---|---|---|---|---|---|"]
  for name, seed, result, training, iterations in training_rows:
    lines.append(
        f"| {name} | {seed} | {iterations} x {training.tasks_per_step} | "
        f"{training.horizon} / {training.unroll} | {result.updates_per_second:.1f} | "
        f"{result.skipped_updates} | {result.diverged_tasks} | "
        f"{np.mean(result.losses[-10:]):.3f} |")
  return lines


IN_DISTRIBUTION_ADAM = (1e-3, 3e-3, 1e-2, 3e-2, 1e-1)


def in_distribution(family, methods, horizon, num_tasks=20):
  """Median loss over ``num_tasks`` unseen tasks of the training family at the
  horizon and at 3x the horizon, per method: ``{name: [(at horizon, at 3x), ...]}``
  (one pair per network for the learned optimizers, one for Adam)."""
  key = jax.random.key(9000)
  results = {}
  for name, optimizers in methods.items():
    results[name] = []
    for optimizer in optimizers:
      losses = np.asarray(l2o.evaluate(key, family, optimizer, num_tasks, 3 * horizon))
      losses = np.where(np.isfinite(losses), losses, np.inf)
      results[name].append((np.median(losses[:, horizon]), np.median(losses[:, -1])))
  return results


def in_distribution_table(results, horizon):
  lines = ["", f"In distribution: median loss on 20 unseen `mlp_classifier` tasks (fixed "
           f"minibatches of the training split, 64-32-10) at the training horizon (step "
           f"{horizon}) and at step {3 * horizon}; learned: seeds 0 / 1 / 2; Adam: each rate "
           "of the grid on the same tasks:", "",
           f"| method | step {horizon} | step {3 * horizon} |", "|---|---|---|"]
  for name, pairs in results.items():
    lines.append(f"| {name} | " + " / ".join(f"{a:.3g}" for a, _ in pairs) + " | "
                 + " / ".join(f"{b:.3g}" for _, b in pairs) + " |")
  return lines


def plot(problem, adam_logs, best, learned, path):
  plt = _report.pyplot()
  fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.8))
  grays = plt.cm.Greys(np.linspace(0.35, 0.8, len(adam_logs)))
  colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
  for log, gray in zip(adam_logs, grays):
    is_best = log is best
    style = dict(color="black" if is_best else gray, lw=1.6 if is_best else 1.0,
                 ls="--" if is_best else ":",
                 label=log.method.name + (" (best)" if is_best else ""))
    ax1.plot(log.steps, (log.train_loss - problem.train_loss_floor).mean(0), **style)
    ax2.plot(log.steps, log.test.mean(0), **style)
  for log, color in zip(learned, colors):  # one line per seed (a diverged seed ends)
    for ax, values in ((ax1, log.train_loss - problem.train_loss_floor), (ax2, log.test)):
      for k, per_seed in enumerate(values):
        ax.plot(log.steps, per_seed, color=color, lw=1.4, alpha=0.85,
                label=f"{log.method.name} (one line per seed)" if k == 0 else None)
  ax1.set(yscale="log", xlabel="step", ylabel="train loss − floor (full training split)",
          title=f"digits MLP: train loss (Adam: mean of {SEEDS} seeds)")
  ax2.set(xlabel="step", ylabel="test accuracy", ylim=(0.0, 1.0),
          title=f"digits MLP: test accuracy (Adam: mean of {SEEDS} seeds)")
  for ax in (ax1, ax2):
    for f in CHECKPOINTS[:-1]:
      ax.axvline(f * adam_logs[0].steps[-1], color="0.8", lw=0.8, ls=":", zorder=0)
  ax1.legend(fontsize=7, ncol=2)
  _report.save_figure(fig, path)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--steps", type=int, default=STEPS, help="steps on the digits MLP")
  parser.add_argument("--meta-iterations", type=int, default=30,
                      help="task batches of meta-training per network")
  parser.add_argument("--tasks-per-step", type=int, default=4)
  parser.add_argument("--horizon", type=int, default=100)
  parser.add_argument("--unroll", type=int, default=10)
  parser.add_argument("--out", type=pathlib.Path, default=OUT,
                      help="output folder (default: benchmarks/out/, git-ignored)")
  parser.add_argument("--quick", action="store_true", help="smoke run: tiny budgets")
  args = parser.parse_args(argv)
  import tqdm  # pylint: disable=g-import-not-at-top
  if args.quick:
    args.steps, args.meta_iterations, args.tasks_per_step, args.horizon = 100, 2, 2, 20
  chunk = args.steps // 20
  commit = _report.git_commit(short=True)  # the code that runs, not the tree at the end
  start = time.perf_counter()
  x_train, y_train, _, _ = digits.load_split()
  family = l2o.tasks.mlp_classifier(data=(x_train, y_train))
  problem = digits.make_problem()
  progress = functools.partial(tqdm.tqdm, dynamic_ncols=True, mininterval=0.5)
  kw = dict(steps=args.steps, seeds=SEEDS, chunk=chunk, progress=progress)
  adam_logs = runner.train(problem, adam_grid(ADAM_GRID), **kw)
  learned, training_rows = [], []
  in_methods = {f"Adam {lr:g}": [optax.adam(lr)] for lr in IN_DISTRIBUTION_ADAM}
  for name, (heads, extra) in VARIANTS.items():
    networks = []
    for seed in range(SEEDS):
      config, training, result = meta_train_variant(name, heads, extra, family, args, seed)
      networks.append(result.params)
      training_rows.append((name, seed, result, training, args.meta_iterations))
    (log,) = runner.train(problem, learned_method(name, config, networks),
                          seed_per_value=True, **kw)
    learned.append(log)
    in_methods[name] = [config.transformation(net) for net in networks]
  print("in distribution: unseen tasks of the training family", flush=True)
  in_results = in_distribution(family, in_methods, args.horizon)
  best = best_adam(adam_logs)
  seconds = time.perf_counter() - start
  args.out.mkdir(parents=True, exist_ok=True)
  md, png = args.out / "l2o_digits.md", args.out / "l2o_digits.png"
  header = [f"# A learned optimizer on the digits MLP, against tuned Adam", "",
            f"measured at commit `{commit}`, jax {jax.__version__}"
            + (" (--quick)" if args.quick else ""), ""]
  _report.write_table(header + table(problem, adam_logs, best, learned, training_rows,
                                     args.steps, seconds)
                      + in_distribution_table(in_results, args.horizon), str(md))
  plot(problem, adam_logs, best, learned, png)
  print(f"wrote {md}\nwrote {png}")


if __name__ == "__main__":
  main()
