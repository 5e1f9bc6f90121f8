r"""Why meta-training seeds differ, and two recipes that choose the final weights otherwise.

Reads the meta-training states that ``l2o_transfer.py --checkpoint-dir DIR`` keeps after
every task batch (one run per meta-training seed, the default recipe unchanged), and for
all the seeds together (one compiled program per network):

1. **Diagnosis.** The learned rate :math:`\eta e^{s_t^{(i)}}` of every tensor over a
   5,000-step run (optimizee seed 0) of each of the three evaluation networks, for the
   weights the default recipe selects (``--diagnose-batch``: batch 7 in every run so far),
   beside the tuned Adam rates of ``l2o_transfer.md``.
2. **Attempt "validation family".** The default recipe scores the weights every 7 batches
   on held-out tasks *of the training families* at step 2,000, the horizon of
   meta-training, and keeps the best (batch 7 in every run). Here the same kept weights
   (``--candidates``: batches 7, 14 and 21) and the average below are scored instead on a
   *validation family*: networks and data splits that neither meta-training nor the
   evaluation has, run to the evaluation's budgets:

   * the digits MLP 64-256-10 (one wide hidden layer; label smoothing 0.1, minibatches of
     64) trained on 80 % of the digits **training** split, accuracy on the other 20 %;
   * the MNIST-1D MLP 40-64-64-64-10 (three hidden layers; minibatches of 128) on 80 % of
     the MNIST-1D training split, accuracy on the other 20 %.

   Neither test split is loaded. Each candidate runs ``--val-seeds`` seeds for 5,000 steps;
   at 1,000 and 5,000 steps it is compared, as the target compares, with ``optax.adam`` at
   the best rate of the grid of ``l2o_transfer.py`` for that network and budget (lowest
   mean train loss): one *cell* won when the mean train loss is at most the tuned Adam's,
   one when the mean validation accuracy is at least its. The score is the number of cells
   won (of 8), ties broken by the mean over the 4 (network, budget) pairs of
   :math:`\log(\text{train loss} / \text{Adam's})` (lower is better), then by the
   earlier batch: checkpoint selection by early stopping on a validation set (Prechelt
   1998, "Early stopping - but when?"), with a validation set of *tasks* that differs from
   the training distribution as the evaluation networks do.
3. **Attempt "average".** The task batches cycle through the 7 training families, so the
   weights after batch :math:`k` lean towards the family trained last. The mean of the
   network weights of batches 8 to 21 (two whole cycles, after the first) is
   Polyak-Ruppert averaging (Polyak and Juditsky 1992) of the meta-parameters along one
   run, which cancels the per-family drift; the averaged states share the run's
   initialization, so the average stays in one basin (unlike an average of the networks
   of different seeds, which differ by a permutation of the hidden units).

The recipes' weights are then evaluated on the three evaluation networks as in
``l2o_transfer.py --learned-only`` (3 seeds, 5,000 steps, reported at 1,000 and 5,000)
against the baselines of ``results/l2o_transfer.md``, beside the default recipe's
committed tables (``l2o_transfer_smoothed*.md``: the same weights, batch 7).

    python benchmarks/l2o_transfer.py --learned-only --meta-seed K --checkpoint-dir \\
        benchmarks/out/ckpt_seedK/meta --out benchmarks/out/ckpt_seedK        # K = 0, 1, 2
    python benchmarks/l2o_transfer_select.py                                  # all seeds
    python benchmarks/l2o_transfer_select.py --quick --meta-seeds 0 --checkpoint-dir DIR

Writes ``l2o_transfer_select_seed<K>.md`` and ``.json`` per seed and
``l2o_transfer_select.md`` into ``--out`` (default ``benchmarks/out/``, git-ignored;
``--results``: ``benchmarks/results/``).
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
from metaoptax import checkpoint
from metaoptax import l2o
from suite_tasks import digits
from suite_tasks import mnist1d
from suite_tasks import models
from suite_tasks import runner
from suite_tasks.problem import Problem

OUT = l2o_transfer.OUT
RESULTS = l2o_transfer.RESULTS
BUDGETS = l2o_transfer.BUDGETS
DIAGNOSE_AT = (10, 100, 300, 1000, 2000, 3000, 5000)
#: Tuned Adam rates of ``results/l2o_transfer.md`` (best train loss, per budget).
TUNED_ADAM = {"digits MLP": (1e-2, 3e-3), "MNIST-1D MLP": (3e-3, 3e-3),
              "MNIST-1D CNN (unseen architecture)": (1e-2, 1e-2)}
#: The baselines of ``results/l2o_transfer.md`` (commit 3590d31): best Adam's mean train
#: loss and test accuracy per network and budget.
BASELINE = {("digits MLP", 1000): (0.00234, 0.9806), ("digits MLP", 5000): (0.00074, 0.9824),
            ("MNIST-1D MLP", 1000): (0.133, 0.611), ("MNIST-1D MLP", 5000): (0.000505, 0.621),
            ("MNIST-1D CNN (unseen architecture)", 1000): (0.0108, 0.8957),
            ("MNIST-1D CNN (unseen architecture)", 5000): (1.64e-05, 0.8953)}


#: The default recipe's weights (batch 7 of every run), committed tables
#: ``l2o_transfer_smoothed.md`` (seed 0), ``_seed1.md``, ``_seed2.md``: mean train loss and test
#: accuracy per network and budget.
DEFAULT = {
    0: {("digits MLP", 1000): (0.00137, 0.9806), ("digits MLP", 5000): (0.000406, 0.9824),
        ("MNIST-1D MLP", 1000): (0.087, 0.636), ("MNIST-1D MLP", 5000): (0.000183, 0.672),
        ("MNIST-1D CNN (unseen architecture)", 1000): (0.001, 0.885),
        ("MNIST-1D CNN (unseen architecture)", 5000): (9.28e-05, 0.8757)},
    1: {("digits MLP", 1000): (0.00145, 0.9796), ("digits MLP", 5000): (0.000863, 0.9843),
        ("MNIST-1D MLP", 1000): (0.0985, 0.6377), ("MNIST-1D MLP", 5000): (7.33e-05, 0.6687),
        ("MNIST-1D CNN (unseen architecture)", 1000): (0.0339, 0.8843),
        ("MNIST-1D CNN (unseen architecture)", 5000): (1.73e-05, 0.8977)},
    2: {("digits MLP", 1000): (0.00207, 0.9787), ("digits MLP", 5000): (0.0014, 0.987),
        ("MNIST-1D MLP", 1000): (0.051, 0.6437), ("MNIST-1D MLP", 5000): (0.000127, 0.6647),
        ("MNIST-1D CNN (unseen architecture)", 1000): (0.00121, 0.8787),
        ("MNIST-1D CNN (unseen architecture)", 5000): (6.52e-05, 0.875)}}


def meta_optimizer(args):
  return l2o.default_optimizer(args.meta_lr,
                               decay_updates=args.meta_iterations * (args.horizon // args.unroll))


def load_networks(args, seed, batches):
  """``{batch: network weights}`` of the kept states of run ``seed`` (0: the initialization)."""
  # the state's structure: any of the training families gives it (the regression needs no data)
  like = l2o.init_training(jax.random.key(seed), l2o.tasks.mlp_regression(),
                           l2o_transfer.CONFIG, optimizer=meta_optimizer(args))
  if args.networks:  # the selected weights that l2o_transfer.py saves, as one "batch"
    saved = np.load(args.networks.format(seed=seed))
    net = jax.tree_util.tree_map_with_path(
        lambda path, leaf: jnp.asarray(saved["/".join(str(k.key) for k in path)], leaf.dtype),
        like.params)
    return {i: net for i in batches}
  folder = pathlib.Path(args.checkpoint_dir.format(seed=seed)).resolve()
  return {i: like.params if i == 0 else checkpoint.restore(folder / str(i), like=like).params
          for i in batches}


def average(networks, batches):
  return jax.tree.map(lambda *x: sum(x) / len(x), *[networks[i] for i in batches])


def stack(networks):
  return jax.tree.map(lambda *x: jnp.stack(x), *networks)


def rate_traces(stacked, problem, steps):
  """``(networks, steps, tensors)`` learned rates of one run (seed 0) of ``problem`` per
  network of ``stacked`` (one compiled program for all)."""
  params = problem.init(jax.random.key(0))

  @jax.jit
  @jax.vmap
  def run(network):
    opt = l2o_transfer.CONFIG.transformation(network)

    def body(carry, key):
      p, s = carry
      u, s = opt.update(jax.grad(problem.loss)(p, problem.batch(key)), s, p)
      return (optax.apply_updates(p, u), s), s.log_scale
    return jax.lax.scan(body, (params, opt.init(params)), jax.random.split(jax.random.key(5), steps))[1]

  return l2o_transfer.CONFIG.learning_rate * np.exp(np.asarray(run(stacked)))


def validation_problems():
  """The validation family (module docstring): training splits only, 20 % held out."""
  def problem(name, x, y, sizes, batch, smoothing):
    x_train, y_train, x_val, y_val = models.split_validation(x, y, 0.2, seed=1)
    loss, draw, evaluate = models.classifier_problem_fns(
        models.mlp, *(jnp.asarray(a) for a in (x_train, y_train, x_val, y_val)),
        batch_size=batch, label_smoothing=smoothing)
    return Problem(name=name, init=lambda k: models.init_mlp(k, sizes), loss=loss, batch=draw,
                   evaluate=evaluate, test_name="validation accuracy", higher_is_better=True,
                   train_loss_floor=models.smoothed_label_floor(smoothing) if smoothing else 0.0,
                   blocks="per_leaf", block_names=())
  x_d, y_d, _, _ = digits.load_split()
  x_m, y_m, _, _ = mnist1d.load_data()
  return {"digits MLP 64-256-10": problem("val_digits", x_d, y_d, (64, 256, 10), 64, 0.1),
          "MNIST-1D MLP 40-64-64-64-10": problem("val_m1d", x_m, y_m, (40, 64, 64, 64, 10), 128, 0.0)}


def candidates_method(candidates):
  """One ``runner.Method`` whose values index the stacked ``candidates`` (one compile)."""
  stacked = stack(list(candidates.values()))
  pick = lambda h: jax.tree.map(lambda x: x[jnp.asarray(h, jnp.int32)], stacked)
  return runner.Method("candidates", "l2o",
                       lambda h: l2o_transfer.CONFIG.transformation(pick(h)),
                       values=tuple(float(i) for i in range(len(candidates))),
                       names=tuple((str(name), "") for name in candidates))


def cell_stats(problem, log, budget):
  i = l2o_transfer.at_step(log, budget)
  return (float(np.mean(log.train_loss[:, i] - problem.train_loss_floor)),
          float(np.mean(log.test[:, i])))


def validate(candidates, args, progress):
  """Per candidate: ``[cells won of 8, mean log train-loss ratio]``, and the cells."""
  scores = {name: [0, 0.0] for name in candidates}
  cells = {}
  for vname, problem in validation_problems().items():
    adam_logs = runner.train(problem, l2o_transfer.methods(None, None)[0], steps=args.steps,
                             seeds=args.val_seeds, chunk=args.chunk, progress=progress)
    logs = runner.train(problem, candidates_method(candidates), steps=args.steps,
                        seeds=args.val_seeds, chunk=args.chunk, progress=progress)
    for budget in args.budgets:
      best = l2o_transfer.best_adam(adam_logs, budget)
      adam_loss, adam_acc = cell_stats(problem, best, budget)
      cell = cells[f"{vname} @ {budget}"] = {"adam": [best.method.info, adam_loss, adam_acc]}
      for name, log in zip(candidates, logs):
        loss, acc = cell_stats(problem, log, budget)
        cell[str(name)] = [loss, acc]
        scores[name][0] += int(loss <= adam_loss) + int(acc >= adam_acc)
        scores[name][1] += float(np.log(max(loss, 1e-12) / adam_loss)) / (2 * len(args.budgets))
  return scores, cells


def evaluate(networks, args, progress):
  """``{(network name, budget): {candidate: (train losses, test accuracies, non-finite)}}``."""
  out = {}
  for pname, problem in l2o_transfer.problems().items():
    logs = runner.train(problem, candidates_method(networks), steps=args.steps, seeds=3,
                        chunk=args.chunk, progress=progress)
    for budget in args.budgets:
      for name, log in zip(networks, logs):
        i = l2o_transfer.at_step(log, budget)
        out.setdefault((pname, budget), {})[name] = (
            (log.train_loss[:, i] - problem.train_loss_floor).tolist(), log.test[:, i].tolist(),
            int(np.sum(~np.isfinite(log.train_loss[:, -1]))))
  return out


def passes(loss, acc, key):
  adam_loss, adam_acc = BASELINE.get(key, (np.inf, 0.0))  # --quick: no baseline
  return bool(np.mean(loss) <= adam_loss and np.mean(acc) >= adam_acc)


def seed_report(seed, args, diagnosis, scores, cells, chosen, results, commit, seconds):
  """The lines of ``l2o_transfer_select_seed<seed>.md``."""
  lines = [f"# Meta-training seed {seed}: the learned rates, and the weights chosen on a "
           "validation family or averaged", "",
           f"measured at commit `{commit}`, jax {jax.__version__}; the states kept after every task "
           f"batch by one run of `l2o_transfer.py --learned-only --meta-seed {seed} "
           "--checkpoint-dir ...` (the default recipe, unchanged); "
           f"`l2o_transfer_select.py` took {seconds / 60:.1f} min for the {len(args.meta_seeds)} "
           "meta-training seeds together on 2 CPU cores shared with other jobs.", "",
           ]
  if diagnosis:
    lines += [f"## Learned rate per tensor, weights of batch {args.diagnose_batch} (min / median / "
              "max over the tensors; one run, optimizee seed 0)", "",
              "| network | tuned Adam (1,000 / 5,000) | " + " | ".join(
                  f"step {t}" for t in next(iter(diagnosis.values()))) + " |",
              "|---|---|" + "---|" * len(next(iter(diagnosis.values())))]
  for pname, row in diagnosis.items():
    lines.append(f"| {pname} | {TUNED_ADAM[pname][0]:g} / {TUNED_ADAM[pname][1]:g} | "
                 + " | ".join(f"{lo:.2g} / {mid:.2g} / {hi:.2g}" for lo, mid, hi in row.values())
                 + " |")
  lines += ["", f"## Validation family ({', '.join(validation_problems())}; {args.val_seeds} seeds): "
            "cells won against the tuned Adam (of 8) and the mean log train-loss ratio", "",
            "| candidate | cells won | mean log(train loss / Adam's) | "
            + " | ".join(cells) + " |", "|---|---|---|" + "---|" * len(cells),
            "| tuned Adam (rate: train loss / accuracy) | | | " + " | ".join(
                f"{c['adam'][0]}: {c['adam'][1]:.3g} / {c['adam'][2]:.4f}" for c in cells.values())
            + " |"]
  for name, (won, ratio) in scores.items():
    lines.append(f"| {name} | {won} | {ratio:+.3f} | " + " | ".join(
        f"{c[name][0]:.3g} / {c[name][1]:.4f}" for c in cells.values()) + " |")
  lines += ["", f"Chosen: {chosen}.", "",
            "## On the evaluation networks (3 optimizee seeds, mean ± std; target: train loss ≤ "
            "and test accuracy ≥ the tuned Adam of `l2o_transfer.md` at both budgets)", "",
            "| network | steps | best Adam | default (batch 7, committed table) | "
            + " | ".join(results[next(iter(results))]) + " |",
            "|---|---|---|---|" + "---|" * len(results[next(iter(results))])]
  met = {"default (batch 7)": {}}
  for key, row in results.items():
    adam_loss, adam_acc = BASELINE.get(key, (np.nan, np.nan))
    d_loss, d_acc = DEFAULT[seed].get(key, (np.nan, np.nan)) if seed in DEFAULT else (np.nan,) * 2
    met["default (batch 7)"][key[0]] = met["default (batch 7)"].get(key[0], True) and passes(
        d_loss, d_acc, key)
    texts = []
    for name, (loss, acc, bad) in row.items():
      met.setdefault(name, {})
      met[name][key[0]] = met[name].get(key[0], True) and passes(loss, acc, key)
      text = (f"{l2o_transfer.mean_std(loss)} / {l2o_transfer.mean_std(acc, 4)}"
              + (f" ({bad} non-finite)" if bad else ""))
      texts.append(f"**{text}**" if passes(loss, acc, key) else text)
    default = f"{d_loss:.3g} / {d_acc:.4f}"
    lines.append(f"| {key[0]} | {key[1]} | {adam_loss:.3g} / {adam_acc:.4f} | "
                 + (f"**{default}**" if passes(d_loss, d_acc, key) else default) + " | "
                 + " | ".join(texts) + " |")
  lines += ["", "**Bold**: at least the tuned Adam on both. Networks where the target is met "
            "(both budgets): " + "; ".join(
                f"{name}: {sum(v.values())} of 3 ({', '.join(k for k, ok in v.items() if ok) or 'none'})"
                for name, v in met.items()), ""]
  return lines, met


def diagnosis_report(diagnosis, per_tensor, args, out, commit, seconds):
  """``l2o_transfer_select_diagnosis.md``: the learned rates of the seeds side by side."""
  seeds = list(diagnosis)
  steps = list(next(iter(diagnosis[seeds[0]].values())))
  which = ("the selected" if args.networks else f"batch {args.diagnose_batch}")
  source = (f"`{args.networks}`, the weights `l2o_transfer.py --learned-only --meta-seed K` "
            "selected and saved" if args.networks else
            "the states kept by `l2o_transfer.py --learned-only --meta-seed K --checkpoint-dir ...`")
  lines = [f"# The learned rates of the {args.recipe} recipe's weights ({which}) "
           "per meta-training seed", "",
           f"measured at commit `{commit}`, jax {jax.__version__} (`l2o_transfer_select.py "
           f"--diagnose-only`, {seconds / 60:.1f} min on 2 shared CPU cores); the weights are "
           f"read from {source} ({args.recipe_flags or 'the default recipe, unchanged'}). "
           "One 5,000-step run per "
           "network (optimizee seed 0); the rate of tensor i is 3e-3 · exp(s_t^(i)).", "",
           "Min / median / max over the tensors:", "",
           "| network | tuned Adam (1,000 / 5,000) | meta seed | " + " | ".join(
               f"step {t}" for t in steps) + " |", "|---|---|---|" + "---|" * len(steps)]
  for pname in diagnosis[seeds[0]]:
    for k in seeds:
      lines.append(f"| {pname} | {TUNED_ADAM[pname][0]:g} / {TUNED_ADAM[pname][1]:g} | {k} | "
                   + " | ".join(f"{lo:.2g} / {mid:.2g} / {hi:.2g}"
                                for lo, mid, hi in diagnosis[k][pname].values()) + " |")
  name = "digits MLP"
  tensors = [f"{n}{i}" for i in range(3) for n in ("b", "w")]
  lines += ["", f"Per tensor on the {name} (b: bias, w: weights, layer 0 first):", "",
            "| step | meta seed | " + " | ".join(tensors) + " |", "|---|---|" + "---|" * len(tensors)]
  for t in steps:
    for k in seeds:
      lines.append(f"| {t} | {k} | " + " | ".join(f"{r:.2g}" for r in per_tensor[k][name][t]) + " |")
  out.mkdir(parents=True, exist_ok=True)
  path = out / "l2o_transfer_select_diagnosis.md"
  _report.write_table(lines, str(path))
  path.with_suffix(".json").write_text(json.dumps(
      {"commit": commit, "seconds": seconds, "diagnosis": {str(k): v for k, v in diagnosis.items()},
       "rates_per_tensor": {str(k): v for k, v in per_tensor.items()}}, indent=1))
  print(f"wrote {path}")


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--meta-seeds", type=int, nargs="+", default=[0, 1, 2])
  parser.add_argument("--checkpoint-dir", default=str(OUT / "ckpt_seed{seed}" / "meta"),
                      help="the runs' --checkpoint-dir, with {seed} for the meta-training seed")
  parser.add_argument("--meta-iterations", type=int, default=21)
  parser.add_argument("--horizon", type=int, default=2000)
  parser.add_argument("--unroll", type=int, default=100)
  parser.add_argument("--meta-lr", type=float, default=1e-3)
  parser.add_argument("--diagnose-batch", type=int, default=7)
  parser.add_argument("--candidates", default="7,14,21",
                      help="the batches scored on the validation family (with the average)")
  parser.add_argument("--average", default="8-21", help="first-last batches averaged")
  parser.add_argument("--steps", type=int, default=l2o_transfer.STEPS)
  parser.add_argument("--chunk", type=int, default=250)
  parser.add_argument("--val-seeds", type=int, default=2)
  parser.add_argument("--out", type=pathlib.Path, default=OUT)
  parser.add_argument("--results", action="store_true",
                      help="write into benchmarks/results/ instead of --out")
  parser.add_argument("--no-diagnosis", action="store_true",
                      help="skip the learned rates (written by --diagnose-only)")
  parser.add_argument("--networks", default="",
                      help="with --diagnose-only: the .npz of the weights l2o_transfer.py kept "
                           "(its --out folder's l2o_transfer_learned_only_network.npz), with "
                           "{seed}, instead of the checkpointed batch --diagnose-batch")
  parser.add_argument("--diagnose-only", action="store_true",
                      help="only the learned rates (needs batch --diagnose-batch only)")
  parser.add_argument("--quick", action="store_true",
                      help="smoke run on the states of l2o_transfer.py --quick runs")
  parser.add_argument("--recipe", default="default",
                      help="the recipe's name in the diagnosis's title")
  parser.add_argument("--recipe-flags", default="",
                      help="the runs' l2o_transfer.py flags beyond the defaults, for the report")
  args = parser.parse_args(argv)
  args.budgets = BUDGETS
  if args.networks and not args.diagnose_only:
    parser.error("--networks needs --diagnose-only")
  if args.quick:
    args.meta_iterations, args.horizon, args.unroll, args.steps, args.chunk = 7, 20, 10, 200, 100
    args.budgets, args.diagnose_batch, args.candidates, args.average, args.val_seeds = (
        (100, 200), 3, "3,5", "2-7", 1)
  out = RESULTS if args.results else args.out
  commit = _report.git_commit(short=True)
  progress = _report.progress_bars()
  start = time.perf_counter()
  batches = [int(b) for b in args.candidates.split(",")]
  first, last = map(int, args.average.split("-"))
  avg = f"avg {first}-{last}"
  networks, candidates = {}, {}
  for k in args.meta_seeds:
    if args.diagnose_only:
      networks[k] = load_networks(args, k, {args.diagnose_batch})
      continue
    networks[k] = load_networks(args, k, set(batches) | set(range(first, last + 1))
                                | {args.diagnose_batch})
    candidates.update({(k, f"batch {b}"): networks[k][b] for b in batches})
    candidates[(k, avg)] = average(networks[k], range(first, last + 1))

  diagnosis = {k: {} for k in args.meta_seeds}
  per_tensor = {k: {} for k in args.meta_seeds}
  for pname, problem in ({} if args.no_diagnosis else l2o_transfer.problems()).items():
    at = [t for t in DIAGNOSE_AT if t <= args.steps]
    rates = rate_traces(stack([networks[k][args.diagnose_batch] for k in args.meta_seeds]),
                        problem, max(at))
    for j, k in enumerate(args.meta_seeds):
      r = rates[j]
      diagnosis[k][pname] = {t: [float(np.min(r[t - 1])), float(np.median(r[t - 1])),
                                 float(np.max(r[t - 1]))] for t in at}
      per_tensor[k][pname] = {t: r[t - 1].tolist() for t in at}

  if args.diagnose_only:
    return diagnosis_report(diagnosis, per_tensor, args, out, commit, time.perf_counter() - start)
  scores, cells = validate(candidates, args, progress)
  final, chosen = {}, {}
  for k in args.meta_seeds:
    mine = [c for c in candidates if c[0] == k]
    best = min(mine, key=lambda c: (-scores[c][0], scores[c][1], mine.index(c)))
    chosen[k] = best[1]
    final[(k, f"validation family ({best[1]})")] = candidates[best]
    final[(k, f"average {first}-{last}")] = candidates[(k, avg)]
  unique = {}
  for key, net in final.items():  # the chosen weights may be the average: run them once
    unique.setdefault((key[0], chosen[key[0]] if key[1].startswith("validation") else avg), net)
  evaluated = evaluate(unique, args, progress)
  seconds = time.perf_counter() - start

  out.mkdir(parents=True, exist_ok=True)
  summary = {}
  for k in args.meta_seeds:
    results = {key: {name: row[(k, chosen[k] if name.startswith("validation") else avg)]
                     for (seed, name) in final if seed == k}
               for key, row in evaluated.items()}
    seed_cells = {c: {"adam": v["adam"], **{n: v[str(n)] for n in candidates if n[0] == k}}
                  for c, v in cells.items()}
    lines, met = seed_report(
        k, args, diagnosis[k], {name: scores[(k, name)] for (s, name) in candidates if s == k},
        {c: {"adam": v["adam"], **{n[1]: v[str(n)] for n in candidates if n[0] == k}}
         for c, v in cells.items()}, chosen[k], results, commit, seconds)
    path = out / f"l2o_transfer_select_seed{k}.md"
    _report.write_table(lines, str(path))
    record = {"commit": commit, "seconds": seconds, "meta_seed": k, "chosen": chosen[k],
              "diagnosis": diagnosis[k], "rates_per_tensor": per_tensor[k],
              "scores": {name: scores[(k, name)] for (s, name) in candidates if s == k},
              "cells": {c: {str(n): v for n, v in cv.items()} for c, cv in seed_cells.items()},
              "target": met, "results": {f"{p} @ {b}": row for (p, b), row in results.items()}}
    path.with_suffix(".json").write_text(json.dumps(record, indent=1))
    summary[k] = {name: sum(v.values()) for name, v in met.items()}
    print(f"wrote {path}")
  lines = ["# Networks where the target is met (of 3), per recipe and meta-training seed", "",
           f"measured at commit `{commit}` (`l2o_transfer_select.py`; per seed: "
           + ", ".join(f"`l2o_transfer_select_seed{k}.md`" for k in args.meta_seeds) + ")", "",
           "| recipe | " + " | ".join(f"meta seed {k}" for k in args.meta_seeds) + " |",
           "|---|" + "---|" * len(args.meta_seeds)]
  for j in range(3):
    names = [list(summary[k])[j] for k in args.meta_seeds]
    lines.append(f"| {names[0].split(' (')[0]} | " + " | ".join(
        f"{summary[k][n]}" + (f" ({n.split('(')[-1].rstrip(')')})" if "(" in n else "")
        for k, n in zip(args.meta_seeds, names)) + " |")
  _report.write_table(lines, str(out / "l2o_transfer_select.md"))


if __name__ == "__main__":
  main()
