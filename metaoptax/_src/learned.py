r"""Hyperparameters learned beside the step sizes (``metaoptimize(..., learn=...)``).

MetaOptimize's sensitivity recursion holds for any differentiable
meta-parameter (Sharifnassab et al., 2024, Section 9), not only step sizes. A
learned hyperparameter :math:`\theta_k` is an unconstrained scalar mapped into
its domain,

.. math::

  \text{value}_k = \operatorname{sigmoid}(\phi_k) \ \text{(in } (0, 1)\text{: }
  ``b1``, ``b2``, ``decay``, ``momentum``, ...), \qquad
  \text{value}_k = e^{\phi_k} \ \text{(positive: ``weight_decay``, ``eps``, ...)},

and updated by the same meta optimizer as :math:`\beta = \log\alpha`, on the
meta-gradient :math:`s_{\phi_k} = \langle dw_t/d\phi_k, \nabla f \rangle`.

* ``"weight_decay"`` is MetaOptimize's own decoupled decay :math:`\kappa`
  (:math:`\Delta = -\alpha(d + \kappa w)`).
* Any other name is a numeric hyperparameter that the base exposes through
  ``optax.inject_hyperparams`` (``b1``/``b2`` of ``scale_by_adam``, ``decay`` of
  ``trace`` or ``scale_by_rms``): before each base step, every entry of that
  name in the base state's injected hyperparameters is set to the learned value.

The meta-parameters are always a :class:`MetaParams`
``(step_size=beta, hyperparams={name: phi})``, with ``hyperparams == {}`` when
only the step sizes are learned.
"""

from __future__ import annotations

import inspect
import math
import typing
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax

#: Names whose values lie in (0, 1): learned through a logit. Every other name
#: is learned through a log (its value must be > 0).
UNIT_INTERVAL = frozenset({"b1", "b2", "b3", "decay", "momentum", "beta1", "beta2", "rho"})
#: ``phi`` is clipped to this range after every meta update: logits to
#: (sigmoid(-15), sigmoid(15)) = (3e-7, 1 - 3e-7); logs to (1e-13, 2e4).
PHI_BOUNDS = {"logit": (-15.0, 15.0), "log": (-30.0, 10.0)}
#: The name of MetaOptimize's own decoupled weight decay.
WEIGHT_DECAY = "weight_decay"


class MetaParams(NamedTuple):
  r"""The meta-parameters: the step sizes' ``beta`` and the learned hyperparameters.

  Attributes:
    step_size: :math:`\beta`: log step sizes (step sizes with ``parametrization="linear"``),
      one per block.
    hyperparams: ``{name: phi}``, each a scalar, the logit or log of a learned
      hyperparameter; ``{}`` when none is learned.
  """

  step_size: Any
  hyperparams: dict


def domain(name: str) -> str:
  """``"logit"`` for a hyperparameter in (0, 1), ``"log"`` for a positive one."""
  return "logit" if name in UNIT_INTERVAL else "log"


def to_value(name: str, phi: jax.Array) -> jax.Array:
  """The hyperparameter's value: ``sigmoid(phi)`` or ``exp(phi)``."""
  return jax.nn.sigmoid(phi) if domain(name) == "logit" else jnp.exp(phi)


def to_phi(name: str, value: float) -> float:
  """The inverse of :func:`to_value`; ``ValueError`` outside the domain."""
  if domain(name) == "logit":
    if not 0.0 < value < 1.0:
      raise ValueError(f"A learned {name!r} must start in (0, 1), got {value}.")
    return math.log(value) - math.log1p(-value)
  if not 0.0 < value < math.inf:
    raise ValueError(
        f"A learned {name!r} must start > 0 (it is learned through its log), got {value}.")
  return math.log(value)


def check_learn(learn: Any, like: Callable | None = None) -> tuple[str, ...]:
  """``learn`` as a tuple of distinct names; ``ValueError`` otherwise.

  With ``like`` (the optax namesake of a drop-in, e.g. ``optax.adamw``), also a
  ``ValueError`` for a name that is neither one of its numeric arguments
  (:func:`numeric_arguments`) nor ``"weight_decay"``, listing those it accepts.
  """
  if isinstance(learn, str):
    raise ValueError(f"learn must be a tuple of names, e.g. learn=({learn!r},), got {learn!r}.")
  names = tuple(learn)
  for name in names:
    if not isinstance(name, str) or not name:
      raise ValueError(f"learn must contain hyperparameter names (strings), got {name!r}.")
    if name in ("step_size", "learning_rate", "init_step_size"):
      raise ValueError(f"learn={names}: the step size is always learned; list only the "
                       "other hyperparameters.")
  if len(set(names)) != len(names):
    raise ValueError(f"learn has repeated names: {names}.")
  if like is not None:
    accepted = sorted(set(numeric_arguments(like)) | {WEIGHT_DECAY})
    unknown = [k for k in names if k not in accepted]
    if unknown:
      raise ValueError(f"learn={names}: metaoptax.{like.__name__} cannot learn "
                       f"{', '.join(map(repr, unknown))}; it can learn {', '.join(accepted)} "
                       f"(the numeric arguments of optax.{like.__name__}).")
  return names


