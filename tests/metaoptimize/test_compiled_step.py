"""What XLA compiles for a train step: ready for accelerators this machine lacks.

Read from the compiled HLO and XLA's memory analysis of a jitted train step
(gradient, update, ``apply_updates``), against the same step with
``optax.adamw``:

* no host callbacks (no callback primitive in the jaxpr, no custom call in the
  HLO) and no host transfers (``send``/``recv``/``infeed``/``outfeed``);
* with donated params and state, every output aliases an input (the update is
  in place), the temporaries are those of ``optax.adamw``'s step (its gradient)
  plus less than one params-sized buffer (with a Lion base, one more: the weight
  change beside the gradient, see ``LION_TEMPORARY``), and no params-sized array
  is copied;
* the Hessian-free state is ``optax.adamw``'s plus one params-sized vector (the
  trace), a few scalars and the base's own moments.
"""

import functools
import re

import jax
import jax.extend
import jax.numpy as jnp
import optax
import pytest

import metaoptax
from metaoptax._src import hessian_free

PARAMS = {"w1": jnp.ones((256, 128)), "b1": jnp.zeros(128), "w2": jnp.ones((128, 10))}
PARAMS_BYTES = sum(x.nbytes for x in jax.tree.leaves(PARAMS))
BATCH = jnp.ones((8, 256))
HOST_TRANSFERS = ("send(", "recv(", "infeed(", "outfeed(")
pytestmark = pytest.mark.xdist_group("compiled_step")  # one worker: the compiled steps are shared


def loss(params, x):
  return jnp.sum(jnp.tanh(x @ params["w1"] + params["b1"]) @ params["w2"]) ** 2


def train_step(opt):

  def step(params, state, x):
    grads = jax.grad(loss)(params, x)
    updates, state = opt.update(grads, state, params, obj_fn=lambda p: loss(p, x))
    return optax.apply_updates(params, updates), state

  return step


@functools.lru_cache(maxsize=None)
def compiled(name):
  """The train step of ``OPTIMIZERS[name]`` with donated params and state, compiled
  once per worker and shared by the module's tests (one xdist group)."""
  opt = OPTIMIZERS[name]()
  step = jax.jit(train_step(opt), donate_argnums=(0, 1))
  return step.lower(PARAMS, opt.init(PARAMS), BATCH).compile()


def primitives(jaxpr):
  for eqn in jaxpr.eqns:
    yield eqn.primitive.name
    for sub in jax.extend.core.jaxprs_in_params(eqn.params):
      yield from primitives(sub)


def _fed_validation_loss(gate):
  """``gate`` whose ``validation_loss`` is the gradient's L1 norm (a scalar read from the
  step)."""

  def update(grads, state, params=None, **extra_args):
    del extra_args  # obj_fn: the gate's drop-in takes none
    return gate.update(grads, state, params, validation_loss=sum(
        jnp.sum(jnp.abs(g)) for g in jax.tree.leaves(grads)))

  return optax.GradientTransformationExtraArgs(gate.init, update)


HESSIAN_FREE = {
    # the drop-in with every option that touches its step (the restart selects the step's
    # input, the default's climb_memory=3 scales it: it must stay in place, with no
    # temporary beyond adamw's)
    "metaoptax.adamw()": metaoptax.adamw,
    "metaoptax.adamw(climb_memory=0)": lambda: metaoptax.adamw(climb_memory=0),
    # the gate around it: a few scalars more, read from a held-out loss (here a stand-in
    # reduction of the gradient)
    "metaoptax.overfitting_gate(metaoptax.adamw())": lambda: _fed_validation_loss(
        metaoptax.overfitting_gate(metaoptax.adamw())),
    "HF scalar": lambda: metaoptax.presets.adamw_adam(1e-3),
    "HF per_leaf": lambda: metaoptax.presets.adamw_adam(1e-3, blocks="per_leaf"),
    "HF (Lion, Lion)": lambda: metaoptax.presets.lion_lion(1e-4),
    "metaoptax.lion()": lambda: metaoptax.lion(),
}
LION_BASE = ("HF (Lion, Lion)", "metaoptax.lion()")
# the drop-ins that keep the average of the weights: one more vector
AVERAGED = ("metaoptax.adamw()", "metaoptax.adamw(climb_memory=0)",
            "metaoptax.overfitting_gate(metaoptax.adamw())", "metaoptax.lion()")
EXACT = {"exact 2x2 scalar": lambda: metaoptax.presets.adamw_adam(1e-3, approximation="2x2")}
OPTIMIZERS = {
    **HESSIAN_FREE, **EXACT, "optax.adamw": lambda: optax.adamw(1e-3),
    "optax.lion": lambda: optax.lion(1e-4),
    "HF (Lion, Lion), weight_decay=0": lambda: metaoptax.presets.lion_lion(1e-4, weight_decay=0.0),
}


