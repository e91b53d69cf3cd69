"""GPU memory per test on a real GPU: skipped without CUDA, run on the H100/H200 before any claim."""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

MEMORY_TESTS = """
import pytest
import torch

KEEP = []

def test_1_one_gib():
    x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    del x

@pytest.mark.gpu_util(max_leak="1 MiB")
def test_2_keeps_256_mib():
    KEEP.append(torch.empty(256 << 20, dtype=torch.uint8, device="cuda"))

def test_3_out_of_memory():
    free, total = torch.cuda.mem_get_info()
    torch.empty(total * 2, dtype=torch.uint8, device="cuda")  # never fits: the allocator reports an OOM

def test_4_kernel_bench_still_has_memory(kernel_bench):
    x = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
    kernel_bench(lambda: x.add_(1), warmup_ms=1, rep_ms=2)
"""


def run_memory_tests(pytester, *args):
    pytester.makepyfile(test_mem=MEMORY_TESTS)
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
    bench = records["test_4_kernel_bench_still_has_memory"]
    assert bench["gpu_busy_ms"] is None and bench["peak_alloc_mb"] >= 64 + 256


def test_memory_history_names_the_allocating_line(pytester):
    result, records = run_memory_tests(pytester, "--gpu-util-memory-history")
    result.assert_outcomes(passed=2, failed=2)
    text = result.stdout.str()
    assert "largest allocations live at the peak on device 0:" in text
    assert "test_mem.py:12 (test_2_keeps_256_mib)" in text  # the line that made the 256 MiB
    assert "out of memory on device 0 asking for" in text
    assert "test_mem.py:16 (test_3_out_of_memory)" in text  # the line whose allocation did not fit
    assert "memory snapshot:" in text
    snapshots = list((pytester.path / ".gpu_util" / "memory").glob("*.pickle"))
    assert len(snapshots) == 2  # the leaky test and the one out of memory
