"""The Markdown API reference, ``docs/reference/``, is what ``docs/_ext/api_markdown.py``
writes from the docstrings: a docstring or a public name that changes without the pages
being regenerated fails here. The converter's rules are checked on small inputs."""

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


def test_result_types_list_every_field(rendered):
  """A NamedTuple's entry names each of its fields in its ``Attributes:`` list."""
  text = rendered["l2o.md"]
  entry = text.split("### `TrainingResult`", 1)[1].split("\n### ", 1)[0]
  import metaoptax.l2o
  for field in metaoptax.l2o.TrainingResult._fields:
    assert f"- `{field}`" in entry, field


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
