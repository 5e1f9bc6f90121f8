"""Progress reports of the training loops: a labelled tqdm bar or a callback."""

from __future__ import annotations

from typing import Callable, NamedTuple


class Progress(NamedTuple):
  """What a training loop reports every ``log_every`` iterations and at the end.

  ``str(progress)`` is a labelled line, so ``progress=print`` prints readable reports.

  Attributes:
    label: which loop, e.g. ``"L2O meta-training"``.
    iteration: iterations done (of the whole run).
    num_iterations: iterations of the whole run.
    loss: the loss since the previous report: the mean of the finite losses (NaN if
      none); in L2O meta-training the median over the tasks (``metrics`` holds the
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
    return (f"{self.label} {self.iteration}/{self.num_iterations}: loss {self.loss:.5g}, "
            f"skipped {self.skipped_updates}{extra}, {self.iterations_per_second:.3g} it/s")


ProgressFn = Callable[[Progress], None]


class Bar:
  """A labelled tqdm bar: iterations, rate, and the last report's loss and skipped updates."""

  def __init__(self, label: str, first: int, total: int):
    from tqdm.auto import tqdm  # only when a bar is shown

    self._bar = tqdm(total=total, initial=first, desc=label, unit="it", dynamic_ncols=True)

  def __call__(self, report: Progress) -> None:
    postfix = {"loss": f"{report.loss:.4g}", "skipped": report.skipped_updates}
    postfix.update({name: f"{value:.3g}" for name, value in report.metrics.items()})
    self._bar.set_postfix(postfix, refresh=False)
    self._bar.update(report.iteration - self._bar.n)

  def close(self) -> None:
    self._bar.close()

