"""The run document's format: the machine id, what a document holds, its JSON and a test's file name."""
from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from pytest_gpuutil.records import TestRecord
from pytest_gpuutil.rundoc.document import (
    RUN_FORMAT,
    RUN_VERSION,
    json_bytes,
    machine_id,
    now_utc,
    run_document,
    safe_name,
)
from pytest_gpuutil.rundoc.reading import load_run_doc
from tests.helpers.run_docs import H100

RECORDS = [
    TestRecord(test="tests/test_a.py::test_mm", outcome="passed", busy_pct=80.0, gpu_busy_ms=12.5, devices=("0",),
               kernel_bench={"mm": {"median": 1.5, "unit": "ms"}}),
    TestRecord(test="tests/test_a.py::test_cpu", outcome="passed", wall_ms=3.0, note="no CUDA device"),
]


@pytest.mark.parametrize(
    ("info", "expected"),
    [
        (H100, "NVIDIA_H100_80GB_HBM3-x1"),
        ({**H100, "gpu_count": 8}, "NVIDIA_H100_80GB_HBM3-x8"),
        ({"gpu_model": "NVIDIA A100-SXM4-40GB", "gpu_count": 2}, "NVIDIA_A100-SXM4-40GB-x2"),
        ({"gpu_model": "Weird/GPU: (rev 2)"}, "Weird_GPU_rev_2"),
        ({"gpu_model": None, "gpu_count": 0}, "no-gpu"),
        ({}, "no-gpu"),
        (None, "no-gpu"),
    ],
)
def test_machine_id(info, expected):
    assert machine_id(info) == expected


def test_machine_id_ignores_host_and_versions():
    other = {**H100, "host": "another-runner", "driver": "560.1", "git_commit": "ffff"}
    assert machine_id(other) == machine_id(H100)
    assert "runner" not in machine_id(H100)



def test_run_document_keys_in_order_and_extras_after():
    doc = run_document(RECORDS, H100, "2026-11-21T23:05:01", totals={"tests": 2}, gpus=[])
    assert list(doc) == ["format", "version", "created", "machine_info", "tests", "totals", "gpus"]
    assert (doc["format"], doc["version"]) == (RUN_FORMAT, RUN_VERSION) == ("pytest-gpuutil", 1)
    assert doc["machine_info"] == H100 and doc["machine_info"] is not H100
    assert doc["tests"] == [r.to_dict() for r in RECORDS]


def test_json_bytes_reads_back_as_the_same_run(tmp_path: Path):
    doc = run_document(RECORDS, H100, "2026-11-21T23:05:01", totals={"tests": 2, "path": Path("x")})
    data = json_bytes(doc)
    assert data.endswith(b"}\n") and b'\n "format": "pytest-gpuutil",\n' in data  # indented by one space
    assert json.loads(data)["totals"]["path"] == "x"  # anything JSON has no type for, as str
    path = tmp_path / "gpu_util.json"
    path.write_bytes(data)
    run = load_run_doc(path)
    assert run.created == "2026-11-21T23:05:01" and run.machine_id == "NVIDIA_H100_80GB_HBM3-x1"
    assert list(run.records.values()) == RECORDS


@pytest.mark.parametrize(
    ("nodeid", "name"),
    [
        ("tests/test_a.py::test_mm", "tests_test_a.py_test_mm"),
        ("tests/test_a.py::test_mm[cuda-bf16 x]", "tests_test_a.py_test_mm_cuda-bf16_x"),
        ("::weird//", "weird"),
        ("t.py::" + "x" * 300, ("t.py_" + "x" * 300)[:180]),
    ],
)
def test_safe_name(nodeid: str, name: str):
    assert safe_name(nodeid) == name


def test_now_utc_is_whole_seconds_in_utc():
    stamp = dt.datetime.fromisoformat(now_utc())
    assert stamp.utcoffset() == dt.timedelta(0) and stamp.microsecond == 0
