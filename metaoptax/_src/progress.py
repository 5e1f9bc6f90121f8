"""Progress reports of the training loops: a labelled tqdm bar or a callback."""

from __future__ import annotations

import math
from typing import Callable, NamedTuple


class Progress(NamedTuple):
  """What a training loop reports every ``log_every`` iterations and at the end.

  ``str(progress)`` is a labelled line, so ``progress=print`` prints readable reports.

  Attributes:
    label: which loop, e.g. ``"L2O meta-training"``.
    iteration: iterations done (of the whole run).
    num_iterations: iterations of the whole run.
    loss: the loss since the previous report: the mean of the finite losses (NaN if
      none, or in a phase without a loss, e.g. the warm-up of ``l2hmc.adapt``: then not
      shown); in L2O meta-training the median over the tasks (``metrics`` holds the
      worst task's).
    skipped_updates: updates skipped for a non-finite loss or gradient (whole run).
    iterations_per_second: since the previous report.
    metrics: further means since the previous report, e.g. ``{"acceptance": 0.6}``.
  """

  label: str
  iteration: int
  num_iterations: int
  loss: float
  skipped_updates: int
  iterations_per_second: float
  metrics: dict

  def __str__(self) -> str:
    extra = "".join(f", {name} {value:.4g}" for name, value in self.metrics.items())
    loss = "" if math.isnan(self.loss) else f"loss {self.loss:.5g}, "
    return (f"{self.label} {self.iteration}/{self.num_iterations}: {loss}"
            f"skipped {self.skipped_updates}{extra}, {self.iterations_per_second:.3g} it/s")


ProgressFn = Callable[[Progress], None]


class Bar:
  """A labelled tqdm bar: iterations, rate, and the last report's loss and skipped updates.

  A report with another label or another ``num_iterations`` relabels the bar or changes its
  total (the phases of a run, e.g. :func:`metaoptax.l2hmc.adapt`'s)."""

  def __init__(self, label: str, first: int, total: int):
    from tqdm.auto import tqdm  # only when a bar is shown

    self._bar = tqdm(total=total, initial=first, desc=label, unit="it", dynamic_ncols=True)

  def __call__(self, report: Progress) -> None:
    relabelled = report.label != self._bar.desc or report.num_iterations != self._bar.total
    self._bar.set_description_str(report.label, refresh=False)
    self._bar.total = report.num_iterations
    postfix = {} if math.isnan(report.loss) else {"loss": f"{report.loss:.4g}"}
    postfix["skipped"] = report.skipped_updates
    postfix.update({name: f"{value:.3g}" for name, value in report.metrics.items()})
    self._bar.set_postfix(postfix, refresh=False)
    self._bar.update(report.iteration - self._bar.n)
    if relabelled:  # shown now: the next phase may run long before the next report
      self._bar.refresh()

  def close(self) -> None:
    self._bar.close()

