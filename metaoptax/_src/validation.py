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

  Two steps of the same meta-gradient are computed from a probe ``beta`` and from
  ``beta + 1.5`` (eagerly, on arrays of ``beta``'s shapes) and the meta optimizer is
  refused where the updates differ: an update that is a function of the meta-gradient
  alone does not change.

  Args:
    meta: the meta optimizer.
    beta: the meta-parameters; by default a probe: one step size, no hyperparameter.

  Returns:
    ``False`` when the probe could not run (a meta optimizer that needs the
    meta-parameters' own structure, e.g. a mask): check again at ``init``.
  """
  probe = MetaParams(np.zeros((1,), np.float32), {}) if beta is None else beta
  # Concrete values of beta's shapes: the probe runs eagerly even when init is traced.
  probe = jax.tree.map(lambda b: np.zeros(np.shape(b), b.dtype), probe)
  try:
    # Numerically, not from the jaxpr (optax's add_decayed_weights(0.0) multiplies beta
    # by zero, which reads beta and changes nothing): two steps of the same meta-gradient
    # from beta and from beta + 1.5 must give the same updates. Two steps, since a
    # wrapper such as climb() hands over to its inner optimizer after its first step
    # at a positive meta-gradient.
    def updates_from(shift):
      beta0 = jax.tree.map(lambda b: (b + shift).astype(b.dtype), probe)
      grads = jax.tree.map(jnp.ones_like, beta0)
      state = meta.init(beta0)
      first, state = meta.update(grads, state, beta0)
      beta1 = jax.tree.map(lambda b, u: (b + u).astype(b.dtype), beta0, first)
      return first, meta.update(grads, state, beta1)[0]

    with jax.ensure_compile_time_eval():
      low, high = updates_from(0.0), updates_from(1.5)
    reads = any(not np.allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-9)
                for a, b in zip(jax.tree.leaves(low), jax.tree.leaves(high)))
  except (jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError):
    return False  # a traced meta optimizer (inject_hyperparams, jax.grad): not probed
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
        "weight_decay=0.0, e.g. optax.lion(1e-3, weight_decay=0.0), or use optax.adam.")
  return True

