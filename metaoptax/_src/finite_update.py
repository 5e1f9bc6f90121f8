"""One optimizer step of a training loop, skipped when the loss or its gradient is not finite."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax

from metaoptax._src import tree_utils as _tree


def apply_if_finite(optimizer: optax.GradientTransformation, grads: Any, loss: jax.Array,
                    params: Any, opt_state: Any) -> tuple[Any, Any, jax.Array]:
  """``(params, opt_state, finite)`` after one step of ``optimizer`` on ``grads``.

  Where ``loss`` or a leaf of ``grads`` is not finite the step is skipped:
  ``params`` and ``opt_state`` come back unchanged and ``finite`` is ``False``
  (the caller counts the skips). Jit-able; the state's structure never changes.
  """
  finite = _tree.all_finite(grads) & jnp.isfinite(loss)
  updates, new_opt_state = optimizer.update(grads, opt_state, params)
  params, opt_state = optax.tree_utils.tree_where(
      finite, (optax.apply_updates(params, updates), new_opt_state), (params, opt_state))
  return params, opt_state, finite
