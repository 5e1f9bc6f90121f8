"""A learned optimizer meta-trained on small MLPs, applied to networks it has never seen.

1. Meta-training (``metaoptax.l2o.train``) of ``l2o.ScaledAdamConfig``: Adam whose
   step is scaled, per tensor, by a bounded learned factor ``exp(S± tanh(.))``
   (``CONFIG``: exactly Adam 3e-3 at initialization, factors from 1e-3 to e^1.5, the
   gradient-noise features of ``slow_b1=0.99``). The training distribution
   (``training_families``): MLPs of 1 or 2 hidden layers, widths 32 to 80, ReLU,
   tanh or GELU, each task a random subset of 1,024 examples of the training split of
   scikit-learn's digits or of MNIST-1D trained on stochastic minibatches of 32 to
   128 with label smoothing 0.1 (the meta-loss is the loss above the smoothing floor),
   plus the two-layer regression of ``l2o.tasks.mlp_regression``; 2,000-step
   trajectories in truncations of 100, log meta-loss weighted towards the end of each
   truncation, one family per task batch in turn; the weights are those that score
   best on held-out tasks of the same families at step 2,000 (``l2o.Validation``),
   scored every ``--validate-every`` batches.
2. Evaluation on networks and data no training task had, 3 seeds, 5,000 steps,
   reported at 1,000 and 5,000: the suite's digits MLP 64-128-128-10 (label
   smoothing 0.1), the MNIST-1D MLP 40-100-100-10 and the 1-D convnet on MNIST-1D
   (``suite_tasks/cnn1d.py``; no convolution in the training family). Against
   ``optax.adam`` at every rate of a grid, the best rate chosen per network and
   per budget by the lowest mean train loss, and ``metaoptax.adamw()`` at its
   defaults (evaluated at its averaged weights).
3. The step time of the learned optimizer against ``optax.adam`` on the digits MLP,
   in this process, median of repeats (a whole training step, and the update alone).

The recipe's options: ``--budget-features`` (the ninth attempt: the LSTM and its read-out
read the run's fraction done and its budget, ``ScaledAdamConfig(budget=T)``; each
meta-training task draws its budget log-uniformly in ``[--budget-low, --horizon]`` and its
run ends there, ``l2o.VariedBudget``; evaluated with the budget of each column, 1,000 and
5,000), ``--step-size climb`` (the eighth attempt: the base step size found
per run by MetaOptimize's climb, ``l2o.ClimbedAdamConfig``), ``--learning-rate``, ``--max-log-scale``, ``--min-log-scale``
(the multiplier's range; 0: symmetric), ``--slow-b1`` (the gradient-noise features; 0:
none), ``--examples`` (per task), ``--label-smoothing`` (every training classifier
smoothed, meta-loss above its floor, so that the tasks have a noise floor; -1: only the
GELU family's 0.1, plain meta-loss), ``--loss-weights``, ``--run-weights`` (the sixth
attempt: ``ramp``) and ``--validation-steps``. The first recipe
(``results/l2o_transfer.md``, commit ``3590d31``) is ``--learning-rate 1e-3 --max-log-scale 3
--min-log-scale 0 --slow-b1 0 --examples 512 --label-smoothing -1 --loss-weights uniform
--horizon 300 --unroll 30 --meta-iterations 700 --validation-tasks 8 --validate-every 100``.

    taskset -c 1 python benchmarks/l2o_transfer.py            # about 50 min on 2 busy cores
    python benchmarks/l2o_transfer.py --quick                 # smoke run: tiny budgets
    python benchmarks/l2o_transfer.py --results               # write benchmarks/results/

Writes ``l2o_transfer.md``, ``.json`` and ``.png`` into ``--out`` (by default
``benchmarks/out/``, not tracked by git) and prints their paths.
"""

from __future__ import annotations

import argparse
import functools
import inspect
import json
import os
import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

import _report
import metaoptax
from metaoptax import l2o
from suite_tasks import cnn1d
from suite_tasks import digits
from suite_tasks import mnist1d
from suite_tasks import runner

#: The files under benchmarks/results/ that this script writes (glob patterns;
#: tests/integration/test_repository_shape.py checks every committed result against them).
OUTPUTS = ("l2o_transfer.md", "l2o_transfer.json", "l2o_transfer.png",
           # --learned-only --step-size climb --drop-in, with --meta-gradient pes and with
           # back-propagation (its l2o_transfer_learned_only.md and .json, renamed)
           "l2o_transfer_drop_in_pes.md", "l2o_transfer_drop_in_pes.json",
           "l2o_transfer_drop_in_backprop.md", "l2o_transfer_drop_in_backprop.json",)


ADAM_GRID = (1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2)
SEEDS = 3
STEPS = 5000
BUDGETS = (1000, 5000)
#: ``metaoptax.adamw()``'s weight decay and average horizon (``--drop-in``).
DROP_IN_WEIGHT_DECAY = inspect.signature(metaoptax.adamw).parameters["weight_decay"].default
DROP_IN_AVERAGE = inspect.signature(metaoptax.adamw).parameters["average"].default
OUT = pathlib.Path(__file__).resolve().parent / "out"
RESULTS = pathlib.Path(__file__).resolve().parent / "results"
#: ``--held-out-metric`` in words.
HELD_OUT_METRICS = {"cross_entropy": "loss", "error": "error",
                    "error_times_loss": "error (times the training loss above its floor)"}
