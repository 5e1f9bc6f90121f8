"""Step-size meta-optimization (MetaOptimize) as optax transformations."""

from metaoptax._src.state import AveragedTrace
from metaoptax._src.state import ExactTrace
from metaoptax._src.learned import MetaParams
from metaoptax._src.state import HessianFreeTrace
from metaoptax._src.state import HyperparamTrace
from metaoptax._src.state import MetaOptimizeState
from metaoptax._src.state import hyperparameters
from metaoptax._src.state import sensitivity_trace
from metaoptax._src.state import step_sizes
from metaoptax._src.transform import metaoptimize
from metaoptax.step_size import presets
from metaoptax.step_size.climbing import ClimbState
from metaoptax.step_size.climbing import climb
from metaoptax.step_size.drop_ins import adamw
from metaoptax.step_size.drop_ins import lion
from metaoptax.step_size.drop_ins import sgd
from metaoptax.step_size.overfitting import OverfittingGateState
from metaoptax.step_size.overfitting import overfitting_gate
from metaoptax.step_size.delta_bar_delta import IDBDState
from metaoptax.step_size.delta_bar_delta import idbd
from metaoptax.step_size.special_cases import hypergradient_descent
from metaoptax.step_size.special_cases import xu_idbd

__all__ = (
    "AveragedTrace",
    "ClimbState",
    "ExactTrace",
    "HessianFreeTrace",
    "HyperparamTrace",
    "IDBDState",
    "MetaOptimizeState",
    "MetaParams",
    "OverfittingGateState",
    "adamw",
    "climb",
    "hypergradient_descent",
    "hyperparameters",
    "idbd",
    "lion",
    "metaoptimize",
    "overfitting_gate",
    "presets",
    "sensitivity_trace",
    "sgd",
    "step_sizes",
    "xu_idbd",
)
