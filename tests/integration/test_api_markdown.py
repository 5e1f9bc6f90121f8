"""The Markdown API reference, ``docs/reference/``, is what ``docs/_ext/api_markdown.py``
writes from the docstrings: a docstring or a public name that changes without the pages
being regenerated fails here. The converter's rules are checked on small inputs."""

import inspect
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs" / "_ext"))
try:
  import api_markdown
  import public_names
finally:
  sys.path.remove(str(ROOT / "docs" / "_ext"))


@pytest.fixture(scope="module")
def rendered():
  return api_markdown.render_all()


def test_the_committed_pages_are_current(rendered):
  stale = api_markdown.stale_pages(rendered)
  assert not stale, (f"docs/reference/ is stale ({', '.join(stale)}): regenerate it with "
                     f"`{api_markdown.COMMAND}` and commit the pages")


def test_every_public_name_has_an_entry(rendered):
  public = public_names.public_api("metaoptax")
  names = [name for names in public.values() for name in names]
  assert len(public) >= 9 and len(names) >= 80   # the walk found the subpackages
  text = "\n".join(rendered.values())
  missing = [q for q in names if f"### `{q.rsplit('.', 1)[1]}`" not in text]
  assert not missing, missing
  assert set(rendered) == {f"{page}.md" for page in api_markdown.page_names()} | {"README.md"}


#: Public NamedTuples whose fields another change documents: ``adapt``'s, whose module is
#: being rewritten (its owner adds the Attributes at merge).
FIELDS_DOCUMENTED_ELSEWHERE = ("metaoptax.l2hmc.Adaptation",)


def _namedtuples() -> list[str]:
  public = public_names.public_api("metaoptax")
  return sorted({q for names in public.values() for q in names
                 if api_markdown._is_namedtuple(public_names.resolve(q))})


def undocumented_fields(cls) -> list[str]:
  """The fields of a NamedTuple that its docstring's ``Attributes:`` list does not name."""
  lines = api_markdown.docstring_markdown(cls.__doc__ or "", lambda text: text)
  listed = set()
  for line in lines:
    if line.startswith("- `"):
      listed.update(name.strip("`*") for name in line[2:].split(":", 1)[0].split(", "))
  return [field for field in cls._fields if field not in listed]


@pytest.mark.parametrize("qualified", _namedtuples())
def test_every_field_of_a_public_namedtuple_is_documented(qualified):
  """States, infos, results and configs: each field in the docstring's ``Attributes:``."""
  if qualified in FIELDS_DOCUMENTED_ELSEWHERE:
    if not undocumented_fields(public_names.resolve(qualified)):
      pytest.fail(f"{qualified} is documented: remove it from FIELDS_DOCUMENTED_ELSEWHERE")
    pytest.skip("its owner documents its fields")
  missing = undocumented_fields(public_names.resolve(qualified))
  assert not missing, f"{qualified}: no 'Attributes:' entry for {missing}"


def _listed(doc: str | None) -> set[str]:
  """The names the ``Args:`` / ``Attributes:`` lists of a docstring document."""
  names = set()
  for line in api_markdown.docstring_markdown(doc or "", lambda text: text):
    if line.startswith("- `"):
      entry = line[2:].split(":", 1)[0].split(" (", 1)[0]
      names.update(name.strip("`") for name in entry.split(", "))
  return names


def _functions() -> list[str]:
  public = public_names.public_api("metaoptax")
  found, seen = [], set()
  for qualified in (q for names in public.values() for q in names):
    obj = public_names.resolve(qualified)
    if inspect.isroutine(obj) and id(obj) not in seen:
      seen.add(id(obj))
      found.append(qualified)
  return found


def undocumented_parameters(function) -> list[str]:
  """The parameters of ``function``'s own signature (``**kwargs`` as such, not the keywords
  it forwards) that its docstring's ``Args:`` list does not name."""
  listed = _listed(function.__doc__)
  marks = {inspect.Parameter.VAR_POSITIONAL: "*", inspect.Parameter.VAR_KEYWORD: "**"}
  return [marks.get(p.kind, "") + p.name
          for p in inspect.signature(inspect.unwrap(function)).parameters.values()
          if marks.get(p.kind, "") + p.name not in listed]