#: The recipe's learned optimizer (issue 30): Adam 3e-3 at initialization, annealing range.
CONFIG = l2o.ScaledAdamConfig(learning_rate=3e-3, max_log_scale=1.5, min_log_scale=-6.9,
                              slow_b1=0.99)


def smoothing_floor(label_smoothing, classes=10):
  """The least cross-entropy with smoothed targets: their entropy."""
  high, low = 1 - label_smoothing + label_smoothing / classes, label_smoothing / classes
  return float(-high * np.log(high) - (classes - 1) * low * np.log(low)) if low else 0.0


def excess_loss(family, label_smoothing):
  """``family`` whose ``loss`` (the meta-loss) is the cross-entropy minus its floor."""
  floor = smoothing_floor(label_smoothing)
  return family._replace(  # >= 0 but for round-off, which would make log f NaN
      loss=lambda task, p, loss=family.loss: jnp.maximum(loss(task, p) - floor, 0.0))


def error_times_loss(error, train, floor):
  """A classifier whose ``loss`` is ``error``'s (the fraction of its held-out examples
  misclassified) times ``train``'s cross-entropy on the examples it trains on above
  ``floor``: in log (the meta-loss), the sum of the two, so that a relative change of
  either counts the same, as the target scores both. ``train`` is the same family without
  ``held_out``: its task draws are a prefix of ``error``'s, and it reads only ``x``, ``y``."""
  return error._replace(loss=lambda task, p: error.loss(task, p) * jnp.maximum(
      train.loss(task, p) - floor, 0.0))


def training_families(digits_train, mnist1d_train, examples=512, label_smoothing=None,
                      noise_floor=False, held_out=0, metric="cross_entropy"):
  """The meta-training distribution: ``(name, family)`` pairs (training splits only),
  ``examples`` examples per task (at most the digits split's 1437). With
  ``label_smoothing``, every classifier has it and its meta-loss is the excess over the
  smoothing floor: the minibatch gradients stay noisy near the optimum (a noise floor
  that a constant step does not pass), as on the label-smoothed digits MLP. With
  ``noise_floor``, three of the six classifiers (the digits 64-64-10 tanh and 64-48-48-10
  GELU and the MNIST-1D 40-32-32-10 tanh) give way to wide networks on 256 or 512
  examples and minibatches of 16 or 32 (digits 64-96-96-10 ReLU, 64-128-10 tanh, MNIST-1D
  40-128-128-10 ReLU), which reach their noise floor within the horizon: on them a
  decay of Adam's rate at step 1,000 lowers the loss at step 2,000 2 to 6 times, while
  on the six default classifiers it raises it in five. With ``held_out``, each
  classifier's meta-loss is its loss on that many examples it does not train on (the
  default families only); with ``metric="error"`` (the twelfth attempt) it is the fraction
  of them misclassified, the test error users read (no floor to subtract); with
  ``"error_times_loss"`` that error times the training loss (above its floor)."""
  def mlp(data, sizes, activation, **kwargs):
    make = functools.partial(l2o.tasks.mlp_minibatch, data, sizes, activation,
                             examples=examples, **kwargs)
    if metric != "error_times_loss":
      return make(held_out=held_out, metric=metric)
    return error_times_loss(make(held_out=held_out, metric="error"), make(),
                            smoothing_floor(kwargs["label_smoothing"]))

  smooth = (lambda eps: eps) if label_smoothing is None else (lambda _: label_smoothing)
  classifiers = [
      mlp(digits_train, (64, 32, 10), "relu", batch=64, label_smoothing=smooth(0.0)),
      mlp(digits_train, (64, 64, 10), "tanh", batch=32, label_smoothing=smooth(0.0)),
      mlp(digits_train, (64, 48, 48, 10), "gelu", batch=128, label_smoothing=smooth(0.1)),
      mlp(mnist1d_train, (40, 64, 10), "relu", batch=128, label_smoothing=smooth(0.0)),
      mlp(mnist1d_train, (40, 32, 32, 10), "tanh", batch=64, label_smoothing=smooth(0.0)),
      mlp(mnist1d_train, (40, 80, 80, 10), "relu", batch=128, label_smoothing=smooth(0.0)),
  ]
  if noise_floor:
    # wide networks on few examples and small minibatches: at step 2,000 of Adam 8e-3 they
    # sit at a noise floor that a decay lowers (docs/design-decisions.md)
    classifiers[1] = l2o.tasks.mlp_minibatch(digits_train, (64, 96, 96, 10), "relu", examples=512,
                                             batch=16, label_smoothing=smooth(0.0))
    classifiers[2] = l2o.tasks.mlp_minibatch(digits_train, (64, 128, 10), "tanh", examples=256,
                                             batch=16, label_smoothing=smooth(0.1))
    classifiers[4] = l2o.tasks.mlp_minibatch(mnist1d_train, (40, 128, 128, 10), "relu",
                                             examples=512, batch=32, label_smoothing=smooth(0.0))
  if label_smoothing is not None and metric == "cross_entropy":
    classifiers = [excess_loss(f, label_smoothing) for f in classifiers]
  return classifiers + [l2o.tasks.mlp_regression()]


