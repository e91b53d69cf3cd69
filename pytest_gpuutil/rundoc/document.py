"""The run document (``gpu_util.json``, also what baselines store): its format, how it is built and
serialized, and what it is read back as."""
from __future__ import annotations

import datetime as _dt
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Optional, Union

from pytest_gpuutil.records import TestRecord

#: value of the ``format`` key of a run document
RUN_FORMAT = "pytest-gpuutil"
#: newest run-document version this package reads (and the version it writes)
RUN_VERSION = 1
#: id used when the run saw no GPU
NO_GPU_ID = "no-gpu"

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")

PathLike = Union[str, "os.PathLike[str]"]


class RunDocError(Exception):
    """A run file that cannot be used; ``str()`` is one line ``<path>: <problem>``."""

    def __init__(self, path: PathLike, problem: str) -> None:
        self.path = Path(path)
        self.problem = problem
        super().__init__(f"{path}: {problem}")


@dataclass(frozen=True)
class RunDoc:
    """A run document read back from disk: machine description and records keyed by nodeid."""

    path: Path
    machine_info: Mapping[str, Any]
    records: Mapping[str, TestRecord]
    created: str | None = None

    @property
    def machine_id(self) -> str:
        """Baseline directory name of the machine this run was measured on."""
        return machine_id(self.machine_info)


def _slug(text: str) -> str:
    """Replace runs of characters unsafe in file names by ``_``."""
    return _UNSAFE.sub("_", text).strip("._-")


def machine_id(machine_info: Mapping[str, Any] | None) -> str:
    """Filesystem-safe id of the GPU setup, e.g. ``NVIDIA_H100_80GB_HBM3-x1`` or ``no-gpu``.

    Only the GPU model and count: the host name changes between CI runners, and driver, CUDA and
    torch upgrades are exactly what a baseline comparison should catch, not hide.
    """
    info = machine_info or {}
    model = info.get("gpu_model")
    if not isinstance(model, str) or not _slug(model):
        return NO_GPU_ID
    ident = _slug(model)[:80]
    count = info.get("gpu_count")
    if isinstance(count, int) and not isinstance(count, bool) and count > 0:
        ident += f"-x{count}"
    return ident


def safe_name(nodeid: str) -> str:
    """A file name for a test id: its files beside the run (``traces/<name>.json.gz``, ``memory/<name>.pickle``)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid).strip("_")[:180]


def now_utc() -> str:
    """The time a run document is stamped with (UTC, whole seconds)."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def run_document(records: Iterable[TestRecord], machine: Mapping[str, Any], created: str,
                 as_dict: Optional[Callable[[TestRecord], dict]] = None, **extra: Any) -> dict:
    """The gpu_util.json document (also what baselines store); ``as_dict``: a record's dict where one
    was made already (the run's spool), else ``to_dict``."""
    doc = {
        "format": RUN_FORMAT,
        "version": RUN_VERSION,
        "created": created,
        "machine_info": dict(machine),
        "tests": [r.to_dict() for r in records] if as_dict is None else [as_dict(r) for r in records],
    }
    doc.update(extra)
    return doc


def json_bytes(doc: Mapping[str, Any]) -> bytes:
    """The document as indented JSON (msgspec: a run of 1,000 tests in a few ms; anything odd as str)."""
    return b"".join(json_chunks(doc))


def json_chunks(doc: Mapping[str, Any]) -> list[bytes]:
    """:func:`json_bytes` in pieces that follow one another (a file takes them as they are: the tests
    array, most of the document, is not copied once more to join them).

    Where the C part is built (rundoc/_indent.c), the tests array is indented from each test's own
    JSON (a ``msgspec.Raw`` as the run's spool encoded it, or encoded here), not parsed again inside
    the whole document: the same bytes as formatting the whole (tests/rundoc/test_json_indent.py)."""
    import msgspec

    tests = doc.get("tests")
    if _INDENT is not None and type(tests) is list and tests:
        encode, raw = msgspec.json.encode, msgspec.Raw
        head = msgspec.json.format(encode({**doc, "tests": []}, enc_hook=str), indent=1)
        at = head.find(_EMPTY_TESTS)
        if at >= 0:
            items = [t if type(t) is raw else encode(t, enc_hook=str) for t in tests]
            try:
                body = _INDENT.array(items, 1)
            except ValueError:  # not JSON msgspec wrote: msgspec's format says what is wrong
                pass
            else:
                at += len(_EMPTY_TESTS) - 2
                return [head[:at], body, head[at + 2:] + b"\n"]
    return [msgspec.json.format(msgspec.json.encode(doc, enc_hook=str), indent=1) + b"\n"]


#: where a document's (empty) tests array stands once formatted: a top-level key, the only ones at one space
_EMPTY_TESTS = b'\n "tests": []'

try:  # the tests array indented in C (rundoc/_indent.c, built at install where a C compiler is found)
    from pytest_gpuutil.rundoc import _indent as _INDENT
except ImportError:  # pragma: no cover - without a compiler: msgspec formats the whole document
    _INDENT = None
