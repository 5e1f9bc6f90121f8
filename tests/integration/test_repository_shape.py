"""The shape of the repository: a library with a short README, results kept apart.

* the README, docs/benchmarks.md and docs/design-decisions.md stay within their sizes, and
  CONTRIBUTING.md states those limits (and no test count or timing);
* the README starts with the two commands that CI runs (``.ci/run``);
* benchmarks/ holds at most 15 scripts, and every committed file under
  benchmarks/results/ is written by one of them (each script declares the files it
  writes in a module-level ``OUTPUTS`` tuple of glob patterns, read here without
  importing the script); no results file is named by a commit hash;
* no docstring under metaoptax/ cites a ``benchmarks/`` path or a measured figure:
  measurements go stale, and they belong in docs/benchmarks.md.
"""

import ast
import fnmatch
import pathlib
import re
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"
RESULTS = BENCHMARKS / "results"

README_CHARS = 8_000
BENCHMARKS_MD_BYTES = 50_000
DESIGN_DECISIONS_BYTES = 25_000
MAX_SCRIPTS = 15

#: Results that no script's OUTPUTS declares yet, by the name of the script that writes them:
#: the sampler's two scripts to come (posteriordb_check.py, l2hmc_default.py) and
#: sampler_baselines.py (its OUTPUTS come with its owner's change).
UNDECLARED_RESULTS = ("posteriordb*", "l2hmc_default*", "sampler_baselines*")

#: Docstrings that still cite a benchmark or a measured figure: owner fixes before merge.
DOCSTRINGS_TO_FIX = (
    "metaoptax/step_size/drop_ins.py",   # l2o engineer
)


def _committed(folder: pathlib.Path) -> list[str]:
  """Files under ``folder`` relative to it: git's index, or the files on disk outside git."""
  try:
    out = subprocess.run(["git", "ls-files", "-z", "--", str(folder)], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    paths = [ROOT / p for p in out.split("\0") if p]
  except (OSError, subprocess.CalledProcessError):
    paths = []
  if not paths:
    paths = [p for p in folder.rglob("*") if p.is_file()]
  return sorted(str(p.relative_to(folder)) for p in paths if p.exists())


def scripts() -> list[pathlib.Path]:
  """The runnable scripts: benchmarks/*.py whose name does not start with ``_``."""
  return sorted(p for p in BENCHMARKS.glob("*.py") if not p.name.startswith("_"))


def declared_outputs(script: pathlib.Path) -> tuple[str, ...] | None:
  """The script's module-level ``OUTPUTS`` (a tuple of string literals), or None."""
  for node in ast.parse(script.read_text()).body:
    if (isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "OUTPUTS" for t in node.targets)):
      return tuple(ast.literal_eval(node.value))
  return None


#: The sampler's scripts, by name: l2hmc_table, l2hmc_posteriors, l2hmc_mixture_dkd,
#: sampler_baselines, and the two to come, posteriordb_check and l2hmc_default.
SAMPLER_SCRIPT_NAMES = ("l2hmc_*", "sampler_*", "posteriordb*")


def _sampler_script(script: pathlib.Path) -> bool:
  return any(fnmatch.fnmatch(script.stem, p) for p in SAMPLER_SCRIPT_NAMES)


def _undeclared(script: pathlib.Path) -> bool:
  return any(fnmatch.fnmatch(script.stem, p) for p in UNDECLARED_RESULTS)


def test_readme_size_and_commands():
  readme = (ROOT / "README.md").read_text()
  assert len(readme) <= README_CHARS, f"README.md: {len(readme)} characters > {README_CHARS}"
  ci = (ROOT / ".ci" / "run").read_text()
  test_line = next(line for line in ci.splitlines() if "pytest" in line and "not system" in line)
  command_2 = test_line.split(" && ", 1)[1]   # .ci/run creates its own venv first
  commands = re.search(r"```bash\n(.*?)```", readme, re.S)
  assert commands and readme.index("```bash") < 400, "the README starts with the commands"
  lines = [l for l in commands.group(1).splitlines() if l and not l.startswith("#")]
  assert len(lines) == 2
  assert "benchmarks/demo_digits.py" in lines[0]
  assert lines[1].endswith(command_2), (lines[1], command_2)


def test_contributing_states_the_limits_checked_here():
  """The numbers CONTRIBUTING.md gives are the ones this file enforces, and it states no
  test count or timing (they go stale)."""
  text = " ".join((ROOT / "CONTRIBUTING.md").read_text().split())
  for stated in (f"README ≤ {README_CHARS:,} characters",
                 f"`docs/benchmarks.md` ≤ {BENCHMARKS_MD_BYTES // 1000} KB",
                 f"`docs/design-decisions.md` ≤ {DESIGN_DECISIONS_BYTES // 1000} KB",
                 f"at most {MAX_SCRIPTS} scripts"):
    assert stated in text, f"CONTRIBUTING.md does not say {stated!r}"
  stale = re.findall(r"~?\d[\d,]* (?:tests|passed)\b|\b\d+ s\b", text)
  assert not stale, f"CONTRIBUTING.md states counts or timings no test keeps true: {stale}"


@pytest.mark.parametrize("page, limit", [("benchmarks.md", BENCHMARKS_MD_BYTES),
                                         ("design-decisions.md", DESIGN_DECISIONS_BYTES)])
