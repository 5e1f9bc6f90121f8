"""The public names of metaoptax, and the ``#:`` doc comments of its constants.

A module's public names are its ``__all__``; every public module of metaoptax has one
(``tests/integration/test_packaging.py`` checks it). Both API references walk them
from here: the Sphinx site (``public_api.py``) and the Markdown pages that read on
the repository page (``api_markdown.py``). Needs no Sphinx.
"""

import ast
import importlib
import importlib.util
import inspect
import types

PACKAGE = "metaoptax"


def resolve(dotted: str):
  """The object a public dotted name refers to (``metaoptax.presets`` is an attribute)."""
  parts = dotted.split(".")
  obj = importlib.import_module(parts[0])
  for i, part in enumerate(parts[1:], start=1):
    try:
      obj = getattr(obj, part)
    except AttributeError:
      obj = importlib.import_module(".".join(parts[:i + 1]))
  return obj


def public_names(module_name: str) -> list[str]:
  """The public names of the module ``module_name`` refers to: its ``__all__``."""
  module = resolve(module_name)
  if not hasattr(module, "__all__"):
    raise ValueError(f"{module_name} ({module.__name__}) has no __all__.")
  return list(module.__all__)


def public_api(module_name: str) -> dict[str, list[str]]:
  """Every public object reachable from ``module_name``, by module.

  Returns ``{module: [fully qualified names]}`` for the module and, recursively,
  for each public name that is itself a submodule of the package.
  """
  module = resolve(module_name)
  result = {module_name: []}
  for name in public_names(module_name):
    obj = getattr(module, name)
    qualified = f"{module_name}.{name}"
    if isinstance(obj, types.ModuleType):
      if obj.__name__.split(".")[0] == PACKAGE:
        result.update(public_api(qualified))
      continue
    result[module_name].append(qualified)
  return result


def is_documented_object(obj) -> bool:
  """A class or function (documented from its docstring), not a constant or type alias."""
  return (inspect.isclass(obj) and not isinstance(obj, types.GenericAlias)) or inspect.isroutine(obj)


def _comment_above(lines: list[str], lineno: int) -> list[str]:
  """The ``#:`` lines right above line ``lineno`` (1-based), without their marker."""
  found = []
  i = lineno - 2
  while i >= 0 and lines[i].strip().startswith("#:"):
    found.append(lines[i].strip()[2:].removeprefix(" "))
    i -= 1
  return found[::-1]


def _package_of(module: types.ModuleType) -> str:
  return module.__name__ if hasattr(module, "__path__") else module.__name__.rpartition(".")[0]


def constant_doc(qualified: str) -> list[str] | None:
  """The ``#:`` doc comment of a public constant, following re-exports to its definition.

  The comment is the run of ``#:`` lines right above the assignment, or a ``#:`` comment
  on the assignment's own line.
  """
  module_name, name = qualified.rsplit(".", 1)
  module = resolve(module_name)
  source = inspect.getsource(module)
  lines = source.splitlines()
  for node in ast.parse(source).body:
    targets = (node.targets if isinstance(node, ast.Assign)
               else [node.target] if isinstance(node, ast.AnnAssign) else [])
    if any(isinstance(t, ast.Name) and t.id == name for t in targets):
      above = _comment_above(lines, node.lineno)
      if above:
        return above
      line = lines[node.lineno - 1]
      if "#:" in line:
        return [line.split("#:", 1)[1].strip()]
      return None
    if isinstance(node, ast.ImportFrom):
      for alias in node.names:
        if (alias.asname or alias.name) == name:
          source_module = importlib.util.resolve_name(
              "." * node.level + (node.module or ""), _package_of(module))
          return constant_doc(f"{source_module}.{alias.name}")
  return None


def own_members(cls) -> list[tuple[str, object]]:
  """The public methods and properties a class defines itself (not its fields): what a
  class's entry documents below its docstring, e.g. ``L2OConfig.transformation``."""
  fields = set(getattr(cls, "_fields", ())) | set(getattr(cls, "__dataclass_fields__", {}))
  members = []
  for name, value in vars(cls).items():
    if name.startswith("_") or name in fields:
      continue
    if isinstance(value, (staticmethod, classmethod)):
      value = value.__func__
    if inspect.isfunction(value) or isinstance(value, property):
      members.append((name, value))
  return members
