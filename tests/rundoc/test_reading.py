"""A run file read back: the record schema checked, every problem one line naming the file."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from pytest_gpuutil.records import TestRecord
from pytest_gpuutil.rundoc.document import RunDoc, RunDocError
from pytest_gpuutil.rundoc.reading import load_run_doc
from tests.helpers.run_docs import run_doc


def test_load_run_doc_roundtrip(tmp_path: Path):
    path = tmp_path / "gpu_util.json"
    path.write_text(json.dumps(run_doc()))
    doc = load_run_doc(path)
    assert isinstance(doc, RunDoc)
    assert doc.path == path
    assert doc.machine_info["gpu_model"] == "NVIDIA H100 80GB HBM3"
    assert doc.machine_id == "NVIDIA_H100_80GB_HBM3-x1"
    assert doc.created == "2026-11-21T23:05:01"
    assert set(doc.records) == {"tests/test_a.py::test_mm", "tests/test_a.py::test_cpu"}
    mm = doc.records["tests/test_a.py::test_mm"]
    assert mm == TestRecord(test="tests/test_a.py::test_mm", outcome="passed", busy_pct=80.0,
                            gpu_busy_ms=12.5, kernel_count=40, devices=("0",),
                            kernel_bench={"mm": {"median": 1.5, "unit": "ms"}})
    assert doc.records["tests/test_a.py::test_cpu"].busy_pct is None


def test_load_run_doc_tolerates_unknown_keys_and_nulls(tmp_path: Path):
    doc = run_doc()
    doc["future_key"] = 1
    doc["machine_info"] = None
    doc["tests"][0]["new_field"] = "x"
    doc["tests"][0]["kernel_bench"] = None
    path = tmp_path / "run.json"
    path.write_text(json.dumps(doc))
    loaded = load_run_doc(path)
    assert loaded.machine_id == "no-gpu"
    assert loaded.records["tests/test_a.py::test_mm"].kernel_bench == {}


def _write(tmp_path: Path, content: str | bytes) -> Path:
    path = tmp_path / "bad.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


def _mutated(**changes: Any) -> str:
    doc = run_doc()
    for key, value in changes.items():
        if key.startswith("t0_"):
            doc["tests"][0][key[3:]] = value
        else:
            doc[key] = value
    return json.dumps(doc)


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ('{"format": "pytest-gpuutil", "version": 1, "tests": [', "not valid JSON (line 1"),
        (b"\xff\xfe\x00garbage", "not UTF-8"),
        ("[1, 2]", "expected a JSON object, got list"),
        ('{"benchmarks": []}', "not a pytest-gpuutil run file"),
        (_mutated(version=2), "newer pytest-gpuutil (version 2"),
        (_mutated(version="1"), "bad version '1'"),
        (_mutated(machine_info=[1]), "machine_info: expected an object"),
        (_mutated(tests={"a": 1}), "tests: expected a list"),
        (_mutated(tests=[1]), "tests[0]: expected an object, got int"),
        (_mutated(t0_test=""), "tests[0].test: expected a non-empty string"),
        (_mutated(t0_busy_pct="80"), "tests[0].busy_pct (tests/test_a.py::test_mm): expected a "
                                     "finite number or null, got '80'"),
        (_mutated(t0_kernel_count=True), "tests[0].kernel_count"),
        (_mutated(t0_kernel_bench={"mm": 3}), "tests[0].kernel_bench['mm']"),
        (_mutated(t0_devices="0"), "tests[0].devices"),
        (_mutated(t0_outcome=3), "tests[0].outcome"),
    ],
)
def test_load_run_doc_errors_are_one_line(tmp_path: Path, content, problem):
    path = _write(tmp_path, content)
    with pytest.raises(RunDocError) as info:
        load_run_doc(path)
    message = str(info.value)
    assert message.startswith(f"{path}: ")
    assert problem in message
    assert "\n" not in message


def test_load_run_doc_nan_is_rejected(tmp_path: Path):
    path = _write(tmp_path, _mutated().replace('"busy_pct": 80.0', '"busy_pct": NaN'))
    with pytest.raises(RunDocError, match="busy_pct"):
        load_run_doc(path)


def test_load_run_doc_missing_and_directory(tmp_path: Path):
    with pytest.raises(RunDocError, match="nope.json: no such file"):
        load_run_doc(tmp_path / "nope.json")
    with pytest.raises(RunDocError, match="is a directory"):
        load_run_doc(tmp_path)


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="needs file permissions")
def test_load_run_doc_unreadable(tmp_path: Path):
    path = _write(tmp_path, _mutated())
    path.chmod(0)
    with pytest.raises(RunDocError, match="cannot read"):
        load_run_doc(path)
