r"""Named (base, meta) pairs with the paper's default hyperparameters.

Defaults (Sharifnassab et al. 2024, Appendix C, Tables 1-3): meta step size
``eta = 1e-3``, ``gamma = 1``, initial step size ``1e-6``; base Adam
``rho = 0.9, lambda = 0.999``, weight decay ``kappa = 0.1``; base Lion
``c = 0.9, rho = 0.99``; base RMSProp ``lambda = 0.999``; base momentum
``rho = 0.9``; meta Adam ``0.9, 0.999``; meta Lion ``c = 0.9, rho = 0.99``.

Adam-type transformations get ``eps_root = 1e-30`` (inside the square root):
it leaves the update unchanged unless ``v < 1e-28`` but keeps the derivative
of ``sqrt(v)`` finite at ``v = 0``, which the exact variants differentiate.

Every preset takes ``init_step_size`` first and forwards any other keyword
(``blocks``, ``approximation``, ``gamma``, ``step_size_bounds``, ...) to
:func:`metaoptax.metaoptimize`. The arguments every preset shares:

* ``init_step_size``: :math:`\alpha_0`, the step size the meta-gradient starts from.
* ``meta_step_size``: :math:`\eta`, the meta optimizer's step size on the log step sizes.
* ``weight_decay``: decoupled weight decay :math:`\kappa`, scaled by the learned step size.
* ``**kwargs``: any other keyword of :func:`metaoptax.metaoptimize`.

Example:
  >>> import metaoptax
  >>> opt = metaoptax.presets.adamw_adam(1e-6, blocks="per_leaf")
"""

from __future__ import annotations

import optax

from metaoptax._src.forwarding import forwarding_metaoptimize_keywords
from metaoptax._src.hyperparams import check_meta_step_size
from metaoptax._src.transform import metaoptimize

__all__ = ("INIT_STEP_SIZE", "META_STEP_SIZE", "WEIGHT_DECAY", "EPS_ROOT", "meta_adam", "meta_lion",
           "adamw_adam", "adamw_lion", "lion_lion", "rmsprop_adam", "sgd_momentum_adam", "sgd_sgd",
           "sgd_adam", "amsgrad_adam", "PRESETS")

#: Default initial step size :math:`\alpha_0` (the paper's).
INIT_STEP_SIZE = 1e-6
#: Default meta step size :math:`\eta` of the meta optimizer.
META_STEP_SIZE = 1e-3
#: Default decoupled weight decay :math:`\kappa` of the AdamW-type bases: the paper's
#: 0.1, not optax's ``adamw`` default 1e-4 (which the drop-ins ``metaoptax.adamw``
#: and ``metaoptax.lion`` take, 1e-3 for Lion).
WEIGHT_DECAY = 0.1


#: ``eps_root`` of the Adam-type transformations (keeps the derivative of
#: ``sqrt(v)`` finite at ``v = 0``).
EPS_ROOT = 1e-30


def meta_adam(meta_step_size):
  r"""Adam on ``beta``, the paper's meta optimizer (also the drop-ins' after the climb).

  Args:
    meta_step_size: :math:`\eta`, Adam's step size on the log step sizes :math:`\beta`
      (a positive number).

  Returns:
    ``optax.adam(meta_step_size, b1=0.9, b2=0.999)``, with :data:`EPS_ROOT` inside the
    square root.
  """
  check_meta_step_size("meta_step_size", meta_step_size)
  return optax.adam(meta_step_size, b1=0.9, b2=0.999, eps_root=EPS_ROOT)


def meta_lion(meta_step_size):
  r"""Lion on ``beta``, without weight decay (also ``metaoptax.lion``'s after the climb).

  Args:
    meta_step_size: :math:`\eta`, Lion's step size on the log step sizes :math:`\beta`
      (a positive number).

  Returns:
    ``optax.lion(meta_step_size, b1=0.9, b2=0.99, weight_decay=0)``: a weight decay on
    :math:`\beta` would pull :math:`\log\alpha` to 0.
  """
  check_meta_step_size("meta_step_size", meta_step_size)
  # optax.lion decays its params by default; on beta that would pull log alpha to 0.
  return optax.lion(meta_step_size, b1=0.9, b2=0.99, weight_decay=0.0)


