"""Learned (LSTM) optimizers that can teleport, a learned scaling of Adam that transfers
to unseen networks, their tasks and meta-training."""

from metaoptax.l2o import budget, pes, tasks
from metaoptax.l2o.evaluation import evaluate
from metaoptax.l2o.meta_training import (MetaStepInfo, MetaTrainingConfig, MetaTrainingResult,
                                         MetaTrainingState, build_meta_step,
                                         default_meta_optimizer, init_meta_training, meta_train,
                                         sample_problems)
from metaoptax.l2o.network import (HEADS, CoordinateLSTM, L2OConfig, init_network,
                                   preprocess)
from metaoptax.l2o.optimizer import L2OState, learned_optimizer, step
from metaoptax.l2o.learned_adam import (ScaledAdamConfig, ScaledAdamState, TensorLSTM,
                                       scale_by_learned_adam, scaled_adam, scaled_adam_features)
from metaoptax.l2o.climbed_adam import ClimbedAdamConfig, ClimbedAdamState, climbed_scaled_adam
from metaoptax.l2o.budget import VariedBudget
from metaoptax.l2o.validation import Validation

__all__ = ("tasks", "pes", "evaluate", "MetaStepInfo", "MetaTrainingConfig", "MetaTrainingResult",
           "MetaTrainingState", "build_meta_step", "default_meta_optimizer", "init_meta_training",
           "meta_train", "sample_problems", "HEADS", "CoordinateLSTM", "L2OConfig", "init_network",
           "preprocess", "L2OState", "learned_optimizer", "step", "ScaledAdamConfig",
           "ScaledAdamState", "TensorLSTM", "scaled_adam", "scaled_adam_features",
           "scale_by_learned_adam", "ClimbedAdamConfig", "ClimbedAdamState",
           "climbed_scaled_adam", "Validation", "budget", "VariedBudget")
