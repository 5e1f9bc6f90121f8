"""Samplers whose leapfrog step sizes (and S, Q, T networks) are trained: L2HMC.

Start with :func:`adapt`: one call from a log density to a checked, ready sampler; for a
numpyro model, ``numpyro.infer.MCMC(NumPyroL2HMC(model), ...)`` runs it (numpyro is optional:
:mod:`metaoptax.l2hmc.numpyro_kernel` loads on first access of ``NumPyroL2HMC``).
"""

from metaoptax.l2hmc import (diagnostics, ess, integrators, interweaving, local_step_sizes,
                             low_rank, noncentering, posteriors, targets,
                             trajectory_length)
from metaoptax.l2hmc.adaptation import WarmupResult, warmup
from metaoptax.l2hmc.default_adaptation import Adaptation, AdaptationInfo, adapt
from metaoptax.l2hmc.diagnostics import ConvergenceWarning, split_rhat
from metaoptax.l2hmc.dynamics import (L2HMCConfig, L2HMCParams, init_params, leapfrog,
                                      make_masks)
from metaoptax.l2hmc.kernel import (L2HMCInfo, L2HMCState, SamplingAlgorithm,
                                    acceptance_probability, build_kernel, draw_step_scale,
                                    gradient_evaluations, init, is_divergent, l2hmc,
                                    logdensity_evaluations, propose, SampleInfo, sample_chains)
from metaoptax.l2hmc.targets import Target
from metaoptax.l2hmc.training import (OBJECTIVES, TrainingConfig, TrainingInfo,
                                      TrainingResult, TrainingState, build_training_step,
                                      default_optimizer, esjd_loss, init_training,
                                      objective_loss, rotation_step_sizes, train)
from metaoptax.l2hmc.whitening import Whitening, dense_whitening, log_det_jacobian

__all__ = ("diagnostics", "ess", "integrators", "interweaving", "local_step_sizes",
           "low_rank", "noncentering", "posteriors", "targets", "trajectory_length",
           "Adaptation", "AdaptationInfo", "ConvergenceWarning", "adapt", "split_rhat",
           "L2HMCConfig", "L2HMCParams", "init_params", "leapfrog", "make_masks",
           "L2HMCInfo", "L2HMCState", "SamplingAlgorithm", "acceptance_probability",
           "build_kernel", "draw_step_scale", "gradient_evaluations", "logdensity_evaluations",
           "init", "is_divergent", "l2hmc", "propose", "SampleInfo", "sample_chains", "Target", "OBJECTIVES",
           "TrainingConfig", "TrainingInfo", "TrainingResult", "TrainingState",
           "build_training_step", "default_optimizer", "esjd_loss", "init_training",
           "objective_loss", "rotation_step_sizes", "train",
           "WarmupResult", "warmup", "Whitening", "dense_whitening", "log_det_jacobian",
           "NumPyroL2HMC", "NumPyroL2HMCState")

# numpyro is optional: its kernel (metaoptax.l2hmc.numpyro_kernel) loads on first access
_NUMPYRO_NAMES = ("NumPyroL2HMC", "NumPyroL2HMCState")


def __getattr__(name: str):
  if name in _NUMPYRO_NAMES:
    try:
      from metaoptax.l2hmc import numpyro_kernel
    except ModuleNotFoundError as error:
      if (error.name or "").split(".")[0] != "numpyro":
        raise
      raise ImportError(f"metaoptax.l2hmc.{name} needs numpyro: pip install numpyro") from error
    return getattr(numpyro_kernel, name)
  raise AttributeError(f"module 'metaoptax.l2hmc' has no attribute {name!r}")


def __dir__():
  return sorted(set(globals()) | set(_NUMPYRO_NAMES))
