"""A small run document (two tests on an H100) for the run document's and the baselines' tests."""
from __future__ import annotations

from typing import Any

from pytest_gpuutil.records import TestRecord

H100 = {
    "gpu_model": "NVIDIA H100 80GB HBM3",
    "gpu_count": 1,
    "driver": "550.54",
    "cuda": "12.4",
    "torch": "2.13.0",
    "host": "runner-abc123",
    "python": "3.11.7",
    "git_commit": "0123456789abcdef0123456789abcdef01234567",
}


def run_doc(machine_info: dict[str, Any] | None = None, records: list[TestRecord] | None = None) -> dict[str, Any]:
    """A gpu_util.json document as a dict: a GPU test with a kernel_bench result and a CPU-only test."""
    records = records if records is not None else [
        TestRecord(test="tests/test_a.py::test_mm", outcome="passed", busy_pct=80.0,
                   gpu_busy_ms=12.5, kernel_count=40, devices=("0",),
                   kernel_bench={"mm": {"median": 1.5, "unit": "ms"}}),
        TestRecord(test="tests/test_a.py::test_cpu", outcome="passed", wall_ms=3.0,
                   note="no CUDA device"),
    ]
    return {
        "format": "pytest-gpuutil",
        "version": 1,
        "machine_info": H100 if machine_info is None else machine_info,
        "created": "2026-11-21T23:05:01",
        "tests": [r.to_dict() for r in records],
    }
