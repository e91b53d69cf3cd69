"""Atomic file writing (temporary file in the same folder, then rename) and the run's CSV/JSON files
(the JSON document is :mod:`pytest_gpuutil.rundoc`'s)."""
from __future__ import annotations

import csv
import io
import os
import tempfile
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence, Union

from pytest_gpuutil.records import CSV_COLUMNS, TestRecord
from pytest_gpuutil.rundoc.document import json_bytes

PathLike = Union[str, "os.PathLike[str]"]


def atomic_write_bytes(path: PathLike, data: bytes) -> Path:
    """Write ``data`` so that readers see the old file or the whole new one, never a part."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
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
    :func:`~pytest_gpuutil.report.metric_tables.format_value` writes it, built a column at a time
    (one pass over the records per column, no dict per row: the session's end writes every test)."""
    records = list(records)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows(zip(*(_csv_column(records, name) for name in columns)) if columns else [[] for _ in records])
    return out.getvalue()


def _csv_column(records: Sequence[TestRecord], name: str) -> list[str]:
    """One CSV column's text over the records (format_value's rules, inline)."""
    if name == "devices":
        return [" ".join(r.devices) for r in records]
    if name == "findings":
        return [" ".join(r.finding_rules) for r in records]
    values = [getattr(r, name) for r in records]
    return ["" if v is None else f"{v:.6f}" if isinstance(v, float) else str(v) for v in values]


def write_run_files(directory: PathLike, records: Sequence[TestRecord], doc: Mapping[str, Any]) -> tuple[Path, Path]:
    base = Path(directory)
    csv_path = atomic_write_text(base / "gpu_util.csv", records_csv(records))
    json_path = atomic_write_bytes(base / "gpu_util.json", json_bytes(doc))
    return csv_path, json_path
