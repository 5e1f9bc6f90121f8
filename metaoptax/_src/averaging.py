r"""Iterate averaging: an average of the weights whose horizon grows with the run.

A step-size schedule anneals to cut the noise of the last iterates; an average of
the iterates does the same without shrinking the step (Polyak-Ruppert averaging;
the schedule-free view of Defazio et al. 2024, "The Road Less Scheduled",
https://arxiv.org/abs/2405.15682). :func:`average_iterates` keeps

.. math::

  \bar w_t = \bar w_{t-1} + \frac{w_t - \bar w_{t-1}}{c\,t + 1},

an exponential moving average whose horizon :math:`c\,t` is the fraction
:math:`c` (``horizon``) of the steps taken so far: it forgets the early iterates
at any run length, without knowing the budget. The training steps use the
iterates :math:`w_t`; :func:`averaged_params` gives :math:`\bar w_t`, the weights to
evaluate, as ``optax.contrib.schedule_free_eval_params`` does for schedule-free.

The transformation passes the updates through unchanged and reads the new
iterate as ``params + updates``, so it must come last in an ``optax.chain``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from metaoptax._src import rounding, tree_utils
from metaoptax._src.hyperparams import concrete_number


class AverageState(NamedTuple):
  r"""The step count and the averaged weights :math:`\bar w_t`.

  Attributes:
    count: int32 scalar, the steps taken.
    average: params-shaped, the average :math:`\bar w_t` of the weights over the last
      fraction of the steps (:func:`metaoptax.average_iterates`); what
      :func:`metaoptax.averaged_params` returns.
  """

  count: jax.Array
  average: optax.Params


def average_iterates(horizon: float = 0.1, dtype: Any = None) -> optax.GradientTransformation:
  r"""Keeps an average of the weights whose horizon is ``horizon`` times the step count.

  Args:
    horizon: :math:`c`, the average's horizon as a fraction of the steps taken
      (``0.1``: the last ~10 % of the run weigh most). In ``(0, 1]``.
    dtype: the average's storage: ``None`` (float32, or the params' dtype if wider) or
      ``jnp.bfloat16``, computed in float32 and stored stochastically rounded
      (:mod:`metaoptax._src.rounding`), which halves its bytes. Real params only.

  Returns:
    An ``optax.GradientTransformation`` whose ``update`` needs ``params`` and
    returns the updates unchanged; chain it last.

  Examples:
    >>> import jax.numpy as jnp, optax, metaoptax
    >>> opt = optax.chain(optax.sgd(0.1), metaoptax.average_iterates())
    >>> params = {"w": jnp.ones(2)}
    >>> state = opt.init(params)
    >>> updates, state = opt.update({"w": jnp.ones(2)}, state, params)
    >>> round(float(metaoptax.averaged_params(state)["w"][0]), 4)  # 1 + (0.9 - 1) / 1.1
    0.9091
  """
  dtype = rounding.check_storage_dtype("dtype", dtype)
  check_horizon("average_iterates(horizon=...)", horizon)

  def init_fn(params):
    # float32 or wider (as the library's other state), and a copy: the params and the
    # state may both be donated to a jitted step.
    if dtype is not None:
      if any(jnp.iscomplexobj(x) for x in jax.tree.leaves(params)):
        raise ValueError(f"average_iterates(dtype={dtype}) stores a real average: complex "
                         "params need dtype=None.")
      return AverageState(count=jnp.zeros([], jnp.int32),
                          average=jax.tree.map(lambda p: p.astype(dtype), params))
    return AverageState(count=jnp.zeros([], jnp.int32),
                        average=jax.tree.map(jnp.copy, tree_utils.widen(params)))

  def update_fn(updates, state, params=None):
    if params is None:
      raise ValueError("average_iterates needs params: update(updates, state, params).")
    count = optax.safe_increment(state.count)
    weight = average_weight(horizon, count)

    def step(average, p, u):
      wide = tree_utils.wide_dtype(average.dtype)
      average = average.astype(wide)
      new = p.astype(wide) + u.astype(wide)
      return average + weight.astype(wide) * (new - average)

    average = jax.tree.map(step, state.average, params, updates)
    if dtype is not None:  # bits other than the trace's (salt)
      average = rounding.stochastic_round_tree(average, dtype, count, salt=0x5BD1E995)
    return updates, AverageState(count=count, average=average)

  return optax.GradientTransformation(init_fn, update_fn)


def check_horizon(name: str, horizon: Any) -> None:
  """Raises unless ``horizon`` is in (0, 1] (a traced value passes)."""
  number = concrete_number("horizon", horizon)  # a traced value (inject_hyperparams) passes
  if number is not None and not 0.0 < number <= 1.0:
    raise ValueError(f"{name}: the average's horizon is a fraction of the steps taken, in "
                     f"(0, 1]; got {horizon!r}.")


def average_weight(horizon: Any, count: jax.Array) -> jax.Array:
  """:math:`\\rho_t = 1 / (c\\,t + 1)`, the weight of the iterate at step ``t = count``."""
  return 1.0 / (horizon * count.astype(jnp.result_type(horizon, jnp.float32)) + 1.0)


def averaged_params(state: Any) -> optax.Params:
  """The averaged weights :math:`\\bar w_t` held in ``state``, for evaluation.

  Args:
    state: the state of :func:`average_iterates`, or of any optimizer (an
      ``optax.chain``, a drop-in such as :func:`metaoptax.adamw`) holding exactly one;
      or of an ``optax.multi_transform`` whose every partition holds one (e.g. two
      drop-ins): their averages, each of its own params, make up the whole tree.

  Returns:
    The averaged params (the params' tree, in float32 for lower-precision params).

  Examples:
    >>> import jax.numpy as jnp, optax, metaoptax
    >>> opt = optax.multi_transform({"a": metaoptax.adamw(), "b": metaoptax.sgd()},
    ...                             {"w": "a", "b": "b"})
    >>> params = {"w": jnp.ones(3), "b": jnp.zeros(())}
    >>> sorted(metaoptax.averaged_params(opt.init(params)))
    ['b', 'w']
  """
  found = tree_utils.instances_of(state, AverageState)
  if len(found) == 1 and not _masked_leaves(found[0].average):
    return found[0].average
  if len(found) > 1 or found and _masked_leaves(found[0].average):
    return _merged(state, [f.average for f in found])
  raise ValueError(f"averaged_params: the state holds {len(found)} AverageState(s); "
                   "it needs exactly one (metaoptax.average_iterates, or a drop-in "
                   "built with average=...), or one in each partition of an "
                   "optax.multi_transform.")


def _is_masked(x) -> bool:
  return isinstance(x, optax.MaskedNode)


def _masked_leaves(tree: Any) -> list:
  return [x for x in jax.tree.leaves(tree, is_leaf=_is_masked) if _is_masked(x)]


def _merged(state: Any, averages: list) -> optax.Params:
  """One params tree from averages of disjoint parts of it (``optax.MaskedNode`` where
  another partition's average holds the leaf)."""
  if len(tree_utils.instances_of(state, optax.MultiTransformState)) != 1:
    raise ValueError(f"averaged_params: the state holds {len(averages)} AverageState(s); "
                     "it needs exactly one, or one in each partition of an "
                     "optax.multi_transform.")
  structures = {jax.tree.structure(a, is_leaf=_is_masked) for a in averages}
  columns = zip(*[jax.tree.leaves(a, is_leaf=_is_masked) for a in averages])
  merged = []
  for column in columns:
    held = [x for x in column if not _is_masked(x)]
    if len(held) != 1:
      raise ValueError(
          "averaged_params: every leaf needs an average from exactly one partition of the "
          f"optax.multi_transform, found a leaf with {len(held)} (a partition without "
          "average_iterates, or two averages of one leaf).")
    merged.append(held[0])
  if len(structures) != 1:
    raise ValueError("averaged_params: the partitions' averages are not of one params tree.")
  treedef = jax.tree.structure(averages[0], is_leaf=_is_masked)
  return jax.tree.unflatten(treedef, merged)
