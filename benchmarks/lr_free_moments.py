"""Issue 29 diagnostic: how large are Adam's steps once the climb ends, with the moments
kept, restarted, or weighted by the step size?

``metaoptax.adamw()`` climbs from a step size of 1e-6, and Adam's moments record the
climb's gradients. ``lr_free.py`` measured three ways to treat them: keep them (the
default), restart them when the climb ends (``climb_memory=0``; also with a
second, short climb, "restart + rewarm"), or weight each gradient by its step size as
prodigy does (``_alpha_weighted``: the climb's gradients fade as it climbs). The last
two gain on the MLPs and the CNN and lose on the character model at 10-50 % of its
budget. This script records, every 10 steps over the first ``--steps`` steps (3 seeds),
the learned step size :math:`\\alpha_t` and the root mean square over every weight of
Adam's direction :math:`\\hat m_t / (\\sqrt{\\hat v_t} + \\epsilon)`, whose product is the
size of a step; Adam's direction is 1 in size when its moments are one gradient (a
sign-like step) and smaller the more the gradients they average disagree.

    python benchmarks/lr_free_moments.py                 # ~4 min on 2 cores
    python benchmarks/lr_free_moments.py --tasks cnn1d --quick
"""

from __future__ import annotations

import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import optax

import _report
import lr_free
import metaoptax
from metaoptax._src import tree_utils
from suite_tasks import runner
from suite_tasks.runner import Method

OUT = pathlib.Path(__file__).parent / "out" / "lr_free_moments"
TASKS = ("charlm", "cnn1d")
DESIGNS = ("climb x2, gamma=1 + average", "climb x2, gamma=1 + average, restart",
           "climb x2, gamma=1 + average, restart + rewarm",
           "climb x2, gamma=1 + average, alpha-weighted moments")


def _rms(tree) -> jax.Array:
  leaves = jax.tree.leaves(tree)
  return jnp.sqrt(sum(jnp.sum(jnp.square(x)) for x in leaves) / sum(x.size for x in leaves))


def adam_direction_rms(state, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8):
  """The root mean square of the direction the base Adam took at its last step, from its state:
  :math:`\\hat m / (\\sqrt{\\hat v} + \\epsilon)`, with the bias corrections of
  ``optax.scale_by_adam`` or of :func:`lr_free._scale_by_alpha_weighted_adam`."""
  (meta,) = tree_utils.instances_of(state, metaoptax.MetaOptimizeState)
  weighted = tree_utils.instances_of(meta.base_state, lr_free.AlphaWeightedAdamState)
  if weighted:
    (s,) = weighted
    return _rms(lr_free.alpha_weighted_direction(s, eps))
  (s,) = tree_utils.instances_of(meta.base_state, optax.ScaleByAdamState)  # not the meta's
  c = jnp.maximum(s.count, 1).astype(jnp.float32)
  return _rms(jax.tree.map(lambda m, v: (m / (1 - b1**c)) / (jnp.sqrt(v / (1 - b2**c)) + eps),
                           s.mu, s.nu))


def _sizes(state):
  """``[alpha, rms of Adam's direction, steps climbed]``: what the runner logs as the step
  sizes."""
  alpha = jnp.mean(jnp.atleast_1d(metaoptax.step_sizes(state)))
  (climb,) = tree_utils.instances_of(state, metaoptax.ClimbState)
  return jnp.stack([alpha, adam_direction_rms(state), climb.climb_steps.astype(alpha.dtype)])


def methods() -> list[Method]:
  return [Method(name, "metaoptax", lambda _, make=lr_free.DESIGNS[name][0]: make(),
                 learned_step_size=True, step_sizes_of=_sizes) for name in DESIGNS]


