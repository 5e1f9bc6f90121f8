"""Task 2: MLP classifier on MNIST-1D (Greydanus 2020), generated locally.

``mnist1d.data.make_dataset(get_dataset_args())``: 4000 train / 1000 test
sequences of length 40 (the package's default arguments, seed 42; nothing is
downloaded). MLP 40-100-100-10 (ReLU, He init), minibatches of 128, plain
cross-entropy. The best AdamW rate is chosen by final test accuracy (the MLP
overfits: the train loss keeps falling while test accuracy saturates).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from suite_tasks import models
from suite_tasks import protocol
from suite_tasks.problem import Problem

SIZES = (40, 100, 100, 10)
BATCH = 128


def load_data():
  from mnist1d.data import get_dataset_args, make_dataset  # pylint: disable=g-import-not-at-top
  data = make_dataset(get_dataset_args())
  return (np.asarray(data["x"], np.float32), np.asarray(data["y"], np.int32),
          np.asarray(data["x_test"], np.float32), np.asarray(data["y_test"], np.int32))


def make_problem(sizes=SIZES, name="mnist1d", blocks="per_leaf", block_names=None,
                 validation=0.0) -> Problem:
  """The task; ``validation > 0`` holds out that fraction of the train split (``"val"``)."""
  x_train, y_train, x_test, y_test = load_data()
  held_out = None
  if validation:
    x_train, y_train, x_val, y_val = models.split_validation(x_train, y_train, validation)
    held_out = (jnp.asarray(x_val), jnp.asarray(y_val))
  x_train, y_train, x_test, y_test = (jnp.asarray(a) for a in (x_train, y_train, x_test, y_test))
  loss, batch, evaluate = models.classifier_problem_fns(
      models.mlp, x_train, y_train, x_test, y_test, batch_size=BATCH, validation=held_out)
  return Problem(
      name=name, init=lambda k: models.init_mlp(k, sizes), loss=loss, batch=batch,
      evaluate=evaluate, test_name="test accuracy", higher_is_better=True,
      train_loss_floor=0.0, blocks=blocks,
      block_names=block_names or tuple(f"{n}{i}" for i in range(len(sizes) - 1) for n in ("b", "w")),
      val_batch=models.minibatches(*held_out, BATCH) if held_out else None)


CONFIG = protocol.TaskConfig(
    title="Task 2: MNIST-1D MLP",
    description=__doc__,
    steps=40_000, quick_steps=400, chunk=500, quick_chunk=200,
    select_by="test", blockwise_presets=("(AdamW, Adam)", "(SGD+mom, Adam)"))


def run(*, quick, seeds, out_dir, progress, replot=False):
  return protocol.run_task(make_problem(), CONFIG, quick=quick, seeds=seeds,
                           out_dir=out_dir, progress=progress, replot=replot)
