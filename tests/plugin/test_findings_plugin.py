"""Findings end to end (pytester) on the synthetic GPU: records, the terminal, the HTML page, the options, the gate.

The synthetic source draws exact patterns with ``gpu.replay`` (events and host waits laid out from
the moment it is called) and hands the waits over with ``drain_syncs``, as CUPTI's kind 38 does.
"""
from __future__ import annotations

import csv as csv_module

import pytest

from tests.helpers import SYNTHETIC_CONFTEST, VIRTUAL_CLOCK, output, read_json, records_by_test, run

pytestmark = pytest.mark.usefixtures("warm_torch")

WORKLOADS = """
def test_launch_bound(gpu):
    gpu.replay([("vectorized_elementwise_kernel<AddFunctor>", "kernel", i * 8_000, 2_000) for i in range(1000)])

def test_item_loop(gpu):
    events = [("nvjet_sm90_tst_256x128", "kernel", i * 60_000, 20_000) for i in range(100)]
    waits = [("Stream Sync", i * 60_000 + 5_000, 16_000) for i in range(100)]
    gpu.replay(events, waits)

def test_healthy(gpu):
    gpu.run("nvjet_sm90_tst_256x128", 50_000_000)  # long: a busy machine's pauses stay a small share

def test_pageable(gpu):
    gpu.replay([("Memcpy HtoD (Pageable -> Device)", "gpu_memcpy", i * 1_000_000, 900_000) for i in range(3)])

def test_cpu_only():
    pass
"""


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(SYNTHETIC_CONFTEST + VIRTUAL_CLOCK)  # the GPU's own clock: no idle from a busy machine
    pytester.makepyfile(test_work=WORKLOADS)
    return pytester


def records(pytester: pytest.Pytester, folder: str = ".gpu_util") -> dict:
    return {k.split("::")[-1]: v for k, v in records_by_test(read_json(pytester.path / folder / "gpu_util.json")).items()}


def rules(record: dict) -> list:
    return [f["rule"] for f in record["findings"]]


def test_each_test_record_says_what_to_fix(suite: pytest.Pytester) -> None:
    result = run(suite, "--gpu-util")
    result.assert_outcomes(passed=5)
    got = records(suite)
    assert "launch-bound" in rules(got["test_launch_bound"])
    assert "host-sync" in rules(got["test_item_loop"])
    assert "pageable-memcpy" in rules(got["test_pageable"])
    assert rules(got["test_healthy"]) == [] and got["test_cpu_only"]["findings"] == []
    finding = got["test_launch_bound"]["findings"][0]
    assert set(finding) == {"rule", "severity", "message", "fix", "impact_pct", "saving_ms", "saving_pct",
                            "saving_basis", "evidence"}
    assert finding["evidence"]["kernels"] == 1000 and finding["evidence"]["median_kernel_us"] == 2
    assert finding["saving_ms"] >= 1.0 and "CUDA graph" in finding["saving_basis"]
    waits = next(f for f in got["test_item_loop"]["findings"] if f["rule"] == "host-sync")["evidence"]
    assert waits["waits"] == 100 and waits["by_name"] == {"Stream Sync": 100}
    csv = (suite.path / ".gpu_util" / "gpu_util.csv").read_text().splitlines()
    rows = list(csv_module.DictReader(csv))
    assert any("launch-bound" in row["findings"].split() for row in rows)


