"""Learned (LSTM) optimizers that can teleport, a learned scaling of Adam that transfers
to unseen networks, their task families and meta-training."""

from metaoptax.l2o import budget
from metaoptax.l2o import pes
from metaoptax.l2o import tasks
from metaoptax.l2o.budget import VariedBudget
from metaoptax.l2o.climbed_adam import ClimbedAdamConfig
from metaoptax.l2o.climbed_adam import ClimbedAdamState
from metaoptax.l2o.evaluation import evaluate
from metaoptax.l2o.learned_adam import ScaledAdamConfig
from metaoptax.l2o.learned_adam import ScaledAdamState
from metaoptax.l2o.learned_adam import TensorLSTM
from metaoptax.l2o.learned_adam import scale_by_learned_adam
from metaoptax.l2o.learned_adam import scaled_adam_features
from metaoptax.l2o.network import HEADS
from metaoptax.l2o.network import CoordinateLSTM
from metaoptax.l2o.network import L2OConfig
from metaoptax.l2o.network import preprocess
from metaoptax.l2o.optimizer import L2OState
from metaoptax.l2o.problems import sample_problems
from metaoptax.l2o.tasks import TaskFamily
from metaoptax.l2o.training import TrainingConfig
from metaoptax.l2o.training import TrainingInfo
from metaoptax.l2o.training import TrainingResult
from metaoptax.l2o.training import TrainingState
from metaoptax.l2o.training import build_training_step
from metaoptax.l2o.training import default_optimizer
from metaoptax.l2o.training import init_training
from metaoptax.l2o.training import train
from metaoptax.l2o.validation import Validation

__all__ = (
    "budget",
    "pes",
    "tasks",
    "TaskFamily",
    "train",
    "init_training",
    "build_training_step",
    "default_optimizer",
    "TrainingConfig",
    "TrainingState",
    "TrainingInfo",
    "TrainingResult",
    "Validation",
    "sample_problems",
    "evaluate",
    "HEADS",
    "L2OConfig",
    "L2OState",
    "CoordinateLSTM",
    "preprocess",
    "ScaledAdamConfig",
    "ScaledAdamState",
    "TensorLSTM",
    "scale_by_learned_adam",
    "scaled_adam_features",
    "ClimbedAdamConfig",
    "ClimbedAdamState",
    "VariedBudget",
)
