"""metaoptax: learn the knobs of optimization while training runs."""

from metaoptax.metaoptimize import ExactTrace
from metaoptax.metaoptimize import MetaOptimizeState
from metaoptax.metaoptimize import metaoptimize
from metaoptax.metaoptimize import step_sizes
from metaoptax.metaoptimize import trace

__version__ = "0.1.0"

__all__ = (
    "ExactTrace",
    "MetaOptimizeState",
    "metaoptimize",
    "step_sizes",
    "trace",
)