def _meta_sgd(meta_step_size):
  check_meta_step_size("meta_step_size", meta_step_size)
  return optax.sgd(meta_step_size)


@forwarding_metaoptimize_keywords
def adamw_adam(init_step_size=INIT_STEP_SIZE, *, meta_step_size=META_STEP_SIZE,
               weight_decay=WEIGHT_DECAY, b1=0.9, b2=0.999, eps=1e-8, **kwargs):
  r"""(AdamW, Adam): AdamW's direction, Adam on the log step sizes.

  Args:
    init_step_size, meta_step_size, weight_decay: as every preset (:mod:`metaoptax.presets`).
    **kwargs: any other keyword of :func:`metaoptax.metaoptimize`.
    b1, b2, eps: Adam's moment decays and denominator constant, as in ``optax.adamw``.

  Returns:
    :func:`metaoptax.metaoptimize`'s transformation (``update`` needs ``params``).
  """
  return metaoptimize(optax.scale_by_adam(b1=b1, b2=b2, eps=eps, eps_root=EPS_ROOT), meta_adam(meta_step_size),
                      init_step_size=init_step_size, weight_decay=weight_decay, **kwargs)


@forwarding_metaoptimize_keywords
def adamw_lion(init_step_size=INIT_STEP_SIZE, *, meta_step_size=META_STEP_SIZE,
               weight_decay=WEIGHT_DECAY, b1=0.9, b2=0.999, eps=1e-8, **kwargs):
  r"""(AdamW, Lion): AdamW's direction, Lion on the log step sizes.

  Args:
    init_step_size, meta_step_size, weight_decay: as every preset (:mod:`metaoptax.presets`).
    **kwargs: any other keyword of :func:`metaoptax.metaoptimize`.
    b1, b2, eps: Adam's moment decays and denominator constant, as in ``optax.adamw``.

  Returns:
    :func:`metaoptax.metaoptimize`'s transformation (``update`` needs ``params``).
  """
  return metaoptimize(optax.scale_by_adam(b1=b1, b2=b2, eps=eps, eps_root=EPS_ROOT), meta_lion(meta_step_size),
                      init_step_size=init_step_size, weight_decay=weight_decay, **kwargs)


@forwarding_metaoptimize_keywords
def lion_lion(init_step_size=INIT_STEP_SIZE, *, meta_step_size=META_STEP_SIZE,
              weight_decay=WEIGHT_DECAY, b1=0.9, b2=0.99, **kwargs):
  r"""(Lion, Lion): Lion's sign direction (exactly Hessian-free), Lion meta.

  Args:
    init_step_size, meta_step_size, weight_decay: as every preset (:mod:`metaoptax.presets`).
    **kwargs: any other keyword of :func:`metaoptax.metaoptimize`.
    b1, b2: Lion's interpolation and moment decays, as in ``optax.lion``.

  Returns:
    :func:`metaoptax.metaoptimize`'s transformation (``update`` needs ``params``).
  """
  return metaoptimize(optax.scale_by_lion(b1=b1, b2=b2), meta_lion(meta_step_size),
                      init_step_size=init_step_size, weight_decay=weight_decay, **kwargs)


@forwarding_metaoptimize_keywords
def rmsprop_adam(init_step_size=INIT_STEP_SIZE, *, meta_step_size=META_STEP_SIZE,
                 weight_decay=WEIGHT_DECAY, decay=0.999, eps=1e-8, **kwargs):
  r"""(RMSProp, Adam): ``g / sqrt(v + eps)`` with ``v`` an EMA of ``g**2``.

  Args:
    init_step_size, meta_step_size, weight_decay: as every preset (:mod:`metaoptax.presets`).
    **kwargs: any other keyword of :func:`metaoptax.metaoptimize`.
    decay, eps: the decay of ``v`` and the denominator constant, as in
      ``optax.scale_by_rms``.

  Returns:
    :func:`metaoptax.metaoptimize`'s transformation (``update`` needs ``params``).
  """
  return metaoptimize(optax.scale_by_rms(decay=decay, eps=eps), meta_adam(meta_step_size),
                      init_step_size=init_step_size, weight_decay=weight_decay, **kwargs)


