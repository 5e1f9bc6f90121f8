"""The ``public-api`` directive: autodoc entries for every public name of a module.

A module's public names are its ``__all__`` (``public_names.py``, which the Markdown
reference, ``api_markdown.py``, walks too); every public module of metaoptax has one
(``tests/integration/test_packaging.py`` checks it, and that a public module no
page documents only supplies names its package's ``__all__`` re-exports).
``tests/integration/test_docs_build.py`` checks, against the built inventory, that
every public name of every documented module has an entry.
"""

import inspect

from docutils import nodes
from docutils.parsers.rst import directives
from docutils.statemachine import StringList
from sphinx.ext.napoleon.docstring import GoogleDocstring
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

from public_names import constant_doc, is_documented_object, own_members, public_api, resolve

logger = logging.getLogger(__name__)

__all__ = ["PublicAPI", "public_api", "setup"]


def _entry(qualified: str) -> list[str]:
  obj = resolve(qualified)
  if not is_documented_object(obj):
    return _constant_entry(qualified, obj)
  if inspect.isclass(obj):
    if issubclass(obj, tuple) and hasattr(obj, "_fields"):   # NamedTuple: fields in signature
      methods = ", ".join(name for name, _ in own_members(obj))
      return [f".. autoclass:: {qualified}"] + ([f"   :members: {methods}"] if methods else []) + [""]
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
    summarized = [q.rsplit(".", 1)[1] for q in names if is_documented_object(resolve(q))]
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
