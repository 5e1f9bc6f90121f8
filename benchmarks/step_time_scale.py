"""How the overhead over optax.adamw grows with the parameter count (1M, 10M, 100M).

MLPs 1024-W-W-10 with W chosen for ~1M, ~10M and ~100M parameters, batch 128.
For each size and method, with and without donated params and state:

* the optimizer-state bytes (``jax.eval_shape`` of ``init``) and XLA's memory
  analysis of the compiled train step (arguments, outputs, aliased bytes,
  temporaries; peak = arguments + outputs - aliased + temporaries), compiled
  from shapes alone, so the 100M row needs no memory to measure;
* the median train-step time as a ratio to ``optax.adamw``'s step with the same
  donation, each method paired with ``optax.adamw`` in one process, their
  repeats interleaved.

    python benchmarks/step_time_scale.py                 # ~25 min on 2 CPU cores, 14 GB
    python benchmarks/step_time_scale.py --sizes 1M,10M  # skip the 100M row
    python benchmarks/step_time_scale.py --quick         # smoke run
    python benchmarks/step_time_scale.py --bytes --out benchmarks/results
        # XLA's bytes accessed of the donated step at 1M, 10M, 100M (compile only, ~2 min;
        # ``_step_bytes``): step_bytes.{json,md,png}
    python benchmarks/step_time_scale.py --update --sizes 1M
        # the optimizer step alone (update + apply_updates) timed against optax.adamw's
        # (``_update_time``): update_time.{json,md,png}
"""

from __future__ import annotations

import argparse
import os
import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from tqdm.auto import tqdm

import _report
import _step_bytes
import _update_time
import metaoptax
from step_time import init_mlp, loss_fn, make_step, nbytes

#: The files under benchmarks/results/ that this script writes (glob patterns;
#: tests/integration/test_repository_shape.py checks every committed result against them).
OUTPUTS = ("step_time_scale.md", "step_time_scale.png",
           "step_bytes.json", "step_bytes.md", "step_bytes.png",  # with --bytes
           # on a GPU (--suffix _h100, _h200):
           "step_time_scale_h*.md", "step_time_scale_h*.png",
           "step_bytes_h*.json", "step_bytes_h*.md", "step_bytes_h*.png",
           # with --update, on CPU and on a GPU
           "update_time*.json", "update_time*.md", "update_time*.png")


#: Hidden width W of a 1024-W-W-10 MLP for each size (1024 W + W^2 + 11 W + 10 params).
WIDTHS = {"0.1M": 90, "1M": 580, "10M": 2660, "100M": 9480}
BATCH = 128
OUT = pathlib.Path(__file__).resolve().parent / "out"


def methods():
  adam = metaoptax.presets.adamw_adam
  return {
      "optax.adamw": (optax.adamw(1e-3, weight_decay=0.1), None),
      "metaoptax.adamw()": (metaoptax.adamw(1e-6, weight_decay=0.1), None),
      "(AdamW, Adam) HF scalar": (adam(1e-6), None),
      "(AdamW, Adam) HF per_leaf": (adam(1e-6, blocks="per_leaf"), None),
      "(AdamW, Adam) HF per_param": (adam(1e-6, blocks="per_param"), None),
      "(AdamW, Adam) exact 2x2 scalar": (adam(1e-6, approximation="2x2"), "obj_fn"),
  }


def memory_row(opt, extra_arg, donate, params, x, y):
  """State bytes and the compiled step's memory analysis, from shapes alone."""
  shapes = jax.eval_shape(lambda: params)
  state = jax.eval_shape(opt.init, shapes)
  compiled = make_step(opt, extra_arg, donate).lower(shapes, state, x, y).compile()
  m = compiled.memory_analysis()
  peak = (m.argument_size_in_bytes + m.output_size_in_bytes - m.alias_size_in_bytes
          + m.temp_size_in_bytes)
  return {"state": nbytes(state), "temp": m.temp_size_in_bytes, "peak": peak,
          "aliased": m.alias_size_in_bytes}


def time_size(table, donations, params0, x, y, repeats, steps, bar):
  """Per (method, donation): the median step time and its ratio to optax.adamw's.

  Each method is timed in a pair with optax.adamw under the same donation, their
  repeats interleaved, and its ratio is to the adamw median of that pair: only two
  runs' params and states are alive at a time (at 100M parameters all of them
  would not fit in 24 GB).
  """
  out = {}
  reference = next(iter(table))
  for donate in donations:
    ref = _compiled_run(*table[reference], donate, params0, x, y)
    ref_times = []
    for name, (opt, extra_arg) in table.items():
      if name == reference:
        continue
      run = _compiled_run(opt, extra_arg, donate, params0, x, y)
      pair = {reference: [], name: []}
      for _ in range(repeats):
        for key, r in ((reference, ref), (name, run)):
          pair[key].append(_timed(r, x, y, steps))
        bar.update(1)
      ref_times += pair[reference]
      seconds = float(np.median(pair[name]))
      out[name, donate] = (seconds, seconds / float(np.median(pair[reference])))
      del run
    out[reference, donate] = (float(np.median(ref_times)), 1.0)
  return out


def _compiled_run(opt, extra_arg, donate, params0, x, y):
  params = jax.tree.map(jnp.copy, params0)
  state = opt.init(params)
  step = make_step(opt, extra_arg, donate)
  params, state = step(params, state, x, y)  # compile
  jax.block_until_ready(params)
  return {"step": step, "params": params, "state": state}


