"""The shared host loop under L2O meta-training and L2HMC training.

Checked against independent references: the results the two drivers gave
before they shared the loop (``data/training_loop_reference.npz``, at a
stated tolerance: it was written on another machine) and a hand-written Python
loop over the jitted ``build_*_step``. Also: progress reports (bar, ``print``,
a callback), the starting point (``init_state`` or a checkpoint, a conflict is
an error) and the one ``evaluate``.
"""

import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from metaoptax import checkpoint, l2hmc, l2o
from tests.l2hmc.paper import paper_config, paper_training

REFERENCE = pathlib.Path(__file__).parent / "data" / "training_loop_reference.npz"

FAMILY = l2o.tasks.ellipse()
L2O_CONFIG = l2o.L2OConfig(heads=("learning_rate", "momentum"), hidden=4)
META_OPTIMIZER = l2o.default_optimizer()  # one object: the calls share a compiled step
TRAINING = l2o.TrainingConfig(tasks_per_step=8, horizon=4, unroll=2, log_loss=True)

TARGET = l2hmc.targets.strongly_correlated_gaussian()
HMC_CONFIG = paper_config(dim=2, num_steps=2, hidden=4)
HMC_TRAINING = paper_training(num_chains=8)


def _bits(tree) -> bytes:
  """The bytes of a pytree's leaves, in order (typed keys as their key data)."""
  out = []
  for leaf in jax.tree.leaves(tree):
    if isinstance(leaf, jax.Array) and jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
      leaf = jax.random.key_data(leaf)
    out.append(np.ascontiguousarray(np.asarray(leaf)).tobytes())
  return b"".join(out)


def _meta_train(**kwargs):
  kwargs = {"init_state": l2o.init_training(jax.random.key(5), FAMILY, L2O_CONFIG,
                                            optimizer=META_OPTIMIZER),
            "num_iterations": 4, "progress": None, **kwargs}
  return l2o.train(jax.random.key(0), FAMILY, L2O_CONFIG, TRAINING, **kwargs,
                   optimizer=META_OPTIMIZER)


def _train(**kwargs):
  kwargs = {"init_state": l2hmc.init_training(jax.random.key(16), TARGET, HMC_CONFIG, HMC_TRAINING),
            "num_iterations": 6, "progress": None, **kwargs}
  return l2hmc.train(jax.random.key(0), TARGET, HMC_CONFIG, HMC_TRAINING, **kwargs)


def _leaves_like(tree, data: bytes) -> list[np.ndarray]:
  """The fixture's bytes read back as arrays of the leaves' dtypes and shapes."""
  out, offset = [], 0
  for leaf in jax.tree.leaves(tree):
    if isinstance(leaf, jax.Array) and jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
      leaf = jax.random.key_data(leaf)
    leaf = np.asarray(leaf)
    out.append(np.frombuffer(data, leaf.dtype, leaf.size, offset).reshape(leaf.shape))
    offset += leaf.nbytes
  assert offset == len(data), "the fixture's state has another layout"
  return out


# The fixture was written on another machine under XLA's default optimization.
# XLA's CPU code depends on the instruction set (vector width, FMA contraction)
# and on its flags, so the last bits may differ: the comparison is at a stated
# tolerance (float leaves at RTOL/ATOL; integer leaves, step counters and PRNG
# key data, exactly). Measured against the fixture: identical under XLA's
# defaults on an AMD EPYC; under the test run's fast-compile flags (another
# fusion and rounding of the same math) the L2O state differs by <= 1.8e-7
# (losses 2.4e-7) and the L2HMC state by <= 2.2e-3 absolute, 4.4e-4 relative
# (losses 1.3e-4), after 6 training steps. The test runs under those flags, so
# it shows the tolerance absorbs a change of code generation.
RTOL, ATOL = 2e-3, 1e-5


def _assert_state_close(tree, data: bytes) -> None:
  got = [np.asarray(jax.random.key_data(leaf) if isinstance(leaf, jax.Array) and
                    jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key) else leaf)
         for leaf in jax.tree.leaves(tree)]
  for index, (have, want) in enumerate(zip(got, _leaves_like(tree, data))):
    if np.issubdtype(want.dtype, np.inexact):
      np.testing.assert_allclose(have, want, rtol=RTOL, atol=ATOL, err_msg=f"leaf {index}")
    else:
      np.testing.assert_array_equal(have, want, err_msg=f"leaf {index}")


