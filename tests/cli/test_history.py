"""``gpuutil history``: a history's runs and per-test series; ``--add`` appends a run file; bad files in one line."""
from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest

from pytest_gpuutil.cli import history as history_cli
from pytest_gpuutil.history.store import SCHEMA_VERSION, open_history
from pytest_gpuutil.records import TestRecord

H100 = {"gpu_model": "NVIDIA H100 80GB HBM3", "gpu_count": 1, "host": "gpu-a", "git_commit": "abc1234"}


def write_run(path: Path, tests: dict[str, dict], machine=H100, created="2026-11-23T10:00:00+00:00", **extra) -> Path:
    records = [TestRecord(t, "passed", **fields).to_dict() for t, fields in tests.items()]
    path.write_text(json.dumps({"format": "pytest-gpuutil", "version": 1, "created": created, "machine_info": machine,
                                "tests": records, **extra}))
    return path


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "history.sqlite"
    with open_history(path, create=True) as history:
        for i in range(5):
            history.append(H100, [TestRecord("t.py::test_a", "passed", busy_pct=50.0 + i),
                                  TestRecord("t.py::test_b", "passed", kernel_bench={"mm": {"median": 1.0, "unit": "ms"}})],
                           f"2026-11-2{i}T10:00:00+00:00", "abc1234", "main")
    return path


def run(*argv: str, capsys) -> tuple[int, str, str]:
    code = history_cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_json_lists_the_runs_and_each_tests_series(db, capsys):
    code, out, err = run("--db", str(db), "--format", "json", capsys=capsys)
    assert code == 0 and err == ""
    doc = json.loads(out)
    assert [r["id"] for r in doc["runs"]] == [1, 2, 3, 4, 5]
    assert {k for k in doc["runs"][0]} >= {"id", "date", "commit", "branch", "machine_id", "tests"}
    assert doc["runs"][0]["commit"] == "abc1234" and doc["runs"][0]["machine_id"] == "NVIDIA_H100_80GB_HBM3-x1"
    assert doc["tests"]["t.py::test_a"]["metrics"]["busy_pct"] == [50.0, 51.0, 52.0, 53.0, 54.0]
    assert doc["tests"]["t.py::test_b"]["metrics"]["kernel_bench[mm].median"] == [1.0] * 5
    assert doc["tests"]["t.py::test_a"]["runs"] == [1, 2, 3, 4, 5]


def test_the_table_and_a_chosen_test(db, capsys):
    code, out, err = run("--db", str(db), "test_a", capsys=capsys)
    assert code == 0
    assert out.startswith(f"history {db}: 5 runs\n")
    assert "t.py::test_a  busy_pct" in out and "50 51 52 53 54" in out and "test_b" not in out.split("\n\n")[1]


def test_a_test_matching_nothing_is_an_error(db, capsys):
    assert run("--db", str(db), "nothing_like_it", capsys=capsys)[1:] == (
        "", f"error: {db}: no test matches 'nothing_like_it'\n")


def test_add_appends_a_merged_run_keeping_each_records_machine(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # not in a git checkout, nor in CI: no commit known
    for name in ("GITHUB_SHA", "CI_COMMIT_SHA", "BUILDKITE_COMMIT", "GIT_COMMIT"):
        monkeypatch.delenv(name, raising=False)
    run_file = write_run(tmp_path / "merged.json", {"t.py::test_a": {"busy_pct": 40.0, "machine": "gpu-b"},
                                                    "t.py::test_b": {"busy_pct": 30.0, "machine": "gpu-a"}},
                         machine={"gpu_model": "NVIDIA H100 80GB HBM3 + NVIDIA H200", "gpu_count": 1},
                         machines={"gpu-a": H100, "gpu-b": {**H100, "host": "gpu-b", "gpu_model": "NVIDIA H200"}})
    db = tmp_path / "new" / "h.sqlite"
    code, out, err = run("--db", str(db), "--add", str(run_file), "--branch", "main", "--format", "json",
                         capsys=capsys)
    assert code == 0 and err == f"added {run_file} to {db} as run 1 (2 tests)\n"
    doc = json.loads(out)
    assert doc["runs"][0]["branch"] == "main" and doc["runs"][0]["commit"] is None
    assert doc["tests"]["t.py::test_a"]["machine_ids"] == ["NVIDIA_H200-x1"]
    assert doc["tests"]["t.py::test_b"]["machine_ids"] == ["NVIDIA_H100_80GB_HBM3-x1"]


def test_a_history_with_one_run_says_when_gating_starts(tmp_path, capsys):
    db = tmp_path / "h.sqlite"
    run_file = write_run(tmp_path / "r.json", {"t.py::test_a": {"busy_pct": 40.0}})
    code, out, err = run("--db", str(db), "--add", str(run_file), capsys=capsys)
    assert code == 0 and out.startswith(f"history {db}: 1 run\n")
    assert err.splitlines()[-1] == "note: 1 run(s): --gpu-util-compare history gates a test once it has 3 earlier runs"


def test_commit_without_add_is_a_usage_error(db, capsys):
    assert run("--db", str(db), "--commit", "x", capsys=capsys)[0] == 2


# -- bad files: one line, exit 2 ----------------------------------------------------------------------
def foreign(path: Path) -> None:
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE moz_places (url TEXT)")
    db.commit()
    db.close()


def newer(path: Path) -> None:
    with open_history(path, create=True):
        pass
    db = sqlite3.connect(path)
    db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),))
    db.commit()
    db.close()


@pytest.mark.parametrize("make, problem", [
    (None, "no such file"),
    (lambda p: p.write_bytes(os.urandom(4096)), "not an SQLite database (corrupt, or another kind of file)"),
    (foreign, "not a pytest-gpuutil history (an SQLite database of another program: no application id, "
              "tables moz_places)"),
    (newer, f"written by a newer pytest-gpuutil (history schema {SCHEMA_VERSION + 1}; this one reads {SCHEMA_VERSION})"),
])
def test_a_bad_history_is_one_error_line(tmp_path, capsys, make, problem):
    path = tmp_path / "bad.sqlite"
    if make is not None:
        make(path)
    for extra in ([], ["--add", str(write_run(tmp_path / "r.json", {"t::a": {"busy_pct": 1.0}}))]):
        if make is None and extra:
            continue  # --add makes a missing history
        code, out, err = run("--db", str(path), *extra, capsys=capsys)
        assert (code, out) == (2, "") and err == f"error: {path}: {problem}\n"
