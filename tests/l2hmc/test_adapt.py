"""``l2hmc.adapt``: one call from a log density to a checked sampler, pytree positions, the
warnings of a run that has not converged, bad input, its progress and summary, and the
jitter's exactness."""

import math
import re
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from metaoptax import l2hmc
from metaoptax._src.progress import Bar, Progress

pytestmark = pytest.mark.slow

SD_B = 3.0


def _logdensity(p):
  return -0.5 * jnp.sum(p["w"] ** 2) - 0.5 * (p["b"] / SD_B) ** 2


def _positions(key, chains=32):
  k_w, k_b = jax.random.split(key)
  return {"w": jax.random.normal(k_w, (chains, 2, 2)), "b": jax.random.normal(k_b, (chains,))}


@pytest.fixture(scope="module")
def adapted_and_reports():
  reports = []
  with warnings.catch_warnings():
    warnings.simplefilter("error", l2hmc.ConvergenceWarning)  # a converged run: no warning
    adapted = l2hmc.adapt(_logdensity, progress=reports.append).run(
        jax.random.key(0), _positions(jax.random.key(1)), num_steps=600)
  return adapted, reports


@pytest.fixture(scope="module")
def adapted(adapted_and_reports):
  return adapted_and_reports[0]


def test_adapt_returns_pytree_states_and_a_sampler_that_samples_the_target(adapted):
  (states, sampler), info = adapted
  assert states.position["w"].shape == (32, 2, 2) and states.position["b"].shape == (32,)
  assert states.logdensity_grad["w"].shape == (32, 2, 2)
  assert info.converged and info.messages == () and info.rhat < 1.05
  assert 0.1 < info.acceptance < 0.99 and info.finite == 1.0
  # a Gaussian's log density is finite everywhere: no proposal diverges
  assert info.num_divergent == 0 and info.divergent_rate == 0.0
  assert info.rhat_per_coordinate.shape == (5 + 1,)
  # the sampler's K: the fewest steps of the warm-up's h that reach a quarter period
  h, k = float(info.warmup.step_size), info.config.num_steps
  assert k == l2hmc.trajectory_length.num_steps_for(h) and (k - 1) * h < np.pi / 2 <= k * h
  assert info.training.params.log_step_size_x.shape == (k, 5)  # per step and coordinate
  # a Gaussian's curvature is the same everywhere: no local step sizes, no second warm-up
  assert not info.config.local_step_sizes and info.config.scale_move == 0.0
  # gradients: the warm-up's transitions with WARMUP_NUM_STEPS, the screen's Hessian
  # diagonal, then the training's and the check's transitions with the chosen K
  assert info.num_gradient_evaluations == _gradients(info, 600, 5)
  draws, info = jax.jit(lambda k, s: l2hmc.sample_chains(k, sampler, s, 500))(
      jax.random.key(2), states)
  assert draws["w"].shape == (500, 32, 2, 2) and info.acceptance_rate.shape == (500, 32)
  # N(0, I) and N(0, 3^2): 16,000 draws, autocorrelated; tolerances ~5 Monte Carlo errors
  np.testing.assert_allclose(np.mean(draws["w"]), 0.0, atol=0.08)
  np.testing.assert_allclose(np.std(draws["w"]), 1.0, rtol=0.08)
  np.testing.assert_allclose(np.mean(draws["b"]), 0.0, atol=0.4)
  np.testing.assert_allclose(np.std(draws["b"]), SD_B, rtol=0.12)


def _gradients(info, num_steps, dim):
  """The gradients per chain of a run whose screens chose nothing (a Gaussian): the warm-up's
  transitions of ``WARMUP_NUM_STEPS`` leapfrog steps, window 2's of at most as many
  (``num_leapfrog_steps`` holds a whole number of steps for each), and its
  Hessians, the local scales' screen's Hessian diagonal (``dim`` products), the training's and
  the check's transitions with the sampler's K."""
  defaults = l2hmc.default_adaptation
  warmup, training = (int(num_steps * share) for share in defaults.SHARES[:2])
  found = info.warmup
  assert int(found.num_transitions) >= warmup
  window_2 = int(warmup * l2hmc.adaptation.WINDOWS[1])
  others = int(found.num_transitions) - window_2
  scale_steps, rest = divmod(int(found.num_leapfrog_steps)
                             - others * defaults.WARMUP_NUM_STEPS, window_2)
  assert rest == 0 and 1 <= scale_steps <= defaults.WARMUP_NUM_STEPS
  return (others * defaults.WARMUP_NUM_STEPS + window_2 * scale_steps
          + int(found.num_hessian_evaluations) * dim + dim
          + (num_steps - warmup) * info.config.num_steps)


@pytest.mark.system  # an adaptation (~8 s)
def test_the_adaptation_reports_its_gradients_within_the_budget():
  """A 2-d Gaussian at the default num_steps=1000: info counts every gradient per chain (the
  warm-up, the screen, the training and the check, phase by phase) and the whole adaptation
  costs no more than ChEES-HMC's warm-up on the issue's cheapest targets (2,000 to 8,600)."""
  positions = jax.random.normal(jax.random.key(0), (16, 2))
  with warnings.catch_warnings():
    warnings.simplefilter("error", l2hmc.ConvergenceWarning)
    _, info = l2hmc.adapt(lambda x: -0.5 * jnp.sum((x / jnp.array([1.0, 10.0])) ** 2),
                          progress=None).run(jax.random.key(1), positions)
  assert not info.config.local_step_sizes and not info.config.reflection
  # the check's retries of failed trajectories ((r + 1) K gradients each; the jittered
  # steps near a 2-step quarter period's stability limit fail now and then) come on top,
  # rare on a Gaussian
  assert info.config.retry_divergent == l2hmc.default_adaptation.RETRY_REFINEMENT
  extra = info.num_gradient_evaluations - _gradients(info, 1000, 2)
  assert 0 <= extra <= 0.02 * 200 * info.config.num_steps * (info.config.retry_divergent + 1)
  assert 1_000 <= info.num_gradient_evaluations <= 8_600
  assert f"{info.num_gradient_evaluations:,} per chain" in str(info)


def test_the_sampler_runs_in_blackjax_run_inference_algorithm(adapted):
  blackjax = pytest.importorskip("blackjax")
  (states, sampler), _ = adapted
  one = jax.tree.map(lambda a: a[0], states)
  final, history = blackjax.util.run_inference_algorithm(
      jax.random.key(3), sampler, 20, initial_state=one,
      transform=lambda state, info: (state.position, info.acceptance_rate))
  assert final.position["w"].shape == (2, 2) and history[0]["w"].shape == (20, 2, 2)


