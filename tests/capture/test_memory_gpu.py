"""GPU memory per test on a real GPU: skipped without CUDA, run on the H100/H200 before any claim."""
from __future__ import annotations

import json

import pytest

from tests.helpers.memory_workloads import LEAK_LINE, OOM_LINE, TESTS

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

def run_memory_tests(pytester, *args):
    """The four tests of tests/helpers/memory_workloads.py (its LEAK_LINE and OOM_LINE say where they allocate)."""
    pytester.makepyfile(test_mem=TESTS)
    result = pytester.runpytest_subprocess("--gpu-util", "-p", "no:cacheprovider", *args)
    doc = json.loads((pytester.path / ".gpu_util" / "gpu_util.json").read_text())
    return result, {t["test"].split("::")[1]: t for t in doc["tests"]}


def test_peaks_leaks_and_out_of_memory(pytester):
    result, records = run_memory_tests(pytester)
    result.assert_outcomes(passed=2, failed=2)
    gib = records["test_1_one_gib"]
    base = gib["leaked_mb"]
    assert abs(gib["peak_alloc_mb"] - 1024) <= 2, gib["peak_alloc_mb"]
    assert gib["peak_reserved_mb"] >= 1024 and abs(base) <= 2
    leak = records["test_2_keeps_256_mib"]
    assert abs(leak["leaked_mb"] - 256) <= 2 and leak["outcome"] == "failed"
    result.stdout.fnmatch_lines(["*gpu_util: leaked_mb 256.0 MiB is above max_leak=1.0 MiB*"])
    oom = records["test_3_out_of_memory"]
    assert oom["outcome"] == "failed" and oom["ooms"] == 1
    assert oom["peak_alloc_mb"] >= 256 and "out of GPU memory on device 0" in oom["note"]
    bench = records["test_4_kernel_bench"]
    assert bench["gpu_busy_ms"] is None and bench["peak_alloc_mb"] >= 64 + 256


def test_memory_history_names_the_allocating_line(pytester):
    result, records = run_memory_tests(pytester, "--gpu-util-memory-history")
    result.assert_outcomes(passed=2, failed=2)
    text = result.stdout.str()
    assert "largest allocations live at the peak on device 0:" in text
    assert f"test_mem.py:{LEAK_LINE} (test_2_keeps_256_mib)" in text  # the line that made the 256 MiB
    assert "out of memory on device 0 asking for" in text
    assert f"test_mem.py:{OOM_LINE} (test_3_out_of_memory)" in text  # the line whose allocation did not fit
    assert "memory snapshot:" in text
    snapshots = list((pytester.path / ".gpu_util" / "memory").glob("*.pickle"))
    assert len(snapshots) == 2  # the leaky test and the one out of memory


def test_memory_off_reads_no_counters_and_checks_no_memory_limit(pytester):
    result, records = run_memory_tests(pytester, "--gpu-util-memory=off")
    result.assert_outcomes(passed=3, failed=1)  # the leak is no longer caught; the OOM still fails its test
    for record in records.values():
        assert record["peak_alloc_mb"] is None and record["leaked_mb"] is None and record["memory_by_device"] == {}
    assert records["test_1_one_gib"]["busy_pct"] is not None  # the GPU figures are still there
    said = " ".join(result.stdout.str().split())  # the summary wraps the line at the terminal's width
    assert "NOT CHECKED for 1 test (no GPU measurement, or only memory limits under --gpu-util-memory=off)" in said
