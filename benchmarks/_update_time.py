"""Time of the optimizer step alone (update + ``optax.apply_updates``) against optax.adamw's.

The step of ``_step_bytes`` (the same MLP shapes, optimizers and hand-written
arithmetic rows), run on arrays: a memory-bound step whose time on an accelerator is
about its bytes over the bandwidth. For each size, donation (params and state updated
in place, or not) and optimizer, the median over ``--repeats`` of the mean step time
over ``--steps`` steps, each optimizer's repeats interleaved with optax.adamw's in one
process, and its ratio to that pair's optax.adamw median. XLA's bytes accessed of the
same compiled step stand beside it (``_optimizer_step.accessed_bytes``).
``step_time_scale.py --update`` writes it:

    python benchmarks/step_time_scale.py --update --sizes 1M     # ~1 min on 2 CPU cores
    python benchmarks/step_time_scale.py --update --quick        # smoke run
    python benchmarks/step_time_scale.py --update --sizes 1M,10M,100M --suffix _h200  # a GPU
"""

from __future__ import annotations

import json
import time

import jax
import jax.numpy as jnp
import numpy as np
from tqdm.auto import tqdm

import _report
from _arithmetic_floor import floors
from _optimizer_step import accessed_bytes, compiled_update, mlp_shapes, optimizers
from _step_bytes import REFERENCE, SIZES, TARGETS


def _arrays(shapes, key):
  leaves, treedef = jax.tree.flatten(shapes)
  keys = jax.random.split(key, len(leaves))
  return jax.tree.unflatten(treedef, [0.01 * jax.random.normal(k, x.shape, x.dtype)
                                      for k, x in zip(keys, leaves)])


class _Run:
  """One optimizer's compiled step and its live params and state."""

  def __init__(self, opt, extra_arg, donate, params, grads):
    self.step = compiled_update(opt, params, extra_arg, donate)
    self.bytes = accessed_bytes(self.step)
    self.grads = grads
    self.extra = (jnp.float32(1.0),) if extra_arg else ()
    self.params = jax.tree.map(jnp.copy, params)
    self.state = jax.tree.map(jnp.copy, opt.init(self.params))  # no buffer twice
    self.timed(1)  # the first call's allocations

  def timed(self, steps: int) -> float:
    params, state = self.params, self.state
    start = time.perf_counter()
    for _ in range(steps):
      params, state = self.step(params, state, self.grads, *self.extra)
    jax.block_until_ready((params, state))
    self.params, self.state = params, state
    return (time.perf_counter() - start) / steps


def measure(sizes, table, repeats, steps) -> dict:
  """{size: {(optimizer, donated): {"seconds", "ratio", "bytes_ratio"}}}."""
  rows = {}
  others = [name for name in table if name != REFERENCE]
  with tqdm(total=len(sizes) * 2 * len(others) * repeats, desc="optimizer step time",
            unit="repeat") as bar:
    for size in sizes:
      shapes = mlp_shapes(*SIZES[size])
      params = _arrays(shapes, jax.random.key(0))
      grads = _arrays(shapes, jax.random.key(1))
      rows[size] = {}
      for donate in (True, False):
        ref = _Run(*table[REFERENCE], donate, params, grads)
        ref_times = []
        for name in others:
          bar.set_postfix_str(f"{size} {name[:30]} donated={donate}")
          run = _Run(*table[name], donate, params, grads)
          pair = {REFERENCE: [], name: []}
          for _ in range(repeats):
            for key, r in ((REFERENCE, ref), (name, run)):
              pair[key].append(r.timed(steps))
            bar.update()
          ref_times += pair[REFERENCE]
          seconds = float(np.median(pair[name]))
          rows[size][name, donate] = {
              "seconds": seconds, "ratio": seconds / float(np.median(pair[REFERENCE])),
              "bytes_ratio": run.bytes / ref.bytes}
          del run
        rows[size][REFERENCE, donate] = {"seconds": float(np.median(ref_times)),
                                         "ratio": 1.0, "bytes_ratio": 1.0}
        del ref
  return rows


def markdown(rows, table, repeats, steps, commit) -> list[str]:
  device = jax.devices()[0].device_kind
  lines = [f"The optimizer step alone (update + `optax.apply_updates`, jitted), median over "
           f"{repeats} repeats of {steps} steps, each optimizer's repeats interleaved with "
           f"optax.adamw's; ratios to that optax.adamw median. Device: {device} "
           f"({jax.default_backend()}), jax {jax.__version__}, commit `{commit}`. MLPs "
           + ", ".join(f"{s}: {w}x{w} x{d}" for s, (w, d) in SIZES.items() if s in rows)
           + ". Bytes: XLA's bytes accessed of the same compiled step, ratio to optax.adamw's.",
           "", "| size | optimizer | donated | median step (ms) | time ratio | bytes ratio "
           "| target |", "|---|---|---|---|---|---|---|"]
  for size, cells in rows.items():
    for donate in (True, False):
      for name in table:
        cell = cells[name, donate]
        target = f"<= {TARGETS[name]}x bytes" if name in TARGETS else "-"
        lines.append(f"| {size} | {name} | {'yes' if donate else 'no'} | "
                     f"{1e3 * cell['seconds']:.3f} | {cell['ratio']:.3f} | "
                     f"{cell['bytes_ratio']:.2f} | {target} |")
  return lines


def plot(rows, table, path) -> None:
  plt = _report.pyplot()
  fig, axes = plt.subplots(1, 2, figsize=(11, 4.5), sharey=True)
  names = [n for n in table if n != REFERENCE]
  for ax, donate in zip(axes, (True, False)):
    _report.bars_by_size(ax, names, {size: [cells[n, donate]["ratio"] for n in names]
                                     for size, cells in rows.items()}, fontsize=7)
    ax.set_title(f"donated: {'yes' if donate else 'no'}")
    ax.set_xlabel(f"step time / optax.adamw's ({jax.devices()[0].device_kind})")
  axes[0].legend(fontsize=8)
  _report.save_figure(fig, path)


def write(out, sizes, repeats, steps, commit, suffix: str = "") -> None:
  """Measures ``sizes`` and writes ``update_time{suffix}.{json,md,png}`` to ``out``."""
  table = {**optimizers(), **floors()}
  rows = measure(sizes, table, repeats, steps)
  stem = f"update_time{suffix}"
  _report.write_table(markdown(rows, table, repeats, steps, commit), str(out / f"{stem}.md"))
  (out / f"{stem}.json").write_text(json.dumps(
      {"commit": commit, "jax": jax.__version__, "device": jax.devices()[0].device_kind,
       "rows": {s: [{"optimizer": n, "donated": d, **c} for (n, d), c in cells.items()]
                for s, cells in rows.items()}}, indent=1) + "\n")
  plot(rows, table, out / f"{stem}.png")
