"""The API reference as Markdown pages that read on the repository page: ``docs/reference/``.

Run from the repository root after changing a docstring or a public name::

    python docs/_ext/api_markdown.py            # rewrites docs/reference/*.md
    python docs/_ext/api_markdown.py --check    # exits 1 if the committed pages are stale

The pages follow the Sphinx pages of ``docs/api/*.rst``: one page per ``.rst`` file, its
title and introduction, then one section per ``.. public-api:: <module>`` directive, with
an entry for every name of that module's ``__all__`` (``public_names.py``, the walk the
Sphinx directive makes too). An entry is the name's signature (names and defaults, no
annotations: the text then depends on the docstrings and the code alone, not on the
versions of Python or jax at hand) and its whole docstring, the Google-style sections
(``Args:``, ``Attributes:``, ``Returns:`` ...) as lists and the reStructuredText roles
as Markdown (``:math:`` as GitHub's ``$`...`$``, ``:func:`` as a link to the entry).
``tests/integration/test_api_markdown.py`` fails when a committed page differs from what
this script writes. Needs no Sphinx.
"""

import argparse
import inspect
import pathlib
import re
import sys
import types

HERE = pathlib.Path(__file__).resolve().parent
DOCS = HERE.parent
ROOT = DOCS.parent
API = DOCS / "api"           # the Sphinx pages this reference follows
OUT = DOCS / "reference"     # the Markdown pages it writes
COMMAND = "python docs/_ext/api_markdown.py"

for _path in (str(HERE), str(ROOT)):
  if _path not in sys.path:
    sys.path.insert(0, _path)

from public_names import (constant_doc, is_documented_object, own_members,  # noqa: E402
                          public_api, resolve)

__all__ = ["COMMAND", "main", "render_all", "stale_pages"]

HEADER = ("<!-- Generated from the docstrings by `{command}`: edit the docstrings, not this "
          "file. -->\n")
#: Google-style section headers, and how each is shown.
SECTIONS = {"Args": "Arguments", "Arguments": "Arguments", "Attributes": "Attributes",
            "Returns": "Returns", "Yields": "Yields", "Raises": "Raises",
            "Examples": "Examples", "Example": "Example", "References": "References",
            "Note": "Note", "Notes": "Notes", "Warning": "Warning", "See Also": "See also"}
#: Sections whose body is a list of ``name: description`` items.
ITEM_SECTIONS = {"Args", "Arguments", "Attributes", "Raises"}
SECTION_LINE = re.compile(rf"^({'|'.join(SECTIONS)}):\s*$")
ITEM = re.compile(r"^(\*{0,2}[\w.]+(?:, \*{0,2}[\w.]+)*)(?: \(([^)]*)\))?:(?:\s+(.*))?$")
ROLE = re.compile(r":(?:py:)?(func|class|meth|attr|data|mod|obj|exc|const):`([^`]+)`")


# ---------------------------------------------------------------- the pages' structure


class Section(types.SimpleNamespace):
  """One ``.. public-api::`` directive of a page: ``module``, ``heading``, ``docstring``."""


def read_rst_page(path: pathlib.Path) -> tuple[str, list[str], list[Section]]:
  """The title, the introduction's lines and the sections of a ``docs/api/*.rst`` page."""
  lines = path.read_text().splitlines()
  title, intro, sections = lines[0], [], []
  heading = None
  i = 2
  while i < len(lines):
    line = lines[i]
    directive = re.match(r"^\.\. public-api:: (\S+)", line)
    if directive:
      options = []
      while i + 1 < len(lines) and lines[i + 1].startswith("   :"):
        options.append(lines[i + 1].strip())
        i += 1
      sections.append(Section(module=directive.group(1), heading=heading,
                              docstring=":module-docstring:" in options))
    elif i + 1 < len(lines) and re.fullmatch(r"-{3,}", lines[i + 1]) and line:
      heading = line
      i += 1
    elif not sections and heading is None and not line.startswith(".. "):
      intro.append(line)
    i += 1
  while intro and not intro[-1]:
    intro.pop()
  return title, intro, sections


def page_names() -> list[str]:
  """The API pages in the order of ``docs/api/index.rst``'s table of contents."""
  text = (API / "index.rst").read_text()
  toc = text.split(".. toctree::", 1)[1]
  return [line.strip() for line in toc.splitlines()[1:]
          if line.strip() and not line.strip().startswith(":")]


# ---------------------------------------------------------------- anchors and links


