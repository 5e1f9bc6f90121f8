"""metaoptax: learn the knobs of optimization while training runs."""

from metaoptax import checkpoint
from metaoptax import l2hmc
from metaoptax import l2o
from metaoptax import teleport

from metaoptax._src.progress import Progress
from metaoptax.metaoptimize import ClimbState
from metaoptax.metaoptimize import ExactTrace
from metaoptax.metaoptimize import HessianFreeTrace
from metaoptax.metaoptimize import IDBDState
from metaoptax.metaoptimize import MetaOptimizeState
from metaoptax.metaoptimize import adamw
from metaoptax.metaoptimize import climb
from metaoptax.metaoptimize import hypergradient_descent
from metaoptax.metaoptimize import idbd
from metaoptax.metaoptimize import lion
from metaoptax.metaoptimize import metaoptimize
from metaoptax.metaoptimize import presets
from metaoptax.metaoptimize import sgd
from metaoptax.metaoptimize import step_sizes
from metaoptax.metaoptimize import trace
from metaoptax.metaoptimize import xu_idbd

__version__ = "0.1.0"

__all__ = (
    "Progress",
    "checkpoint",
    "l2hmc",
    "l2o",
    "teleport",
    "ClimbState",
    "ExactTrace",
    "HessianFreeTrace",
    "IDBDState",
    "MetaOptimizeState",
    "adamw",
    "climb",
    "hypergradient_descent",
    "idbd",
    "lion",
    "metaoptimize",
    "presets",
    "sgd",
    "step_sizes",
    "trace",
    "xu_idbd",
)
