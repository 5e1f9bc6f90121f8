"""Task 1: MLP classifier on scikit-learn's digits (1437 train / 360 test images).

MLP 64-128-128-10 (ReLU, He init), minibatches of 128, cross-entropy with label
smoothing 0.1 so that the train loss has a floor (the entropy of the smoothed
targets; without it every good method drives it to 0 and ranks are ill-posed).
Tables report train loss minus that floor, and test accuracy.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from suite_tasks import models
from suite_tasks import protocol
from suite_tasks.problem import Problem

SIZES = (64, 128, 128, 10)
BATCH = 128
LABEL_SMOOTHING = 0.1


def load_split():
  """``(x_train, y_train, x_test, y_test)``: the stratified 1437 / 360 split, every
  feature standardized by the training split's mean and standard deviation. A pixel
  that is constant in the training split keeps its scale (divided by 1, as
  ``sklearn.preprocessing.StandardScaler`` does): divided by ``1e-6`` it put one test
  image's input at 1e6, whose loss then made the test loss meaningless."""
  from sklearn.datasets import load_digits  # pylint: disable=g-import-not-at-top
  from sklearn.model_selection import train_test_split  # pylint: disable=g-import-not-at-top
  digits = load_digits()
  x_train, x_test, y_train, y_test = train_test_split(
      digits.data.astype(np.float32), digits.target, test_size=360, random_state=0,
      stratify=digits.target)
  std = x_train.std(0)
  mean, std = x_train.mean(0), np.where(std > 0, std + 1e-6, 1.0)
  return (x_train - mean) / std, y_train, (x_test - mean) / std, y_test


def make_problem(validation=0.0, label_smoothing=LABEL_SMOOTHING, name="digits") -> Problem:
  """The task; ``validation > 0`` holds out that fraction of the train split (``"val"``);
  ``label_smoothing=0`` trains on the plain cross-entropy (the train loss then goes to 0
  and the network overfits its test loss)."""
  x_train, y_train, x_test, y_test = load_split()
  held_out = None
  if validation:
    x_train, y_train, x_val, y_val = models.split_validation(x_train, y_train, validation)
    held_out = (jnp.asarray(x_val), jnp.asarray(y_val))
  loss, batch, evaluate = models.classifier_problem_fns(
      models.mlp, jnp.asarray(x_train), jnp.asarray(y_train), jnp.asarray(x_test),
      jnp.asarray(y_test), batch_size=BATCH, label_smoothing=label_smoothing,
      validation=held_out)
  return Problem(
      name=name, init=lambda k: models.init_mlp(k, SIZES), loss=loss, batch=batch,
      evaluate=evaluate, test_name="test accuracy", higher_is_better=True,
      train_loss_floor=models.smoothed_label_floor(label_smoothing) if label_smoothing else 0.0,
      blocks="per_leaf",
      val_batch=models.minibatches(*held_out, BATCH) if held_out else None,
      block_names=tuple(f"{n}{i}" for i in range(len(SIZES) - 1) for n in ("b", "w")))


CONFIG = protocol.TaskConfig(
    title="Task 1: digits MLP",
    description=__doc__,
    steps=48_000, quick_steps=600, chunk=500, quick_chunk=200,
    select_by="train_loss", exact=True)


def run(*, quick, seeds, out_dir, progress, replot=False):
  return protocol.run_task(make_problem(), CONFIG, quick=quick, seeds=seeds,
                           out_dir=out_dir, progress=progress, replot=replot)
