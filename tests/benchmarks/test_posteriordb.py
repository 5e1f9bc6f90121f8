"""``benchmarks/_posteriordb.py``: the suite loads, its densities are finite where Stan starts,
``constrain`` names what the reference names, and the mathematics against independent oracles.

Oracles: kidiq's unconstrained log density written out by hand in float64 numpy (the
residuals summed directly, not through the least-squares identity the module uses); every
transform's log-Jacobian against ``log|det jax.jacfwd|`` of the transform in float64. The
whole check (NUTS against the reference moments) is ``benchmarks/posteriordb_check.py``; its
``--quick`` path on one posterior is the ``system`` test here.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

import _posteriordb  # benchmarks/ is on sys.path (tests/conftest.py)


@pytest.fixture(scope="module")
def posteriors():
  return {name: _posteriordb.load(name) for name in _posteriordb.NAMES}


def test_split_is_seven_tuning_and_eight_held_out(posteriors):
  assert len(_posteriordb.NAMES_TUNING) == 7 and len(_posteriordb.NAMES_HELD_OUT) == 8
  assert not set(_posteriordb.NAMES_TUNING) & set(_posteriordb.NAMES_HELD_OUT)
  for name, posterior in posteriors.items():
    assert posterior.name == name
    assert posterior.split == ("tuning" if name in _posteriordb.NAMES_TUNING else "held_out")


def test_unknown_name_is_refused():
  with pytest.raises(ValueError, match="unknown posterior"):
    _posteriordb.load("mcycle_gp-accel_gp")


@pytest.mark.parametrize("name", _posteriordb.NAMES)
def test_density_gradient_and_names_at_stan_initial_points(posteriors, name):
  posterior = posteriors[name]
  positions = posterior.initial_positions(jax.random.key(0), 8)
  assert positions.shape == (8, posterior.dim) and positions.dtype == jnp.float32
  assert float(jnp.max(jnp.abs(positions))) <= 2.0
  value, grad = jax.jit(jax.vmap(jax.value_and_grad(posterior.logdensity_fn)))(positions)
  assert value.shape == (8,) and value.dtype == jnp.float32
  assert np.isfinite(value).all() and np.isfinite(grad).all()
  constrained = posterior.constrain(positions[0])
  assert sorted(constrained) == sorted(posterior.parameter_names)
  assert set(posterior.reference_mean) == set(posterior.reference_sd) == set(constrained)
  assert all(jnp.shape(v) == () and np.isfinite(v) for v in constrained.values())
  assert all(sd > 0 for sd in posterior.reference_sd.values())


def _kidiq_by_hand(u, data):
  """``beta`` flat, ``sigma ~ cauchy(0, 2.5)``, ``sigma = exp(u[3])`` with log-Jacobian
  ``u[3]``, ``kid_score ~ normal(beta[1] + beta[2] mom_hs + beta[3] mom_iq, sigma)``."""
  beta, sigma = u[:3], math.exp(u[3])
  mean = beta[0] + beta[1] * np.asarray(data["mom_hs"]) + beta[2] * np.asarray(data["mom_iq"])
  return (stats.norm.logpdf(data["kid_score"], mean, sigma).sum()
          + stats.cauchy.logpdf(sigma, 0, 2.5) + u[3])


def test_kidiq_density_differences_match_the_hand_written_formula(posteriors):
  """Differences of the float32 density at points near and far from the posterior agree with
  the float64 formula to 1e-5 relative (the float32 rounding of terms of size ~1e3)."""
  posterior = posteriors["kidiq-kidscore_momhsiq"]
  data = _posteriordb.read_data(posterior.name)
  points = np.array([[25.8, 6.0, 0.56, math.log(18.1)], [20.0, 4.0, 0.6, math.log(20.0)],
                     [0.0, 0.0, 0.0, 0.0], [30.0, 10.0, 0.5, math.log(16.0)]])
  ours = np.array([float(posterior.logdensity_fn(jnp.asarray(p, jnp.float32))) for p in points])
  exact = np.array([_kidiq_by_hand(np.float32(p).astype(np.float64), data) for p in points])
  np.testing.assert_allclose(ours - ours[0], exact - exact[0], rtol=1e-5, atol=1e-3)


_TRANSFORMS = {
    "positive": (_posteriordb._positive, 3),
    "interval": (_posteriordb._interval(-1.0, 3.0), 1),
    "ordered": (_posteriordb._ordered, 4),
    "positive_ordered": (_posteriordb._positive_ordered, 3),
    "simplex": (_posteriordb._simplex, 3),  # a 4-simplex: 3 free coordinates
}


@pytest.mark.usefixtures("float64")
@pytest.mark.parametrize("kind", sorted(_TRANSFORMS))
def test_log_jacobian_is_the_log_determinant(kind):
  """Each transform's log-Jacobian equals log|det| of ``jax.jacfwd`` of the map from the free
  coordinates to the first ``free`` constrained ones (a simplex's last is determined), to
  1e-10 in float64."""
  transform, free = _TRANSFORMS[kind]
  u = jax.random.uniform(jax.random.key(1), (free,), jnp.float64, -2.0, 2.0)
  x, log_jacobian = transform(u, {})
  jacobian = jax.jacfwd(lambda v: transform(v, {})[0][:free])(u)
  np.testing.assert_allclose(log_jacobian, jnp.linalg.slogdet(jacobian)[1], rtol=0, atol=1e-10)
  if kind == "simplex":
    assert x.shape == (free + 1,) and abs(float(jnp.sum(x)) - 1) < 1e-12
  if kind in ("ordered", "positive_ordered"):
    assert bool(jnp.all(jnp.diff(x) > 0))


@pytest.mark.usefixtures("float64")
def test_garch_dependent_bound_log_jacobian():
  """garch11's ``beta1 < 1 - alpha1``: the blocks' total log-Jacobian against log|det| of the
  whole map u -> (mu, alpha0, alpha1, beta1), in float64."""
  model = _posteriordb._MODELS["garch-garch11"](_posteriordb.read_data("garch-garch11"))

  def constrained(u):
    values, _ = _posteriordb._constrain_blocks(model.blocks, u)
    return jnp.stack([values[k] for k in ("mu", "alpha0", "alpha1", "beta1")])

  u = jnp.array([0.3, -1.2, 0.7, 1.5], jnp.float64)
  _, log_jacobian = _posteriordb._constrain_blocks(model.blocks, u)
  np.testing.assert_allclose(log_jacobian, jnp.linalg.slogdet(jax.jacfwd(constrained)(u))[1],
                             rtol=0, atol=1e-10)
  x = constrained(u)
  assert 0 < float(x[3]) < 1 - float(x[2])


@pytest.mark.system  # NUTS on one posterior, a few thousand transitions
def test_check_script_quick_passes_on_kidiq(tmp_path):
  import posteriordb_check  # pylint: disable=g-import-not-at-top
  records = posteriordb_check.main(["--quick", "--names", "kidiq-kidscore_momhsiq",
                                    "--out", str(tmp_path)])
  assert [r["name"] for r in records] == ["kidiq-kidscore_momhsiq"]
  assert records[0]["passed"], records[0]["parameters"]
  assert "kidiq-kidscore_momhsiq" in (tmp_path / "posteriordb_check.md").read_text()
  assert (tmp_path / "posteriordb_check.json").exists()
