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

The doctests of the pages in ``docs/`` train samplers and learned optimizers as a
reader would (each a few XLA compilations of a whole training step): they are in the
``system`` tier with the multi-process tests and the Sphinx build, which CI runs right
after the README's test command (:func:`pytest_collection_modifyitems`). So does ``adapt``'s
docstring example (:data:`SYSTEM_DOCTESTS`, about 45 s of CPU: the sampler's whole default
adaptation); the default tier tests the same calls on smaller targets.
"""

import os
import pathlib

import pytest

#: XLA flags of the test run: no LLVM optimization on the CPU backend.
FAST_COMPILE_FLAGS = ("--xla_backend_optimization_level=0",
                      "--xla_llvm_disable_expensive_passes=true",
                      "--xla_cpu_use_fusion_emitters=false")
FULL_OPTIMIZATION = os.environ.get("METAOPTAX_TEST_FULL_OPTIMIZATION") == "1"

if not FULL_OPTIMIZATION:
  _flags = os.environ.get("XLA_FLAGS", "").split()
  os.environ["XLA_FLAGS"] = " ".join(_flags + [f for f in FAST_COMPILE_FLAGS if f not in _flags])


_DOCS = pathlib.Path(__file__).resolve().parent / "docs"

#: Docstring examples in the ``system`` tier: ``l2hmc.adapt``'s whole default on a target.
SYSTEM_DOCTESTS = ("metaoptax.l2hmc.default_adaptation.adapt",
                   "metaoptax.l2hmc.numpyro_kernel.NumPyroL2HMC")


def pytest_collection_modifyitems(items):
  """The doctests of ``docs/*.md`` and :data:`SYSTEM_DOCTESTS` join the ``system`` tier
  (``-m system``)."""
  for item in items:
    if pathlib.Path(item.path).parent == _DOCS or item.name in SYSTEM_DOCTESTS:
      item.add_marker(pytest.mark.system)
