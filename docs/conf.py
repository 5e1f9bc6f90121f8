"""Sphinx configuration: MyST markdown pages, autodoc API reference, built offline.

Build: ``sphinx-build -W -b html docs docs/_build/html``
(``pip install -e ".[docs]"``). ``tests/integration/test_docs_build.py`` runs that build.
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "_ext"))
sys.path.insert(0, os.path.dirname(HERE))   # the metaoptax checkout being documented

import metaoptax  # noqa: E402

project = "metaoptax"
author = "metaoptax contributors"
copyright = "2026, metaoptax contributors"
release = version = metaoptax.__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "public_api",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
# reference/: the same API reference as Markdown for the repository page (_ext/api_markdown.py).
exclude_patterns = ["_build", "reference", "Thumbs.db", ".DS_Store"]

# Markdown: $...$ and $$...$$ math, heading anchors for links to sections.
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence"]
myst_heading_anchors = 3
# The benchmark pages include result tables written by the benchmark scripts; a
# jump in heading levels there is not worth failing the build for.
suppress_warnings = ["myst.header"]

# API reference: Google-style docstrings, signatures without type clutter.
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False
autodoc_typehints = "description"
autodoc_typehints_description_target = "documented"
autodoc_member_order = "bysource"
autosummary_generate = False
add_module_names = False

# Math renders in the reader's browser (MathJax); nothing is fetched at build time.
html_theme = "furo"
html_title = f"metaoptax {release}"
html_static_path = []
