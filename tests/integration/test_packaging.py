"""What importing metaoptax costs, its public names (``__all__``, all documented, no
collisions), and the dependency floors CI tests against."""

import importlib
import importlib.util
import json
import pathlib
import pkgutil
import re
import subprocess
import sys
import tomllib
import types

import metaoptax

ROOT = pathlib.Path(__file__).resolve().parents[2]

_STAGES = """
import json, sys
def loaded():
  return sorted({name.split(".")[0] for name in sys.modules})
import metaoptax
metaoptax.presets.adamw_adam(1e-6)
stages = {"import": loaded()}
metaoptax.checkpoint
stages["checkpoint"] = loaded()
metaoptax.l2hmc
stages["l2hmc"] = loaded()
try:  # numpyro is an optional extra (absent from the dependency floors' environment)
  metaoptax.l2hmc.NumPyroL2HMC
except ImportError:
  pass
stages["numpyro_kernel"] = loaded()
from metaoptax import l2o
stages["l2o"] = loaded()
print(json.dumps(stages))
"""


def test_flax_and_orbax_load_only_with_their_subpackages():
  """``import metaoptax`` (PEP 562 lazy subpackages) loads jax and optax, not flax or orbax;
  ``metaoptax.l2hmc`` loads numpyro only when its numpyro kernel is asked for."""
  out = subprocess.run([sys.executable, "-c", _STAGES], cwd=ROOT, capture_output=True,
                       text=True, check=True, timeout=600).stdout
  stages = {name: set(modules) for name, modules in json.loads(out.splitlines()[-1]).items()}
  assert {"jax", "optax", "metaoptax"} <= stages["import"]
  assert not stages["import"] & {"flax", "orbax"}
  assert not stages["checkpoint"] & {"flax", "orbax"}  # orbax: only when saving or loading
  assert "flax" in stages["l2hmc"]
  # numpyro is optional: metaoptax.l2hmc loads it only for its numpyro kernel
  assert "numpyro" not in stages["l2hmc"]
  if importlib.util.find_spec("numpyro") is not None:
    assert "numpyro" in stages["numpyro_kernel"]
  assert "flax" in stages["l2o"]


# what needs the optional numpyro extra (absent from the dependency floors' environment)
_HAS_NUMPYRO = importlib.util.find_spec("numpyro") is not None
_NUMPYRO_ONLY = {"metaoptax.l2hmc.numpyro_kernel", "NumPyroL2HMC", "NumPyroL2HMCState"}


def _public_modules() -> list[types.ModuleType]:
  """metaoptax and every module of it with no ``_``-prefixed part in its name."""
  names = [info.name for info in pkgutil.walk_packages(metaoptax.__path__, "metaoptax.")]
  return [metaoptax] + [importlib.import_module(name) for name in names
                        if not any(part.startswith("_") for part in name.split("."))
                        and (_HAS_NUMPYRO or name not in _NUMPYRO_ONLY)]


def _documented_modules() -> set[str]:
  """The modules the API reference documents (``.. public-api::`` in docs/api/), by
  their ``__name__`` (``metaoptax.presets`` is ``metaoptax.step_size.presets``)."""
  documented = set()
  for page in (ROOT / "docs" / "api").glob("*.rst"):
    for dotted in re.findall(r"^\.\. public-api:: (\S+)", page.read_text(), re.M):
      parent, _, name = dotted.rpartition(".")
      module = getattr(importlib.import_module(parent), name) if parent else metaoptax
      documented.add(module.__name__)
  return documented


def test_public_names_are_exactly_the_documented_ones():
  """Every public module lists ``__all__``, of its own names (no ``jax``, ``np`` or ``os``).
  A module the API reference does not document supplies only names that its package
  re-exports in its ``__all__``, so every public name reaches a documented module."""
  documented = _documented_modules()
  assert len(documented) >= 10
  for module in _public_modules():
    assert hasattr(module, "__all__"), f"{module.__name__} has no __all__"
    assert len(set(module.__all__)) == len(module.__all__), module.__name__
    for name in module.__all__:
      if not _HAS_NUMPYRO and name in _NUMPYRO_ONLY:
        continue
      value = getattr(module, name)
      if isinstance(value, types.ModuleType):
        assert value.__name__.startswith("metaoptax."), (module.__name__, name)
    if module.__name__ not in documented:
      package = sys.modules[module.__name__.rpartition(".")[0]]
      unexported = [name for name in module.__all__ if name not in package.__all__
                    or getattr(package, name) is not getattr(module, name)]
      assert not unexported, (f"{module.__name__} exports {unexported}, which no page "
                              "documents: re-export them from its package or document it")
  assert "trace" not in metaoptax.__all__   # optax.trace is momentum


def test_no_name_is_both_a_module_and_another_object():
  """``import metaoptax.a.b as m`` gives the module that ``metaoptax.a.b`` names."""
  for module in _public_modules()[1:]:
    parent, _, name = module.__name__.rpartition(".")
    assert getattr(sys.modules[parent], name) is module, (
        f"{module.__name__} is hidden by {getattr(sys.modules[parent], name)!r}")


def test_floors_match_pyproject():
  """``.ci/floors.txt`` pins exactly the lower bounds ``pyproject.toml`` declares."""
  declared = {}
  for requirement in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
      "dependencies"]:
    name, floor = re.fullmatch(r"([A-Za-z0-9_.-]+)>=([0-9.]+)", requirement).groups()
    declared[name] = floor
  pinned = {}
  for line in (ROOT / ".ci" / "floors.txt").read_text().splitlines():
    if line.strip() and not line.startswith("#"):
      name, version = line.split("==")
      pinned[name] = version
  assert pinned == declared
