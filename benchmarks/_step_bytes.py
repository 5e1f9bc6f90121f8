"""Bytes an optimizer step reads and writes (XLA's cost analysis), against optax.adamw.

The step is the optimizer's update and ``optax.apply_updates``, jitted with the
params and the state donated (updated in place), compiled from abstract shapes
(``jax.ShapeDtypeStruct``), so the 100M-parameter step needs no memory and the run
needs no accelerator. For each optimizer and size: XLA's bytes accessed in float32
parameter-sized passes (bytes / (4 x parameters)), the ratio to ``optax.adamw``'s,
and how many parameter-sized float32 buffers the state holds. An optimizer step is
memory-bound: on an accelerator its time is about these bytes over the bandwidth.
The figure is that of the backend at hand: XLA:CPU's fusions have one output each,
XLA:GPU's several, which read less. Beside the optimizers, the drop-in's arithmetic alone, written by hand
(``_arithmetic_floor``): what its outputs cost under those fusions. ``step_time_scale.py
--bytes`` writes it.
"""

from __future__ import annotations

import jax
from tqdm.auto import tqdm

import _report
from _arithmetic_floor import floors
from _optimizer_step import (accessed_bytes, compiled_update, mlp_shapes, optimizers,
                             params_sized_buffers)

#: MLPs of ``depth`` dense ``width x width`` layers: (width, depth) for each size.
SIZES = {"1M": (512, 4), "10M": (1024, 10), "100M": (4096, 6)}
REFERENCE = "optax.adamw(1e-3)"
#: The issue's acceptance: at most these ratios to optax.adamw's bytes.
TARGETS = {"metaoptax.adamw()": 1.2, "metaoptax.lion()": 1.3, "metaoptax.sgd()": 1.3,
           "metaoptax.overfitting_gate(metaoptax.adamw())": 1.3}


def measure(sizes, table) -> dict:
  """{size: {optimizer: {"passes", "ratio", "buffers", "parameters"}}}."""
  rows = {}
  with tqdm(total=len(sizes) * len(table), desc="step bytes (compile)", unit="step") as bar:
    for size in sizes:
      params = mlp_shapes(*SIZES[size])
      n = sum(x.size for x in jax.tree.leaves(params))
      rows[size] = {}
      for name, (opt, extra_arg) in table.items():
        bar.set_postfix_str(f"{size} {name}")
        passes = accessed_bytes(compiled_update(opt, params, extra_arg)) / (4 * n)
        state = jax.eval_shape(opt.init, params)
        rows[size][name] = {"passes": passes, "buffers": params_sized_buffers(state, params),
                            "parameters": n}
        bar.update()
      for row in rows[size].values():
        row["ratio"] = row["passes"] / rows[size][REFERENCE]["passes"]
  return rows


def markdown(rows, commit) -> list[str]:
  sizes = list(rows)
  names = list(rows[sizes[0]])
  lines = [f"XLA's bytes accessed of the donated step (update + `optax.apply_updates`), in "
           "float32 parameter-sized passes, and its ratio to optax.adamw's; MLPs "
           + ", ".join(f"{s}: {w}x{w} x{d}" for s, (w, d) in SIZES.items() if s in rows)
           + f". jax {jax.__version__} (XLA:{jax.default_backend().upper()}, "
           f"{jax.devices()[0].device_kind}), commit `{commit}`.", "",
           "| optimizer | state buffers | " + " | ".join(f"{s} passes (ratio)" for s in sizes)
           + " | target |",
           "|---|---|" + "---|" * len(sizes) + "---|"]
  for name in names:
    cells = [f"{rows[s][name]['passes']:.2f} ({rows[s][name]['ratio']:.2f}x)" for s in sizes]
    target = f"<= {TARGETS[name]}x" if name in TARGETS else "-"
    lines.append(f"| {name} | {rows[sizes[0]][name]['buffers']:.1f} | " + " | ".join(cells)
                 + f" | {target} |")
  return lines


def plot(rows, path) -> None:
  plt = _report.pyplot()
  sizes = list(rows)
  names = list(rows[sizes[0]])
  fig, ax = plt.subplots(figsize=(9, 4))
  _report.bars_by_size(ax, names, {size: [rows[size][n]["ratio"] for n in names]
                                   for size in sizes})
  for value in sorted(set(TARGETS.values())):
    ax.axvline(value, ls="--", color="tab:green", lw=1, label=f"target {value}x")
  ax.set_xlabel(f"bytes accessed per step / optax.adamw's "
                f"(XLA:{jax.default_backend().upper()} cost analysis)")
  ax.legend(fontsize=8)
  _report.save_figure(fig, path)



def write(out, sizes, commit, suffix: str = "") -> None:
  """Measures ``sizes`` and writes ``step_bytes{suffix}.{json,md,png}`` to ``out``."""
  import json  # pylint: disable=g-import-not-at-top
  rows = measure(sizes, {**optimizers(), **floors()})
  stem = f"step_bytes{suffix}"
  (out / f"{stem}.json").write_text(json.dumps(
      {"commit": commit, "jax": jax.__version__, "backend": jax.default_backend(),
       "device": jax.devices()[0].device_kind, "sizes": {s: SIZES[s] for s in rows},
       "targets": TARGETS, "rows": rows}, indent=1) + "\n")
  _report.write_table(markdown(rows, commit), str(out / f"{stem}.md"))
  plot(rows, out / f"{stem}.png")
