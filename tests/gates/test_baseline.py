from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path
from typing import Any

import pytest

from pytest_gpuutil.gates.baseline import (
    BaselineError,
    BaselineNotSaved,
    RunDoc,
    autosave_name,
    baseline_dir,
    describe_saved,
    is_baseline_path,
    load_run_doc,
    machine_id,
    resolve_baseline,
    save_baseline,
    saved_baselines,
)
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


def run_doc(machine_info: dict[str, Any] | None = None, records: list[TestRecord] | None = None):
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


def test_autosave_name_is_sortable_and_has_commit():
    early = autosave_name(H100, dt.datetime(2026, 11, 21, 23, 5, 1, tzinfo=dt.timezone.utc))
    late = autosave_name(H100, dt.datetime(2026, 11, 22, 0, 0, 0, tzinfo=dt.timezone.utc))
    assert early == "20261121_230501_0123456"
    assert sorted([late, early]) == [early, late]
    assert autosave_name({}, dt.datetime(2026, 1, 2, 3, 4, 5)) == "20260102_030405"


def test_save_baseline_writes_under_machine_id(tmp_path: Path):
    doc = run_doc()
    path = save_baseline(doc, tmp_path, "main")
    assert path == tmp_path / "baselines" / "NVIDIA_H100_80GB_HBM3-x1" / "main.json"
    assert json.loads(path.read_text()) == doc
    # no temp files are left behind
    assert [p.name for p in path.parent.iterdir()] == ["main.json"]


def test_save_baseline_replaces_existing(tmp_path: Path):
    save_baseline(run_doc(), tmp_path, "main.json")
    second = run_doc(records=[TestRecord(test="t::x", outcome="failed")])
    path = save_baseline(second, tmp_path, "main")
    assert json.loads(path.read_text())["tests"][0]["test"] == "t::x"


def test_save_baseline_no_gpu(tmp_path: Path):
    path = save_baseline(run_doc(machine_info={"gpu_model": None}), tmp_path, "x")
    assert path.parent.name == "no-gpu"


@pytest.mark.parametrize("name", ["", "../evil", "a/b", ".hidden", "sp ace"])
def test_save_baseline_rejects_bad_names(tmp_path: Path, name: str):
    with pytest.raises(ValueError, match="baseline name"):
        save_baseline(run_doc(), tmp_path, name)
    assert not (tmp_path / "baselines").exists() or not any(
        (tmp_path / "baselines").rglob("*.json")
    )


def test_resolve_none_when_nothing_saved(tmp_path: Path):
    assert resolve_baseline(None, tmp_path, H100) is None
    assert resolve_baseline("", tmp_path, H100) is None


def test_resolve_latest_by_name(tmp_path: Path):
    for name in ["20261120_100000_aaaaaaa", "20261121_230501_bbbbbbb", "20261119_000000"]:
        save_baseline(run_doc(), tmp_path, name)
    assert resolve_baseline(None, tmp_path, H100).name == "20261121_230501_bbbbbbb.json"


def test_resolve_latest_prefers_autosaves_over_named(tmp_path: Path):
    save_baseline(run_doc(), tmp_path, "main")
    assert resolve_baseline("", tmp_path, H100).name == "main.json"
    save_baseline(run_doc(), tmp_path, "20261121_230501")
    assert resolve_baseline("", tmp_path, H100).name == "20261121_230501.json"


def test_resolve_latest_is_per_machine(tmp_path: Path):
    save_baseline(run_doc(machine_info={"gpu_model": "NVIDIA A100", "gpu_count": 1}), tmp_path,
                  "20261121_230501")
    assert resolve_baseline(None, tmp_path, H100) is None
    save_baseline(run_doc(), tmp_path, "20261101_000000")
    assert resolve_baseline(None, tmp_path, H100).name == "20261101_000000.json"


def test_resolve_latest_skips_temp_and_hidden_files(tmp_path: Path):
    directory = tmp_path / "baselines" / "NVIDIA_H100_80GB_HBM3-x1"
    directory.mkdir(parents=True)
    (directory / ".20991231_000000.abc.tmp").write_text("{")
    (directory / ".20991231_000000.json").write_text("{")
    assert resolve_baseline(None, tmp_path, H100) is None
    path = save_baseline(run_doc(), tmp_path, "20261101_000000")
    assert resolve_baseline(None, tmp_path, H100) == path


