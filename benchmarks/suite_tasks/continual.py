r"""Task 4: Sutton's (1992) continual tracking task, step-size adaptation on a drifting target.

The task of the paper that introduced IDBD (Sutton, *Adapting Bias by Gradient
Descent: An Incremental Version of Delta-Bar-Delta*, AAAI 1992, Experiments 1-2),
described in :mod:`suite_tasks.continual_stream` with the exact asymptotic MSE of
LMS; the learners are in :mod:`suite_tasks.continual_methods`. Error: the squared
prediction error *before* each update, averaged over the last 10k examples of a
250k-example run (and over examples 20k-30k, the window of Sutton's Experiment 1).

    python benchmarks/suite.py --tasks continual            # 250k examples, 3 seeds
    python benchmarks/suite.py --tasks continual --quick    # 30k examples

Writes ``continual.md``, ``continual_curves.npz`` and the figures
``continual_curves.png``, ``continual_step_sizes.png``, ``continual_sensitivity.png``.
"""

from __future__ import annotations

import math
import pathlib
import time

import jax
import numpy as np

import _report
from suite_tasks import continual_plots
from suite_tasks.continual_methods import (BIN_SIZE, DEFAULT_META_STEP_SIZE, IDBD_NAME,
                                           INIT_STEP_SIZE, LMS_NAME, PER_INPUT_NAME, methods,
                                           run_method, sensitivity_diagnostic)
from suite_tasks.continual_stream import (NUM_RELEVANT, best_lms_closed_form,
                                          best_per_input_closed_form, lms_asymptotic_mse,
                                          make_stream, per_input_step_sizes)

FULL_EXAMPLES = 250_000
QUICK_EXAMPLES = 30_000
FINAL_WINDOW = 10_000  # the asymptotic MSE is the mean over the last FINAL_WINDOW examples
SUTTON_WINDOW = (20_000, 30_000)  # Experiment 1: 20k examples of burn-in, 10k measured
SUTTON = {"LMS (best fixed)": "3.4-3.5", "IDBD": "~1.5", "ideal per-input LMS": "1.37"}
UNSTABLE_MSE = 10.0  # twice the error of predicting 0 (E[y*^2] = 5)
PLATEAU_TOLERANCE = 0.1


