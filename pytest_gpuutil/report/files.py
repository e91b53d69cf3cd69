"""Atomic file writing (temporary file in the same folder, then rename) and the run's CSV/JSON."""
from __future__ import annotations

import csv
import io
import os
import tempfile
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence, Union

from pytest_gpuutil.records import CSV_COLUMNS, TestRecord
from pytest_gpuutil.report.metric_tables import format_value

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
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for record in records:
        row = record.csv_row()
        writer.writerow([format_value(row[c]) for c in columns])
    return out.getvalue()


def run_document(records: Iterable[TestRecord], machine: Mapping[str, Any], created: str, **extra: Any) -> dict:
    """The gpu_util.json document (also what baselines store)."""
    doc = {
        "format": "pytest-gpuutil",
        "version": 1,
        "created": created,
        "machine_info": dict(machine),
        "tests": [r.to_dict() for r in records],
    }
    doc.update(extra)
    return doc


def json_bytes(doc: Mapping[str, Any]) -> bytes:
    """The document as indented JSON (msgspec: a run of 1,000 tests in a few ms; anything odd as str)."""
    import msgspec

    return msgspec.json.format(msgspec.json.encode(doc, enc_hook=str), indent=1) + b"\n"


def write_run_files(directory: PathLike, records: Sequence[TestRecord], doc: Mapping[str, Any]) -> tuple[Path, Path]:
    base = Path(directory)
    csv_path = atomic_write_text(base / "gpu_util.csv", records_csv(records))
    json_path = atomic_write_bytes(base / "gpu_util.json", json_bytes(doc))
    return csv_path, json_path
