"""Learned hyperparameters (``learn=``) and held-out meta-gradients (``meta_grads=``).

    python benchmarks/learned_hyperparams.py                  # both tasks, full budgets
    python benchmarks/learned_hyperparams.py --quick          # a smoke run

Two tasks, 3 seeds each, mean ± std at every budget checkpoint:

1. **MNIST-1D** (the suite's MLP 40-100-100-10, minibatches of 128, 40,000 steps).
   The 4,000 training sequences are split once into 3,600 for training and 400
   held out (never the test set); every method trains on the same 3,600.
   - (a) ``metaoptax.adamw()``: the step size only;
   - (b) ``metaoptax.adamw(learn=("b1", "b2"))``;
   - (c) ``metaoptax.adamw(learn=("b1", "b2", "weight_decay"))`` with
     ``meta_grads`` = the gradient on a held-out minibatch of 128 (one more
     gradient per step);
   - (d) as (c), with ``held_out="hyperparams"``: the step size follows the
     training loss, the hyperparameters the held-out loss;
   - (e) as (d) with the weight decay only;
   - AdamW at a grid of constant rates x weight decays, the best chosen by its
     final test accuracy (optimistic for the baseline), and schedule-free AdamW at
     its default rate. Every metaoptax variant runs at its defaults (untuned).
2. **The blockwise task**: the suite's 6-layer MLP 40-128-...-10 on the same split,
   one step size per layer (``blocks=``), 20,000 steps; the same methods.
3. **Ridge regression** with a known optimal penalty: ``y = X w* + noise``,
   ``n=200`` training and 200 held-out samples, ``d=100``. The training loss
   ``|Xw - y|^2 / 2n`` with decoupled decay ``kappa`` has the fixed point of ridge
   regression with penalty ``lambda = kappa``; the grid's best ``lambda``
   minimizes the held-out loss of the closed-form ridge solution. SGD base,
   ``learn=("weight_decay",)`` with held-out meta-gradients, Hessian-free and
   ``l_approx`` (whose trace converges to ``dw*/dkappa`` exactly), from
   ``kappa_0 = 1e-3``.

Writes ``learned_hyperparams.md``, ``.json`` and ``learned_hyperparams_*.png`` into
``--out`` (default ``benchmarks/out/learned_hyperparams``, git-ignored).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from tqdm import tqdm

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _report  # pylint: disable=g-import-not-at-top,wrong-import-position
import metaoptax  # pylint: disable=g-import-not-at-top,wrong-import-position

from suite_tasks import blockwise  # pylint: disable=g-import-not-at-top,wrong-import-position
from suite_tasks import models  # pylint: disable=g-import-not-at-top,wrong-import-position
from suite_tasks import mnist1d  # pylint: disable=g-import-not-at-top,wrong-import-position

#: The files under benchmarks/results/ that this script writes (glob patterns;
#: tests/integration/test_repository_shape.py checks every committed result against them).
OUTPUTS = ("learned_hyperparams/learned_hyperparams.md",
           "learned_hyperparams/learned_hyperparams.json",
           "learned_hyperparams/learned_hyperparams_*.png",)


SEEDS = 3
FRACTIONS = (0.1, 0.25, 0.5, 1.0)
HELD_OUT = 400
GRID_RATES = (3e-4, 1e-3, 3e-3, 1e-2, 3e-2)
GRID_DECAYS = (1e-4, 0.1, 1.0)
RIDGE = dict(n=200, d=100, noise=1.0, steps=20_000, kappa0=1e-3)


# --------------------------------------------------------------------------- MNIST-1D
def mnist1d_data():
  x, y, x_test, y_test = mnist1d.load_data()
  perm = np.random.default_rng(0).permutation(len(x))
  val, train = perm[:HELD_OUT], perm[HELD_OUT:]
  return tuple(jnp.asarray(a) for a in (x[train], y[train], x[val], y[val], x_test, y_test))


def _xent(params, x, y):
  return jnp.mean(-jnp.sum(jax.nn.one_hot(y, 10) * jax.nn.log_softmax(models.mlp(params, x)), -1))


def mnist1d_methods(**kw):
  """name -> (make(h), held_out, values of h or None, learned); ``kw`` for the drop-ins."""
  grid = [(r, wd) for wd in GRID_DECAYS for r in GRID_RATES]
  return {
      "(a) step size": (lambda h: metaoptax.adamw(**kw), False, None, True),
      "(b) + b1, b2": (lambda h: metaoptax.adamw(learn=("b1", "b2"), **kw), False, None, True),
      "(c) + b1, b2, weight decay, held-out s": (
          lambda h: metaoptax.adamw(learn=("b1", "b2", "weight_decay"), **kw), True, None, True),
      "(d) + b1, b2, weight decay, held-out s for them only": (
          lambda h: metaoptax.adamw(learn=("b1", "b2", "weight_decay"), held_out="hyperparams",
                                    **kw), True, None, True),
      "(e) + weight decay, held-out s for it only": (
          lambda h: metaoptax.adamw(learn=("weight_decay",), held_out="hyperparams", **kw),
          True, None, True),
      "AdamW grid": (lambda h: optax.inject_hyperparams(optax.adamw)(
          learning_rate=h[0], weight_decay=h[1]), False, grid, False),
      "schedule-free AdamW (default rate)": (
          lambda h: optax.contrib.schedule_free_adamw(), False, None, False),
  }


def run_mnist1d(steps, chunk, seeds, progress, sizes=mnist1d.SIZES, task="MNIST-1D", only=None,
                **kw):
  """Every method of :func:`mnist1d_methods` on the MLP ``sizes``; ``kw`` to the drop-ins."""
  x, y, xv, yv, xt, yt = mnist1d_data()
  batch = mnist1d.BATCH

  def evaluate(p, s, sf):
    q = optax.contrib.schedule_free_eval_params(s, p) if sf else p
    acc = jnp.mean(jnp.argmax(models.mlp(q, xt), -1) == yt)
    return {"test": acc, "train_loss": _xent(q, x, y), "val_loss": _xent(q, xv, yv),
            "hyper": s}

  results = {}
  for name, (make, held_out, values, learned) in mnist1d_methods(**kw).items():
    if only and not any(o in name for o in only):
      continue
    sf = name.startswith("schedule-free")
    hs = [None] if values is None else values
    runs = [(h, seed) for h in hs for seed in range(seeds)]
    h_arr = jnp.asarray([h if h is not None else (0.0, 0.0) for h, _ in runs], jnp.float32)
    keys = jnp.stack([jax.random.key(1000 + seed) for _, seed in runs])

    def opt_of(h):
      return make(None if values is None else h)

    def record(p, s):
      e = evaluate(p, s, sf)
      if learned:
        hyper = metaoptax.hyperparameters(s)
        info = jnp.stack([jnp.atleast_1d(metaoptax.step_sizes(s))[0]] + [
            hyper.get(k, jnp.nan) for k in ("b1", "b2", "weight_decay")])
      else:
        info = jnp.full((4,), jnp.nan)
      return e["test"], e["train_loss"], e["val_loss"], info

    def init(key, h):
      p = models.init_mlp(jax.random.fold_in(key, 0), sizes)
      s = opt_of(h).init(p)
      return p, s, record(p, s)

    def chunk_fn(p, s, key, h):
      opt = opt_of(h)

      def body(carry, k):
        p, s = carry
        kb, kv = jax.random.split(k)
        idx = jax.random.randint(kb, (batch,), 0, x.shape[0])
        g = jax.grad(_xent)(p, x[idx], y[idx])
        if held_out:
          jdx = jax.random.randint(kv, (batch,), 0, xv.shape[0])
          u, s = opt.update(g, s, p, meta_grads=jax.grad(_xent)(p, xv[jdx], yv[jdx]))
        else:
          u, s = opt.update(g, s, p)
        return (optax.apply_updates(p, u), s), None

      (p, s), _ = jax.lax.scan(body, (p, s), jax.random.split(key, chunk))
      return p, s, record(p, s)

    p, s, first = jax.jit(jax.vmap(init))(keys, h_arr)
    data_keys = jax.vmap(lambda k: jax.random.split(jax.random.fold_in(k, 1), steps // chunk))(keys)
    compiled = jax.jit(jax.vmap(chunk_fn)).lower(p, s, data_keys[:, 0], h_arr).compile()
    recs = [jax.device_get(first)]
    bar = progress(total=steps, desc=f"{task} {name}")
    start = time.perf_counter()
    for i in range(steps // chunk):
      p, s, rec = compiled(p, s, data_keys[:, i], h_arr)
      recs.append(jax.device_get(rec))
      bar.update(chunk)
      bar.set_postfix_str(f"test acc {np.mean(rec[0]):.3f}")
    seconds = time.perf_counter() - start
    bar.close()
    test, train, val, info = (np.stack([np.asarray(r[j]) for r in recs], 1) for j in range(4))
    for v, h in enumerate(hs):
      rows = slice(v * seeds, (v + 1) * seeds)
      label = name if h is None else f"AdamW lr={h[0]:g}, wd={h[1]:g}"
      results[label] = {"test": test[rows], "train_loss": train[rows], "val_loss": val[rows],
                        "info": info[rows], "seconds": seconds / len(hs),
                        "family": "grid" if h is not None else "method"}
  steps_axis = np.arange(len(recs)) * chunk
  return steps_axis, results


def mnist1d_report(steps_axis, results, steps, title):
  grid = {k: v for k, v in results.items() if v["family"] == "grid"}
  best = max(grid, key=lambda k: np.mean(grid[k]["test"][:, -1])) if grid else None
  cps = [int(round(f * (len(steps_axis) - 1))) for f in FRACTIONS]
  lines = [f"## {title} ({steps} steps; 3,600 train / 400 held out / 1,000 test)", "",
           f"Best constant AdamW of the grid (by final test accuracy): **{best}**.", "",
           "test accuracy:", "",
           "| method | " + " | ".join(f"@{steps_axis[c]} ({int(f * 100)} %)"
                                      for c, f in zip(cps, FRACTIONS)) + " |",
           "|---|" + "---|" * len(cps)]
  rows = [k for k, v in results.items() if v["family"] == "method"] + ([best] if best else [])
  for k in rows:
    t = results[k]["test"]
    lines.append(f"| {k} | " + " | ".join(f"{t[:, c].mean():.3f} ± {t[:, c].std():.3f}"
                                          for c in cps) + " |")
  lines += ["", "train loss / held-out loss at the end:", "", "| method | train loss | held-out loss |",
            "|---|---|---|"]
  for k in rows:
    r = results[k]
    lines.append(f"| {k} | {r['train_loss'][:, -1].mean():.3g} ± {r['train_loss'][:, -1].std():.1g}"
                 f" | {r['val_loss'][:, -1].mean():.3g} ± {r['val_loss'][:, -1].std():.1g} |")
  lines += ["", "learned values at the end (mean over seeds): step size, b1, b2, weight decay;"
            " wall time of the 3 seeds:", "", "| method | α | b1 | b2 | κ | seconds |",
            "|---|---|---|---|---|---|"]
  for k in rows:
    info = results[k]["info"][:, -1]
    if np.all(np.isnan(info)):
      continue
    vals = [f"{v:.3g}" if np.isfinite(v) else "—" for v in np.nanmean(info, 0)]
    lines.append(f"| {k} | " + " | ".join(vals) + f" | {results[k]['seconds']:.0f} |")
  if not grid:
    return lines, best
  lines += ["", "Every AdamW of the grid, final test accuracy:", "",
            "| rate \\ weight decay | " + " | ".join(f"{wd:g}" for wd in GRID_DECAYS) + " |",
            "|---|" + "---|" * len(GRID_DECAYS)]
  for r in GRID_RATES:
    lines.append(f"| {r:g} | " + " | ".join(
        f"{grid[f'AdamW lr={r:g}, wd={wd:g}']['test'][:, -1].mean():.3f}" for wd in GRID_DECAYS)
        + " |")
  return lines, best


def mnist1d_plot(steps_axis, results, best, path):
  plt = _report.pyplot()
  fig, axes = plt.subplots(1, 3, figsize=(15, 4))
  for k, r in results.items():
    if r["family"] == "grid" and k != best:
      continue
    axes[0].plot(steps_axis, r["test"].mean(0), label=k)
    axes[1].semilogy(steps_axis, r["val_loss"].mean(0), label=k)
    if not np.all(np.isnan(r["info"])):
      axes[2].semilogy(steps_axis, np.nanmean(r["info"][:, :, 3], 0), label=k)
  axes[0].set(xlabel="step", ylabel="test accuracy", ylim=(0.4, 0.85))
  axes[1].set(xlabel="step", ylabel="held-out loss")
  axes[2].set(xlabel="step", ylabel="learned weight decay κ")
  axes[0].legend(fontsize=7)
  _report.save_figure(fig, path)


# --------------------------------------------------------------------------- ridge
def ridge_problem(seed, n, d, noise):
  rng = np.random.default_rng(seed)
  w_star = rng.normal(size=d) / np.sqrt(d) * 3
  scales = np.geomspace(1.0, 0.05, d)  # an ill-conditioned design
  X = rng.normal(size=(2 * n, d)) * scales
  y = X @ w_star + noise * rng.normal(size=2 * n)
  return X[:n], y[:n], X[n:], y[n:]


def ridge_solution(X, y, lam):
  n, d = X.shape
  return np.linalg.solve(X.T @ X / n + lam * np.eye(d), X.T @ y / n)


def run_ridge(steps, progress):
  n, d, noise = RIDGE["n"], RIDGE["d"], RIDGE["noise"]
  grid = np.geomspace(1e-5, 10.0, 61)
  out = {}
  for approximation in ("hessian_free", "l_approx"):
    for seed in range(SEEDS):
      X, y, Xv, yv = ridge_problem(seed, n, d, noise)
      val = lambda w: 0.5 * np.mean((Xv @ w - yv) ** 2)
      losses = [val(ridge_solution(X, y, lam)) for lam in grid]
      best = float(grid[int(np.argmin(losses))])
      Xj, yj, Xvj, yvj = (jnp.asarray(a, jnp.float32) for a in (X, y, Xv, yv))
      train_loss = lambda w: 0.5 * jnp.mean((Xj @ w - yj) ** 2)
      val_loss = lambda w: 0.5 * jnp.mean((Xvj @ w - yvj) ** 2)
      opt = metaoptax.sgd(learn=("weight_decay",), weight_decay=RIDGE["kappa0"],
                          approximation=approximation)

      def body(carry, _):
        w, s = carry
        u, s = opt.update(jax.grad(train_loss)(w), s, w, obj_fn=train_loss,
                          meta_grads=jax.grad(val_loss)(w))
        return (w + u, s), metaoptax.hyperparameters(s)["weight_decay"]

      w0 = jnp.zeros(d, jnp.float32)
      run = jax.jit(lambda w, s: jax.lax.scan(body, (w, s), None, length=steps))
      bar = progress(total=1, desc=f"ridge {approximation} seed {seed}")
      (w, s), kappas = run(w0, opt.init(w0))
      kappas = np.asarray(kappas)
      bar.update(1)
      bar.close()
      learned = float(kappas[-1])
      out.setdefault(approximation, []).append({
          "best_lambda": best, "learned": learned, "ratio": learned / best,
          "val_at_learned": val(ridge_solution(X, y, learned)), "val_at_best": min(losses),
          "val_run": float(val_loss(w)),
          "kappa_at": [float(kappas[int(f * steps) - 1]) for f in FRACTIONS],
          "curve": kappas[:: max(1, steps // 400)].tolist(), "grid_losses": losses})
  return grid, out


def ridge_report(out, steps):
  lines = [f"## Ridge regression (n = {RIDGE['n']}, d = {RIDGE['d']}, {steps} full-batch steps, "
           f"κ₀ = {RIDGE['kappa0']:g})", "",
           "Learned κ per seed against the grid's best penalty (61 values, 1e-5 … 10, "
           "closed-form ridge, best held-out loss); target: within 2x.", "",
           "| approximation | seed | best λ (grid) | learned κ | ratio | κ at " +
           " / ".join(f"{int(f * 100)} %" for f in FRACTIONS) +
           " | held-out loss at learned κ / at best λ |", "|---|---|---|---|---|---|---|"]
  for approximation, rows in out.items():
    for seed, r in enumerate(rows):
      lines.append(
          f"| {approximation} | {seed} | {r['best_lambda']:.3g} | {r['learned']:.3g} | "
          f"{r['ratio']:.2f} | " + " / ".join(f"{k:.3g}" for k in r["kappa_at"]) +
          f" | {r['val_at_learned']:.4f} / {r['val_at_best']:.4f} |")
  return lines


def ridge_plot(grid, out, path):
  plt = _report.pyplot()
  fig, axes = plt.subplots(1, 2, figsize=(11, 4))
  for approximation, rows in out.items():
    for seed, r in enumerate(rows):
      axes[0].semilogy(r["curve"], label=f"{approximation} seed {seed}",
                       ls="-" if approximation == "l_approx" else "--")
      axes[0].axhline(r["best_lambda"], color="gray", lw=0.5)
  for seed, r in enumerate(out["l_approx"]):
    axes[1].loglog(grid, r["grid_losses"], label=f"seed {seed}")
    axes[1].axvline(r["learned"], color=f"C{seed}", ls=":")
  axes[0].set(xlabel="step (x steps/400)", ylabel="learned κ (gray: grid's best λ)")
  axes[1].set(xlabel="λ", ylabel="held-out loss of the ridge solution (dotted: learned κ)")
  axes[0].legend(fontsize=7)
  _report.save_figure(fig, path)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--out", default=str(HERE / "out" / "learned_hyperparams"))
  parser.add_argument("--quick", action="store_true", help="a smoke run (short budgets)")
  parser.add_argument("--tasks", nargs="+", default=["mnist1d", "blockwise", "ridge"])
  parser.add_argument("--methods", nargs="+", default=None,
                      help="run only the methods whose names contain one of these")
  parser.add_argument("--steps", type=int, default=None, help="override the MNIST-1D budget")
  args = parser.parse_args(argv)
  out = pathlib.Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  commit = _report.git_commit()
  steps, chunk = (400, 200) if args.quick else (args.steps or 40_000, 1000)
  ridge_steps = 500 if args.quick else RIDGE["steps"]
  lines = ["# Learned hyperparameters and held-out meta-gradients", "",
           f"Commit `{commit}`; {SEEDS} seeds, mean ± std. Command: "
           f"`python benchmarks/learned_hyperparams.py{' --quick' if args.quick else ''}`.", ""]
  summary = {"commit": commit}
  tasks = {"mnist1d": ("MNIST-1D MLP 40-100-100-10", steps, {}),
           "blockwise": ("MNIST-1D 6-layer MLP, one step size per layer",
                         steps // 2, dict(sizes=blockwise.SIZES, blocks=blockwise.layer_labels()))}
  for task, (title, task_steps, kw) in tasks.items():
    if task not in args.tasks:
      continue
    kw = dict(kw)
    sizes = kw.pop("sizes", mnist1d.SIZES)
    steps_axis, results = run_mnist1d(task_steps, chunk, SEEDS, tqdm, sizes=sizes, task=task,
                                      only=args.methods, **kw)
    table, best = mnist1d_report(steps_axis, results, task_steps, title)
    lines += table + [""]
    mnist1d_plot(steps_axis, results, best, out / f"learned_hyperparams_{task}.png")
    summary[task] = {k: {"test_final": v["test"][:, -1].tolist()} for k, v in results.items()}
  if "ridge" in args.tasks:
    grid, ridge = run_ridge(ridge_steps, tqdm)
    lines += ridge_report(ridge, ridge_steps) + [""]
    ridge_plot(grid, ridge, out / "learned_hyperparams_ridge.png")
    summary["ridge"] = {a: [{k: v for k, v in r.items() if k not in ("curve", "grid_losses")}
                            for r in rows] for a, rows in ridge.items()}
  _report.write_table(lines, str(out / "learned_hyperparams.md"))
  (out / "learned_hyperparams.json").write_text(json.dumps(summary, indent=1))
  for f in sorted(out.iterdir()):
    print("wrote", f)


if __name__ == "__main__":
  main()
