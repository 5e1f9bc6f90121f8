r"""Task families for learned optimizers, each with its symmetry group.

A family (:class:`TaskFamily`) samples task instances (pytrees of arrays, so
``jax.vmap`` batches them) and starting points, evaluates the loss, and may act on
the parameters by a symmetry group: ``act(task, theta, params)`` keeps the loss
unchanged.

* :func:`ellipse` - generalized Booth: :math:`f(x) = \|A x + b\|^2`, SO(2)
  conjugated by :math:`h(x) = Ax + b` (``group_dim = 1``).
* :func:`rosenbrock` - generalized Rosenbrock: :math:`f = \|h(x, y)\|^2`,
  :math:`h = (c\,y + d_1 x^2 + d_2 x + d_3,\ a x + b)`.
* :func:`mlp_regression` - :math:`\tfrac12\|Y - W_2 \sigma(W_1 X)\|^2` (LeakyReLU),
  acted on by :math:`g = I + T` on the layer pair (``group_dim`` = width²).
* :func:`mlp_classifier` - an MLP on minibatches of a classification set.
* :func:`mlp_minibatch` - an MLP of any depth, width and activation trained with
  stochastic minibatches of a random subset of a classification set.

Samplers keep maps away from singular: :math:`|\det A|`, :math:`|a|` and
:math:`|c|` are bounded below, so :math:`h^{-1}` stays finite.
Weights are initialized with the variance-preserving schemes (Glorot and Bengio 2010;
He et al. 2015):
Glorot/Xavier for linear or tanh layers, He/Kaiming for (leaky) ReLU.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from metaoptax.teleport import groups

__all__ = ("TaskFamily", "gradient", "ELLIPSE_SAMPLERS", "ellipse", "rosenbrock",
           "glorot_normal", "he_normal", "mlp_regression", "mlp_classifier", "ACTIVATIONS",
           "mlp_minibatch")


class TaskFamily(NamedTuple):
  """A distribution of optimization problems, optionally with a symmetry group.

  Every function is pure and jit-able; a task is a pytree of arrays (``jax.vmap``
  batches them). Only the first four fields are needed: a family without ``act``
  has no group action (a ``"teleport"`` head cannot train on it).

  Attributes:
    name: the family's name (progress reports, errors).
    sample_task: ``rng_key -> task``.
    init_params: ``(rng_key, task) -> params``, the starting point.
    loss: ``(task, params) -> scalar``, what meta-training and evaluation score.
    act: ``(task, theta, params) -> params``, the symmetry group's action, which
      keeps ``loss`` unchanged; ``None``: no group.
    group_dim: the size of ``theta`` (0 without a group).
    minibatch_loss: ``(task, params, step) -> scalar``, the stochastic objective whose
      gradient the optimizer receives at ``step`` (a minibatch); ``None``: the gradient
      of ``loss`` (deterministic).
  """

  name: str
  sample_task: Callable[[jax.Array], Any]
  init_params: Callable[[jax.Array, Any], Any]
  loss: Callable[[Any, Any], jax.Array]
  act: Callable[[Any, jax.Array, Any], Any] | None = None
  group_dim: int = 0
  minibatch_loss: Callable[[Any, Any, jax.Array], jax.Array] | None = None


def gradient(family: TaskFamily, task: Any, params: Any, step: jax.Array) -> Any:
  """The gradient the optimizer receives at ``step``.

  Args:
    family: the :class:`TaskFamily`.
    task: one task of it.
    params: the optimizee's parameters.
    step: the optimizee's step (the minibatch index).

  Returns:
    The gradient of ``family.minibatch_loss(task, params, step)`` if the family has one,
    else of ``family.loss(task, params)``, params-shaped.
  """
  if family.minibatch_loss is None:
    return jax.grad(family.loss, argnums=1)(task, params)
  return jax.grad(family.minibatch_loss, argnums=1)(task, params, step)


def _away_from_zero(x, minimum):
  return jnp.where(jnp.abs(x) < minimum, jnp.sign(x + 1e-12) * minimum, x)


#: The ellipse family's samplers of ``A`` (:func:`ellipse`'s ``sampler=``).
ELLIPSE_SAMPLERS = ("det_bounded", "reference", "ill_conditioned", "mixture")


def _gaussian_full_rank(key):
  """A 2x2 matrix with iid N(0, 1) entries, redrawn while exactly singular."""

  def draw(state):
    k, _ = state
    k, sub = jax.random.split(k)
    return k, jax.random.normal(sub, (2, 2))

  first = (key, jax.random.normal(key, (2, 2)))
  _, a = jax.lax.while_loop(lambda state: jnp.linalg.det(state[1]) == 0, draw, first)
  return a


def _with_condition_number(key, max_condition):
  """A Gaussian draw's singular vectors and largest singular value, with its
  condition number replaced by one log-uniform on ``[1, max_condition]``."""
  ka, kc = jax.random.split(key)
  u, s, vt = jnp.linalg.svd(jax.random.normal(ka, (2, 2)))
  condition = jnp.exp(jax.random.uniform(kc, maxval=jnp.log(max_condition)))
  return (u * jnp.stack([s[0], s[0] / condition])) @ vt


def _det_bounded(key, min_abs_det):
  """iid N(0, 1) entries, redrawn (up to 20 times, then the identity) while
  ``|det A| < min_abs_det``."""

  def draw(state):
    k, _, tries = state
    k, sub = jax.random.split(k)
    return k, jax.random.normal(sub, (2, 2)), tries + 1

  def bad(state):
    _, a, tries = state
    return (jnp.abs(jnp.linalg.det(a)) < min_abs_det) & (tries < 20)

  _, a, _ = jax.lax.while_loop(bad, draw, draw((key, jnp.zeros((2, 2)), 0)))
  return jnp.where(jnp.abs(jnp.linalg.det(a)) < min_abs_det, jnp.eye(2), a)


def ellipse(varying: bool = True, min_abs_det: float = 0.3, *, sampler: str = "det_bounded",
            max_condition: float = 1e3) -> TaskFamily:
  r"""Generalized Booth / ellipses. Fixed task: ``A = diag(0.5, 3), b = 0``.

  Varying: ``b`` and the starting points ``x0`` iid N(0, 1); ``A`` by ``sampler``:

  * ``"det_bounded"``: entries iid N(0, 1), redrawn (up to 20 times, then the
    identity) until :math:`|\det A| \ge` ``min_abs_det``: no near-singular maps.
  * ``"reference"``: entries iid N(0, 1), redrawn only while exactly singular
    (full rank, no bound on :math:`|\det A|`), as the L2O-teleportation
    paper's code draws them: about 5 % of the tasks have
    :math:`|\det A| < 0.05` (near-singular, slow along one axis).
  * ``"ill_conditioned"``: a Gaussian draw :math:`U \operatorname{diag}(s_1,
    s_2) V^\top` (its SVD) with :math:`s_2` replaced by :math:`s_1 / \kappa`,
    :math:`\kappa` log-uniform on ``[1, max_condition]``: the same directions and
    scale, condition numbers exactly :math:`\kappa`.
  * ``"mixture"``: each task from ``"reference"`` or ``"ill_conditioned"`` with
    probability 1/2 (a training distribution that covers both).

  Args:
    varying: draw each task (else the one fixed task).
    min_abs_det: the least :math:`|\det A|` of ``"det_bounded"``.
    sampler: how :math:`A` is drawn: ``"det_bounded"``, ``"reference"``,
      ``"ill_conditioned"`` or ``"mixture"`` (above; :data:`ELLIPSE_SAMPLERS`).
    max_condition: the largest condition number of ``"ill_conditioned"``.

  Returns:
    A :class:`TaskFamily` of 2-d problems :math:`\|Ax + b\|^2` with the group
    SO(2) conjugated by :math:`x \mapsto Ax + b` (``group_dim=1``).
  """
  if sampler not in ELLIPSE_SAMPLERS:
    raise ValueError(f"sampler must be one of {ELLIPSE_SAMPLERS}, got {sampler!r}.")
  if max_condition < 1:
    raise ValueError(f"max_condition must be >= 1, got {max_condition}.")

  def sample_a(key):
    if sampler == "det_bounded":
      return _det_bounded(key, min_abs_det)
    if sampler == "reference":
      return _gaussian_full_rank(key)
    if sampler == "ill_conditioned":
      return _with_condition_number(key, max_condition)
    kc, ka = jax.random.split(key)
    return jax.lax.cond(jax.random.bernoulli(kc), _gaussian_full_rank,
                        lambda k: _with_condition_number(k, max_condition), ka)

  def sample_task(key):
    if not varying:
      return {"a": jnp.diag(jnp.array([0.5, 3.0])), "b": jnp.zeros(2)}
    ka, kb = jax.random.split(key)
    return {"a": sample_a(ka), "b": jax.random.normal(kb, (2,))}

  def loss(task, x):
    return jnp.sum((task["a"] @ x + task["b"]) ** 2)

  def act(task, theta, x):
    rotate, _ = groups.conjugated_rotation(groups.affine_bijection(task["a"], task["b"]))
    return rotate(theta[0], x)

  name = "ellipse" if not varying or sampler == "det_bounded" else f"ellipse_{sampler}"
  return TaskFamily(name if varying else "ellipse_fixed", sample_task,
                    lambda key, task: jax.random.normal(key, (2,)), loss, act, 1)


def rosenbrock(varying: bool = True, min_abs: float = 0.5) -> TaskFamily:
  r"""Generalized Rosenbrock, :math:`\|h(x, y)\|^2` with
  :math:`h(x, y) = (c\,y + d(x),\ a x + b)` (:func:`metaoptax.teleport.groups.rosenbrock_bijection`).

  Fixed task: ``a=1, b=-1, c=-2, d(x) = 0.4 x^2``. Varying:
  ``a, b, c, d1, d2, d3`` iid N(0, 1) with ``|a|, |c| >= min_abs`` and
  :math:`d(x) = d_1 x^2 + d_2 x + d_3`. The group is SO(2) conjugated by :math:`h`
  (``group_dim=1``), which leaves every task's loss unchanged.

  Args:
    varying: draw each task's coefficients (else the one fixed task).
    min_abs: the least ``|a|`` and ``|c|`` (which keep :math:`h` invertible).

  Returns:
    A :class:`TaskFamily` of 2-d problems started from a standard normal.
  """

  def sample_task(key):
    if not varying:
      return jnp.array([1.0, -1.0, -2.0, 0.4, 0.0, 0.0])
    z = jax.random.normal(key, (6,))
    return z.at[0].set(_away_from_zero(z[0], min_abs)).at[2].set(_away_from_zero(z[2], min_abs))

  def bijection(task):
    a, b, c, d1, d2, d3 = task
    return groups.rosenbrock_bijection(a, b, lambda x: c, lambda x: d1 * x**2 + d2 * x + d3)

  def loss(task, x):
    h, _ = bijection(task)
    return jnp.sum(h(x) ** 2)

  def act(task, theta, x):
    return groups.conjugated_rotation(bijection(task))[0](theta[0], x)

  return TaskFamily("rosenbrock" if varying else "rosenbrock_fixed", sample_task,
                    lambda key, task: jax.random.normal(key, (2,)), loss, act, 1)


def glorot_normal(key, fan_out, fan_in):
  """Glorot/Xavier: Var = 2 / (fan_in + fan_out) (linear and tanh layers).

  Args:
    key: PRNG key.
    fan_out, fan_in: the weight matrix's shape ``(fan_out, fan_in)``.

  Returns:
    A float32 matrix ``(fan_out, fan_in)`` of normal draws with that variance.
  """
  return jax.random.normal(key, (fan_out, fan_in)) * jnp.sqrt(2.0 / (fan_in + fan_out))


def he_normal(key, fan_out, fan_in, negative_slope=0.0):
  """He/Kaiming: Var = 2 / ((1 + slope^2) fan_in) ((leaky) ReLU layers).

  Args:
    key: PRNG key.
    fan_out, fan_in: the weight matrix's shape ``(fan_out, fan_in)``.
    negative_slope: the LeakyReLU's slope below 0 (0: ReLU).

  Returns:
    A float32 matrix ``(fan_out, fan_in)`` of normal draws with that variance.
  """
  return jax.random.normal(key, (fan_out, fan_in)) * jnp.sqrt(
      2.0 / ((1.0 + negative_slope**2) * fan_in))


def mlp_regression(width: int = 20, examples: int = 20, teleport_scale: float = 0.01,
                   negative_slope: float = 0.1) -> TaskFamily:
  r"""Two-layer regression :math:`\tfrac12\|Y - W_2\,\mathrm{LeakyReLU}(W_1 X)\|^2`.

  ``X, Y`` entries ~ U[0, 1) (width x examples); ``W1`` He-initialized for
  LeakyReLU, ``W2`` Glorot. The group element is :math:`g = I + T` with ``T``
  (from theta, width² numbers) rescaled to Frobenius norm ``teleport_scale``;
  the action is exact on the batch when ``examples <= width`` (the default has
  ``examples == width``).

  Args:
    width: the layers' width.
    examples: the batch's examples.
    teleport_scale: the Frobenius norm of :math:`T` in :math:`g = I + T`.
    negative_slope: the LeakyReLU's slope below 0.

  Returns:
    A :class:`TaskFamily` with ``group_dim = width ** 2``.
  """

  def sample_task(key):
    kx, ky = jax.random.split(key)
    return {"x": jax.random.uniform(kx, (width, examples)),
            "y": jax.random.uniform(ky, (width, examples))}

  def init_params(key, task):
    k1, k2 = jax.random.split(key)
    return {"w1": he_normal(k1, width, width, negative_slope),
            "w2": glorot_normal(k2, width, width)}

  def loss(task, p):
    hidden = groups.leaky_relu(p["w1"] @ task["x"], negative_slope)
    return 0.5 * jnp.sum((task["y"] - p["w2"] @ hidden) ** 2)

  def act(task, theta, p):
    t = theta.reshape(width, width)
    t = teleport_scale * t / (jnp.linalg.norm(t) + 1e-12)
    w1, w2 = groups.leaky_relu_layer_pair(jnp.eye(width) + t, p["w1"], p["w2"], task["x"],
                                          negative_slope)
    return {"w1": w1, "w2": w2}

  return TaskFamily("mlp_regression", sample_task, init_params, loss, act, width * width)


def mlp_classifier(data: tuple, hidden: int = 32, batch: int = 128) -> TaskFamily:
  """An MLP (inputs-hidden-classes, ReLU, He init) on minibatches of a classification set.

  A task is a minibatch of ``batch`` examples drawn without replacement; no group
  action (no teleportation).

  Args:
    data: ``(inputs, labels)`` to draw the minibatches from, inputs
      ``(examples, features)`` (already standardized) and integer labels
      ``0 .. classes - 1``; e.g. a training split, so that meta-training never
      sees the test examples.
    hidden: width of the hidden layer.
    batch: examples per task.
  """
  x, y = jnp.asarray(data[0], jnp.float32), jnp.asarray(data[1])
  if x.ndim != 2 or y.shape != x.shape[:1]:
    raise ValueError(f"data must be (inputs (examples, features), labels (examples,)), got "
                     f"shapes {x.shape} and {y.shape}.")
  if not 0 < batch <= x.shape[0]:
    raise ValueError(f"batch must be in [1, {x.shape[0]}] (the examples), got {batch}.")
  features, classes = x.shape[1], int(jnp.max(y)) + 1

  def sample_task(key):
    idx = jax.random.choice(key, x.shape[0], (batch,), replace=False)
    return {"x": x[idx], "y": y[idx]}

  def init_params(key, task):
    k1, k2 = jax.random.split(key)
    return {"w1": he_normal(k1, hidden, features), "b1": jnp.zeros(hidden),
            "w2": glorot_normal(k2, classes, hidden), "b2": jnp.zeros(classes)}

  def loss(task, p):
    h = jax.nn.relu(task["x"] @ p["w1"].T + p["b1"])
    logits = h @ p["w2"].T + p["b2"]
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), task["y"][:, None], 1))

  return TaskFamily("mlp_classifier", sample_task, init_params, loss)


#: Activations of :func:`mlp_minibatch`.
ACTIVATIONS = {"relu": jax.nn.relu, "tanh": jnp.tanh, "gelu": jax.nn.gelu}


def mlp_minibatch(data: tuple, sizes: tuple[int, ...], activation: str = "relu", *,
                  examples: int = 512, batch: int = 64, label_smoothing: float = 0.0,
                  held_out: int = 0, metric: str = "cross_entropy",
                  name: str | None = None) -> TaskFamily:
  r"""An MLP classifier trained on stochastic minibatches of a random subset of a data set.

  A task is ``examples`` examples of ``data`` drawn without replacement and a PRNG
  key; at optimizee step :math:`t` the optimizer receives the gradient on a
  minibatch of ``batch`` of them (drawn with replacement from the key folded with
  :math:`t`, as ``minibatch_loss``), while ``loss`` is the cross-entropy on all
  ``examples`` (what the meta-loss and the evaluation score). Layers
  ``sizes[0] - ... - sizes[-1]`` (inputs to classes), ``activation`` between them,
  He initialization for ReLU and GELU, Glorot for tanh, zero biases. Cross-entropy
  with ``label_smoothing`` (targets :math:`(1-\varepsilon)\,\mathrm{onehot} +
  \varepsilon / K`). No symmetry group. With ``held_out`` :math:`> 0`
  a task draws that many more examples, disjoint from the ``examples`` it trains on, and
  ``loss`` is the cross-entropy on them: a meta-loss of generalization, what a user
  scores, while the optimizer still receives training minibatches only. With
  ``metric="error"`` ``loss`` is instead the fraction of those examples misclassified
  (:math:`\frac1n \sum_i [\arg\max_k f_k(x_i) \ne y_i]`): the test error a user reads. It
  is piecewise constant in the weights, so its gradient is zero almost everywhere: it is
  a meta-loss for zeroth-order meta-gradients (:class:`~metaoptax.l2o.pes.PES`) and a
  score for :class:`~metaoptax.l2o.Validation`, not for back-propagation.

  Args:
    data: ``(inputs (examples, features), labels (examples,))``, e.g. a training split.
    sizes: layer widths, the first the number of features, the last of classes.
    activation: a key of :data:`ACTIVATIONS`.
    examples: examples per task (its training set).
    batch: minibatch size.
    label_smoothing: :math:`\varepsilon`.
    held_out: examples per task that ``loss`` scores instead of the training set (0: the
      training set).
    metric: what ``loss`` scores: ``"cross_entropy"`` (with ``label_smoothing``) or
      ``"error"`` (the fraction misclassified).
    name: the family's name (default from the sizes and activation).
  """
  if activation not in ACTIVATIONS:
    raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}.")
  x, y = jnp.asarray(data[0], jnp.float32), jnp.asarray(data[1], jnp.int32)
  if x.ndim != 2 or y.shape != x.shape[:1] or x.shape[1] != sizes[0]:
    raise ValueError(f"data must be (inputs (examples, {sizes[0]}), labels (examples,)), got "
                     f"shapes {x.shape} and {y.shape}.")
  if not 0 < examples <= x.shape[0] - held_out or batch < 1 or held_out < 0:
    raise ValueError(f"Need 0 < examples <= {x.shape[0]} - held_out, held_out >= 0 and "
                     f"batch >= 1, got {examples}, {held_out} and {batch}.")
  if metric not in ("cross_entropy", "error"):
    raise ValueError(f"metric must be 'cross_entropy' or 'error', got {metric!r}.")
  sigma, classes = ACTIVATIONS[activation], sizes[-1]
  init = glorot_normal if activation == "tanh" else he_normal

  def sample_task(key):
    k_idx, k_batches = jax.random.split(key)
    idx = jax.random.choice(k_idx, x.shape[0], (examples + held_out,), replace=False)
    task = {"x": x[idx[:examples]], "y": y[idx[:examples]],
            "key": jax.random.key_data(k_batches)}
    if held_out:
      task.update(x_held_out=x[idx[examples:]], y_held_out=y[idx[examples:]])
    return task

  def init_params(key, task):
    params = []
    for index, (k, (fan_in, fan_out)) in enumerate(zip(jax.random.split(key, len(sizes) - 1),
                                                       zip(sizes, sizes[1:]))):
      w = (glorot_normal if index == len(sizes) - 2 else init)(k, fan_out, fan_in)
      params.append({"w": w.T, "b": jnp.zeros(fan_out)})
    return params

  def logits_of(p, inputs):
    h = inputs
    for layer in p[:-1]:
      h = sigma(h @ layer["w"] + layer["b"])
    return h @ p[-1]["w"] + p[-1]["b"]

  def cross_entropy(p, inputs, labels):
    logits = logits_of(p, inputs)
    targets = jax.nn.one_hot(labels, classes) * (1 - label_smoothing) + label_smoothing / classes
    return jnp.mean(-jnp.sum(targets * jax.nn.log_softmax(logits), -1))

  def error(p, inputs, labels):
    return jnp.mean(jnp.argmax(logits_of(p, inputs), -1) != labels)

  score = cross_entropy if metric == "cross_entropy" else error

  def loss(task, p):
    if held_out:
      return score(p, task["x_held_out"], task["y_held_out"])
    return score(p, task["x"], task["y"])

  def minibatch_loss(task, p, step):
    key = jax.random.fold_in(jax.random.wrap_key_data(task["key"]), step)
    idx = jax.random.randint(key, (batch,), 0, examples)
    return cross_entropy(p, task["x"][idx], task["y"][idx])

  default = f"mlp_{'-'.join(map(str, sizes))}_{activation}"
  return TaskFamily(name or default, sample_task, init_params, loss,
                    minibatch_loss=minibatch_loss)
