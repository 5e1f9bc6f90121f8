"""Figures of the continual tracking task, and the curves they are drawn from.

The figures read a :class:`Curves` (the best grid value of each plotted method,
averaged over seeds), which ``continual.run`` saves to ``continual_curves.npz`` so
that ``--replot`` redraws them without training.
"""

from __future__ import annotations

import pathlib
from typing import NamedTuple

import numpy as np

import _report
from suite_tasks.continual_methods import (BIN_SIZE, IDBD_NAME, LMS_NAME, PER_INPUT_NAME,
                                           SMALL_INIT_STEP_SIZE)
from suite_tasks.continual_stream import NUM_RELEVANT

PANELS = (  # (title, methods) of the curve and step-size plots
    ("compared methods", (
        LMS_NAME, PER_INPUT_NAME, IDBD_NAME, "MetaOptimize hessian_free (SGD, Adam)",
        "MetaOptimize l_approx (SGD, SGD)", "MetaOptimize l_approx (SGD, Adam)",
        "MetaOptimize l_approx (SGD, Lion)", "MetaOptimize 2x2 (SGD, Adam)",
        "Xu et al. IDBD (metaoptax.xu_idbd)", "hypergradient descent, per-input")),
    ("diagnostics", (
        IDBD_NAME, "MetaOptimize hessian_free (SGD, Adam)",
        "MetaOptimize hessian_free (SGD, Adam), gamma=0.9",
        "MetaOptimize 2x2 (SGD, Adam)", "MetaOptimize 2x2 (SGD, Adam), gamma=0.999",
        f"IDBD (metaoptax.idbd), alpha_0={SMALL_INIT_STEP_SIZE:g}",
        f"MetaOptimize l_approx (SGD, Adam), alpha_0={SMALL_INIT_STEP_SIZE:g}",
        f"MetaOptimize hessian_free (SGD, Adam), gamma=0.9, alpha_0={SMALL_INIT_STEP_SIZE:g}")),
)
PLOTTED = tuple(dict.fromkeys(name for _, names in PANELS for name in names))


class Curves(NamedTuple):
  """What the figures show; per-method entries are keyed by method name (``PLOTTED``)."""

  num_examples: int
  mse_lms: float  # best single LMS step size, closed form
  mse_relevant: float  # best per-input LMS step sizes, closed form
  alpha_relevant: float  # the relevant inputs' step size of the latter
  labels: dict  # name -> legend label (the name and its best hyperparameter)
  squared_error: dict  # name -> (bins,) MSE of each bin, mean over seeds
  relevant: dict  # name -> (bins,) step size of the relevant inputs, mean over inputs and seeds
  irrelevant: dict  # name -> (bins,) the same for the irrelevant inputs
  sensitivity: dict  # run label -> {"y_beta": (bins,), "alpha": (bins,)} (seed 0)


def curves_from_records(records, sensitivity, *, num_examples, mse_lms, mse_relevant,
                        alpha_relevant) -> Curves:
  """The plotted curves from ``continual.run``'s per-method records (best grid value)."""
  labels, errors, relevant, irrelevant = {}, {}, {}, {}
  for name in PLOTTED:
    rec = records[name]
    best = rec["summary"]["best"]
    labels[name] = f"{name} ({rec['method'].hyper_name}={rec['method'].grid[best]:g})"
    errors[name] = rec["result"].squared_error[:, best].mean(0)
    sizes = rec["result"].step_sizes[:, best]  # (seeds, bins, inputs)
    relevant[name] = sizes[..., :NUM_RELEVANT].mean((0, 2))
    irrelevant[name] = sizes[..., NUM_RELEVANT:].mean((0, 2))
  return Curves(num_examples, mse_lms, mse_relevant, alpha_relevant, labels, errors, relevant,
                irrelevant, {k: {"y_beta": d["y_beta"], "alpha": d["alpha"]}
                             for k, d in sensitivity.items()})


def save_curves(path, curves: Curves) -> None:
  arrays = {"num_examples": curves.num_examples, "mse_lms": curves.mse_lms,
            "mse_relevant": curves.mse_relevant, "alpha_relevant": curves.alpha_relevant,
            "names": np.array(list(curves.labels)),
            "labels": np.array(list(curves.labels.values())),
            "sensitivity_labels": np.array(list(curves.sensitivity))}
  for i, name in enumerate(curves.labels):
    arrays[f"{i}_squared_error"] = curves.squared_error[name]
    arrays[f"{i}_relevant"] = curves.relevant[name]
    arrays[f"{i}_irrelevant"] = curves.irrelevant[name]
  for i, d in enumerate(curves.sensitivity.values()):
    arrays[f"sensitivity_{i}_y_beta"] = d["y_beta"]
    arrays[f"sensitivity_{i}_alpha"] = d["alpha"]
  np.savez_compressed(path, **arrays)


