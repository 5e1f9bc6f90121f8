"""Every Python code block of README.md and docs/*.md runs as written.

Blocks with ``>>>`` prompts are doctests, run (and their outputs compared) by
pytest's ``--doctest-glob=*.md``. The others are run here, each on its own in a
fresh namespace: README.md's in the README's test command, except those that train a
sampler or a learned optimizer (``train(``: each a few XLA compilations of a whole
training step), which join those of docs/ and the doctests of docs/ in the ``system``
tier that CI runs after it (``conftest.py``). A block must import what it uses, so that
it can be copied alone. A block that needs the reader's own objects says so in its first line,
``# yours: params, loss, batches``; those names, and only those, come from
:data:`USER_SUPPLIED`.

A block written against an API that is still being built is preceded by the line
``<!-- pending: metaoptax.l2o.train -->`` (a dotted name, hidden when the page is
rendered): it is skipped while that name does not exist, and runs as soon as it does.
Remove the marker once the name has landed.
"""

import importlib
import pathlib
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
YOURS = re.compile(r"#\s*yours:\s*(.+)")
PENDING = re.compile(r"<!-- pending: ([\w.]+) -->\n$")


def _mlp_params():
  k1, k2 = jax.random.split(jax.random.key(0))
  return {"w1": jax.random.normal(k1, (4, 16)) / 2.0, "b1": jnp.zeros(16),
          "w2": jax.random.normal(k2, (16, 1)) / 4.0, "b2": jnp.zeros(1)}


def _mlp_loss(params, batch):
  x, y = batch
  h = jnp.tanh(x @ params["w1"] + params["b1"])
  return jnp.mean((h @ params["w2"] + params["b2"] - y) ** 2)


def _batches(num=60, size=32, seed=0):
  """Minibatches of one regression; ``seed`` draws other inputs of the same function."""
  rng = np.random.default_rng(0)
  w = rng.normal(size=(4, 1))
  rng = rng if seed == 0 else np.random.default_rng(seed)
  for _ in range(num):
    x = rng.normal(size=(size, 4)).astype(np.float32)
    yield jnp.asarray(x), jnp.asarray(np.sin(x @ w).astype(np.float32))


#: What a snippet may declare as the reader's own: a small MLP regression.
USER_SUPPLIED = {
    "params": _mlp_params,
    "loss": lambda: _mlp_loss,
    "batch": lambda: next(_batches(1)),
    "batches": _batches,
    # minibatches of a validation split: the same function at other inputs
    "val_batches": lambda: _batches(seed=1),
}


def code_blocks(page: pathlib.Path) -> list[tuple[int, str]]:
  """(line number, code) of each ```python block without doctest prompts."""
  text = page.read_text()
  return [(text[:m.start()].count("\n") + 2, m.group(1))
          for m in BLOCK.finditer(text) if ">>>" not in m.group(1)]


def pending_name(page: pathlib.Path, line: int) -> str | None:
  """The dotted name of a ``<!-- pending: NAME -->`` marker on the line above a block."""
  lines = page.read_text().splitlines(keepends=True)
  match = PENDING.search(lines[line - 3]) if line >= 3 else None
  return match.group(1) if match else None


def resolves(dotted: str) -> bool:
  """Whether ``metaoptax.l2o.train`` (a module path, then attributes) exists."""
  parts = dotted.split(".")
  for split in range(len(parts), 0, -1):
    try:
      obj = importlib.import_module(".".join(parts[:split]))
    except ImportError:
      continue
    for attr in parts[split:]:
      if not hasattr(obj, attr):
        return False
      obj = getattr(obj, attr)
    return True
  return False


def declared_names(code: str) -> list[str]:
  first = code.lstrip().splitlines()[0] if code.strip() else ""
  match = YOURS.match(first)
  return [n.strip() for n in match.group(1).split(",")] if match else []


def _trains(code: str) -> bool:
  """A block that trains a sampler or a learned optimizer (``train(``, ``.adapt(``)."""
  return "train(" in code or ".adapt(" in code


BLOCKS = [(page, line, code) for page in PAGES for line, code in code_blocks(page)]


def test_the_readme_has_blocks_to_run():
  """Guards the extraction itself: a regex that matched nothing would pass vacuously."""
  assert len(code_blocks(ROOT / "README.md")) >= 3
  assert declared_names("# yours: params, loss\nx = 1") == ["params", "loss"]
  assert resolves("metaoptax.adamw") and resolves("metaoptax.l2o")
  assert not resolves("metaoptax.no_such_name")


@pytest.mark.parametrize("page, line, code", [
    pytest.param(page, line, code, id=f"{page.name}:{line}",
                 marks=([pytest.mark.slow] if _trains(code) else [])
                 + ([pytest.mark.system] if page.parent.name == "docs" or _trains(code)
                    else []))
    for page, line, code in BLOCKS])
def test_code_block_runs_as_written(page, line, code):
  pending = pending_name(page, line)
  if pending and not resolves(pending):
    pytest.skip(f"pending: {pending} does not exist yet")
  namespace = {"__name__": f"code_block_{page.stem}_{line}"}
  for name in declared_names(code):
    assert name in USER_SUPPLIED, f"{page.name}:{line} declares {name!r}, unknown here"
    namespace[name] = USER_SUPPLIED[name]()
  exec(compile(code, f"{page.name}:{line}", "exec"), namespace)  # noqa: S102
