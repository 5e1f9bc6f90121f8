"""The ``public-api`` directive: autodoc entries for every public name of a module.

A module's public names are its ``__all__``; every public module of metaoptax has one
(``tests/integration/test_packaging.py`` checks it, and that a public module no
page documents only supplies names its package's ``__all__`` re-exports).
``tests/integration/test_docs_build.py`` checks, against the built inventory, that
every public name of every documented module has an entry.
"""

import ast
import importlib
import importlib.util
import inspect
import types

from docutils import nodes
from docutils.parsers.rst import directives
from docutils.statemachine import StringList
from sphinx.ext.napoleon.docstring import GoogleDocstring
from sphinx.pycode import ModuleAnalyzer
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

logger = logging.getLogger(__name__)

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


def constant_doc(qualified: str) -> list[str] | None:
  """The ``#:`` doc comment of a public constant, following re-exports to its definition."""
  module_name, name = qualified.rsplit(".", 1)
  module = resolve(module_name)
  docs = ModuleAnalyzer.for_module(module.__name__).find_attr_docs()
  if ("", name) in docs:
    return list(docs[("", name)])
  for node in ast.parse(inspect.getsource(module)).body:
    if isinstance(node, ast.ImportFrom):
      for alias in node.names:
        if (alias.asname or alias.name) == name:
          source = importlib.util.resolve_name("." * node.level + (node.module or ""),
                                               module.__name__ if hasattr(module, "__path__")
                                               else module.__name__.rpartition(".")[0])
          return constant_doc(f"{source}.{alias.name}")
  return None


def _is_documented_object(obj) -> bool:
  """A class or function (documented by autodoc), not a constant or type alias."""
  return (inspect.isclass(obj) and not isinstance(obj, types.GenericAlias)) or inspect.isroutine(obj)


def _entry(qualified: str) -> list[str]:
  obj = resolve(qualified)
  if not _is_documented_object(obj):
    return _constant_entry(qualified, obj)
  if inspect.isclass(obj):
    if issubclass(obj, tuple) and hasattr(obj, "_fields"):   # NamedTuple: fields in signature
      return [f".. autoclass:: {qualified}", ""]
    return [f".. autoclass:: {qualified}", "   :members:", ""]
  return [f".. autofunction:: {qualified}", ""]


def _constant_entry(qualified: str, obj) -> list[str]:
  doc = constant_doc(qualified)
  if doc is None:
    logger.warning(f"public constant {qualified} has no '#:' doc comment", type="public_api")
    doc = []
  value = repr(obj)
  module_name, name = qualified.rsplit(".", 1)
  lines = [f".. py:data:: {name}", f"   :module: {module_name}"]
  if len(value) <= 60:
    lines.append(f"   :value: {value}")
  return lines + [""] + [f"   {line}" for line in doc] + [""]


class PublicAPI(SphinxDirective):
  """``.. public-api:: module``: a summary table and an entry per public name.

  Public names that are submodules are not expanded here: each gets its own
  section and directive, so that it appears in the table of contents.
  """

  required_arguments = 1
  option_spec = {"module-docstring": directives.flag}

  def run(self):
    module_name = self.arguments[0]
    module = resolve(module_name)
    names = public_api(module_name)[module_name]
    lines = [f".. currentmodule:: {module_name}", ""]
    if "module-docstring" in self.options and module.__doc__:
      lines += GoogleDocstring(inspect.cleandoc(module.__doc__), self.config).lines() + [""]
    # Constants are listed on the page but not in the table (autosummary would show
    # the docstring of their type).
    summarized = [q.rsplit(".", 1)[1] for q in names if _is_documented_object(resolve(q))]
    lines += [".. autosummary::", "   :nosignatures:", ""]
    lines += [f"   {name}" for name in summarized] + [""]
    for qualified in names:
      lines += _entry(qualified)
    container = nodes.container()
    self.state.nested_parse(StringList(lines, source=f"<public-api {module_name}>"),
                            self.content_offset, container)
    return container.children


def setup(app):
  app.add_directive("public-api", PublicAPI)
  return {"parallel_read_safe": True, "parallel_write_safe": True}
