"""100k steps of weight-wise Hessian-free MetaOptimize on noisy problems.

Every preset with ``blocks="per_param"`` (one learned step size per weight) and
``approximation="hessian_free"``, from the paper's ``alpha_0 = 1e-6`` and default
hyperparameters, trains for 100k steps on two streaming problems with fresh
minibatch noise at every step:

* noisy linear regression: 32 features with scales log-spaced in [0.1, 10]
  (Hessian condition number 1e4), ``y = x.w* + 0.5 noise``, minibatch 8; the
  population loss has the closed form ``0.5 sum s_i^2 (w_i - w*_i)^2 + 0.125``;
* a tanh MLP 8-32-1 (321 weights) regressing a random teacher MLP plus noise
  (std 0.1), minibatch 16; loss on a fixed held-out set of 2048 examples.

The run is ``lax.scan`` in chunks of 1000 steps; after every chunk it records
quantiles of the 321 / 32 step sizes, the loss, the largest trace entry and the
guard counters, and it tracks the largest step size seen at any step. A run is
*stable* when params, step sizes and trace stay finite at every recorded point
and no step size reaches the upper bound of ``step_size_bounds`` (1.0).

    python benchmarks/stability_long_run.py            # ~5 min on 2 CPU cores
    python benchmarks/stability_long_run.py --quick    # 5k steps, smoke run

Writes ``benchmarks/results/stability_long_run.md`` and ``.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

import _report
import metaoptax
from metaoptax._src import tree_utils
from metaoptax.step_size.presets import PRESETS

RESULTS = os.path.join(os.path.dirname(__file__), "results")
CHUNK = 1000
QUANTILES = (0.0, 0.01, 0.5, 0.99, 1.0)
UPPER_BOUND = 1.0  # the default step_size_bounds' upper end


class Problem:
  """A streaming noisy regression: ``sample(key) -> batch``, ``loss``, ``evaluate``."""

  def __init__(self, name, params, loss, sample, evaluate, floor):
    self.name, self.params, self.loss = name, params, loss
    self.sample, self.evaluate, self.floor = sample, evaluate, floor


def linear_regression(dim=32, batch=8, noise=0.5, seed=0) -> Problem:
  k_w, = jax.random.split(jax.random.key(seed), 1)
  scales = jnp.logspace(-1.0, 1.0, dim)
  w_star = jax.random.normal(k_w, (dim,))

  def sample(key):
    kx, kn = jax.random.split(key)
    x = jax.random.normal(kx, (batch, dim)) * scales
    return x, x @ w_star + noise * jax.random.normal(kn, (batch,))

  def loss(p, data):
    x, y = data
    return 0.5 * jnp.mean((x @ p["w"] + p["b"] - y) ** 2)

  def evaluate(p):
    return 0.5 * jnp.sum((scales * (p["w"] - w_star)) ** 2) + 0.5 * p["b"] ** 2 + 0.5 * noise**2

  params = {"w": jnp.zeros(dim), "b": jnp.zeros(())}
  return Problem("noisy linear regression (33 weights)", params, loss, sample, evaluate,
                 0.5 * noise**2)


def mlp(sizes=(8, 32, 1), batch=16, noise=0.1, seed=0) -> Problem:
  keys = jax.random.split(jax.random.key(seed), 4)

  def init(key):
    layers = []
    for k, (m, n) in zip(jax.random.split(key, len(sizes) - 1), zip(sizes[:-1], sizes[1:])):
      layers.append({"w": jax.random.normal(k, (m, n)) / jnp.sqrt(m), "b": jnp.zeros(n)})
    return layers

  def forward(p, x):
    for layer in p[:-1]:
      x = jnp.tanh(x @ layer["w"] + layer["b"])
    return (x @ p[-1]["w"] + p[-1]["b"])[:, 0]

  teacher = init(keys[0])
  x_test = jax.random.normal(keys[1], (2048, sizes[0]))
  y_test = forward(teacher, x_test) + noise * jax.random.normal(keys[2], (2048,))

  def sample(key):
    kx, kn = jax.random.split(key)
    x = jax.random.normal(kx, (batch, sizes[0]))
    return x, forward(teacher, x) + noise * jax.random.normal(kn, (batch,))

  def loss(p, data):
    x, y = data
    return 0.5 * jnp.mean((forward(p, x) - y) ** 2)

  params = init(keys[3])
  n = sum(x.size for x in jax.tree.leaves(params))
  return Problem(f"tanh MLP {'-'.join(map(str, sizes))} ({n} weights)", params, loss, sample,
                 lambda p: loss(p, (x_test, y_test)), 0.5 * noise**2)


def make_chunk(opt, problem: Problem):
  """``(carry, key) -> (carry, record)``: CHUNK steps under lax.scan."""

  def body(carry, key):
    params, state, max_alpha = carry
    grads = jax.grad(problem.loss)(params, problem.sample(key))
    updates, state = opt.update(grads, state, params)
    params = optax.apply_updates(params, updates)
    alpha = jnp.concatenate([a.reshape(-1) for a in
                             jax.tree.leaves(metaoptax.step_sizes(state))])
    return (params, state, jnp.maximum(max_alpha, jnp.max(alpha))), None

  @jax.jit
  def chunk(carry, key):
    carry, _ = jax.lax.scan(body, carry, jax.random.split(key, CHUNK))
    params, state, max_alpha = carry
    alpha = jnp.concatenate([a.reshape(-1) for a in
                             jax.tree.leaves(metaoptax.step_sizes(state))])
    trace = jnp.concatenate([h.reshape(-1) for h in jax.tree.leaves(metaoptax.sensitivity_trace(state))])
    finite = tree_utils.all_finite(params) & tree_utils.all_finite(state)
    record = {
        "alpha_quantiles": jnp.quantile(alpha, jnp.asarray(QUANTILES)),
        "max_alpha_so_far": max_alpha,
        "loss": problem.evaluate(params),
        "max_abs_trace": jnp.max(jnp.abs(trace)),
        "finite": finite,
        "skipped": state.skipped_steps,
        "resets": state.trace_resets,
    }
    return carry, record

  return chunk


def run(preset: str, problem: Problem, steps: int, seed: int = 0):
  opt = PRESETS[preset](1e-6, blocks="per_param")
  carry = (problem.params, opt.init(problem.params), jnp.zeros(()))
  chunk = make_chunk(opt, problem)
  records = []
  start = time.perf_counter()
  for i, key in enumerate(jax.random.split(jax.random.key(seed), steps // CHUNK)):
    carry, record = chunk(carry, key)
    records.append(jax.tree.map(np.asarray, record))
    if (i + 1) % max(1, steps // CHUNK // 5) == 0:
      r = records[-1]
      print(f"  {preset:18s} step {(i + 1) * CHUNK:>7d}: loss {float(r['loss']):.4g}, "
            f"alpha median {r['alpha_quantiles'][2]:.3g} max {r['alpha_quantiles'][4]:.3g}, "
            f"|h| max {float(r['max_abs_trace']):.3g}, {time.perf_counter() - start:.0f}s",
            flush=True)
  stacked = {k: np.stack([r[k] for r in records]) for k in records[0]}
  stacked["seconds"] = time.perf_counter() - start
  stacked["initial_loss"] = float(problem.evaluate(problem.params))
  return stacked


def summarize(name, problem, r):
  q = r["alpha_quantiles"]
  stable = bool(r["finite"].all()) and float(r["max_alpha_so_far"].max()) < UPPER_BOUND
  return (f"| {name} | {'yes' if stable else '**no**'} | {r['initial_loss']:.3g} | "
          f"{float(r['loss'].min()):.3g} | {float(r['loss'][-1]):.3g} | {problem.floor:.3g} | "
          f"{q[-1, 0]:.2g} / {q[-1, 2]:.2g} / {q[-1, 4]:.2g} | "
          f"{float(r['max_alpha_so_far'].max()):.3g} | {float(r['max_abs_trace'].max()):.3g} | "
          f"{int(r['skipped'][-1])} / {int(r['resets'][-1])} | {r['seconds']:.0f} |")


def plot(problems, results, path):
  plt = _report.pyplot()
  fig, axes = plt.subplots(2, len(problems), figsize=(6 * len(problems), 8), squeeze=False)
  colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
  for col, problem in enumerate(problems):
    ax_a, ax_l = axes[0, col], axes[1, col]
    for i, (preset, r) in enumerate(results[problem.name].items()):
      steps = CHUNK * np.arange(1, len(r["loss"]) + 1)
      q, c = r["alpha_quantiles"], colors[i % len(colors)]
      ax_a.fill_between(steps, q[:, 1], q[:, 3], color=c, alpha=0.15)
      ax_a.plot(steps, q[:, 2], color=c, label=preset)
      ax_a.plot(steps, q[:, 4], color=c, ls=":", lw=0.8)
      ax_l.plot(steps, r["loss"] - problem.floor, color=c, label=preset)
    ax_a.set(xscale="log", yscale="log", xlabel="step", ylabel="step size",
             title=f"{problem.name}\nmedian (line), 1-99% (band), max (dotted)")
    ax_l.set(xscale="log", yscale="log", xlabel="step", ylabel="loss - noise floor")
    ax_a.legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  print(f"wrote {path}")


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--steps", type=int, default=100_000)
  parser.add_argument("--quick", action="store_true", help="5k steps")
  parser.add_argument("--presets", nargs="*", default=list(PRESETS))
  args = parser.parse_args(argv)
  steps = 5_000 if args.quick else args.steps
  problems = [linear_regression(), mlp()]
  results = {}
  for problem in problems:
    print(f"{problem.name}: {steps} steps per preset", flush=True)
    results[problem.name] = {p: run(p, problem, steps) for p in args.presets}
  lines = [f"# Stability: {steps} steps of weight-wise Hessian-free MetaOptimize", "",
           f"jax {jax.__version__}, {jax.devices()[0].platform}; every preset with "
           "`blocks=\"per_param\"`, `approximation=\"hessian_free\"`, alpha_0 = 1e-6, the "
           "paper's defaults, fresh minibatch noise every step. Stable = params, step sizes "
           f"and trace finite at all {steps // CHUNK} checkpoints (every {CHUNK} steps) and "
           f"no step size reaching the upper bound {UPPER_BOUND} at any step. Step-size "
           "quantiles are over the weights at the last step.", ""]
  for problem in problems:
    lines += [f"## {problem.name}", "",
              "| preset | stable | initial loss | min loss | final loss | noise floor | "
              "final alpha min / median / max | max alpha, any step | max abs trace | "
              "skipped / trace resets | seconds |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    lines += [summarize(p, problem, r) for p, r in results[problem.name].items()]
    lines.append("")
  lines.append("Plot: [stability_long_run.png](stability_long_run.png).")
  suffix = "" if steps == 100_000 else f"_{steps}"
  _report.write_table(lines, os.path.join(RESULTS, f"stability_long_run{suffix}.md"))
  plot(problems, results, os.path.join(RESULTS, f"stability_long_run{suffix}.png"))
  summary = {problem.name: {p: {"stable": bool(r["finite"].all()) and
                                float(r["max_alpha_so_far"].max()) < UPPER_BOUND,
                                "max_alpha": float(r["max_alpha_so_far"].max()),
                                "final_loss": float(r["loss"][-1])}
                            for p, r in results[problem.name].items()}
             for problem in problems}
  print(json.dumps(summary, indent=1))


if __name__ == "__main__":
  main()
