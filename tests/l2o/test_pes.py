"""PES (``metaoptax.l2o.pes``) against float64 autodiff through the whole unroll.

Problem: heavy-ball descent on a 2-D quadratic, ``x <- x - e^{a} A x + b (x - x_prev)``
with ``theta = (a, b)``, in 4 truncations of 5 steps; truncation k's loss is the mean of
``x^T A x / 2`` over its steps. Oracle: ``jax.grad`` of truncation k's loss through all
k truncations with one shared ``theta`` (float64), and, for truncated ES, through the
last truncation only (``theta`` of the earlier ones held fixed).
Tolerance: every coordinate within 4 standard errors of the Monte Carlo mean (the
standard error computed from the 20,000 antithetic pairs themselves, and at most 3 %
of the gradient's norm, so that the check has power).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from metaoptax.l2o import pes

pytestmark = pytest.mark.usefixtures("float64")

A = np.diag([1.0, 0.2])
THETA = np.array([np.log(0.3), 0.5])
TRUNCATIONS, LENGTH, PAIRS, SIGMA = 4, 5, 20_000, 1e-3


def run(theta, state):
  """One truncation: ``(mean loss, new state)``; state ``(x, x_prev)``."""
  a = jnp.asarray(A)

  def body(carry, _):
    x, prev = carry
    new = x - jnp.exp(theta[0]) * (a @ x) + theta[1] * (x - prev)
    return (new, x), 0.5 * new @ a @ new

  state, losses = jax.lax.scan(body, state, None, length=LENGTH)
  return jnp.mean(losses), state


def start():
  x0 = jnp.array([1.0, 1.0])
  return (x0, x0)


def whole_unroll_gradients():
  """``d L_k / d theta`` through the whole unroll, k = 1..K (float64)."""

  def loss_k(theta, k):
    state = start()
    for _ in range(k):
      loss, state = run(theta, state)
    return loss

  return np.stack([jax.grad(loss_k)(jnp.asarray(THETA), k) for k in range(1, TRUNCATIONS + 1)])


def last_truncation_gradients():
  """``d L_k / d theta_k``: the earlier truncations' theta held fixed (float64)."""
  out, state = [], start()
  for _ in range(TRUNCATIONS):
    out.append(jax.grad(lambda t, s: run(t, s)[0])(jnp.asarray(THETA), state))
    state = run(jnp.asarray(THETA), state)[1]
  return np.stack(out)


def estimates(persistent):
  """PES (or, with ``persistent=False``, truncated ES: sums zeroed each truncation) at
  every truncation: ``(mean, standard error)``, each ``(K, 2)``."""
  theta = jnp.asarray(THETA)
  particles = jax.tree.map(lambda x: jnp.broadcast_to(x, (2 * PAIRS,) + x.shape), start())
  state = pes.init(theta, particles)
  step = jax.jit(lambda s, k: pes.gradient(k, run, theta, s, SIGMA))
  means, errors = [], []
  for k, key in enumerate(jax.random.split(jax.random.key(0), TRUNCATIONS)):
    if not persistent:
      state = state._replace(accumulated=jnp.zeros_like(state.accumulated))
    estimate, losses, state, finite = step(state, key)
    assert bool(jnp.all(finite))
    pair = np.asarray(losses).reshape(-1, 2)
    per_pair = np.asarray(state.accumulated)[0::2] * (pair[:, :1] - pair[:, 1:]) / (2 * SIGMA**2)
    np.testing.assert_allclose(estimate, per_pair.mean(0), rtol=1e-10)
    means.append(per_pair.mean(0))
    errors.append(per_pair.std(0) / np.sqrt(PAIRS))
  return np.stack(means), np.stack(errors)


def test_pes_matches_the_whole_unroll_gradient():
  exact = whole_unroll_gradients()
  mean, error = estimates(persistent=True)
  norms = np.linalg.norm(exact, axis=1, keepdims=True)
  assert np.all(error <= 0.03 * norms), (error, norms)
  assert np.all(np.abs(mean - exact) <= 4 * error), (mean, exact, error)


@pytest.mark.system  # a training or sampling run (6-10 s): CI's second command
def test_truncated_es_is_biased_where_pes_is_not():
  """Zeroing the sums each truncation (truncated ES) estimates only the last
  truncation's partial derivative, which differs from the whole-unroll gradient by
  many standard errors from the second truncation on."""
  exact, partial = whole_unroll_gradients(), last_truncation_gradients()
  mean, error = estimates(persistent=False)
  assert np.all(np.abs(mean - partial) <= 4 * error), (mean, partial, error)
  np.testing.assert_allclose(partial[0], exact[0], rtol=1e-12)  # first truncation: the same
  assert np.all(np.max(np.abs(mean[1:] - exact[1:]) / error[1:], axis=1) > 20), (mean, exact)


