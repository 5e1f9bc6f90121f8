"""Demonstration: a learned step size vs hand-tuned AdamW on scikit-learn's digits.

An MLP (64-128-128-10, ReLU, He init) trains with minibatches of 128 for
``--steps`` steps on cross-entropy with label smoothing 0.1. (Without smoothing
every rate of the grid drives the train loss to exactly 0 on digits and the
"best" step size is ill-posed; with it the loss has a floor, the entropy of the
smoothed targets, and minibatch noise persists at the optimum, so a step size
that is too large costs loss.) AdamW runs at each rate of a grid; metaoptax's
(AdamW, Adam) preset starts two orders of magnitude below a good fixed rate
(1e-5 vs 1e-3) and learns its step size while training. Under Adam
meta-updates log(alpha) moves by at most about eta = 1e-3 per step, so climbing
two orders (4.6 nats) needs >= 5k steps.

    python benchmarks/demo_digits.py              # ~3 min on 2 CPU cores
    python benchmarks/demo_digits.py --quick      # smoke run

Prints a table (train loss above its floor, test accuracy, wall time, peak and
final step size) and writes demo_digits.png and demo_digits.md into --out.
"""

from __future__ import annotations

import argparse
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import _report
import metaoptax

GRID = (1e-4, 3e-4, 1e-3, 3e-3, 1e-2)
SIZES = (64, 128, 128, 10)
BATCH = 128
CHUNK = 100  # steps per jitted scan; losses and step sizes are logged between chunks


def load_data(seed=0):
  digits = load_digits()
  x_train, x_test, y_train, y_test = train_test_split(
      digits.data.astype(np.float32), digits.target, test_size=360, random_state=seed,
      stratify=digits.target)
  mean, std = x_train.mean(0), x_train.std(0) + 1e-6
  return ((jnp.asarray((x_train - mean) / std), jnp.asarray(y_train)),
          (jnp.asarray((x_test - mean) / std), jnp.asarray(y_test)))


def init_mlp(key):
  params = []
  for k, (fan_in, fan_out) in zip(jax.random.split(key, len(SIZES) - 1), zip(SIZES, SIZES[1:])):
    w = jax.random.normal(k, (fan_in, fan_out)) * jnp.sqrt(2.0 / fan_in)  # He / Kaiming
    params.append({"w": w, "b": jnp.zeros(fan_out)})
  return params


def logits(params, x):
  for layer in params[:-1]:
    x = jax.nn.relu(x @ layer["w"] + layer["b"])
  return x @ params[-1]["w"] + params[-1]["b"]


LABEL_SMOOTHING = 0.1
NUM_CLASSES = 10
_p_true = 1 - LABEL_SMOOTHING + LABEL_SMOOTHING / NUM_CLASSES
_p_other = LABEL_SMOOTHING / NUM_CLASSES
# The smallest possible loss: the entropy of the smoothed targets.
LOSS_FLOOR = float(-_p_true * np.log(_p_true) - (NUM_CLASSES - 1) * _p_other * np.log(_p_other))


def loss_fn(params, x, y):
  targets = optax.smooth_labels(jax.nn.one_hot(y, NUM_CLASSES), LABEL_SMOOTHING)
  return optax.softmax_cross_entropy(logits(params, x), targets).mean()


def accuracy(params, x, y):
  return float(jnp.mean(jnp.argmax(logits(params, x), -1) == y))


