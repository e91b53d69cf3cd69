"""The per-test hooks: none at all without --gpu-util, and every test's figures in a JUnit file
(filled when the records come, without a flush after every test)."""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from tests.helpers import LOG_BATCHES, SYNTHETIC_CONFTEST, run

pytestmark = pytest.mark.usefixtures("warm_torch")

PER_TEST_HOOKS = ("pytest_runtest_protocol", "pytest_runtest_call", "pytest_runtest_teardown",
                  "pytest_runtest_makereport", "pytest_runtest_logreport")

#: counts, at the session's end, the plugin's implementations of the per-test hooks, and how often
#: each of its per-test hooks ran (every hook implementation of the plugin wrapped in a counter)
COUNT_HOOKS = """
import json, pathlib
import pytest

PER_TEST_HOOKS = %r
CALLS = {}


def _ours(impl):
    plugin = impl.plugin
    name = getattr(plugin, "__module__", "") or ""
    return name.startswith("pytest_gpuutil") or str(getattr(plugin, "__name__", "")).startswith("pytest_gpuutil")


def pytest_sessionfinish(session):
    pm = session.config.pluginmanager
    found = {h: sum(1 for impl in getattr(pm.hook, h).get_hookimpls() if _ours(impl)) for h in PER_TEST_HOOKS}
    pathlib.Path("hooks.json").write_text(json.dumps(found))
""" % (PER_TEST_HOOKS,)


def test_no_per_test_hook_without_the_flag(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(COUNT_HOOKS)
    pytester.makepyfile(test_plain="def test_a():\n    pass\n\ndef test_b():\n    pass\n")
    run(pytester).assert_outcomes(passed=2)
    assert json.loads((pytester.path / "hooks.json").read_text()) == dict.fromkeys(PER_TEST_HOOKS, 0)
    run(pytester, "--gpu-util").assert_outcomes(passed=2)  # the same count sees them when they are there
    with_flag = json.loads((pytester.path / "hooks.json").read_text())
    # the teardown's work is done as its report is logged: only limits wrap the making of a report
    assert with_flag["pytest_runtest_makereport"] == 0 and with_flag["pytest_runtest_protocol"] == 0, with_flag
    assert all(with_flag[h] >= 1 for h in ("pytest_runtest_call", "pytest_runtest_teardown", "pytest_runtest_logreport"))
    run(pytester, "--gpu-util", "--gpu-util-thresholds=min_busy_pct=20").assert_outcomes(passed=2)  # limits: wrapped
    assert json.loads((pytester.path / "hooks.json").read_text())["pytest_runtest_makereport"] == 1


def test_fixtures_without_the_flag_still_reach_the_run_files(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(COUNT_HOOKS)
    pytester.makepyfile(test_tables="""
def test_before():
    pass

def test_rows(metric_table):
    metric_table("speed", ["n", "ms"]).add_row({"n": 1, "ms": 2.5})

def test_after():
    pass
""")
    run(pytester).assert_outcomes(passed=3)
    csv = (pytester.path / ".gpu_util" / "metric_table_speed.csv").read_text()
    assert "test_tables.py::test_rows" in csv and "2.5" in csv
    # registered when the fixture was first used: from then on the per-test hooks are there
    assert json.loads((pytester.path / "hooks.json").read_text())["pytest_runtest_logreport"] == 1


FIFTY_TESTS = """
import pytest

@pytest.mark.parametrize("i", range(60))
def test_t(gpu, i):
    gpu.run(f"nvjet_sm90_tst_{i}", 100_000)
"""


def test_every_junit_testcase_gets_its_figures_without_a_flush_per_test(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(SYNTHETIC_CONFTEST + LOG_BATCHES)
    pytester.makepyfile(test_many=FIFTY_TESTS)
    run(pytester, "--gpu-util", "--junitxml=junit.xml", "--gpu-util-flush", "tests=25").assert_outcomes(passed=60)
    flushes = (pytester.path / "batches.jsonl").read_text().splitlines()
    assert len(flushes) <= 4  # 25, 50, the last test's, the session's end: not one a test
    cases = ET.parse(pytester.path / "junit.xml").getroot().iter("testcase")
    props = [{p.get("name"): p.get("value") for p in case.iter("property")} for case in cases]
    assert len(props) == 60
    assert all(p.get("gpu_util.kernel_count") == "1" for p in props), [p for p in props if not p][:3]
    assert all(p.get("gpu_util.gpu_busy_ms") == "0.1" for p in props)


def test_junit_figures_join_a_tests_own_properties(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(SYNTHETIC_CONFTEST)
    pytester.makepyfile(test_own="""
def test_a(gpu, record_property):
    record_property("mine", "1")
    gpu.run("nvjet_sm90_tst_a", 100_000)

def test_b(gpu):
    pass
""")
    run(pytester, "--gpu-util", "--junitxml=junit.xml").assert_outcomes(passed=2)
    case = next(ET.parse(pytester.path / "junit.xml").getroot().iter("testcase"))
    (properties,) = case.findall("properties")
    names = [p.get("name") for p in properties]
    assert names[0] == "mine" and "gpu_util.kernel_count" in names


def test_the_cost_line_counts_every_hooks_time(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    pytester.makeconftest(SYNTHETIC_CONFTEST)
    pytester.makepyfile(test_many=FIFTY_TESTS)
    result = run(pytester, "--gpu-util", "--gpu-util-flush", "tests=25")
    result.assert_outcomes(passed=60)
    totals = json.loads((pytester.path / ".gpu_util" / "gpu_util.json").read_text())["totals"]
    # the hooks' time holds the records' part (windows, records, flushes) and more (the session's end)
    assert totals["measure_hooks_ms"] > totals["measure_in_tests_ms"] > 0
    assert totals["measure_ms"] == totals["measure_hooks_ms"]
    printed = float(result.stdout.str().split("measurement cost ")[1].split(" s")[0])
    assert printed * 1000 >= round(totals["measure_ms"], 0) - 1  # the summary's line counts the summary too
    # of it, torch's calls at the windows' edges (the synthetic GPU's synchronize: a call that returns at once)
    assert 0 < totals["torch_calls_ms"] <= totals["measure_in_tests_ms"]
    assert "(of which torch's synchronize and allocator reads with CUPTI's clock 0.0" in result.stdout.str()


@pytest.mark.parametrize("setup, call, teardown, word", [
    ("passed", "passed", "passed", "passed"),
    ("failed", None, "passed", "error"),
    ("skipped", None, "passed", "skipped"),
    ("passed", "failed", "failed", "failed"),
    ("passed", "skipped", "passed", "skipped"),
    ("passed", "passed", "failed", "error"),
    ("passed", ("skipped", "xfail"), "failed", "xfailed"),
    ("passed", ("passed", "xfail"), "passed", "xpassed"),
    (None, "passed", None, "passed"),
    (None, None, None, "passed"),
])
def test_a_tests_outcome_from_its_reports(setup, call, teardown, word) -> None:
    from _pytest.reports import TestReport

    from pytest_gpuutil.session.measuring import outcome_of

    def report(said, when):
        if said is None:
            return None
        outcome, xfail = said if isinstance(said, tuple) else (said, None)
        made = TestReport("t.py::test_x", ("t.py", 0, "test_x"), {}, outcome, None, when)
        if xfail:
            made.wasxfail = "reason"
        return made

    reports = report(setup, "setup"), report(call, "call"), report(teardown, "teardown")
    assert outcome_of(*reports) == word
