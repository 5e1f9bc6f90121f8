"""Learned optimizers with learned teleportation vs tuned GD and Adam.

Reproduces the comparisons of *Learning to Optimize with Symmetry Teleportation*:
1. ellipse family (generalized Booth, A and b varying): the learned optimizers
   (vanilla L2O, L2O with learned teleportation, LSTM(lr, tele),
   LSTM(lr, tele, momentum)) are meta-trained on a sampler that covers
   near-singular and ill-conditioned maps (``ellipse(sampler="mixture")``), once
   per training seed, with a warm-up + cosine meta step size and the weights
   chosen by the median loss at step 11 on 1,000 held-out tasks of the training
   sampler (``l2o.Validation``); LSTM(lr, tele, momentum) starts from the
   seed's trained LSTM(lr, tele) (momentum ~ 0) and is fine-tuned. Each is
   evaluated on 200 unseen tasks of each of three
   distributions of A: det-bounded (``|det A| >= 0.3``), the paper code's (iid
   N(0, 1), no bound) and ill-conditioned (condition numbers log-uniform on
   [1, 1e3]). Median and IQR of the loss at step 11 per training seed, against
   GD and Adam, each the best of a learning-rate grid chosen on separate
   validation tasks of the same distribution;
2. speed at the paper code's configuration (hidden 100 x 2 layers, one task per
   meta update, unroll 5, 20-step trajectories): ms per meta update of a warm
   (compiled) meta step, vanilla vs LSTM(lr, tele), one call per task batch,
   with donated buffers and as one ``lax.scan`` over the batches;
3. two-layer LeakyReLU MLP regression: GD vs LSTM(lr, tele) vs
   LSTM(lr, tele, momentum), meta-trained with ``mask_diverged_tasks``;
4. Rosenbrock family, fixed (``a=1, b=-1, c=-2, d(x) = 0.4 x^2``, starting points
   varying) and varying (coefficients iid N(0, 1), ``|a|, |c| >= 0.5``): the same
   four learned variants, meta-trained on the family they are evaluated on (once
   per training seed), against GD and Adam tuned on separate validation tasks;
   median and IQR of the loss at step 11 on 200 unseen tasks per training seed.
Writes a markdown table, loss-vs-step plots and 2-D trajectories on contour plots.

    python benchmarks/l2o_teleport.py            # full run (~45 min on 2 free cores; the
                                                 # committed results: --out benchmarks/results)
    python benchmarks/l2o_teleport.py --quick    # smoke run
    python benchmarks/l2o_teleport.py --sections rosenbrock   # one section (~15 min)

A run of some sections rewrites ``l2o_teleport.md`` with the others kept from the
previous report, marked as not rerun.
"""

from __future__ import annotations

import argparse
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

import _report
from metaoptax import l2o

#: The files under benchmarks/results/ that this script writes (glob patterns;
#: tests/integration/test_repository_shape.py checks every committed result against them).
OUTPUTS = ("l2o_teleport.md", "l2o_ellipse_loss.png", "l2o_ellipse_paths.png",
           "l2o_rosenbrock_loss.png", "l2o_mlp_loss.png",)


#: name -> (heads, extra L2OConfig fields) of the learned optimizers on the ellipse family.
ELLIPSE_VARIANTS = {
    "vanilla L2O": (("update",), {"hidden": 64}),
    "L2O + learned teleport": (("update", "teleport"), {"hidden": 64}),
    "LSTM(lr, tele)": (("learning_rate", "teleport"), {}),
    "LSTM(lr, tele, momentum)": (("learning_rate", "teleport", "momentum"), {}),
}
#: label -> sampler of the evaluation distributions (``l2o.tasks.ellipse(sampler=...)``).
DISTRIBUTIONS = {
    "det-bounded": "det_bounded",
    "reference (no det bound)": "reference",
    "ill-conditioned (cond 1 to 1e3)": "ill_conditioned",
}
MLP_VARIANTS = {
    "LSTM(lr, tele)": ("learning_rate", "teleport"),
    "LSTM(lr, tele, momentum)": ("learning_rate", "teleport", "momentum"),
}
STEPS, AT = 20, 11  # trajectory length and the step scored on the 2-D families
#: The benchmark's sections in report order (``--sections``) -> the heading their
#: tables start with in the report (a section not rerun is kept from the last one).
SECTIONS = {"ellipse": "### Ellipse family", "speed": "### Speed", "mlp": "### Two-layer MLP",
            "rosenbrock": "### Rosenbrock family"}


