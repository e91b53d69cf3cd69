"""pytest-xdist: real workers on the CPU; results travel on reports and the controller writes files."""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.helpers import (
    PLANT_CONFTEST,
    REGRESSION_HEADER,
    TWO_TESTS,
    busy,
    plant,
    read_csv,
    run,
)

pytest.importorskip("xdist")
# The runs are in-process (pytester.runpytest) for speed. pytester drops the modules a run first
# imported, and torch (with the parts profiling imports lazily) cannot be imported twice in one
# process: torch is imported here and warm_torch (tests/conftest.py, used by the whole module)
# loads the rest first.
torch = pytest.importorskip("torch")

pytestmark = pytest.mark.usefixtures("warm_torch")


def leftovers(directory: Path) -> list[Path]:
    """Temporary files of the atomic writers (``.<name>.<random>.tmp``)."""
    return [p for p in directory.rglob("*") if p.name.startswith(".") or p.name.endswith(".tmp")]


ROW_TESTS = """
import os
import pytest

@pytest.mark.parametrize("i", range({count}))
def test_row(i, metric_table):
    {body}
    metric_table("rows", ["i", "worker"]).add_row({{"i": i, "worker": os.environ.get("PYTEST_XDIST_WORKER", "")}})
"""


def test_200_tests_on_4_workers_write_every_row_once(pytester):
    pytester.makepyfile(test_rows=ROW_TESTS.format(count=200, body="pass"))
    result = run(pytester, "-n", "4", "--gpu-util")
    assert result.ret == 0
    result.assert_outcomes(passed=200)
    out = pytester.path / ".gpu_util"
    ids = {f"test_rows.py::test_row[{i}]" for i in range(200)}

    header, records = read_csv(out / "gpu_util.csv")
    assert header[0] == "test" and "worker" in header
    assert len(records) == 200 and {r["test"] for r in records} == ids
    assert {r["worker"] for r in records} <= {"gw0", "gw1", "gw2", "gw3"}
    assert len({r["worker"] for r in records}) > 1  # the work was really spread

    header, rows = read_csv(out / "metric_table_rows.csv")
    assert header == ["test", "i", "worker"]
    assert len(rows) == 200 and {r["test"] for r in rows} == ids
    assert sorted(int(r["i"]) for r in rows) == list(range(200))
    by_test = {r["test"]: r["worker"] for r in records}
    assert all(by_test[r["test"]] == r["worker"] for r in rows)  # the record's worker ran the test
    doc = json.loads((out / "gpu_util.json").read_text())
    assert len(doc["tests"]) == 200
    assert leftovers(out) == []


@pytest.mark.parametrize("save_args, compare_args", [
    ((), ("-n", "2")),
    (("-n", "2"), ()),
])
def test_gates_and_baselines_behave_the_same_under_xdist(pytester, save_args, compare_args):
    pytester.makeconftest(PLANT_CONFTEST)
    pytester.makepyfile(test_a=TWO_TESTS + """
import pytest

@pytest.mark.gpu_util(min_busy_pct=20)
def test_marked():
    pass
""")
    plant(pytester, test_fast=busy(50.0), test_slow=busy(50.0), test_marked=busy(30.0))
    assert run(pytester, *save_args, "--gpu-util", "--gpu-util-save", "main").ret == 0
    saved = json.loads(next((pytester.path / ".gpu_util" / "baselines").glob("*/main.json")).read_text())
    assert {t["test"]: t["busy_pct"] for t in saved["tests"]} == {
        "test_a.py::test_fast": 50.0, "test_a.py::test_slow": 50.0, "test_a.py::test_marked": 30.0}

    plant(pytester, test_fast=busy(30.0), test_slow=busy(49.0), test_marked=busy(10.0))
    result = run(pytester, *compare_args, "--gpu-util", "--junitxml=out.xml", "--gpu-util-compare", "main",
                 "--gpu-util-fail", "busy_pct:5")
    assert result.ret == 1
    result.assert_outcomes(passed=2, failed=1)
    cases = {c.get("name"): c for c in ET.parse(pytester.path / "out.xml").getroot().iter("testcase")}
    props = {p.get("name"): p.get("value") for p in cases["test_fast"].iter("property")}
    assert props["gpu_util.busy_pct"] == "30"  # the properties travel from the workers too
    result.stdout.fnmatch_lines(["*gpu_util: busy_pct 10 is below min_busy_pct=20*"])
    result.stdout.fnmatch_lines([
        "*GPU regressions against baseline*main.json*",
        REGRESSION_HEADER,
        "*",
        "test_fast*busy_pct*50*30*-20.0 pts*-5 pts",
        "test_marked*busy_pct*30*10*-20.0 pts*-5 pts",
        "FAILED: 2 regression(s) in 2 test(s) (limits: busy_pct:5)",
    ])
    assert "test_slow  busy_pct" not in result.stdout.str()

    plant(pytester, test_fast=busy(50.0), test_slow=busy(50.0), test_marked=busy(30.0))
    result = run(pytester, *compare_args, "--gpu-util", "--gpu-util-compare", "main", "--gpu-util-fail", "busy_pct:5")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["no GPU regressions against baseline*main.json: 3 tests compared"])


