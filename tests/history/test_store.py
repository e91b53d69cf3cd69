"""The SQLite run history: appending, reading back, parallel writers, and files it must refuse."""
from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_gpuutil.history.store import (
    APPLICATION_ID,
    SCHEMA_VERSION,
    HistoryError,
    open_history,
)
from pytest_gpuutil.records import TestRecord

H100 = {"gpu_model": "NVIDIA H100", "gpu_count": 1, "host": "gpu-a"}
H200 = {"gpu_model": "NVIDIA H200", "gpu_count": 1, "host": "gpu-b"}
KERNELS = ({"name": "k", "category": "gemm", "count": 1, "total_us": 1.0, "pct_of_window": 1.0},)


def record(test: str, busy: float, **more) -> TestRecord:
    return TestRecord(test, "passed", busy_pct=busy, top_kernels=KERNELS, **more)


def add(path: Path, machine=H100, *records: TestRecord, created="2026-11-23T10:00:00+00:00", **kw) -> int:
    with open_history(path, create=True) as history:
        return history.append(machine, records, created, **kw)


def test_a_new_history_is_made_with_its_folder_schema_and_wal(tmp_path):
    path = tmp_path / "deep" / "history.sqlite"
    run_id = add(path, H100, record("t::a", 50.0), commit="abc", branch="main")
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] == str(SCHEMA_VERSION)
    with open_history(path) as history:
        (run,) = history.runs()
    assert (run.id, run.commit, run.branch, run.machine_id, run.tests) == (run_id, "abc", "main", "NVIDIA_H100-x1", 1)
    assert run.machine_info["host"] == "gpu-a" and run.created == "2026-11-23T10:00:00+00:00"


def test_records_come_back_without_their_per_run_lists(tmp_path):
    path = tmp_path / "h.sqlite"
    kept = record("t::a", 50.0, kernel_bench={"mm": {"median": 1.5, "unit": "ms"}}, idle_gaps=({"dur_us": 1.0},))
    add(path, H100, kept)
    with open_history(path) as history:
        (point,) = history.series()["t::a"]
    assert point.record.kernel_bench == {"mm": {"median": 1.5, "unit": "ms"}} and point.record.busy_pct == 50.0
    assert point.record.top_kernels == () and point.record.idle_gaps == ()


def test_recent_is_each_tests_last_runs_on_one_machine_oldest_first(tmp_path):
    path = tmp_path / "h.sqlite"
    for busy in range(1, 8):
        add(path, H100, record("t::a", float(busy)), *([record("t::b", 100.0 + busy)] if busy % 2 else []))
    add(path, H200, record("t::a", 99.0))
    with open_history(path) as history:
        recent = history.recent("NVIDIA_H100-x1", 3)
        assert [r.busy_pct for r in recent["t::a"]] == [5.0, 6.0, 7.0]
        assert [r.busy_pct for r in recent["t::b"]] == [103.0, 105.0, 107.0]  # its own last three runs
        assert [r.busy_pct for r in history.recent("NVIDIA_H200-x1", 5)["t::a"]] == [99.0]
        assert set(history.recent("NVIDIA_H100-x1", 3, tests=["t::b"])) == {"t::b"}
        assert len(history.runs()) == 8 and len(history.runs("NVIDIA_H200-x1")) == 1


def test_the_run_being_compared_is_left_out_only_when_it_is_that_run(tmp_path):
    """A run already in the history is left out of its own baseline. ``created`` is to the second,
    so it is matched by all its records: a run of the same second that shares one test's record is
    another run (this made a CI test flaky: the next run of a shard, made in the second of a merged
    run added three times, lost its unchanged test's three earlier runs: "not gated")."""
    path = tmp_path / "h.sqlite"
    fast, slow = record("t::fast", 50.0), record("t::slow", 20.0)
    add(path, H100, record("t::fast", 40.0), record("t::slow", 10.0), created="2026-11-23T09:59:59+00:00")
    for _ in range(3):
        add(path, H100, fast, slow)
    second = "2026-11-23T10:00:00+00:00"
    with open_history(path) as history:
        itself = history.recent("NVIDIA_H100-x1", 5, None, (second, {"t::fast": fast, "t::slow": slow}))
        assert [r.busy_pct for r in itself["t::slow"]] == [10.0, 20.0, 20.0]  # the latest of the three is it
        nxt = history.recent("NVIDIA_H100-x1", 5, None, (second, {"t::fast": record("t::fast", 30.0), "t::slow": slow}))
        assert [r.busy_pct for r in nxt["t::slow"]] == [10.0, 20.0, 20.0, 20.0]
        later = history.recent("NVIDIA_H100-x1", 5, None,
                               ("2026-11-23T10:00:01+00:00", {"t::fast": fast, "t::slow": slow}))
        assert len(later["t::fast"]) == 4


