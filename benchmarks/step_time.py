"""Train-step time and optimizer-state memory of metaoptax vs optax.adamw.

An MLP 784-1024-512-10 (1.33M parameters), batch 128, cross-entropy. Each
method's train step (loss + gradient + optimizer update + apply, one jitted
function) runs side by side in one process; repeats are interleaved across
methods and the median is reported as a ratio to optax.adamw's step.

    python benchmarks/step_time.py            # ~2 min on 2 CPU cores (writes benchmarks/out/)
    python benchmarks/step_time.py --quick    # smoke run
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
import metaoptax
from _optimizer_step import accessed_bytes, nbytes, update_and_apply

#: The files under benchmarks/results/ that this script writes (glob patterns;
#: tests/integration/test_repository_shape.py checks every committed result against them).
OUTPUTS = ("step_time.md", "step_time.png",
           # --only "metaoptax.adamw(" (the README's row), on CPU and on a GPU (gpu_step_time.sh)
           "step_time_adamw.md", "step_time_adamw.png",
           "step_time_adamw_h*.md", "step_time_adamw_h*.png",)


TARGETS = {"Hessian-free": 1.10, "exact 2x2": 2.5, "averaged": 1.15,
           # learned hyperparameters: (1.10 + 0.05 k) for k of them
           "learn k=1": 1.15, "learn k=2": 1.20, "learn k=3": 1.25}
NOTES = """Notes: "no guard" (`skip_nonfinite=False`) passes the gradient and the trace through
selections on an always-true predicate of the meta-gradient: like the guard's selections,
they order the reads of the old trace and params before their in-place updates (without
them XLA copied the trace and two weight matrices: 127 instead of 113 MB). The exact variants
need one Hessian-vector product per block column; the reference row is the cost of one.
The scalar exact steps run the reference's 22 matrix products (the meta-gradient is
computed once); the rest is elementwise memory traffic (last column, XLA's cost analysis):
XLA on CPU does not fuse kernels with several outputs, so each params-sized output
(weights, Adam's moments, the trace's three columns) is a kernel re-reading its inputs,
and the guard's finiteness check of the new trace recomputes it before selecting it.
Beyond the caches the time ratio tends to the ratio of bytes accessed."""


class AdamWPlusHVP:
  """optax.adamw plus one Hessian-vector product of the loss per step: the floor
  of what an exact variant (one HVP per block column) can cost."""

  def __init__(self):
    self.inner = optax.adamw(1e-3, weight_decay=0.1)

  def init(self, params):
    return (self.inner.init(params), jax.tree.map(jnp.ones_like, params))

  def update(self, grads, state, params, obj_fn):
    inner_state, v = state
    _, hv = jax.jvp(jax.grad(obj_fn), (params,), (v,))
    updates, inner_state = self.inner.update(grads, inner_state, params)
    return updates, (inner_state, jax.tree.map(lambda h: h / (1 + jnp.abs(h)), hv))


def methods():
  """name: (optimizer, the extra argument its update reads (``obj_fn``, ``validation_loss``
  or ``None``), its target's key in ``TARGETS`` or ``None``)."""
  adam = metaoptax.presets.adamw_adam
  return {
      "optax.adamw": (optax.adamw(1e-3, weight_decay=0.1), None, None),
      "optax.adamw + one HVP (reference)": (AdamWPlusHVP(), "obj_fn", None),
      "metaoptax.adamw() (HF scalar, climb, average)": (
          metaoptax.adamw(1e-6, weight_decay=0.1), None, "averaged"),
      "metaoptax.adamw(climb_memory=0) (HF scalar, climb, average)": (
          metaoptax.adamw(1e-6, weight_decay=0.1, climb_memory=0), None, "averaged"),
      "metaoptax.overfitting_gate(metaoptax.adamw())": (
          metaoptax.overfitting_gate(metaoptax.adamw(1e-6, weight_decay=0.1)),
          "validation_loss", "averaged"),
      "metaoptax.adamw(average=None) (HF scalar, climb)": (
          metaoptax.adamw(1e-6, weight_decay=0.1, average=None), None, "Hessian-free"),
      "metaoptax.adamw(learn=('weight_decay',))": (
          metaoptax.adamw(1e-6, weight_decay=0.1, learn=("weight_decay",), average=None), None,
          "learn k=1"),
      "metaoptax.adamw(learn=('b1', 'b2'))": (
          metaoptax.adamw(1e-6, weight_decay=0.1, learn=("b1", "b2"), average=None), None,
          "learn k=2"),
      "metaoptax.adamw(learn=('b1', 'b2', 'weight_decay'))": (
          metaoptax.adamw(1e-6, weight_decay=0.1, learn=("b1", "b2", "weight_decay"),
                          average=None), None, "learn k=3"),
      "(AdamW, Adam) HF scalar": (adam(1e-6), None, "Hessian-free"),
      "(AdamW, Adam) HF per_leaf": (adam(1e-6, blocks="per_leaf"), None, "Hessian-free"),
      "(AdamW, Adam) HF per_param": (adam(1e-6, blocks="per_param"), None, None),
      "(AdamW, Adam) HF scalar, no guard": (adam(1e-6, skip_nonfinite=False), None, None),
      "(Lion, Lion) HF scalar": (metaoptax.presets.lion_lion(1e-6), None, None),
      "(AdamW, Adam) exact 2x2 scalar": (adam(1e-6, approximation="2x2"), "obj_fn", "exact 2x2"),
      "(AdamW, Adam) exact L scalar": (adam(1e-6, approximation="l_approx"), "obj_fn", None),
      "(AdamW, Adam) exact 2x2 per_leaf": (adam(1e-6, approximation="2x2", blocks="per_leaf"),
                                           "obj_fn", None),
  }


def init_mlp(key, sizes):
  params = []
  for k, (a, b) in zip(jax.random.split(key, len(sizes) - 1), zip(sizes, sizes[1:])):
    params.append({"w": jax.random.normal(k, (a, b)) * jnp.sqrt(2.0 / a), "b": jnp.zeros(b)})
  return params


def loss_fn(params, x, y):
  for layer in params[:-1]:
    x = jax.nn.relu(x @ layer["w"] + layer["b"])
  logits = x @ params[-1]["w"] + params[-1]["b"]
  return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()


def make_step(opt, extra_arg, donate=True):
  """The jitted train step. ``extra_arg="validation_loss"`` passes the batch's loss (from
  ``value_and_grad``) as the held-out loss: the optimizer's cost, without a user's
  evaluation."""
  def step(params, state, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    extra = {"obj_fn": {"obj_fn": lambda p: loss_fn(p, x, y)},
             "validation_loss": {"validation_loss": loss}}.get(extra_arg, {})
    return update_and_apply(opt, grads, state, params, **extra)

  return jax.jit(step, donate_argnums=(0, 1) if donate else ())


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--repeats", type=int, default=9)
  parser.add_argument("--steps", type=int, default=30)
  parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "out"),
                      help="output folder (default: benchmarks/out/, git-ignored; the committed "
                           "results: --out benchmarks/results)")
  parser.add_argument("--quick", action="store_true")
  parser.add_argument("--only", default=None,
                      help="run only the methods whose name contains this text (and optax.adamw)")
  parser.add_argument("--donate", choices=("both", "yes", "no"), default="both",
                      help="donate params and state to the step (buffers updated in place)")
  args = parser.parse_args(argv)
  sizes = (784, 64, 10) if args.quick else (784, 1024, 512, 10)
  if args.quick:
    args.repeats, args.steps = 3, 5
  os.makedirs(args.out, exist_ok=True)
  key = jax.random.key(0)
  x = jax.random.normal(key, (128, sizes[0]))
  y = jax.random.randint(key, (128,), 0, 10)
  params0 = init_mlp(key, sizes)
  n_params = sum(p.size for p in jax.tree.leaves(params0))
  table = methods()
  if args.only:
    table = {k: v for k, v in table.items() if k == "optax.adamw" or args.only in k}
  modes = {"both": (True, False), "yes": (True,), "no": (False,)}[args.donate]
  runs = {}
  for donate in modes:
    for name, (opt, extra_arg, _) in table.items():
      params = jax.tree.map(jnp.copy, params0)
      state = opt.init(params)
      step = make_step(opt, extra_arg, donate).lower(params, state, x, y).compile()
      params, state = step(params, state, x, y)
      jax.block_until_ready(params)
      runs[name, donate] = {"step": step, "params": params, "state": state, "times": [],
                            "state_bytes": nbytes(state), "accessed": accessed_bytes(step)}
      print(f"compiled {name} (donated: {donate})", flush=True)
  for r in range(args.repeats):
    for run in runs.values():
      params, state = run["params"], run["state"]
      start = time.perf_counter()
      for _ in range(args.steps):
        params, state = run["step"](params, state, x, y)
      jax.block_until_ready(params)
      run["times"].append((time.perf_counter() - start) / args.steps)
      run["params"], run["state"] = params, state
    print(f"repeat {r + 1}/{args.repeats}", flush=True)
  ref_bytes = runs["optax.adamw", modes[0]]["state_bytes"]
  params_bytes = nbytes(params0)
  commit = _report.git_commit(short=True)
  lines = [f"MLP {'-'.join(map(str, sizes))} ({n_params:,} params), batch 128, "
           f"{args.repeats} interleaved repeats x {args.steps} steps, {os.cpu_count()} CPU cores, "
           f"jax {jax.__version__}, commit `{commit}`. Ratios are to optax.adamw's step with the "
           "same donation (params and state donated to the jitted step, or not).", "",
           "| method | donated | median step (ms) | ratio to adamw | target | state (MB) | "
           "extra params-sized vectors | accessed per step (MB, vs adamw) |",
           "|---|---|---|---|---|---|---|---|"]
  ratios = {}
  for (name, donate), run in runs.items():
    med = np.median(run["times"])
    ref = np.median(runs["optax.adamw", donate]["times"])
    if donate == modes[0]:
      ratios[name] = med / ref
    target = table[name][2]
    extra = (run["state_bytes"] - ref_bytes) / params_bytes
    accessed = run["accessed"] / runs["optax.adamw", donate]["accessed"]
    lines.append(f"| {name} | {'yes' if donate else 'no'} | {1e3 * med:.2f} | {med / ref:.3f} | "
                 f"{'<= %.2f' % TARGETS[target] if target else '-'} | "
                 f"{run['state_bytes'] / 2**20:.2f} | {extra:+.3f} | "
                 f"{run['accessed'] / 2**20:.1f} ({accessed:.2f}x) |")
  lines += ["", NOTES]
  if ("(AdamW, Adam) exact 2x2 per_leaf", modes[0]) in runs:
    lines += ["", per_leaf_floor(runs, modes, sizes)]
  _report.write_table(lines, os.path.join(args.out, "step_time.md"))
  plot(ratios, table, os.path.join(args.out, "step_time.png"))


def per_leaf_floor(runs, modes, sizes):
  """The per-leaf 2x2 step against 1 + m x (one HVP's cost), m = the number of leaves."""
  m = 2 * (len(sizes) - 1)
  parts = []
  for donate in modes:
    ratio = lambda name: np.median(runs[name, donate]["times"]) / np.median(
        runs["optax.adamw", donate]["times"])
    floor = 1 + m * (ratio("optax.adamw + one HVP (reference)") - 1)
    parts.append(f"{ratio('(AdamW, Adam) exact 2x2 per_leaf'):.2f}x against "
                 f"1 + {m} x {ratio('optax.adamw + one HVP (reference)') - 1:.2f} = "
                 f"{floor:.2f}x ({'donated' if donate else 'not donated'})")
  return (f"Per-leaf 2x2 ({m} blocks, one Hessian-vector product each): " + "; ".join(parts)
          + ".")


def plot(ratios, table, path):
  plt = _report.pyplot()
  fig, ax = plt.subplots(figsize=(9, 4))
  names = [n for n in ratios if "per_leaf" not in n or "exact" not in n]  # table only: ~20x
  ax.barh(names, [ratios[n] for n in names], color="tab:blue")
  for target, value in TARGETS.items():
    ax.axvline(value, ls="--", color="tab:red" if "exact" in target else "tab:green", lw=1,
               label=f"target {target} ({value}x)")
  ax.axvline(1.0, color="black", lw=0.8)
  ax.invert_yaxis()
  ax.set_xlabel("train-step time / optax.adamw train-step time (median)")
  ax.legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


if __name__ == "__main__":
  main()