def _two_modes(x, sd_high=1.0, weight_high=0.5):
  """Two Gaussian modes 60 apart in 3-d: at +30 with sd ``sd_high`` and weight
  ``weight_high``, at -30 with sd 1. A chain stays in the mode nearest its start."""
  log_high = (jnp.log(weight_high) - 0.5 * jnp.sum(((x - 30.0) / sd_high) ** 2)
              - 3 * jnp.log(sd_high))
  log_low = jnp.log(1.0 - weight_high) - 0.5 * jnp.sum((x + 30.0) ** 2)
  return jax.scipy.special.logsumexp(jnp.stack([log_high, log_low]))


@pytest.mark.system  # an adaptation that cannot converge (~20 s)
def test_chains_that_cannot_agree_warn():
  # modes of sd 0.2 and 1: the reflection maps neither onto the other (mean acceptance
  # ~0.03, below the screen's REFLECTION_ACCEPTANCE), so chains started in each mode never
  # agree (R-hat ~30)
  logdensity_fn = lambda x: _two_modes(x, sd_high=0.2)
  positions = jax.random.normal(jax.random.key(0), (8, 3)) + jnp.repeat(
      jnp.array([30.0, -30.0]), 4)[:, None]
  reports = []
  with pytest.warns(l2hmc.ConvergenceWarning, match="not converged"):
    _, info = l2hmc.adapt(logdensity_fn, progress=reports.append).run(
        jax.random.key(1), positions, num_steps=100)
  assert not info.converged and info.rhat > 2.0 and info.messages
  assert not info.config.reflection
  # the dense warm-up's chains disagree: a diagonal warm-up from the same starts follows it
  phases = [r.label.removeprefix("L2HMC adapt: ") for r in reports]
  assert phases[:4] == ["warm-up"] * 2 + ["warm-up, diagonal"] * 2


@pytest.mark.system  # two adaptations (~30 s); test_reflection.py covers the move in the default tier
def test_modes_that_a_reflection_maps_onto_each_other_get_the_reflection():
  """Two modes of one shape 60 sds apart, of weights 3/4 and 1/4: the warm-up's chains split
  between them (R-hat ~30) and the reflection through their midpoint is accepted with
  probability 1 from the light mode and 1/3 from the heavy one, so adapt warms up again
  with ``reflection=True`` and counts both warm-ups. Its chains then cross between the
  modes and agree, with the modes' weights in their draws (the reflection is a Metropolis
  step). With ``choose_reflection=False`` they stay apart and warn."""
  logdensity_fn = lambda x: _two_modes(x, weight_high=0.75)
  positions = jax.random.normal(jax.random.key(0), (16, 3))
  with warnings.catch_warnings():
    warnings.simplefilter("error", l2hmc.ConvergenceWarning)  # converged: no warning
    (states, sampler), info = l2hmc.adapt(logdensity_fn, progress=None).run(
        jax.random.key(1), positions, num_steps=300)
  assert info.config.reflection and info.converged and info.rhat < 1.05
  # two warm-ups, of at least 120 and 60 transitions of WARMUP_NUM_STEPS steps, the screen's
  # one log p each
  defaults = l2hmc.default_adaptation
  assert info.num_gradient_evaluations >= (
      int(120 * (1 + defaults.SCREEN_WARMUP_SHARE)) * defaults.WARMUP_NUM_STEPS + 1)
  draws, _ = jax.jit(lambda k, s: l2hmc.sample_chains(k, sampler, s, 1000))(
      jax.random.key(2), states)
  in_high = np.asarray(draws[..., 0] > 0.0)
  # 16,000 draws, nearly independent across the modes: the weight within ~5 binomial errors
  np.testing.assert_allclose(in_high.mean(), 0.75, atol=0.02)
  assert np.all(in_high.any(axis=0) & ~in_high.all(axis=0))  # every chain visits both
  with pytest.warns(l2hmc.ConvergenceWarning, match="not converged"):
    _, stuck = l2hmc.adapt(logdensity_fn, progress=None, choose_reflection=False).run(
        jax.random.key(1), positions, num_steps=300)
  assert not stuck.config.reflection and stuck.rhat > 2.0


def test_reflection_acceptance_is_the_metropolis_probability_through_the_midpoint():
  """Closed forms: chains at the two equal modes' centres map exactly onto each other
  (probability 1); on a standard normal, chains at +-1 and one at 3 reflect through the
  midpoint of the groups' means (2 + (-1))/2 = 0.5 each to 1-x: min(1, p(1-x)/p(x))."""
  at_modes = jnp.array([[30.0, 30.0, 30.0], [-30.0, -30.0, -30.0]])
  assert float(l2hmc.default_adaptation.reflection_acceptance(_two_modes, at_modes)) == 1.0
  normal = lambda x: -0.5 * jnp.sum(x**2)
  positions = jnp.array([[1.0], [-1.0], [3.0]])
  expected = np.mean([min(1.0, np.exp(-0.5 * (1 - x) ** 2 + 0.5 * x**2)) for x in (1, -1, 3)])
  np.testing.assert_allclose(
      l2hmc.default_adaptation.reflection_acceptance(normal, positions), expected, rtol=1e-6)


def test_the_warm_up_finds_a_typical_set_far_from_the_starts_before_the_whitening():
  mean, sd = 8.0, 0.5  # 16 posterior sds from the N(0, 1) starts
  logdensity_fn = lambda x: -0.5 * jnp.sum(((x - mean) / sd) ** 2)
  positions = jax.random.normal(jax.random.key(0), (16, 3))
  found = jax.jit(lambda k, x: l2hmc.warmup(k, logdensity_fn, x, num_iterations=200))(
      jax.random.key(1), positions)
  assert float(found.burn_in_rhat) < 1.1  # the burn-in ended with the chains in agreement
  np.testing.assert_allclose(found.whitening.location, mean, atol=0.25 * sd)
  np.testing.assert_allclose(found.whitening.scale, sd, rtol=0.3)
  assert int(found.num_transitions) >= 200


@pytest.mark.system  # a diagonal warm-up each (~9 s)
@pytest.mark.parametrize("dim, rho", [(2, 0.9), (4, 0.6)])
def test_the_diagonal_warm_up_measures_the_widest_whitened_direction(dim, rho):
  """An equicorrelated Gaussian: its correlation matrix's largest eigenvalue is 1 + (dim - 1)
  rho (the closed form; 32 chains x 60 draws, autocorrelated: within 15 %). The dense
  metric whitens the correlations: no measure."""
  covariance = (1 - rho) * np.eye(dim) + rho * np.ones((dim, dim))
  precision = jnp.asarray(np.linalg.inv(covariance), jnp.float32)
  logdensity_fn = lambda x: -0.5 * x @ precision @ x
  positions = jax.random.normal(jax.random.key(0), (32, dim))
  run = jax.jit(lambda k, x, metric: l2hmc.warmup(k, logdensity_fn, x, num_iterations=300,
                                                  metric=metric), static_argnums=2)
  found = run(jax.random.key(1), positions, "diagonal")
  np.testing.assert_allclose(float(found.widest_variance), 1 + (dim - 1) * rho, rtol=0.15)
  assert run(jax.random.key(1), positions, "dense").widest_variance is None


