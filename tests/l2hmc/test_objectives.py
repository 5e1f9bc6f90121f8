"""esjd_coordinates on a hand-computed case."""

import jax.numpy as jnp
import numpy as np

from metaoptax import l2hmc


def _ell(delta, scale=0.1):
  return scale / delta - delta / scale


def test_esjd_coordinates_by_hand():
  """One chain, z = (1, 2) -> z' = (-1, 2.5), A = 0.5: coordinate 0 is reflected
  (its square does not move: the barrier 0.1 / 1e-4), coordinate 1 moves both."""
  z, moved, accept = jnp.array([[1.0, 2.0]]), jnp.array([[-1.0, 2.5]]), jnp.array([0.5])
  eps = 1e-4
  jumps = [0.5 * 4.0 + eps, 0.5 * 0.25 + eps]
  squares = [0.5 * 0.5 * 0.0 + eps, 0.5 * 0.5 * (4.0 - 6.25) ** 2 + eps]
  expected = np.mean([_ell(j) + _ell(s) for j, s in zip(jumps, squares)])
  loss = l2hmc.objective_loss("esjd_coordinates", z, moved, accept)
  np.testing.assert_allclose(loss, [expected], rtol=1e-6)
  # a crossing of coordinate 0 that also moves its square is not charged the barrier
  crossing = l2hmc.objective_loss("esjd_coordinates", z, jnp.array([[-1.2, 2.5]]), accept)
  assert float(crossing[0]) < float(loss[0]) - 100


def test_esjd_coordinates_non_finite_proposal_is_no_jump():
  z = jnp.array([[1.0, 2.0]])
  loss = l2hmc.objective_loss("esjd_coordinates", z, jnp.array([[jnp.inf, jnp.nan]]),
                              jnp.array([0.0]))
  np.testing.assert_allclose(loss, [2 * (0.1 / 1e-4 - 1e-4 / 0.1)], rtol=1e-6)


def test_esjd_and_coordinates_is_the_sum():
  """The paper's ESJD (closed form) plus esjd_coordinates, per chain."""
  z, moved, accept = jnp.array([[1.0, 2.0], [0.5, -1.0]]), jnp.array([[-1.2, 2.5],
                                                                       [0.5, 0.0]]), jnp.array([0.5, 0.9])
  paper = _ell(accept * jnp.sum((z - moved) ** 2, -1) + 1e-4)
  loss = l2hmc.objective_loss("esjd_and_coordinates", z, moved, accept)
  np.testing.assert_allclose(
      loss, paper + l2hmc.objective_loss("esjd_coordinates", z, moved, accept), rtol=1e-6)


def test_squares_coordinates_by_hand():
  """Two chains: -mean_i log(mean over chains of A (z_i^2 - z_i'^2)^2 / 2 + 1e-4), the same
  value for every chain; a reflection of every coordinate moves no square (-log 1e-4)."""
  z, moved, accept = (jnp.array([[1.0, 2.0], [0.5, -1.0]]),
                      jnp.array([[-1.2, 2.5], [0.5, 0.0]]), jnp.array([0.5, 0.9]))
  square_jumps = [np.mean([0.5 * 0.5 * (1.0 - 1.44) ** 2, 0.0]),
                  np.mean([0.5 * 0.5 * (4.0 - 6.25) ** 2, 0.5 * 0.9 * 1.0])]
  expected = -np.mean(np.log(np.array(square_jumps) + 1e-4))
  loss = l2hmc.objective_loss("squares_coordinates", z, moved, accept)
  np.testing.assert_allclose(loss, [expected, expected], rtol=1e-6)
  reflected = l2hmc.objective_loss("squares_coordinates", z, -z, jnp.ones(2))
  np.testing.assert_allclose(reflected, -np.log(1e-4), rtol=1e-6)
