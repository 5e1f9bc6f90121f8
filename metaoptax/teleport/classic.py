r"""Classic symmetry teleportation, and as an optax wrapper.

At a teleport step the parameters move along their level set to where the
gradient is steeper: the group parameter :math:`\theta` is chosen by a few steps
of gradient ascent on :math:`\|\nabla f(g_\theta \cdot w)\|^2`, then the wrapped
optimizer steps from :math:`g_\theta \cdot w` with the gradient there.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax

from metaoptax._src import tree_utils

__all__ = ("teleport", "TeleportState", "with_teleportation")


def squared_gradient_norm(obj_fn: Callable, params: Any) -> jax.Array:
  return sum(jnp.sum(g**2) for g in jax.tree.leaves(jax.grad(obj_fn)(params)))


def teleport(obj_fn: Callable, params: Any, act: Callable, group_param: Any, *,
             steps: int = 10, learning_rate: float = 0.1) -> tuple[Any, Any]:
  r"""Gradient ascent on :math:`\theta \mapsto \|\nabla f(\mathrm{act}(\theta, w))\|^2`.

  Args:
    obj_fn: the objective ``params -> scalar``.
    params: the current parameters ``w``.
    act: a group action ``act(theta, params) -> params`` (see ``groups``).
    group_param: the starting group parameter.
    steps: ascent steps.
    learning_rate: ascent step size.

  Returns:
    ``(theta, act(theta, params))``.

  Examples:
    >>> import jax.numpy as jnp
    >>> from metaoptax.teleport import groups, classic
    >>> a, b = jnp.array([[1.0, 2.0], [2.0, 1.0]]), jnp.array([-7.0, -5.0])
    >>> act, _ = groups.conjugated_rotation(groups.affine_bijection(a, b))
    >>> booth = lambda x: jnp.sum((a @ x + b) ** 2)
    >>> x = jnp.array([5.0, -5.0])
    >>> theta, y = classic.teleport(booth, x, act, 0.5, steps=10, learning_rate=1e-3)
    >>> bool(jnp.allclose(booth(y), booth(x), rtol=1e-4))
    True
  """
  objective = lambda theta: squared_gradient_norm(obj_fn, act(theta, params))

  def ascend(theta, _):
    return jax.tree.map(lambda t, d: t + learning_rate * d, theta, jax.grad(objective)(theta)), None

  theta, _ = jax.lax.scan(ascend, group_param, None, length=steps)
  return theta, act(theta, params)


class TeleportState(NamedTuple):
  """State of :func:`with_teleportation`.

  Attributes:
    count: int32 scalar, the steps taken.
    key: PRNG key of the group parameter's starting points.
    inner_state: the wrapped optimizer's state.
    teleports: int32 scalar, the teleports accepted.
    rejected: int32 scalar, the teleports rejected (they left the level set or were not
      finite).
  """

  count: jax.Array
  key: jax.Array
  inner_state: optax.OptState
  teleports: jax.Array
  rejected: jax.Array


def with_teleportation(
    inner: optax.GradientTransformation,
    act: Callable,
    *,
    teleport_every: int | None = None,
    teleport_at: tuple[int, ...] = (),
    init_group_param: Callable[[jax.Array], Any],
    ascent_steps: int = 10,
    ascent_learning_rate: float = 0.1,
    level_set_tolerance: float = 1e-3,
    seed: int = 0,
) -> optax.GradientTransformationExtraArgs:
  r"""Teleports at scheduled steps, then hands over to ``inner``.

  At a teleport step the update is :math:`(g_\theta w - w) + u`, with ``u`` the
  inner update computed at :math:`g_\theta w` from :math:`\nabla f(g_\theta w)`.
  A teleport whose loss differs from the current one by more than
  ``level_set_tolerance * (1 + |f(w)|)`` (an approximate action, e.g. LeakyReLU
  with a small batch), or that is not finite, is rejected and counted.

  Args:
    inner: the optimizer that takes the ordinary steps.
    act: group action ``act(theta, params) -> params``.
    teleport_every: teleport at steps 0, k, 2k, ... (optional).
    teleport_at: explicit step indices to teleport at.
    init_group_param: ``key -> theta_0``, the ascent's starting point (e.g.
      ``lambda k: jax.random.uniform(k, (), maxval=jnp.pi)`` for SO(2)).
    ascent_steps, ascent_learning_rate: the gradient ascent on the group.
    level_set_tolerance: relative tolerance of the level-set check.
    seed: seed of the starting points.

  Returns:
    A transformation whose ``update`` needs ``params`` and ``obj_fn``.
  """
  if teleport_every is None and not teleport_at:
    raise ValueError("Give teleport_every or teleport_at.")
  if teleport_every is not None and teleport_every < 1:
    raise ValueError(f"teleport_every must be >= 1, got {teleport_every}.")
  inner = optax.with_extra_args_support(inner)
  scheduled_steps = jnp.asarray(teleport_at, jnp.int32)

  def is_scheduled(count):
    hit = jnp.any(count == scheduled_steps) if teleport_at else jnp.asarray(False)
    if teleport_every is not None:
      hit = hit | (count % teleport_every == 0)
    return hit

  def init_fn(params):
    return TeleportState(
        count=jnp.zeros([], jnp.int32), key=jax.random.key(seed),
        inner_state=inner.init(params), teleports=jnp.zeros([], jnp.int32),
        rejected=jnp.zeros([], jnp.int32))

  def update_fn(updates, state, params=None, obj_fn=None, **extra_args):
    if params is None or obj_fn is None:
      raise ValueError("with_teleportation needs params and obj_fn: "
                       "update(grads, state, params, obj_fn=loss).")
    key, sub = jax.random.split(state.key)

    def do_teleport(_):
      _, moved = teleport(obj_fn, params, act, init_group_param(sub),
                          steps=ascent_steps, learning_rate=ascent_learning_rate)
      moved = optax.tree_utils.tree_cast_like(moved, params)
      before, after = obj_fn(params), obj_fn(moved)
      ok = (tree_utils.all_finite(moved) & jnp.isfinite(after)
            & (jnp.abs(after - before) <= level_set_tolerance * (1 + jnp.abs(before))))
      moved = optax.tree_utils.tree_where(ok, moved, params)
      grads = jax.lax.cond(ok, lambda: optax.tree_utils.tree_cast_like(jax.grad(obj_fn)(moved), updates),
                           lambda: updates)
      return moved, grads, ok.astype(jnp.int32), (~ok).astype(jnp.int32)

    def stay(_):
      zero = jnp.zeros([], jnp.int32)
      return params, updates, zero, zero

    moved, grads, accepted, rejected = jax.lax.cond(
        is_scheduled(state.count), do_teleport, stay, None)
    inner_updates, inner_state = inner.update(grads, state.inner_state, moved,
                                              obj_fn=obj_fn, **extra_args)
    total = jax.tree.map(lambda m, p, u: (m - p + u).astype(p.dtype), moved, params,
                         inner_updates)
    return total, TeleportState(
        count=state.count + 1, key=key, inner_state=inner_state,
        teleports=state.teleports + accepted, rejected=state.rejected + rejected)

  return optax.GradientTransformationExtraArgs(init_fn, update_fn)
