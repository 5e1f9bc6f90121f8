"""Argument checks shared by the host loops of L2O meta-training and L2HMC training."""

from __future__ import annotations

import os
from typing import Sequence


def check_schedule(log_every: int, checkpoint_every: int,
                   checkpoint_dir: str | os.PathLike | None) -> None:
  """Raises ``ValueError`` unless ``log_every >= 1``, ``checkpoint_every >= 0``, and a
  ``checkpoint_dir`` is given when ``checkpoint_every`` is."""
  if log_every < 1 or checkpoint_every < 0:
    raise ValueError(f"log_every ({log_every}) must be >= 1 and checkpoint_every "
                     f"({checkpoint_every}) >= 0.")
  if checkpoint_every and checkpoint_dir is None:
    raise ValueError("checkpoint_every needs a checkpoint_dir.")


def hashable_axis(axis: str | Sequence[str] | None) -> str | tuple[str, ...] | None:
  """A mesh axis name or names in a hashable form (part of a jit cache key)."""
  return axis if axis is None or isinstance(axis, str) else tuple(axis)
