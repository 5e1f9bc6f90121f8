"""What importing metaoptax costs, a renamed public name, and the dependency floors CI
tests against."""

import json
import pathlib
import re
import subprocess
import sys
import tomllib

import jax.numpy as jnp
import pytest

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
from metaoptax import l2o
stages["l2o"] = loaded()
print(json.dumps(stages))
"""


def test_flax_and_orbax_load_only_with_their_subpackages():
  """``import metaoptax`` (PEP 562 lazy subpackages) loads jax and optax, not flax or orbax."""
  out = subprocess.run([sys.executable, "-c", _STAGES], cwd=ROOT, capture_output=True,
                       text=True, check=True, timeout=600).stdout
  stages = {name: set(modules) for name, modules in json.loads(out.splitlines()[-1]).items()}
  assert {"jax", "optax", "metaoptax"} <= stages["import"]
  assert not stages["import"] & {"flax", "orbax"}
  assert not stages["checkpoint"] & {"flax", "orbax"}  # orbax: only when saving or loading
  assert "flax" in stages["l2hmc"]
  assert "flax" in stages["l2o"]


def test_trace_is_a_deprecated_alias_of_sensitivity_trace():
  opt = metaoptax.presets.adamw_adam(1e-6)
  state = opt.init({"w": jnp.ones(3)})
  with pytest.warns(DeprecationWarning, match="sensitivity_trace"):
    old = metaoptax.trace(state)
  assert old is metaoptax.sensitivity_trace(state)
  assert "trace" not in metaoptax.__all__   # optax.trace is momentum


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