def load_curves(path) -> Curves:
  """The :class:`Curves` written by :func:`save_curves`."""
  path = pathlib.Path(path)
  if not path.exists():
    raise FileNotFoundError(f"{path} not found: run the continual task once (without "
                            "--replot) to write the curves it redraws from.")
  data = np.load(path)
  names = [str(n) for n in data["names"]]
  return Curves(
      num_examples=int(data["num_examples"]), mse_lms=float(data["mse_lms"]),
      mse_relevant=float(data["mse_relevant"]), alpha_relevant=float(data["alpha_relevant"]),
      labels=dict(zip(names, (str(l) for l in data["labels"]))),
      squared_error={n: data[f"{i}_squared_error"] for i, n in enumerate(names)},
      relevant={n: data[f"{i}_relevant"] for i, n in enumerate(names)},
      irrelevant={n: data[f"{i}_irrelevant"] for i, n in enumerate(names)},
      sensitivity={str(label): {"y_beta": data[f"sensitivity_{i}_y_beta"],
                                "alpha": data[f"sensitivity_{i}_alpha"]}
                   for i, label in enumerate(data["sensitivity_labels"])})


def plot_all(curves: Curves, out_dir) -> list[str]:
  """Writes the three figures into ``out_dir``; returns their paths."""
  out_dir = pathlib.Path(out_dir)
  paths = [out_dir / f"continual_{kind}.png" for kind in ("curves", "step_sizes", "sensitivity")]
  error_curves(curves, paths[0])
  step_sizes(curves, paths[1])
  sensitivity(curves, paths[2])
  return [str(p) for p in paths]


def _log_binned(curve: np.ndarray, num_groups: int = 40) -> tuple[np.ndarray, np.ndarray]:
  """Averages consecutive bins into ~``num_groups`` log-spaced groups: (examples, mean)."""
  edges = np.unique(np.geomspace(1, curve.size, num_groups + 1).astype(int))
  edges[0] = 0
  x = np.array([(lo + hi) / 2 * BIN_SIZE for lo, hi in zip(edges[:-1], edges[1:])])
  y = np.array([curve[lo:hi].mean() for lo, hi in zip(edges[:-1], edges[1:])])
  return x, y


def _log_log_panel(ax, title, ylim=None):
  ax.set_xscale("log")
  ax.set_yscale("log")
  if ylim is not None:
    ax.set_ylim(*ylim)
  ax.set_xlabel("examples")
  ax.set_title(title)
  ax.legend(fontsize=7)
  ax.grid(True, which="both", alpha=0.3)


def error_curves(curves: Curves, path) -> None:
  """MSE vs examples (log-spaced bins) with the closed-form LMS lines."""
  plt = _report.pyplot()
  fig, axes = plt.subplots(1, 2, figsize=(16, 6.5), sharey=True)
  for ax, (title, names) in zip(axes, PANELS):
    for name in names:
      x, y = _log_binned(curves.squared_error[name])
      ax.plot(x, y, label=curves.labels[name], lw=1.2)
    ax.axhline(curves.mse_lms, color="gray", ls="--", lw=1,
               label=f"best LMS, closed form {curves.mse_lms:.2f}")
    ax.axhline(curves.mse_relevant, color="black", ls=":", lw=1,
               label=f"best per-input LMS, closed form {curves.mse_relevant:.3f}")
    _log_log_panel(ax, f"Sutton (1992) tracking task, {title}: MSE (log-spaced bins)",
                   ylim=(1.2, 8.0))  # diverged runs leave through the top
  axes[0].set_ylabel("MSE (mean over seeds; best of each grid)")
  _report.save_figure(fig, path)


def step_sizes(curves: Curves, path) -> None:
  """Learned step sizes of the relevant (solid) and irrelevant (dashed) inputs."""
  plt = _report.pyplot()
  fig, axes = plt.subplots(1, 2, figsize=(16, 6.5), sharey=True)
  x = (np.arange(curves.num_examples // BIN_SIZE) + 1) * BIN_SIZE
  colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
  for ax, (title, names) in zip(axes, PANELS):
    adaptive = [n for n in names if not n.startswith("LMS")]
    for k, name in enumerate(adaptive):
      color = colors[k % len(colors)]
      ax.plot(x, curves.relevant[name], color=color, lw=1.2, label=curves.labels[name])
      ax.plot(x, curves.irrelevant[name], color=color, ls="--", lw=1.2)
    ax.axhline(curves.alpha_relevant, color="black", ls=":", lw=1,
               label=f"optimal relevant step size (closed form) {curves.alpha_relevant:.3f}")
    _log_log_panel(ax, f"{title}: step sizes, relevant (solid) vs irrelevant (dashed)")
  axes[0].set_ylabel("step size (mean over inputs and seeds)")
  _report.save_figure(fig, path)


def sensitivity(curves: Curves, path) -> None:
  """The 2x2 variant's sensitivity of beta_t to beta_0, and its step size (seed 0)."""
  plt = _report.pyplot()
  fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(14, 5.5))
  for label, d in curves.sensitivity.items():
    x = (np.arange(d["y_beta"].size) + 1) * BIN_SIZE
    ax1.plot(x, d["y_beta"], label=label)
    ax2.plot(x, d["alpha"], label=label)
  ax1.set_yscale("symlog", linthresh=1e-3)
  ax1.set_title("2x2: diagonal of d beta_t / d beta_0 (relevant inputs, seed 0)")
  ax2.set_yscale("log")
  ax2.set_title("2x2: step size of the relevant inputs (seed 0)")
  for ax in (ax1, ax2):
    ax.set_xscale("log")
    ax.set_xlabel("examples")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
  _report.save_figure(fig, path)
