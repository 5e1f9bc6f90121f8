"""Helpers shared by several test modules.

* ``benchmarks/`` on ``sys.path``, so that the tests of the benchmark suite import
  its task modules as the driver does (``from suite_tasks import ...``).
* Tests marked ``slow`` (a subprocess, a snippet that meta-trains) are run first, so
  that ``pytest -n auto`` starts them at once instead of ending on them alone.
* :func:`computed_once`: a subprocess's result shared by the xdist workers.
* ``float64``: a fixture enabling 64-bit JAX for a test (``pytest.mark.usefixtures``).
* An unrolled run of an optimizer on a small non-quadratic loss (:func:`unroll`) and
  a check of ``jax.grad`` against central finite differences (:func:`check_against_fd`),
  the oracle of the meta-gradient tests, and MetaOptimize as a function of its
  hyperparameters (:func:`metaoptimize_from`): import them with
  ``from tests.conftest import ...``.
* The oracle of the overfitting gate (:func:`validation_rising`), a run that feeds it
  validation losses (:func:`run_with_validation_losses`) and the step the climb ended
  (:func:`climb_end_step`).
"""

import fcntl
import json
import os
import pathlib
import sys
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import metaoptax
from metaoptax._src import tree_utils

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))


def computed_once(tmp_path_factory, name: str, produce: Callable[[], Any]) -> Any:
  """``produce()`` (a JSON value), computed once per test run even across
  pytest-xdist workers: the first worker to ask computes it under a file lock in
  the run's shared temporary folder, the others read it (xdist's documented
  pattern). Without xdist it is simply computed."""
  run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
  if run is None:
    return produce()
  path = tmp_path_factory.getbasetemp().parent / f"{name}-{run}.json"
  with open(f"{path}.lock", "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    if not path.exists():
      path.write_text(json.dumps(produce()))
    return json.loads(path.read_text())


def xla_flags(*flags: str) -> str:
  """``XLA_FLAGS`` for a test's subprocess: this run's flags (``conftest.py`` at the
  root) plus ``flags``."""
  return " ".join(os.environ.get("XLA_FLAGS", "").split() + list(flags))


def pytest_collection_modifyitems(items):
  """The ``slow`` tests first (a stable sort: the same order in every xdist worker)."""
  items.sort(key=lambda item: item.get_closest_marker("slow") is None)

STEPS = 6
H = 1e-5  # central-difference step
RTOL = 1e-6  # relative tolerance of a meta-gradient against central differences
A = np.array([[1.0, 0.3, 0.0], [0.3, 2.0, 0.2], [0.0, 0.2, 0.5]])
PARAMS = {"w": np.array([0.5, -0.3, 0.2]), "b": np.array([0.1, -0.2])}
# log eta, log alpha_0, gamma, weight decay
HYPER = np.array([np.log(0.05), np.log(0.05), 0.9, 0.1])


# A small two-leaf problem and MetaOptimize on an Adam base (bad input and guard tests).
TWO_LEAVES = {"a": jnp.ones((2, 3)), "b": jnp.zeros(4)}


def two_leaves_loss(p):
  return jnp.sum((p["a"] - 2.0) ** 2) + jnp.sum((p["b"] + 1.0) ** 2)


def adam_metaoptimize(**kwargs):
  kwargs.setdefault("init_step_size", 1e-3)
  return metaoptax.metaoptimize(optax.scale_by_adam(), optax.adam(1e-3), **kwargs)


@pytest.fixture
def float64():
  with jax.enable_x64(True):
    yield


def loss(p, t):
  """A non-quadratic loss changing with the step t (third derivatives matter)."""
  r = jnp.asarray(A) @ p["w"] - jnp.array([1.0, -1.0, 0.5]) * (1 + 0.1 * t)
  return 0.5 * jnp.sum(r**2) + 0.1 * jnp.sum(p["w"] ** 4) + jnp.sum(
      jnp.log(jnp.cosh(p["b"] - 0.3 * t)))


def unroll(opt, corrupt=None):
  """Loss after STEPS steps of opt from PARAMS; corrupt(t, grads, state) may spoil a step."""
  params = jax.tree.map(jnp.asarray, PARAMS)

  def body(carry, t):
    p, state = carry
    g = jax.grad(loss)(p, t)
    if corrupt is not None:
      g, state = corrupt(t, g, state)
    u, state = opt.update(g, state, p, obj_fn=lambda q: loss(q, t),
                          hessian_diagonal=jax.tree.map(jnp.ones_like, p))
    return (optax.apply_updates(p, u), state), None

  (p, state), _ = jax.lax.scan(body, (params, opt.init(params)),
                               jnp.arange(STEPS, dtype=jnp.float64))
  return loss(p, float(STEPS)), state


def check_against_fd(f, x, has_aux=False):
  """jax.grad(f)(x) vs central differences along each axis; returns the gradient
  (and, with ``has_aux``, f's auxiliary output at x: f returns (value, aux)).

  One compiled ``jax.value_and_grad(f)`` gives both the gradient (at x) and the
  values of the differences (at x +- H e_i): a test compiles its unroll once.
  """
  x = jnp.asarray(x, jnp.float64)
  value_and_grad = jax.jit(jax.value_and_grad(f, has_aux=has_aux))
  value, grad = value_and_grad(x)
  grad = np.asarray(grad)
  value_at = (lambda y: value_and_grad(y)[0][0]) if has_aux else (lambda y: value_and_grad(y)[0])
  steps = H * np.eye(x.size)
  values = np.array([value_at(x + step) for step in np.concatenate([steps, -steps])])
  fd = (values[:x.size] - values[x.size:]) / (2 * H)
  assert np.all(np.isfinite(grad)), grad
  err = np.abs(grad - fd) / np.maximum(np.abs(fd), 1e-3)
  assert np.max(err) < RTOL, (grad, fd, err)
  return (grad, value[1]) if has_aux else grad


def metaoptimize_from(hyper, base=None, meta=optax.adam, **kwargs):
  """MetaOptimize with (log eta, log alpha_0, gamma, weight decay) = hyper (as HYPER)."""
  eta, alpha0, gamma, kappa = jnp.exp(hyper[0]), jnp.exp(hyper[1]), hyper[2], hyper[3]
  return metaoptax.metaoptimize(
      base or optax.scale_by_adam(eps_root=1e-30), meta(eta, eps_root=1e-30),
      init_step_size=alpha0, gamma=gamma, weight_decay=kappa, **kwargs)


def _gate_loss(w):
  return 0.5 * jnp.sum(jnp.array([1.0, 4.0, 9.0]) * w ** 2)


def run_with_validation_losses(opt, validation_losses, extra=True):
  """``opt`` on a 3-parameter quadratic, one step per entry of ``validation_losses`` (passed
  as ``validation_loss`` when ``extra``): the mean step size and the state of each step."""
  w = jnp.array([1.0, -1.0, 0.5])
  s = opt.init(w)
  update = jax.jit(opt.update)
  alphas, states = [], []
  for v in validation_losses:
    g = jax.grad(_gate_loss)(w)
    u, s = update(g, s, w, validation_loss=jnp.float32(v)) if extra else update(g, s, w)
    w = optax.apply_updates(w, u)
    alphas.append(float(jnp.mean(metaoptax.step_sizes(s))))
    states.append(s)
  return np.array(alphas), states


def climb_end_step(states) -> int:
  """The step at which the climb of each state in ``states`` (one per step) ended."""
  (end,) = [t for t, s in enumerate(states)
            if bool(tree_utils.instances_of(s, metaoptax.ClimbState)[0].ended)]
  return end


def validation_rising(losses, start, rho=0.99, margin=0.01, patience=1, slow_rho=None):
  """The oracle, in float64: at each step, whether from ``start`` the bias-corrected
  exponential average of ``losses`` has exceeded its lowest value since ``start`` (or its
  slower average, ``slow_rho``) by ``margin`` for ``patience`` consecutive steps."""
  average, weight, best, above = 0.0, 0.0, np.inf, 0
  slow, slow_weight = 0.0, 0.0
  rising = np.zeros(len(losses), bool)
  for t, v in enumerate(losses):
    average, weight = rho * average + (1 - rho) * v, rho * weight + (1 - rho)
    if slow_rho is not None:
      slow, slow_weight = slow_rho * slow + (1 - slow_rho) * v, slow_rho * slow_weight + (1 - slow_rho)
    if t >= start:
      best = min(best, average / weight)
      reference = best if slow_rho is None else slow / slow_weight
      above = above + 1 if average / weight > reference * (1 + margin) else 0
      rising[t] = above >= patience
  return rising


def first_validation_rise(losses, start, **kwargs):
  """The first step at which :func:`validation_rising` holds, or ``None``."""
  rising = validation_rising(losses, start, **kwargs)
  return int(np.argmax(rising)) if rising.any() else None
