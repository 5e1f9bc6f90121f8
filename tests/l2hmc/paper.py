"""The paper's sampler and training (Levy et al. 2018), for tests of its mathematics: the
library's defaults are the recipe for an unseen posterior (networks off, per-step and
per-coordinate step sizes, jitter, a warm-up), so tests of the networks and the paper's
loss spell the paper's settings out."""

from metaoptax import l2hmc

PAPER_SAMPLER = dict(step_sizes="shared", use_networks=True, per_coordinate=False, jitter=0.0)
PAPER_TRAINING = dict(num_chains=200, aux_weight=1.0, objective="esjd", warmup_iterations=0,
                      drop_nonfinite_chains=False)


def paper_config(**kwargs) -> l2hmc.L2HMCConfig:
  """``L2HMCConfig`` with the paper's settings where ``kwargs`` does not set them."""
  return l2hmc.L2HMCConfig(**{**PAPER_SAMPLER, **kwargs})


def paper_training(**kwargs) -> l2hmc.TrainingConfig:
  """``TrainingConfig`` with the paper's settings where ``kwargs`` does not set them."""
  return l2hmc.TrainingConfig(**{**PAPER_TRAINING, **kwargs})