def numeric_arguments(factory: Callable) -> tuple[str, ...]:
  """The arguments of an optax factory that ``optax.inject_hyperparams`` makes
  arrays: those whose default is a number, or ``None`` for an optional float
  (``optax.sgd``'s ``momentum``); the learning rate excepted, metaoptax learns it."""

  def numeric(p):
    if isinstance(p.default, bool):
      return False
    if isinstance(p.default, (int, float)):
      return True
    return p.default is None and float in typing.get_args(p.annotation)

  return tuple(p.name for p in inspect.signature(factory).parameters.values()
               if p.name != "learning_rate" and numeric(p))


def check_exposed(learn: tuple[str, ...], base: Any) -> None:
  """Raises ``ValueError`` at construction for a name in ``learn`` that ``base`` does
  not expose through ``optax.inject_hyperparams`` (read from ``base.init`` on a
  scalar, by ``jax.eval_shape``). A base that cannot be initialized on a scalar
  (a mask tree) is checked at ``init`` instead (:func:`init_hyperparams`)."""
  names = [k for k in learn if k != WEIGHT_DECAY]
  if not names:
    return
  try:
    state = jax.eval_shape(base.init, jax.ShapeDtypeStruct((), jnp.float32))
  except Exception:  # pylint: disable=broad-except  # a probe: init checks again
    return
  exposed = set()

  def visit(x):
    if _is_injected(x):
      exposed.update(x.hyperparams)
    return x

  jax.tree.map(visit, state, is_leaf=_is_injected)
  missing = [k for k in names if k not in exposed]
  if missing:
    raise ValueError(_not_exposed(learn, missing[0], exposed))


def _not_exposed(learn: tuple[str, ...], name: str, exposed: Any) -> str:
  accepted = ", ".join(sorted(set(exposed) | {WEIGHT_DECAY}))
  return (f"learn={learn}: the base exposes no hyperparameter {name!r}; this one can "
          f"learn {accepted}. To learn an argument of a base you build, wrap it in "
          f"optax.inject_hyperparams, e.g. "
          f"optax.inject_hyperparams(optax.scale_by_adam)(b1=0.9, b2=0.999), and learn "
          f"only its numeric arguments, or 'weight_decay'.")


def _is_injected(x: Any) -> bool:
  return isinstance(x, optax.InjectStatefulHyperparamsState)


def injected_values(base_state: Any, name: str) -> list[jax.Array]:
  """Every value of ``name`` among the injected hyperparameters of ``base_state``."""
  found = []

  def visit(x):
    if _is_injected(x) and name in x.hyperparams:
      found.append(x.hyperparams[name])
    return x

  jax.tree.map(visit, base_state, is_leaf=_is_injected)
  return found


def inject(base_state: Any, hyperparams: dict) -> Any:
  """``base_state`` with each injected hyperparameter named in ``hyperparams``
  set to the learned value (``weight_decay`` is not the base's)."""
  values = {k: to_value(k, phi) for k, phi in hyperparams.items() if k != WEIGHT_DECAY}
  if not values:
    return base_state

  def visit(x):
    if not _is_injected(x):
      return x
    hp = dict(x.hyperparams)
    for k, v in values.items():
      if k in hp:
        hp[k] = v.astype(jnp.asarray(hp[k]).dtype)
    return x._replace(hyperparams=hp)

  return jax.tree.map(visit, base_state, is_leaf=_is_injected)


def init_hyperparams(names: tuple[str, ...], base_state: Any, weight_decay: Any,
                     dtype: Any) -> dict:
  """``{name: phi_0}`` from the starting values: ``weight_decay`` for the decay,
  the base's injected value for the others. Raises ``ValueError`` for a name the
  base does not inject, or a start outside the domain."""
  out = {}
  for name in names:
    if name == WEIGHT_DECAY:
      start = weight_decay
    else:
      found = injected_values(base_state, name)
      if not found:
        raise ValueError(_not_exposed(names, name, ()))
      start = found[0]
    try:  # real: inject_hyperparams stores them in the params' dtype, complex too
      start = float(jnp.real(start))
    except jax.errors.ConcretizationTypeError:
      out[name] = _traced_phi(name, start, dtype)
      continue
    out[name] = jnp.asarray(to_phi(name, start), dtype)
  return out


def _traced_phi(name: str, value: Any, dtype: Any) -> jax.Array:
  value = jnp.real(value).astype(dtype)
  return jnp.log(value) - jnp.log1p(-value) if domain(name) == "logit" else jnp.log(value)


def clip(hyperparams: dict) -> dict:
  """Each ``phi`` clipped to :data:`PHI_BOUNDS` of its domain."""
  return {k: jnp.clip(phi, *PHI_BOUNDS[domain(k)]).astype(phi.dtype)
          for k, phi in hyperparams.items()}


def learnable(factory: Callable[..., optax.GradientTransformation], learn: tuple[str, ...],
              **kwargs) -> optax.GradientTransformation:
  """``factory(**kwargs)``, wrapped in ``optax.inject_hyperparams`` when one of
  its arguments is to be learned (the drop-ins and presets build their bases so)."""
  learned = [k for k in learn if k in kwargs]
  if not learned:
    return factory(**kwargs)
  static = tuple(k for k, v in kwargs.items()
                 if k not in learned and not isinstance(v, (int, float)) or isinstance(v, bool))
  return optax.inject_hyperparams(factory, static_args=static)(**kwargs)