def test_the_terminal_groups_findings_by_rule_with_the_worst_tests(suite: pytest.Pytester,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    narrow = run(suite, "--gpu-util")  # 80 columns: the section wraps, no line wider than the terminal
    section = narrow.stdout.lines[next(i for i, line in enumerate(narrow.stdout.lines) if "findings: what to fix" in line):]
    assert section and max(len(line) for line in section[:section.index(next(l for l in section if l.startswith("wrote ")))]) <= 80
    monkeypatch.setenv("COLUMNS", "200")
    result = run(suite, "--gpu-util")
    result.stdout.fnmatch_lines([
        "*findings: what to fix (pytest-gpuutil)*",
        "* of 5 tests have findings worth 1 ms and 2 % of their time*",
        "top fixes for this run, by the time they would save (about * in all):",
        "*ms  * in test_work.py: * test*",
        "*worst tests*",
        "tests in test_work.py::",  # the file the worst tests share, once
        "*ms  test_*  *",
    ])
    assert "capture the launch loops in a CUDA graph in test_work.py: 1 test" in result.stdout.str()
    doc = read_json(suite.path / ".gpu_util" / "gpu_util.json")
    summary = doc["findings_summary"]
    assert summary["tests"] == 5 and summary["floor"] == {"ms": 1.0, "pct": 2.0}
    assert summary["top"][0]["saving_ms"] == max(t["saving_ms"] for t in summary["top"])
    assert {t["rule"] for t in summary["top"]} >= {"launch-bound", "host-sync", "pageable-memcpy"}


def test_the_floor_keeps_small_findings_in_the_json_only(suite: pytest.Pytester) -> None:
    run(suite, "--gpu-util", "--gpu-util-findings-floor", "1000ms")
    got = records(suite)
    assert all(r["findings"] == [] for r in got.values() if r["findings"] is not None)
    below = got["test_launch_bound"]["below_floor"]
    assert "launch-bound" in [f["rule"] for f in below] and below[0]["saving_ms"] > 0
    summary = read_json(suite.path / ".gpu_util" / "gpu_util.json")["findings_summary"]
    assert summary["findings"] == 0 and summary["below_floor"] >= 3 and summary["top"] == []
    suite.makeini("[pytest]\ngpu_util_findings_floor = 0\n")
    run(suite, "--gpu-util")
    assert all(not r["below_floor"] for r in records(suite).values())


def test_findings_off_looks_for_none_and_says_nothing(suite: pytest.Pytester) -> None:
    result = run(suite, "--gpu-util", "--gpu-util-findings=off")
    result.assert_outcomes(passed=5)
    assert "what to fix" not in result.stdout.str()
    assert all(r["findings"] is None for r in records(suite).values())


def test_rules_are_left_out_from_the_command_line_or_the_ini_file(suite: pytest.Pytester) -> None:
    run(suite, "--gpu-util", "--gpu-util-findings-ignore", "launch-bound,pageable-memcpy")
    got = records(suite)
    assert rules(got["test_launch_bound"]) == ["gpu-idle"]  # what launch-bound took the place of
    assert "memcpy-dominant" in rules(got["test_pageable"]) and "pageable-memcpy" not in rules(got["test_pageable"])
    suite.makeini("[pytest]\ngpu_util_findings_ignore = launch-bound gpu-idle\n")
    run(suite, "--gpu-util")
    assert rules(records(suite)["test_launch_bound"]) == []


@pytest.mark.parametrize("args,ini,message", [
    (("--gpu-util-findings-ignore", "gpu_idle"), "", "*unknown findings rule gpu_idle (rules: pageable-memcpy, host-sync*"),
    (("--gpu-util-findings", "maybe"), "", "*expected on or off, got 'maybe'*"),
    (("--gpu-util-findings-floor", "1s"), "", "*--gpu-util-findings-floor*expected MSms and/or PCT%*got '1s'*"),
    ((), "[pytest]\ngpu_util_findings_ignore = nope\n", "*ini key gpu_util_findings_ignore*unknown findings rule nope*"),
])
def test_bad_findings_options_are_one_clear_line(suite: pytest.Pytester, args: tuple, ini: str, message: str) -> None:
    if ini:
        suite.makeini(ini)
    result = run(suite, "--gpu-util", *args)
    assert result.ret != 0
    assert any(__import__("fnmatch").fnmatch(line, message) for line in output(result).splitlines()), output(result)


def test_the_html_report_shows_findings_by_rule_and_per_test(suite: pytest.Pytester) -> None:
    run(suite, "--gpu-util", "--gpu-util-html")
    page = (suite.path / ".gpu_util" / "report.html").read_text(encoding="utf-8")
    assert '<section id="findings"><h2>Findings: what to fix</h2>' in page
    assert "of 5 tests have findings" in page and "launch fewer, larger kernels" in page
    assert '<table id="findings-ranking">' in page and "capture the launch loops in a CUDA graph in" in page
    assert '"fd":[["launch-bound","' in page  # the detail view's data
    assert '<option value="findings">with findings</option>' in page


def test_a_finding_new_against_the_baseline_fails_the_gate(pytester: pytest.Pytester,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makeconftest(SYNTHETIC_CONFTEST + VIRTUAL_CLOCK)  # a busy machine's pauses add no gpu-idle finding
    pytester.makepyfile(test_work="""
import os

def test_loop(gpu):
    if os.environ.get("SLOW_LOOP"):
        gpu.replay([("vectorized_elementwise_kernel<AddFunctor>", "kernel", i * 8_000, 2_000) for i in range(1000)])
    else:
        gpu.run("nvjet_sm90_tst_256x128", 50_000_000)
""")
    assert run(pytester, "--gpu-util", "--gpu-util-save", "base").ret == 0
    same = run(pytester, "--gpu-util", "--gpu-util-compare", "base", "--gpu-util-fail", "findings:0")
    assert same.ret == 0, output(same)
    same.stdout.fnmatch_lines(["no GPU regressions against baseline*: 1 tests compared"])
    monkeypatch.setenv("SLOW_LOOP", "1")
    monkeypatch.setenv("COLUMNS", "200")  # the regression table keeps its limit column
    worse = run(pytester, "--gpu-util", "--gpu-util-compare", "base", "--gpu-util-fail", "findings.launch-bound:0")
    assert worse.ret != 0
    worse.stdout.fnmatch_lines(["test_loop*findings: new launch-bound*0*1*+1*+0*",
                                "FAILED: 1 regression(s) in 1 test(s) (limits: findings.launch-bound:0)"])
    other_rule = run(pytester, "--gpu-util", "--gpu-util-compare", "base", "--gpu-util-fail", "findings.host-sync:0")
    assert other_rule.ret == 0, output(other_rule)


def test_findings_travel_from_xdist_workers(suite: pytest.Pytester) -> None:
    result = run(suite, "--gpu-util", "-n", "2")
    result.assert_outcomes(passed=5)
    got = records(suite)
    assert "launch-bound" in rules(got["test_launch_bound"]) and got["test_cpu_only"]["findings"] == []
    result.stdout.fnmatch_lines(["*findings: what to fix (pytest-gpuutil)*"])