def train(opt, data, steps, seed):
  (x_train, y_train), _ = data
  params = init_mlp(jax.random.key(seed))
  state = opt.init(params)

  @jax.jit
  def chunk(params, state, key):
    def one(carry, k):
      p, s = carry
      idx = jax.random.randint(k, (BATCH,), 0, x_train.shape[0])
      grads = jax.grad(loss_fn)(p, x_train[idx], y_train[idx])
      updates, s = opt.update(grads, s, p)
      return (optax.apply_updates(p, updates), s), None

    (params, state), _ = jax.lax.scan(one, (params, state), jax.random.split(key, CHUNK))
    return params, state, loss_fn(params, x_train, y_train)

  key = jax.random.key(seed + 1)
  log = {"step": [0], "loss": [float(loss_fn(params, x_train, y_train))], "step_size": []}
  is_meta = metaoptax.MetaOptimizeState in {type(s) for s in jax.tree.leaves(
      state, is_leaf=lambda s: isinstance(s, metaoptax.MetaOptimizeState))}
  if is_meta:
    log["step_size"].append(np.asarray(metaoptax.step_sizes(state)))
  start = time.perf_counter()
  for i in range(steps // CHUNK):
    key, sub = jax.random.split(key)
    params, state, train_loss = chunk(params, state, sub)
    log["step"].append((i + 1) * CHUNK)
    log["loss"].append(float(train_loss))
    if is_meta:
      log["step_size"].append(np.asarray(metaoptax.step_sizes(state)))
  log["seconds"] = time.perf_counter() - start
  log["params"] = params
  return log


def excess(loss):
  """Train loss above its floor (the entropy of the smoothed targets)."""
  return np.maximum(np.asarray(loss) - LOSS_FLOOR, 1e-9)


def mean_log_excess(log):
  return float(np.mean(np.log10(excess(log["loss"]))))


def peak_step_size(log):
  """(largest mean step size, the step at which it occurred)."""
  a = np.stack([np.atleast_1d(s).mean() for s in log["step_size"]])
  return float(a.max()), log["step"][int(a.argmax())]


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--steps", type=int, default=30_000)
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--init-step-size", type=float, default=1e-5)
  parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
  parser.add_argument("--quick", action="store_true", help="500 steps (smoke run)")
  args = parser.parse_args()
  steps = 500 if args.quick else args.steps
  os.makedirs(args.out, exist_ok=True)
  data = load_data(args.seed)
  runs = {}
  for lr in GRID:
    print(f"AdamW lr={lr:g} ...", flush=True)
    runs[f"AdamW {lr:g}"] = train(optax.adamw(lr, weight_decay=0.1), data, steps, args.seed)
  # 1e-3 is a good fixed rate (see the table); metaoptax starts 100x below it.
  best_lr = 1e-3
  start = args.init_step_size
  print(f"metaoptax starts at {start:g}", flush=True)
  for blocks in ("scalar", "per_leaf"):
    name = f"metaoptax (AdamW, Adam) {blocks}, start {start:g}"
    print(f"{name} ...", flush=True)
    runs[name] = train(metaoptax.presets.adamw_adam(start, blocks=blocks), data, steps, args.seed)

  (_, _), (x_test, y_test) = data
  lines = [f"Digits MLP {'-'.join(map(str, SIZES))}, batch {BATCH}, {steps} steps, seed {args.seed}, "
           f"label smoothing {LABEL_SMOOTHING} (train-loss floor {LOSS_FLOOR:.4f})",
           "", "| method | final train loss - floor | mean log10 (train loss - floor) | test accuracy |"
           " wall time (s) | peak step size (at step) | final step size |",
           "|---|---|---|---|---|---|---|"]
  for name, log in runs.items():
    if log["step_size"]:
      alpha = "%.3g" % float(np.mean(log["step_size"][-1]))
      peak = "%.3g (%d)" % peak_step_size(log)
    else:
      alpha = peak = name.split()[1]
    lines.append(f"| {name} | {excess(log['loss'][-1]):.2e} | {mean_log_excess(log):.2f} | "
                 f"{accuracy(log['params'], x_test, y_test):.4f}"
                 f" | {log['seconds']:.1f} | {peak} | {alpha} |")
  _report.write_table(lines, os.path.join(args.out, "demo_digits.md"))
  plot(runs, os.path.join(args.out, "demo_digits.png"), best_lr)
  print(f"wrote {os.path.join(args.out, 'demo_digits.png')}")


def plot(runs, path, best_lr):
  plt = _report.pyplot()
  fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
  for name, log in runs.items():
    style = "-" if log["step_size"] else ":"
    ax1.plot(log["step"], excess(log["loss"]), style, label=name, lw=2 if log["step_size"] else 1.2)
    if log["step_size"]:
      sizes = np.stack([np.atleast_1d(s) for s in log["step_size"]])
      for j in range(sizes.shape[1]):
        ax2.plot(log["step"], sizes[:, j], lw=1.5,
                 label=name if j == 0 else None, color=ax1.lines[-1].get_color(),
                 alpha=1.0 if sizes.shape[1] == 1 else 0.6)
  for lr in GRID:
    ax2.axhline(lr, color="gray", lw=0.8, ls=":" if lr != best_lr else "--")
    ax2.text(0, lr, f" AdamW {lr:g}", fontsize=7, va="bottom",
             color="gray")
  ax1.set(yscale="log", xlabel="step", ylabel="train loss - floor (full train set)",
          title="training loss")
  ax2.set(yscale="log", xlabel="step", ylabel="step size alpha",
          title="learned step size (per-leaf: one line per array)")
  ax1.legend(fontsize=7)
  ax2.legend(fontsize=7, loc="lower right")
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


if __name__ == "__main__":
  main()
