"""Errors that say what to fix: the inputs of ``update`` checked against each other,
and a meta optimizer that would decay the log step sizes refused.

The checks of ``update``'s inputs read only tree structures and shapes, which are
static under ``jit``: they run while the step is traced and cost nothing in the
compiled step.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from metaoptax._src import dependence
from metaoptax._src.learned import MetaParams


def _shape(x: Any) -> tuple:
  return tuple(x.shape) if hasattr(x, "shape") else np.shape(x)


def _leaves(tree: Any) -> dict[str, tuple]:
  """``{key path: shape}`` of every leaf."""
  return {jax.tree_util.keystr(path) or "<root>": _shape(leaf)
          for path, leaf in jax.tree_util.tree_leaves_with_path(tree)}


def _listed(paths: list[str], limit: int = 5) -> str:
  more = f" and {len(paths) - limit} more" if len(paths) > limit else ""
  return ", ".join(paths[:limit]) + more


def check_same_tree(transformation: str, tree: Any, name: str, reference: Any,
                    reference_name: str, hint: str = "") -> None:
  """Raises a ``ValueError`` naming ``name`` and ``reference_name`` unless the two
  trees have the same structure and the same leaf shapes; the message lists the
  leaves found in only one of them, or the leaves whose shapes differ."""
  if jax.tree.structure(tree) != jax.tree.structure(reference):
    ours, theirs = _leaves(tree), _leaves(reference)
    only_ours = [p for p in ours if p not in theirs]
    only_theirs = [p for p in theirs if p not in ours]
    if only_ours or only_theirs:
      difference = "; ".join(
          f"only in {who}: {_listed(paths)}"
          for who, paths in ((name, only_ours), (reference_name, only_theirs)) if paths)
    else:  # the same leaves in other containers (a list for a tuple, ...)
      difference = (f"{name}: {jax.tree.structure(tree)}; "
                    f"{reference_name}: {jax.tree.structure(reference)}")
    raise ValueError(f"{transformation}: {name} and {reference_name} have different tree "
                     f"structures ({difference}).{hint}")
  ours = jax.tree_util.tree_leaves_with_path(tree)
  theirs = jax.tree.leaves(reference)
  differ = [f"{jax.tree_util.keystr(path) or '<root>'}: {name} {_shape(x)}, "
            f"{reference_name} {_shape(y)}"
            for (path, x), y in zip(ours, theirs) if _shape(x) != _shape(y)]
  if differ:
    raise ValueError(f"{transformation}: {name} and {reference_name} have leaves of "
                     f"different shapes ({_listed(differ)}).{hint}")


def check_update_inputs(transformation: str, init: Callable[[Any], Any], grads: Any,
                        state: Any, params: Any) -> None:
  """Checks that ``grads`` has the tree and shapes of ``params``, and that ``state``
  is what ``init(params)`` returns (by tree and shapes, ``jax.eval_shape``: nothing
  is computed)."""
  check_same_tree(transformation, grads, "grads", params, "params",
                  " Pass the gradient of the loss with respect to these params.")
  expected = jax.eval_shape(init, params)
  check_same_tree(transformation, state, "state", expected, "init(params)",
                  " The state was built by init for other params: call init with the "
                  "params that update receives.")


def check_meta_ignores_beta(meta: Any, beta: Any = None) -> bool:
  r"""Raises a ``ValueError`` if ``meta``'s update reads the meta-parameters it updates.

  MetaOptimize's trace assumes :math:`\partial\beta_{t+1}/\partial\beta_t = I`: the
  meta optimizer sees :math:`\beta` only through its meta-gradient. Weight decay
  breaks this (``optax.lion`` and ``optax.adamw`` decay their params by default),
  and pulls :math:`\beta = \log\alpha` toward 0, the step sizes toward 1.

  The update is traced at a zero meta-gradient (``jax.make_jaxpr``, nothing is
  computed) and refused where its output can depend on ``beta``. A zero decay given
  as an array (``optax.inject_hyperparams(optax.lion)(..., weight_decay=0.0)``)
  reads ``beta`` as well: keep it a Python number (``static_args=("weight_decay",)``),
  which optax skips.

  Args:
    meta: the meta optimizer.
    beta: the meta-parameters; by default a probe: one step size, no hyperparameter.

  Returns:
    ``False`` when the probe could not run (a meta optimizer that needs the
    meta-parameters' own structure, e.g. a mask): check again at ``init``.
  """
  probe = MetaParams(jnp.zeros((1,), jnp.float32), {}) if beta is None else beta
  try:
    state = jax.eval_shape(meta.init, probe)
    zeros = jax.tree.map(jnp.zeros_like, probe)
    update = lambda g, s, b: meta.update(g, s, b)[0]
    reads = any(dependence.dependent_outputs(update, (zeros, state, probe), (2,)))
  except Exception:  # pylint: disable=broad-except  # a probe: init checks again
    if beta is None:
      return False
    raise
  if reads:
    raise ValueError(
        "meta must not read the meta-parameters beta = log(step size) it updates: at a zero "
        "meta-gradient its update changes with beta (weight decay?), which pulls the step "
        "sizes toward 1 outside the meta-gradient that MetaOptimize computes. optax.lion "
        "and optax.adamw decay by default (weight_decay=1e-3 and 1e-4): pass "
        "weight_decay=0.0, e.g. optax.lion(1e-3, weight_decay=0.0), or use optax.adam (under "
        "optax.inject_hyperparams, keep it a number: static_args=('weight_decay',)).")
  return True