def github_anchor(heading: str, seen: dict[str, int]) -> str:
  """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to ``-``,
  ``-1``, ``-2`` ... on repeats."""
  anchor = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
  count = seen.get(anchor, 0)
  seen[anchor] = count + 1
  return anchor if count == 0 else f"{anchor}-{count}"


class Index:
  """Where each public name is documented: ``{qualified name: (page, anchor)}``."""

  def __init__(self):
    self.targets: dict[str, tuple[str, str]] = {}
    self.first: dict[int, str] = {}   # id(object) -> the qualified name it is documented under

  def link(self, name: str, context: list[str], page: str) -> str | None:
    """A relative link to ``name`` (as written in a docstring: ``train``, ``l2o.train``,
    ``metaoptax.adamw``), looked up in the modules of ``context`` first."""
    name = name.removesuffix("()")
    candidates = [f"{module}.{name}" for module in context] + [f"metaoptax.{name}", name]
    for candidate in candidates:
      if candidate in self.targets:
        target_page, anchor = self.targets[candidate]
        return f"#{anchor}" if target_page == page else f"{target_page}.md#{anchor}"
    return None


# ---------------------------------------------------------------- inline markup


def inline(text: str, index: Index | None = None, context: list[str] = (),
           page: str = "") -> str:
  """reStructuredText inline markup as Markdown."""
  code_spans = []

  def keep(markdown: str) -> str:
    code_spans.append(markdown)
    return f"\0{len(code_spans) - 1}\0"

  def math(match):
    return keep(f"$`{' '.join(match.group(1).split())}`$")

  def role(match):
    target = " ".join(match.group(2).split())
    explicit = re.fullmatch(r"(.+?)\s*<(.+)>", target)
    shown, target = (explicit.group(1), explicit.group(2)) if explicit else (None, target)
    short = target.lstrip("~").lstrip(".")
    if shown is None:
      shown = short.rsplit(".", 1)[-1] if target.startswith("~") else short
    link = index.link(short, context, page) if index else None
    return keep(f"[`{shown}`]({link})" if link else f"`{shown}`")

  def doc(match):
    target = match.group(1)
    explicit = re.fullmatch(r"(.+?)\s*<(.+)>", target)
    shown, target = (explicit.group(1), explicit.group(2)) if explicit else (None, target)
    path = target.lstrip("/")
    return keep(f"[{shown or path}](../{path}.md)")

  text = re.sub(r":math:`([^`]+)`", math, text)
  text = ROLE.sub(role, text)
  text = re.sub(r":doc:`([^`]+)`", doc, text)
  text = re.sub(r"``(.+?)``", lambda m: keep(f"`{' '.join(m.group(1).split())}`"), text, flags=re.S)
  text = re.sub(r"`([^`<]+?)\s*<([^>`]+)>`__?", lambda m: keep(f"[{m.group(1)}]({m.group(2)})"),
                text)
  text = re.sub(r"(?<![\w`])`([^`]+)`(?!`)", lambda m: keep(f"`{m.group(1)}`"), text)
  return re.sub(r"\0(\d+)\0", lambda m: code_spans[int(m.group(1))], text)


# ---------------------------------------------------------------- docstring blocks


def _indent(line: str) -> int:
  return len(line) - len(line.lstrip())


def _dedent(lines: list[str]) -> list[str]:
  depth = min((_indent(l) for l in lines if l.strip()), default=0)
  return [l[depth:] for l in lines]


def _fence(kind: str, lines: list[str]) -> list[str]:
  body = _dedent(lines)
  while body and not body[-1].strip():
    body.pop()
  while body and not body[0].strip():
    body.pop(0)
  return [f"```{kind}", *body, "```"]


def _math(lines: list[str]) -> list[str]:
  """A ``.. math::`` block as a ```math fence. Rows aligned with ``&`` and ``\\\\`` (which
  Sphinx sets in an ``align`` environment) go in an ``aligned`` one."""
  text = "\n".join(lines)
  if "\\begin{" not in text and ("&" in text or "\\\\" in text):
    body = _dedent(lines)
    while body and not body[-1].strip():
      body.pop()
    while body and not body[0].strip():
      body.pop(0)
    return ["```math", "\\begin{aligned}", *body, "\\end{aligned}", "```"]
  return _fence("math", lines)


def _indented_block(lines: list[str], start: int, base: int) -> int:
  """The end of the block of lines, from ``start``, indented deeper than ``base`` (blank
  lines inside it included, trailing ones not)."""
  end = start
  i = start
  while i < len(lines) and (not lines[i].strip() or _indent(lines[i]) > base):
    if lines[i].strip():
      end = i + 1
    i += 1
  return end


