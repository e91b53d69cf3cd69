"""Read Kineto / Chrome trace files (``.json`` or ``.json.gz``) into a :class:`Trace`.

Five readers, each giving the same events; the fastest that fits takes the trace:
- the C reader (``_scan.c``, built at install where a C compiler is found): one pass that checks
  the whole document is valid JSON and takes out the GPU events; it declines anything unusual
  (escapes, odd shapes, times it cannot convert exactly, any error), and the others take over;
- a small trace (up to 256 KiB of JSON) in a process that has not loaded msgspec: the standard
  library (:mod:`.json_events`), faster than importing msgspec;
- the layout torch's profiler writes (:mod:`.kineto_layout`): one check of the whole JSON, then
  one regular-expression pass that picks out the GPU events' fields;
- any other trace msgspec can decode (:mod:`.msgspec_reader`): one pass into small structs;
- anything msgspec cannot take (odd shapes, NaN literals, broken JSON): the standard library's
  tolerant reading, with numbers kept as written (``Decimal``).
Every problem is reported as one line naming the file and what is wrong. Big uncompressed files
are memory-mapped rather than copied into memory; gzip'd ones are decompressed into one buffer.
"""
from __future__ import annotations

import functools
import mmap
import os
import sys
import zlib

from pytest_gpuutil.traces.json_events import (
    TraceError,
    base_time,
    trace_from_json_tolerant,
)
from pytest_gpuutil.traces.model import CodedColumn, GpuColumns, SyncColumns, Trace, use_plain_python

TYPE_CHECKING = False  # typing's, without importing typing at run time (gpuutil analyze's start-up)
if TYPE_CHECKING:
    from typing import Any, Callable, Optional, Union

__all__ = [
    "MAP_FILES_FROM_BYTES",
    "TraceError",
    "c_reader_available",
    "read_trace",
    "read_trace_python",
    "trace_from_json",
    "trace_from_json_tolerant",
]

#: plain-JSON files at least this big are memory-mapped (where Linux can fill the mapping at once)
MAP_FILES_FROM_BYTES = 4 << 20
#: up to this much JSON, a process without msgspec reads with the standard library
SMALL_TRACE_BYTES = 256 << 10
#: deflate's output is at most about 1032 times its input: a bigger stated size is a corrupt trailer
_MAX_DEFLATE_RATIO = 1032


def read_trace(path: Union[str, os.PathLike]) -> Trace:
    """Read one trace file; raises TraceError with a one-line reason on any bad input."""
    spath = os.fspath(path)
    data = _read_bytes(spath)
    scan = _c_scan()
    if scan is not None:
        trace = _trace_from_scan(spath, scan(data))
        if trace is not None:
            return trace
    return _read_in_python(spath, data)


def read_trace_python(path: Union[str, os.PathLike]) -> Trace:
    """What :func:`read_trace` gives without the C reader (as where it is not built)."""
    spath = os.fspath(path)
    return _read_in_python(spath, _read_bytes(spath))


def c_reader_available() -> bool:
    """True when the C reader was built at install (else the pure-Python readers do all the work)."""
    return _c_scan() is not None


@functools.lru_cache(maxsize=None)
def _c_scan() -> Optional[Callable[[Any], Any]]:
    try:
        from pytest_gpuutil.traces._scan import scan
    except ImportError:  # not built at install
        return None
    return scan


def _trace_from_scan(path: str, found: Any) -> Optional[Trace]:
    """A :class:`Trace` from the C reader's tuple; None when it declined (it said why, in a str)."""
    if isinstance(found, str):
        return None
    name_codes, names, kinds, place_codes, devices, streams, starts, durs, span, base, _parts, *waits = found
    if not use_plain_python(len(starts)):
        import numpy as np

        starts, durs = np.array(starts, dtype=np.int64), np.array(durs, dtype=np.int64)
    columns = GpuColumns.coded(name_codes, names, kinds, place_codes, devices, streams, starts, durs)
    sync_codes, sync_names, sync_starts, sync_durs = waits
    syncs = SyncColumns(CodedColumn(sync_codes, sync_names), sync_starts, sync_durs) if sync_codes else SyncColumns()
    return Trace(path, columns, span, base_time(path, None if base is None else _json_number(base)), syncs)


def _json_number(text: bytes) -> Any:
    """The value of ``baseTimeNanoseconds`` (JSON text: usually a whole number)."""
    try:
        return int(text)
    except ValueError:
        import json

        return json.loads(text)