@pytest.mark.system  # an adaptation (~8 s)
def test_the_burn_in_repeats_until_the_chains_agree():
  # the same far target with a burn-in window of 50 transitions: one is not enough (25 left
  # split R-hats over 6-transition sequences that stay near 1.2-1.5 however many windows run,
  # and whether a window went below the first one's was up to XLA's rounding)
  logdensity_fn = lambda x: -0.5 * jnp.sum(((x - 30.0) / 0.5) ** 2)
  positions = jax.random.normal(jax.random.key(0), (16, 3))
  run = jax.jit(lambda k, x, n: l2hmc.warmup(k, logdensity_fn, x, num_iterations=200,
                                             max_burn_in_windows=n), static_argnums=2)
  once, repeated = run(jax.random.key(1), positions, 1), run(jax.random.key(1), positions, 8)
  assert int(once.num_transitions) == 200
  assert int(repeated.num_transitions) > 200
  assert float(repeated.burn_in_rhat) < float(once.burn_in_rhat)


@pytest.mark.system  # ~18 s: three warm-ups compiled; adapt's shorter window 2 runs in the default tier
def test_window_2_counts_its_own_leapfrog_steps_and_the_default_changes_nothing():
  """``warmup(scale_num_steps=k)`` runs window 2 with ``k`` leapfrog steps per transition and
  counts them (burn-in and window 3 with ``num_steps``); ``k = num_steps`` is the default,
  bit for bit, and ``burn_in`` then ``settle`` makes ``warmup``'s transitions."""
  logdensity_fn = lambda x: -0.5 * jnp.sum(x**2)
  positions = jax.random.normal(jax.random.key(0), (8, 3))
  run = jax.jit(lambda k, x, n: l2hmc.warmup(k, logdensity_fn, x, num_steps=5,
                                             num_iterations=40, scale_num_steps=n),
                static_argnums=2)
  default, same, short = (run(jax.random.key(1), positions, n) for n in (None, 5, 2))
  lengths = l2hmc.adaptation._lengths(40)  # 10, 14, 16
  burn_in = int(default.num_transitions) - lengths[1] - lengths[2]
  assert int(default.num_leapfrog_steps) == int(default.num_transitions) * 5
  assert int(short.num_leapfrog_steps) == (burn_in + lengths[2]) * 5 + lengths[1] * 2
  for a, b in zip(jax.tree.leaves(default), jax.tree.leaves(same)):
    np.testing.assert_array_equal(a, b)
  burnt = l2hmc.adaptation.burn_in(jax.random.key(1), logdensity_fn, positions, num_steps=5,
                                   num_iterations=40)
  parts = l2hmc.adaptation.settle(jax.random.key(1), logdensity_fn, burnt, num_steps=5,
                                  num_iterations=40, scale_num_steps=2)
  # the same transitions (float32 chaos apart: jitted whole or in parts, the rounding differs)
  assert int(parts.num_transitions) == int(short.num_transitions)
  assert int(parts.num_leapfrog_steps) == int(short.num_leapfrog_steps)
  np.testing.assert_allclose(parts.step_size, short.step_size, rtol=0.1)
  with pytest.raises(ValueError, match="scale_num_steps"):
    l2hmc.warmup(jax.random.key(1), logdensity_fn, positions, scale_num_steps=0)


@pytest.mark.parametrize("log_h, widest, expected", [
    (np.log(0.9), 1.0, 2),  # ceil((pi / 2) / 0.9)
    (np.log(0.9), 4.0, 4),  # ceil(2 (pi / 2) / 0.9): the widest direction's quarter period
    (np.log(0.2), 1.0, 5),  # ceil((pi / 2) / 0.2) = 8, capped at the burn-in's 5
])
def test_window_2_steps_are_the_burn_ins_quarter_period_at_most_its_k(log_h, widest, expected):
  burnt = l2hmc.adaptation.BurnIn(None, jnp.float32(log_h), None, 1, 1.0, 0, 0,
                                  jnp.float32(widest))
  assert l2hmc.training._settle_num_steps(burnt, 5) == expected


@pytest.mark.parametrize("rhat, log_h, widest, expected", [
    (1.05, np.log(0.01), 1.0, None),  # the chains agree: the burn-in is done
    (2.0, np.log(0.2), 1.0, None),  # ceil((pi / 2) / 0.2) = 8: within MAX_NUM_STEPS
    (2.0, np.log(0.05), 1.0, 32),  # ceil((pi / 2) / 0.05)
    (2.0, np.log(0.05), 4.0, 63),  # ceil(2 (pi / 2) / 0.05): the widest direction's
    (2.0, np.log(0.001), 1.0, 128),  # 1571 steps, capped at LONG_MAX_NUM_STEPS
    (float("inf"), np.log(0.05), 1.0, 32),  # one window that never agreed
])
def test_the_burn_in_lengthens_where_its_chains_disagree_at_a_small_step_size(
    rhat, log_h, widest, expected):
  burnt = l2hmc.adaptation.BurnIn(None, jnp.float32(log_h), None, 4, jnp.float32(rhat), 0, 0,
                                  jnp.float32(widest))
  assert l2hmc.training._lengthened_num_steps(burnt) == expected
  if expected is not None:  # the quarter period of the widest direction, or the cap
    length = math.sqrt(widest) * math.pi / 2
    h = math.exp(log_h)
    assert expected == l2hmc.trajectory_length.LONG_MAX_NUM_STEPS or (
        (expected - 1) * h < length <= expected * h)


@pytest.mark.parametrize("before, after, kept", [
    (22.0, 3.7, True),  # the long trajectories brought the chains together (a sixth)
    (3.0, 1.05, True),  # below CONVERGED_RHAT
    (3.0, 1.6, False),  # a funnel's neck: more than LENGTHENED_RHAT_RATIO of the short R-hat
    (1.5, 1.2, False),  # closer, still apart
])
def test_the_lengthened_burn_in_keeps_its_steps_only_where_it_brought_the_chains_together(
    before, after, kept):
  """The warm-up continues from the lengthened burn-in's chains either way (their gradients
  are spent); its later windows, and so the sampler's cap, keep the long trajectories only
  where the lengthened burn-in's split R-hat fell below the threshold or to at most
  LENGTHENED_RHAT_RATIO of the short one's."""
  def burn_in(rhat, num_steps, windows):
    return l2hmc.adaptation.BurnIn(jnp.float32(windows), jnp.float32(-3.0), None, windows,
                                   jnp.float32(rhat), 0, 100 * windows, jnp.float32(1.0),
                                   num_steps)
  short, lengthened = burn_in(before, 5, 4), burn_in(after, 46, 8)
  burnt, steps = l2hmc.training._kept_lengthening(short, lengthened, 5)
  assert float(burnt.states) == 8 and int(burnt.num_leapfrog_steps) == 800  # its chains, counts
  assert (steps, int(burnt.num_steps)) == ((46, 46) if kept else (5, 5))


