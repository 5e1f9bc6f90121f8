"""Complex params: MetaOptimize on ``w = a + ib`` is MetaOptimize on the pair ``(a, b)``.

The oracle is the same problem written with separate real and imaginary float
arrays (the "split" problem): with an optimizer that treats the real coordinates
alike (a linear base: ``optax.trace``, ``optax.identity``) and the same block of
``a_i`` and ``b_i``, the complex run and the split run are the same computation,
so their whole trajectories (params and learned step sizes) agree to rounding.
The gradient given to the optimizer is ``conj(jax.grad(loss))``, optax's
convention (``df/da + i df/db``). For a base that couples the two coordinates
(Adam's ``|g|^2``), the first meta-gradient is checked against ``jax.grad`` of
the loss after one step with respect to ``log alpha_0``.
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import metaoptax

T = 100  # steps of each compared run
# complex128 trajectories against the split float64 ones (measured: <= 1e-15).
RTOL_X64 = 1e-12
# complex64 against split float32 (measured: params <= 4e-7, log alpha <= 5e-7).
ATOL_F32 = 5e-6

TARGET = {"u": np.array([1 + 1j, -0.5 + 2j, 0.3 - 0.7j]),
          "v": np.array([[0.2j, 1.0], [-1 - 1j, 0.5 + 0.5j]])}
START = {"u": np.array([0.1 + 0.2j, -0.3j, 0.5]), "v": np.array([[0.4, -0.2 + 0.1j], [0.0, 0.3j]])}


def loss(z):
  """Real, not holomorphic, not quadratic; couples the leaves and the real and
  imaginary parts (third derivatives matter to the exact variants)."""
  r = sum(jnp.sum(jnp.abs(z[k] - TARGET[k].astype(z[k].dtype)) ** 2) for k in z)
  return r + 0.05 * jnp.sum(jnp.abs(z["u"]) ** 4) + 0.3 * jnp.real(z["u"][0] * z["v"][0, 1])


def combine(split):
  return {k: split[k]["re"] + 1j * split[k]["im"] for k in split}


def split_loss(split):
  return loss(combine(split))


def optax_grad(f):
  """The gradient an optax optimizer is given for complex params: conj(jax.grad)."""
  return lambda p: jax.tree.map(jnp.conj, jax.grad(f)(p))


# The split problem's labels that give a_i and b_i the block of w_i.
_INDEX = {"u": np.arange(3, dtype=np.int32), "v": np.arange(3, 7, dtype=np.int32).reshape(2, 2)}
SPLIT_BLOCKS = {
    "scalar": "scalar",
    "per_leaf": {"u": {"re": 0, "im": 0}, "v": {"re": 1, "im": 1}},
    "per_param": {k: {"re": i, "im": i} for k, i in _INDEX.items()},
}


def run(opt, params, f):
  """``T`` steps; returns every step's params and step sizes (flattened per step)."""

  def body(carry, _):
    p, state = carry
    u, state = opt.update(optax_grad(f)(p), state, p, obj_fn=f)
    p = optax.apply_updates(p, u)
    alphas = jnp.concatenate([jnp.ravel(a) for a in jax.tree.leaves(
        metaoptax.step_sizes(state))])
    return (p, state), (p, alphas)

  _, (ps, alphas) = jax.jit(lambda p: jax.lax.scan(body, (p, opt.init(p)), None, T))(params)
  return ps, alphas


def compare(make, blocks, dtype, check):
  start = jax.tree.map(lambda x: jnp.asarray(x, dtype), START)
  split_start = {k: {"re": jnp.real(z), "im": jnp.imag(z)} for k, z in start.items()}
  ps, alphas = run(make(blocks), start, loss)
  split_ps, split_alphas = run(make(SPLIT_BLOCKS[blocks]), split_start, split_loss)
  split_ps = combine(split_ps)
  for k in ps:
    assert ps[k].dtype == dtype
    check(ps[k], split_ps[k])
  check(jnp.log(alphas), jnp.log(split_alphas))
  # the step sizes moved: the meta-gradient is not trivially zero
  assert float(jnp.max(jnp.abs(jnp.log(alphas[-1] / alphas[0])))) > 0.01


def metaoptimize(base, approximation, **kwargs):
  return lambda blocks: metaoptax.metaoptimize(
      base, optax.adam(1e-2), init_step_size=1e-2, blocks=blocks,
      approximation=approximation, weight_decay=0.01, gamma=0.99, **kwargs)


CASES = {  # every approximation and layout; the exact ones with few columns (slow to compile)
    "hessian_free-scalar-momentum": (metaoptimize(optax.trace(0.9), "hessian_free"), "scalar"),
    "hessian_free-per_param-momentum": (metaoptimize(optax.trace(0.9), "hessian_free"),
                                        "per_param"),
    # learned hyperparameters: the params' trajectory follows their values
    "hessian_free-scalar-momentum-learn": (metaoptimize(
        optax.inject_hyperparams(optax.trace)(decay=0.9), "hessian_free",
        learn=("decay", "weight_decay")), "scalar"),
    "l_approx-per_leaf-sgd": (metaoptimize(optax.identity(), "l_approx"), "per_leaf"),
    "2x2-scalar-momentum": (metaoptimize(optax.trace(0.9), "2x2"), "scalar"),
    "hypergradient_descent": (lambda blocks: metaoptax.hypergradient_descent(
        meta_step_size=1e-2, init_step_size=1e-2, blocks=blocks), "scalar"),
}


