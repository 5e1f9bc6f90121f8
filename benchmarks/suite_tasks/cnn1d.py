"""A 1-D convnet on MNIST-1D (Greydanus 2020), with a validation split.

``mnist1d.data.make_dataset(get_dataset_args())``: the package's default data
(4000 train / 1000 test sequences of length 40, seed 42, nothing downloaded); 800
of the 4000 training sequences are held out as the validation split (fixed
permutation, seed 0). Model: three convolutions (kernel 5, 3, 3; stride 2; 32
channels; ReLU, He init) and a linear read-out of the flattened features (8.4k
parameters). Minibatches of 128, plain cross-entropy. Metrics: validation and
test accuracy.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from suite_tasks import mnist1d
from suite_tasks import models
from suite_tasks.problem import Problem

CHANNELS = 32
KERNELS = (5, 3, 3)
BATCH = 128
VALIDATION = 0.2


def init_params(key):
  keys = jax.random.split(key, len(KERNELS) + 1)
  params, fan_in_channels, length = [], 1, 40
  for k, size in zip(keys, KERNELS):
    fan_in = fan_in_channels * size
    params.append({"w": jax.random.normal(k, (size, fan_in_channels, CHANNELS)) *
                        jnp.sqrt(2.0 / fan_in), "b": jnp.zeros(CHANNELS)})
    fan_in_channels, length = CHANNELS, (length + 1) // 2
  features = length * CHANNELS
  params.append({"w": jax.random.normal(keys[-1], (features, 10)) * jnp.sqrt(1.0 / features),
                 "b": jnp.zeros(10)})
  return params


def conv(h, w, stride=2):
  """``lax.conv_general_dilated(h, w, (stride,), "SAME")`` on (batch, length, channels),
  as one matmul of the stacked windows (im2col): several times faster on a CPU for
  these small channel counts."""
  size, length = w.shape[0], h.shape[1]
  out = (length + stride - 1) // stride
  pad = max((out - 1) * stride + size - length, 0)
  h = jnp.pad(h, ((0, 0), (pad // 2, pad - pad // 2), (0, 0)))
  windows = jnp.concatenate(
      [h[:, i:i + stride * (out - 1) + 1:stride] for i in range(size)], -1)
  return windows @ w.reshape(-1, w.shape[-1])


def logits_fn(params, x):
  h = x[..., None]  # (batch, 40, 1)
  for layer in params[:-1]:
    h = jax.nn.relu(conv(h, layer["w"]) + layer["b"])
  return h.reshape(h.shape[0], -1) @ params[-1]["w"] + params[-1]["b"]


def make_problem() -> Problem:
  x, y, x_test, y_test = mnist1d.load_data()
  x_train, y_train, x_val, y_val = models.split_validation(x, y, VALIDATION)
  loss, batch, evaluate = models.classifier_problem_fns(
      logits_fn, jnp.asarray(x_train), jnp.asarray(y_train), jnp.asarray(x_test),
      jnp.asarray(y_test), batch_size=BATCH, validation=(jnp.asarray(x_val), jnp.asarray(y_val)))
  return Problem(
      name="cnn1d", init=init_params, loss=loss, batch=batch, evaluate=evaluate,
      test_name="test accuracy", higher_is_better=True, train_loss_floor=0.0,
      blocks=[{"w": i, "b": i} for i in range(len(KERNELS) + 1)],
      block_names=tuple(f"layer {i}" for i in range(len(KERNELS) + 1)),
      val_batch=models.minibatches(jnp.asarray(x_val), jnp.asarray(y_val), BATCH))
