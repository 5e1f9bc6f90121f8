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
from metaoptax.metaoptimize import ClimbState
from metaoptax.metaoptimize import ExactTrace
from metaoptax.metaoptimize import HessianFreeTrace
from metaoptax.metaoptimize import HyperparamTrace
from metaoptax.metaoptimize import IDBDState
from metaoptax.metaoptimize import MetaOptimizeState
from metaoptax.metaoptimize import MetaParams
from metaoptax.metaoptimize import adamw
from metaoptax.metaoptimize import climb
from metaoptax.metaoptimize import hypergradient_descent
from metaoptax.metaoptimize import hyperparameters
from metaoptax.metaoptimize import idbd
from metaoptax.metaoptimize import lion
from metaoptax.metaoptimize import metaoptimize
from metaoptax.metaoptimize import presets
from metaoptax.metaoptimize import sensitivity_trace
from metaoptax.metaoptimize import sgd
from metaoptax.metaoptimize import step_sizes
from metaoptax.metaoptimize import trace  # deprecated alias of sensitivity_trace
from metaoptax.metaoptimize import xu_idbd
from metaoptax.metaoptimize import __all__ as _METAOPTIMIZE_ALL

__version__ = "0.1.0"

_LAZY_SUBPACKAGES = ("checkpoint", "l2hmc", "l2o", "teleport")

__all__ = ("AverageState", "Progress", "average_iterates", "averaged_params") + _LAZY_SUBPACKAGES + _METAOPTIMIZE_ALL


def __getattr__(name: str):
  if name in _LAZY_SUBPACKAGES:
    return _importlib.import_module(f"metaoptax.{name}")
  raise AttributeError(f"module 'metaoptax' has no attribute {name!r}")


def __dir__():
  return sorted(set(globals()) | set(_LAZY_SUBPACKAGES))
