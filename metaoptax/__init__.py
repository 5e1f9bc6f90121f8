"""metaoptax: learn the knobs of optimization while training runs.

The step-size meta-optimizers are imported with the package. The subpackages
``l2o`` and ``l2hmc`` (which need flax), ``checkpoint`` (orbax) and
``teleport`` are imported on first use (PEP 562), so ``import metaoptax``
costs no more than jax and optax.
"""

import importlib as _importlib

from metaoptax._src.averaging import AverageState
from metaoptax._src.averaging import average_iterates
from metaoptax._src.averaging import averaged_params
from metaoptax._src.progress import Progress
from metaoptax.step_size import AveragedTrace
from metaoptax.step_size import ClimbState
from metaoptax.step_size import ExactTrace
from metaoptax.step_size import HessianFreeTrace
from metaoptax.step_size import HyperparamTrace
from metaoptax.step_size import IDBDState
from metaoptax.step_size import MetaOptimizeState
from metaoptax.step_size import MetaParams
from metaoptax.step_size import OverfittingGateState
from metaoptax.step_size import adamw
from metaoptax.step_size import climb
from metaoptax.step_size import hypergradient_descent
from metaoptax.step_size import hyperparameters
from metaoptax.step_size import idbd
from metaoptax.step_size import lion
from metaoptax.step_size import metaoptimize
from metaoptax.step_size import overfitting_gate
from metaoptax.step_size import presets
from metaoptax.step_size import sensitivity_trace
from metaoptax.step_size import sgd
from metaoptax.step_size import step_sizes
from metaoptax.step_size import xu_idbd
from metaoptax.step_size import __all__ as _STEP_SIZE_ALL

__version__ = "1.0.0"

_LAZY_SUBPACKAGES = ("checkpoint", "l2hmc", "l2o", "teleport")

__all__ = ("AverageState", "Progress", "average_iterates", "averaged_params") + _LAZY_SUBPACKAGES + _STEP_SIZE_ALL


def __getattr__(name: str):
  if name in _LAZY_SUBPACKAGES:
    return _importlib.import_module(f"metaoptax.{name}")
  raise AttributeError(f"module 'metaoptax' has no attribute {name!r}")


def __dir__():
  return sorted(set(globals()) | set(_LAZY_SUBPACKAGES))