def test_resolve_name_with_and_without_json(tmp_path: Path):
    path = save_baseline(run_doc(), tmp_path, "main")
    assert resolve_baseline("main", tmp_path, H100) == path
    assert resolve_baseline("main.json", tmp_path, H100) == path


def test_resolve_existing_path(tmp_path: Path):
    other = tmp_path / "elsewhere" / "run.json"
    other.parent.mkdir()
    other.write_text(json.dumps(run_doc()))
    assert resolve_baseline(str(other), tmp_path, H100) == other


def test_resolve_a_name_not_saved_is_not_saved(tmp_path: Path):
    save_baseline(run_doc(), tmp_path, "main")
    with pytest.raises(BaselineNotSaved, match=r"mian: no baseline of that name in .*NVIDIA_H100_80GB_HBM3-x1") as caught:
        resolve_baseline("mian", tmp_path, H100)
    assert caught.value.name == "mian" and caught.value.directory == baseline_dir(tmp_path, H100)


@pytest.mark.parametrize("spec", ["nope/base.json", "base.json", "nope/base", "./base"])
def test_resolve_a_path_that_is_no_file_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spec: str):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(BaselineError, match="no such file") as caught:
        resolve_baseline(spec, tmp_path, H100)
    assert not isinstance(caught.value, BaselineNotSaved)
    assert is_baseline_path(spec)
    assert not is_baseline_path("main") and not is_baseline_path("main.v2")


def test_saved_baselines_and_their_description(tmp_path: Path):
    assert saved_baselines(tmp_path) == {} and describe_saved(tmp_path, H100) == "none saved for this machine"
    save_baseline(run_doc(), tmp_path, "main")
    save_baseline(run_doc(), tmp_path, "20261101_000000")
    h200 = {**run_doc(), "machine_info": {"gpu_model": "NVIDIA H200", "gpu_count": 2}}
    save_baseline(h200, tmp_path, "nightly")
    assert saved_baselines(tmp_path) == {"NVIDIA_H100_80GB_HBM3-x1": ("main", "20261101_000000"),
                                         "NVIDIA_H200-x2": ("nightly",)}
    assert describe_saved(tmp_path, H100) == ("saved for this machine: main, 20261101_000000, "
                                              "for other machines: NVIDIA_H200-x2 (nightly)")
    assert describe_saved(tmp_path, {"gpu_model": "NVIDIA A100"}) == (
        "none saved for this machine, for other machines: NVIDIA_H100_80GB_HBM3-x1 (main, 20261101_000000); "
        "NVIDIA_H200-x2 (nightly)")
    for n in range(7):
        save_baseline(h200, tmp_path, f"n{n}")
    assert "NVIDIA_H200-x2 (n4, n5, n6, nightly and 4 more)" in describe_saved(tmp_path, H100, most=4)


def test_load_run_doc_roundtrip(tmp_path: Path):
    path = save_baseline(run_doc(), tmp_path, "main")
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
    with pytest.raises(BaselineError) as info:
        load_run_doc(path)
    message = str(info.value)
    assert message.startswith(f"{path}: ")
    assert problem in message
    assert "\n" not in message


def test_load_run_doc_nan_is_rejected(tmp_path: Path):
    path = _write(tmp_path, _mutated().replace('"busy_pct": 80.0', '"busy_pct": NaN'))
    with pytest.raises(BaselineError, match="busy_pct"):
        load_run_doc(path)


def test_load_run_doc_missing_and_directory(tmp_path: Path):
    with pytest.raises(BaselineError, match="nope.json: no such file"):
        load_run_doc(tmp_path / "nope.json")
    with pytest.raises(BaselineError, match="is a directory"):
        load_run_doc(tmp_path)


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="needs file permissions")
def test_load_run_doc_unreadable(tmp_path: Path):
    path = _write(tmp_path, _mutated())
    path.chmod(0)
    with pytest.raises(BaselineError, match="cannot read"):
        load_run_doc(path)


def test_failed_save_keeps_previous_baseline(tmp_path: Path):
    path = save_baseline(run_doc(), tmp_path, "main")
    before = path.read_text()
    broken = run_doc()
    broken["tests"].append({"test": "x", "outcome": "passed", "wall_ms": object()})
    with pytest.raises(TypeError):
        save_baseline(broken, tmp_path, "main")
    assert path.read_text() == before
    assert [p.name for p in path.parent.iterdir()] == ["main.json"]