@pytest.mark.parametrize("rhats, step_sizes, expected_steps", [
    # each window a quarter period at the step size the one before ended with: 0.11 -> 15,
    # 0.2 -> 8, 0.5 -> 4 (at least the short burn-in's 5); all four windows (the R-hat falls)
    ((5.9, 1.7, 1.3, 1.4), (0.11, 0.2, 0.5, 0.5), [28, 15, 8, 5]),
    # a step size that falls (0.014 -> 113 steps) keeps the first window's 28 at most
    ((5.9, 1.7, 1.3, 1.4), (0.014, 0.2, 0.5, 0.5), [28, 28, 8, 5]),
    ((5.9, 1.05), (0.11, 0.2), [28, 15]),  # the chains agree after the second: it stops there
    ((12.0,), (0.11,), [28]),  # above LENGTHENED_RHAT_RATIO of the short burn-in's 17: one
])
def test_the_lengthened_burn_in_rechooses_its_quarter_period_after_each_window(
    monkeypatch, rhats, step_sizes, expected_steps):
  """The lengthened burn-in's windows each run a quarter period at the step size the window
  before it ended with (the oracle: ceil((pi / 2) / h)), where the step size grows as the
  chains arrive, at most the first window's steps; its stops as before. The windows are
  stand-ins that record their steps."""
  training = l2hmc.training
  log_hs = iter(np.log(step_sizes))
  calls = []

  def jitted(logdensity_fn, num_steps, num_iterations, slopes, scales, metric, windows, jitter):
    assert windows == 1  # one window per call

    def run(burnt, key):
      rhat = rhats[len(calls)]
      calls.append(num_steps)
      return burnt._replace(log_h=jnp.float32(next(log_hs)), rhat=jnp.float32(rhat),
                            num_windows=burnt.num_windows + 1, num_steps=num_steps)

    return run

  monkeypatch.setattr(training, "_jitted_lengthen_burn_in", jitted)
  short = l2hmc.adaptation.BurnIn(None, jnp.float32(np.log(0.057)), None, 4,
                                  jnp.float32(17.3), 0, 2000, jnp.float32(1.0), 5)
  longer = training._lengthened_num_steps(short)
  assert longer == 28  # ceil((pi / 2) / 0.057)
  lengthened = training._lengthen_by_quarter_periods(
      None, short, longer, 5, 400, "squares", "pooled", "dense", 4, 0.5, jax.random.key(0))
  assert calls == expected_steps
  assert int(lengthened.num_windows) == 4 + len(expected_steps)
  for steps, h in zip(expected_steps[1:], step_sizes):
    assert steps == min(28, max(5, math.ceil(math.pi / 2 / h)))


@pytest.mark.parametrize("metric, pooled_rhat, pooled_log_h, expected", [
    # the pooled covariance brought the chains together: no lengthening
    ("dense", 1.05, np.log(0.3), ["burn_in", "pool", "settle 5"]),
    # apart at a large step size (a funnel's neck): no lengthening either
    ("dense", 1.6, np.log(0.3), ["burn_in", "pool", "settle 5"]),
    # apart at a small step size: lengthened from the pooled chains, ceil((pi / 2) / 0.05)
    ("dense", 1.6, np.log(0.05), ["burn_in", "pool", "lengthen 32", "settle 32"]),
    # the diagonal metric lengthens at once (its scales are the chains' spread already)
    ("diagonal", None, None, ["burn_in", "lengthen 28", "settle 28"]),
])
def test_the_dense_burn_in_pools_its_chains_before_it_lengthens(
    monkeypatch, metric, pooled_rhat, pooled_log_h, expected):
  """Where the dense burn-in's Newton metrics leave the chains apart at a small step size
  (a quarter period longer than MAX_NUM_STEPS), the warm-up first continues the burn-in
  with the chains' pooled covariance, and lengthens only where that too leaves them apart
  at a small step size; the diagonal burn-in lengthens directly. Its phases are stand-ins
  that record their order."""
  training = l2hmc.training
  calls = []
  short = l2hmc.adaptation.BurnIn(None, jnp.float32(np.log(0.057)), None, 4,
                                  jnp.float32(17.3), 0, 2000, jnp.float32(1.0), 5)

  def jitted_burn_in(*args):
    return lambda positions, key: calls.append("burn_in") or short

  def jitted_pool(logdensity_fn, num_steps, num_iterations, slopes, jitter):
    assert num_steps == 5  # the short burn-in's steps

    def run(burnt, key):
      calls.append("pool")
      return burnt._replace(log_h=jnp.float32(pooled_log_h), rhat=jnp.float32(pooled_rhat),
                            num_windows=burnt.num_windows + 8)

    return run

  def jitted_lengthen(logdensity_fn, num_steps, num_iterations, slopes, scales, metric, windows,
                      jitter):
    def run(burnt, key):
      calls.append(f"lengthen {num_steps}")
      return burnt._replace(rhat=jnp.float32(1.05), num_steps=num_steps)

    return run

  def jitted_settle(logdensity_fn, num_steps, *args):
    return lambda burnt, key: calls.append(f"settle {num_steps}")

  monkeypatch.setattr(training, "_jitted_burn_in", jitted_burn_in)
  monkeypatch.setattr(training, "_jitted_pool_burn_in", jitted_pool)
  monkeypatch.setattr(training, "_jitted_lengthen_burn_in", jitted_lengthen)
  monkeypatch.setattr(training, "_jitted_settle", jitted_settle)
  training._jitted_warmup(None, 5, 400, 0.1, metric=metric, shorten=False, lengthen=True)(
      jnp.zeros((4, 2)), jax.random.key(0))
  assert calls == expected


