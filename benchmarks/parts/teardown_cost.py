"""(CPU, deterministic) Instructions a test costs, by callgrind, on the tests' synthetic GPU with a virtual clock.

    python benchmarks/parts/teardown_cost.py ROOT [--tests 300 100] [--region all|teardown]
        [--exclude MODULE:CLASS.METHOD ...] [--no-gc] [--torch] [-- PYTEST ARGS, e.g. --gpu-util]

Writes cpu_per_test_cost.py's suite (four kernels and a host wait a test) with the tests' synthetic
GPU on a virtual clock (tests/helpers VIRTUAL_CLOCK: no test spins on the wall clock, so a run's
count does not depend on the machine's speed), runs it under ``valgrind --tool=callgrind`` with
ROOT's ``pytest_gpuutil`` (a checkout: ``git archive COMMIT | tar -x -C DIR``, its compiled .so files
copied in) at each size, and prints the instructions collected and their slope a test between the
sizes. ``--region all``: from the first test's set-up to the end of the session (the run's files and
the summary too); ``--region teardown``: only inside the plugin's teardown hooks (TestHooks'
pytest_runtest_teardown and pytest_runtest_logreport, and _report where ROOT has it), flushes left
out; ``--exclude`` leaves out more methods inside the region. ``--no-gc``: Python's collector off
from the first test (a full collection with torch loaded is tens of millions of instructions and
falls where allocation takes it: lumps, not a slope). ``--torch``: the suite's conftest imports
torch (pytest's logging then attaches to torch's non-propagating loggers at every phase: a plain
run's row needs it to compare with a measured one, which imports torch). Needs valgrind, its
callgrind.h and a C compiler (a small library issues callgrind's client requests).
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

CLIENT = r"""
#include <valgrind/callgrind.h>
void cg_start(void) { CALLGRIND_START_INSTRUMENTATION; }
void cg_toggle(void) { CALLGRIND_TOGGLE_COLLECT; }
"""

#: -p cg_region: switches callgrind's collection on and off around the region (CG_REGION, CG_EXCLUDE, CG_NOGC)
REGION_PLUGIN = '''
import ctypes, functools, gc, importlib, os
import pytest

_LIB = ctypes.CDLL(os.environ["CG_LIB"])
REGION = os.environ.get("CG_REGION", "all")
_STATE = {"started": False}


def _toggled(function):
    @functools.wraps(function)
    def toggled(*args, **kwargs):
        _LIB.cg_toggle()
        try:
            return function(*args, **kwargs)
        finally:
            _LIB.cg_toggle()
    return toggled


def _wrap(spec):
    module, _, attr = spec.partition(":")
    cls_name, _, method = attr.partition(".")
    cls = getattr(importlib.import_module(module), cls_name)
    if method in vars(cls):
        setattr(cls, method, _toggled(vars(cls)[method]))


if REGION == "teardown":
    for name in ("_report", "pytest_runtest_logreport", "pytest_runtest_teardown"):
        _wrap("pytest_gpuutil.plugin:TestHooks." + name)
    _wrap("pytest_gpuutil.session.measuring:Measuring.flush")  # called only inside the region: toggles it off
for spec in filter(None, os.environ.get("CG_EXCLUDE", "").split(",")):
    _wrap(spec)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    if not _STATE["started"]:
        _STATE["started"] = True
        _LIB.cg_start()
        if os.environ.get("CG_NOGC"):
            gc.collect()
            gc.disable()
        if REGION == "all":
            _LIB.cg_toggle()


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    if REGION == "all" and _STATE["started"]:
        _LIB.cg_toggle()
'''


def collected(folder: Path, root: Path, pytest_args: list[str], env: dict[str, str]) -> int:
    cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--collect-atstart=no", "--callgrind-out-file=/dev/null",
           sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "cg_region", "test_small.py", *pytest_args]
    env = dict(env, PYTHONPATH=os.pathsep.join([str(folder.parent), str(root)]), PYTHONHASHSEED="0")
    done = subprocess.run(cmd, cwd=folder, capture_output=True, text=True, env=env, timeout=3600)
    found = re.findall(r"Collected : (\d+)", done.stderr)
    if not found or done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return int(found[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path, help="the checkout whose pytest_gpuutil runs")
    parser.add_argument("--tests", type=int, nargs=2, default=[300, 100], metavar=("MORE", "FEWER"))
    parser.add_argument("--region", choices=("all", "teardown"), default="all")
    parser.add_argument("--exclude", nargs="*", default=[], help="MODULE:CLASS.METHOD left out of the region")
    parser.add_argument("--no-gc", action="store_true")
    parser.add_argument("--torch", action="store_true", help="the conftest imports torch")
    argv = sys.argv[1:] if argv is None else argv
    pytest_args = argv[argv.index("--") + 1:] if "--" in argv else []  # pytest's arguments (e.g. --gpu-util)
    args = parser.parse_args(argv[:len(argv) - len(pytest_args) - (1 if "--" in argv else 0)])
    sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks" / "diagnostics")]
    from cpu_per_test_cost import TEST_FILE

    from tests.helpers import SYNTHETIC_CONFTEST, VIRTUAL_CLOCK

    counts = {}
    with tempfile.TemporaryDirectory(prefix="teardown_cost_") as tmp:
        base = Path(tmp)
        (base / "client.c").write_text(CLIENT)
        subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(base / "libcg.so"), str(base / "client.c")], check=True)
        (base / "cg_region.py").write_text(REGION_PLUGIN)
        env = dict(os.environ, CG_LIB=str(base / "libcg.so"), CG_REGION=args.region, CG_EXCLUDE=",".join(args.exclude))
        if args.no_gc:
            env["CG_NOGC"] = "1"
        for tests in args.tests:
            folder = base / f"suite{tests}"
            folder.mkdir()
            head = "import torch  # noqa: F401 - a GPU suite has it loaded\n" if args.torch else ""
            (folder / "conftest.py").write_text(head + SYNTHETIC_CONFTEST + VIRTUAL_CLOCK)
            (folder / "test_small.py").write_text(TEST_FILE.replace("{tests}", str(tests)))
            extra = [a.replace("{out}", str(folder / "out")) for a in pytest_args]
            counts[tests] = collected(folder, args.root.resolve(), extra, env)
            print(f"{tests} tests: {counts[tests]:,} instructions", flush=True)
    more, fewer = args.tests
    print(f"slope: {(counts[more] - counts[fewer]) / (more - fewer):,.0f} instructions a test "
          f"({args.region}{', gc off' if args.no_gc else ''}, {args.root})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
