"""metaoptax: learn the knobs of optimization while training runs."""

from metaoptax import checkpoint
from metaoptax import l2hmc
from metaoptax import l2o
from metaoptax import teleport

from metaoptax._src.progress import Progress

from metaoptax.metaoptimize import ExactTrace
from metaoptax.metaoptimize import HessianFreeTrace
from metaoptax.metaoptimize import IDBDState
from metaoptax.metaoptimize import MetaOptimizeState
from metaoptax.metaoptimize import hypergradient_descent
from metaoptax.metaoptimize import idbd
from metaoptax.metaoptimize import metaoptimize
from metaoptax.metaoptimize import presets
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
    "ExactTrace",
    "HessianFreeTrace",
    "IDBDState",
    "MetaOptimizeState",
    "hypergradient_descent",
    "idbd",
    "metaoptimize",
    "presets",
    "step_sizes",
    "trace",
    "xu_idbd",
)