@pytest.mark.parametrize("seed", [0, 1])
def test_the_pooled_covariance_brings_together_chains_that_newton_metrics_leave_apart(seed):
  """A quartic well, log p = -(x - 3)^4 / 4 per coordinate: a chain's Newton metric (the
  inverse of its curvature 3 (x - 3)^2) is wide where the curvature vanishes, near the mode,
  and one step size must suit every chain's; a dense burn-in window leaves 16 chains apart.
  From there, at most four windows with the chains' pooled covariance (pool_burn_in, the
  first with the Newton metrics) bring them together at a step size over twice that of four
  with the Newton metrics (lengthen_burn_in at the same steps). Its counts add to the
  burn-in's, and the warm-up counts no Hessian for its pooled windows, nor for window 2, which
  moves with the pooled whitening."""
  adaptation = l2hmc.adaptation
  logdensity_fn = lambda x: -0.25 * jnp.sum((x - 3.0) ** 4)
  positions = jax.random.uniform(jax.random.key(seed), (16, 4), minval=-2.0, maxval=2.0)
  burnt = jax.jit(lambda k, x: adaptation.burn_in(
      k, logdensity_fn, x, num_steps=5, num_iterations=200, metric="dense",
      max_burn_in_windows=1))(jax.random.key(1), positions)
  assert not float(burnt.rhat) < adaptation.CONVERGED_RHAT
  pooled = jax.jit(lambda b, k: adaptation.pool_burn_in(
      k, logdensity_fn, b, num_steps=5, num_iterations=200, max_burn_in_windows=4))(
          burnt, jax.random.key(2))
  newton = jax.jit(lambda b, k: adaptation.lengthen_burn_in(
      k, logdensity_fn, b, num_steps=5, num_iterations=200, metric="dense",
      max_burn_in_windows=4))(burnt, jax.random.key(2))
  assert float(pooled.rhat) < adaptation.CONVERGED_RHAT
  assert float(pooled.log_h) > float(newton.log_h) + np.log(2.0)
  windows = int(pooled.num_windows) - int(burnt.num_windows)
  assert 1 < windows <= 4 and int(pooled.num_steps) == 5
  assert int(pooled.num_leapfrog_steps) == (
      int(burnt.num_leapfrog_steps) + windows * adaptation._lengths(200)[0] * 5)
  assert pooled.whitening.cholesky is not None  # its last window's dense whitening
  # a Newton metric per window but the pooled ones (the first's is); window 2 moves with the
  # pooled whitening (none for it)
  assert int(pooled.num_pooled_windows) == windows - 1
  found = jax.jit(lambda b, k: adaptation.settle(
      k, logdensity_fn, b, num_steps=5, num_iterations=200, metric="dense"))(
          pooled, jax.random.key(3))
  assert int(found.num_hessian_evaluations) == int(pooled.num_windows) - (windows - 1)


def _far_gaussian_after_one_window():
  """A Gaussian of sd 0.5 centred 60 sds from 16 chains' starts, and one burn-in window of
  single leapfrog steps from them (which leaves the chains apart)."""
  logdensity_fn = lambda x: -0.5 * jnp.sum(((x - 30.0) / 0.5) ** 2)
  positions = jax.random.normal(jax.random.key(0), (16, 3))
  burnt = jax.jit(lambda k, x: l2hmc.adaptation.burn_in(
      k, logdensity_fn, x, num_steps=1, num_iterations=200, max_burn_in_windows=1))(
          jax.random.key(1), positions)
  return logdensity_fn, burnt


@pytest.mark.system  # two burn-ins compiled (~10 s)
def test_lengthen_burn_in_continues_the_burn_in_and_adds_its_counts():
  """One window of single leapfrog steps leaves chains started 60 sds away apart; the
  continuation with 8 steps per transition brings them together, its windows, leapfrog steps
  and divergences added to the first's, from its chains and step size."""
  logdensity_fn, burnt = _far_gaussian_after_one_window()
  adaptation = l2hmc.adaptation
  length = adaptation._lengths(200)[0]
  assert int(burnt.num_windows) == 1 and not float(burnt.rhat) < 1.1
  assert int(burnt.num_leapfrog_steps) == length and int(burnt.num_steps) == 1
  longer = jax.jit(lambda b, k: adaptation.lengthen_burn_in(
      k, logdensity_fn, b, num_steps=8, num_iterations=200, max_burn_in_windows=6))(
          burnt, jax.random.key(2))
  windows = int(longer.num_windows)
  assert 1 < windows <= 7 and float(longer.rhat) < 1.1
  assert int(longer.num_leapfrog_steps) == length + (windows - 1) * length * 8
  assert int(longer.num_steps) == 8 and int(longer.num_divergent) >= int(burnt.num_divergent)
  np.testing.assert_allclose(jnp.mean(longer.states.position, 0), 30.0, atol=0.25)
  with pytest.raises(AssertionError):  # without the continuation the chains are still apart
    np.testing.assert_allclose(jnp.mean(burnt.states.position, 0), 30.0, atol=0.25)


@pytest.mark.system  # two burn-ins compiled (~10 s)
def test_lengthen_burn_in_stops_after_a_window_that_does_not_bring_the_chains_together():
  """Single leapfrog steps leave chains started 60 sds away apart: with max_rhat_ratio the
  continuation stops after its first window (its R-hat above the ratio times the burn-in's),
  without it runs all of max_burn_in_windows; a ratio <= 0 is refused."""
  logdensity_fn, burnt = _far_gaussian_after_one_window()
  adaptation = l2hmc.adaptation
  assert not float(burnt.rhat) < 1.1
  for ratio, windows in [(1e-3, 2), (None, 4)]:
    longer = jax.jit(lambda b, k, ratio=ratio: adaptation.lengthen_burn_in(
        k, logdensity_fn, b, num_steps=1, num_iterations=200, max_burn_in_windows=3,
        max_rhat_ratio=ratio))(burnt, jax.random.key(2))
    assert int(longer.num_windows) == windows and not float(longer.rhat) < 1.1
  with pytest.raises(ValueError, match="max_rhat_ratio"):
    adaptation.lengthen_burn_in(jax.random.key(2), logdensity_fn, burnt, num_steps=1,
                                max_rhat_ratio=0.0)