def _window_mean(squared_error: np.ndarray, start: int, stop: int, bin_size: int) -> np.ndarray:
  return squared_error[..., start // bin_size: stop // bin_size].mean(-1)


def _fmt(mean: float, std: float) -> str:
  if not np.isfinite(mean) or mean > 1e6:
    return "diverged"
  return f"{mean:.3f} ± {std:.3f}"



def _closed_form_at(step_sizes: np.ndarray) -> float:
  """Mean over seeds of the LMS closed form at each seed's step sizes ``(seeds, inputs)``."""
  if not np.isfinite(step_sizes).all():
    return math.inf
  return float(np.mean([lms_asymptotic_mse(a) for a in step_sizes]))


def _unstable_seeds(squared_error: np.ndarray) -> np.ndarray:
  """Per grid value: seeds with a non-finite bin or a bin MSE above UNSTABLE_MSE."""
  bad = ~np.isfinite(squared_error) | (squared_error > UNSTABLE_MSE)
  return bad.any(-1).sum(0)  # (seeds, grid, bins) -> (grid,)



def _examples_to_plateau(step_sizes: np.ndarray, smoothing: int = 5) -> float:
  """Examples until the relevant step size stays within 10% of its final value (mean over seeds).

  ``step_sizes``: ``(seeds, bins, inputs)``. The relevant inputs' mean step size is
  smoothed over ``smoothing`` bins (the meta-updates make it fluctuate); its final
  value is the mean over the last 10 bins. NaN if a run is not finite.
  """
  relevant = step_sizes[..., :NUM_RELEVANT].mean(-1)  # (seeds, bins)
  if not np.isfinite(relevant).all():
    return math.nan
  padded = np.pad(relevant, ((0, 0), (smoothing // 2, smoothing - 1 - smoothing // 2)), "edge")
  kernel = np.ones(smoothing) / smoothing
  relevant = np.stack([np.convolve(r, kernel, mode="valid") for r in padded])
  final = relevant[:, -10:].mean(-1, keepdims=True)
  outside = np.abs(relevant - final) > PLATEAU_TOLERANCE * final
  # Bins before the plateau: up to and including the last bin outside the band.
  before = np.where(outside.any(-1), outside.shape[-1] - np.argmax(outside[:, ::-1], -1), 0)
  return float(np.mean(before * BIN_SIZE))


def _summarise(rec: dict) -> dict:
  """Best grid index (lowest mean final MSE over seeds; diverged seeds count as inf)."""
  final = rec["final"]
  mean = np.where(np.isfinite(final).all(0), final.mean(0), np.inf)
  best = int(np.argmin(mean))
  sizes = rec["result"].step_sizes[:, best, -1, :]  # (seeds, inputs) at the end of the run
  default = (rec["method"].grid.index(DEFAULT_META_STEP_SIZE)
             if DEFAULT_META_STEP_SIZE in rec["method"].grid and not rec["method"].name.startswith(
                 "LMS") else None)
  return dict(best=best, mean=mean[best], relevant=sizes[:, :NUM_RELEVANT].mean(),
              irrelevant=sizes[:, NUM_RELEVANT:].mean(), default=default,
              closed_form=_closed_form_at(sizes),
              plateau=_examples_to_plateau(rec["result"].step_sizes[:, best]),
              unstable=_unstable_seeds(rec["result"].squared_error))


def _table_row(name: str, rec: dict) -> str:
  method, final, window = rec["method"], rec["final"], rec["sutton"]
  summary = rec["summary"]
  i = summary["best"]
  default = summary["default"]
  default_cell = "" if default is None else _fmt(final[:, default].mean(), final[:, default].std())
  plateau = ("" if name.startswith("LMS") or not np.isfinite(summary["plateau"])
             else f"{summary['plateau'] / 1000:.0f}k")
  return (f"| {name} | {method.hyper_name} = {method.grid[i]:g} | "
          f"{_fmt(final[:, i].mean(), final[:, i].std())} | "
          f"{_fmt(window[:, i].mean(), window[:, i].std())} | "
          f"{summary['closed_form']:.3f} | {default_cell} | "
          f"{summary['relevant']:.3g} | {summary['irrelevant']:.3g} | "
          f"{plateau} | "
          f"{summary['unstable'][i]} | {rec['seconds']:.0f} |")



NOTES = """## How to read the misses

- **Hessian-free, gamma = 1.** With an SGD base the Hessian-free trace is exactly the total
  weight change, h_t = w_t - w_0 (tested in `tests/integration/test_continual_task.py`): it never forgets,
  so the meta-gradient h_t g_t correlates the current gradient with the whole history of the
  weight instead of its recent, step-size-dependent motion. IDBD's trace decays by
  [1 - alpha x^2]^+ (~0.87 per example on the relevant inputs): that is the dropped Hessian
  term. Re-introducing a decay through gamma = 0.9 (diagnostics) recovers IDBD-level tracking.
- **2x2, gamma = 1.** The exact variant differentiates with respect to beta_0: its
  Y^beta = d beta_t / d beta_0 decays towards 0 as the meta-dynamics forgets its start (table
  above). Under meta SGD that only slows adaptation (the effective theta is theta * Y^beta);
  under meta Adam (scale-free) Y^beta overshoots through 0, the meta-gradient changes sign, the
  step sizes climb past LMS's stability limit and the run diverges (then the guard skips every
  non-finite step). gamma = 0.999 keeps Y^beta near 0.75 and tracks as well as the
  L-approximation. With meta Lion the 2x2 and L rows coincide: the sign function has zero
  derivative, so the 2x2's extra block vanishes.
- **Large theta / eta.** 'seeds unstable' counts seeds with a bin of MSE above 10 or
  non-finite. IDBD at theta >= 0.01 is fine over Sutton's 30k examples but over 250k the
  relevant step sizes can collapse (an absorbing state: IDBD's meta-gradient is proportional to
  alpha) and runs diverge; Sutton's float64 pseudocode does the same on the same streams (seed 0
  diverges in the same 1k-example bin). The trigger is a rare large input: with alpha ~ 0.2 on a
  relevant input, |x| ~ 4.7 gives alpha x^2 ~ 5 > 2, the LMS step overshoots, the error jumps to
  ~100 and theta delta x h moves beta by more than 1 per example (seed 0, example ~200.9k).
  Such inputs are too rare to show up in 30k examples.
- **'LMS closed form' column**: the exact asymptotic MSE LMS would have with the final learned
  step sizes frozen; the gap to the measured MSE is the cost of the step sizes' fluctuation.
"""



def run(*, quick, seeds, out_dir, progress, replot=False):
  """Runs every method on ``seeds`` streams; writes the table, curves and plots into ``out_dir``.

  Args:
    quick: ``QUICK_EXAMPLES`` examples per run instead of ``FULL_EXAMPLES``.
    seeds: number of streams (every method runs on the same ones).
    out_dir: where ``continual.md``, ``continual_curves.npz`` and the PNGs go.
    progress: a tqdm-like factory (``progress(total=..., desc=...)``), or None to
      print one line per method.
    replot: no training: redraw the PNGs from the saved ``continual_curves.npz``.

  Returns:
    A dict with ``task``, ``table_md`` (best of each grid), ``summary_lines`` and
    more; None when ``replot``.
  """
  out_dir = pathlib.Path(out_dir)
  curves_path = out_dir / "continual_curves.npz"
  if replot:
    continual_plots.plot_all(continual_plots.load_curves(curves_path), out_dir)
    return None
  out_dir.mkdir(parents=True, exist_ok=True)
  num_examples = QUICK_EXAMPLES if quick else FULL_EXAMPLES
  keys = jax.random.split(jax.random.PRNGKey(1992), seeds)
  streams = jax.vmap(lambda k: make_stream(k, num_examples))(keys)
  records = _run_methods(streams, num_examples, progress)
  sensitivity = sensitivity_diagnostic(jax.tree.map(lambda a: a[0], streams))
  closed_forms = best_lms_closed_form() + best_per_input_closed_form()

  header = _table_header(num_examples)
  compared = [n for n, r in records.items() if not r["method"].diagnostic]
  diagnostics = [n for n, r in records.items() if r["method"].diagnostic]
  table_md = "\n".join(header + [_table_row(n, records[n]) for n in compared]) + "\n"
  diagnostics_md = "\n".join(header + [_table_row(n, records[n]) for n in diagnostics]) + "\n"
  grid_md = _grid_table(records)
  sensitivity_md = _sensitivity_table(sensitivity, num_examples)
  summary_lines, idbd_lines = _summary_lines(records, compared, closed_forms, num_examples,
                                             seeds)

  alpha_lms, mse_lms, alpha_rel, mse_rel = closed_forms
  curves = continual_plots.curves_from_records(
      records, sensitivity, num_examples=num_examples, mse_lms=mse_lms, mse_relevant=mse_rel,
      alpha_relevant=alpha_rel)
  continual_plots.save_curves(curves_path, curves)
  plots = continual_plots.plot_all(curves, out_dir)

  md = "\n".join([
      "# Continual tracking task (Sutton 1992)",
      "",
      f"Measured at commit `{_report.git_commit()}`: {num_examples} examples per run, {seeds} "
      "seeds (the same streams for every method), adaptive methods from alpha_0 = "
      f"{INIT_STEP_SIZE} (Sutton's IDBD initialisation) unless stated. Generated by "
      "`python benchmarks/suite.py --tasks continual" + (" --quick" if quick else "") + "`.",
      "",
      "Task: 20 inputs N(0, 1); target = signed sum of the first 5; one of the 5 signs flips "
      "every 20 examples; no noise. Error = squared prediction error before each update. "
      "MetaOptimize: SGD base (`optax.identity()`), weight-wise step sizes "
      "(`blocks=\"per_param\"`), gamma = 1 unless stated. 'Best of grid' = the hyperparameter "
      "with the lowest mean final MSE over the seeds (selected on the same runs: slightly "
      "optimistic). 'LMS closed form' = the exact asymptotic MSE of LMS with those step sizes "
      "(`lms_asymptotic_mse`, derived in `continual_stream.py`).",
      "",
      f"Sutton's figures: best LMS {SUTTON['LMS (best fixed)']} and IDBD {SUTTON['IDBD']} "
      "(Experiment 1: examples 20k-30k, IDBD over a broad range of theta), LMS with per-input "
      f"step sizes 0.13 / 0 {SUTTON['ideal per-input LMS']} (Experiment 2). Closed forms: best "
      f"single step size {alpha_lms:.3f} -> {mse_lms:.3f}; best per-input {alpha_rel:.3f} / 0 -> "
      f"{mse_rel:.3f} (0.13 / 0 -> {lms_asymptotic_mse(np.asarray(per_input_step_sizes(0.13))):.3f}).",
      "",
      "## Compared methods (best of each grid)",
      "",
      table_md,
      idbd_lines[0],
      "",
      idbd_lines[1] + ".",
      "",
      NOTES,
      "## Diagnostics (one setting changed to test an explanation)",
      "",
      diagnostics_md,
      "## 2x2 sensitivity of beta_t to beta_0 (seed 0)",
      "",
      sensitivity_md,
      "## Every grid value",
      "",
      grid_md,
      "![curves](continual_curves.png)",
      "",
      "![step sizes](continual_step_sizes.png)",
      "",
      "![sensitivity](continual_sensitivity.png)",
      "",
  ])
  (out_dir / "continual.md").write_text(md)
  return {"task": "continual", "table_md": table_md, "summary_lines": summary_lines,
          "diagnostics_md": diagnostics_md, "grid_md": grid_md,
          "markdown_path": str(out_dir / "continual.md"), "plots": plots}


def _run_methods(streams, num_examples, progress) -> dict:
  """Every method's grid on every stream: ``{name: record}`` with the window MSEs and summary."""
  final_window = (num_examples - FINAL_WINDOW, num_examples)
  all_methods = methods()
  bar = progress(total=len(all_methods), desc="continual") if progress is not None else None
  records = {}
  for method in all_methods:
    start = time.perf_counter()
    result = run_method(method, streams)
    rec = dict(method=method, result=result,
               final=_window_mean(result.squared_error, *final_window, BIN_SIZE),
               sutton=_window_mean(result.squared_error, *SUTTON_WINDOW, BIN_SIZE),
               seconds=time.perf_counter() - start)
    rec["summary"] = _summarise(rec)
    records[method.name] = rec
    if bar is None:
      print(f"{method.name}: {rec['seconds']:.1f} s, best {rec['summary']['mean']:.3f}", flush=True)
    else:
      bar.update(1)
      bar.set_postfix_str(f"{method.name}: best {rec['summary']['mean']:.3f}")
  if bar is not None:
    bar.close()
  return records


def _table_header(num_examples) -> list[str]:
  return [
      f"| method | best of grid | MSE, last {FINAL_WINDOW // 1000}k of {num_examples // 1000}k "
      "(mean ± std over seeds) | MSE, examples 20k-30k (Sutton's window) | LMS closed form at "
      f"the final step sizes | MSE at eta/theta = {DEFAULT_META_STEP_SIZE:g} (untuned default), "
      f"last {FINAL_WINDOW // 1000}k | final alpha, relevant (mean) | final alpha, irrelevant "
      "(mean) | examples until the relevant alpha stays within 10% of its final value | "
      "seeds unstable | wall s (whole grid, all seeds) |",
      "|---|---|---|---|---|---|---|---|---|---|---|",
  ]


def _grid_table(records) -> str:
  rows = []
  for name, rec in records.items():
    for j, hyper in enumerate(rec["method"].grid):
      exact = _closed_form_at(rec["result"].step_sizes[:, j, -1, :])
      final, window = rec["final"][:, j], rec["sutton"][:, j]
      rows.append(f"| {name} | {rec['method'].hyper_name} = {hyper:g} | "
                  f"{_fmt(final.mean(), final.std())} | {_fmt(window.mean(), window.std())} | "
                  f"{exact:.3f} | {rec['summary']['unstable'][j]} |")
  return "\n".join([
      f"| method | hyperparameter | MSE, last {FINAL_WINDOW // 1000}k | MSE, 20k-30k | "
      "LMS closed form at the final step sizes | seeds unstable |",
      "|---|---|---|---|---|---|"] + rows) + "\n"


def _sensitivity_table(sensitivity, num_examples) -> str:
  bins_shown = [b for b in (1, 5, 10, 20, 30, 50, 100, 150, 200, 250)
                if b <= num_examples // BIN_SIZE]
  return "\n".join(
      ["| run | quantity | " + " | ".join(f"{b}k" for b in bins_shown) + " |",
       "|---|---|" + "---|" * len(bins_shown)]
      + [f"| {label} | {q} | " + " | ".join(f"{d[key][b - 1]:.3g}" for b in bins_shown) + " |"
         for label, d in sensitivity.items()
         for q, key in (("diag Y^beta (relevant mean)", "y_beta"),
                        ("alpha (relevant mean)", "alpha"), ("MSE of the bin", "mse"))]) + "\n"


def _summary_lines(records, compared, closed_forms, num_examples, seeds):
  """Lines for ``summary.md``, and IDBD's lines of ``continual.md`` (Sutton's window and
  his Experiment 2)."""
  alpha_lms, mse_lms, alpha_rel, mse_rel = closed_forms

  def best_of(name):
    return records[name]["summary"]["mean"]

  def hyper_of(name):
    rec = records[name]
    return f"{rec['method'].hyper_name} {rec['method'].grid[rec['summary']['best']]:g}"

  idbd = records[IDBD_NAME]
  idbd_window = [f"{t:g}: {_fmt(idbd['sutton'][:, j].mean(), idbd['sutton'][:, j].std())}"
                 for j, t in enumerate(idbd["method"].grid)]
  # Sutton's Experiment 2: IDBD, theta = 0.001, alpha_0 = 0.05, step sizes after 250k examples.
  slow = idbd["result"].step_sizes[:, idbd["method"].grid.index(1e-3), -1, :]
  experiment_2 = (f"IDBD theta = 0.001 from alpha_0 = {INIT_STEP_SIZE} after "
                  f"{num_examples // 1000}k examples: relevant step sizes "
                  f"{slow[:, :NUM_RELEVANT].mean():.3f} (range {slow[:, :NUM_RELEVANT].min():.3f}-"
                  f"{slow[:, :NUM_RELEVANT].max():.3f}), irrelevant max "
                  f"{slow[:, NUM_RELEVANT:].max():.4f} (Sutton, 250k: ~0.13 and < 0.007)")
  adaptive = [n for n in compared if not n.startswith("LMS")]
  best_adaptive = min(adaptive, key=best_of)
  summary_lines = [
      f"continual (Sutton 1992): {num_examples // 1000}k examples x {seeds} seeds, MSE over the "
      f"last {FINAL_WINDOW // 1000}k (best of each grid)",
      f"best fixed LMS {best_of(LMS_NAME):.3f} ({hyper_of(LMS_NAME)}; closed form {mse_lms:.3f} "
      f"at {alpha_lms:.3f}; Sutton {SUTTON['LMS (best fixed)']})",
      f"ideal per-input LMS {best_of(PER_INPUT_NAME):.3f} ({hyper_of(PER_INPUT_NAME)}; closed "
      f"form {mse_rel:.3f} at {alpha_rel:.3f}; Sutton {SUTTON['ideal per-input LMS']})",
      f"IDBD {best_of(IDBD_NAME):.3f} ({hyper_of(IDBD_NAME)}); in Sutton's 20k-30k window best "
      f"{np.nanmin(idbd['sutton'].mean(0)):.3f} (theta "
      f"{idbd['method'].grid[int(np.nanargmin(idbd['sutton'].mean(0)))]:g}; Sutton {SUTTON['IDBD']})",
      f"best adaptive: {best_adaptive} {best_of(best_adaptive):.3f} ({hyper_of(best_adaptive)}; "
      f"relevant step size within 10% of its final value after "
      f"{records[best_adaptive]['summary']['plateau'] / 1000:.0f}k examples)",
      experiment_2,
  ] + [f"{n}: {best_of(n):.3f} ({hyper_of(n)})" for n in adaptive if n != IDBD_NAME]
  idbd_lines = ("IDBD in Sutton's window (examples 20k-30k) over its theta grid: "
                + "; ".join(idbd_window), experiment_2)
  return summary_lines, idbd_lines