def summarize(steps, alpha, direction, climbed) -> dict:
  """Per design: the first record (every 10 steps) after the climb's end, and the median
  over seeds of alpha, of Adam's direction and of their product (the step's size) there
  and 50 and 200 steps later (each seed from its own end)."""
  rows = {}
  for after in (0, 50, 200):
    picked = []
    for a, d, c in zip(alpha, direction, climbed):
      if c[-1] == c[-2]:  # the climb ended
        i = min(int(np.searchsorted(steps, c[-1] + 1 + after)), len(a) - 1)
        picked.append((steps[i], a[i], d[i], a[i] * d[i]))
    if not picked:
      return {}
    step, a, d, size = np.median(np.asarray(picked, float), 0)
    rows[after] = {"step": step, "alpha": a, "direction": d, "step_size": size}
  return rows


def main(argv=None):
  args = _report.task_arguments(__doc__.splitlines()[0], {t: None for t in TASKS}, OUT)
  args.add_argument("--steps", type=int, default=1000)
  args = args.parse_args(argv)
  steps, chunk = (100, 10) if args.quick else (args.steps, 10)
  progress = _report.progress_bars()
  out = pathlib.Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  results = {}
  for task in args.tasks:
    problem = lr_free.TASKS[task].make()
    results[task] = {}
    for method in methods():
      (log,) = runner.train(problem, method, steps=steps, seeds=args.seeds, chunk=chunk,
                            progress=progress)
      results[task][method.name] = {"steps": log.steps.tolist(),
                                    "alpha": log.step_sizes[..., 0].tolist(),
                                    "direction": log.step_sizes[..., 1].tolist(),
                                    "climbed": log.step_sizes[..., 2].tolist(),
                                    "test": log.test.tolist()}
  commit = _report.git_commit(short=True)
  (out / "lr_free_moments.json").write_text(json.dumps({"commit": commit, "results": results}))
  lines = [f"# Adam's steps after the climb (`lr_free_moments.py`)", "",
           f"Commit `{commit}`; {args.seeds} seeds, median over them; \"climb ends at\": the "
           "first record (every 10 steps) after the climb's last step; Adam's direction is the "
           "root mean square over every weight of m̂ / (√v̂ + ε); the step's size is their "
           "product.", "",
           "| task | design | climb ends at | α there | direction: at the end / +50 / +200 steps "
           "| step's size: at the end / +50 / +200 | test at the last step |",
           "|---|---|---|---|---|---|---|"]
  for task, by_design in results.items():
    for name, r in by_design.items():
      s = summarize(*(np.asarray(r[k]) for k in ("steps", "alpha", "direction", "climbed")))
      if not s:
        lines.append(f"| {task} | {name} | not within {steps} steps | | | | |")
        continue
      lines.append(
          f"| {task} | {name} | {s[0]['step']:.0f} | {s[0]['alpha']:.2e} | "
          + " / ".join(f"{s[k]['direction']:.3f}" for k in (0, 50, 200)) + " | "
          + " / ".join(f"{s[k]['step_size']:.2e}" for k in (0, 50, 200))
          + f" | {np.mean(np.asarray(r['test'])[:, -1]):.3f} |")
  _report.write_table(lines, str(out / "lr_free_moments.md"))
  plot(results, out / "lr_free_moments.png")


def plot(results, path):
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, axes = plt.subplots(2, len(results), figsize=(5.5 * len(results), 6.5), squeeze=False)
  for j, (task, by_design) in enumerate(results.items()):
    for name, r in by_design.items():
      steps = np.asarray(r["steps"])
      a, d = np.median(r["alpha"], 0), np.median(r["direction"], 0)
      label = name.replace("climb x2, gamma=1 + average", "default") or "default"
      axes[0, j].plot(steps, d, label=label)
      axes[1, j].plot(steps, a * d, label=label)
    axes[0, j].set_title(task)
    axes[0, j].set_ylabel("rms of Adam's direction")
    axes[1, j].set_ylabel("step's size (α × direction)")
    axes[1, j].set_yscale("log")
    axes[1, j].set_xlabel("step")
  axes[0, 0].legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


if __name__ == "__main__":
  main()