def _timed(run, x, y, steps):
  params, state = run["params"], run["state"]
  start = time.perf_counter()
  for _ in range(steps):
    params, state = run["step"](params, state, x, y)
  jax.block_until_ready(params)
  run["params"], run["state"] = params, state
  return (time.perf_counter() - start) / steps


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--sizes", default="1M,10M,100M", help=f"of {', '.join(WIDTHS)}")
  parser.add_argument("--repeats", type=int, default=5)
  parser.add_argument("--steps", type=int, default=5)
  parser.add_argument("--out", type=pathlib.Path, default=OUT,
                      help="output folder (default: benchmarks/out, git-ignored)")
  parser.add_argument("--suffix", default="", help="of the file names, e.g. _h200")
  parser.add_argument("--quick", action="store_true", help="0.1M only, 2 repeats x 2 steps")
  parser.add_argument("--bytes", action="store_true",
                      help="XLA's bytes accessed of each step instead of its time (with "
                           "--quick: 1M only)")
  parser.add_argument("--update", action="store_true",
                      help="time the optimizer step alone (sizes of --bytes: 1M, 10M, 100M; "
                           "with --quick: 1M, 2 repeats x 2 steps)")
  args = parser.parse_args(argv)
  if args.bytes:
    args.out.mkdir(parents=True, exist_ok=True)
    _step_bytes.write(args.out, ["1M"] if args.quick else list(_step_bytes.SIZES),
                      _report.git_commit(short=True), args.suffix)
    return
  if args.update:
    args.out.mkdir(parents=True, exist_ok=True)
    sizes = ["1M"] if args.quick else args.sizes.split(",")
    repeats, steps = (2, 2) if args.quick else (args.repeats, args.steps)
    _update_time.write(args.out, sizes, repeats, steps, _report.git_commit(short=True),
                       args.suffix)
    return
  sizes = ["0.1M"] if args.quick else args.sizes.split(",")
  if args.quick:
    args.repeats, args.steps = 2, 2
  args.out.mkdir(parents=True, exist_ok=True)
  table = methods()
  donations = (True, False)
  key = jax.random.key(0)
  x = jax.random.normal(key, (BATCH, 1024))
  y = jax.random.randint(key, (BATCH,), 0, 10)
  start, commit = time.perf_counter(), _report.git_commit(short=True)  # the code that runs
  rows, ratios = [], {}
  work = len(sizes) * (len(table) - 1) * len(donations) * args.repeats
  with tqdm(total=work, desc="step time by size", unit="run") as bar:
    for size in sizes:
      width = WIDTHS[size]
      params0 = init_mlp(key, (1024, width, width, 10))
      n_params = sum(p.size for p in jax.tree.leaves(params0))
      memory = {(name, d): memory_row(opt, extra_arg, d, params0, x, y)
                for d in donations for name, (opt, extra_arg) in table.items()}
      times = time_size(table, donations, params0, x, y, args.repeats, args.steps, bar)
      for (name, donate), (seconds, ratio) in sorted(times.items(), key=lambda kv: (
          not kv[0][1], list(table).index(kv[0][0]))):
        mem, ref_mem = memory[name, donate], memory["optax.adamw", donate]
        ratios.setdefault((name, donate), []).append((n_params, ratio))
        rows.append(
            f"| {size} ({n_params / 1e6:.2f}M) | {name} | {'yes' if donate else 'no'} | "
            f"{1e3 * seconds:.1f} | {ratio:.3f} | {mem['state'] / 2**20:.1f} "
            f"({mem['state'] / ref_mem['state']:.2f}x) | {mem['peak'] / 2**20:.1f} "
            f"({mem['peak'] / ref_mem['peak']:.2f}x) | {mem['temp'] / 2**20:.1f} |")
      del params0
  elapsed = time.perf_counter() - start
  lines = [
      f"MLPs 1024-W-W-10, batch {BATCH}, {args.repeats} repeats x {args.steps} steps, each "
      f"method interleaved with optax.adamw's, {os.cpu_count()} CPU cores, jax {jax.__version__}, commit "
      f"`{commit}`, {elapsed:.0f} s. Time ratios are to optax.adamw's "
      "step with the same donation; memory from XLA's analysis of the compiled step "
      "(peak = arguments + outputs - aliased + temporaries), ratios to optax.adamw's.", "",
      "| size | method | donated | median step (ms) | ratio to adamw | optimizer state MB "
      "(vs adamw) | step peak MB (vs adamw) | temporaries MB |",
      "|---|---|---|---|---|---|---|---|", *rows]
  md = args.out / f"step_time_scale{args.suffix}.md"
  _report.write_table(lines, str(md))
  png = args.out / f"step_time_scale{args.suffix}.png"
  plot(ratios, png)
  print(f"wrote {md}\nwrote {png}")


def plot(ratios, path):
  plt = _report.pyplot()
  fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
  for ax, donate in zip(axes, (True, False)):
    for (name, d), points in ratios.items():
      if d != donate or name == "optax.adamw":
        continue
      n, r = zip(*points)
      ax.plot(n, r, marker="o", label=name)
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("parameters")
    ax.set_title(f"donated: {'yes' if donate else 'no'}")
  axes[0].set_ylabel("train-step time / optax.adamw's")
  axes[0].legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


if __name__ == "__main__":
  main()
