"""Named CSV metric tables, after ``torch/_inductor/metrics.py``'s MetricTable, without globals.

A ``MetricTableRegistry`` (one per pytest session) registers tables and knows which are enabled.
``MetricTable.format_row`` checks and formats a row into a ``MetricRow`` record (pure, so xdist
workers can ship rows to the controller); ``write_rows`` appends records to
``<output_dir>/metric_table_<name>.csv``. Nothing here imports pytest or torch.
"""
from __future__ import annotations

import csv
import io
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import IO, Any, Callable, Union

#: Table names: letters, digits, ``_`` and ``-``.
NAME_PATTERN = re.compile(r"[A-Za-z0-9_-]+")
#: Column names: letters, digits, ``_``, ``-`` and ``.``.
COLUMN_PATTERN = re.compile(r"[A-Za-z0-9_.-]+")
#: The column every table starts with; declared columns may not use it.
TEST_COLUMN = "test"
FILE_PREFIX = "metric_table_"
FILE_SUFFIX = ".csv"

Row = Union[Mapping[str, Any], Callable[[], Mapping[str, Any]]]


class MetricTableError(ValueError):
    """A metric table was declared, enabled or fed a row in a way that cannot work."""


def table_filename(name: str) -> str:
    """File name of table ``name``: ``metric_table_<name>.csv``."""
    return f"{FILE_PREFIX}{check_table_name(name)}{FILE_SUFFIX}"


def check_table_name(name: object) -> str:
    """``name`` if it is a valid table name, else MetricTableError saying what is allowed."""
    if not isinstance(name, str) or NAME_PATTERN.fullmatch(name) is None:
        raise MetricTableError(
            f"invalid metric table name {name!r}: use letters, digits, '_' and '-' only"
        )
    return name


def check_columns(name: str, columns: object) -> tuple[str, ...]:
    """The declared columns as a tuple, else MetricTableError naming table ``name``."""
    if isinstance(columns, (str, bytes)) or not isinstance(columns, Iterable):
        raise MetricTableError(
            f"metric table {name!r}: columns must be a sequence of column names, "
            f"got {type(columns).__name__}"
        )
    result = tuple(columns)
    if not result:
        raise MetricTableError(f"metric table {name!r}: columns must not be empty")
    invalid = [c for c in result if not isinstance(c, str) or COLUMN_PATTERN.fullmatch(c) is None]
    if invalid:
        raise MetricTableError(
            f"metric table {name!r}: invalid column name(s) {_names(invalid)}: "
            "use letters, digits, '_', '-' and '.' only"
        )
    if TEST_COLUMN in result:
        raise MetricTableError(
            f"metric table {name!r}: column {TEST_COLUMN!r} is added automatically as the "
            "first column; do not declare it"
        )
    duplicates = sorted({c for c in result if result.count(c) > 1})
    if duplicates:
        raise MetricTableError(f"metric table {name!r}: duplicate column(s) {_names(duplicates)}")
    return result


def format_value(value: object) -> str:
    """CSV text of one value: floats with 6 decimals, None empty, anything else ``str()``."""
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6f}"
    return str(value)


def _names(names: Iterable[object]) -> str:
    """Comma-separated reprs, for error messages."""
    return ", ".join(repr(n) for n in names)


