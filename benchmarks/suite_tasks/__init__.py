"""Task modules of the benchmark suite (``benchmarks/suite.py``).

Every task module exposes one function with one interface::

    run(*, quick: bool, seeds: int, out_dir: pathlib.Path, progress) -> dict

``progress`` is a tqdm-like factory: ``progress(total=..., desc=...)`` returns a bar
with ``update(n)``, ``set_postfix_str(s)`` and ``close()`` (``tqdm.tqdm`` itself).
The returned dict has at least ``"task"`` (name), ``"table_md"`` (the markdown
written to ``out_dir/<task>.md``) and ``"summary_lines"`` (markdown lines for
``summary.md``).
"""

# Order in which the driver runs them; ``continual`` is optional (another branch).
TASKS = ("digits", "mnist1d", "charlm", "continual", "blockwise")
