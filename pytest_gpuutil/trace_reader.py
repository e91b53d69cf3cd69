"""Read Kineto / Chrome trace files (``.json`` or ``.json.gz``) into a :class:`Trace`.

Fast path: msgspec decodes only the fields the analysis needs, with ``ts``/``dur`` kept as raw
JSON text so fractional microseconds convert to integer nanoseconds exactly. If that typed decode
fails (odd shapes, NaN literals), the standard library parses the file and the same checks run
on plain dicts, so every problem is reported as one line naming the file and what is wrong.
"""
from __future__ import annotations

import gzip
import json
import math
import os
import zlib
from decimal import Decimal, InvalidOperation
from typing import Any, Iterable, Optional, Union

import msgspec

from .trace_model import GPU_WORK_CATEGORIES, GpuEvent, Trace

PROFILER_SPAN_CATEGORY = "Trace"


class TraceError(Exception):
    """A trace that cannot be read; ``str()`` is one line: ``<path>: <what is wrong>``."""

    def __init__(self, path: str, problem: str):
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


class _Args(msgspec.Struct):
    device: Any = None
    stream: Any = None


class _Event(msgspec.Struct):
    ph: Any = ""
    cat: Any = ""
    name: Any = ""
    pid: Any = None
    tid: Any = None
    ts: msgspec.Raw = msgspec.Raw()
    dur: msgspec.Raw = msgspec.Raw()
    args: Union[_Args, None] = None


class _TraceDoc(msgspec.Struct):
    traceEvents: Union[list[_Event], None] = None
    baseTimeNanoseconds: Any = None


_DECODER = msgspec.json.Decoder(Union[_TraceDoc, list[_Event]])


def read_trace(path: Union[str, os.PathLike]) -> Trace:
    """Read one trace file; raises TraceError with a one-line reason on any bad input."""
    spath = os.fspath(path)
    data = _read_bytes(spath)
    try:
        doc = _DECODER.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return _read_with_stdlib(spath, data)
    if isinstance(doc, list):
        return trace_from_events(spath, doc, base_time_ns=0)
    if doc.traceEvents is None:
        raise TraceError(spath, "JSON has no 'traceEvents' list: not a Chrome/Kineto trace")
    return trace_from_events(spath, doc.traceEvents, base_time_ns=_base_time(spath, doc.baseTimeNanoseconds))