@pytest.mark.system  # warm-ups at several K compiled (~1 min)
@pytest.mark.parametrize("rho, lengthened", [(0.9995, True), (0.0, False)])
def test_a_warm_up_that_lengthens_its_burn_in_raises_the_sampler_s_cap(rho, lengthened):
  """A 2-d Gaussian of correlation 0.9995 under the diagonal metric: the step size follows
  the narrow direction (sd 0.02), five steps random-walk along the long one, the burn-in's
  chains stay apart, and it lengthens; the sampler's K then exceeds MAX_NUM_STEPS (the quarter
  period of the widest whitened direction). Uncorrelated, nothing changes: K <= 16."""
  covariance = np.array([[1.0, rho], [rho, 1.0]])
  precision = jnp.asarray(np.linalg.inv(covariance), jnp.float32)
  target = l2hmc.Target("correlated", 2, lambda x: -0.5 * x @ precision @ x)
  training = l2hmc.training.TrainingConfig(num_chains=16, warmup_iterations=200,
                                           metric="diagonal")
  _, found, config = l2hmc.training._initial_state(
      jax.random.key(0), target, l2hmc.L2HMCConfig(dim=2, num_steps=5), training, None,
      jax.random.normal(jax.random.key(1), (16, 2)), True)
  cap = l2hmc.trajectory_length.MAX_NUM_STEPS
  if lengthened:
    assert 5 < int(found.num_steps) <= l2hmc.trajectory_length.LONG_MAX_NUM_STEPS
    assert cap < config.num_steps <= l2hmc.trajectory_length.LONG_MAX_NUM_STEPS
    assert config.num_steps == l2hmc.trajectory_length.num_steps_for(
        found.step_size, l2hmc.trajectory_length.LONG_MAX_NUM_STEPS,
        widest_variance=found.widest_variance)
  else:
    assert int(found.num_steps) == 5 and config.num_steps <= cap


def test_adapt_draws_window_2_at_the_burn_ins_quarter_period(adapted):
  """A standard normal's burn-in step size is near 1: window 2 makes fewer leapfrog steps
  than the warm-up's other transitions (removing adapt's rule makes them equal)."""
  _, info = adapted
  found = info.warmup
  assert int(found.num_leapfrog_steps) < (int(found.num_transitions)
                                         * l2hmc.default_adaptation.WARMUP_NUM_STEPS)


@pytest.mark.parametrize("bad, match", [
    (dict(num_steps=50), "num_steps"),
    (dict(num_steps=True), "num_steps"),
    (dict(positions={"a": jnp.zeros((4, 2)), "b": jnp.zeros((3,))}), "lack the axis of chains"),
    (dict(positions=jnp.zeros((1, 2))), "at least 2 chains"),
    (dict(positions={"a": jnp.zeros(())}), "leading axis"),
    # one position with no chain axis: an error, never 3 chains of a scalar
    (dict(positions=jnp.zeros((3,))), r"shape \(3,\).*\(num_chains, dim\).*\(num_chains, 1\)"),
])
def test_bad_input_raises_at_run(bad, match):
  kwargs = {"positions": jnp.zeros((4, 2)), "num_steps": 100, **bad}
  with pytest.raises(ValueError, match=match):
    l2hmc.adapt(lambda x: -jnp.sum(x**2), progress=None).run(jax.random.key(0), **kwargs)


@pytest.mark.parametrize("kwargs, match", [
    (dict(max_rhat=1.0), "max_rhat"), (dict(min_acceptance=0.5, max_acceptance=0.4),
                                       "acceptance")])
def test_bad_settings_raise_at_construction(kwargs, match):
  with pytest.raises(ValueError, match=match):
    l2hmc.adapt(lambda x: -jnp.sum(x**2), **kwargs)


def test_jitter_must_be_in_zero_one():
  with pytest.raises(ValueError, match="jitter"):
    l2hmc.init_params(jax.random.key(0), l2hmc.L2HMCConfig(dim=2, jitter=1.0))


def test_a_jittered_proposal_is_the_proposal_with_scaled_step_sizes():
  # the jitter u multiplies every step size: propose(step_scale=u) equals propose with
  # log step sizes + log u (rtol 1e-6, float32)
  config = l2hmc.L2HMCConfig(dim=3, num_steps=4)
  params = l2hmc.init_params(jax.random.key(0), config, step_size=jnp.asarray([0.2, 0.3, 0.4]))
  masks = l2hmc.make_masks(jax.random.key(1), config)
  logdensity_fn = lambda x: -0.5 * jnp.sum(x**2 * jnp.arange(1.0, 4.0))
  state = l2hmc.init(jnp.asarray([0.3, -0.2, 0.5]), logdensity_fn)
  momentum = jnp.asarray([0.1, 0.7, -0.4])
  u = 1.37
  scaled = params._replace(log_step_size_x=params.log_step_size_x + jnp.log(u),
                           log_step_size_v=params.log_step_size_v + jnp.log(u))
  for direction in (1, -1):
    jittered = l2hmc.propose(config, params, masks, logdensity_fn, state, momentum, direction,
                             step_scale=jnp.asarray(u))
    expected = l2hmc.propose(config, scaled, masks, logdensity_fn, state, momentum, direction)
    np.testing.assert_allclose(jittered[0].position, expected[0].position, rtol=1e-6)
    np.testing.assert_allclose(jittered[1], expected[1], rtol=1e-6)


def test_the_jittered_kernel_draws_its_scales_in_range():
  config = l2hmc.L2HMCConfig(dim=2, jitter=0.5)
  u = l2hmc.draw_step_scale(jax.random.key(0), config, (10_000,))
  assert 0.5 <= float(u.min()) < 0.52 and 1.48 < float(u.max()) <= 1.5
  assert l2hmc.draw_step_scale(jax.random.key(0), config._replace(jitter=0.0)) is None


@pytest.mark.system  # an adaptation (~12 s)
def test_choose_num_steps_false_keeps_the_configured_number_of_steps():
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", l2hmc.ConvergenceWarning)
    (_, _), info = l2hmc.adapt(_logdensity, l2hmc.L2HMCConfig(num_steps=7), progress=None,
                               choose_num_steps=False).run(
                                   jax.random.key(0), _positions(jax.random.key(1), 8),
                                   num_steps=100)
  assert info.config.num_steps == 7 and info.training.params.log_step_size_x.shape == (7, 5)


@pytest.mark.system  # ~25 s; test_local_step_sizes.py covers the screen in the default tier
def test_a_funnel_gets_local_step_sizes_and_a_scale_move():
  """Neal's funnel (4-d), the non-centering's screen off: the scale of x_i is e^{v/2}, so
  the screen after the warm-up finds varying curvatures and adapt warms up again for
  position-dependent step sizes, counting both warm-ups' gradients; the sampler has them,
  with the scale move."""
  target = l2hmc.posteriors.neals_funnel(dim=4)
  positions = jax.random.normal(jax.random.key(0), (32, 4))
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", l2hmc.ConvergenceWarning)
    (states, sampler), info = l2hmc.adapt(target.logdensity_fn, progress=None,
                                          choose_noncentering=False).run(
        jax.random.key(1), positions, num_steps=400)
  assert info.config.local_step_sizes
  assert info.config.scale_move == l2hmc.default_adaptation.LOCAL_SCALE_MOVE
  assert info.training.params.local is not None
  assert np.any(np.asarray(info.training.params.local.exponent) != 0)
  # two warm-ups, of at least 160 and 80 transitions of WARMUP_NUM_STEPS steps
  defaults = l2hmc.default_adaptation
  assert info.num_gradient_evaluations >= (
      int(160 * (1 + defaults.SCREEN_WARMUP_SHARE)) * defaults.WARMUP_NUM_STEPS)
  draws, _ = jax.jit(lambda k, s: l2hmc.sample_chains(k, sampler, s, 50))(
      jax.random.key(2), states)
  assert np.all(np.isfinite(np.asarray(draws)))


