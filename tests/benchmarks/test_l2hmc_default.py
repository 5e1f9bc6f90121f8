"""``l2hmc_default``'s verdicts: a run off the reference at 1,000 draws is checked again at
NUTS's gradient budget, and only a run off there without a warning is silently wrong."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

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


def test_reused_anchor_rows_are_taken_per_seed_and_a_missing_seed_is_run(monkeypatch):
  problem = l2hmc_default.Problem("gaussian", lambda x: -0.5 * jnp.sum(x**2),
                                  lambda key, chains: jnp.zeros((chains, 2)), None, {}, {})
  ran = []
  monkeypatch.setattr(l2hmc_default.sampler_baselines, "anchor",
                      lambda name, *args: ran.append(name) or name)
  monkeypatch.setattr(l2hmc_default, "score", lambda problem, run: dict(value=run))
  stored = {"nuts": [dict(value="stored", seed=0)], "chees": [dict(value="stored", seed=0)]}
  rows = l2hmc_default.run_target(problem, [0], 10, 10, 10, 10, baselines=stored,
                                  samplers=("nuts", "chees"))
  assert not ran and rows["nuts"] == [dict(value="stored", seed=0)]
  rows = l2hmc_default.run_target(problem, [1], 10, 10, 10, 10, baselines=stored,
                                  samplers=("nuts", "chees"))
  assert ran == ["nuts", "chees"]
  assert rows["nuts"] == [dict(value="nuts", seed=1)]


def test_rows_carry_their_commits_and_reports_list_the_suite_in_order():
  legacy = {"b_target": {"l2hmc": [dict(v=1)], "nuts": [dict(v=2, commit="old")],
                         "chees": [dict(v=3)], "baseline_commit": "base"}}
  rows = l2hmc_default.with_row_commits(legacy, "file")["b_target"]
  assert "baseline_commit" not in rows
  assert [rows[k][0]["commit"] for k in ("l2hmc", "nuts", "chees")] == ["file", "old", "base"]
  names = l2hmc_default.suite_names("eight")
  results = {names[2]: {"nuts": [], "l2hmc": []}, "extra": {}, names[0]: {}}
  ordered = l2hmc_default.ordered(results, "eight")
  assert list(ordered) == [names[0], names[2], "extra"]
  assert list(ordered[names[2]]) == ["l2hmc", "nuts"]
  assert l2hmc_default._commits({"t": {"nuts": [dict(commit="x")], "l2hmc": [dict(commit="y")]}},
                                "y") == "`x`: t/nuts"


def _scipy_horseshoe_centered(theta, features, y):
  """The centered horseshoe's log density in float64 from scipy's densities (an oracle
  written apart from the script's): half-Cauchy and half-normal scales with the log
  Jacobian, normal coefficients and likelihood."""
  from scipy import stats  # pylint: disable=g-import-not-at-top
  p = features.shape[1]
  alpha, log_sigma, log_tau = theta[:3]
  log_lambda, beta = theta[3:3 + p], theta[3 + p:]
  sigma, tau, lam = np.exp(log_sigma), np.exp(log_tau), np.exp(log_lambda)
  return (stats.norm.logpdf(alpha, scale=5.0) + stats.halfnorm.logpdf(sigma) + log_sigma
          + stats.halfcauchy.logpdf(tau) + log_tau
          + np.sum(stats.halfcauchy.logpdf(lam) + log_lambda)
          + np.sum(stats.norm.logpdf(beta, scale=tau * lam))
          + np.sum(stats.norm.logpdf(y, alpha + features @ beta, sigma)))


@pytest.mark.system  # ~6 s of float64 compilation
def test_the_horseshoes_log_densities_match_scipys_and_each_other():
  """The centered horseshoe against scipy's densities in float64, and the non-centered one
  against the centered through the change of variables beta = z tau lambda: log p_nc(theta)
  = log p_c(beta(theta)) + sum_j (log tau + log lambda_j), up to one constant (scipy's
  half-normal has the log 2 the script drops). Differences between 8 points (float32
  model; scales within exp(+-3)) agree within 2e-3 absolute (log densities of a few
  hundred)."""
  centered, dim = l2hmc_default.horseshoe_regression_centered()
  noncentered, _ = l2hmc_default.horseshoe_regression()
  features, y = (np.asarray(a, np.float64) for a in l2hmc_default._horseshoe_data(100, 50))
  rng = np.random.default_rng(0)
  thetas = rng.uniform(-1.0, 1.0, (8, dim))
  thetas[:, 2] -= 2.0  # tau near its posterior's (e^-3.5 .. e^-1.5)
  mine = np.asarray(jax.vmap(centered)(jnp.asarray(thetas, jnp.float32)), np.float64)
  oracle = np.array([_scipy_horseshoe_centered(t, features, y) for t in thetas])
  np.testing.assert_allclose(mine - mine[0], oracle - oracle[0], atol=2e-3)
  z = thetas[:, 53:]
  as_centered = thetas.copy()
  as_centered[:, 53:] = z * np.exp(thetas[:, 2:3] + thetas[:, 3:53])
  jacobian = 50 * thetas[:, 2] + np.sum(thetas[:, 3:53], axis=1)
  mine_nc = np.asarray(jax.vmap(noncentered)(jnp.asarray(thetas, jnp.float32)), np.float64)
  via_centered = np.array([_scipy_horseshoe_centered(t, features, y)
                           for t in as_centered]) + jacobian
  np.testing.assert_allclose(mine_nc - mine_nc[0], via_centered - via_centered[0], atol=2e-3)
  # softplus keeps the half-Cauchy's gradient finite far out (log1p(exp(2u)) overflows)
  far = jnp.zeros(dim).at[3].set(60.0)
  assert np.all(np.isfinite(jax.grad(noncentered)(far)))


def test_posteriordb_halves_run_every_anchor_and_lead_with_the_headline_against_each():
  for suite in ("tuning", "held_out", "tuningfork_tuning"):
    assert l2hmc_default.default_samplers(suite) == l2hmc_default.SAMPLERS_TUNINGFORK
  assert l2hmc_default.default_samplers("scale") == l2hmc_default.SAMPLERS_SCALE

  def row(headline, gate):
    return dict(min_bulk_ess_per_grad=headline, total_grads_per_chain=1e4, gate=gate,
                max_rank_rhat=1.001, min_bulk_ess=500.0, divergences=0, warmup_grads=1e3,
                mean_error=0.01, sd_error=0.01, ess_per_grad_x=0.1, ess_per_grad_x2=0.1,
                seconds_per_ess_x=1.0, rhat_x=1.001, rhat_x2=1.001, warned=False,
                silently_wrong=False, seed=0)

  # the best anchor passing the gate is nuts_dense (0.04); chees_diag is faster but fails it
  headlines = dict(l2hmc=0.08, nuts=0.02, nuts_dense=0.04, nuts_low_rank=0.03,
                   chees_diag=0.5, mclmc_adjusted=0.01)
  results = {"arK-arK": {k: [row(v, k != "chees_diag")] for k, v in headlines.items()}}
  settings = dict(chains=32, num_steps=10, nuts_warmup=10, chees_warmup=10, samples=10, seeds=1)
  lines = l2hmc_default.report(results, "tuning", "abc", settings)
  headline_rows = lines[:lines.index("## Details")]
  cells = {line.split(" | ")[1]: line.split(" | ") for line in headline_rows
           if line.startswith("| arK-arK")}
  assert list(cells) == list(l2hmc_default.SAMPLERS_TUNINGFORK)
  assert cells["l2hmc"][11:13] == ["2.00", "4.00"]  # × best passing anchor, × NUTS (diagonal)
  assert cells["chees_diag"][3] == "0/1"