@pytest.mark.system  # every driver's run, twice
def test_same_run_as_the_drivers_before_the_shared_loop():
  """The fixture holds the losses and final states of ``l2o.train`` and
  ``l2hmc.train`` as they were before they shared one loop (same settings,
  given then as flat keyword arguments and ``seed=``), written on another
  machine: compared at RTOL/ATOL, not bit for bit."""
  ref = np.load(REFERENCE)
  meta = _meta_train()
  np.testing.assert_allclose(meta.losses, ref["l2o_a_losses"], rtol=RTOL, atol=ATOL)
  _assert_state_close(meta.state, ref["l2o_a_state_bytes"].tobytes())
  hmc = _train()
  np.testing.assert_allclose(hmc.losses, ref["hmc_a_losses"], rtol=RTOL, atol=ATOL)
  np.testing.assert_allclose(hmc.acceptance, ref["hmc_a_acceptance"], rtol=RTOL, atol=ATOL)
  assert hmc.state.whitening is None  # (a later field: the warm-up's, None without one)
  _assert_state_close(hmc.state, ref["hmc_a_state_bytes"].tobytes())


@pytest.mark.system  # a whole training loop per driver (10 s): CI's second command
@pytest.mark.parametrize("driver", ["l2o", "l2hmc"])
def test_train_is_a_loop_over_the_jitted_step(driver):
  """``train`` equals a hand-written loop over ``jax.jit(build_*_step(...))`` from
  ``init_*``, bit for bit; the callback gets one report per ``log_every``
  iterations and one at the end, with the means of the iterations since the last
  (L2O: of the median over the tasks, and the worst task's meta-loss)."""
  if driver == "l2o":
    step = jax.jit(l2o.build_training_step(FAMILY, L2O_CONFIG, TRAINING, optimizer=META_OPTIMIZER))
    state = l2o.init_training(jax.random.key(5), FAMILY, L2O_CONFIG, optimizer=META_OPTIMIZER)
    run, losses_of, num = _meta_train, (lambda info: info.losses), 4
  else:
    step = jax.jit(l2hmc.build_training_step(TARGET, HMC_CONFIG, HMC_TRAINING))
    state = l2hmc.init_training(jax.random.key(16), TARGET, HMC_CONFIG, HMC_TRAINING)
    run, losses_of, num = _train, (lambda info: info.loss[None]), 6
  # the initial states are committed to the default device, as the library's loops place
  # them: the loop's jit shares their compilation (the step is one object per configuration)
  assert all(leaf.committed for leaf in jax.tree.leaves(state))
  losses, per_task = [], []
  for _ in range(num):
    state, info = step(state)
    losses.append(np.asarray(losses_of(info)))
    per_task.append(np.asarray(getattr(info, "task_meta_losses", losses[-1])))
  reports = []
  result = run(progress=reports.append, log_every=3)
  assert _bits(result.state) == _bits(state)
  np.testing.assert_array_equal(result.losses, np.concatenate(losses))
  assert [r.iteration for r in reports] == [3, num]
  assert all(r.num_iterations == num and r.skipped_updates == 0 for r in reports)
  if driver == "l2o":
    since = np.concatenate(per_task[3:])  # (truncations, tasks)
    np.testing.assert_allclose(reports[-1].loss, np.mean(np.median(since, axis=1)), rtol=1e-6)
    np.testing.assert_allclose(reports[-1].metrics["worst_task"], np.max(since), rtol=1e-6)
  else:
    np.testing.assert_allclose(reports[-1].loss, np.mean(np.concatenate(losses[3:])),
                               rtol=1e-6)
  assert reports[0].label == ("L2O meta-training" if driver == "l2o" else "L2HMC training")
  if driver == "l2hmc":
    np.testing.assert_allclose(reports[-1].metrics["acceptance"],
                               np.mean(result.acceptance[3:]), rtol=1e-6)


