"""The run history: every run's records in one SQLite file (stdlib ``sqlite3``), safe for parallel writers.

Schema 1: ``meta`` (key/value: ``schema_version``, ``application``), ``runs`` (id, created, git_commit,
branch, machine_id, machine_info JSON), ``tests`` (id, name) and ``records`` (run_id, test_id,
machine_id, outcome, the record as compact JSON: its fields that hold something, without its top
kernels and idle gaps). The file carries ``PRAGMA application_id`` = ``APPLICATION_ID`` so that
another program's database is told apart from an empty one. WAL journal and a 30 s busy timeout: an
xdist controller and CI jobs on one host append at the same time without losing a run. Every
problem with the file is a HistoryError whose ``str()`` is one line ``<path>: <problem>``.
"""
from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Iterable, Iterator, Mapping, Optional, Sequence, Union

from pytest_gpuutil.rundoc.document import machine_id
from pytest_gpuutil.records import TestRecord

#: "GPUH" in the database header (PRAGMA application_id)
APPLICATION_ID = 0x47505548
APPLICATION = "pytest-gpuutil history"
SCHEMA_VERSION = 1
DEFAULT_PATH = ".gpu_util/history.sqlite"
#: seconds a writer waits for another one's transaction
BUSY_TIMEOUT_S = 30.0
#: record fields left out of the history: per-run diagnostics, in the run's gpu_util.json
LEFT_OUT = ("top_kernels", "idle_gaps", "below_floor")

PathLike = Union[str, "os.PathLike[str]"]

_SCHEMA = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE runs (id INTEGER PRIMARY KEY AUTOINCREMENT, created TEXT NOT NULL, git_commit TEXT, branch TEXT,"
    " machine_id TEXT NOT NULL, machine_info TEXT NOT NULL)",
    "CREATE TABLE tests (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE)",
    "CREATE TABLE records (run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,"
    " test_id INTEGER NOT NULL REFERENCES tests(id), machine_id TEXT NOT NULL, outcome TEXT NOT NULL,"
    " record TEXT NOT NULL, PRIMARY KEY (run_id, test_id)) WITHOUT ROWID",
    "CREATE INDEX records_by_test ON records (test_id, machine_id, run_id)",
)


class HistoryError(Exception):
    """A history file that cannot be used; ``str()`` is one line ``<path>: <problem>``."""

    def __init__(self, path: PathLike, problem: str) -> None:
        self.path = Path(path)
        self.problem = problem
        super().__init__(f"{path}: {problem}")


@dataclass(frozen=True)
class RunRow:
    """One run in the history."""

    id: int
    created: str
    commit: Optional[str]
    branch: Optional[str]
    machine_id: str
    machine_info: Mapping[str, Any]
    tests: int

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "date": self.created, "commit": self.commit, "branch": self.branch,
                "machine_id": self.machine_id, "tests": self.tests, "machine_info": dict(self.machine_info)}


@dataclass(frozen=True)
class Point:
    """One test's record in one run of the history."""

    run_id: int
    machine_id: str
    record: TestRecord


def _record_json(record: TestRecord) -> str:
    """The record as stored: its fields that hold something, but the test and outcome (columns) and LEFT_OUT."""
    data = record.to_dict()
    for name in ("test", "outcome", *LEFT_OUT):
        data.pop(name, None)
    kept = {k: v for k, v in data.items() if v is not None and v != "" and v != {} and v != []}
    return json.dumps(kept, separators=(",", ":"), default=str)


def _record(test: str, outcome: str, text: str) -> TestRecord:
    return TestRecord.from_dict({**json.loads(text), "test": test, "outcome": outcome})


