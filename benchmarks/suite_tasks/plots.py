"""The suite's figures: loss curves, step-size trajectories, initial-step-size sweep."""

from __future__ import annotations

import numpy as np

import _report

_STYLE = {"adamw": ":", "contrib": "-.", "hypergradient": "--", "metaoptax": "-",
          "init_sweep": "-"}


def _mean_log(x):
  return np.exp(np.nanmean(np.log(np.maximum(x, 1e-12)), 0))


def loss_curves(problem, logs, path, title):
  """Train loss (minus floor) and the test metric vs step, mean over seeds."""
  plt = _report.pyplot()
  fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(14, 5))
  for log in logs:
    ls = _STYLE.get(log.method.family, "-")
    if log.method.family == "metaoptax" and "scalar" not in log.method.name:
      ls = "--"
    lw = 2.2 if log.method.name.startswith("(AdamW, Adam) scalar") else 1.2
    line, = ax1.plot(log.steps, _mean_log(log.train_loss - problem.train_loss_floor), ls,
                     lw=lw, label=log.method.name)
    ax2.plot(log.steps, np.nanmean(log.test, 0), ls, lw=lw, color=line.get_color())
  ax1.set(yscale="log", xlabel="step",
          ylabel="train loss" + (" − floor" if problem.train_loss_floor else ""),
          title="train loss (geometric mean over seeds)")
  ax2.set(xlabel="step", ylabel=problem.test_name, title=problem.test_name)
  fig.suptitle(title)
  if problem.higher_is_better:
    finals = [np.nanmean(l.test[:, -1]) for l in logs]
    top = np.nanmax(finals)
    ax2.set_ylim(max(0.0, np.nanmedian(finals) - 3 * (top - np.nanmedian(finals)) - 0.02),
                 min(1.0, top + 0.01))
  else:
    finals = [np.nanmean(l.test[:, -1]) for l in logs]
    low = np.nanmin(finals)
    ax2.set_ylim(low - 0.05 * abs(low), np.nanmedian(finals) + 3 * (np.nanmedian(finals) - low)
                 + 0.05 * abs(low))
  ax1.legend(fontsize=6.5, ncol=2)
  _report.save_figure(fig, path)


def step_sizes(problem, logs, best_lr, path, title):
  """Learned step sizes vs step: scalar methods (left), blockwise per block (right)."""
  plt = _report.pyplot()
  fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(14, 5))
  for log in logs:
    a = log.step_sizes  # (seeds, n, m)
    if a.shape[-1] == 1:
      line, = ax1.plot(log.steps, _mean_log(a[..., 0]), lw=1.8, label=log.method.name)
      for s in range(a.shape[0]):
        ax1.plot(log.steps, a[s, :, 0], lw=0.5, alpha=0.4, color=line.get_color())
  blockwise = [l for l in logs if l.step_sizes.shape[-1] > 1]
  if blockwise:
    log = next((l for l in blockwise if l.method.name.startswith("(AdamW, Adam)")), blockwise[0])
    a = log.step_sizes
    names = problem.block_names if len(problem.block_names) == a.shape[-1] else range(a.shape[-1])
    cmap = plt.get_cmap("viridis")
    for j, name in enumerate(names):
      ax2.plot(log.steps, _mean_log(a[..., j]), lw=1.5, color=cmap(j / max(1, a.shape[-1] - 1)),
               label=str(name))
    ax2.set_title(f"{log.method.name}: one line per block (mean over seeds)")
    ax2.legend(fontsize=7, ncol=2)
  for ax in (ax1, ax2):
    ax.axhline(best_lr, color="gray", ls="--", lw=0.8)
    ax.text(0, best_lr, f" best constant AdamW {best_lr:g}", fontsize=7, va="bottom", color="gray")
    ax.set(yscale="log", xlabel="step", ylabel="step size α")
  ax1.set_title("learned scalar step sizes (thin: seeds)")
  fig.suptitle(title)
  ax1.legend(fontsize=7)
  _report.save_figure(fig, path)


def init_sweep(problem, logs, best_lr, path, title):
  """Paper Figs. 2-3: step size and loss from initial step sizes 4 orders apart."""
  plt = _report.pyplot()
  fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(14, 5))
  cmap = plt.get_cmap("plasma")
  for i, log in enumerate(logs):
    color = cmap(i / max(1, len(logs) - 0.5))
    for s in range(log.step_sizes.shape[0]):
      ax1.plot(log.steps, log.step_sizes[s, :, 0], color=color, lw=1.2,
               label=log.method.info if s == 0 else None)
    ax2.plot(log.steps, _mean_log(log.train_loss - problem.train_loss_floor), color=color,
             lw=1.5, label=log.method.info)
  ax1.axhline(best_lr, color="gray", ls="--", lw=0.8)
  ax1.text(0, best_lr, f" best constant AdamW {best_lr:g}", fontsize=7, va="bottom", color="gray")
  ax1.set(yscale="log", xlabel="step", ylabel="step size α",
          title="(AdamW, Adam) scalar, α from 4 starts (3 seeds each)")
  fig.suptitle(title)
  ax2.set(yscale="log", xlabel="step",
          ylabel="train loss" + (" − floor" if problem.train_loss_floor else ""),
          title="train loss (geometric mean over seeds)")
  ax1.legend(fontsize=8)
  ax2.legend(fontsize=8)
  _report.save_figure(fig, path)
