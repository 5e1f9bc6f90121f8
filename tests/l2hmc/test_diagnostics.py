"""``l2hmc.split_rhat`` against a float64 NumPy oracle of BDA3's formula (eq. 11.4)."""

import jax
import numpy as np
import pytest

from metaoptax import l2hmc


def _oracle(draws):
  """Split R-hat, written out in float64: each chain's two halves as sequences."""
  draws = np.asarray(draws, np.float64)
  n = draws.shape[0] // 2
  sequences = [draws[:n, j] for j in range(draws.shape[1])] + [
      draws[n:2 * n, j] for j in range(draws.shape[1])]
  means = np.array([s.mean(0) for s in sequences])
  within = np.mean([s.var(0, ddof=1) for s in sequences], 0)
  between_over_n = means.var(0, ddof=1)
  return np.sqrt(((n - 1) / n * within + between_over_n) / within)


@pytest.mark.parametrize("shift", [0.0, 0.3, 3.0])
def test_split_rhat_matches_the_oracle(shift):
  draws = np.array(jax.random.normal(jax.random.key(0), (101, 6, 3)))  # odd: last left out
  draws[:, :3] += shift  # half the chains elsewhere
  np.testing.assert_allclose(l2hmc.split_rhat(draws), _oracle(draws), rtol=1e-5)  # float32


def test_split_rhat_sees_drift_and_separated_chains():
  draws = np.array(jax.random.normal(jax.random.key(1), (400, 8, 1)))
  assert float(l2hmc.split_rhat(draws)[0]) < 1.02
  drifting = draws + np.linspace(0.0, 5.0, 400)[:, None, None]  # every chain alike, drifting
  assert float(l2hmc.split_rhat(drifting)[0]) > 1.3
  stuck = np.broadcast_to(np.arange(8.0)[None, :, None], (400, 8, 1))  # never move, apart
  assert float(l2hmc.split_rhat(stuck)[0]) == np.inf
  assert float(l2hmc.split_rhat(np.zeros((10, 4, 1)))[0]) == 1.0


def test_split_rhat_rejects_too_few_draws():
  with pytest.raises(ValueError, match="num_samples"):
    l2hmc.split_rhat(np.zeros((3, 4)))


def test_the_warm_ups_split_rhat_from_sums_matches_split_rhat_of_the_draws():
  # the warm-up accumulates each chain's sums of y and y^2 over the two quarters of a
  # window's second half; its R-hat from those sums is split_rhat of those draws
  # (float32 sums of 25 draws per quarter: rtol 1e-4)
  from metaoptax.l2hmc import adaptation  # pylint: disable=g-import-not-at-top
  draws = np.array(jax.random.normal(jax.random.key(2), (50, 6, 3)))
  draws[:, :2] += 0.5
  quarters = np.stack([np.stack([draws[:25].sum(0), draws[25:].sum(0)]),
                       np.stack([(draws[:25] ** 2).sum(0), (draws[25:] ** 2).sum(0)])])
  found = adaptation._split_rhat(jax.numpy.asarray(quarters), 25, 25)  # pylint: disable=protected-access
  np.testing.assert_allclose(found, l2hmc.split_rhat(draws), rtol=1e-4)
