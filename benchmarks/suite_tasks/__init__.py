"""Task modules of the benchmark suite (``benchmarks/suite.py``).

Every task module exposes one function with one interface::

    run(*, quick: bool, seeds: int, out_dir: pathlib.Path, progress,
        replot: bool = False) -> dict | None

``progress`` is a tqdm-like factory: ``progress(total=..., desc=...)`` returns a bar
with ``update(n)``, ``set_postfix_str(s)`` and ``close()`` (``tqdm.tqdm`` itself).
The returned dict has at least ``"task"`` (name), ``"table_md"`` (the markdown
written to ``out_dir/<task>.md``) and ``"summary_lines"`` (markdown lines for
``summary.md``). With ``replot=True`` a task trains nothing: it redraws its PNGs
from the curves it saved in ``out_dir/<task>_curves.npz`` and returns None.
"""

# Order in which the driver runs them.
TASKS = ("digits", "mnist1d", "charlm", "continual", "blockwise")
