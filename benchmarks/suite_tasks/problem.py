"""A supervised training problem, as the runner needs it: pure functions of arrays."""

from __future__ import annotations

from typing import Any, Callable, NamedTuple


class Problem(NamedTuple):
  """Everything a run needs, as jit-able functions closed over device arrays.

  Attributes:
    name: short task name (file names).
    init: ``key -> params``.
    loss: ``(params, batch) -> scalar`` minibatch objective.
    batch: ``key -> batch`` draws a minibatch from the device-resident dataset.
    evaluate: ``params -> {"train_loss": scalar, "test": scalar}`` on fixed data.
    test_name: what ``"test"`` is, e.g. ``"test accuracy"``.
    higher_is_better: for ``"test"``.
    train_loss_floor: subtracted from the train loss in tables and plots (0 if none).
    blocks: layer-group labels for blockwise step sizes (a params-shaped pytree of
      ints, one per array) or ``"per_leaf"``.
    block_names: names of the blocks, in label order (for the plots).
    val_batch: ``key -> batch`` draws a minibatch from the validation split (``None``
      without one); ``loss`` on it is the held-out loss a design may read while it trains.
  """

  name: str
  init: Callable[[Any], Any]
  loss: Callable[[Any, Any], Any]
  batch: Callable[[Any], Any]
  evaluate: Callable[[Any], dict]
  test_name: str
  higher_is_better: bool
  train_loss_floor: float
  blocks: Any
  block_names: tuple
  val_batch: Callable[[Any], Any] | None = None
