"""Task 5: blockwise step sizes, one per layer, on a deeper MLP (MNIST-1D).

The paper (Sharifnassab et al. 2024, Sec. 7, CIFAR-10 ResNet-18) reports that
blockwise step sizes (six blocks: first layer, four residual stages, last layer)
let every (base, meta) pair beat its tuned baseline and lift (SGD with momentum,
Adam) to the level of the others, with the step sizes growing from the first
block to the last. Here: a 6-layer ReLU MLP 40-128-128-128-128-128-10 on MNIST-1D
(the package's default data), one step size per layer (its weights and bias
together: six blocks), for every preset, against one scalar step size and the
AdamW grid. Best AdamW rate chosen by final test accuracy.
"""

from __future__ import annotations

from suite_tasks import mnist1d
from suite_tasks import protocol

SIZES = (40, 128, 128, 128, 128, 128, 10)


def layer_labels():
  return [{"w": i, "b": i} for i in range(len(SIZES) - 1)]


CONFIG = protocol.TaskConfig(
    title="Task 5: blockwise (per-layer) step sizes, 6-layer MLP on MNIST-1D",
    description=__doc__,
    steps=20_000, quick_steps=400, chunk=500, quick_chunk=200,
    select_by="test", init_sweep=False, hypergradient=False,
    blocks_label="per layer")


def make_problem(validation=0.0):
  return mnist1d.make_problem(
      SIZES, name="blockwise", blocks=layer_labels(),
      block_names=tuple(f"layer {i}" for i in range(len(SIZES) - 1)), validation=validation)


def run(*, quick, seeds, out_dir, progress, replot=False):
  return protocol.run_task(make_problem(), CONFIG, quick=quick, seeds=seeds, out_dir=out_dir,
                           progress=progress, replot=replot)
