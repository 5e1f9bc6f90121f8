"""Learned optimizers with learned teleportation vs tuned GD and Adam.

Reproduces the comparisons of *Learning to Optimize with Symmetry Teleportation*:
1. ellipse family (generalized Booth, A and b varying): median loss at step 11
   over 200 unseen tasks for GD and Adam (each the best of a learning-rate grid,
   chosen on separate validation tasks), vanilla L2O, L2O with learned
   teleportation, LSTM(lr, tele) and LSTM(lr, tele, momentum);
2. two-layer LeakyReLU MLP regression: GD vs LSTM(lr, tele) vs
   LSTM(lr, tele, momentum).
Writes a markdown table, loss-vs-step plots and 2-D trajectories on contour plots.

    python benchmarks/l2o_teleport.py            # full run (~15 min on 2 cores)
    python benchmarks/l2o_teleport.py --quick    # smoke run
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

ELLIPSE_VARIANTS = {
    "vanilla L2O": ("update",),
    "L2O + learned teleport": ("update", "teleport"),
    "LSTM(lr, tele)": ("learning_rate", "teleport"),
    "LSTM(lr, tele, momentum)": ("learning_rate", "teleport", "momentum"),
}
MLP_VARIANTS = {
    "LSTM(lr, tele)": ("learning_rate", "teleport"),
    "LSTM(lr, tele, momentum)": ("learning_rate", "teleport", "momentum"),
}


def best_of_grid(make, grid, family, key, steps, eval_step):
  """Best learning rate by median loss at ``eval_step`` on validation tasks."""
  scores = {}
  for lr in grid:
    losses = l2o.evaluate(make(lr), family, key, 200, steps)
    scores[lr] = float(jnp.nanmedian(jnp.where(jnp.isfinite(losses[:, eval_step]),
                                              losses[:, eval_step], jnp.inf)))
  return min(scores, key=scores.get), scores


def train_variant(name, heads, family, args, **config_kwargs):
  config = l2o.L2OConfig(heads=heads, group_dim=family.group_dim, **config_kwargs)
  print(f"  meta-training {name} ...", flush=True)
  training = l2o.MetaTrainingConfig(tasks_per_step=args.tasks_per_step, horizon=args.horizon,
                                    unroll=args.unroll, log_loss=True)
  result = l2o.meta_train(
      config, family, training, num_iterations=args.meta_steps,
      init_state=l2o.init_meta_training(config, seed=args.seed),
      log_every=max(1, args.meta_steps // 5), progress=lambda report: print(
          f"    {report}", flush=True))
  return config, result


def ellipse_benchmark(args, out):
  family = l2o.tasks.ellipse()
  valid_key, test_key = jax.random.key(1000), jax.random.key(2000)
  steps, at = 20, 11
  rows, curves = [], {}
  print("ellipse family: tuning GD and Adam on validation tasks", flush=True)
  gd_lr, _ = best_of_grid(optax.sgd, [0.01, 0.03, 0.1, 0.2, 0.3], family, valid_key, steps, at)
  adam_lr, _ = best_of_grid(optax.adam, [0.01, 0.03, 0.1, 0.3, 1.0], family, valid_key, steps,
                            at)
  for name, opt in ((f"GD (lr {gd_lr})", optax.sgd(gd_lr)),
                    (f"Adam (lr {adam_lr})", optax.adam(adam_lr))):
    curves[name] = np.asarray(l2o.evaluate(opt, family, test_key, 200, steps))
    rows.append((name, curves[name], None))
  trained = {}
  for name, heads in ELLIPSE_VARIANTS.items():
    config, result = train_variant(name, heads, family, args)
    trained[name] = (config, result.params)
    curves[name] = np.asarray(l2o.evaluate(l2o.learned_optimizer(result.params, config),
                                           family, test_key, 200, steps))
    rows.append((name, curves[name], result))
  table = table_markdown("Ellipse family (A, b varying), 200 unseen tasks", rows, at)
  plot_losses(curves, at, os.path.join(out, "l2o_ellipse_loss.png"), "ellipse family")
  plot_trajectories(family, trained, gd_lr, adam_lr, os.path.join(out, "l2o_ellipse_paths.png"))
  return table, {name: float(np.median(c[:, at])) for name, c in curves.items()}


def mlp_benchmark(args, out):
  family = l2o.tasks.mlp_regression()
  valid_key, test_key = jax.random.key(3000), jax.random.key(4000)
  steps, at = args.mlp_steps, args.mlp_steps
  print("MLP regression: tuning GD on validation tasks", flush=True)
  gd_lr, _ = best_of_grid(optax.sgd, [1e-4, 3e-4, 1e-3, 3e-3], family, valid_key, steps, at)
  curves, rows = {}, []
  curves[f"GD (lr {gd_lr})"] = np.asarray(
      l2o.evaluate(optax.sgd(gd_lr), family, test_key, 20, steps))
  rows.append((f"GD (lr {gd_lr})", curves[f"GD (lr {gd_lr})"], None))
  for name, heads in MLP_VARIANTS.items():
    config, result = train_variant(name, heads, family, args._replace_mlp(),
                                   lr_scale=gd_lr, teleport_scale=1.0)
    curves[name] = np.asarray(l2o.evaluate(l2o.learned_optimizer(result.params, config),
                                           family, test_key, 20, steps))
    rows.append((name, curves[name], result))
  table = table_markdown(f"Two-layer MLP regression (20x20, LeakyReLU), 20 unseen tasks", rows,
                         at)
  plot_losses(curves, at, os.path.join(out, "l2o_mlp_loss.png"), "MLP regression")
  return table


def table_markdown(title, rows, at):
  lines = [f"### {title}", "",
           f"| method | median loss @ step {at} | IQR | meta-updates | meta-updates/s | skipped |",
           "|---|---|---|---|---|---|"]
  for name, losses, result in rows:
    q1, med, q3 = np.nanpercentile(losses[:, at], [25, 50, 75])
    extra = ("| - | - | - |" if result is None else
             f"| {len(result.losses)} | {result.updates_per_second:.0f} | "
             f"{result.skipped_updates} |")
    lines.append(f"| {name} | {med:.4g} | {q1:.3g} - {q3:.3g} {extra}")
  return "\n".join(lines) + "\n"


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
    x, state, _ = l2o.step(net, config, state, x, jax.grad(family.loss, argnums=1)(task, x), act)
    xs.append(x)
  return np.asarray(jnp.stack(xs))


class Args(argparse.Namespace):
  def _replace_mlp(self):
    """Budgets for the MLP family (800 coordinates per task)."""
    mlp = Args(**vars(self))
    mlp.meta_steps, mlp.tasks_per_step = self.mlp_meta_steps, 4
    mlp.horizon, mlp.unroll = self.mlp_steps, 10
    return mlp


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--meta-steps", type=int, default=1500)
  parser.add_argument("--tasks-per-step", type=int, default=64)
  parser.add_argument("--horizon", type=int, default=20)
  parser.add_argument("--unroll", type=int, default=10)
  parser.add_argument("--mlp-meta-steps", type=int, default=150)
  parser.add_argument("--mlp-steps", type=int, default=100)
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
  parser.add_argument("--quick", action="store_true", help="tiny budgets (smoke test)")
  args = parser.parse_args(argv, namespace=Args())
  if args.quick:
    args.meta_steps, args.tasks_per_step, args.mlp_meta_steps, args.mlp_steps = 20, 16, 3, 20
  os.makedirs(args.out, exist_ok=True)
  start = time.perf_counter()
  ellipse_table, medians = ellipse_benchmark(args, args.out)
  mlp_table = mlp_benchmark(args, args.out)
  commit = _report.git_commit(short=True)
  report = (f"# Learned optimizers with teleportation\n\nmeasured at commit `{commit}`, "
            f"{time.perf_counter() - start:.0f} s on {os.cpu_count()} CPU cores, "
            f"jax {jax.__version__}{' (--quick)' if args.quick else ''}\n\n"
            + ellipse_table + "\n" + mlp_table)
  with open(os.path.join(args.out, "l2o_teleport.md"), "w") as f:
    f.write(report)
  print(report)


if __name__ == "__main__":
  main()