def test_perturbations_are_antithetic_and_masked():
  theta = {"w": jnp.zeros((3, 2)), "b": jnp.zeros(2)}
  eps = pes.perturbations(jax.random.key(1), theta, 6, 0.5, {"w": True, "b": False})
  assert eps["w"].shape == (6, 3, 2) and eps["b"].shape == (6, 2)
  np.testing.assert_array_equal(eps["w"][1::2], -eps["w"][0::2])
  assert not np.any(eps["b"]) and np.all(np.abs(eps["w"]) > 0)
  with pytest.raises(ValueError, match="even number"):
    pes.init(theta, jnp.zeros((3, 2)))


@pytest.mark.system  # 10 s: 80,000 particles and a back-propagated step, two compilations
def test_pes_meta_step_matches_back_propagation_on_one_truncation():
  """``TrainingConfig(pes=...)`` on a run of one truncation, plain SGD (rate 1) as the
  meta-optimizer: the meta step on the perturbed leaves (the read-out) is minus the
  back-propagated meta-gradient of the same tasks (``second_order=True``, float64)
  within 5 % of its norm (20,000 pairs per task; measured 1.0 %); the other leaves do
  not move."""
  from metaoptax import l2o
  import optax

  family = l2o.tasks.ellipse()
  config = l2o.ScaledAdamConfig(learning_rate=0.05, hidden=4)
  state = l2o.init_training(jax.random.key(3), family, config, optimizer=optax.sgd(1.0))
  common = dict(tasks_per_step=2, horizon=5, unroll=5, log_loss=True)

  def moved(training):
    step = l2o.build_training_step(family, config, training, optimizer=optax.sgd(1.0))
    new = jax.jit(step)(state)[0].params
    return jax.tree.map(lambda a, b: np.asarray(a - b), new, state.params)

  estimated = moved(l2o.TrainingConfig(
      **common, pes=pes.PES(pairs=PAIRS, sigma=SIGMA, perturb="log_scale")))
  exact = moved(l2o.TrainingConfig(**common, second_order=True))
  head = lambda tree: np.concatenate([np.ravel(x) for x in jax.tree.leaves(
      tree["params"]["log_scale"])])
  assert np.linalg.norm(head(exact)) > 1e-3
  assert np.linalg.norm(head(estimated) - head(exact)) <= 0.05 * np.linalg.norm(head(exact))
  lstm = [x for x in jax.tree.leaves(estimated["params"]["lstm_0"])]
  assert lstm and not any(np.any(x) for x in lstm)
  with pytest.raises(ValueError, match="matches no leaf"):
    moved(l2o.TrainingConfig(**common, pes=pes.PES(perturb="nothing")))



@pytest.mark.system  # compiles two meta-training runs (tens of seconds on 2 busy cores)
def test_pes_non_finite_pairs_veto_the_step_unless_masked():
  """Ellipse tasks whose loss is NaN when ``b[0] > 1``: without masking every PES meta step
  is skipped; with ``mask_diverged_tasks`` none is, the restarted particles are counted
  and the network moves and stays finite."""
  from metaoptax import l2o

  base = l2o.tasks.ellipse()
  family = base._replace(loss=lambda task, x: jnp.where(task["b"][0] > 1.0, jnp.nan, 1.0)
                         * base.loss(task, x))
  config = l2o.L2OConfig(heads=("learning_rate",), hidden=4)
  state = l2o.init_training(jax.random.key(1), family, config)
  runs = {}
  for masking in (False, True):
    training = l2o.TrainingConfig(tasks_per_step=8, horizon=10, unroll=5, log_loss=True,
                                  mask_diverged_tasks=masking, pes=pes.PES(pairs=2))
    runs[masking] = l2o.train(jax.random.key(0), family, config, training, num_iterations=2,
                              progress=None, init_state=state)
  assert runs[False].skipped_updates == 4 and runs[False].diverged_tasks == 0
  assert runs[True].skipped_updates == 0 and runs[True].diverged_tasks >= 4
  assert bool(jnp.all(jnp.isfinite(runs[True].losses)))
  moved = [np.asarray(a - b) for a, b in zip(jax.tree.leaves(runs[True].params),
                                             jax.tree.leaves(state.params))]
  assert all(np.all(np.isfinite(m)) for m in moved) and any(np.any(m) for m in moved)