def text_blocks(lines: list[str], convert) -> list[str]:
  """Free text: paragraphs, lists, ``.. math::``, literal blocks (``::``) and doctests."""
  out = []
  i = 0
  while i < len(lines):
    line = lines[i]
    stripped = line.strip()
    base = _indent(line)
    math = re.match(r"\.\. math::\s*(.*)$", stripped)
    if math:
      end = _indented_block(lines, i + 1, base)
      body = ([math.group(1)] if math.group(1) else []) + lines[i + 1:end]
      out += _math(body)
      i = end
    elif stripped.startswith(".. "):      # another directive: its content as a quote
      end = _indented_block(lines, i + 1, base)
      out += ["> " + convert(l.strip()) for l in [stripped[3:], *lines[i + 1:end]] if l.strip()]
      i = end
    elif stripped.startswith(">>>"):
      end = i
      while end < len(lines) and lines[end].strip():
        end += 1
      out += _fence("python", lines[i:end])
      i = end
    elif stripped.endswith("::") and not stripped.startswith(".."):
      text = stripped[:-2].rstrip()
      if text:
        out.append(" " * min(base, 2) + convert(text + ":"))
      end = _indented_block(lines, i + 1, base)
      out += _fence("text", lines[i + 1:end])
      i = end
    elif not stripped:
      out.append("")
      i += 1
    else:
      end = i
      while end < len(lines) and _plain(lines[end]):
        end += 1
      end = max(end, i + 1)
      paragraph = "\n".join(" " * min(_indent(l), 3) + l.strip() for l in lines[i:end])
      out += convert(paragraph).split("\n")
      i = end
  return out


def _plain(line: str) -> bool:
  """A line of running text (a paragraph's or a list item's), converted with its paragraph."""
  stripped = line.strip()
  return bool(stripped) and not (stripped.startswith((".. ", ">>>"))
                                 or (stripped.endswith("::") and not stripped.startswith("..")))


def _item_section(lines: list[str], convert) -> list[str]:
  """``name (type): description`` items, each with its deeper-indented continuation."""
  body = _dedent(lines)
  items: list[list[str]] = []
  for line in body:
    if not line.strip():
      continue
    match = ITEM.match(line) if _indent(line) == 0 else None
    if match:
      name, kind, text = match.groups()
      kind = f" ({kind})" if kind else ""
      names = ", ".join(f"`{n}`" for n in name.split(", "))
      items.append([f"- {names}{kind}: {text or ''}".rstrip()])
    elif items and _indent(line) > 0:
      items[-1].append("  " + line.strip())
    else:
      items.append([line.strip()])
  return [converted for item in items for converted in convert("\n".join(item)).split("\n")]


def docstring_markdown(doc: str, convert) -> list[str]:
  """A Google-style docstring as Markdown lines."""
  lines = inspect.cleandoc(doc).splitlines()
  out = []
  i = 0
  while i < len(lines):
    header = SECTION_LINE.match(lines[i])
    if not header:
      end = i
      while end < len(lines) and not SECTION_LINE.match(lines[end]):
        end += 1
      out += text_blocks(lines[i:end], convert)
      i = end
      continue
    end = _indented_block(lines, i + 1, 0)
    body = lines[i + 1:end]
    name = header.group(1)
    out += ["", f"**{SECTIONS[name]}**", ""]
    if name in ITEM_SECTIONS:
      out += _item_section(body, convert)
    else:
      out += text_blocks(_dedent(body), convert)
    out.append("")
    i = end
  return _squeeze(out)


def _squeeze(lines: list[str]) -> list[str]:
  """No runs of blank lines, none at either end."""
  out = []
  for line in lines:
    if line.strip() or (out and out[-1].strip()):
      out.append(line.rstrip())
  while out and not out[-1]:
    out.pop()
  return out


def first_sentence(doc: str | None) -> str:
  """The summary line of a docstring (its first paragraph, on one line)."""
  if not doc:
    return ""
  paragraph = inspect.cleandoc(doc).split("\n\n", 1)[0]
  return " ".join(paragraph.split())


# ---------------------------------------------------------------- signatures


class _Shown:
  """A default value shown by a fixed text (its ``repr``)."""

  def __init__(self, text):
    self.text = text

  def __repr__(self):
    return self.text


def value_repr(value) -> str:
  """``repr(value)`` without memory addresses (a function shows its name)."""
  if inspect.isroutine(value) or inspect.isclass(value):
    module = getattr(value, "__module__", "") or ""
    name = getattr(value, "__qualname__", getattr(value, "__name__", repr(value)))
    return f"{module}.{name}" if module and not module.startswith("metaoptax") else name
  text = repr(value)
  if _is_namedtuple(type(value)) and len(text) > 40:   # a configuration: its name only
    return f"{type(value).__name__}(...)"
  text = re.sub(r"<function (\S+) at 0x[0-9a-f]+>", r"\1", text)
  return re.sub(r" at 0x[0-9a-f]+", "", text)