def test_a_killed_worker_leaves_valid_files_with_every_other_test(pytester):
    pytester.makepyfile(test_rows=ROW_TESTS.format(
        count=20, body="if i == 7:\n        os._exit(1)  # the worker dies mid-run"))
    # a flush after every test: a dead worker then loses only the test it was running (with the
    # default flush it loses the tests since its last flush; tests/plugin/test_continuous.py)
    result = run(pytester, "-n", "2", "--gpu-util", "--gpu-util-flush", "tests=1")
    assert result.ret == 1
    result.assert_outcomes(passed=19, failed=1)
    result.stdout.fnmatch_lines(["*worker 'gw*' crashed while running 'test_rows.py::test_row[[]7[]]'*"])
    out = pytester.path / ".gpu_util"
    ids = {f"test_rows.py::test_row[{i}]" for i in range(20) if i != 7}
    _, records = read_csv(out / "gpu_util.csv")
    assert {r["test"] for r in records} == ids and len(records) == 19
    assert {t["test"] for t in json.loads((out / "gpu_util.json").read_text())["tests"]} == ids
    header, rows = read_csv(out / "metric_table_rows.csv")
    assert header == ["test", "i", "worker"] and len(rows) == 19 and {r["test"] for r in rows} == ids
    assert leftovers(out) == []


PIN_TESTS = """
import os
import pytest

@pytest.mark.parametrize("i", range(24))
def test_env(i, metric_table):
    metric_table("env", ["worker", "cvd"]).add_row(
        {"worker": os.environ["PYTEST_XDIST_WORKER"], "cvd": os.environ.get("CUDA_VISIBLE_DEVICES", "unset")})
"""

# written on the controller at the very end: did it import torch (and so maybe initialise CUDA)?
TORCH_PROBE = """
import sys
from pathlib import Path

def pytest_unconfigure(config):
    if not hasattr(config, "workerinput"):
        (Path(__file__).parent / "controller_torch.txt").write_text(str("torch" in sys.modules))
"""


def test_pin_gives_each_worker_one_gpu_from_cuda_visible_devices(pytester, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    pytester.makepyfile(test_env=PIN_TESTS)
    result = run(pytester, "-n", "3", "--gpu-util-pin")
    assert result.ret == 0
    _, rows = read_csv(pytester.path / ".gpu_util" / "metric_table_env.csv")
    seen = {(r["worker"], r["cvd"]) for r in rows}
    assert seen == {("gw0", "3"), ("gw1", "5"), ("gw2", "3")}, seen

    result = run(pytester, "-n", "3")  # without --gpu-util-pin every worker sees both GPUs
    assert result.ret == 0
    _, rows = read_csv(pytester.path / ".gpu_util" / "metric_table_env.csv")
    assert {r["cvd"] for r in rows} == {"3,5"} and len(rows) == 24


def test_pin_controller_does_not_import_torch(pytester, monkeypatch):
    """The controller counts GPUs from CUDA_VISIBLE_DEVICES / nvidia-smi, never through torch."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    pytester.makepyfile(test_env=PIN_TESTS)
    pytester.makeconftest(TORCH_PROBE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-n", "2", "--gpu-util-pin")
    assert result.ret == 0
    assert (pytester.path / "controller_torch.txt").read_text() == "False"
    _, rows = read_csv(pytester.path / ".gpu_util" / "metric_table_env.csv")
    assert {(r["worker"], r["cvd"]) for r in rows} == {("gw0", "3"), ("gw1", "5")}