@dataclass(frozen=True)
class MetricRow:
    """One formatted row of a table: plain strings, ready to ship between processes and write."""

    table: str
    test: str
    #: formatted values in the order of ``columns``
    values: tuple[str, ...]
    #: the table's declared columns (without ``test``), so a writer needs no registration
    columns: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict (lists for the tuples)."""
        return {
            "table": self.table,
            "test": self.test,
            "values": list(self.values),
            "columns": list(self.columns),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MetricRow:
        """Inverse of ``to_dict``."""
        return cls(
            table=str(data["table"]),
            test=str(data["test"]),
            values=tuple(str(v) for v in data["values"]),
            columns=tuple(str(c) for c in data["columns"]),
        )


class MetricTable:
    """A named CSV table with fixed columns; ``test`` is always the first column of the file."""

    def __init__(
        self,
        name: str,
        columns: Sequence[str],
        output_dir: str | os.PathLike[str],
        registry: MetricTableRegistry | None = None,
    ) -> None:
        self.name = check_table_name(name)
        self.columns = check_columns(name, columns)
        self.output_dir = Path(output_dir)
        self._registry = registry
        self._header_checked = False

    def __repr__(self) -> str:
        return f"MetricTable({self.name!r}, {self.columns!r}, {str(self.output_dir)!r})"

    @property
    def path(self) -> Path:
        """Where rows are written."""
        return self.output_dir / table_filename(self.name)

    @property
    def header(self) -> tuple[str, ...]:
        """The CSV header: ``test`` then the declared columns."""
        return (TEST_COLUMN, *self.columns)

    @property
    def enabled(self) -> bool:
        """Whether the registry enables this table (always, without a registry)."""
        return self._registry is None or self._registry.is_enabled(self.name)

    def format_row(self, row: Row, *, test: str) -> MetricRow:
        """Check ``row`` (a mapping, or a callable returning one) against the columns; format it."""
        values = row() if callable(row) else row
        if not isinstance(values, Mapping):
            what = "the row callable returned" if callable(row) else "row is"
            raise MetricTableError(
                f"metric table {self.name!r}: {what} {type(values).__name__}, expected a mapping "
                f"of column -> value for columns {_names(self.columns)}"
            )
        keys = list(values.keys())
        missing = [c for c in self.columns if c not in values]
        extra = [k for k in keys if k not in self.columns]
        if missing or extra:
            parts = []
            if missing:
                parts.append(f"missing column(s) {_names(missing)}")
            if extra:
                parts.append(f"extra column(s) {_names(extra)}")
            raise MetricTableError(
                f"metric table {self.name!r}: wrong row for test {test!r}: {'; '.join(parts)} "
                f"(columns: {_names(self.columns)})"
            )
        return MetricRow(
            table=self.name,
            test=str(test),
            values=tuple(format_value(values[c]) for c in self.columns),
            columns=self.columns,
        )

    def add_row(self, row: Row, *, test: str) -> MetricRow | None:
        """Format and write ``row`` when the table is enabled (a callable is only called then)."""
        if not self.enabled:
            return None
        record = self.format_row(row, test=test)
        self.write_rows([record])
        return record

    def write_rows(self, rows: Iterable[MetricRow]) -> None:
        """Append rows to the CSV file in one write; the header goes first into an empty file."""
        records = list(rows)
        for record in records:
            self._check_record(record)
        if not records:
            return
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        self.output_dir.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a+", encoding="utf-8", newline="") as handle:
            handle.seek(0, os.SEEK_END)
            if handle.tell() == 0:
                writer.writerow(self.header)
            elif not self._header_checked:
                self._check_existing_header(handle)
            self._header_checked = True
            writer.writerows((record.test, *record.values) for record in records)
            handle.write(buffer.getvalue())
            handle.flush()

    def forget_file(self) -> None:
        """Forget the header check, after the file was deleted (``MetricTableRegistry.purge``)."""
        self._header_checked = False

    def _check_record(self, record: MetricRow) -> None:
        """MetricTableError unless ``record`` was formatted for this table."""
        if not isinstance(record, MetricRow):
            raise MetricTableError(
                f"metric table {self.name!r}: write_rows takes MetricRow records, "
                f"got {type(record).__name__}"
            )
        if record.table != self.name or record.columns != self.columns:
            raise MetricTableError(
                f"metric table {self.name!r}: row for table {record.table!r} with columns "
                f"{_names(record.columns)} does not fit columns {_names(self.columns)}"
            )
        if len(record.values) != len(self.columns):
            raise MetricTableError(
                f"metric table {self.name!r}: row for test {record.test!r} has "
                f"{len(record.values)} value(s), expected {len(self.columns)}"
            )

    def _check_existing_header(self, handle: IO[str]) -> None:
        """MetricTableError if a file left from another run has a different header."""
        handle.seek(0)
        existing = next(csv.reader([handle.readline()]), [])
        handle.seek(0, os.SEEK_END)
        if tuple(existing) != self.header:
            raise MetricTableError(
                f"metric table {self.name!r}: {self.path} has header {_names(existing)}, "
                f"expected {_names(self.header)}; delete the file (MetricTableRegistry.purge)"
            )


class MetricTableRegistry:
    """The metric tables of one pytest session, which of them are enabled, and where they go."""

    def __init__(
        self, output_dir: str | os.PathLike[str], enabled: Iterable[str] | None = None
    ) -> None:
        self.output_dir = Path(output_dir)
        self._tables: dict[str, MetricTable] = {}
        self._enabled: frozenset[str] | None = None
        self.enabled = enabled

    @property
    def enabled(self) -> frozenset[str] | None:
        """Names of the enabled tables, or None when every table is enabled."""
        return self._enabled

    @enabled.setter
    def enabled(self, names: Iterable[str] | None) -> None:
        if names is None:
            self._enabled = None
            return
        if isinstance(names, (str, bytes)) or not isinstance(names, Iterable):
            raise MetricTableError(
                f"enabled metric tables must be None or a collection of names, got {names!r}"
            )
        self._enabled = frozenset(check_table_name(n) for n in names)

    @property
    def tables(self) -> Mapping[str, MetricTable]:
        """Registered tables by name (read-only view)."""
        return MappingProxyType(self._tables)

    def register(self, name: str, columns: Sequence[str]) -> MetricTable:
        """Register table ``name``, or return it if already registered with the same columns."""
        checked = check_columns(check_table_name(name), columns)
        existing = self._tables.get(name)
        if existing is not None:
            if existing.columns != checked:
                raise MetricTableError(
                    f"metric table {name!r} is already registered with columns "
                    f"{_names(existing.columns)}, not {_names(checked)}"
                )
            return existing
        table = MetricTable(name, checked, self.output_dir, registry=self)
        self._tables[name] = table
        return table

    def is_enabled(self, name: str) -> bool:
        """Whether rows of table ``name`` are recorded."""
        return self._enabled is None or name in self._enabled

    def validate_enabled(self) -> None:
        """MetricTableError listing the registered tables if an enabled name is not registered."""
        if self._enabled is None:
            return
        unknown = sorted(self._enabled - self._tables.keys())
        if unknown:
            registered = _names(sorted(self._tables)) or "none"
            raise MetricTableError(
                f"unknown metric table(s) {_names(unknown)}; registered tables: {registered}"
            )

    def write_rows(self, rows: Iterable[MetricRow]) -> None:
        """Write rows of any tables, registering tables first seen here from the rows' columns."""
        by_table: dict[str, list[MetricRow]] = {}
        for record in rows:
            by_table.setdefault(record.table, []).append(record)
        for name, records in by_table.items():
            self.register(name, records[0].columns).write_rows(records)

    def purge(self, output_dir: str | os.PathLike[str] | None = None) -> list[Path]:
        """Delete ``metric_table_*.csv`` in ``output_dir`` (default: the registry's); return them."""
        directory = self.output_dir if output_dir is None else Path(output_dir)
        if not directory.is_dir():
            return []
        removed = []
        for path in sorted(directory.glob(f"{FILE_PREFIX}*{FILE_SUFFIX}")):
            if path.is_file():
                path.unlink()
                removed.append(path)
        for table in self._tables.values():
            table.forget_file()
        return removed
