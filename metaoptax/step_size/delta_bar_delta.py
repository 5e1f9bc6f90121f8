r"""IDBD (Sutton, 1992): weight-wise step sizes with a diagonal-Hessian trace."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from metaoptax._src import tree_utils, validation
from metaoptax._src.hyperparams import (check_meta_step_size, check_step_size_bounds,
                                        concrete_number)

__all__ = ("IDBDState", "idbd")


class IDBDState(NamedTuple):
  r"""State of :func:`idbd`.

  Attributes:
    log_step_sizes: :math:`\beta`, params-shaped: the log step size of each weight.
    trace: :math:`h`, params-shaped: IDBD's trace of each weight's sensitivity to its
      log step size.
    skipped_steps: int32 scalar, the steps skipped for a non-finite gradient or update.
  """

  log_step_sizes: Any
  trace: Any
  skipped_steps: jax.Array


def idbd(
    *,
    meta_step_size: float,
    init_step_size: float,
    rectify: bool = True,
    step_size_bounds=(1e-10, 1.0),
) -> optax.GradientTransformationExtraArgs:
  r"""Incremental Delta-Bar-Delta, the L-approximation with a diagonal Hessian.

  With gradient :math:`g_t` and the Hessian's diagonal :math:`c_t` (for a linear
  unit :math:`f = \tfrac12(a^\top w - b)^2` it is :math:`a^2`), paper eqs. 84-88:

  .. math::

    \beta_{t+1} &= \beta_t - \theta\, h_t g_t, \qquad \alpha_{t+1} = e^{\beta_{t+1}}\\
    w_{t+1} &= w_t - \alpha_{t+1} g_t\\
    h_{t+1} &= h_t\, [1 - \alpha_{t+1} c_t]^+ - \alpha_{t+1} g_t

  It is MetaOptimize with SGD base and meta, weight-wise blocks, the
  L-approximation and the meta update first, with :math:`\nabla^2 f` replaced
  by its diagonal and a rectifier :math:`[\cdot]^+` (``rectify``).

  Args:
    meta_step_size: :math:`\theta`.
    init_step_size: initial step size of every weight.
    rectify: clip :math:`1 - \alpha c` at 0 (Sutton's rectifier).
    step_size_bounds: step sizes are clipped to this range.

  Returns:
    A transformation whose ``update`` needs ``params`` and the extra argument
    ``hessian_diagonal`` (a params-shaped tree, e.g. the squared inputs).
    Non-finite inputs skip the step (zero updates, state kept, counted).

  Examples:
    >>> import jax.numpy as jnp, metaoptax
    >>> opt = metaoptax.idbd(meta_step_size=0.01, init_step_size=0.05)
    >>> w, a, b = jnp.zeros(3), jnp.array([1.0, 0.0, 2.0]), 1.0
    >>> state = opt.init(w)
    >>> g = (a @ w - b) * a
    >>> updates, state = opt.update(g, state, w, hessian_diagonal=a**2)

  References:
    Sutton, `Adapting Bias by Gradient Descent: An Incremental Version of
    Delta-Bar-Delta <http://incompleteideas.net/papers/sutton-92a.pdf>`_, AAAI 1992.
  """
  check_meta_step_size("meta_step_size", meta_step_size, allow_schedule=False)
  bounds = check_step_size_bounds(step_size_bounds)
  concrete = concrete_number("init_step_size", init_step_size)
  if concrete is not None and not concrete > 0:
    raise ValueError(f"init_step_size must be > 0, got {init_step_size}.")
  if concrete is not None and not bounds[0] <= concrete <= bounds[1]:
    raise ValueError(
        f"init_step_size={init_step_size} is outside step_size_bounds={step_size_bounds}.")
  lower, upper = (jnp.log(b) for b in bounds)

  def init_fn(params):
    tree_utils.check_float_params(params, "idbd")
    tree_utils.check_real_params(
        params, "idbd", "its diagonal-Hessian trace and rectifier 1 - alpha * c are "
        "defined for real linear units")
    widened = tree_utils.widen(params)
    return IDBDState(
        log_step_sizes=jax.tree.map(
            lambda p: jnp.full_like(p, jnp.log(init_step_size)), widened),
        trace=jax.tree.map(jnp.zeros_like, widened),
        skipped_steps=jnp.zeros([], jnp.int32),
    )

  def update_fn(updates, state, params=None, hessian_diagonal=None, **extra_args):
    del extra_args
    if hessian_diagonal is None:
      raise ValueError("idbd needs the extra argument hessian_diagonal= (e.g. inputs**2).")
    validation.check_update_inputs("idbd", init_fn, updates, state,
                                   updates if params is None else params)
    validation.check_same_tree("idbd", hessian_diagonal, "hessian_diagonal", updates, "grads")
    # Non-finite inputs are zeroed before use (the step is skipped anyway), so
    # that a derivative through a skipped step stays finite (no 0 * nan).
    inputs_ok = tree_utils.all_finite((updates, hessian_diagonal))
    grads = tree_utils.zeros_unless(inputs_ok, tree_utils.widen(updates))
    hessian_diagonal = tree_utils.zeros_unless(inputs_ok, hessian_diagonal)
    beta = jax.tree.map(
        lambda b, h, g: jnp.clip(b - meta_step_size * h * g, lower, upper),
        state.log_step_sizes, state.trace, grads)
    alpha = jax.tree.map(jnp.exp, beta)

    def decay(a, c):
      d = 1.0 - a * c
      return jnp.maximum(d, 0.0) if rectify else d

    trace = jax.tree.map(
        lambda h, a, c, g: h * decay(a, c) - a * g, state.trace, alpha, hessian_diagonal, grads)
    delta = jax.tree.map(lambda a, g: -a * g, alpha, grads)
    ok = inputs_ok & tree_utils.all_finite((trace, beta))
    new_state = optax.tree_utils.tree_where(ok, IDBDState(beta, trace, state.skipped_steps), state)
    delta = jax.tree.map(lambda d: jnp.where(ok, d, 0.0), delta)
    return optax.tree_utils.tree_cast_like(delta, updates), new_state._replace(
        skipped_steps=state.skipped_steps + (~ok).astype(jnp.int32))

  return optax.GradientTransformationExtraArgs(init_fn, update_fn)