@pytest.mark.usefixtures("float64")
@pytest.mark.parametrize("case", sorted(CASES))
def test_complex128_run_equals_its_real_split(case):
  make, blocks = CASES[case]
  compare(make, blocks, jnp.complex128,
          lambda x, y: np.testing.assert_allclose(x, y, rtol=RTOL_X64, atol=RTOL_X64))


def test_complex64_run_equals_its_real_split():
  make, blocks = CASES["hessian_free-per_param-momentum"]
  compare(make, blocks, jnp.complex64,
          lambda x, y: np.testing.assert_allclose(x, y, rtol=0, atol=ATOL_F32))


@pytest.mark.usefixtures("float64")
@pytest.mark.parametrize("approximation", ["hessian_free", "l_approx", "2x2"])
def test_first_meta_gradient_is_the_derivative_of_the_next_loss(approximation):
  """Adam's direction couples ``a`` and ``b`` (its ``v`` averages ``|g|^2``), so
  the split run is another optimizer. After one step from ``H_0 = 0`` every
  approximation's trace is exact, ``H_1 = dw_1 / d beta_0``, and the meta-gradient
  it gives at ``w_1`` is ``d loss(w_1(beta_0)) / d beta_0``; with meta SGD of step
  1 it is ``beta_1 - beta_2``."""
  params = jax.tree.map(lambda x: jnp.asarray(x, jnp.complex128), START)
  base = optax.scale_by_adam(eps_root=1e-30)
  kappa = 0.1

  def make(beta0):
    return metaoptax.metaoptimize(base, optax.sgd(1.0), init_step_size=jnp.exp(beta0),
                                  blocks="per_leaf", approximation=approximation,
                                  weight_decay=kappa, step_size_bounds=(1e-30, 1e30))

  beta0 = jnp.log(jnp.array(0.03))
  opt = make(beta0)
  state = opt.init(params)

  @jax.jit
  def step(p, state):
    u, state = opt.update(optax_grad(loss)(p), state, p, obj_fn=loss)
    return optax.apply_updates(p, u), state

  p, betas = params, []
  for _ in range(2):
    p, state = step(p, state)
    betas.append(state.meta_params.step_size)
  assert betas[0].dtype == jnp.float64
  assert jax.tree.leaves(metaoptax.sensitivity_trace(state))[0].dtype == jnp.complex128

  def next_loss(beta):  # loss(w_1) with block k's step size exp(beta[k])
    direction, _ = base.update(optax_grad(loss)(params), base.init(params), params)
    w1 = {k: params[k] - jnp.exp(beta[i]) * (direction[k] + kappa * params[k])
          for i, k in enumerate(sorted(params))}
    return loss(w1)

  oracle = jax.grad(next_loss)(jnp.full(2, beta0))
  np.testing.assert_allclose(betas[0] - betas[1], oracle, rtol=1e-10)
  assert float(jnp.min(jnp.abs(oracle))) > 1e-3


@pytest.mark.parametrize("dtype,real", [(jnp.complex64, jnp.float32)])
def test_step_sizes_are_real_and_traces_complex(dtype, real):
  params = {"w": jnp.ones(3, dtype), "b": jnp.zeros((), dtype)}
  for approximation in ("hessian_free", "l_approx"):
    for blocks in ("scalar", "per_param"):
      opt = metaoptax.presets.adamw_adam(1e-3, approximation=approximation, blocks=blocks)
      state = opt.init(params)
      assert {x.dtype for x in jax.tree.leaves(state.meta_params)} == {jnp.dtype(real)}
      assert {x.dtype for x in jax.tree.leaves(metaoptax.sensitivity_trace(state))} == {
          jnp.dtype(dtype)}
      assert all(x.dtype == real for x in jax.tree.leaves(state.meta_state)
                 if jnp.issubdtype(x.dtype, jnp.inexact))


@pytest.mark.usefixtures("float64")
def test_xu_idbd_steps_on_complex_params():
  """Xu et al.'s IDBD extension (weight-wise L-approximation, meta update first):
  real step sizes, a complex trace, and a lower loss after a few steps."""
  opt = metaoptax.xu_idbd(meta_step_size=1e-2, init_step_size=0.05)
  params = {"u": jnp.asarray(START["u"], jnp.complex128)}  # three weights: three columns
  loss_u = lambda p: loss({"u": p["u"], "v": jnp.asarray(START["v"], jnp.complex128)})

  @jax.jit
  def step(p, state):
    u, state = opt.update(optax_grad(loss_u)(p), state, p, obj_fn=loss_u)
    return optax.apply_updates(p, u), state

  p, state = params, opt.init(params)
  for _ in range(5):
    p, state = step(p, state)
  assert {x.dtype for x in jax.tree.leaves(state.meta_params)} == {jnp.dtype(jnp.float64)}
  assert {x.dtype for x in jax.tree.leaves(metaoptax.sensitivity_trace(state))} == {
      jnp.dtype(jnp.complex128)}
  assert float(loss_u(p)) < float(loss_u(params))
  # the weight-wise step sizes moved, and apart
  alphas = jnp.concatenate([jnp.ravel(a) for a in jax.tree.leaves(metaoptax.step_sizes(state))])
  assert float(jnp.max(alphas) - jnp.min(alphas)) > 1e-6


def test_idbd_refuses_complex_params():
  opt = metaoptax.idbd(meta_step_size=0.01, init_step_size=0.05)
  with pytest.raises(ValueError, match=r"idbd does not support complex params.*\['w'\]"):
    opt.init({"w": jnp.ones(2, jnp.complex64), "b": jnp.ones(2)})