class History:
    """An open history file; use ``open_history``."""

    def __init__(self, path: Path, connection: sqlite3.Connection):
        self.path = path
        self._db = connection

    # -- reading ---------------------------------------------------------------------------------
    def runs(self, machine: Optional[str] = None) -> list[RunRow]:
        """Every run (or those of one machine id), oldest first."""
        where, args = ("WHERE r.machine_id = ?", (machine,)) if machine else ("", ())
        with self._guard():
            rows = self._db.execute(
                "SELECT r.id, r.created, r.git_commit, r.branch, r.machine_id, r.machine_info,"
                f" (SELECT COUNT(*) FROM records WHERE run_id = r.id) FROM runs r {where} ORDER BY r.id", args
            ).fetchall()
        return [RunRow(i, c, g, b, m, MappingProxyType(_info(j)), n) for i, c, g, b, m, j, n in rows]

    def recent(self, machine: str, last: int, tests: Optional[Iterable[str]] = None,
               same_run: Optional[tuple[str, Mapping[str, TestRecord]]] = None) -> dict[str, list[TestRecord]]:
        """Each test's records in its ``last`` most recent runs on machine id ``machine``, oldest first
        (every test of the history when ``tests`` is None).

        ``same_run``: (created, records) of the run being compared. A run of the history made at that
        time whose records on this machine are all of those records, equal, is that run, already in
        the history: it is left out (the latest such run, once). The whole run is matched, not one
        record: ``created`` is to the second, and another run of the same second that shares a
        test's record (a fast CI shard, a test whose figures did not move) is a run of its own.
        """
        created, own = same_run if same_run is not None else ("", {})
        with self._guard():
            itself = self._run_of(created, own, machine) if own else None
            ids = self._test_ids(tests)
            out: dict[str, list[TestRecord]] = {}
            for name, test_id in ids.items():
                rows = self._db.execute(
                    "SELECT outcome, record FROM records WHERE test_id = ? AND machine_id = ? AND run_id != ?"
                    " ORDER BY run_id DESC LIMIT ?",
                    (test_id, machine, -1 if itself is None else itself, last)).fetchall()
                if rows:
                    out[name] = [_record(name, outcome, text) for outcome, text in reversed(rows)]
        return out

    def _run_of(self, created: str, own: Mapping[str, TestRecord], machine: str) -> Optional[int]:
        """The latest run made at ``created`` whose records on ``machine`` are exactly ``own``, if any."""
        wanted = {name: _record_json(record) for name, record in own.items()}
        made_then = self._db.execute("SELECT id FROM runs WHERE created = ? ORDER BY id DESC", (created,)).fetchall()
        for (run_id,) in made_then:
            stored = dict(self._db.execute(
                "SELECT tests.name, records.record FROM records JOIN tests ON tests.id = records.test_id"
                " WHERE records.run_id = ? AND records.machine_id = ?", (run_id, machine)).fetchall())
            if stored == wanted:
                return run_id
        return None

    def test_names(self) -> list[str]:
        """Every test the history has a record of, by name."""
        with self._guard():
            return [row[0] for row in self._db.execute("SELECT name FROM tests ORDER BY name")]

    def series(self, tests: Optional[Sequence[str]] = None) -> dict[str, list[Point]]:
        """Every record of ``tests`` (all tests when None) by test, oldest run first."""
        with self._guard():
            out: dict[str, list[Point]] = {}
            for name, test_id in self._test_ids(tests or None).items():
                rows = self._db.execute("SELECT run_id, machine_id, outcome, record FROM records WHERE test_id = ?"
                                        " ORDER BY run_id", (test_id,)).fetchall()
                out[name] = [Point(run_id, machine, _record(name, outcome, text))
                             for run_id, machine, outcome, text in rows]
        return out

    def _test_ids(self, tests: Optional[Iterable[str]]) -> dict[str, int]:
        """Name -> id of ``tests`` the history knows (all of them when None), by name."""
        rows = self._db.execute("SELECT name, id FROM tests ORDER BY name").fetchall()
        if tests is None:
            return dict(rows)
        wanted = set(tests)
        return {name: test_id for name, test_id in rows if name in wanted}

    # -- writing ---------------------------------------------------------------------------------
    def append(self, machine_info: Mapping[str, Any], records: Iterable[TestRecord], created: str,
               commit: Optional[str] = None, branch: Optional[str] = None,
               machines: Mapping[str, Mapping[str, Any]] | None = None) -> int:
        """Add one run with its records in one transaction; returns its id.

        ``machines``: label -> machine_info for the records of a merged run whose ``machine`` names one;
        each record is kept under the machine id of the machine that ran it.
        """
        labelled = {label: machine_id(info) for label, info in (machines or {}).items()}
        run_machine = machine_id(machine_info)
        info_text = json.dumps(dict(machine_info), sort_keys=True, default=str)
        rows = [(r.test, labelled.get(r.machine, run_machine), r.outcome, _record_json(r)) for r in records]
        with self._guard():
            self._db.execute("BEGIN IMMEDIATE")
            try:
                cursor = self._db.execute(
                    "INSERT INTO runs (created, git_commit, branch, machine_id, machine_info) VALUES (?, ?, ?, ?, ?)",
                    (created, commit, branch, run_machine, info_text))
                run_id = int(cursor.lastrowid or 0)
                self._db.executemany("INSERT OR IGNORE INTO tests (name) VALUES (?)", [(row[0],) for row in rows])
                ids = dict(self._db.execute("SELECT name, id FROM tests").fetchall())
                self._db.executemany("INSERT INTO records (run_id, test_id, machine_id, outcome, record)"
                                     " VALUES (?, ?, ?, ?, ?)", [(run_id, ids[t], *rest) for t, *rest in rows])
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
        return run_id

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> "History":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @contextlib.contextmanager
    def _guard(self) -> Iterator[None]:
        """sqlite3's errors as one HistoryError line."""
        try:
            yield
        except sqlite3.Error as exc:
            raise HistoryError(self.path, _problem(exc)) from None