@pytest.mark.system  # an adaptation at 300 coordinates (~13 s)
def test_no_screen_above_local_max_dim():
  """A funnel of LOCAL_MAX_DIM + 1 coordinates: no Hessian diagonals (dim^2 products per
  chain), so no local step sizes, and no screen's gradients in the count (the reflection's
  screen, off here, would add one log p where the chains disagree; the retry, off here,
  (r + 1) K where the check retries a trajectory)."""
  dim = l2hmc.default_adaptation.LOCAL_MAX_DIM + 1
  target = l2hmc.posteriors.neals_funnel(dim=dim)
  positions = jax.random.normal(jax.random.key(0), (4, dim))
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", l2hmc.ConvergenceWarning)
    _, info = l2hmc.adapt(target.logdensity_fn, progress=None, choose_reflection=False,
                          choose_retry=False).run(jax.random.key(1), positions, num_steps=100)
  assert not info.config.local_step_sizes
  found = info.warmup
  k = info.config.num_steps
  assert info.num_gradient_evaluations == (int(found.num_transitions)
                                           * l2hmc.default_adaptation.WARMUP_NUM_STEPS
                                           + int(found.num_hessian_evaluations) * dim
                                           + (40 + 20) * k)


@pytest.mark.system  # an adaptation (~13 s)
def test_choose_local_step_sizes_false_keeps_the_config():
  target = l2hmc.posteriors.neals_funnel(dim=4)
  positions = jax.random.normal(jax.random.key(0), (8, 4))
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", l2hmc.ConvergenceWarning)
    _, info = l2hmc.adapt(target.logdensity_fn, progress=None,
                          choose_local_step_sizes=False).run(jax.random.key(1), positions,
                                                              num_steps=100)
  assert not info.config.local_step_sizes and info.training.params.local is None


def test_sd_monte_carlo_error_of_iid_gaussian_draws_is_the_closed_form():
  """iid N(0, 1) draws: the relative standard error of the sd is 1/sqrt(2n) (delta method,
  Var(x^2) = 2); within 10 % (the ESS of iid squares has a few % of noise)."""
  draws = np.asarray(jax.random.normal(jax.random.key(0), (500, 8, 3)), np.float64)
  error = l2hmc.default_adaptation._sd_monte_carlo_error(draws)
  np.testing.assert_allclose(error, 1.0 / np.sqrt(2 * 500 * 8), rtol=0.1)


def test_heavy_tails_warn_that_the_spread_is_poorly_determined():
  """iid Student-t draws with 2.1 degrees of freedom (finite variance, infinite fourth
  moment) as the check's draws: R-hat and acceptance pass, but the sd's Monte Carlo error is
  large (0.34 at this key; Gaussian draws of the same shape: 0.013) and the check says so.
  This test fails if that warning is removed."""
  draws = jnp.concatenate([jax.random.t(jax.random.key(2), 2.1, (200, 16, 3)),
                           jax.random.normal(jax.random.key(3), (200, 16, 1))], axis=-1)
  acceptance = jnp.full((200, 16), 0.7)
  with pytest.warns(l2hmc.ConvergenceWarning, match="spread is poorly determined"):
    info = l2hmc.default_adaptation._diagnose(draws, acceptance, 1.05, 0.1, 0.99, 0, None,
                                              None, 1000, None, 0.1)
  assert not info.converged and len(info.messages) == 1 and info.sd_error > 0.3
  gaussian = jax.random.normal(jax.random.key(2), (200, 16, 4))
  with warnings.catch_warnings():
    warnings.simplefilter("error", l2hmc.ConvergenceWarning)
    info = l2hmc.default_adaptation._diagnose(gaussian, acceptance, 1.05, 0.1, 0.99, 0, None,
                                              None, 1000, None, 0.1)
  assert info.converged and info.sd_error < 0.02


@pytest.mark.system  # an adaptation at 503 coordinates (~5 s)
def test_the_finite_fraction_of_many_finite_draws_is_exactly_one():
  """The check's draws of 4 chains at 503 coordinates (200 x 4 x 504 entries, every one
  finite): the fraction of finite entries is 1 exactly and nothing warns (float32's mean of
  these ones is 1 - 6e-8 with jax 0.10 on a CPU, as of 32 chains', which warned that some were not finite). One NaN
  among them is counted and warns. This test fails if the count goes back to float32."""
  draws = jnp.zeros((200, 4, 504))
  acceptance = jnp.full((200, 4), 0.7)
  diagnose = lambda d: l2hmc.default_adaptation._diagnose(d, acceptance, 1.05, 0.1, 0.99, 0,
                                                          None, None, 1000, None, 0.1)
  with warnings.catch_warnings():
    warnings.simplefilter("error", l2hmc.ConvergenceWarning)
    info = diagnose(draws + jax.random.normal(jax.random.key(0), draws.shape))
  assert info.finite == 1.0 and info.converged
  with pytest.warns(l2hmc.ConvergenceWarning, match="not finite"):
    info = diagnose(draws.at[5, 3, 7].set(jnp.nan))
  assert info.finite == 1.0 - 1.0 / draws.size


@pytest.mark.system  # two warm-ups, the training and the check (~16 s)
def test_a_log_density_that_is_nan_on_part_of_the_posterior_warns_of_divergent_proposals(
    capsys):
  """The issue's case: a 3-d standard normal whose log density is NaN where x0 > 1.5 (7 % of
  its mass). Every proposal there is rejected, so the chains sample the truncated Gaussian
  and R-hat, acceptance and finiteness all pass; the divergent proposals are counted in the
  warm-up, the training and the check, and their rate in the check (several %) warns. This
  test fails if that warning is removed. ``progress=None`` prints nothing."""
  logdensity_fn = lambda x: jnp.where(x[0] > 1.5, jnp.nan, -0.5 * jnp.sum(x**2))
  positions = jnp.minimum(jax.random.normal(jax.random.key(0), (8, 3)), 1.4)
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always", l2hmc.ConvergenceWarning)
    _, info = l2hmc.adapt(logdensity_fn, progress=None).run(jax.random.key(1), positions,
                                                            num_steps=200)
  assert capsys.readouterr() == ("", "")
  assert not info.converged and info.finite == 1.0
  assert info.divergent_rate > l2hmc.default_adaptation.MAX_DIVERGENT_RATE
  warned = [str(w.message) for w in caught if w.category is l2hmc.ConvergenceWarning]
  assert any(re.match(r"\d+ of the check's 320 proposals .* diverged", m) for m in warned)
  assert warned == list(info.messages)
  # the count adds the warm-ups', the training's and the check's: the dense warm-up's chains
  # (8, 80 transitions) do not agree, so a diagonal warm-up follows it, and both count
  warmup, training = int(info.warmup.num_divergent), info.training.num_divergent
  check = round(info.divergent_rate * 40 * 8)  # 20 % of 200 transitions, 8 chains
  assert warmup > 0 and training > 0 and check > 0
  assert info.num_divergent > warmup + training + check
  assert "divergent" in repr(info) and "warning:" in repr(info)
  # the check's retries (RETRY_REFINEMENT) could not stand in for its divergent trajectories:
  # the sampler returned retries with DIVERGENT_RETRY_REFINEMENT times smaller steps
  defaults = l2hmc.default_adaptation
  assert defaults.DIVERGENT_RETRY_REFINEMENT > defaults.RETRY_REFINEMENT
  assert info.config.retry_divergent == defaults.DIVERGENT_RETRY_REFINEMENT