def test_records_of_a_merged_run_are_kept_under_their_own_machine(tmp_path):
    path = tmp_path / "h.sqlite"
    merged_info = {"gpu_model": "NVIDIA H100 + NVIDIA H200", "gpu_count": 1}
    add(path, merged_info, record("t::a", 1.0, machine="gpu-a"), record("t::b", 2.0, machine="gpu-b"),
        machines={"gpu-a": H100, "gpu-b": H200})
    with open_history(path) as history:
        assert set(history.recent("NVIDIA_H100-x1", 5)) == {"t::a"}
        assert set(history.recent("NVIDIA_H200-x1", 5)) == {"t::b"}
        assert history.runs()[0].machine_id == "NVIDIA_H100_NVIDIA_H200-x1"


WRITER = """
import sys
from pytest_gpuutil.history.store import open_history
from pytest_gpuutil.records import TestRecord
for i in range(10):
    with open_history(sys.argv[1], create=True) as history:
        history.append({"gpu_model": "X"}, [TestRecord(f"t::{j}", "passed", busy_pct=float(i)) for j in range(40)],
                       "2026-11-23T10:00:00+00:00")
"""


def test_parallel_writers_creating_and_appending_lose_no_run(tmp_path):
    path = tmp_path / "shared" / "history.sqlite"
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    writers = [subprocess.Popen([sys.executable, str(script), str(path)], stderr=subprocess.PIPE, text=True)
               for _ in range(6)]
    errors = [w.communicate(timeout=120)[1] for w in writers]
    assert [w.returncode for w in writers] == [0] * 6, errors
    with open_history(path) as history:
        runs = history.runs()
        assert len(runs) == 60 and {r.tests for r in runs} == {40}
        assert len({r.id for r in runs}) == 60


# -- files it must refuse, in one line ----------------------------------------------------------------
def refused(path: Path, create: bool = False) -> str:
    with pytest.raises(HistoryError) as info:
        open_history(path, create=create)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{path}: ")
    return message


def test_a_missing_history_is_refused_unless_made(tmp_path):
    assert refused(tmp_path / "none.sqlite").endswith(": no such file")
    assert not (tmp_path / "none.sqlite").exists()


def test_garbage_bytes_are_not_a_database(tmp_path):
    path = tmp_path / "garbage.sqlite"
    path.write_bytes(os.urandom(8192))
    before = path.read_bytes()
    assert refused(path, create=True).endswith("not an SQLite database (corrupt, or another kind of file)")
    assert path.read_bytes() == before  # left as it was


def test_a_damaged_history_is_corrupt(tmp_path):
    path = tmp_path / "h.sqlite"
    for i in range(30):
        add(path, H100, *(record(f"t::{j}", float(i)) for j in range(30)))
    data = bytearray(path.read_bytes())
    data[4096 * 2: 4096 * 5] = os.urandom(4096 * 3)
    path.write_bytes(bytes(data))
    with pytest.raises(HistoryError, match=r"h.sqlite: the database is corrupt \(database disk image is malformed\)"):
        with open_history(path) as history:
            history.series()


def test_another_programs_database_is_foreign(tmp_path):
    path = tmp_path / "other.sqlite"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE users (name TEXT)")
    db.commit()
    db.close()
    assert "not a pytest-gpuutil history (an SQLite database of another program: no application id, tables users)" \
        in refused(path, create=True)
    db = sqlite3.connect(path)
    db.execute("PRAGMA application_id = 1234")
    db.commit()
    db.close()
    assert "application id 0x4d2" in refused(path)


def test_a_newer_schema_is_refused(tmp_path):
    path = tmp_path / "h.sqlite"
    add(path, H100, record("t::a", 1.0))
    db = sqlite3.connect(path)
    db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),))
    db.commit()
    db.close()
    assert refused(path, create=True).endswith(
        f"written by a newer pytest-gpuutil (history schema {SCHEMA_VERSION + 1}; this one reads {SCHEMA_VERSION})")


def test_an_empty_file_is_refused_to_readers_and_made_a_history_by_writers(tmp_path):
    path = tmp_path / "empty.sqlite"
    path.touch()
    assert refused(path).endswith("holds no history (an empty database)")
    add(path, H100, record("t::a", 1.0))
    with open_history(path) as history:
        assert len(history.runs()) == 1


def test_a_folder_is_not_a_history(tmp_path):
    assert refused(tmp_path, create=True).endswith("is a directory, not a history file")


def test_a_record_is_stored_compactly_and_comes_back_whole(tmp_path):
    path = tmp_path / "h.sqlite"
    kept = record("t::a", 50.0, kernel_bench={"mm": {"median": 1.5, "unit": "ms"}}, worker="gw1", devices=("0",))
    add(path, H100, kept, TestRecord("t::b", "skipped"))
    stored = dict(sqlite3.connect(path).execute(
        "SELECT tests.name, record FROM records JOIN tests ON tests.id = test_id").fetchall())
    assert stored["t::b"] == "{}"  # nothing measured: nothing stored but its outcome (a column)
    assert "null" not in stored["t::a"] and '"test"' not in stored["t::a"] and "top_kernels" not in stored["t::a"]
    with open_history(path) as history:
        back = {p.record.test: p.record for points in history.series().values() for p in points}
    assert back["t::b"] == TestRecord("t::b", "skipped")
    assert back["t::a"] == TestRecord("t::a", "passed", busy_pct=50.0, kernel_bench={"mm": {"median": 1.5, "unit": "ms"}},
                                      worker="gw1", devices=("0",))
