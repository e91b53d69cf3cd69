"""The continuous capture end to end (pytester), on a synthetic GPU so it runs without CUDA.

The synthetic GPU (tests/helpers SYNTHETIC_CONFTEST) reaches the plugin through its
``pytest_gpuutil_event_source`` hook: windows, flushes, attribution, records, xdist transport
and stepping aside all run for real; only the events come from test code instead of CUPTI.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from tests.helpers import LOG_BATCHES, SYNTHETIC_CONFTEST, read_json, records_by_test, run

pytestmark = pytest.mark.usefixtures("warm_torch")

FIVE_TESTS = """
import pytest

@pytest.mark.parametrize("i", range(5))
def test_t(gpu, i):
    gpu.run(f"nvjet_sm90_tst_{i}", 100_000 * (i + 1))
"""


def batches(pytester: pytest.Pytester) -> list[list]:
    path = pytester.path / "batches.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def records(pytester: pytest.Pytester) -> dict:
    return records_by_test(read_json(pytester.path / ".gpu_util" / "gpu_util.json"))


def test_each_window_gets_exactly_its_own_events(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # the measurement-cost line whole, not wrapped
    pytester.makeconftest(SYNTHETIC_CONFTEST)
    pytester.makepyfile(
        test_windows="""
import pytest

@pytest.fixture
def warm(gpu):
    gpu.run("setup_kernel", 500_000)  # in setup: outside the call window
    yield
    gpu.run("teardown_kernel", 500_000)

def test_matmuls(gpu, warm):
    gpu.run("nvjet_sm90_tst_256x128", 200_000)
    gpu.run("nvjet_sm90_tst_256x128", 200_000)
    gpu.run("vectorized_elementwise_kernel", 50_000)

def test_idle(gpu):
    pass

def test_two_streams(gpu):
    gpu.run("flash_fwd_kernel", 300_000, stream=7)
    gpu.run("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 100_000, stream=8)
"""
    )
    result = run(pytester, "--gpu-util")
    result.assert_outcomes(passed=3)
    got = records(pytester)
    matmuls = got["test_windows.py::test_matmuls"]
    assert matmuls["kernel_count"] == 3
    assert matmuls["gpu_busy_ms"] == pytest.approx(0.45, abs=1e-9)
    assert matmuls["top_kernel"] == "nvjet_sm90_tst_256x128"
    assert [(k["name"], k["category"], k["count"], k["total_us"]) for k in matmuls["top_kernels"]] == [
        ("nvjet_sm90_tst_256x128", "gemm", 2, 400.0), ("vectorized_elementwise_kernel", "elementwise", 1, 50.0)]
    gaps = [g["dur_us"] for g in matmuls["idle_gaps"]]
    assert 1 <= len(gaps) <= 3 and gaps == sorted(gaps, reverse=True) and min(gaps) > 0
    assert matmuls["categories"]["gemm"]["time_us"] == pytest.approx(400.0, abs=1e-6)
    assert set(matmuls["categories"]) == {"gemm", "elementwise"}
    assert matmuls["wall_ms"] >= 0.45 and matmuls["measure_ms"] > 0
    assert 0 < matmuls["busy_pct"] <= 100
    idle = got["test_windows.py::test_idle"]
    assert idle["kernel_count"] == 0 and idle["gpu_busy_ms"] == 0.0 and idle["note"] == ""
    streams = got["test_windows.py::test_two_streams"]
    assert streams["kernel_count"] == 2
    assert streams["attention_pct"] > 0 and streams["communication_pct"] > 0
    assert streams["gpu_busy_ms"] == pytest.approx(0.4, abs=1e-9)
    result.stdout.fnmatch_lines([
        "profiler start-up * s (synthetic), not charged to any test",
        "measurement cost * s (* s with the tests, the rest at the end), *% of the * s the tests took (3 tests measured)",
    ])


def test_the_objects_from_before_the_first_test_are_frozen_for_the_collector_until_the_end(
        pytester: pytest.Pytester) -> None:
    """What was imported before the session (torch: ~200,000 objects) would make every full
    collection among the tests walk it all, and leaves one owed that the plugin's own allocations
    would bring due inside some test's window. The plugin sets those objects aside
    (``gc.freeze()``) before the first test and gives them back at the end."""
    pytester.makeconftest(SYNTHETIC_CONFTEST + """
import gc
SEEN = {}

def pytest_runtest_setup(item):
    SEEN.setdefault("first_test", gc.get_freeze_count())

def pytest_unconfigure(config):
    print("FROZEN", SEEN.get("first_test", -1), gc.get_freeze_count())
""")
    pytester.makepyfile(test_one="def test_one(gpu):\n    gpu.run('k', 10_000)\n")
    result = run(pytester, "--gpu-util", "-s")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["profiler start-up * s (synthetic), not charged to any test"])
    during, after = map(int, re.search(r"^FROZEN (-?\d+) (-?\d+)$", result.stdout.str(), re.M).groups())
    assert during > 10_000 and after == 0


def test_records_wait_for_the_flush_and_travel_once(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(SYNTHETIC_CONFTEST + LOG_BATCHES)
    pytester.makepyfile(test_five=FIVE_TESTS)
    result = run(pytester, "--gpu-util", "--gpu-util-flush", "tests=2")
    result.assert_outcomes(passed=5)
    assert batches(pytester) == [
        ["test_t[1]", ["test_t[0]", "test_t[1]"]],
        ["test_t[3]", ["test_t[2]", "test_t[3]"]],
        ["test_t[4]", ["test_t[4]"]],  # the last test flushes what is left
    ]
    got = records(pytester)
    assert [got[f"test_five.py::test_t[{i}]"]["gpu_busy_ms"] for i in range(5)] == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.5])


def test_a_plain_runs_records_go_straight_to_the_receiver_not_on_its_reports(pytester: pytest.Pytester) -> None:
    """No JSON round trip per test in one process: its reports carry nothing (an xdist worker's do)."""
    pytester.makeconftest(SYNTHETIC_CONFTEST + """
import pathlib

def pytest_runtest_logreport(report):
    if getattr(report, "gpu_util", None) is not None:
        (pathlib.Path(__file__).parent / "carried.txt").write_text(report.nodeid)
""")
    pytester.makepyfile(test_five=FIVE_TESTS)
    run(pytester, "--gpu-util", "--gpu-util-flush", "tests=2").assert_outcomes(passed=5)
    assert not (pytester.path / "carried.txt").exists()
    got = records(pytester)
    assert [got[f"test_five.py::test_t[{i}]"]["gpu_busy_ms"] for i in range(5)] == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.5])