def test_a_higher_max_divergent_rate_accepts_them():
  with pytest.raises(ValueError, match="max_divergent_rate"):
    l2hmc.adapt(lambda x: -jnp.sum(x**2), max_divergent_rate=1.5)
  # the check itself, on draws that pass every other check
  draws = jax.random.normal(jax.random.key(2), (200, 16, 4))
  acceptance = jnp.full((200, 16), 0.7)
  diagnose = lambda divergent, rate: l2hmc.default_adaptation._diagnose(
      draws, acceptance, 1.05, 0.1, 0.99, 0, None, None, 1000, None, 0.1, divergent,
      divergent, rate, jnp.array([2.0, 0.0, 1.0]))
  with pytest.warns(l2hmc.ConvergenceWarning, match=r"32 of the check's 3200 proposals"):
    info = diagnose(32, 1e-3)
  assert not info.converged and info.divergent_rate == 0.01 and "[2., 0., 1.]" in (
      info.messages[0])
  with warnings.catch_warnings():
    warnings.simplefilter("error", l2hmc.ConvergenceWarning)
    assert diagnose(32, 0.05).converged and diagnose(3, 1e-3).converged


def broken_model(x):
  """NaN at every position."""
  return jnp.nan * jnp.sum(x)


@pytest.mark.parametrize("logdensity_fn, positions, match", [
    # not finite anywhere: every start fails; three listed, by index and position
    (broken_model, jnp.arange(8.0).reshape(4, 2),
     r"broken_model .* 4 of the 4 chains .* chain 0 at \[0., 1.\]: log p = nan; chain 1 .* "
     r"chain 2 .*\(and 1 more\)"),
    # -inf outside the support x0 > 0, where two of the starts are: those two, and only them
    (lambda x: jnp.where(x[0] > 0, -jnp.sum(x**2), -jnp.inf),
     jnp.array([[1.0, 0.0], [-1.0, 2.0], [2.0, 0.0], [-3.0, 0.0]]),
     r"<lambda> .* 2 of the 4 chains .*: chain 1 at \[-1.,  2.\]: log p = -inf; "
     r"chain 3 at \[-3.,  0.\]: log p = -inf\. Start every chain"),
    # a finite log density whose gradient is not (sqrt at 0 for x0 <= 1)
    (lambda x: jnp.sqrt(jnp.maximum(x[0] - 1.0, 0.0)) - jnp.sum(x**2),
     jnp.array([[2.0, 0.0], [0.5, 0.0]]), r"1 of the 2 chains .* chain 1 .* gradient not finite"),
    (lambda x: -0.5 * x**2, jnp.zeros((4, 2)), r"must return a scalar .* shape \(2,\)"),
    # a pytree whose one leaf is (chains,): chains of a scalar, past the axis check
    (lambda p: jnp.log(p["x"]), {"x": jnp.array([1.0, -1.0, 2.0])},
     r"1 of the 3 chains .* chain 1 at \[-1.\]: log p = nan"),
])
def test_starts_where_the_log_density_is_not_finite_raise_before_sampling(
    logdensity_fn, positions, match):
  with pytest.raises(ValueError, match=match):
    l2hmc.adapt(logdensity_fn, progress=None).run(jax.random.key(0), positions, num_steps=100)


def test_progress_covers_the_warm_up_the_screens_the_training_and_the_check(
    adapted_and_reports):
  (_, _), info = adapted_and_reports[0]
  reports = adapted_and_reports[1]
  phases = [r.label.removeprefix("L2HMC adapt: ") for r in reports]
  assert all(r.label.startswith("L2HMC adapt: ") for r in reports)
  # each phase in order: the warm-up (at its start, then its end), the three screens (no
  # second warm-up on a Gaussian), the training (every tenth of it), the check
  assert phases[:2] == ["warm-up", "warm-up"]
  assert phases[2:8] == (["screen for modes"] * 2 + ["screen for a non-centering"] * 2
                         + ["screen for local scales"] * 2)
  assert phases[8:-2] == ["training"] * 10 and phases[-2:] == ["check", "check"]
  done = [r.iteration for r in reports]
  assert done == sorted(done) and done[0] == 0
  warmup = int(info.warmup.num_transitions)
  assert done[1] == warmup and done[-1] == reports[-1].num_iterations == warmup + 240 + 120
  assert math.isnan(reports[1].loss) and not math.isnan(reports[-3].loss)
  assert reports[1].metrics["divergent"] == 0 and "acceptance" in reports[-3].metrics
  assert "L2HMC adapt: training" in str(reports[-3]) and "loss" not in str(reports[1])


def test_the_bar_follows_the_phases(capsys):
  bar = Bar("L2HMC adapt: warm-up", 0, 100)
  bar(Progress("L2HMC adapt: warm-up", 0, 100, math.nan, 0, 0.0, {}))
  bar(Progress("L2HMC adapt: training", 70, 120, 1.5, 0, 10.0, {"acceptance": 0.8}))
  bar.close()
  shown = capsys.readouterr().err.split("\r")
  assert any("L2HMC adapt: warm-up" in line and "0/100" in line and "loss" not in line
             for line in shown)
  assert any("L2HMC adapt: training" in line and "70/120" in line and "loss=1.5" in line
             for line in shown)


def test_info_prints_as_a_short_summary(adapted):
  _, info = adapted
  text = str(info)
  assert text == repr(info) and len(text.splitlines()) <= 10 and len(text) < 800
  for part in ("converged", "split R-hat", "acceptance", "divergent", "sd error",
               "gradients", f"K = {info.config.num_steps}", "screens chose nothing"):
    assert part in text
  assert "warning" not in text
