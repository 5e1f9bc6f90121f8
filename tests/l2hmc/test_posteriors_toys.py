"""``benchmarks/l2hmc_posteriors.py``'s toys take ``l2hmc_ess.py``'s L2HMC settings."""

import l2hmc_ess  # benchmarks/ is on sys.path (conftest.py)
import l2hmc_posteriors


def test_toy_runs_take_l2hmc_ess_settings():
  for name in l2hmc_posteriors.TOYS:
    runs, iterations = l2hmc_posteriors.toy_runs(name, quick=False)
    (_, source_iterations, options, _), = l2hmc_ess.TARGETS[name]
    assert iterations == source_iterations
    (label, variant, objective, anneal, warmup, aux_weight), = runs
    assert (objective, warmup, aux_weight, anneal) == (
        options["objective"], options["warmup_iterations"], options["aux_weight"], None)
    assert variant["use_networks"] and variant["hidden"] == 50
    # the rough well's first-order force gradients reach TrainingConfig, and its label says so
    first_order = options.get("differentiate_force", True) is False
    assert variant.get("differentiate_force", True) is not first_order
    assert ("first-order" in label) is first_order
  assert "differentiate_force" in l2hmc_posteriors.TRAINING_FIELDS


def test_toys_are_targets():
  found = l2hmc_posteriors.targets()
  assert {name: found[name].dim for name in l2hmc_posteriors.TOYS} == dict(
      correlated=2, rough_well=2, ill_conditioned=50)