def _read_in_python(spath: str, data: Any) -> Trace:
    if len(data) <= SMALL_TRACE_BYTES and "msgspec" not in sys.modules:
        return trace_from_json_tolerant(spath, data)  # importing msgspec would cost more than it saves
    # imported here: where the C reader is built, it is seldom needed
    from pytest_gpuutil.traces.kineto_layout import read_kineto_layout

    kineto = read_kineto_layout(data)
    if kineto is not None:
        return Trace(spath, kineto.columns, kineto.profiler_span, base_time(spath, kineto.base_time), kineto.syncs)
    return trace_from_json(spath, data)


def trace_from_json(path: str, data: Any) -> Trace:
    """Any Chrome/Kineto trace JSON in ``data`` (bytes or a buffer; ``path`` names it in errors)."""
    from pytest_gpuutil.traces import msgspec_reader

    return msgspec_reader.trace_from_json(path, data)


def _read_bytes(path: str) -> Union[bytes, mmap.mmap]:
    try:
        with open(path, "rb") as handle:
            mapped = _map_big_file(handle)
            data = handle.read() if mapped is None else mapped
    except FileNotFoundError:
        raise TraceError(path, "no such file") from None
    except IsADirectoryError:
        raise TraceError(path, "is a directory, not a trace file") from None
    except OSError as exc:
        raise TraceError(path, f"cannot read: {exc.strerror or exc}") from None
    if data[:2] == b"\x1f\x8b":
        data = _gunzip(path, data)
    elif path.endswith(".gz"):
        raise TraceError(path, "not a valid gzip stream (no gzip header)")
    if isinstance(data, bytes) and (not data or data.isspace()):  # isspace stops at the first other byte
        raise TraceError(path, "empty file")
    return data


def _gunzip(path: str, data: Any) -> bytes:
    """What ``gzip.decompress`` gives, into one buffer of the size the gzip trailer states.

    ``gzip.decompress`` grows its output block by block and copies it into the result at the end:
    twice the trace's size at the peak, and slower. One member decompressed into a buffer of the
    stated size is the result itself. Anything else (several members, trailing bytes, a size that
    does not match) goes to ``gzip.decompress``, whose errors are reported.
    """
    stated = int.from_bytes(data[-4:], "little")  # ISIZE: the last member's length mod 2**32
    if 0 < stated <= _MAX_DEFLATE_RATIO * len(data):
        try:
            out = zlib.decompress(data, 16 + zlib.MAX_WBITS, stated)  # one gzip member, its CRC checked
        except (zlib.error, MemoryError):
            out = None
        if out is not None and len(out) % 2**32 == stated and not _may_have_more_members(data, len(out)):
            return out
    import gzip

    try:
        return gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as exc:
        raise TraceError(path, f"not a valid gzip stream ({exc})") from None


def _may_have_more_members(data: Any, first_length: int) -> bool:
    """True when a second gzip member may follow the first, whose output is ``first_length`` bytes.

    A member that follows another starts with the gzip magic right after the first's trailer,
    which ends with its length (mod 2**32), possibly followed by zero padding; no such place, no
    second member.
    """
    size = (first_length % 2**32).to_bytes(4, "little")
    at = data.find(b"\x1f\x8b", 18)  # the smallest gzip member is 18 bytes
    while at != -1:
        end = at
        while True:
            if data[end - 4 : end] == size:
                return True
            if end <= 4 or data[end - 1] != 0:
                break
            end -= 1  # zero padding between members
        at = data.find(b"\x1f\x8b", at + 1)
    return False


#: mmap's MAP_POPULATE flag, which Python names from 3.10 on; Linux's value on the usual machines before that
MAP_POPULATE = getattr(mmap, "MAP_POPULATE", 0) or (
    0x8000 if sys.platform == "linux" and os.uname().machine in ("x86_64", "aarch64") else 0)


def _map_big_file(handle: Any) -> Optional[mmap.mmap]:
    """A read-only mapping of a big file, filled at once; None where that is not available.

    Mapping skips copying tens of MB; without MAP_POPULATE the page faults cost more than the
    copy, so other platforms read the file.
    """
    populate = MAP_POPULATE
    if not populate or os.fstat(handle.fileno()).st_size < MAP_FILES_FROM_BYTES:
        return None
    return mmap.mmap(handle.fileno(), 0, flags=mmap.MAP_SHARED | populate, prot=mmap.PROT_READ)
