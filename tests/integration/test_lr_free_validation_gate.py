"""``benchmarks/lr_free.py``'s design "climb x2, gamma=1 + average, held once validation
rises" (``_validation_gated``): it is the default while the validation loss falls, and once
its average rises above the margin the step size goes back to where the climb ended and
stays there."""

import jax.numpy as jnp
import numpy as np
import pytest

import lr_free  # benchmarks/ is on sys.path (conftest.py)
from tests.conftest import climb_end_step
from tests.conftest import first_validation_rise
from tests.conftest import run_with_validation_losses
from tests.conftest import validation_rising


@pytest.mark.system  # compiles the design and the default, 400 steps each (~10 s)
def test_it_is_the_default_until_validation_rises_then_holds_the_climbed_step_size():
  steps = 400
  falling = np.linspace(2.0, 1.0, steps)
  default, _ = run_with_validation_losses(
      lr_free._design(climb_backoff=0.5, meta_step_size=1e-3, gamma=1.0, average=0.1)(),
      falling, extra=False)
  gated, states = run_with_validation_losses(lr_free._validation_gated(), falling)
  np.testing.assert_allclose(gated, default, rtol=1e-6)  # the gate never closed
  assert not bool(states[-1].held)
  end = climb_end_step(states)

  # the validation loss turns up at step 300: the gate closes when the oracle says
  turning = np.concatenate([falling[:300], falling[299] + 0.01 * np.arange(1, 101)])
  gated, states = run_with_validation_losses(lr_free._validation_gated(), turning)
  held = np.array([bool(s.held) for s in states])
  first = int(np.argmax(held))
  assert first == first_validation_rise(turning, end + 1) and held[first:].all()
  climbed = float(jnp.exp(jnp.mean(states[-1].climbed)))
  np.testing.assert_allclose(climbed, gated[end], rtol=1e-6)  # where the climb ended
  np.testing.assert_allclose(gated[first:], climbed, rtol=1e-6)  # back there, and held
  np.testing.assert_allclose(gated[:first], default[:first], rtol=1e-6)

  # without restore the step size stays where it was when the gate closed
  gated, states = run_with_validation_losses(lr_free._validation_gated(restore=False), turning)
  np.testing.assert_allclose(gated[:first + 1], default[:first + 1], rtol=1e-6)
  np.testing.assert_allclose(gated[first:], default[first], rtol=1e-6)

  # with patience the rise must last: a spike of 30 steps in a falling validation loss
  # closes the gate without it and not with a patience of 100
  spike = falling.copy()
  spike[250:280] += 0.5
  assert first_validation_rise(spike, end + 1) is not None
  assert first_validation_rise(spike, end + 1, patience=100) is None
  gated, states = run_with_validation_losses(lr_free._validation_gated(patience=100), spike)
  assert not any(bool(s.held) for s in states)
  np.testing.assert_allclose(gated, default, rtol=1e-6)

  # against a slower average (a trend): never on the falling loss, and when the oracle
  # says on the turning one (a faster average than the design's: these runs are short)
  for losses in (falling, turning):
    gated, states = run_with_validation_losses(
        lr_free._validation_gated(rho=0.95, patience=20, slow_rho=0.998), losses)
    held = np.array([bool(s.held) for s in states])
    expected = first_validation_rise(losses, end + 1, rho=0.95, patience=20, slow_rho=0.998)
    if expected is None:
      assert not held.any()
    else:
      assert int(np.argmax(held)) == expected and held[expected:].all()
  assert expected is not None


@pytest.mark.system  # compiles the design twice, 400 steps each (~6 s)
def test_raised_while_the_rise_goes_on_up_to_the_cap():
  steps = 400
  falling = np.linspace(2.0, 1.0, steps)
  # rises from step 300, then falls again from step 360 (the trend ends on its own)
  turning = np.concatenate([falling[:300], falling[299] + 0.01 * np.arange(1, 61),
                            falling[299] + 0.6 - 0.05 * np.arange(1, 41)])
  kappa, cap = 0.01, 1.3
  gated, states = run_with_validation_losses(
      lr_free._validation_gated(rho=0.95, patience=5, raise_per_step=kappa, raise_cap=cap),
      turning)
  end = climb_end_step(states)
  rising = validation_rising(turning, end + 1, rho=0.95, patience=5)
  first = int(np.argmax(rising))
  assert rising.any() and not rising[-1]  # the rise starts and stops within the run
  climbed = float(jnp.exp(jnp.mean(states[-1].climbed)))
  boost = np.minimum(np.cumsum(rising) * kappa, np.log(cap))  # the oracle's log-boost
  np.testing.assert_allclose(gated[first:], climbed * np.exp(boost[first:]), rtol=1e-5)
  assert np.exp(boost[-1]) == pytest.approx(cap)  # it reached the cap and stays there
  # a raise of zero is the plain gate, bit for bit
  plain, _ = run_with_validation_losses(lr_free._validation_gated(rho=0.95, patience=5), turning)
  zero, _ = run_with_validation_losses(
      lr_free._validation_gated(rho=0.95, patience=5, raise_per_step=0.0), turning)
  np.testing.assert_array_equal(plain, zero)


def test_a_design_that_reads_a_validation_loss_needs_a_validation_split():
  """The benchmark's runner refuses, before compiling, a method with
  ``needs_validation_loss`` on a problem without a validation split."""
  from suite_tasks import digits, runner  # pylint: disable=g-import-not-at-top
  method = next(m for m in lr_free.design_methods() if m.needs_validation_loss)
  with pytest.raises(ValueError, match="validation split"):
    runner.train(digits.make_problem(), method, steps=10, seeds=1, chunk=10, progress=None)
