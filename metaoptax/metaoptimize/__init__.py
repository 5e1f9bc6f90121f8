"""Step-size meta-optimization (MetaOptimize) as optax transformations."""

from metaoptax._src.state import ExactTrace
from metaoptax._src.state import HessianFreeTrace
from metaoptax._src.state import MetaOptimizeState
from metaoptax._src.state import sensitivity_trace
from metaoptax._src.state import step_sizes
from metaoptax._src.state import trace  # deprecated alias of sensitivity_trace
from metaoptax._src.transform import metaoptimize
from metaoptax.metaoptimize import presets
from metaoptax.metaoptimize.idbd import IDBDState
from metaoptax.metaoptimize.idbd import idbd
from metaoptax.metaoptimize.special_cases import hypergradient_descent
from metaoptax.metaoptimize.special_cases import xu_idbd

__all__ = (
    "ExactTrace",
    "HessianFreeTrace",
    "IDBDState",
    "MetaOptimizeState",
    "hypergradient_descent",
    "idbd",
    "metaoptimize",
    "presets",
    "sensitivity_trace",
    "step_sizes",
    "xu_idbd",
)
