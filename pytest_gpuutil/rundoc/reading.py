"""A run file read back: the document checked key by key, each record against the record schema;
anything wrong is one :class:`~pytest_gpuutil.rundoc.document.RunDocError` line naming the file."""
from __future__ import annotations

import json
import math
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

from pytest_gpuutil.records import MAPPING_FIELDS, NUMERIC_FIELDS, TestRecord
from pytest_gpuutil.rundoc.document import RUN_FORMAT, RUN_VERSION, PathLike, RunDoc, RunDocError

#: record fields that are a string or null
_STR_FIELDS = ("top_kernel",)
#: record fields that are a string, "" when absent or null
_DEFAULT_STR_FIELDS = ("outcome", "worker", "note", "machine", "counters_source", "counters_note")


def _is_number(value: Any) -> bool:
    """True for a finite int/float that is not a bool."""
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
    )


def _record(path: PathLike, index: int, raw: Any) -> TestRecord:
    """Check one entry of ``tests`` and build its TestRecord."""
    where = f"tests[{index}]"
    if not isinstance(raw, Mapping):
        raise RunDocError(path, f"{where}: expected an object, got {type(raw).__name__}")
    data = dict(raw)
    test = data.get("test")
    if not isinstance(test, str) or not test:
        raise RunDocError(path, f"{where}.test: expected a non-empty string")
    for key in NUMERIC_FIELDS:
        value = data.get(key)
        if value is not None and not _is_number(value):
            raise RunDocError(
                path, f"{where}.{key} ({test}): expected a finite number or null, got {value!r}"
            )
    for key in _STR_FIELDS:
        value = data.get(key)
        if value is not None and not isinstance(value, str):
            raise RunDocError(path, f"{where}.{key} ({test}): expected a string or null")
    for key in _DEFAULT_STR_FIELDS:
        value = data.get(key)
        if value is None:
            data[key] = ""
        elif not isinstance(value, str):
            raise RunDocError(path, f"{where}.{key} ({test}): expected a string")
    for key in MAPPING_FIELDS:
        value = data.get(key)
        if value is None:
            data[key] = {}
        elif not isinstance(value, Mapping):
            raise RunDocError(path, f"{where}.{key} ({test}): expected an object or null")
    for label, stats in data["kernel_bench"].items():
        if not isinstance(stats, Mapping):
            raise RunDocError(
                path, f"{where}.kernel_bench[{label!r}] ({test}): expected an object"
            )
    devices = data.get("devices")
    if devices is None:
        data["devices"] = []
    elif not isinstance(devices, list) or not all(
        isinstance(d, (str, int)) and not isinstance(d, bool) for d in devices
    ):
        raise RunDocError(path, f"{where}.devices ({test}): expected a list of device ids")
    return TestRecord.from_dict(data)


def load_run_doc(path: PathLike) -> RunDoc:
    """Read a run or baseline file; RunDocError (one line) if it is unreadable or malformed."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RunDocError(path, "no such file") from None
    except IsADirectoryError:
        raise RunDocError(path, "is a directory, not a run file") from None
    except UnicodeDecodeError:
        raise RunDocError(path, "not UTF-8 text (not a gpu_util.json run file)") from None
    except OSError as exc:
        raise RunDocError(path, f"cannot read: {exc.strerror or exc}") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RunDocError(
            path, f"not valid JSON (line {exc.lineno} column {exc.colno}: {exc.msg})"
        ) from None
    if not isinstance(doc, dict):
        raise RunDocError(path, f"expected a JSON object, got {type(doc).__name__}")
    if doc.get("format") != RUN_FORMAT:
        raise RunDocError(
            path, f"not a {RUN_FORMAT} run file (format is {doc.get('format')!r})"
        )
    version = doc.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise RunDocError(path, f"bad version {version!r} (expected {RUN_VERSION})")
    if version > RUN_VERSION:
        raise RunDocError(
            path,
            f"written by a newer pytest-gpuutil (version {version}; this one reads {RUN_VERSION})",
        )
    machine_info = doc.get("machine_info")
    if machine_info is None:
        machine_info = {}
    if not isinstance(machine_info, dict):
        raise RunDocError(path, "machine_info: expected an object")
    tests = doc.get("tests")
    if not isinstance(tests, list):
        raise RunDocError(path, "tests: expected a list of test records")
    records: dict[str, TestRecord] = {}
    for index, raw in enumerate(tests):
        record = _record(path, index, raw)
        records[record.test] = record
    created = doc.get("created")
    return RunDoc(
        path=Path(path),
        machine_info=MappingProxyType(dict(machine_info)),
        records=MappingProxyType(records),
        created=created if isinstance(created, str) else None,
    )


#: the spool a run appends each flush's records to (session/run_files.py's RunSpool writes it)
SPOOL_NAME = "gpu_util.partial.jsonl"
RUN_NAME = "gpu_util.json"


def unfinished_spool(directory: PathLike) -> Path | None:
    """A run folder's spool when its run did not finish: there, and no newer gpu_util.json beside it."""
    folder = Path(directory)
    spool, run = folder / SPOOL_NAME, folder / RUN_NAME
    try:
        spooled = spool.stat().st_mtime
    except OSError:
        return None
    try:
        return spool if run.stat().st_mtime <= spooled else None
    except OSError:
        return spool


def load_spool(path: PathLike) -> tuple[RunDoc, dict[str, Any]]:
    """A killed run's spool as a run (and its document, with ``unfinished`` saying so); a torn last
    line (the process died while writing it) is left out, any other bad line is a RunDocError."""
    try:
        lines = Path(path).read_bytes().split(b"\n")
    except OSError as exc:
        raise RunDocError(path, f"cannot read: {exc.strerror or exc}") from None
    if lines and lines[-1] == b"":
        lines.pop()
    parsed: list[Any] = []
    for number, line in enumerate(lines, 1):
        try:
            parsed.append(json.loads(line))
        except ValueError:
            if number == len(lines):
                break  # the last line, cut short by the kill
            raise RunDocError(path, f"line {number}: not valid JSON") from None
    if not parsed or not isinstance(parsed[0], dict) or parsed[0].get("format") != "gpu_util-spool":
        raise RunDocError(path, "not a pytest-gpuutil spool (gpu_util.partial.jsonl)")
    head = parsed[0]
    raw = [entry.get("record") for entry in parsed[1:] if isinstance(entry, dict)]
    records = {}
    for index, item in enumerate(raw):
        record = _record(path, index, item)
        records[record.test] = record
    machine = head.get("machine_info") if isinstance(head.get("machine_info"), dict) else {}
    created = head.get("created") if isinstance(head.get("created"), str) else None
    doc = {"format": RUN_FORMAT, "version": RUN_VERSION, "created": created, "machine_info": machine,
           "tests": [r.to_dict() for r in records.values()],
           "unfinished": f"the run did not finish: its {len(records)} tests up to its last flush "
                         f"(from {Path(path).name})"}
    run = RunDoc(path=Path(path), machine_info=MappingProxyType(dict(machine)), records=MappingProxyType(records),
                 created=created)
    return run, doc