@pytest.mark.system  # a meta-training and an L2HMC training run, end to end (15 s)
def test_progress_bar_by_default_and_print(capsys):
  _meta_train(num_iterations=2, log_every=1, progress="bar")
  err = capsys.readouterr().err
  assert "L2O meta-training" in err and "2/2" in err
  assert "loss=" in err and "skipped=0" in err and "it/s" in err
  _train(num_iterations=2, progress=print)
  out = capsys.readouterr().out.strip()
  assert out.startswith("L2HMC training 2/2: loss ") and ", skipped 0, acceptance " in out
  assert out.endswith(" it/s")
  with pytest.raises(ValueError, match="progress"):
    _train(num_iterations=1, progress="tqdm")


@pytest.mark.system  # six L2HMC training runs with checkpoints (~16 s): CI's second command
def test_starting_point_is_init_state_or_checkpoint_never_silently_both(tmp_path):
  directory = tmp_path / "run"
  start = l2hmc.init_training(jax.random.key(16), TARGET, HMC_CONFIG, HMC_TRAINING)
  half = _train(num_iterations=3, init_state=start, checkpoint_dir=directory)
  assert checkpoint.latest_step(directory) == 3
  full = _train(init_state=start)
  # the same call again (the run's start), no init_state, or the latest state: resume
  assert _bits(_train(init_state=start, checkpoint_dir=directory).state) == _bits(full.state)
  assert checkpoint.latest_step(directory) == 6
  for other in (None, full.state):
    assert _bits(_train(init_state=other, checkpoint_dir=directory).state) == _bits(full.state)
  # another starting state with this directory is a conflict
  other = l2hmc.init_training(jax.random.key(17), TARGET, HMC_CONFIG, HMC_TRAINING)
  with pytest.raises(ValueError, match="did not start from the given init_state"):
    _train(init_state=other, checkpoint_dir=directory)
  with pytest.raises(ValueError, match="did not start from the given init_state"):
    _train(init_state=half.state._replace(iteration=half.state.iteration + 1),
           checkpoint_dir=directory)


@pytest.mark.system  # a training or sampling run (6-10 s): CI's second command
def test_evaluate_runs_any_optax_optimizer_on_the_same_tasks():
  key, num_tasks, steps = jax.random.key(9), 3, 5
  lr = 0.05
  sgd = l2o.evaluate(key, FAMILY, optax.sgd(lr), num_tasks, steps)
  # oracle: plain gradient descent on the tasks and starts sample_problems draws
  tasks, starts, _ = l2o.sample_problems(key, FAMILY, L2O_CONFIG, num_tasks)
  for i in range(num_tasks):
    task = jax.tree.map(lambda x: x[i], tasks)
    x = jax.tree.map(lambda x: x[i], starts)
    expected = [FAMILY.loss(task, x)]
    for _ in range(steps):
      x = jax.tree.map(lambda p, g: p - lr * g, x, jax.grad(FAMILY.loss, argnums=1)(task, x))
      expected.append(FAMILY.loss(task, x))
    np.testing.assert_allclose(sgd[i], np.asarray(expected), rtol=1e-5)
  # the learned optimizer, with its teleport head acting: the pure step, hand-rolled
  config = l2o.L2OConfig(heads=("learning_rate", "teleport", "momentum"), group_dim=1, hidden=4)
  net = config.init_network(jax.random.key(3))
  learned = l2o.evaluate(key, FAMILY, config.transformation(net), num_tasks, steps)
  for i in range(num_tasks):
    task = jax.tree.map(lambda x: x[i], tasks)
    x = jax.tree.map(lambda x: x[i], starts)
    state, expected = l2o.optimizer.init_state(config, x), [FAMILY.loss(task, x)]
    for _ in range(steps):
      g = jax.grad(FAMILY.loss, argnums=1)(task, x)
      x, state, _ = config.step(net, state, x, g, lambda t, p: FAMILY.act(task, t, p))
      expected.append(FAMILY.loss(task, x))
    np.testing.assert_allclose(learned[i], np.asarray(expected), rtol=1e-5, atol=1e-7)
