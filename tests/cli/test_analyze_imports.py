"""``gpuutil analyze``'s import budget, pinned by what it imports (not by a timing).

Every module on the path costs start-up in every run (issue 44: the CLI's start-up). The lists
below are the budget: a module added to analyze's import path has to be added here on purpose.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from pytest_gpuutil.traces.reader import c_reader_available

DATA = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: what ``import pytest_gpuutil.cli.analyze`` may load of the package, and nothing more
ANALYZE_IMPORTS = {
    "pytest_gpuutil",
    "pytest_gpuutil.analysis",
    "pytest_gpuutil.analysis.classify",
    "pytest_gpuutil.analysis.finding_records",
    "pytest_gpuutil.analysis.findings",
    "pytest_gpuutil.analysis.grouping",
    "pytest_gpuutil.analysis.intervals",
    "pytest_gpuutil.analysis.intervals.waits",
    "pytest_gpuutil.analysis.rules",
    "pytest_gpuutil.analysis.stats",
    "pytest_gpuutil.analysis.summary",
    "pytest_gpuutil.analysis.window_facts",
    "pytest_gpuutil.cli",
    "pytest_gpuutil.cli.analyze",
    "pytest_gpuutil.cli.analyze_args",
    "pytest_gpuutil.frozen",
    "pytest_gpuutil.traces",
    "pytest_gpuutil.traces.json_events",
    "pytest_gpuutil.traces.model",
    "pytest_gpuutil.traces.reader",
}
#: heavy or unrelated modules that neither the import nor a JSON run of a small trace may load
NOT_IMPORTED = (
    "torch", "numpy", "msgspec", "tabulate", "pytest", "_pytest", "importlib.metadata", "csv", "decimal",
    "pytest_gpuutil.analysis.timeline", "pytest_gpuutil.analysis.windows",
    "pytest_gpuutil.analysis.counters", "pytest_gpuutil.capture", "pytest_gpuutil.report",
    "pytest_gpuutil.traces.kineto_layout", "pytest_gpuutil.traces.msgspec_reader", "pytest_gpuutil.plugin",
    # the standard library's costly modules that analyze does without (issue 44: ~15 ms of a ~150 ms run):
    # dataclasses imports inspect, which imports ast, dis and tokenize (the records are pytest_gpuutil.frozen's);
    # pathlib imports urllib.parse; argparse's parser loads shutil (bz2, lzma) and gettext (locale), and a
    # plain command line is read without it (cli/analyze_args.py)
    "dataclasses", "inspect", "ast", "dis", "tokenize", "pathlib", "urllib", "argparse", "shutil", "bz2", "lzma",
    "gettext", "locale",
    # typing (~20 M instructions): annotations are strings and its names are imported for type checkers only
    # (TYPE_CHECKING = False); importlib (and warnings): the package's lazy names use __import__
    "typing", "importlib", "warnings",
)

PROBE = """
import json, sys
before = set(sys.modules)
{code}
loaded = set(sys.modules) - before
print(json.dumps(sorted(loaded)))
"""


#: the code compiled from text while ``code`` runs (a module's own source, when its bytecode is not
#: cached, is not counted): named tuples, dataclasses and ``exec`` do it, and the first compile of a
#: process starts the parser (~10 M instructions)
COMPILE_PROBE = """
import json, sys
compiled = []
sys.addaudithook(lambda event, args: event == "compile" and compiled.append(str(args[1])))
{code}
print(json.dumps([name for name in compiled if not name.endswith(".py")]))
"""
#: without the C reader (not built for this Python), the tolerant reader loads decimal, which defines a namedtuple
needs_c_reader = pytest.mark.skipif(not c_reader_available(), reason="the C reader is not built for this Python")
JSON_RUN = (f"import contextlib, io\nfrom pytest_gpuutil.cli import main\nwith contextlib.redirect_stdout(io.StringIO()):\n"
            f"    assert main(['analyze', {os.path.join(DATA, 'bmm_bf16.json.gz')!r}, '--format', 'json']) == 0")


def probe_output(probe: str, code: str) -> list:
    """The last line of ``probe`` running ``code`` in a fresh interpreter, as JSON: without ``site``
    (``-S``), whose start-up imports (an editable install's finder loads pathlib) would hide what
    ``code`` loads, on this process's module path, the checkout first."""
    path = os.pathsep.join([ROOT, *(p for p in sys.path if p)])
    res = subprocess.run([sys.executable, "-S", "-c", probe.format(code=code)], capture_output=True, text=True,
                         check=True, env={**os.environ, "PYTHONPATH": path})
    return json.loads(res.stdout.strip().splitlines()[-1])


def loaded_by(code: str) -> set[str]:
    """The modules a fresh interpreter loads while it runs ``code``."""
    return set(probe_output(PROBE, code))


def unwanted(loaded: set[str]) -> list[str]:
    return sorted(m for m in loaded if any(m == n or m.startswith(n + ".") for n in NOT_IMPORTED))


def test_importing_analyze_loads_only_its_own_modules():
    loaded = loaded_by("import pytest_gpuutil.cli.analyze")
    assert unwanted(loaded) == []
    # the unions in C, where a compiler built them (analysis/intervals/_unions.c)
    c_part = {"pytest_gpuutil.analysis.intervals._unions"} & loaded
    assert {m for m in loaded if m.startswith("pytest_gpuutil")} - c_part == ANALYZE_IMPORTS


def test_a_json_run_loads_nothing_heavy():
    assert unwanted(loaded_by(JSON_RUN)) == []


@needs_c_reader
def test_a_table_run_loads_nothing_heavy():
    """The default format: its tables are laid out without tabulate (which imports importlib.metadata)."""
    loaded = loaded_by(JSON_RUN.replace(", '--format', 'json'", ""))
    assert "pytest_gpuutil.report.tables" in loaded
    assert [m for m in unwanted(loaded) if not m.startswith("pytest_gpuutil.report")] == []
    assert "tabulate" not in loaded


@needs_c_reader
def test_a_json_run_compiles_no_code():
    """The records are pytest_gpuutil.frozen's (not NamedTuple, namedtuple or dataclass, which compile)."""
    assert probe_output(COMPILE_PROBE, JSON_RUN) == []


def test_the_compile_probe_sees_a_named_tuple():
    code = "from typing import NamedTuple\nclass Pair(NamedTuple):\n    a: 'int'"
    assert probe_output(COMPILE_PROBE, code) != []


def test_the_probe_sees_a_heavy_import():
    """The check can fail: a module on the --html path imports numpy at its top."""
    found = unwanted(loaded_by("import pytest_gpuutil.analysis.timeline"))
    assert "numpy" in found and "pytest_gpuutil.analysis.timeline" in found


def test_the_probe_sees_what_site_would_have_loaded():
    """Without ``site``, a module an editable install's finder loads at start-up is seen when code loads it."""
    found = unwanted(loaded_by("import pathlib, dataclasses"))
    assert {"pathlib", "dataclasses", "inspect"} <= set(found)