def _read_bytes(path: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        raise TraceError(path, "no such file") from None
    except IsADirectoryError:
        raise TraceError(path, "is a directory, not a trace file") from None
    except OSError as exc:
        raise TraceError(path, f"cannot read: {exc.strerror or exc}") from None
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            raise TraceError(path, f"not a valid gzip stream ({exc})") from None
    elif path.endswith(".gz"):
        raise TraceError(path, "not a valid gzip stream (no gzip header)")
    if not data.strip():
        raise TraceError(path, "empty file")
    return data


def _read_with_stdlib(path: str, data: bytes) -> Trace:
    try:
        doc = json.loads(data)
    except UnicodeDecodeError as exc:
        raise TraceError(path, f"not valid JSON: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        hint = " (truncated?)" if exc.pos >= len(data.rstrip()) - 1 else ""
        raise TraceError(path, f"not valid JSON{hint}: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    if isinstance(doc, list):
        events, base = doc, 0
    elif isinstance(doc, dict):
        events = doc.get("traceEvents")
        if not isinstance(events, list):
            raise TraceError(path, "JSON has no 'traceEvents' list: not a Chrome/Kineto trace")
        base = _base_time(path, doc.get("baseTimeNanoseconds"))
    else:
        raise TraceError(path, f"JSON top level is a {type(doc).__name__}, not a trace object")
    return trace_from_events(path, (_event_from_dict(i, e, path) for i, e in enumerate(events)), base)


def _event_from_dict(index: int, raw: Any, path: str) -> _Event:
    if not isinstance(raw, dict):
        return _Event()  # not an event object: nothing the analysis uses
    args = raw.get("args")
    return _Event(
        ph=raw.get("ph", ""),
        cat=raw.get("cat", ""),
        name=raw.get("name", ""),
        pid=raw.get("pid"),
        tid=raw.get("tid"),
        ts=raw.get("ts"),  # type: ignore[arg-type]  # a number here, raw text on the fast path
        dur=raw.get("dur"),  # type: ignore[arg-type]
        args=_Args(args.get("device"), args.get("stream")) if isinstance(args, dict) else None,
    )


def _base_time(path: str, value: Any) -> int:
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise TraceError(path, f"baseTimeNanoseconds is not a number: {value!r}")
    return int(value)


def trace_from_events(path: str, events: Iterable[_Event], base_time_ns: int) -> Trace:
    """Keep the GPU-work events and the profiler span, checking the fields the analysis uses."""
    gpu: list[GpuEvent] = []
    span: Optional[tuple[int, int]] = None
    for index, ev in enumerate(events):
        cat = ev.cat
        if cat in GPU_WORK_CATEGORIES:
            start, dur = _times(path, index, ev)
            args = ev.args
            device = args.device if args is not None and args.device is not None else ev.pid
            stream = args.stream if args is not None and args.stream is not None else ev.tid
            gpu.append(GpuEvent(str(ev.name), cat, str(device), str(stream), start, dur))
        elif cat == PROFILER_SPAN_CATEGORY and span is None:
            start, dur = _times(path, index, ev)
            span = (start, start + dur)
    return Trace(path=path, events=tuple(gpu), profiler_span=span, base_time_ns=base_time_ns)


def _times(path: str, index: int, ev: _Event) -> tuple[int, int]:
    start = _to_ns(path, index, ev, "ts", ev.ts)
    dur = _to_ns(path, index, ev, "dur", ev.dur)
    if dur < 0:
        raise TraceError(path, f"{_describe(index, ev)}: negative dur {dur / 1000:g} µs")
    return start, dur


def _to_ns(path: str, index: int, ev: _Event, field: str, value: Any) -> int:
    """Microseconds (raw JSON text or a number) to integer nanoseconds, exactly."""
    if isinstance(value, msgspec.Raw):
        text = bytes(value)
        if not text:
            raise TraceError(path, f"{_describe(index, ev)}: missing '{field}'")
        ns = _plain_decimal_to_ns(text)
        if ns is not None:
            return ns
        text_s = text.decode("ascii", "replace")
    elif value is None:
        raise TraceError(path, f"{_describe(index, ev)}: missing '{field}'")
    elif isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TraceError(path, f"{_describe(index, ev)}: '{field}' is not a number: {value!r}")
    else:
        text_s = repr(value)
    try:
        micros = Decimal(text_s)
    except InvalidOperation:
        raise TraceError(path, f"{_describe(index, ev)}: '{field}' is not a number: {text_s[:40]}") from None
    if not micros.is_finite():
        raise TraceError(path, f"{_describe(index, ev)}: '{field}' is not a finite number: {text_s}")
    return int((micros * 1000).to_integral_value())


def _plain_decimal_to_ns(text: bytes) -> Optional[int]:
    """``b"123.456"`` µs to 123456 ns without Decimal; None for any other form."""
    whole, _, frac = text.partition(b".")
    if len(frac) > 3 or not whole.lstrip(b"-").isdigit() or (frac and not frac.isdigit()):
        return None
    ns = int(whole.lstrip(b"-")) * 1000 + (int(frac.ljust(3, b"0")) if frac else 0)
    return -ns if whole.startswith(b"-") else ns


def _describe(index: int, ev: _Event) -> str:
    name = str(ev.name)
    if len(name) > 60:
        name = name[:57] + "..."
    return f"event {index} ({ev.cat} {name!r})"
