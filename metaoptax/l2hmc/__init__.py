"""Samplers whose leapfrog step sizes (and S, Q, T networks) are trained: L2HMC."""

from metaoptax.l2hmc import ess, integrators, interweaving, local_step_sizes, posteriors, schools_exact, targets
from metaoptax.l2hmc.dynamics import (L2HMCConfig, L2HMCParams, init_params, leapfrog,
                                      make_masks)
from metaoptax.l2hmc.kernel import (L2HMCInfo, L2HMCState, SamplingAlgorithm,
                                    acceptance_probability, build_kernel,
                                    gradient_evaluations, init, l2hmc,
                                    logdensity_evaluations,
                                    propose, sample_chains)
from metaoptax.l2hmc.training import (OBJECTIVES, TrainingConfig, TrainingInfo,
                                      TrainingResult, TrainingState, build_training_step,
                                      default_optimizer, esjd_loss, init_training,
                                      objective_loss, rotation_step_sizes, train)
from metaoptax.l2hmc.adaptation import WarmupResult, warmup
from metaoptax.l2hmc.whitening import Whitening

__all__ = ("ess", "integrators", "interweaving", "local_step_sizes", "posteriors", "schools_exact", "targets", "L2HMCConfig", "L2HMCParams", "init_params", "leapfrog", "make_masks",
           "L2HMCInfo", "L2HMCState", "SamplingAlgorithm", "acceptance_probability", "build_kernel",
           "gradient_evaluations", "logdensity_evaluations",
           "init", "l2hmc", "propose", "sample_chains", "OBJECTIVES", "TrainingConfig",
           "TrainingInfo", "TrainingResult", "TrainingState", "build_training_step",
           "default_optimizer", "esjd_loss", "init_training", "objective_loss",
           "rotation_step_sizes", "train",
           "WarmupResult", "warmup", "Whitening")
