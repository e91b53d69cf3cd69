"""Merging CI shards (run documents) into one run: records, machines, totals, and what cannot be merged."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_gpuutil.history.merge import MergeError, common_machine_info, merge_files
from pytest_gpuutil.records import TestRecord
from pytest_gpuutil.rundoc.document import RunDocError, machine_id
from pytest_gpuutil.rundoc.reading import load_run_doc

H100 = {"gpu_model": "NVIDIA H100 80GB HBM3", "gpu_count": 1, "driver": "580.1", "torch": "2.11", "host": "gpu-a",
        "git_commit": "abc123", "argv": "tests/ --splits 2 --group 1"}


def shard(path: Path, tests: dict[str, dict[str, Any]], machine: dict[str, Any] = H100, **extra: Any) -> Path:
    records = [TestRecord(test, "passed", **fields).to_dict() for test, fields in tests.items()]
    doc = {"format": "pytest-gpuutil", "version": 1, "created": extra.pop("created", "2026-11-23T10:00:00+00:00"),
           "machine_info": machine, "tests": records, **extra}
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def gpu(busy: float, wall: float = 10.0, gpu_ms: float | None = None) -> dict[str, Any]:
    return {"busy_pct": busy, "wall_ms": wall, "gpu_busy_ms": wall * busy / 100 if gpu_ms is None else gpu_ms,
            "kernel_count": 3, "devices": ("0",), "gpu_busy_us_by_device": {"0": wall * busy * 10}}


def test_two_shards_of_one_machine_make_one_run_holding_both(tmp_path):
    a = shard(tmp_path / "a.json", {"t.py::test_a": gpu(50)}, totals={"measure_ms": 2.0, "test_s": 1.0,
                                                                      "measure_in_tests_ms": 1.5, "startup_s": 0.1},
              gpus=[{"gpu": "0", "busy_ms": 5.0, "tests": 1, "workers": ["gw0"]}], thresholds={"t.py::test_a": "failed"})
    b = shard(tmp_path / "b.json", {"t.py::test_b": gpu(20)}, machine={**H100, "argv": "tests/ --splits 2 --group 2"},
              created="2026-11-23T10:05:00+00:00", totals={"measure_ms": 1.0, "test_s": 3.0, "startup_s": 0.3},
              gpus=[{"gpu": "0", "busy_ms": 2.0, "tests": 1, "workers": ["gw1"]}])
    doc = merge_files([a, b])
    assert [t["test"] for t in doc["tests"]] == ["t.py::test_a", "t.py::test_b"]
    assert all(t["machine"] == "" for t in doc["tests"]) and "machines" not in doc
    assert machine_id(doc["machine_info"]) == "NVIDIA_H100_80GB_HBM3-x1"
    assert doc["machine_info"]["host"] == "gpu-a" and doc["machine_info"]["argv"] is None  # the shards' differ
    assert doc["created"] == "2026-11-23T10:05:00+00:00"  # the latest shard's
    totals = doc["totals"]
    assert (totals["tests"], totals["profiled"], totals["measure_ms"], totals["test_s"], totals["startup_s"]) == (
        2, 2, 3.0, 4.0, 0.3)
    assert totals["gpu_busy_ms"] == pytest.approx(7.0) and totals["busy_pct"] == pytest.approx(35.0)
    assert doc["gpus"] == [{"gpu": "0", "busy_ms": 7.0, "tests": 2, "workers": ["gw0", "gw1"]}]
    assert doc["thresholds"] == {"t.py::test_a": "failed"}
    assert [m["file"] for m in doc["merged_from"]] == [str(a), str(b)]
    assert [m["argv"] for m in doc["merged_from"]] == [H100["argv"], "tests/ --splits 2 --group 2"]


def test_the_merged_document_reads_back_as_a_run(tmp_path):
    a = shard(tmp_path / "a.json", {"t.py::test_a": gpu(50)})
    b = shard(tmp_path / "b.json", {"t.py::test_b": gpu(20)}, machine={**H100, "host": "gpu-b"})
    out = tmp_path / "merged.json"
    out.write_text(json.dumps(merge_files([a, b])))
    run = load_run_doc(out)
    assert set(run.records) == {"t.py::test_a", "t.py::test_b"}
    assert run.records["t.py::test_b"].machine == "gpu-b"


def test_shards_from_different_machines_are_kept_and_labelled_per_record(tmp_path):
    a = shard(tmp_path / "a.json", {"t.py::test_a": gpu(50)})
    b = shard(tmp_path / "b.json", {"t.py::test_b": gpu(20), "t.py::test_c": gpu(30)},
              machine={**H100, "host": "gpu-b", "gpu_model": "NVIDIA H200"},
              gpus=[{"gpu": "0", "busy_ms": 2.0, "tests": 2, "workers": ["gw0"]}])
    doc = merge_files([a, b])
    machines = {t["test"]: t["machine"] for t in doc["tests"]}
    assert machines == {"t.py::test_a": "gpu-a", "t.py::test_b": "gpu-b", "t.py::test_c": "gpu-b"}
    assert doc["machines"]["gpu-a"]["gpu_model"] == "NVIDIA H100 80GB HBM3"
    assert doc["machines"]["gpu-b"]["gpu_model"] == "NVIDIA H200"
    info = doc["machine_info"]
    assert info["gpu_model"] == "NVIDIA H100 80GB HBM3 + NVIDIA H200" and info["host"] is None
    assert info["driver"] == "580.1" and info["gpu_count"] == 1  # what they share stays
    assert doc["gpus"] == [{"gpu": "gpu-b:0", "busy_ms": 2.0, "tests": 2, "workers": ["gw0"]}]


def test_two_machines_with_one_host_name_get_two_labels(tmp_path):
    a = shard(tmp_path / "a.json", {"t.py::test_a": gpu(50)})
    b = shard(tmp_path / "b.json", {"t.py::test_b": gpu(50)}, machine={**H100, "driver": "590.0"})
    doc = merge_files([a, b])
    assert sorted(doc["machines"]) == ["gpu-a", "gpu-a#2"]


def test_a_merged_run_merges_again_keeping_its_machines(tmp_path):
    a = shard(tmp_path / "a.json", {"t.py::test_a": gpu(50)})
    b = shard(tmp_path / "b.json", {"t.py::test_b": gpu(20)}, machine={**H100, "host": "gpu-b"})
    ab = tmp_path / "ab.json"
    ab.write_text(json.dumps(merge_files([a, b])))
    c = shard(tmp_path / "c.json", {"t.py::test_c": gpu(20)}, machine={**H100, "host": "gpu-c"})
    doc = merge_files([ab, c])
    assert {t["test"]: t["machine"] for t in doc["tests"]} == {
        "t.py::test_a": "gpu-a", "t.py::test_b": "gpu-b", "t.py::test_c": "gpu-c"}
    assert doc["machines"]["gpu-c"]["host"] == "gpu-c"


def test_a_shard_merged_with_itself_is_one_line_naming_the_test(tmp_path):
    a = shard(tmp_path / "a.json", {"t.py::test_a": gpu(50)})
    with pytest.raises(MergeError) as info:
        merge_files([a, a])
    assert str(info.value) == f"{a}: test t.py::test_a is twice in the list (each test may come from one shard only)"


def test_the_same_test_in_two_shards_names_both_files(tmp_path):
    a = shard(tmp_path / "a.json", {"t.py::test_a": gpu(50)})
    b = shard(tmp_path / "b.json", {"t.py::test_b": gpu(50), "t.py::test_a": gpu(40)})
    with pytest.raises(MergeError, match=rf"^{b}: test t.py::test_a is also in {a} "):
        merge_files([a, b])


def test_a_bad_shard_is_the_run_readers_one_line(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(RunDocError, match=r"bad.json: not valid JSON"):
        merge_files([shard(tmp_path / "a.json", {"t::a": gpu(1)}), bad])
    with pytest.raises(RunDocError, match=r"missing.json: no such file"):
        merge_files([tmp_path / "missing.json"])


def test_a_record_naming_a_machine_the_document_lacks_is_refused(tmp_path):
    path = shard(tmp_path / "a.json", {"t.py::test_a": {**gpu(50), "machine": "nowhere"}})
    with pytest.raises(RunDocError, match="machine 'nowhere' is not in the document's machines"):
        merge_files([path])


def test_other_top_level_keys_are_joined(tmp_path):
    a = shard(tmp_path / "a.json", {"t::a": gpu(1)}, findings={"t::a": ["x"]}, notes=["one"], tool="v1")
    b = shard(tmp_path / "b.json", {"t::b": gpu(1)}, findings={"t::b": ["y"]}, notes=["two"], tool="v1")
    doc = merge_files([a, b])
    assert doc["findings"] == {"t::a": ["x"], "t::b": ["y"]} and doc["notes"] == ["one", "two"] and doc["tool"] == "v1"


def test_common_machine_info_keeps_only_what_all_share():
    assert common_machine_info([{"a": 1, "b": 2, "gpu_model": "X"}, {"a": 1, "b": 3, "gpu_model": "Y"}]) == {
        "a": 1, "b": None, "gpu_model": "X + Y"}