def test_docs_page_size(page, limit):
  size = len((ROOT / "docs" / page).read_bytes())
  assert size <= limit, f"docs/{page}: {size} bytes > {limit}"


#: Scripts of the sampler's claims (``SAMPLER_SCRIPT_NAMES``): the others keep to the rest.
SAMPLER_SCRIPTS = 6


def test_at_most_15_benchmark_scripts():
  assert len(scripts()) <= MAX_SCRIPTS, [p.name for p in scripts()]


def test_the_other_scripts_leave_room_for_the_sampler():
  others = [p.name for p in scripts() if not _sampler_script(p)]
  assert len(others) <= MAX_SCRIPTS - SAMPLER_SCRIPTS, others


def test_every_kept_script_declares_its_outputs():
  missing = [p.name for p in scripts() if not _undeclared(p) and declared_outputs(p) is None]
  assert not missing, f"no OUTPUTS tuple in {missing}"


def test_every_result_is_written_by_a_kept_script():
  patterns = [pattern for p in scripts() for pattern in (declared_outputs(p) or ())]
  assert patterns, "no script declares OUTPUTS: the check would pass vacuously"
  orphans = []
  for name in _committed(RESULTS):
    top = name.split("/", 1)[0]
    if any(fnmatch.fnmatch(top, p) for p in UNDECLARED_RESULTS):
      continue
    if not any(fnmatch.fnmatch(name, p) for p in patterns):
      orphans.append(name)
  assert not orphans, f"results that no kept script writes: {orphans}"


def test_lr_free_runs_are_listed():
  """The run files that ``lr_free.py --combine`` reads are the ones committed."""
  listed = set((RESULTS / "lr_free" / "runs.txt").read_text().split())
  runs = {f"benchmarks/results/lr_free/{n}" for n in _committed(RESULTS / "lr_free")
          if n.startswith("run_")}
  assert runs == listed, (runs - listed, listed - runs)


#: A commit hash in a file name: 7 to 40 hex digits, at least one of them a digit and one a letter.
HASH = re.compile(r"(?:^|[_.\-/])(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?:$|[_.\-/])")


def test_no_commit_hash_in_a_results_name():
  assert HASH.search("l2o_transfer_pes_76d4735.md") and not HASH.search("lr_free_summary.png")
  named = [n for n in _committed(RESULTS) if HASH.search(n)]
  assert not named, named


#: A ``benchmarks/`` path (docs/benchmarks.md, the results page, may be named).
BENCHMARK_PATH = re.compile(r"(?<![\w.])benchmarks/")
#: A measured figure: a decimal with a unit or a ratio sign (``1.13×``, ``1.2x``, ``65.0 s``,
#: ``3.3 ms``, ``120.8 MiB``, ``2.4 bits/char``, ``12.5 %``), or two numbers set against
#: each other (``3.33 against 3.17``). Integers with units (``10 %`` of the steps, ``10×``
#: every 23 steps) are settings, not measurements, and pass.
FIGURE = re.compile(
    r"\d+\.\d+(?:\s*×|x\b|\s*(?:%|ms\b|s\b|min\b|MiB\b|MB\b|GiB\b|GB\b|KB\b|bits/char|bits per))"
    r"|\d+(?:\.\d+)?\s+(?:against|vs\.?)\s+\d+\.\d+")


def documentation(path: pathlib.Path) -> list[tuple[int, str]]:
  """(line, text) of each docstring and each Sphinx ``#:`` comment block of a module."""
  source = path.read_text()
  found = []
  for node in ast.walk(ast.parse(source)):
    if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
      doc = ast.get_docstring(node, clean=False)
      if doc:
        found.append((node.body[0].lineno, doc))
  for number, line in enumerate(source.splitlines(), 1):
    if line.strip().startswith("#:"):
      found.append((number, line))
  return found


def offences(path: pathlib.Path) -> list[str]:
  return [f"{path.relative_to(ROOT)}:{line}: {m.group(0)!r}"
          for line, text in documentation(path)
          for m in [*BENCHMARK_PATH.finditer(text), *FIGURE.finditer(text)]]


def test_the_figure_pattern():
  for measured in ("3.33 against 3.17 bits/char", "1.13×", "1.13x", "65.0 s", "120.8 MiB",
                   "0.64 vs 0.06"):
    assert FIGURE.search(measured), measured
  for setting in ("10× every 23 steps", "d(x) = 0.4 x^2", "2x2 blocks", "10 % of the steps",
                  "meta step 3e-3", "b2 = 0.999"):
    assert not FIGURE.search(setting), setting


def test_no_docstring_cites_a_benchmark():
  found = [o for p in sorted((ROOT / "metaoptax").rglob("*.py"))
           if str(p.relative_to(ROOT)) not in DOCSTRINGS_TO_FIX for o in offences(p)]
  assert not found, "\n".join(found)


@pytest.mark.parametrize("path", DOCSTRINGS_TO_FIX)
def test_the_allow_list_is_still_needed(path):
  """An entry leaves the allow-list once its owner has fixed the file."""
  if not offences(ROOT / path):
    pytest.fail(f"{path} is clean: remove it from DOCSTRINGS_TO_FIX")
