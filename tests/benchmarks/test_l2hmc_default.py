"""``l2hmc_default``'s verdicts: a run off the reference at 1,000 draws is checked again at
NUTS's gradient budget, and only a run off there without a warning is silently wrong."""

import jax
import jax.numpy as jnp
import numpy as np

import l2hmc_default  # benchmarks/ is on sys.path (tests/conftest.py)


def _problem():
  summary = lambda x: {"a": x[0], "b": x[1]}
  return l2hmc_default.Problem("gaussian", lambda x: -0.5 * jnp.sum(x**2), None, summary,
                               {"a": 0.0, "b": 0.0}, {"a": 1.0, "b": 1.0})


def _run(draws, warned=False, at_budget=None):
  run = dict(draws=draws, grads_per_transition=4.0, warmup_grads=100.0, seconds=1.0,
             acceptance=0.9, warned=warned, divergences=0,
             total_grads_per_chain=100.0 + 4.0 * draws.shape[0])
  if at_budget is not None:
    run["at_budget"] = at_budget
  return run


def test_right_needs_rhat_means_and_sds_all_within_their_bounds():
  good = dict(rhat_x=1.005, rhat_x2=1.004, mean_error=0.05, sd_error=0.05)
  assert l2hmc_default.right(good)
  for key, bad in (("rhat_x2", 1.02), ("mean_error", 0.2), ("sd_error", 0.2)):
    assert not l2hmc_default.right(dict(good, **{key: bad}))
  # a problem without reference moments (the scale suite's multilevel regression): R-hat alone
  unreferenced = dict(good, mean_error=None, sd_error=None)
  assert l2hmc_default.right(unreferenced)
  assert not l2hmc_default.right(dict(unreferenced, rhat_x=1.02))


def test_a_run_off_at_1000_draws_but_right_at_nuts_budget_is_not_silently_wrong():
  problem = _problem()
  shifted = np.asarray(jax.random.normal(jax.random.key(0), (200, 8, 2))) + 0.5  # mean off
  good = np.asarray(jax.random.normal(jax.random.key(1), (4000, 8, 2)))
  checks = l2hmc_default._checks(problem, good)
  assert l2hmc_default.right(checks)
  row = l2hmc_default.score(problem, _run(shifted, at_budget=checks))
  assert not row["right"] and row["at_budget"]["right"] and not row["silently_wrong"]
  off = l2hmc_default.score(problem, _run(shifted, at_budget=l2hmc_default._checks(problem,
                                                                                   shifted)))
  assert off["silently_wrong"]
  assert not l2hmc_default.score(problem, _run(shifted, warned=True))["silently_wrong"]
  assert "at NUTS's budget" in l2hmc_default._rhat_cell([row])


def test_merge_rows_keeps_the_other_seeds_and_replaces_a_rerun_seed():
  earlier = {"nuts": [dict(value=0), dict(value=1)], "l2hmc": [dict(value=10, seed=0)]}
  later = {"nuts": [dict(value=5, seed=1)], "l2hmc": [dict(value=12, seed=2)]}
  merged = l2hmc_default.merge_rows(earlier, later)
  assert [(row["seed"], row["value"]) for row in merged["nuts"]] == [(0, 0), (1, 5)]
  assert [(row["seed"], row["value"]) for row in merged["l2hmc"]] == [(0, 10), (2, 12)]