@pytest.mark.parametrize("qualified", _functions())
def test_every_parameter_of_a_public_function_is_documented(qualified):
  missing = undocumented_parameters(public_names.resolve(qualified))
  assert not missing, f"{qualified}: no 'Args:' entry for {missing}"


def test_the_parameter_check_can_fail():
  def half_documented(a, b, **kwargs):
    """Summary.

    Args:
      a: one.
      **kwargs: the rest.
    """
  assert undocumented_parameters(half_documented) == ["b"]


def test_the_field_check_can_fail():
  class Undocumented(tuple):
    __doc__ = "Summary.\n\nAttributes:\n  a, b: two fields.\n"
    _fields = ("a", "b", "c")
  assert undocumented_fields(Undocumented) == ["c"]


def test_inline_markup():
  convert = api_markdown.inline
  assert convert(":math:`\\alpha_t` and ``x = 1``") == "$`\\alpha_t`$ and `x = 1`"
  assert convert(":func:`~metaoptax.l2o.train`") == "`train`"
  assert convert(":doc:`the guide </l2hmc>`") == "[the guide](../l2hmc.md)"
  assert convert("`Slice sampling <https://arxiv.org/abs/x>`_") == (
      "[Slice sampling](https://arxiv.org/abs/x)")
  index = api_markdown.Index()
  index.targets["metaoptax.l2o.train"] = ("l2o", "train")
  assert api_markdown.inline(":func:`train`", index, ["metaoptax.l2o"], "l2o") == "[`train`](#train)"
  assert api_markdown.inline(":func:`l2o.train`", index, [], "l2hmc") == (
      "[`l2o.train`](l2o.md#train)")


def test_docstring_sections():
  doc = '''Summary.

  .. math::

    x = 1

  Args:
    a, b: the inputs,
      on two lines.
    c (int): a count.

  Returns:
    The sum.

  Examples:
    >>> 1 + 1
    2
  '''
  lines = api_markdown.docstring_markdown(doc, api_markdown.inline)
  assert lines == ["Summary.", "", "```math", "x = 1", "```", "", "**Arguments**", "",
                   "- `a`, `b`: the inputs,", "  on two lines.", "- `c` (int): a count.", "",
                   "**Returns**", "", "The sum.", "", "**Examples**", "", "```python",
                   ">>> 1 + 1", "2", "```"]


def test_github_anchors():
  seen = {}
  assert api_markdown.github_anchor("`TaskFamily`", seen) == "taskfamily"
  assert api_markdown.github_anchor("`TaskFamily`", seen) == "taskfamily-1"
  assert api_markdown.github_anchor("`metaoptax.l2o.tasks`", seen) == "metaoptaxl2otasks"
  assert api_markdown.github_anchor("`build_training_step`", seen) == "build_training_step"


def test_aligned_math():
  """Sphinx sets a ``.. math::`` block of ``&``-aligned rows in ``align``; GitHub needs an
  ``aligned`` environment for them."""
  lines = api_markdown.docstring_markdown(
      "Rows.\n\n.. math::\n\n  a &= b\\\\\n  c &= d\n", api_markdown.inline)
  assert lines == ["Rows.", "", "```math", "\\begin{aligned}", "a &= b\\\\", "c &= d",
                   "\\end{aligned}", "```"]
  matrix = api_markdown.docstring_markdown(
      "A matrix.\n\n.. math::\n\n  \\begin{pmatrix} a & b \\end{pmatrix}\n", api_markdown.inline)
  assert matrix == ["A matrix.", "", "```math", "\\begin{pmatrix} a & b \\end{pmatrix}", "```"]


def test_markup_that_wraps_across_lines():
  doc = "Summary.\n\nA :math:`a +\n  b` and ``x\n  y`` wrap.\n\nArgs:\n  c: a :math:`c\n    d`.\n"
  lines = api_markdown.docstring_markdown(doc, api_markdown.inline)
  assert lines == ["Summary.", "", "A $`a + b`$ and `x y` wrap.", "", "**Arguments**", "",
                   "- `c`: a $`c d`$."]
