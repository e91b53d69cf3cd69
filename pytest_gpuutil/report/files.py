"""Atomic file writing (temporary file in the same folder, then rename) and the run's CSV/JSON files
(the JSON document is :mod:`pytest_gpuutil.rundoc`'s)."""
from __future__ import annotations

import csv
import io
import os
import tempfile
from itertools import repeat
from operator import attrgetter, itemgetter
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence, Union

from pytest_gpuutil.records import CSV_COLUMNS, TestRecord
from pytest_gpuutil.rundoc.document import json_chunks

PathLike = Union[str, "os.PathLike[str]"]


def atomic_write_bytes(path: PathLike, data: Union[bytes, Sequence[bytes]]) -> Path:
    """Write ``data`` (bytes, or pieces of it in order) so that readers see the old file or the whole
    new one, never a part."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            if isinstance(data, (bytes, bytearray, memoryview)):
                handle.write(data)
            else:
                handle.writelines(data)
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; results are meant to be shared
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return target


def atomic_write_text(path: PathLike, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def records_csv(records: Iterable[TestRecord], columns: Sequence[str] = CSV_COLUMNS) -> str:
    """gpu_util.csv's text: each record's :meth:`~TestRecord.csv_row`, each value as
    :func:`~pytest_gpuutil.report.metric_tables.format_value` writes it, as ``csv.writer`` writes
    it. Built a column at a time (one pass over the records per column, no dict per row: the
    session's end writes every test), and each row with one ``%`` of a row format made from the
    columns (``%.6f`` for a column of floats, nothing for one of None, ``%s`` for text quoted as
    ``csv`` quotes it)."""
    records = list(records)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    if len(columns) < 2 or not records:  # a row of one field: csv's own rules for an empty one
        writer.writerows(zip(*(_csv_texts(records, name) for name in columns)) if columns else [[] for _ in records])
        return out.getvalue()
    fields, cells = [], []
    for name, values in zip(columns, _csv_values(records, columns)):
        field, values = _csv_column(records, name, values)
        fields.append(field)
        if field:
            cells.append(values)
    row = ",".join(fields)
    lines = map(row.__mod__, zip(*cells)) if cells else repeat(row, len(records))
    return out.getvalue() + "\n".join(lines) + "\n"


#: the types a whole column can be written of at once: floats (``%.6f``, as format_value's
#: ``f"{v:.6f}"``), ints and strs (``str()``)
_AS_FLOATS, _AS_STR, _AS_NONE = frozenset({float}), frozenset({int, str}), frozenset({type(None)})


def _csv_values(records: Sequence[TestRecord], columns: Sequence[str]) -> list[Sequence[Any]]:
    """Each column's values over the records (one lookup of them all in each record's fields)."""
    try:
        rows = list(map(itemgetter(*columns), map(vars, records)))
    except (KeyError, TypeError):  # a column that is no field, a record without __dict__
        return [list(map(attrgetter(name), records)) for name in columns]
    return list(zip(*rows))


def _csv_column(records: Sequence[TestRecord], name: str, values: Sequence[Any]) -> tuple[str, Sequence[Any]]:
    """One column of the rows: its field in the row format and the values that fill it."""
    if name not in ("devices", "findings"):
        kinds = set(map(type, values))
        if kinds <= _AS_FLOATS:
            return "%.6f", values
        if kinds <= _AS_NONE:
            return "", values
        if kinds <= _AS_STR:
            return "%s", _csv_quoted(list(map(str, values)))
    return "%s", _csv_quoted(_csv_texts(records, name))


def _csv_texts(records: Sequence[TestRecord], name: str) -> list[str]:
    """One CSV column's text over the records (format_value's rules, inline)."""
    if name == "devices":
        return list(map(" ".join, map(attrgetter("devices"), records)))
    if name == "findings":
        return [" ".join(r.finding_rules) if r.findings else "" for r in records]
    return ["" if v is None else f"{v:.6f}" if isinstance(v, float) else str(v) for v in map(attrgetter(name), records)]


#: a value with one of these in it is quoted (``"..."``, its quotes doubled), as ``csv`` quotes it
_CSV_QUOTED = (",", '"', "\n")
#: one with these is written by ``csv`` itself (Python versions differ on a carriage return alone)
_CSV_ASKED = ("\r", "\0")


def _csv_quoted(texts: list[str]) -> list[str]:
    """A column's texts as ``csv.writer`` writes them in a row of several fields."""
    joined = "".join(texts)
    if not any(c in joined for c in _CSV_ASKED):
        if not any(c in joined for c in _CSV_QUOTED):
            return texts
        return ['"' + t.replace('"', '""') + '"' if "," in t or '"' in t or "\n" in t else t for t in texts]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    quoted = []
    for text in texts:
        if any(c in text for c in _CSV_ASKED):
            out.seek(0)
            out.truncate()
            writer.writerow((text, ""))  # two fields: the first as a field of a longer row
            text = out.getvalue()[:-2]
        elif any(c in text for c in _CSV_QUOTED):
            text = '"' + text.replace('"', '""') + '"'
        quoted.append(text)
    return quoted


def records_csv_bytes(records: Iterable[TestRecord], columns: Sequence[str] = CSV_COLUMNS) -> bytes:
    """:func:`records_csv` as UTF-8, its rows written in C where the C part is built
    (report/_csv_rows.c: the same bytes; where a value needs more than its rules, this Python)."""
    records = list(records)
    if _ROWS is not None and len(columns) >= 2 and records:
        try:
            fields = list(map(vars, records))
        except TypeError:  # a record without __dict__
            fields = []
        if fields:
            texts = [_csv_texts(records, name) if name in ("devices", "findings") else None for name in columns]
            body = _ROWS.rows(fields, tuple(columns), texts)
            if body is not None:
                out = io.StringIO()
                csv.writer(out, lineterminator="\n").writerow(columns)
                return out.getvalue().encode("utf-8") + body
    return records_csv(records, columns).encode("utf-8")


try:  # gpu_util.csv's rows in C (report/_csv_rows.c, built at install where a C compiler is found)
    from pytest_gpuutil.report import _csv_rows as _ROWS
except ImportError:  # pragma: no cover - without a compiler: records_csv
    _ROWS = None


def write_run_files(directory: PathLike, records: Sequence[TestRecord], doc: Mapping[str, Any]) -> tuple[Path, Path]:
    base = Path(directory)
    csv_path = atomic_write_bytes(base / "gpu_util.csv", records_csv_bytes(records))
    json_path = atomic_write_bytes(base / "gpu_util.json", json_chunks(doc))
    return csv_path, json_path
