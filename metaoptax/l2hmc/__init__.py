"""Samplers whose leapfrog step sizes (and S, Q, T networks) are trained: L2HMC.

Start with :func:`adapt`: one call from a log density to a checked, ready sampler.
"""

from metaoptax.l2hmc import (diagnostics, ess, integrators, interweaving, local_step_sizes,
                             posteriors, targets, trajectory_length)
from metaoptax.l2hmc.adaptation import WarmupResult, warmup
from metaoptax.l2hmc.default_adaptation import (Adaptation, AdaptationInfo,
                                                ConvergenceWarning, adapt)
from metaoptax.l2hmc.diagnostics import split_rhat
from metaoptax.l2hmc.dynamics import (L2HMCConfig, L2HMCParams, init_params, leapfrog,
                                      make_masks)
from metaoptax.l2hmc.kernel import (L2HMCInfo, L2HMCState, SamplingAlgorithm,
                                    acceptance_probability, build_kernel, draw_step_scale,
                                    gradient_evaluations, init, is_divergent, l2hmc,
                                    logdensity_evaluations, propose, sample_chains)
from metaoptax.l2hmc.targets import Target
from metaoptax.l2hmc.training import (OBJECTIVES, TrainingConfig, TrainingInfo,
                                      TrainingResult, TrainingState, build_training_step,
                                      default_optimizer, esjd_loss, init_training,
                                      objective_loss, rotation_step_sizes, train)
from metaoptax.l2hmc.whitening import Whitening, dense_whitening

__all__ = ("diagnostics", "ess", "integrators", "interweaving", "local_step_sizes",
           "posteriors", "targets", "trajectory_length",
           "Adaptation", "AdaptationInfo", "ConvergenceWarning", "adapt", "split_rhat",
           "L2HMCConfig", "L2HMCParams", "init_params", "leapfrog", "make_masks",
           "L2HMCInfo", "L2HMCState", "SamplingAlgorithm", "acceptance_probability",
           "build_kernel", "draw_step_scale", "gradient_evaluations", "logdensity_evaluations",
           "init", "is_divergent", "l2hmc", "propose", "sample_chains", "Target", "OBJECTIVES",
           "TrainingConfig", "TrainingInfo", "TrainingResult", "TrainingState",
           "build_training_step", "default_optimizer", "esjd_loss", "init_training",
           "objective_loss", "rotation_step_sizes", "train",
           "WarmupResult", "warmup", "Whitening", "dense_whitening")
