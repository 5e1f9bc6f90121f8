"""Small models of the suite as pure functions of pytrees (He-initialised MLP)."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def init_mlp(key, sizes):
  """A list of ``{"w", "b"}`` layers, He / Kaiming normal weights, zero biases."""
  params = []
  for k, (fan_in, fan_out) in zip(jax.random.split(key, len(sizes) - 1), zip(sizes, sizes[1:])):
    params.append({"w": jax.random.normal(k, (fan_in, fan_out)) * jnp.sqrt(2.0 / fan_in),
                   "b": jnp.zeros(fan_out)})
  return params


def mlp(params, x):
  """ReLU MLP; the last layer is linear (logits)."""
  for layer in params[:-1]:
    x = jax.nn.relu(x @ layer["w"] + layer["b"])
  return x @ params[-1]["w"] + params[-1]["b"]


def classifier_problem_fns(logits_fn, x_train, y_train, x_test, y_test, *, batch_size,
                           label_smoothing=0.0, num_classes=10, validation=None):
  """(loss, batch, evaluate) of a classifier on device arrays.

  ``evaluate`` gives the mean train loss on the full train set, the test accuracy
  and the test loss (``"test_loss"``: the plain cross-entropy, without label
  smoothing); with ``validation=(x_val, y_val)`` also the validation accuracy
  (``"val"``), on which methods are selected, and the validation loss (``"val_loss"``).
  """

  def cross_entropy(params, x, y, smoothing):
    targets = jax.nn.one_hot(y, num_classes)
    if smoothing:
      targets = targets * (1 - smoothing) + smoothing / num_classes
    return jnp.mean(-jnp.sum(targets * jax.nn.log_softmax(logits_fn(params, x)), -1))

  def loss(params, batch):
    return cross_entropy(params, *batch, label_smoothing)

  batch = minibatches(x_train, y_train, batch_size)

  def evaluate(params):
    accuracy = lambda x, y: jnp.mean(jnp.argmax(logits_fn(params, x), -1) == y)
    out = {"train_loss": loss(params, (x_train, y_train)), "test": accuracy(x_test, y_test),
           "test_loss": cross_entropy(params, x_test, y_test, 0.0)}
    if validation is not None:
      out["val"] = accuracy(*validation)
      out["val_loss"] = cross_entropy(params, *validation, 0.0)
    return out

  return loss, batch, evaluate


def minibatches(x, y, batch_size):
  """``key -> (x, y)``: ``batch_size`` examples drawn uniformly with replacement."""

  def batch(key):
    idx = jax.random.randint(key, (batch_size,), 0, x.shape[0])
    return x[idx], y[idx]

  return batch


def smoothed_label_floor(label_smoothing, num_classes=10):
  """The smallest cross-entropy against smoothed targets: their entropy."""
  import math  # pylint: disable=g-import-not-at-top
  p_true = 1 - label_smoothing + label_smoothing / num_classes
  p_other = label_smoothing / num_classes
  return -p_true * math.log(p_true) - (num_classes - 1) * p_other * math.log(p_other)


def split_validation(x, y, fraction, seed=0):
  """``(x_train, y_train, x_val, y_val)``: a fixed random ``fraction`` of ``(x, y)`` held out."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  order = np.random.default_rng(seed).permutation(len(x))
  n_val = int(round(fraction * len(x)))
  val, train = order[:n_val], order[n_val:]
  return x[train], y[train], x[val], y[val]
