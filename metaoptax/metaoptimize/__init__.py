"""Step-size meta-optimization (MetaOptimize) as optax transformations."""

from metaoptax.metaoptimize.state import ExactTrace, MetaOptimizeState, step_sizes, trace
from metaoptax.metaoptimize.transform import metaoptimize
