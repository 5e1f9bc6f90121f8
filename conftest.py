"""Settings for the whole test run: the tests, the doctests of ``metaoptax/`` and
the Markdown pages of ``docs/`` (this file sits at the root so that it covers all
three, and it runs before anything imports JAX).

The tests run small problems, so XLA's compile time, not the run time, is most
of their cost. Two settings of the CPU backend's code generation cut it
(:data:`FAST_COMPILE_FLAGS`): LLVM's optimization passes are skipped (that halves
the compile time of the float64 oracles), and the fused loops are emitted by
XLA's elemental emitters instead of its MLIR fusion emitters (a training step of
L2HMC compiles in 3.3 s of CPU time instead of 5.1 s; the whole test run takes
38 % less CPU time). XLA's HLO passes (fusion, buffer assignment, donation, the collectives
that the sharding tests read) still run, so the compiled-step tests see the graph
a user gets. Set ``METAOPTAX_TEST_FULL_OPTIMIZATION=1`` to test with XLA's default
optimization instead. The subprocess tests pass ``XLA_FLAGS`` on to their workers
(``tests/conftest.py: xla_flags``).

A test marked ``full_optimization`` compares bits with a fixture that was written
under XLA's default optimization (the rounding of fused operations differs
without LLVM's passes): it runs alone, in a pytest subprocess without the flags.
"""

import os
import subprocess
import sys

import pytest

#: XLA flags of the test run: no LLVM optimization on the CPU backend.
FAST_COMPILE_FLAGS = ("--xla_backend_optimization_level=0",
                      "--xla_llvm_disable_expensive_passes=true",
                      "--xla_cpu_use_fusion_emitters=false")
FULL_OPTIMIZATION = os.environ.get("METAOPTAX_TEST_FULL_OPTIMIZATION") == "1"

if not FULL_OPTIMIZATION:
  _flags = os.environ.get("XLA_FLAGS", "").split()
  os.environ["XLA_FLAGS"] = " ".join(_flags + [f for f in FAST_COMPILE_FLAGS if f not in _flags])


def pytest_pyfunc_call(pyfuncitem):
  """Runs a ``full_optimization`` test in a subprocess under XLA's defaults."""
  if FULL_OPTIMIZATION or pyfuncitem.get_closest_marker("full_optimization") is None:
    return None
  env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
  env["METAOPTAX_TEST_FULL_OPTIMIZATION"] = "1"
  env["XLA_FLAGS"] = " ".join(f for f in env["XLA_FLAGS"].split() if f not in FAST_COMPILE_FLAGS)
  done = subprocess.run(
      [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", pyfuncitem.nodeid],
      cwd=pyfuncitem.config.rootpath, env=env, capture_output=True, text=True, timeout=600)
  summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
  assert done.returncode == 0, f"under XLA's default optimization:\n{done.stdout[-4000:]}"
  if " skipped" in summary and " passed" not in summary:
    pytest.skip(f"under XLA's default optimization: {done.stdout[-600:]}")
  return True
