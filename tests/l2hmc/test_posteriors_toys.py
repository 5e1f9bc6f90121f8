"""``benchmarks/l2hmc_posteriors.py``'s toys take their ``TOY_SETTINGS``, and every row spells
out the sampler's settings it was measured with (not the library's defaults)."""

import l2hmc_posteriors  # benchmarks/ is on sys.path (conftest.py)


def test_toy_runs_take_their_settings():
  for name in l2hmc_posteriors.TOYS:
    runs, iterations = l2hmc_posteriors.toy_runs(name, quick=False)
    source_iterations, options = l2hmc_posteriors.TOY_SETTINGS[name]
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


def test_every_variant_spells_out_the_measured_settings():
  """The committed rows had no jitter, per-step per-coordinate step sizes and the networks
  set per row: none of them may come from the library's defaults."""
  assert l2hmc_posteriors.MEASURED_CONFIG["jitter"] == 0.0
  assert {"step_sizes", "per_coordinate", "init_step_size"} <= set(
      l2hmc_posteriors.MEASURED_CONFIG)
  for variant in l2hmc_posteriors.VARIANTS.values():
    assert "use_networks" in variant and not set(variant) & set(l2hmc_posteriors.MEASURED_CONFIG)


def test_toys_are_targets():
  found = l2hmc_posteriors.targets()
  assert {name: found[name].dim for name in l2hmc_posteriors.TOYS} == dict(
      correlated=2, rough_well=2, ill_conditioned=50)
  assert found["logistic"].dim == 31