def signature(obj, name: str, method: bool = False) -> str | None:
  """``name(a, b=1, *, c=None)``: the parameters and their defaults, no annotations
  (``method``: without the first, ``self``)."""
  try:
    sig = inspect.signature(obj)
  except (TypeError, ValueError):
    return None
  parameters = list(sig.parameters.values())[1 if method else 0:]
  params = [p.replace(annotation=inspect.Parameter.empty,
                      default=(p.default if p.default is inspect.Parameter.empty
                               else _Shown(value_repr(p.default))))
            for p in parameters]
  parts = [str(p) for p in params]
  kinds = [p.kind for p in params]
  # The markers Python writes: "/" after positional-only, "*" before keyword-only.
  shown = []
  for k, (part, kind) in enumerate(zip(parts, kinds)):
    if (kind is inspect.Parameter.KEYWORD_ONLY
        and inspect.Parameter.VAR_POSITIONAL not in kinds
        and (k == 0 or kinds[k - 1] is not inspect.Parameter.KEYWORD_ONLY)):
      shown.append("*")
    shown.append(part)
    if (kind is inspect.Parameter.POSITIONAL_ONLY
        and (k + 1 == len(kinds) or kinds[k + 1] is not inspect.Parameter.POSITIONAL_ONLY)):
      shown.append("/")
  one_line = f"{name}({', '.join(shown)})"
  if len(one_line) <= 88:
    return one_line
  return f"{name}(\n" + "".join(f"    {part},\n" for part in shown) + ")"


# ---------------------------------------------------------------- entries


def _is_namedtuple(obj) -> bool:
  return inspect.isclass(obj) and issubclass(obj, tuple) and hasattr(obj, "_fields")


class Writer:
  """Writes the Markdown of one page; ``index`` resolves the cross-references."""

  def __init__(self, page: str, index: Index, seen: dict[str, int]):
    self.page, self.index, self.seen = page, index, seen
    self.lines: list[str] = []

  def convert_with(self, context: list[str]):
    return lambda text: inline(text, self.index, context, self.page)

  def heading(self, level: int, text: str) -> str:
    self.lines += [f"{'#' * level} {text}", ""]
    return github_anchor(text, self.seen)

  def entry(self, qualified: str, module: str, register: bool):
    """The heading, signature and docstring of one public name."""
    obj = resolve(qualified)
    name = qualified.rsplit(".", 1)[1]
    anchor = self.heading(3, f"`{name}`")
    if register:
      self.index.targets.setdefault(qualified, (self.page, anchor))
      if is_documented_object(obj):
        self.index.first.setdefault(id(obj), qualified)
      return
    defined_in = getattr(obj, "__module__", None) or module
    convert = self.convert_with([module, defined_in.rsplit(".", 1)[0], defined_in])
    first = self.index.first.get(id(obj)) if is_documented_object(obj) else None
    if first and first != qualified:
      link = self.index.link(first, [], self.page)
      self.lines += [f"The same object as [`{first}`]({link}).", ""]
      return
    if not is_documented_object(obj):
      self._constant(qualified, obj, convert)
      return
    if inspect.isclass(obj):
      self._class(obj, name, convert, qualified)
    else:
      self._code(signature(obj, name))
      self._doc(obj.__doc__, convert)

  def _code(self, text: str | None):
    if text:
      self.lines += ["```python", text, "```", ""]

  def _doc(self, doc: str | None, convert):
    if doc:
      self.lines += docstring_markdown(doc, convert) + [""]

  def _constant(self, qualified: str, obj, convert):
    value = value_repr(obj)
    name = qualified.rsplit(".", 1)[1]
    self._code(f"{name} = {value}" if len(value) <= 60 else f"{name}: {type(obj).__name__}")
    doc = constant_doc(qualified)
    if doc:
      self.lines += _squeeze(text_blocks(doc, convert)) + [""]

  def _class(self, cls, name: str, convert, qualified: str):
    bases = [b for b in cls.__bases__ if b not in (object, tuple)]
    if _is_namedtuple(cls) or hasattr(cls, "__dataclass_fields__"):
      self._code("class " + (signature(cls, name) or name))
    else:
      shown = ", ".join(value_repr(b) for b in bases)
      self._code(f"class {name}({shown})" if shown else f"class {name}")
    self._doc(cls.__doc__, convert)
    for member, value in own_members(cls):
      self.lines += [f"#### `{name}.{member}`", ""]
      github_anchor(f"`{name}.{member}`", self.seen)
      if isinstance(value, property):
        self._doc(value.__doc__, convert)
      else:
        self._code(signature(value, member, method=True))
        self._doc(value.__doc__, convert)