@pytest.mark.parametrize("name", [*HESSIAN_FREE, *EXACT])
def test_no_host_callbacks_or_transfers(name):
  opt = OPTIMIZERS[name]()
  state = opt.init(PARAMS)
  jaxpr = jax.make_jaxpr(train_step(opt))(PARAMS, state, BATCH)
  assert not [p for p in primitives(jaxpr.jaxpr) if "callback" in p]
  text = compiled(name).as_text()
  assert not re.findall(r'custom_call_target="([^"]+)"', text)
  assert not [op for op in HOST_TRANSFERS if op in text]


#: A Lion base keeps one more params-sized temporary than Adam's. Lion's direction
#: (the sign of an interpolation of the gradient and the *old* moment) and its moment
#: update both read the gradient and the old moment: whichever of the two kernels runs
#: first, the other still needs both, so its output needs a third buffer, and XLA:CPU
#: forms no multi-output fusion that would write both at once. The Hessian-free step
#: orders the in-place moment update after the weight change, which gets a buffer of
#: its own beside the gradient (and no moment is copied). Adam's direction reads the
#: *new* moments: its moment kernels run first, in place, and the weight change takes
#: the gradient's buffer.
LION_TEMPORARY = PARAMS_BYTES


@pytest.mark.parametrize("name", HESSIAN_FREE)
def test_hessian_free_step_is_in_place_and_adds_one_trace(name):
  reference = compiled("optax.adamw").memory_analysis()
  step = compiled(name)
  memory = step.memory_analysis()
  # in place: every output byte aliases a donated input
  assert memory.alias_size_in_bytes >= memory.output_size_in_bytes - 1024
  # temporaries: adamw's (the gradient) and less than one more params-sized buffer
  extra = LION_TEMPORARY if name in LION_BASE else 0
  assert memory.temp_size_in_bytes < reference.temp_size_in_bytes + extra + PARAMS_BYTES / 2
  # no params-sized array copied (the trace is updated in place)
  shapes = {f"f32[{','.join(map(str, x.shape))}]" for x in jax.tree.leaves(PARAMS)
            if x.size >= 128}
  copied = re.findall(r"= (f32\[[0-9,]*\])\{?[^ ]* copy\(", step.as_text())
  assert not shapes & set(copied), copied


@pytest.mark.parametrize("name", HESSIAN_FREE)
def test_hessian_free_state_is_adamw_plus_one_trace(name):
  opt = HESSIAN_FREE[name]()
  state_bytes = sum(x.nbytes for x in jax.tree.leaves(opt.init(PARAMS)))
  adamw_bytes = sum(x.nbytes for x in jax.tree.leaves(optax.adamw(1e-3).init(PARAMS)))
  base_moments = -PARAMS_BYTES if name in LION_BASE else 0  # Lion keeps one moment, not two
  average = PARAMS_BYTES if name in AVERAGED else 0
  assert state_bytes <= adamw_bytes + base_moments + PARAMS_BYTES + average + 1024


@pytest.mark.parametrize("name", ["HF (Lion, Lion)", "HF (Lion, Lion), weight_decay=0"])
def test_lion_base_keeps_one_temporary_more_than_optax_lion(name):
  """``LION_TEMPORARY``, against ``optax.lion``'s own step. With ``weight_decay=0`` XLA
  fuses the weight change into its readers (the trace update and the caller's
  ``apply_updates``) instead of writing it, and copies the donated moment instead,
  as ``optax.lion``'s step does, whose gradient then takes the moment's buffer."""
  reference = compiled("optax.lion").memory_analysis().temp_size_in_bytes
  temp = compiled(name).memory_analysis().temp_size_in_bytes
  assert round((temp - reference) / PARAMS_BYTES) == LION_TEMPORARY / PARAMS_BYTES


@pytest.mark.parametrize("base, beside", [
    (optax.scale_by_lion(), True),
    (optax.inject_hyperparams(optax.scale_by_lion)(b1=0.9, b2=0.99), True),
    (optax.scale_by_adam(), False),
    (optax.scale_by_rms(), False),
    (optax.trace(0.9), False),
    (optax.scale_by_sign(), False),  # no state
])
def test_which_bases_compute_their_direction_beside_their_new_state(base, beside):
  """The Hessian-free step orders the base's in-place state update after the weight
  change only for a base whose direction reads its old state and none of its new one."""
  assert hessian_free.direction_beside_state(base.update, PARAMS, base.init(PARAMS),
                                             PARAMS) is beside