def test_a_record_hook_in_one_folder_applies_to_its_tests_only(pytester: pytest.Pytester) -> None:
    """The plugin asks once per module whether a pytest_gpuutil_record hook applies and calls none
    where none does; a record that the hook replaced still carries what building it cost."""
    pytester.makeconftest(SYNTHETIC_CONFTEST)
    hooked = pytester.mkpydir("z_hooked")  # collected after test_out.py
    (hooked / "conftest.py").write_text(
        "import dataclasses\n\n"
        "def pytest_gpuutil_record(item, record, when):\n"
        "    return dataclasses.replace(record, note='hooked') if item.name == 'test_t[1]' else None\n")
    (hooked / "test_in.py").write_text(FIVE_TESTS)
    (pytester.path / "test_out.py").write_text(FIVE_TESTS)
    run(pytester, "--gpu-util", "--gpu-util-flush", "tests=2").assert_outcomes(passed=10)
    got = records(pytester)
    assert {test: r["note"] for test, r in got.items() if r["note"]} == {"z_hooked/test_in.py::test_t[1]": "hooked"}
    assert all(r["measure_ms"] > 0 for r in got.values())
    assert got["z_hooked/test_in.py::test_t[1]"]["gpu_busy_ms"] == pytest.approx(0.2)


def test_without_a_rule_due_the_last_test_carries_every_record(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(SYNTHETIC_CONFTEST + LOG_BATCHES)
    pytester.makepyfile(test_five=FIVE_TESTS)
    run(pytester, "--gpu-util").assert_outcomes(passed=5)
    assert batches(pytester) == [["test_t[4]", [f"test_t[{i}]" for i in range(5)]]]


def test_the_seconds_and_megabytes_rules(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(SYNTHETIC_CONFTEST + LOG_BATCHES)
    pytester.makepyfile(
        test_rules="""
import time

def test_a(gpu):
    gpu.run("k", 1000)

def test_slow(gpu):
    time.sleep(0.3)

def test_many_events(gpu):
    for _ in range(10):
        gpu.run("k", 1000)

def test_last(gpu):
    pass
"""
    )
    # seconds: flushed once 0.2 s have passed; megabytes: 10 events x 200 bytes > 0.001 MB
    run(pytester, "--gpu-util", "--gpu-util-flush", "seconds=0.2,megabytes=0.001").assert_outcomes(passed=4)
    carried = dict((t, r) for t, r in batches(pytester))
    assert carried["test_slow"][-1] == "test_slow"
    assert carried["test_many_events"] == ["test_many_events"]
    assert carried["test_last"] == ["test_last"]


def test_a_test_with_limits_is_flushed_at_once_and_fails_itself(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(SYNTHETIC_CONFTEST + LOG_BATCHES)
    pytester.makepyfile(
        test_limits="""
import pytest

def test_before(gpu):
    gpu.run("nvjet_a", 100_000)

@pytest.mark.gpu_util(max_kernel_count=1)
def test_too_many(gpu):
    gpu.run("nvjet_a", 100_000)
    gpu.run("nvjet_a", 100_000)

def test_after(gpu):
    gpu.run("nvjet_a", 100_000)

def test_end(gpu):
    pass
"""
    )
    result = run(pytester, "--gpu-util", "--gpu-util-flush", "tests=100")
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines(["*gpu_util: kernel_count 2 is above max_kernel_count=1*"])
    assert batches(pytester)[0] == ["test_too_many", ["test_before", "test_too_many"]]
    assert records(pytester)["test_limits.py::test_too_many"]["outcome"] == "failed"


def test_junit_files_get_every_tests_figures(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(SYNTHETIC_CONFTEST + LOG_BATCHES)
    pytester.makepyfile(test_five=FIVE_TESTS)
    run(pytester, "--gpu-util", "--junitxml=junit.xml").assert_outcomes(passed=5)
    assert batches(pytester) == [["test_t[4]", [f"test_t[{i}]" for i in range(5)]]]  # no flush per test
    junit = (pytester.path / "junit.xml").read_text()
    assert junit.count('name="gpu_util.kernel_count" value="1"') == 5


def test_a_run_stopped_early_keeps_what_it_measured(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(SYNTHETIC_CONFTEST)
    pytester.makepyfile(
        test_stop="""
def test_a(gpu):
    gpu.run("nvjet_a", 100_000)

def test_b(gpu):
    gpu.run("nvjet_b", 100_000)
    assert False

def test_never_run(gpu):
    pass
"""
    )
    run(pytester, "--gpu-util", "-x").assert_outcomes(passed=1, failed=1)
    got = records(pytester)
    assert set(got) == {"test_stop.py::test_a", "test_stop.py::test_b"}
    assert got["test_stop.py::test_b"]["kernel_count"] == 1


def test_source_torch_profiles_each_test_on_its_own(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(SYNTHETIC_CONFTEST)
    pytester.makepyfile(test_five=FIVE_TESTS)
    result = run(pytester, "--gpu-util", "--gpu-util-source", "torch")
    result.assert_outcomes(passed=5)
    assert "profiler start-up" not in result.stdout.str()  # no continuous capture, no synthetic GPU
    # the synthetic source is not asked: without CUDA nothing is measured, with CUDA these tests launch nothing
    assert all(r["gpu_busy_ms"] in (None, 0.0) for r in records(pytester).values())
    assert all(r["kernel_count"] in (None, 0) for r in records(pytester).values())


def test_a_bad_flush_option_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_a="def test_a(): pass")
    result = run(pytester, "--gpu-util", "--gpu-util-flush", "tests=0")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--gpu-util-flush*tests=0*positive whole number*"])


# -- stepping aside -----------------------------------------------------------------------------
STEP_ASIDE_TESTS = """
import pytest
import torch

@pytest.fixture
def outer_profiler():
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
        yield

def test_measured_first(gpu):
    gpu.run("nvjet_a", 100_000)

def test_own_profiler(gpu):
    gpu.run("nvjet_a", 100_000)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
        torch.ones(8) + 1
    gpu.run("nvjet_a", 100_000)

def test_profiler_from_a_fixture(gpu, outer_profiler):
    gpu.run("nvjet_a", 100_000)

def test_kernel_bench(gpu, kernel_bench):
    kernel_bench(lambda: None, warmup_ms=0.1, rep_ms=0.1)

def test_gpu_trace(gpu, gpu_trace):
    with gpu_trace():
        torch.ones(8) + 1

def test_measured_again(gpu):
    gpu.run("nvjet_b", 200_000)
"""


def test_other_profilers_and_kernel_bench_make_the_capture_step_aside(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(SYNTHETIC_CONFTEST)
    pytester.makepyfile(test_aside=STEP_ASIDE_TESTS)
    result = run(pytester, "--gpu-util", "-W", "ignore::UserWarning")
    result.assert_outcomes(passed=6)
    got = records(pytester)
    notes = {name.split("::")[1]: r["note"] for name, r in got.items()}
    assert notes == {
        "test_measured_first": "",
        "test_own_profiler": "the test started its own torch.profiler session",
        "test_profiler_from_a_fixture": "a torch.profiler session was already active",
        "test_kernel_bench": "kernel_bench times this test; the profiler stepped aside",
        "test_gpu_trace": "the gpu_trace fixture profiles this test itself",
        "test_measured_again": "",
    }
    for name in ("test_own_profiler", "test_profiler_from_a_fixture", "test_kernel_bench", "test_gpu_trace"):
        assert got[f"test_aside.py::{name}"]["gpu_busy_ms"] is None
    # the capture came back after each of them, with nothing of theirs in the next window
    again = got["test_aside.py::test_measured_again"]
    assert again["kernel_count"] == 1 and again["gpu_busy_ms"] == pytest.approx(0.2, abs=1e-9)
    assert got["test_aside.py::test_measured_first"]["gpu_busy_ms"] == pytest.approx(0.1, abs=1e-9)


# -- trace files --------------------------------------------------------------------------------
def test_trace_files_hold_the_window_and_analyse_to_the_record(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(SYNTHETIC_CONFTEST)
    pytester.makepyfile(
        test_tr="""
def test_ok(gpu):
    gpu.run("nvjet_sm90_tst_x", 150_000)
    gpu.run("vectorized_elementwise_kernel", 20_000, stream=9)

def test_broken(gpu):
    gpu.run("nvjet_sm90_tst_y", 70_000)
    assert False
"""
    )
    run(pytester, "--gpu-util", "--gpu-util-traces=failed").assert_outcomes(passed=1, failed=1)
    traces = sorted(p.name for p in (pytester.path / ".gpu_util" / "traces").iterdir())
    assert traces == ["test_tr.py_test_broken.json.gz"]
    run(pytester, "--gpu-util", "--gpu-util-traces=all").assert_outcomes(passed=1, failed=1)
    got = records(pytester)
    for name in ("test_ok", "test_broken"):
        path = pytester.path / ".gpu_util" / "traces" / f"test_tr.py_{name}.json.gz"
        out = subprocess.run([sys.executable, "-m", "pytest_gpuutil", "analyze", str(path), "--format", "json"],
                             capture_output=True, text=True, check=True)
        summary = json.loads(out.stdout)
        record = got[f"test_tr.py::{name}"]
        assert summary["window_source"] == "profiler"
        assert summary["busy_us"] == pytest.approx(record["gpu_busy_ms"] * 1000, abs=1e-9)
        assert summary["busy_pct"] == record["busy_pct"]
        assert summary["kernel_count"] == record["kernel_count"]
        assert summary["top_kernels"][0]["name"] == record["top_kernel"]
        assert summary["top_kernels"][:5] == [{**k, "mean_us": k["total_us"] / k["count"]} for k in record["top_kernels"]]
        assert summary["idle_gaps"][:3] == record["idle_gaps"]


# -- xdist --------------------------------------------------------------------------------------
def test_under_xdist_every_record_reaches_the_controller_once(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("xdist")
    pytester.makeconftest(SYNTHETIC_CONFTEST)
    pytester.makepyfile(
        test_many="""
import pytest

@pytest.mark.parametrize("i", range(12))
def test_t(gpu, i):
    gpu.run("nvjet_k", 10_000 * (i + 1))
"""
    )
    monkeypatch.setenv("COLUMNS", "200")  # the start-up line whole, not wrapped
    result = run(pytester, "-n", "2", "--gpu-util", "--gpu-util-flush", "tests=3")
    result.assert_outcomes(passed=12)
    doc = read_json(pytester.path / ".gpu_util" / "gpu_util.json")
    tests = [t["test"] for t in doc["tests"]]
    assert sorted(tests) == sorted(f"test_many.py::test_t[{i}]" for i in range(12))
    got = records_by_test(doc)
    for i in range(12):
        record = got[f"test_many.py::test_t[{i}]"]
        assert record["gpu_busy_ms"] == pytest.approx(0.01 * (i + 1), abs=1e-9)
        assert record["worker"] in ("gw0", "gw1")
    assert {r["worker"] for r in got.values()} == {"gw0", "gw1"}
    result.stdout.fnmatch_lines(["profiler start-up * s (each of 2 processes; longest) (synthetic), not charged to any test"])


def test_a_crashed_worker_loses_only_the_tests_since_its_last_flush(pytester: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    pytester.makeconftest(SYNTHETIC_CONFTEST)
    pytester.makepyfile(
        test_crash="""
import os

def test_1(gpu): gpu.run("k", 1000)
def test_2(gpu): gpu.run("k", 1000)
def test_3(gpu): gpu.run("k", 1000)
def test_4(gpu): gpu.run("k", 1000)
def test_5(gpu): gpu.run("k", 1000)
def test_6_crash(gpu): os._exit(1)
def test_7(gpu): gpu.run("k", 1000)
"""
    )
    # seconds=3600: on a loaded machine the default 10 s since the last flush could flush test 5 too
    result = run(pytester, "-n", "1", "-p", "no:randomly", "--gpu-util", "--gpu-util-flush", "tests=2 seconds=3600")
    result.assert_outcomes(passed=6, failed=1)
    got = records(pytester)
    measured = sorted(name.split("::")[1] for name, r in got.items() if r["kernel_count"] == 1)
    # flushed at tests 2 and 4; test 5 was waiting for the next flush when the worker died
    assert measured == ["test_1", "test_2", "test_3", "test_4", "test_7"]