def _section_modules(page: str) -> list[Section]:
  return read_rst_page(API / f"{page}.rst")[2]


def render_page(page: str, index: Index, register: bool = False) -> str:
  """The Markdown of one page (``register``: only record where its names go)."""
  title, intro, sections = read_rst_page(API / f"{page}.rst")
  writer = Writer(page, index, {})
  writer.lines += [HEADER.format(command=COMMAND), f"# {title}", ""]
  writer.lines += text_blocks(intro, writer.convert_with([])) + [""]
  writer.lines += [f"Built as a website: `sphinx-build -W -b html docs docs/_build/html` "
                   f"([all pages](README.md)).", ""]
  for section in sections:
    names = public_api(section.module)[section.module]
    convert = writer.convert_with([section.module])
    writer.heading(2, f"`{section.heading or section.module}`")
    module = resolve(section.module)
    if section.docstring and module.__doc__ and not register:
      writer.lines += docstring_markdown(module.__doc__, convert) + [""]
    if names and not register:
      writer.lines += ["| name | summary |", "|---|---|"]
      for qualified in names:
        obj = resolve(qualified)
        short = qualified.rsplit(".", 1)[1]
        doc = (obj.__doc__ if is_documented_object(obj)
               else " ".join(constant_doc(qualified) or []))
        link = index.link(qualified, [], page)
        summary = convert(first_sentence(doc)).replace("|", "\\|")
        writer.lines.append(f"| [`{short}`]({link}) | {summary} |")
      writer.lines.append("")
    for qualified in names:
      writer.entry(qualified, section.module, register)
  return "\n".join(_squeeze(writer.lines)) + "\n"


def render_index() -> str:
  """``docs/reference/README.md``: the pages and their modules (GitHub shows it with the folder)."""
  lines = [HEADER.format(command=COMMAND), "# API reference", ""]
  intro = (API / "index.rst").read_text().split(".. toctree::", 1)[0].splitlines()[3:]
  lines += text_blocks([l for l in intro], inline) + [""]
  lines += [f"These pages read on the repository page; `{COMMAND}` writes them, and "
            "`tests/integration/test_api_markdown.py` fails while they are stale. The same "
            "reference as a website, with search:", "", "```bash",
            'pip install -e ".[docs]" && sphinx-build -W -b html docs docs/_build/html',
            "```", "", "then open `docs/_build/html/index.html`.", "", "| page | modules |",
            "|---|---|"]
  for page in page_names():
    title = read_rst_page(API / f"{page}.rst")[0]
    modules = ", ".join(f"`{s.module}`" for s in _section_modules(page))
    lines.append(f"| [{title}]({page}.md) | {modules} |")
  return "\n".join(_squeeze(lines)) + "\n"


def render_all() -> dict[str, str]:
  """``{file name under docs/reference/: its Markdown}``."""
  index = Index()
  pages = page_names()
  for page in pages:        # first pass: where each name is documented
    render_page(page, index, register=True)
  rendered = {f"{page}.md": render_page(page, index) for page in pages}
  rendered["README.md"] = render_index()
  return rendered


def stale_pages(rendered: dict[str, str] | None = None) -> list[str]:
  """The files of ``docs/reference/`` that differ from what this script writes, or that
  it does not write."""
  rendered = render_all() if rendered is None else rendered
  stale = [name for name, text in rendered.items()
           if not (OUT / name).is_file() or (OUT / name).read_text() != text]
  extra = [p.name for p in OUT.glob("*.md") if p.name not in rendered]
  return sorted(stale + extra)


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--check", action="store_true",
                      help="write nothing; exit 1 if a committed page is stale")
  args = parser.parse_args(argv)
  rendered = render_all()
  stale = stale_pages(rendered)
  if args.check:
    if stale:
      print(f"stale in docs/reference/: {', '.join(stale)}; run: {COMMAND}")
      return 1
    return 0
  OUT.mkdir(exist_ok=True)
  for name in stale:
    path = OUT / name
    if name in rendered:
      path.write_text(rendered[name])
    else:
      path.unlink()
  print(f"docs/reference/: {len(rendered)} pages, {len(stale)} rewritten")
  return 0


if __name__ == "__main__":
  sys.exit(main())