@forwarding_metaoptimize_keywords
def sgd_momentum_adam(init_step_size=INIT_STEP_SIZE, *, meta_step_size=META_STEP_SIZE,
                      weight_decay=WEIGHT_DECAY, momentum=0.9, **kwargs):
  r"""(SGD with momentum, Adam): heavy-ball ``m = rho m + g`` direction.

  Args:
    init_step_size, meta_step_size, weight_decay: as every preset (:mod:`metaoptax.presets`).
    **kwargs: any other keyword of :func:`metaoptax.metaoptimize`.
    momentum: :math:`\rho`, the decay of the heavy-ball trace (``optax.trace``).

  Returns:
    :func:`metaoptax.metaoptimize`'s transformation (``update`` needs ``params``).
  """
  return metaoptimize(optax.trace(decay=momentum), meta_adam(meta_step_size),
                      init_step_size=init_step_size, weight_decay=weight_decay, **kwargs)


@forwarding_metaoptimize_keywords
def sgd_sgd(init_step_size=INIT_STEP_SIZE, *, meta_step_size=META_STEP_SIZE,
            weight_decay=0.0, **kwargs):
  r"""(SGD, SGD): plain gradient direction, plain gradient step on ``beta``.

  Args:
    init_step_size, meta_step_size, weight_decay: as every preset (:mod:`metaoptax.presets`).
    **kwargs: any other keyword of :func:`metaoptax.metaoptimize`.

  Returns:
    :func:`metaoptax.metaoptimize`'s transformation (``update`` needs ``params``).
  """
  return metaoptimize(optax.identity(), _meta_sgd(meta_step_size),
                      init_step_size=init_step_size, weight_decay=weight_decay, **kwargs)


@forwarding_metaoptimize_keywords
def sgd_adam(init_step_size=INIT_STEP_SIZE, *, meta_step_size=META_STEP_SIZE,
             weight_decay=0.0, **kwargs):
  r"""(SGD, Adam): plain gradient direction, Adam on ``beta``.

  Args:
    init_step_size, meta_step_size, weight_decay: as every preset (:mod:`metaoptax.presets`).
    **kwargs: any other keyword of :func:`metaoptax.metaoptimize`.

  Returns:
    :func:`metaoptax.metaoptimize`'s transformation (``update`` needs ``params``).
  """
  return metaoptimize(optax.identity(), meta_adam(meta_step_size),
                      init_step_size=init_step_size, weight_decay=weight_decay, **kwargs)


@forwarding_metaoptimize_keywords
def amsgrad_adam(init_step_size=INIT_STEP_SIZE, *, meta_step_size=META_STEP_SIZE,
                 weight_decay=WEIGHT_DECAY, b1=0.9, b2=0.999, eps=1e-8, **kwargs):
  r"""(AMSGrad, Adam): Adam with the running maximum of ``v``.

  Args:
    init_step_size, meta_step_size, weight_decay: as every preset (:mod:`metaoptax.presets`).
    **kwargs: any other keyword of :func:`metaoptax.metaoptimize`.
    b1, b2, eps: the moment decays and denominator constant, as in ``optax.amsgrad``.

  Returns:
    :func:`metaoptax.metaoptimize`'s transformation (``update`` needs ``params``).
  """
  return metaoptimize(optax.scale_by_amsgrad(b1=b1, b2=b2, eps=eps, eps_root=EPS_ROOT), meta_adam(meta_step_size),
                      init_step_size=init_step_size, weight_decay=weight_decay, **kwargs)


#: Every preset by name: ``{"adamw_adam": adamw_adam, ...}``.
PRESETS = {
    "adamw_adam": adamw_adam,
    "adamw_lion": adamw_lion,
    "lion_lion": lion_lion,
    "rmsprop_adam": rmsprop_adam,
    "sgd_momentum_adam": sgd_momentum_adam,
    "sgd_sgd": sgd_sgd,
    "sgd_adam": sgd_adam,
    "amsgrad_adam": amsgrad_adam,
}
