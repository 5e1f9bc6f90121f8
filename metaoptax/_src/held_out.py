r"""The meta-gradient :math:`s_t = H_t^\top g` of a step: on the training gradient, or on
a held-out one.

``update(grads, state, params, meta_grads=g_val)`` takes :math:`s = H^\top g_{val}`
with the gradient of a held-out objective at the params, while the training gradient
still drives the base step. With ``held_out="hyperparams"`` only the learned
hyperparameters' entries of :math:`s` use it; the step sizes' follow the training
gradient. A non-finite held-out gradient gives :math:`s = 0` for that step.
"""

from __future__ import annotations

from typing import Any

import jax

from metaoptax._src import tree_utils
from metaoptax._src.approximation import Approximation


def meta_gradient(implementation: Approximation, layout: Any, state: Any, grads: Any,
                  meta_grads: Any, params: Any, *, held_out: str, learn: tuple[str, ...],
                  name: str, takes: tuple[str, ...]) -> Any:
  """The step's meta-gradient, a ``MetaParams``.

  Args:
    implementation: the approximation, whose ``meta_gradient`` reads the trace.
    layout: the params' block layout.
    state: the ``MetaOptimizeState`` the step starts from.
    grads: the training gradient.
    meta_grads: the held-out gradient (params-shaped), or ``None``.
    params: the params.
    held_out: ``"all"`` or ``"hyperparams"`` (which entries use ``meta_grads``).
    learn: the learned hyperparameters' names.
    name: the approximation's name, for the error message.
    takes: the names of the approximations that take a held-out gradient.
  """
  if meta_grads is None:
    return implementation.meta_gradient(layout, state.trace, grads, state.meta_params, params)
  meta_grads = _checked(meta_grads, grads, implementation, name, takes)
  meta_grad = implementation.meta_gradient(layout, state.trace, meta_grads, state.meta_params,
                                           params)
  if held_out == "hyperparams" and learn:  # the step sizes follow the training loss
    on_train = implementation.meta_gradient(layout, state.trace, grads, state.meta_params,
                                            params)
    meta_grad = meta_grad._replace(step_size=on_train.step_size)
  return meta_grad


def _checked(meta_grads: Any, grads: Any, implementation: Approximation, name: str,
             takes: tuple[str, ...]) -> Any:
  """Checks a held-out gradient against the gradient; a non-finite one becomes 0."""
  if not implementation.takes_held_out_gradient:
    raise ValueError(
        f"meta_grads= is not supported by approximation={name!r}, whose meta step "
        "differentiates s = H^T g through the training gradient's Hessian; use one of "
        f"{list(takes)} with a held-out meta-gradient.")
  if jax.tree.structure(meta_grads) != jax.tree.structure(grads):
    raise ValueError(
        "meta_grads must have the structure of the gradient (the gradient of the "
        f"held-out objective at params); got {jax.tree.structure(meta_grads)}, "
        f"expected {jax.tree.structure(grads)}.")
  return tree_utils.zeros_unless(tree_utils.all_finite(meta_grads), meta_grads)
