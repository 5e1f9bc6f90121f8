r"""Earlier step-size methods as special cases of MetaOptimize (paper Appendix B).

* :func:`hypergradient_descent` (Baydin et al. 2017): SGD meta update,
  :math:`\gamma = 0`, additive step sizes, meta update first.
* :func:`xu_idbd` (Xu et al. 2018, the extension of IDBD beyond linear units):
  weight-wise, SGD/SGD, L-approximation with the full Hessian, meta update first.
* IDBD itself (diagonal Hessian with a rectifier) is :func:`metaoptax.idbd`.
"""

from __future__ import annotations

import math

import optax

from metaoptax._src.hyperparams import check_meta_step_size
from metaoptax._src.transform import metaoptimize

__all__ = ("hypergradient_descent", "xu_idbd")


def hypergradient_descent(
    base: optax.GradientTransformation | None = None,
    *,
    meta_step_size: float,
    init_step_size: float,
    blocks="scalar",
    step_size_bounds=(0.0, math.inf),
) -> optax.GradientTransformationExtraArgs:
  r"""Hypergradient descent: :math:`\alpha_t = \alpha_{t-1} + \eta\, g_t \cdot d_{t-1}`.

  For an SGD base (``base=None``), the update of Baydin et al. (2017, Alg. 1) is

  .. math::

    \alpha_t = \alpha_{t-1} + \eta\, \nabla f(w_{t-1}) \cdot \nabla f(w_{t-2}),
    \qquad w_t = w_{t-1} - \alpha_t \nabla f(w_{t-1}),

  and for another base the previous direction replaces the previous gradient.
  It equals MetaOptimize with meta SGD, :math:`\gamma = 0` and
  :math:`\sigma = \mathrm{identity}` (paper eq. 91).

  Args:
    base: direction transformation (default: SGD, ``optax.identity()``).
    meta_step_size: :math:`\eta`, the step size of the step-size update (the same
      name as in :func:`xu_idbd` and :func:`metaoptax.idbd`).
    init_step_size: :math:`\alpha_0`.
    blocks: as in :func:`metaoptax.metaoptimize` (scalar in the paper).
    step_size_bounds: step sizes are clipped to this range (default ``[0, inf)``).

  References:
    Baydin et al., `Online Learning Rate Adaptation with Hypergradient Descent
    <https://arxiv.org/abs/1703.04782>`_, 2017.
  """
  check_meta_step_size("meta_step_size", meta_step_size)
  return metaoptimize(
      optax.identity() if base is None else base, optax.sgd(meta_step_size),
      init_step_size=init_step_size, blocks=blocks, gamma=0.0,
      parametrization="linear", meta_update_first=True, step_size_bounds=step_size_bounds)


def xu_idbd(
    *,
    meta_step_size: float,
    init_step_size: float,
    step_size_bounds=(1e-10, 1.0),
) -> optax.GradientTransformationExtraArgs:
  r"""The IDBD extension of Xu et al. (2018): full Hessian, weight-wise.

  .. math::

    \beta_{t+1} &= \beta_t - \eta H_t^\top \nabla f(w_t), \quad \alpha_{t+1} = e^{\beta_{t+1}}\\
    w_{t+1} &= w_t - \alpha_{t+1} \odot \nabla f(w_t)\\
    H_{t+1} &= (I - [\alpha_{t+1}] \nabla^2 f(w_t)) H_t - [\alpha_{t+1} \nabla f(w_t)]

  Needs ``obj_fn`` at every update (Hessian-vector products). The trace is a
  full ``n x n`` matrix, so this is for small models (at most
  ``exact.MAX_EXACT_BLOCKS`` weights).

  Args:
    meta_step_size: :math:`\eta`, the step of plain gradient descent on :math:`\beta`.
    init_step_size: :math:`\alpha_0`, every weight's initial step size.
    step_size_bounds: ``(low, high)``, the range the step sizes are clipped to.

  Returns:
    An ``optax.GradientTransformationExtraArgs`` whose ``update`` needs ``params`` and
    ``obj_fn``.

  References:
    Xu, van Hasselt and Silver, `Meta-Gradient Reinforcement Learning
    <https://arxiv.org/abs/1805.09801>`_, 2018; Sharifnassab et al. 2024, App. B.1.
  """
  check_meta_step_size("meta_step_size", meta_step_size)
  return metaoptimize(
      optax.identity(), optax.sgd(meta_step_size), init_step_size=init_step_size,
      blocks="per_param", approximation="l_approx", meta_update_first=True,
      step_size_bounds=step_size_bounds)
