from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from pytest_gpuutil.gates.baseline import (
    BaselineError,
    BaselineNotSaved,
    autosave_name,
    baseline_dir,
    describe_saved,
    is_baseline_path,
    resolve_baseline,
    save_baseline,
    saved_baselines,
)
from pytest_gpuutil.records import TestRecord
from pytest_gpuutil.rundoc.document import RunDocError, machine_id
from pytest_gpuutil.rundoc.reading import load_run_doc
from tests.helpers.run_docs import H100, run_doc

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
    assert isinstance(caught.value, RunDocError)  # callers catch one error for finding and reading a baseline
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


def test_a_saved_baseline_reads_back_as_the_run(tmp_path: Path):
    path = save_baseline(run_doc(), tmp_path, "main")
    assert path.parent.name == machine_id(H100)
    doc = load_run_doc(path)
    assert doc.path == path and doc.machine_id == machine_id(H100) and doc.created == "2026-11-21T23:05:01"
    assert [r.to_dict() for r in doc.records.values()] == run_doc()["tests"]


def test_failed_save_keeps_previous_baseline(tmp_path: Path):
    path = save_baseline(run_doc(), tmp_path, "main")
    before = path.read_text()
    broken = run_doc()
    broken["tests"].append({"test": "x", "outcome": "passed", "wall_ms": object()})
    with pytest.raises(TypeError):
        save_baseline(broken, tmp_path, "main")
    assert path.read_text() == before
    assert [p.name for p in path.parent.iterdir()] == ["main.json"]