def finite_median(losses):
  """Median with non-finite losses counted as +inf (a diverged run is worst)."""
  return float(np.median(np.where(np.isfinite(losses), losses, np.inf)))


def best_of_grid(make, grid, family, key, steps, eval_step, num_tasks=200):
  """Best learning rate by median loss at ``eval_step`` on validation tasks."""
  scores = {lr: finite_median(np.asarray(l2o.evaluate(key, family, make(lr), num_tasks,
                                                     steps))[:, eval_step]) for lr in grid}
  return min(scores, key=scores.get), scores


#: One default meta-optimizer (Adam 1e-3, clipped) for every run without a schedule:
#: ``l2o.train`` then reuses a compiled meta step across training seeds.
META_OPTIMIZER = l2o.default_optimizer()


def train_variant(name, heads, family, args, seed=None, *, meta_optimizer=None,
                  validation=None, warm_start=None, num_iterations=None, **config_kwargs):
  config = l2o.L2OConfig(heads=heads, group_dim=family.group_dim, **config_kwargs)
  seed = args.seed if seed is None else seed
  num_iterations = args.meta_steps if num_iterations is None else num_iterations
  print(f"  meta-training {name} (seed {seed}) ...", flush=True)
  training = l2o.TrainingConfig(tasks_per_step=args.tasks_per_step, horizon=args.horizon,
                                unroll=args.unroll, log_loss=bool(args.log_loss),
                                mask_diverged_tasks=True)
  params = None if warm_start is None else config.init_network(jax.random.key(seed),
                                                               warm_start=warm_start)
  meta_optimizer = META_OPTIMIZER if meta_optimizer is None else meta_optimizer
  start = l2o.init_training(jax.random.key(seed), family, config, training,
                            optimizer=meta_optimizer, params=params)
  result = l2o.train(jax.random.key(seed), family, config, training,
                     num_iterations=num_iterations, optimizer=meta_optimizer, init_state=start,
                     validation=validation, log_every=max(1, num_iterations // 5),
                     progress=lambda report: print(f"    {report}", flush=True))
  return config, result


def ellipse_schedule(args, num_iterations, learning_rate):
  """Adam with a warm-up and a cosine decay over the run's meta updates."""
  updates = num_iterations * (args.horizon // args.unroll)
  return l2o.default_optimizer(learning_rate, decay_updates=updates,
                               warmup_updates=min(args.warmup_updates, updates // 2),
                               final_learning_rate=args.final_meta_lr)


def ellipse_benchmark(args, out):
  train_family = l2o.tasks.ellipse(sampler=args.train_sampler)
  families = {label: l2o.tasks.ellipse(sampler=s) for label, s in DISTRIBUTIONS.items()}
  valid_key, test_key = jax.random.key(1000), jax.random.key(2000)
  seeds = [int(s) for s in args.seeds.split(",")]
  curves = {label: {} for label in families}  # label -> method -> (seeds, tasks, steps + 1)
  tuned = {}  # (label, method) -> learning rate
  for label, family in families.items():
    print(f"ellipse family, {label}: tuning GD and Adam on validation tasks", flush=True)
    for method, make, grid in (("GD", optax.sgd, [0.01, 0.03, 0.1, 0.2, 0.3]),
                               ("Adam", optax.adam, [0.01, 0.03, 0.1, 0.3, 1.0])):
      lr, _ = best_of_grid(make, grid, family, valid_key, STEPS, AT)
      tuned[label, method] = lr
      curves[label][f"{method} (lr {lr})"] = np.asarray(
          l2o.evaluate(test_key, family, make(lr), 200, STEPS))[None]
  trained, training_rows = {}, []
  # held-out tasks of the training distribution (never the 200 evaluation tasks) choose
  # the weights of each run
  validation = l2o.Validation(train_family, jax.random.key(5000), num_tasks=args.validation_tasks,
                              steps=AT, at=AT, every=args.validate_every)
  selected = {}  # (name, seed) -> selected weights
  variants = args.variants.split(";") if args.variants else list(ELLIPSE_VARIANTS)
  unknown = set(variants) - set(ELLIPSE_VARIANTS)
  if unknown:
    raise ValueError(f"unknown variants {sorted(unknown)}; choose from {list(ELLIPSE_VARIANTS)}")
  if "LSTM(lr, tele, momentum)" in variants and args.momentum_warm_start:
    assert "LSTM(lr, tele)" in variants, "the momentum warm start needs LSTM(lr, tele)"
  for name in variants:
    heads, extra = ELLIPSE_VARIANTS[name]
    if "teleport" in heads:  # 2-D: the teleport head reads both coordinates in place
      extra = {"teleport_pooling": "concat", "num_coordinates": 2, **extra}
    per_seed = {label: [] for label in families}
    for seed in seeds:
      warm, iterations, lr = None, args.meta_steps, args.meta_lr
      if name == "LSTM(lr, tele, momentum)" and args.momentum_warm_start:
        # starts as the trained LSTM(lr, tele) of the same seed (momentum ~ 0)
        warm, iterations, lr = (selected["LSTM(lr, tele)", seed], args.momentum_meta_steps,
                                args.momentum_meta_lr)
        extra = {**extra, "momentum_init": args.momentum_init}
      config, result = train_variant(
          name, heads, train_family, args, seed, meta_optimizer=ellipse_schedule(
              args, iterations, lr), validation=validation, warm_start=warm,
          num_iterations=iterations, **extra)
      selected[name, seed] = result.params
      trained.setdefault(name, (config, result.params))
      training_rows.append((name, seed, result))
      optimizer = config.transformation(result.params)
      for label, family in families.items():
        per_seed[label].append(np.asarray(l2o.evaluate(test_key, family, optimizer, 200, STEPS)))
    for label in families:
      curves[label][name] = np.stack(per_seed[label])
  tables = [ellipse_table(label, curves[label], seeds) for label in families]
  checks = target_checks(curves["reference (no det bound)"], seeds)
  plot_ellipse_losses(curves, os.path.join(out, "l2o_ellipse_loss.png"))
  label = "reference (no det bound)"
  plot_trajectories(families[label], trained, tuned[label, "GD"], tuned[label, "Adam"],
                    os.path.join(out, "l2o_ellipse_paths.png"))
  return ("\n".join(tables) + "\n" + checks + "\n" + training_table(training_rows))


def ellipse_table(label, methods, seeds):
  """Median (IQR) of the loss at step ``AT`` per method and training seed."""
  return per_seed_table(f"Ellipse family, {label}: 200 unseen tasks, loss at step {AT}",
                        methods, seeds, AT)


def target_checks(methods, seeds):
  """The targets on the paper code's distribution, per training seed."""
  med = {name: [finite_median(losses[min(k, losses.shape[0] - 1), :, AT])
                for k in range(len(seeds))] for name, losses in methods.items()}
  baseline = [min(med[m][k] for m in med if m.startswith(("GD", "Adam")))
              for k in range(len(seeds))]
  learned = [m for m in med if m in ELLIPSE_VARIANTS]

  def line(text, ok):
    return f"- {'MET' if all(ok) else 'MISSED'}: {text} (per seed: " + ", ".join(
        "yes" if o else "no" for o in ok) + ")"

  tele, momentum = med.get("LSTM(lr, tele)"), med.get("LSTM(lr, tele, momentum)")
  lines = ["Targets on the reference distribution (median loss at step 11):", ""]
  if tele:
    lines.append(line("LSTM(lr, tele) < 0.01", [v < 0.01 for v in tele]))
  if tele and momentum:
    lines.append(line("LSTM(lr, tele, momentum) <= LSTM(lr, tele)",
                      [m <= t for m, t in zip(momentum, tele)]))
  if "vanilla L2O" in med:
    lines.append(line("vanilla L2O <= 0.03", [v <= 0.03 for v in med["vanilla L2O"]]))
  lines.append(line("every learned variant beats tuned GD and tuned Adam",
                    [all(med[m][k] < baseline[k] for m in learned) for k in range(len(seeds))]))
  return "\n".join(lines) + "\n"


def training_table(rows):
  lines = ["### Meta-training (ellipse mixture sampler)", "",
           "| method | seed | meta-updates | meta-updates/s (with compilation) | skipped | "
           f"diverged tasks | selected iteration | held-out median @ {AT}: start / selected "
           "/ last |", "|---|---|---|---|---|---|---|---|"]
  for name, seed, result in rows:
    scores = result.validation_scores
    chosen = scores[scores[:, 0] == result.best_iteration, 1][0]
    lines.append(f"| {name} | {seed} | {len(result.losses)} | {result.updates_per_second:.0f} | "
                 f"{result.skipped_updates} | {result.diverged_tasks} | "
                 f"{result.best_iteration} | {scores[0, 1]:.4f} / {chosen:.4f} / "
                 f"{scores[-1, 1]:.4f} |")
  return "\n".join(lines) + "\n"


def speed_benchmark(args):
  """ms per meta update of a warm meta step at the paper code's configuration, three ways,
  interleaved so that every way sees the same machine load:

  * ``call``: one jitted ``meta_step(state)`` per task batch from a host loop
    (as ``l2o.train`` runs it);
  * ``donated``: the same with the state's buffers donated to the call;
  * ``scan``: ``speed_iterations`` task batches in one jitted ``lax.scan`` (no host
    dispatch between them).
  """
  family = l2o.tasks.ellipse()
  training = l2o.TrainingConfig(tasks_per_step=1, horizon=20, unroll=5, log_loss=True)
  n, per_batch = args.speed_iterations, training.horizon // training.unroll
  runs, times = {}, {}
  for name, heads in (("vanilla L2O", ("update",)),
                      ("LSTM(lr, tele)", ("learning_rate", "teleport"))):
    config = l2o.L2OConfig(heads=heads, group_dim=1, hidden=100, layers=2)
    meta_step = l2o.build_training_step(family, config, training)
    step, donated = jax.jit(meta_step), jax.jit(meta_step, donate_argnums=0)
    many = jax.jit(lambda s, meta_step=meta_step: jax.lax.scan(
        lambda c, _: meta_step(c), s, None, length=n))
    state = l2o.init_training(jax.random.key(0), family, config, training)

    def call(state, step=step):
      for _ in range(n):
        state, _ = step(state)
      return state

    def call_donated(state, step=donated):
      state = jax.tree.map(jnp.copy, state)  # the caller's buffers stay valid
      for _ in range(n):
        state, _ = step(state)
      return state

    for way, run in (("call", call), ("donated", call_donated),
                     ("scan", lambda s, many=many: many(s)[0])):
      jax.block_until_ready(run(state))  # compile and warm up
      runs[name, way], times[name, way] = (run, state), []
  for _ in range(args.speed_repeats):
    for key, (run, state) in runs.items():
      start = time.perf_counter()
      jax.block_until_ready(run(state))
      times[key].append((time.perf_counter() - start) / n / per_batch * 1e3)
  lines = ["### Speed: hidden 100 x 2 layers, 1 task per meta update, unroll 5, horizon 20", "",
           f"ms per meta update, median (min) of {args.speed_repeats} repeats of {n} task "
           f"batches ({n * per_batch} meta updates), load average {os.getloadavg()[0]:.1f} on "
           f"{os.cpu_count()} cores", "",
           "| method | one call per task batch | donated state | lax.scan of the batches |",
           "|---|---|---|---|"]
  for name in ("vanilla L2O", "LSTM(lr, tele)"):
    cells = [f"{np.median(times[name, way]):.3f} ({min(times[name, way]):.3f})"
             for way in ("call", "donated", "scan")]
    lines.append(f"| {name} | " + " | ".join(cells) + " |")
  ratio = (np.median(times["LSTM(lr, tele)", "call"]) /
           np.median(times["vanilla L2O", "call"]))
  return "\n".join(lines) + f"\n\nLSTM(lr, tele) / vanilla (one call per batch, medians): " \
      f"{ratio:.2f}x\n"


def mlp_benchmark(args, out):
  family = l2o.tasks.mlp_regression()
  valid_key, test_key = jax.random.key(3000), jax.random.key(4000)
  steps, at = args.mlp_steps, args.mlp_steps
  print("MLP regression: tuning GD on validation tasks", flush=True)
  gd_lr, _ = best_of_grid(optax.sgd, [1e-4, 3e-4, 1e-3, 3e-3], family, valid_key, steps, at)
  curves, rows = {}, []
  curves[f"GD (lr {gd_lr})"] = np.asarray(
      l2o.evaluate(test_key, family, optax.sgd(gd_lr), 20, steps))
  rows.append((f"GD (lr {gd_lr})", curves[f"GD (lr {gd_lr})"], None))
  for name, heads in MLP_VARIANTS.items():
    config, result = train_variant(name, heads, family, args._replace_mlp(),
                                   lr_scale=gd_lr, teleport_scale=1.0)
    curves[name] = np.asarray(l2o.evaluate(test_key, family, config.transformation(result.params),
                                           20, steps))
    rows.append((name, curves[name], result))
  table = table_markdown(f"Two-layer MLP regression (20x20, LeakyReLU), 20 unseen tasks", rows,
                         at)
  plot_losses(curves, at, os.path.join(out, "l2o_mlp_loss.png"), "MLP regression")
  return table


def table_markdown(title, rows, at):
  lines = [f"### {title}", "",
           f"| method | median loss @ step {at} | IQR | meta-updates | meta-updates/s | skipped "
           "| diverged tasks |", "|---|---|---|---|---|---|---|"]
  for name, losses, result in rows:
    q1, med, q3 = np.nanpercentile(losses[:, at], [25, 50, 75])
    extra = ("| - | - | - | - |" if result is None else
             f"| {len(result.losses)} | {result.updates_per_second:.0f} | "
             f"{result.skipped_updates} | {result.diverged_tasks} |")
    lines.append(f"| {name} | {med:.4g} | {q1:.3g} - {q3:.3g} {extra}")
  return "\n".join(lines) + "\n"


def plot_ellipse_losses(curves, path):
  """One panel per distribution: median loss over tasks vs step, one line per
  training seed (learned) or per tuned baseline."""
  plot_per_seed_curves(curves, path, "ellipse family")


def plot_losses(curves, at, path, title):
  plt = _report.pyplot()
  fig, ax = plt.subplots(figsize=(7, 4.5))
  for name, losses in curves.items():
    med = np.nanmedian(losses, axis=0)
    q1, q3 = np.nanpercentile(losses, [25, 75], axis=0)
    steps = np.arange(losses.shape[1])
    ax.plot(steps, med, label=name)
    ax.fill_between(steps, q1, q3, alpha=0.15)
  ax.axvline(at, color="gray", ls=":", lw=1)
  ax.set_yscale("log")
  ax.set_xlabel("optimizee step")
  ax.set_ylabel("loss (median, IQR)")
  ax.set_title(title)
  ax.legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


def plot_trajectories(family, trained, gd_lr, adam_lr, path, num_tasks=3, steps=11):
  plt = _report.pyplot()
  key = jax.random.key(77)
  fig, axes = plt.subplots(1, num_tasks, figsize=(5 * num_tasks, 4.5))
  for k, ax in enumerate(np.atleast_1d(axes)):
    sub = jax.random.fold_in(key, k)
    task = family.sample_task(jax.random.fold_in(sub, 0))
    x0 = family.init_params(jax.random.fold_in(sub, 1), task)
    paths = {f"GD {gd_lr}": optax_path(optax.sgd(gd_lr), family, task, x0, steps),
             f"Adam {adam_lr}": optax_path(optax.adam(adam_lr), family, task, x0, steps)}
    for name, (config, net) in trained.items():
      paths[name] = learned_path(config, net, family, task, x0, steps)
    everything = np.concatenate(list(paths.values()))
    lo, hi = np.percentile(everything, 2, axis=0) - 1, np.percentile(everything, 98, axis=0) + 1
    gx, gy = np.meshgrid(np.linspace(lo[0], hi[0], 200), np.linspace(lo[1], hi[1], 200))
    grid = jnp.stack([gx.ravel(), gy.ravel()], axis=1)
    z = np.asarray(jax.vmap(lambda x: family.loss(task, x))(grid)).reshape(gx.shape)
    ax.contour(gx, gy, np.log10(z + 1e-6), levels=20, cmap="Greys", linewidths=0.6)
    for name, path_ in paths.items():
      ax.plot(path_[:, 0], path_[:, 1], ".-", ms=3, lw=1, label=name)
    ax.set_xlim(lo[0], hi[0])
    ax.set_ylim(lo[1], hi[1])
    ax.set_title(f"unseen task {k + 1} ({steps} steps)")
  np.atleast_1d(axes)[0].legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def optax_path(opt, family, task, x, steps):
  state, xs = opt.init(x), [x]
  for _ in range(steps):
    u, state = opt.update(jax.grad(family.loss, argnums=1)(task, x), state, x)
    x = optax.apply_updates(x, u)
    xs.append(x)
  return np.asarray(jnp.stack(xs))


def learned_path(config, net, family, task, x, steps):
  state, xs = l2o.optimizer.init_state(config, x), [x]
  act = lambda th, p: family.act(task, th, p)
  for _ in range(steps):
    x, state, _ = config.step(net, state, x, jax.grad(family.loss, argnums=1)(task, x), act)
    xs.append(x)
  return np.asarray(jnp.stack(xs))


#: label -> ``l2o.tasks.rosenbrock(varying=...)`` of the Rosenbrock family's two settings.
ROSENBROCK_FAMILIES = {"fixed": False, "varying": True}
#: The Rosenbrock family is scored with the four learned variants of the ellipse family.
ROSENBROCK_VARIANTS = ELLIPSE_VARIANTS


def rosenbrock_benchmark(args, out):
  """Tuned GD and Adam and the four learned variants (one network per training seed,
  meta-trained on the family it is evaluated on) on the fixed and varying Rosenbrock
  families: per-seed median and IQR of the loss at step ``AT`` on 200 unseen tasks."""
  valid_key, test_key = jax.random.key(5000), jax.random.key(6000)
  seeds = [int(s) for s in args.seeds.split(",")]
  budget = args._replace_rosenbrock()
  tables, curves, training_rows = [], {}, []
  for label, varying in ROSENBROCK_FAMILIES.items():
    family = l2o.tasks.rosenbrock(varying=varying)
    methods = curves[label] = {}
    print(f"Rosenbrock family, {label}: tuning GD and Adam on validation tasks", flush=True)
    for method, make, grid in (("GD", optax.sgd, [1e-3, 3e-3, 0.01, 0.03, 0.1, 0.2, 0.3]),
                               ("Adam", optax.adam, [0.01, 0.03, 0.1, 0.3, 1.0])):
      lr, _ = best_of_grid(make, grid, family, valid_key, STEPS, AT)
      methods[f"{method} (lr {lr})"] = np.asarray(
          l2o.evaluate(test_key, family, make(lr), 200, STEPS))[None]
    for name, (heads, extra) in ROSENBROCK_VARIANTS.items():
      if "teleport" in heads:  # 2-D: the teleport head reads both coordinates in place
        extra = {"teleport_pooling": "concat", "num_coordinates": 2, **extra}
      per_seed = []
      for seed in seeds:
        config, result = train_variant(f"{name}, Rosenbrock {label}", heads, family, budget,
                                       seed, **extra)
        training_rows.append((f"{name}, {label}", seed, result))
        per_seed.append(np.asarray(l2o.evaluate(test_key, family,
                                                config.transformation(result.params), 200, STEPS)))
      methods[name] = np.stack(per_seed)
    tables.append(per_seed_table(
        f"Rosenbrock family, {label}: 200 unseen tasks, loss at step {AT}", methods, seeds, AT))
  plot_per_seed_curves(curves, os.path.join(out, "l2o_rosenbrock_loss.png"), "Rosenbrock family")
  rows = "\n".join(
      f"| {name} | {seed} | {len(result.losses)} | {result.updates_per_second:.0f} | "
      f"{result.skipped_updates} | {result.diverged_tasks} |" for name, seed, result in training_rows)
  return ("\n".join(tables) + "\n" + beats_baselines(curves, seeds) + "\n"
          + f"### Meta-training (Rosenbrock family: {budget.meta_steps} iterations of "
          f"{budget.tasks_per_step} tasks, horizon {budget.horizon}, unroll {budget.unroll})\n\n"
          "| method | seed | meta-updates | meta-updates/s (with compilation) | skipped | "
          "diverged tasks |\n|---|---|---|---|---|---|\n" + rows + "\n")


def per_seed_table(title, methods, seeds, at):
  """Median (IQR) of the loss at step ``at`` per method and training seed; a
  baseline (one row of curves) is the same for every seed; a diverged run counts
  as +inf."""
  head = " | ".join(f"seed {s}: median (IQR)" for s in seeds)
  lines = [f"### {title}", "", f"| method | {head} |", "|---|" + "---|" * len(seeds)]
  for name, losses in methods.items():
    cells = []
    for k in range(len(seeds)):
      if losses.shape[0] == 1 and k > 0:
        cells.append("same")
        continue
      values = np.where(np.isfinite(losses[k, :, at]), losses[k, :, at], np.inf)
      q1, med, q3 = np.percentile(values, [25, 50, 75])
      cells.append(f"{med:.3g} ({q1:.2g} - {q3:.2g})")
    lines.append(f"| {name} | " + " | ".join(cells) + " |")
  return "\n".join(lines) + "\n"


def beats_baselines(curves, seeds):
  """Per family and training seed: which learned variants have a lower median loss at
  step ``AT`` than the better of tuned GD and tuned Adam."""
  lines = [f"Learned variants with a lower median loss at step {AT} than the better of tuned "
           "GD and tuned Adam (per training seed):", ""]
  for label, methods in curves.items():
    baseline = min(finite_median(losses[0, :, AT]) for name, losses in methods.items()
                   if losses.shape[0] == 1)
    for name, losses in methods.items():
      if losses.shape[0] > 1:
        wins = ["yes" if finite_median(losses[k, :, AT]) < baseline else "no"
                for k in range(len(seeds))]
        lines.append(f"- {label}, {name}: " + ", ".join(wins)
                     + f" (baseline median {baseline:.3g})")
  return "\n".join(lines) + "\n"


def plot_per_seed_curves(curves, path, title):
  """One panel per task distribution: median loss over the tasks vs step, one line
  per training seed (learned, solid) or per tuned baseline (dashed)."""
  plt = _report.pyplot()
  fig, axes = plt.subplots(1, len(curves), figsize=(6 * len(curves), 4.5), squeeze=False)
  colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
  for ax, (label, methods) in zip(axes[0], curves.items()):
    for color, (name, losses) in zip(colors, methods.items()):
      for k, per_seed in enumerate(losses):
        median = np.median(np.where(np.isfinite(per_seed), per_seed, np.inf), axis=0)
        ax.plot(np.arange(losses.shape[-1]), median, color=color,
                lw=1.2, ls="--" if losses.shape[0] == 1 else "-", alpha=0.9,
                label=name if k == 0 else None)
    ax.axvline(AT, color="gray", ls=":", lw=1)
    ax.set_yscale("log")
    ax.set_xlabel("optimizee step")
    ax.set_ylabel(f"median loss over {losses.shape[1]} tasks")
    ax.set_title(f"{title}, {label}")
  axes[0, 0].legend(fontsize=7)
  _report.save_figure(fig, path)


class Args(argparse.Namespace):
  def _replace_mlp(self):
    """Budgets for the MLP family (800 coordinates per task)."""
    mlp = Args(**vars(self))
    mlp.meta_steps, mlp.tasks_per_step = self.mlp_meta_steps, 4
    mlp.horizon, mlp.unroll = self.mlp_steps, 10
    return mlp

  def _replace_rosenbrock(self):
    """Budgets for the Rosenbrock family (24 meta-training runs in the section)."""
    rosenbrock = Args(**vars(self))
    rosenbrock.meta_steps = self.rosenbrock_meta_steps
    rosenbrock.tasks_per_step = self.rosenbrock_tasks_per_step
    return rosenbrock


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--meta-steps", type=int, default=3000)
  parser.add_argument("--seeds", default="0,1,2", help="training seeds (ellipse family)")
  parser.add_argument("--train-sampler", default="mixture",
                      help="ellipse sampler of the meta-training tasks")
  parser.add_argument("--variants", default="",
                      help="';'-separated learned variants of the ellipse family (default all)")
  parser.add_argument("--meta-lr", type=float, default=1e-3, help="peak meta step size")
  parser.add_argument("--final-meta-lr", type=float, default=1e-5,
                      help="meta step size at the end of the cosine decay")
  parser.add_argument("--warmup-updates", type=int, default=200)
  parser.add_argument("--validation-tasks", type=int, default=1000,
                      help="held-out tasks of the training sampler that choose the weights")
  parser.add_argument("--validate-every", type=int, default=50)
  parser.add_argument("--momentum-warm-start", type=int, default=1,
                      help="start LSTM(lr, tele, momentum) from the trained LSTM(lr, tele)")
  parser.add_argument("--momentum-init", type=float, default=1e-3)
  parser.add_argument("--momentum-meta-steps", type=int, default=1000)
  parser.add_argument("--momentum-meta-lr", type=float, default=3e-4)
  parser.add_argument("--speed-repeats", type=int, default=7)
  parser.add_argument("--speed-iterations", type=int, default=100)
  parser.add_argument("--tasks-per-step", type=int, default=64)
  parser.add_argument("--horizon", type=int, default=20)
  parser.add_argument("--unroll", type=int, default=10)
  parser.add_argument("--mlp-meta-steps", type=int, default=150)
  parser.add_argument("--mlp-steps", type=int, default=100)
  parser.add_argument("--rosenbrock-meta-steps", type=int, default=400)
  parser.add_argument("--rosenbrock-tasks-per-step", type=int, default=32)
  parser.add_argument("--log-loss", type=int, default=0,
                      help="1: meta-train on log f (the recipe before issue 30); 0: on f, the "
                           "library's default (docs/design-decisions.md)")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "out"),
                      help="output folder (default: benchmarks/out/, git-ignored; the committed "
                           "results: --out benchmarks/results)")
  parser.add_argument("--quick", action="store_true", help="tiny budgets (smoke test)")
  parser.add_argument("--sections", default=",".join(SECTIONS),
                      help=f"comma-separated subset of {','.join(SECTIONS)} to run; the others "
                           "are kept from the previous report")
  args = parser.parse_args(argv, namespace=Args())
  if args.quick:
    args.meta_steps, args.tasks_per_step, args.mlp_meta_steps, args.mlp_steps = 20, 16, 3, 20
    args.momentum_meta_steps, args.validation_tasks, args.validate_every = 10, 50, 5
    args.seeds, args.speed_repeats, args.speed_iterations = "0,1", 2, 5
    args.rosenbrock_meta_steps, args.rosenbrock_tasks_per_step = 20, 16
  sections = [s.strip() for s in args.sections.split(",") if s.strip()]
  unknown = sorted(set(sections) - set(SECTIONS))
  if unknown or not sections:
    parser.error(f"--sections must be a comma-separated subset of {','.join(SECTIONS)}, "
                 f"got {args.sections!r}")
  os.makedirs(args.out, exist_ok=True)
  path = os.path.join(args.out, "l2o_teleport.md")
  previous = open(path).read() if os.path.exists(path) else ""
  commit = _report.git_commit(short=True)  # the code that runs, not the tree at the end
  start, load = time.perf_counter(), os.getloadavg()
  runners = {"ellipse": ellipse_benchmark, "speed": lambda a, _: speed_benchmark(a),
             "mlp": mlp_benchmark, "rosenbrock": rosenbrock_benchmark}
  tables = {section: (runners[section](args, args.out) if section in sections else
                      kept_section(previous, heading))
            for section, heading in SECTIONS.items()}
  load = " / ".join(f"{a:.1f}-{b:.1f}" for a, b in zip(load, os.getloadavg()))
  report = (f"# Learned optimizers with teleportation\n\nmeasured at commit `{commit}`, "
            f"{time.perf_counter() - start:.0f} s on {os.cpu_count()} CPU cores "
            f"(load average over 1 / 5 / 15 min at start-end: {load}), "
            f"jax {jax.__version__}{' (--quick)' if args.quick else ''}; sections run: "
            f"{', '.join(sections)}; meta-loss on {'log f' if args.log_loss else 'f'}, "
            f"ellipse training sampler {args.train_sampler}\n\n" + "\n".join(tables.values()))
  with open(path, "w") as f:
    f.write(report)
  print(report)
  print(f"wrote {path}")


def kept_section(previous, heading):
  """A section not rerun: its text from the previous report, marked as such."""
  start = previous.find(heading)
  if start < 0:
    return ""
  ends = [previous.find(h, start) for h in SECTIONS.values() if h != heading]
  end = min([e for e in ends if e > start] or [len(previous)])
  text = previous[start:end].rstrip().removesuffix(KEPT).rstrip()
  return KEPT + "\n\n" + text + "\n"


KEPT = "(not rerun; from the previous report)"


if __name__ == "__main__":
  main()