def _info(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _problem(exc: sqlite3.Error) -> str:
    text = str(exc)
    if "file is not a database" in text:
        return "not an SQLite database (corrupt, or another kind of file)"
    if "malformed" in text:
        return f"the database is corrupt ({text})"
    if "locked" in text or "busy" in text:
        return f"another process held the database for {BUSY_TIMEOUT_S:.0f} s ({text})"
    return f"database error: {text}"


def _check(path: Path, db: sqlite3.Connection, create: bool) -> None:
    """Make sure ``db`` is a history this code reads (creating the schema in an empty file if ``create``)."""
    # both read in one transaction: read apart, another process's schema could land between them
    # (its tables seen, its application id not yet), and a new history looked like another
    # program's database (1 writer in 6 failed so, about once in twenty runs of the parallel test)
    db.execute("BEGIN")
    try:
        app = db.execute("PRAGMA application_id").fetchone()[0]
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
    finally:
        db.execute("COMMIT")
    if app == 0 and not tables:
        if not create:
            raise HistoryError(path, "holds no history (an empty database)")
        db.execute("BEGIN IMMEDIATE")
        try:
            again = db.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()[0]
            if again == 0:  # no other writer made it in the meantime
                for statement in _SCHEMA:
                    db.execute(statement)
                db.executemany("INSERT INTO meta (key, value) VALUES (?, ?)",
                               [("schema_version", str(SCHEMA_VERSION)), ("application", APPLICATION)])
                db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
        app = db.execute("PRAGMA application_id").fetchone()[0]
    if app != APPLICATION_ID:
        about = f"application id {app:#x}" if app else "no application id"
        listed = ", ".join(tables[:5]) + (", ..." if len(tables) > 5 else "")
        raise HistoryError(path, f"not a pytest-gpuutil history (an SQLite database of another program: {about}, "
                                 f"tables {listed or 'none'})")
    row = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    try:
        version = int(row[0]) if row else 0
    except ValueError:
        version = 0
    if version < 1:
        raise HistoryError(path, "history without a schema version (damaged meta table)")
    if version > SCHEMA_VERSION:
        raise HistoryError(path, f"written by a newer pytest-gpuutil (history schema {version}; this one reads "
                                 f"{SCHEMA_VERSION})")


def open_history(path: PathLike, create: bool = False) -> History:
    """Open the history at ``path``; with ``create``, make the file (and its folder) when missing.

    HistoryError (one line) for a missing file (without ``create``), a file that is not an SQLite
    database, another program's database, or one written by a newer schema.
    """
    target = Path(path)
    if target.is_dir():
        raise HistoryError(target, "is a directory, not a history file")
    if not target.exists():
        if not create:
            raise HistoryError(target, "no such file")
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise HistoryError(target, f"cannot create its folder: {exc.strerror or exc}") from None
    mode = "rwc" if create else "rw"
    try:
        db = sqlite3.connect(f"{target.resolve().as_uri()}?mode={mode}", uri=True, timeout=BUSY_TIMEOUT_S,
                             isolation_level=None)
    except sqlite3.Error as exc:
        raise HistoryError(target, f"cannot open: {exc}") from None
    try:
        _check(target, db, create)
        if create:
            mode_now = db.execute("PRAGMA journal_mode").fetchone()[0]
            if str(mode_now).lower() != "wal":
                db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA foreign_keys = ON")
    except HistoryError:
        db.close()
        raise
    except sqlite3.Error as exc:
        db.close()
        raise HistoryError(target, _problem(exc)) from None
    return History(target, db)
