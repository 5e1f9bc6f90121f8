"""The bytes an optimizer step reads and writes, pinned against ``optax.adamw``'s.

XLA's cost analysis of the compiled, donated step (update + ``optax.apply_updates``,
lowered from abstract shapes: compilation only) on the 1M-parameter MLP of
``benchmarks/step_time_scale.py --bytes`` (512x512 x4), in ratio to ``optax.adamw(1e-3)``'s.

Tolerance: ``TOLERANCE = 0.05`` of the ratio, i.e. half of one float32 params-sized
pass (``optax.adamw``'s step is 10 passes on XLA:CPU, so one pass is 0.1 of the
ratio). A kernel more or less over a params-sized buffer moves the ratio by at least
0.1 and fails; what differs between XLA versions or CPUs without changing the
kernels (the biases' and scalars' bytes, 0.01 in all here) passes. The figures are
identical with the test run's fast-compile flags and XLA's default optimization
(measured with jax 0.10.2). The pin is two-sided: a step that reads less fails too,
so that the pinned figure is updated with it.
"""

import pytest

from _optimizer_step import accessed_bytes, compiled_update, mlp_shapes, optimizers

#: Ratio to optax.adamw's bytes accessed at 1M parameters (jax 0.10.2, XLA:CPU).
PINNED = {
    "metaoptax.adamw()": 2.20,
    # the trace read off the average, not stored: no trace kernel, and the average's kernel
    # reads the new params, so Adam's direction has one reader and is not written
    "metaoptax.adamw(gamma=None)": 1.70,
    "metaoptax.adamw(gamma=None, mu_dtype=bfloat16)": 1.75,
    "metaoptax.lion()": 1.90,
    # a stored trace (trace_dtype): the bfloat16 trace costs more on XLA:CPU, its
    # reduction reads a float32 copy
    "metaoptax.adamw(trace_dtype=bfloat16)": 2.25,
    "metaoptax.adamw(trace_dtype=bfloat16, average_dtype=bfloat16)": 2.15,
    # and Adam's first moment: half a pass more, not one less (XLA:CPU writes the new moment
    # in float32 for the direction's kernel, then reads it again to round it)
    "metaoptax.adamw(mu_dtype=bfloat16, trace_dtype=bfloat16, average_dtype=bfloat16)": 2.20,
    "metaoptax.sgd()": 1.20,
    "metaoptax.overfitting_gate(metaoptax.adamw())": 2.20,
}
TOLERANCE = 0.05
pytestmark = pytest.mark.xdist_group("step_bytes")


@pytest.fixture(scope="module")
def reference():
  opt, extra_arg = optimizers()["optax.adamw(1e-3)"]
  return accessed_bytes(compiled_update(opt, mlp_shapes(512, 4), extra_arg))


# the slow cases (system tier): the stored trace's bfloat16 options other than the
# documented all-bfloat16 state, whose fast case runs
SYSTEM_TIER = ("metaoptax.adamw(trace_dtype=bfloat16)",
               "metaoptax.adamw(trace_dtype=bfloat16, average_dtype=bfloat16)")


@pytest.mark.parametrize("name", [
    pytest.param(name, marks=[pytest.mark.system] if name in SYSTEM_TIER else [])
    for name in PINNED])
def test_step_bytes_ratio_to_adamw(name, reference):
  opt, extra_arg = optimizers()[name]
  ratio = accessed_bytes(compiled_update(opt, mlp_shapes(512, 4), extra_arg)) / reference
  assert abs(ratio - PINNED[name]) <= TOLERANCE, (name, ratio)
