"""Step-size meta-optimization (MetaOptimize) as optax transformations."""

from metaoptax.metaoptimize import presets
from metaoptax.metaoptimize.climb import ClimbState, climb
from metaoptax.metaoptimize.drop_ins import adamw, lion, sgd
from metaoptax.metaoptimize.idbd import IDBDState, idbd
from metaoptax.metaoptimize.special_cases import hypergradient_descent, xu_idbd
from metaoptax.metaoptimize.state import (
    ExactTrace, HessianFreeTrace, MetaOptimizeState, step_sizes, trace)
from metaoptax.metaoptimize.transform import metaoptimize
