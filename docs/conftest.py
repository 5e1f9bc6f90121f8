"""pytest: run the doctests of the markdown pages, not the Sphinx configuration nor the
Markdown API reference (``reference/``: the docstrings' examples, which run as doctests of
``metaoptax/``)."""

collect_ignore = ["conf.py"]
collect_ignore_glob = ["_ext/*", "_build/*", "reference/*"]
