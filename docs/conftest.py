"""pytest: run the doctests of the markdown pages, not the Sphinx configuration."""

collect_ignore = ["conf.py"]
collect_ignore_glob = ["_ext/*", "_build/*"]