def loss_weights(kind, unroll):
  """The meta-loss weights of the steps of a truncation: ``uniform`` (the mean loss over
  the truncation) or ``ramp`` (``w_t = 2t / (T + 1)``, mean 1: the end of each
  truncation counts most, which rewards a low loss reached over a fast one). The same
  weights over the truncations of a run (``--run-weights``) count the end of the run
  most: truncation ``k`` of ``K`` weighs ``2k / (K + 1)``."""
  if kind == "uniform":
    return None
  if kind == "ramp":
    return tuple(2.0 * np.arange(1, unroll + 1) / (unroll + 1))
  raise ValueError(f"--loss-weights must be uniform or ramp, got {kind!r}")


def train_network(families, args, config):
  training = l2o.TrainingConfig(tasks_per_step=args.tasks_per_step, horizon=args.horizon,
                                unroll=args.unroll, log_loss=True, mask_diverged_tasks=True,
                                loss_weights=loss_weights(args.loss_weights, args.unroll),
                                truncation_weights=loss_weights(
                                        args.run_weights, args.horizon // args.unroll),
                                pes=None if args.meta_gradient == "backprop" else l2o.pes.PES(
                                        args.pes_pairs, args.pes_sigma, args.pes_perturb or None))
  updates = args.meta_iterations * (args.horizon // args.unroll)
  meta_optimizer = l2o.default_optimizer(args.meta_lr, decay_updates=updates,
                                                max_norm=args.meta_clip)
  validation = l2o.Validation(families, jax.random.key(777), num_tasks=args.validation_tasks,
                              steps=args.validation_steps or args.horizon,
                              every=args.validate_every)
  start = l2o.init_training(
      jax.random.key(args.meta_seed), families, config, training, optimizer=meta_optimizer,
      params=args.init_network and load_network(config, args.init_network))
  result = l2o.train(jax.random.key(args.meta_seed), families, config, training,
                     num_iterations=args.meta_iterations, optimizer=meta_optimizer,
                     init_state=start, log_every=max(1, args.meta_iterations // 50),
                     validation=validation,
                     checkpoint_dir=args.checkpoint_dir,
                     checkpoint_every=1 if args.checkpoint_dir else 0)
  return training, result


def problems():
  return {"digits MLP": digits.make_problem(), "MNIST-1D MLP": mnist1d.make_problem(),
          "MNIST-1D CNN (unseen architecture)": cnn1d.make_problem()}


def methods(network, config, learned_only=False, budgets=BUDGETS):
  adam = runner.Method("Adam grid", "adam", optax.adam, values=ADAM_GRID,
                       names=tuple((f"Adam {lr:g}", f"lr {lr:g}") for lr in ADAM_GRID))
  drop_in = runner.Method("metaoptax.adamw()", "metaoptax", lambda _: metaoptax.adamw(),
                          eval_params=lambda s, p: metaoptax.averaged_params(s),
                          info="defaults, averaged weights")
  learned = runner.Method("learned (scaled_adam)", "l2o",
                          lambda _: config.transformation(network))
  if getattr(config, "average", None) is not None:  # the drop-in's average: evaluate it
    learned = learned._replace(eval_params=lambda s, p: metaoptax.averaged_params(s),
                               info="averaged weights")
  if getattr(config, "budget", None) is not None:  # one run per budget, told its budget
    learned = learned._replace(
        values=tuple(float(b) for b in budgets),
        prepare=lambda state, budget: state._replace(budget=budget.astype(state.budget.dtype)),
        names=tuple((f"learned (scaled_adam, budget {b})", f"budget {b}") for b in budgets))
  return [learned] if learned_only else [adam, drop_in, learned]


def at_step(log, step):
  return int(np.searchsorted(log.steps, step))


def mean_std(x, digits_=3):
  x = np.asarray(x, float)
  finite = np.isfinite(x)
  if not finite.any():
    return f"diverged ({x.size} of {x.size})"
  text = f"{x[finite].mean():.{digits_}g} ± {x[finite].std():.1g}"
  return text if finite.all() else text + f" ({int(np.sum(~finite))} non-finite)"


def best_adam(adam_logs, step):
  means = np.array([np.mean(log.train_loss[:, at_step(log, step)]) for log in adam_logs])
  return adam_logs[int(np.argmin(np.where(np.isfinite(means), means, np.inf)))]


def learned_log(logs, budget):
  """The learned optimizer's log for ``budget``: its only one, or, budget-aware, the run
  told that budget."""
  learned = [log for log in logs if log.method.family == "l2o"]
  if len(learned) == 1:
    return learned[0]
  return next(log for log in learned if log.method.info == f"budget {budget}")


def evaluate(network, config, args, progress, budgets=BUDGETS):
  out = {}
  for name, problem in problems().items():
    logs = []
    for method in methods(network, config, args.learned_only, budgets):
      logs += runner.train(problem, method, steps=args.steps, seeds=SEEDS, chunk=args.chunk,
                           progress=progress)
    out[name] = (problem, logs)
  return out


def step_times(network, config, repeats, steps=200):
  """Median seconds per step of ``optax.adam`` and the learned optimizer on the digits MLP,
  ``{"train step": (adam, learned), "update": (adam, learned)}`` (alternating repeats)."""
  problem = digits.make_problem()
  params = problem.init(jax.random.key(0))
  keys = jax.random.split(jax.random.key(1), steps)
  grads = jax.grad(problem.loss)(params, problem.batch(keys[0]))

  def runs(opt):
    @jax.jit
    def train(p, s):
      def body(c, k):
        p, s = c
        u, s = opt.update(jax.grad(problem.loss)(p, problem.batch(k)), s, p)
        return (optax.apply_updates(p, u), s), None
      return jax.lax.scan(body, (p, s), keys)[0]

    @jax.jit
    def update(p, s):
      def body(c, _):
        p, s = c
        u, s = opt.update(grads, s, p)
        return (optax.apply_updates(p, u), s), None
      return jax.lax.scan(body, (p, s), None, length=steps)[0]

    return {"train step": train, "update": update}, opt.init(params)

  optimizers = {"adam": runs(optax.adam(1e-3)), "learned": runs(config.transformation(network))}
  times = {kind: {name: [] for name in optimizers} for kind in ("train step", "update")}
  for name, (fns, state) in optimizers.items():
    for fn in fns.values():
      jax.block_until_ready(fn(params, state))  # compile
  for _ in range(repeats):
    for kind in times:
      for name, (fns, state) in optimizers.items():
        start = time.perf_counter()
        jax.block_until_ready(fns[kind](params, state))
        times[kind][name].append((time.perf_counter() - start) / steps)
  return {kind: (float(np.median(t["adam"])), float(np.median(t["learned"])))
          for kind, t in times.items()}


def summary(results, budgets):
  """Per network and budget: the best Adam, adamw() and the learned optimizer's numbers (if
  it ran)."""
  rows = {}
  for name, (problem, logs) in results.items():
    adam = [log for log in logs if log.method.family == "adam"]
    others = [log for log in logs if log.method.family not in ("adam", "l2o")]
    for budget in budgets:
      best = best_adam(adam, budget)
      row = {}
      for label, log in [(f"best Adam ({best.method.info})", best)] + [
          (log.method.name, log) for log in others] + [
          ("learned (scaled_adam)", learned_log(logs, budget))
          for _ in range(any(log.method.family == "l2o" for log in logs))]:
        i = at_step(log, budget)
        row[label] = {"train_loss": (log.train_loss[:, i] - problem.train_loss_floor).tolist(),
                      "test": log.test[:, i].tolist(),
                      "non_finite": int(np.sum(~np.isfinite(log.train_loss[:, -1])))}
      rows[(name, budget)] = row
  return rows


def target(rows, budgets):
  """Per network: whether the learned optimizer's mean train loss is at most, and mean test
  accuracy at least, the best Adam's at every budget."""
  verdict = {}
  for (name, budget), row in rows.items():
    best = next(v for k, v in row.items() if k.startswith("best Adam"))
    mine = row["learned (scaled_adam)"]
    ok = (np.mean(mine["train_loss"]) <= np.mean(best["train_loss"])
          and np.mean(mine["test"]) >= np.mean(best["test"]))
    verdict[name] = verdict.get(name, True) and bool(ok)
  return verdict


def tables(results, rows, verdict, budgets, training, result, args, times, families, config):
  lines = ["Train loss (full training split; digits: minus the label-smoothing floor) and test "
           f"accuracy, mean ± std over {SEEDS} seeds. Best Adam: the rate of the grid "
           f"{', '.join(f'{lr:g}' for lr in ADAM_GRID)} with the lowest mean train loss at that "
           "budget, per network. Non-finite: runs whose final train loss is not finite.", ""]
  for name in results:
    lines += [f"**{name}** (learned ≥ best Adam on train loss and test accuracy at every "
              f"budget: {'yes' if verdict[name] else 'no'})", "",
              "| method | steps | train loss | test accuracy | non-finite |",
              "|---|---|---|---|---|"]
    for budget in budgets:
      for label, v in rows[(name, budget)].items():
        lines.append(f"| {label} | {budget} | {mean_std(v['train_loss'])} | "
                     f"{mean_std(v['test'], 4)} | {v['non_finite']} |")
    lines.append("")
  met = sum(verdict.values())
  non_finite = sum(rows[(n, budgets[-1])]["learned (scaled_adam)"]["non_finite"] for n in results)
  skipped = "n/a"
  lines += [f"Target (learned ≥ per-network tuned Adam at both budgets on 2 of 3 networks): "
            f"{met} of {len(results)} networks; non-finite learned runs: {non_finite} of "
            f"{SEEDS * len(results)}.{'' if skipped == 'n/a' else ''}", ""]
  adam_t, learned_t = times["train step"]
  adam_u, learned_u = times["update"]
  lines += ["Step time on the digits MLP (this process, median of "
            f"{args.time_repeats} repeats of 200 steps in a jitted scan):", "",
            "| | optax.adam | scaled_adam | ratio |", "|---|---|---|---|",
            f"| training step (gradient + update) | {adam_t * 1e6:.1f} µs | "
            f"{learned_t * 1e6:.1f} µs | {learned_t / adam_t:.2f} |",
            f"| update alone | {adam_u * 1e6:.1f} µs | {learned_u * 1e6:.1f} µs | "
            f"{learned_u / adam_u:.2f} |", ""]
  scores = result.validation_scores
  lines += [f"Meta-training: {args.meta_iterations} task batches of {training.tasks_per_step} "
            f"tasks, horizon {training.horizon} in truncations of {training.unroll} "
            f"({result.losses.size} meta-updates), log meta-loss, Adam {args.meta_lr:g} with "
            f"cosine decay; {recipe(config, args)}; families in turn: {', '.join(f.name for f in families)}. "
            f"{result.seconds:.0f} s ({result.seconds / 60:.1f} min, compilation included) on "
            f"{os.cpu_count()} CPU cores shared with other jobs; skipped meta-updates "
            f"{result.skipped_updates}, diverged tasks {result.diverged_tasks}. Held-out score "
            "(geometric mean over the families of the median loss at step "
            f"{training.horizon}): the start {scores[0, 1]:.4g}, selected "
            f"{np.min(scores[:, 1]):.4g} at batch {result.best_iteration}, last "
            f"{scores[-1, 1]:.4g}.", ""]
  return lines


def climbed(scaling, drop_in=False):
  """``l2o.ClimbedAdamConfig`` around ``scaling``; with ``drop_in`` (``--drop-in``) with
  ``metaoptax.adamw()``'s weight decay and average: at initialization it is then
  ``metaoptax.adamw(climb_memory=None, meta_step_size=1e-3)``, the drop-in of issue 30's
  thirteenth attempt."""
  if drop_in:
    return l2o.ClimbedAdamConfig(scaling, weight_decay=DROP_IN_WEIGHT_DECAY,
                                 average=DROP_IN_AVERAGE)
  return l2o.ClimbedAdamConfig(scaling, weight_decay=0.0, average=None)


def scaling_of(config):
  """The learned multipliers' configuration (a ``ScaledAdamConfig``) of either variant."""
  return getattr(config, "scaling", config)


def recipe(config, args):
  """The learned optimizer's settings and the meta-training data, in words."""
  climbed = isinstance(config, l2o.ClimbedAdamConfig)
  scaled, config = config, scaling_of(config)
  low, high = config.log_scale_bounds
  drop_in = climbed and scaled.average is not None
  return (("base step size found by MetaOptimize's climb (l2o.ClimbedAdamConfig, nominal "
           f"rate {config.learning_rate:g} in feature 4"
           + (f"; weight decay {scaled.weight_decay:g} and the average of the weights "
              f"({scaled.average:g} of the steps), evaluated: metaoptax.adamw(climb_memory="
              "None, meta_step_size=1e-3) at initialization" if drop_in else "")
           + ")" if climbed else
           f"base step size {config.learning_rate:g}"
           + (" decaying as a cosine over the budget" if getattr(config, "cosine_decay", False)
              else "")) + f", multiplier in [e^{low:g}, e^{high:g}], "
          + (f"noise features (slow moment {config.slow_b1:g})" if config.slow_b1 else
             "no noise features")
          + ("" if getattr(config, "budget", None) is None else
             f", budget features (each task's budget log-uniform in [{min(args.budget_low, args.horizon)}, "
             f"{args.horizon}] steps, its run ending there; evaluated told the budget)")
          + f", {args.examples} examples per task, {args.loss_weights} meta-loss weights"
          + ("" if args.run_weights == "uniform" else
             f" within each truncation and {args.run_weights} over the run's truncations")
          + ("" if args.meta_gradient == "backprop" else
             f", PES meta-gradient ({args.pes_pairs} antithetic pairs per task, sigma "
             f"{args.pes_sigma:g}, perturbing {args.pes_perturb or 'every leaf'})")
          + ("" if args.meta_clip == 1.0 else f", meta-gradient clipped at norm {args.meta_clip:g}")
          + (", training classifiers with noise floors (--families floor)"
             if args.families == "floor" else "")
          + (f", meta-loss the {HELD_OUT_METRICS[args.held_out_metric]} on {args.held_out} "
             "held-out examples per training classifier" if args.held_out else "")
          + ("" if args.label_smoothing is None else
             f", label smoothing {args.label_smoothing:g} on every training classifier"
             + (" (meta-loss above its floor)" if args.held_out_metric == "cross_entropy"
                else "")))


def save_network(network, path):
  np.savez(path, **{"/".join(str(k.key) for k in p): np.asarray(leaf)
                    for p, leaf in jax.tree_util.tree_leaves_with_path(network)})


def load_network(config, path):
  """The weights saved by :func:`save_network` at ``path``."""
  saved = np.load(path)
  return jax.tree_util.tree_map_with_path(
      lambda p, leaf: jnp.asarray(saved["/".join(str(k.key) for k in p)], leaf.dtype),
      config.init_network(jax.random.key(0)))


def learned_only_report(results, budgets, result, training, args, config, times, commit):
  lines = ["# The learned optimizer alone on unseen networks (--learned-only)", "",
           f"measured at commit `{commit}`, jax {jax.__version__}; {recipe(config, args)}, "
           f"{args.meta_iterations} task batches (meta seed {args.meta_seed}), horizon "
           f"{training.horizon} / unroll {training.unroll}; meta-training {result.seconds:.0f} s; "
           f"selected batch {result.best_iteration}; held-out scores "
           + ", ".join(f"{int(i)}: {v:.4g}" for i, v in result.validation_scores) + ".", "",
           "| network | steps | train loss | test accuracy | non-finite |", "|---|---|---|---|---|"]
  for name, (problem, logs) in results.items():
    for budget in budgets:
      log = learned_log(logs, budget)
      i = at_step(log, budget)
      lines.append(f"| {name} | {budget} | {mean_std(log.train_loss[:, i] - problem.train_loss_floor)}"
                   f" | {mean_std(log.test[:, i], 4)} | "
                   f"{int(np.sum(~np.isfinite(log.train_loss[:, -1])))} |")
  lines += ["", f"Step time ratio (training step / update alone): "
            f"{times['train step'][1] / times['train step'][0]:.2f} / "
            f"{times['update'][1] / times['update'][0]:.2f}"]
  args.out.mkdir(parents=True, exist_ok=True)
  _report.write_table(lines, str(args.out / "l2o_transfer_learned_only.md"))
  record = {"commit": commit, "meta_seed": args.meta_seed,
            "meta_training_seconds": result.seconds, "best_iteration": result.best_iteration,
            "validation_scores": result.validation_scores.tolist(),
            "meta_losses": result.losses.tolist(), "skipped_updates": result.skipped_updates,
            "diverged_tasks": result.diverged_tasks, "step_times": times,
            "rows": {f"{name} @ {budget}": {
                "train_loss": (log.train_loss[:, at_step(log, budget)]
                               - problem.train_loss_floor).tolist(),
                "test": log.test[:, at_step(log, budget)].tolist(),
                "non_finite": int(np.sum(~np.isfinite(log.train_loss[:, -1])))}
                for name, (problem, logs) in results.items() for budget in budgets
                for log in [learned_log(logs, budget)]}}
  if getattr(config, "budget", None) is not None:
    record["schedule"] = schedule(result.params, config, budgets)
    lines += ["", "Learned rates (Adam's base rate times the multipliers; min / median / max "
              "over the tensors) on the digits MLP, optimizee seed 0, told the budget:", "",
              "| budget | " + " | ".join(f"step {s}" for s in record["schedule"]["steps"])
              + " |", "|---" * (1 + len(record["schedule"]["steps"])) + "|"]
    for budget, rates in record["schedule"]["rates"].items():
      lines.append(f"| {budget} | " + " | ".join(
          "—" if r is None else f"{r[0]:.2g} / {r[1]:.2g} / {r[2]:.2g}" for r in rates) + " |")
    _report.write_table(lines, str(args.out / "l2o_transfer_learned_only.md"))
  (args.out / "l2o_transfer_learned_only.json").write_text(json.dumps(record, indent=1))
  save_network(result.params, args.out / "l2o_transfer_learned_only_network.npz")


def schedule(network, config, budgets, fractions=(0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0)):
  """The budget-aware optimizer's rates on the digits MLP (optimizee seed 0) at fractions
  of each budget: ``{"steps": fractions, "rates": {budget: [(min, median, max) over the
  tensors of eta_t e^s at step round(f T)]}}``, with the cosine's eta_t under
  ``cosine_decay``."""
  problem = digits.make_problem()
  params = problem.init(jax.random.key(0))
  out = {"steps": [f"{f:g} T" for f in fractions], "rates": {}}
  for budget in budgets:
    @jax.jit
    def run(p):
      def body(carry, key):
        p, s = carry
        rate = l2o.learned_adam.base_step_size(config, s)  # eta, or the cosine's eta_t
        p, s, info = config.step(network, s, p, jax.grad(problem.loss)(p, problem.batch(key)))
        return (p, s), rate * jnp.exp(info["log_scale"])
      return jax.lax.scan(body, (p, config._replace(budget=budget).init_state(p)),
                          jax.random.split(jax.random.key(5), budget))[1]

    rates = np.asarray(run(params))
    out["rates"][str(budget)] = [
        [float(np.min(r)), float(np.median(r)), float(np.max(r))]
        for r in (rates[max(int(round(f * budget)), 1) - 1] for f in fractions)]
  return out


def plot(results, path):
  plt = _report.pyplot()
  fig, axes = plt.subplots(2, len(results), figsize=(5 * len(results), 7.5))
  for col, (name, (problem, logs)) in enumerate(results.items()):
    for log in logs:
      adam = log.method.family == "adam"
      style = dict(color="0.6", lw=0.8, ls=":") if adam else dict(lw=1.6)
      axes[0, col].plot(log.steps, (log.train_loss - problem.train_loss_floor).mean(0),
                        label=log.method.name, **style)
      axes[1, col].plot(log.steps, log.test.mean(0), label=log.method.name, **style)
    axes[0, col].set(yscale="log", title=name, xlabel="step", ylabel="train loss")
    axes[1, col].set(xlabel="step", ylabel="test accuracy", ylim=(0.5, 1.0))
  axes[0, 0].legend(fontsize=7)
  _report.save_figure(fig, path)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--steps", type=int, default=STEPS)
  parser.add_argument("--chunk", type=int, default=250)
  parser.add_argument("--meta-iterations", type=int, default=21)
  parser.add_argument("--tasks-per-step", type=int, default=4)
  parser.add_argument("--horizon", type=int, default=2000)
  parser.add_argument("--unroll", type=int, default=100)
  parser.add_argument("--meta-lr", type=float, default=1e-3)
  parser.add_argument("--meta-clip", type=float, default=1.0,
                      help="global norm the meta-gradient is clipped to (after --run-weights)")
  parser.add_argument("--meta-seed", type=int, default=0,
                      help="seed of the network's initialization and of the task batches")
  parser.add_argument("--step-size", default="fixed", choices=("fixed", "climb"),
                      help="the base step size: --learning-rate (l2o.ScaledAdamConfig), or found per "
                           "run by MetaOptimize's climb under the learned multipliers (the "
                           "eighth attempt, l2o.ClimbedAdamConfig)")
  parser.add_argument("--drop-in", action="store_true",
                      help=f"with --step-size climb: the drop-in's weight decay "
                           f"({DROP_IN_WEIGHT_DECAY:g}) and average of the weights "
                           f"({DROP_IN_AVERAGE:g}), evaluated at the averaged weights: "
                           "metaoptax.adamw(climb_memory=None, meta_step_size=1e-3) at "
                           "initialization (the thirteenth attempt)")
  parser.add_argument("--budget-features", action="store_true",
                      help="the ninth attempt: a budget-aware optimizer (ScaledAdamConfig.budget) "
                           "meta-trained on runs of budgets drawn in [--budget-low, --horizon] "
                           "that end at their budget (l2o.VariedBudget)")
  parser.add_argument("--cosine-decay", action="store_true",
                      help="the tenth attempt (with --budget-features): the base step size "
                           "decays as a cosine over the budget (ScaledAdamConfig.cosine_decay), "
                           "so that the network starts as Adam with the cosine of its budget")
  parser.add_argument("--held-out", type=int, default=0,
                      help="the eleventh attempt: each training classifier's meta-loss (and "
                           "the weights' selection) is its loss on this many examples it does "
                           "not train on (0: its training set)")
  parser.add_argument("--held-out-metric", default="cross_entropy",
                      choices=("cross_entropy", "error", "error_times_loss"),
                      help="the twelfth attempt (with --held-out and PES): the held-out "
                           "meta-loss is the fraction misclassified (error), or that times "
                           "the training loss above its floor (error_times_loss), not the "
                           "cross-entropy")
  parser.add_argument("--budget-low", type=int, default=500,
                      help="the least budget of a meta-training task (--budget-features)")
  parser.add_argument("--learning-rate", type=float, default=CONFIG.learning_rate,
                      help="the base Adam step size of the learned optimizer")
  parser.add_argument("--min-log-scale", type=float, default=CONFIG.min_log_scale,
                      help="lower bound of the log-multiplier (0: -max_log_scale)")
  parser.add_argument("--max-log-scale", type=float, default=CONFIG.max_log_scale)
  parser.add_argument("--slow-b1", type=float, default=CONFIG.slow_b1,
                      help="decay of the slow moment of the noise features (0: none)")
  parser.add_argument("--examples", type=int, default=1024,
                      help="examples per meta-training task")
  parser.add_argument("--label-smoothing", type=float, default=0.1,
                      help="label smoothing of every training classifier, meta-loss above its "
                           "floor (-1: only the GELU family's 0.1, plain meta-loss)")
  parser.add_argument("--families", default="default", choices=("default", "floor"),
                      help="the training classifiers: floor swaps three for wide networks that "
                           "reach their noise floor within the horizon (training_families)")
  parser.add_argument("--meta-only", action="store_true",
                      help="meta-train, print the held-out scores and save the network; no "
                           "evaluation")
  parser.add_argument("--loss-weights", default="ramp", choices=("uniform", "ramp"),
                      help="meta-loss weights within a truncation")
  parser.add_argument("--run-weights", default="uniform", choices=("uniform", "ramp"),
                      help="meta-loss weights of the truncations of a run (ramp: the end of "
                           "the run counts most, TrainingConfig.truncation_weights)")
  parser.add_argument("--meta-gradient", default="backprop", choices=("backprop", "pes"),
                      help="back-propagation through each truncation, or persistent evolution "
                           "strategies across the run's truncations (TrainingConfig.pes)")
  parser.add_argument("--pes-pairs", type=int, default=8,
                      help="antithetic pairs of particles per task (--meta-gradient pes)")
  parser.add_argument("--pes-sigma", type=float, default=0.01,
                      help="standard deviation of the PES perturbations")
  parser.add_argument("--pes-perturb", default="log_scale",
                      help="PES perturbs (and trains) the network's leaves whose path contains "
                           "this ('log_scale': the read-out; '': every leaf)")
  parser.add_argument("--init-network", type=pathlib.Path, default=None,
                      help="start meta-training from these weights (a run's "
                           "l2o_transfer_learned_only_network.npz) instead of a fresh network")
  parser.add_argument("--validation-steps", type=int, default=0,
                      help="optimizee steps of the held-out scores (default: the horizon)")
  parser.add_argument("--validation-tasks", type=int, default=4)
  parser.add_argument("--validate-every", type=int, default=7)
  parser.add_argument("--time-repeats", type=int, default=11)
  parser.add_argument("--checkpoint-dir", type=pathlib.Path, default=None,
                      help="keep the meta-training state of every task batch there (orbax; "
                           "for a later selection); a rerun resumes from it")
  parser.add_argument("--out", type=pathlib.Path, default=OUT,
                      help="output folder (default: benchmarks/out/, git-ignored)")
  parser.add_argument("--results", action="store_true",
                      help="write into benchmarks/results/ instead of --out")
  parser.add_argument("--quick", action="store_true", help="smoke run: tiny budgets")
  parser.add_argument("--learned-only", action="store_true",
                      help="evaluate only the learned optimizer (the baselines do not depend "
                      "on the meta-training settings: compare with a full run's)")
  args = parser.parse_args(argv)
  if args.drop_in and args.step_size != "climb":
    parser.error("--drop-in is metaoptax.adamw()'s decay and average around the climb: it "
                 "needs --step-size climb")
  if args.cosine_decay and not args.budget_features:
    parser.error("--cosine-decay decays over the budget: it needs --budget-features")
  if args.held_out_metric != "cross_entropy" and not (args.held_out
                                                      and args.meta_gradient == "pes"):
    parser.error(f"--held-out-metric {args.held_out_metric} scores the held-out error, which "
                 "has no gradient: it needs --held-out and --meta-gradient pes")
  args.min_log_scale = args.min_log_scale or None  # 0: symmetric
  args.slow_b1 = args.slow_b1 or None  # 0: no noise features
  args.label_smoothing = None if args.label_smoothing < 0 else args.label_smoothing
  if args.quick:
    (args.steps, args.chunk, args.meta_iterations, args.horizon, args.unroll,
     args.validate_every, args.validation_tasks, args.time_repeats) = 200, 100, 7, 20, 10, 7, 2, 2
  budgets = BUDGETS if not args.quick else (100, 200)
  out = RESULTS if args.results else args.out
  commit = _report.git_commit(short=True)
  start = time.perf_counter()
  x_digits, y_digits, _, _ = digits.load_split()
  x_m1d, y_m1d, _, _ = mnist1d.load_data()
  families = training_families((x_digits, y_digits), (x_m1d, y_m1d), args.examples,
                               args.label_smoothing, args.families == "floor", args.held_out,
                               args.held_out_metric)
  config = CONFIG._replace(learning_rate=args.learning_rate, min_log_scale=args.min_log_scale,
                           max_log_scale=args.max_log_scale, slow_b1=args.slow_b1)
  trained = config
  if args.step_size == "climb":
    config = trained = climbed(config, args.drop_in)
  elif args.budget_features:
    config = config._replace(budget=float(args.horizon), cosine_decay=args.cosine_decay)
    trained = l2o.VariedBudget(config, float(min(args.budget_low, args.horizon)),
                               float(args.horizon))
  training, result = train_network(families, args, trained)
  network = result.params
  if args.meta_only:
    args.out.mkdir(parents=True, exist_ok=True)
    save_network(network, args.out / "l2o_transfer_network.npz")
    print(f"meta-training {result.seconds:.0f} s; selected batch {result.best_iteration}; "
          "held-out scores " + ", ".join(f"{int(i)}: {v:.4g}" for i, v in result.validation_scores))
    return
  results = evaluate(network, config, args, _report.progress_bars(), budgets)
  times = step_times(network, config, args.time_repeats)
  if args.learned_only:
    return learned_only_report(results, budgets, result, training, args, config, times, commit)
  rows = summary(results, budgets)
  verdict = target(rows, budgets)
  seconds = time.perf_counter() - start
  out.mkdir(parents=True, exist_ok=True)
  header = ["# A learned optimizer on networks it has never seen", "",
            f"measured at commit `{commit}`, jax {jax.__version__}"
            + (" (--quick)" if args.quick else "") + f"; total {seconds / 60:.1f} min", ""]
  _report.write_table(header + tables(results, rows, verdict, budgets, training, result, args,
                                      times, families, config), str(out / "l2o_transfer.md"))
  record = {"commit": commit, "seconds": seconds, "meta_training_seconds": result.seconds,
            "best_iteration": result.best_iteration,
            "validation_scores": result.validation_scores.tolist(),
            "step_times": times, "target": verdict,
            "rows": {f"{name} @ {budget}": row for (name, budget), row in rows.items()}}
  (out / "l2o_transfer.json").write_text(json.dumps(record, indent=1))
  plot(results, out / "l2o_transfer.png")
  save_network(network, args.out / "l2o_transfer_network.npz" if not args.results else
               OUT / "l2o_transfer_network.npz")
  print(f"wrote {out / 'l2o_transfer.md'}, .json, .png")


if __name__ == "__main__":
  main()
