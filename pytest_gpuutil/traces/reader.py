"""Read Kineto / Chrome trace files (``.json`` or ``.json.gz``) into a :class:`Trace`.

Three readers, fastest first, each giving the same events:
- the layout torch's profiler writes (:mod:`.kineto_layout`): one check of the whole JSON, then
  one regular-expression pass that picks out the GPU events' fields;
- any other trace msgspec can decode: one pass decodes every event into a small struct (complete
  events keep ``cat``, ``name``, ``pid``/``tid``, ``args.device``/``args.stream`` and ``ts``/``dur``
  as raw JSON text; flow, metadata and other events keep only ``cat``); the GPU events' times
  become integer nanoseconds in a few C calls when each is written with three decimals, else
  event by event, so fractional microseconds stay exact;
- anything msgspec cannot take (odd shapes, NaN literals, broken JSON) goes to the standard
  library's tolerant reading, with numbers kept as written (``Decimal``).
Every problem is reported as one line naming the file and what is wrong. Big uncompressed files
are memory-mapped rather than copied into memory.
"""
from __future__ import annotations

import gzip
import json
import math
import mmap
import operator
import os
import zlib
from decimal import Decimal, InvalidOperation
from typing import Any, Iterable, NamedTuple, Optional, Sequence, Union

import msgspec

from pytest_gpuutil.traces.exact_times import micros_to_ns
from pytest_gpuutil.traces.kineto_layout import read_kineto_layout
from pytest_gpuutil.traces.model import GPU_WORK_CATEGORIES, GpuColumns, GpuEvent, Trace

PROFILER_SPAN_CATEGORY = "Trace"
_KEPT_CATEGORIES = GPU_WORK_CATEGORIES | {PROFILER_SPAN_CATEGORY}
#: times are kept as int64 nanoseconds; the analysis adds starts and durations
_NS_LIMIT = 2**62
#: plain-JSON files at least this big are memory-mapped (where Linux can fill the mapping at once)
MAP_FILES_FROM_BYTES = 4 << 20


class TraceError(Exception):
    """A trace that cannot be read; ``str()`` is one line: ``<path>: <what is wrong>``."""

    def __init__(self, path: str, problem: str):
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


class _Args(msgspec.Struct, gc=False):
    device: Any = None
    stream: Any = None


class _Complete(msgspec.Struct, tag_field="ph", tag="X", gc=False):
    """A complete event (``ph: "X"``, as GPU work and the profiler span are): the fields used."""

    cat: str = ""
    name: Any = ""
    pid: Any = None
    tid: Any = None
    ts: msgspec.Raw = msgspec.Raw()
    dur: msgspec.Raw = msgspec.Raw()
    args: Union[_Args, None] = None


#: every other Chrome-trace phase (flows, metadata, instants, counters, ...): only ``cat`` is kept,
#: so the two-fifths of a Kineto trace that are flow and metadata events cost little
_OTHER_PHASES = tuple(
    msgspec.defstruct(f"_Phase{ord(phase)}", [("cat", str, "")], tag_field="ph", tag=phase, gc=False)
    for phase in "BEiIbneSTpFstfPNODMVvRcC()"
)
_AnyEvent = Union[(_Complete, *_OTHER_PHASES)]


class _Document(msgspec.Struct):
    traceEvents: Union[list[_AnyEvent], None] = None  # type: ignore[valid-type]
    baseTimeNanoseconds: Any = None


_TS, _DUR, _NAME, _ARGS, _CAT = (operator.attrgetter(f) for f in ("ts", "dur", "name", "args", "cat"))
_DEVICE, _STREAM = operator.attrgetter("device"), operator.attrgetter("stream")
_DOCUMENT = msgspec.json.Decoder(Union[_Document, list[_AnyEvent]])  # type: ignore[valid-type]


class _PlainEvent(NamedTuple):
    """A kept event with its fields as Python values (``ts``/``dur`` raw text or numbers)."""

    cat: Any = ""
    name: Any = ""
    device: Any = None
    stream: Any = None
    ts: Any = None
    dur: Any = None


def read_trace(path: Union[str, os.PathLike]) -> Trace:
    """Read one trace file; raises TraceError with a one-line reason on any bad input."""
    spath = os.fspath(path)
    data = _read_bytes(spath)
    kineto = read_kineto_layout(data)
    if kineto is not None:
        return Trace(spath, kineto.columns, kineto.profiler_span, _base_time(spath, kineto.base_time))
    return trace_from_json(spath, data)


def trace_from_json(path: str, data: Any) -> Trace:
    """Any Chrome/Kineto trace JSON in ``data`` (bytes or a buffer; ``path`` names it in errors)."""
    try:
        document = _DOCUMENT.decode(data)  # also checks that the whole file is valid JSON
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError):  # the last: a name not UTF-8
        return trace_from_json_tolerant(path, data)
    if isinstance(document, list):
        events, base = document, 0
    elif document.traceEvents is None:
        raise TraceError(path, "JSON has no 'traceEvents' list: not a Chrome/Kineto trace")
    else:
        events, base = document.traceEvents, _base_time(path, document.baseTimeNanoseconds)
    kept = [ev for ev in events if ev.cat in _KEPT_CATEGORIES]
    if not all(map(_Complete.__instancecheck__, kept)):  # GPU work that is not a complete event
        return trace_from_json_tolerant(path, data)
    fast = _columns_at_once(path, kept, base)
    if fast is not None:
        return fast
    indices = [i for i, ev in enumerate(events) if ev.cat in _KEPT_CATEGORIES]
    return trace_from_events(path, zip(indices, map(_plain_from_kept, kept)), base)


def _plain_from_kept(ev: _Complete) -> _PlainEvent:
    args = ev.args
    device = ev.pid if args is None or args.device is None else args.device
    stream = ev.tid if args is None or args.stream is None else args.stream
    return _PlainEvent(ev.cat, ev.name, device, stream, ev.ts or None, ev.dur or None)


def _columns_at_once(path: str, events: Sequence[_Complete], base_time_ns: int) -> Optional[Trace]:
    """The common case in a few C calls: every GPU event's times written with 3 decimals.

    The raw times become integer nanoseconds all at once (:func:`micros_to_ns`). Anything else
    returns None and the event-by-event path (with its precise error messages) takes over.
    """
    gpu = [ev for ev in events if ev.cat != PROFILER_SPAN_CATEGORY]
    span_at = next((n for n, ev in enumerate(events) if ev.cat == PROFILER_SPAN_CATEGORY), None)
    columns = GpuColumns()
    if gpu:
        starts = micros_to_ns(b",".join(map(_TS, gpu)), len(gpu), signed=True)
        durs = micros_to_ns(b",".join(map(_DUR, gpu)), len(gpu), signed=False)
        if starts is None or durs is None:
            return None
        names = list(map(_NAME, gpu))
        args = list(map(_ARGS, gpu))
        devices = list(map(_DEVICE, args)) if None not in args else [None]
        streams = list(map(_STREAM, args)) if None not in args else [None]
        if None in devices or None in streams:  # some event lacks args.device/stream: use pid/tid
            devices = [ev.pid if a is None or a.device is None else a.device for ev, a in zip(gpu, args)]
            streams = [ev.tid if a is None or a.stream is None else a.stream for ev, a in zip(gpu, args)]
        columns = GpuColumns(
            names if all(map(str.__instancecheck__, names)) else list(map(str, names)),
            list(map(_CAT, gpu)),
            devices,  # ids as the trace has them; made text where they are shown
            streams,
            starts,
            durs,
        )
    span = None
    if span_at is not None:
        try:
            start, dur = _times(path, span_at, _plain_from_kept(events[span_at]))
        except TraceError:
            return None  # the event-by-event path reports it with the event's index in the file
        span = (start, start + dur)
    return Trace(path, columns, span, base_time_ns)


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
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            raise TraceError(path, f"not a valid gzip stream ({exc})") from None
    elif path.endswith(".gz"):
        raise TraceError(path, "not a valid gzip stream (no gzip header)")
    if isinstance(data, bytes) and (not data or data.isspace()):  # isspace stops at the first other byte
        raise TraceError(path, "empty file")
    return data


def _map_big_file(handle: Any) -> Optional[mmap.mmap]:
    """A read-only mapping of a big file, filled at once; None where that is not available.

    Mapping skips copying tens of MB; without MAP_POPULATE the page faults cost more than the
    copy, so other platforms read the file.
    """
    populate = getattr(mmap, "MAP_POPULATE", 0)
    if not populate or os.fstat(handle.fileno()).st_size < MAP_FILES_FROM_BYTES:
        return None
    return mmap.mmap(handle.fileno(), 0, flags=mmap.MAP_SHARED | populate, prot=mmap.PROT_READ)


def trace_from_json_tolerant(path: str, data: Any) -> Trace:
    """The standard library's reading of ``data``, for odd shapes and for precise error messages."""
    data = bytes(data)  # json wants bytes; this path is for odd or broken input
    if data.isspace():
        raise TraceError(path, "empty file")
    try:
        doc = json.loads(data, parse_float=Decimal)  # numbers exactly as written, however long
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
    plain = [
        (i, _plain_from_dict(e))
        for i, e in enumerate(events)
        if isinstance(e, dict) and isinstance(e.get("cat"), str) and e["cat"] in _KEPT_CATEGORIES
    ]
    return trace_from_events(path, plain, base)


def _plain_from_dict(raw: dict) -> _PlainEvent:
    args = raw.get("args")
    args = args if isinstance(args, dict) else {}
    device = args.get("device")
    stream = args.get("stream")
    return _PlainEvent(
        raw.get("cat"),
        raw.get("name", ""),
        raw.get("pid") if device is None else device,
        raw.get("tid") if stream is None else stream,
        raw.get("ts"),
        raw.get("dur"),
    )


def _base_time(path: str, value: Any) -> int:
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, (int, float, Decimal)) or not math.isfinite(value):
        raise TraceError(path, f"baseTimeNanoseconds is not a number: {value}")
    return int(value)


def trace_from_events(path: str, events: Iterable[tuple[int, _PlainEvent]], base_time_ns: int) -> Trace:
    """Keep the GPU-work events and the profiler span, checking the fields the analysis uses."""
    gpu: list[GpuEvent] = []
    span: Optional[tuple[int, int]] = None
    for index, ev in events:
        if ev.cat == PROFILER_SPAN_CATEGORY:
            if span is None:
                start, dur = _times(path, index, ev)
                span = (start, start + dur)
            continue
        start, dur = _times(path, index, ev)
        gpu.append(GpuEvent(str(ev.name), ev.cat, str(ev.device), str(ev.stream), start, dur))
    return Trace.from_events(path, gpu, span, base_time_ns)


def _times(path: str, index: int, ev: _PlainEvent) -> tuple[int, int]:
    start = _to_ns(path, index, ev, "ts", ev.ts)
    length = _to_ns(path, index, ev, "dur", ev.dur)
    if not (-_NS_LIMIT < start < _NS_LIMIT and length < _NS_LIMIT):
        raise TraceError(path, f"{_describe(index, ev)}: times beyond ±2^62 ns (ts {start / 1000:g} µs)")
    if length < 0:
        raise TraceError(path, f"{_describe(index, ev)}: negative dur {length / 1000:g} µs")
    return start, length


def _to_ns(path: str, index: int, ev: _PlainEvent, field: str, value: Any) -> int:
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
    elif isinstance(value, bool) or not isinstance(value, (int, float, Decimal)):
        raise TraceError(path, f"{_describe(index, ev)}: '{field}' is not a number: {value!r}")
    else:
        text_s = str(value)  # Decimal from the tolerant reader: the number as written
    try:
        micros = Decimal(text_s)
    except InvalidOperation:
        raise TraceError(path, f"{_describe(index, ev)}: '{field}' is not a number: {text_s[:40]}") from None
    if not micros.is_finite():
        raise TraceError(path, f"{_describe(index, ev)}: '{field}' is not a finite number: {text_s}")
    return int((micros * 1000).to_integral_value())


def _plain_decimal_to_ns(text: bytes) -> Optional[int]:
    """``b"123.456"`` µs to 123456 ns without Decimal; None for any other form."""
    if len(text) > 4 and text[-4] == 46:  # "...x.yyy", Kineto's own format
        try:
            return int(text[:-4] + text[-3:])
        except ValueError:
            return None
    whole, _, frac = text.partition(b".")
    if len(frac) > 3 or not whole.lstrip(b"-").isdigit() or (frac and not frac.isdigit()):
        return None
    ns = int(whole.lstrip(b"-")) * 1000 + (int(frac.ljust(3, b"0")) if frac else 0)
    return -ns if whole.startswith(b"-") else ns


def _describe(index: int, ev: _PlainEvent) -> str:
    name = str(ev.name)
    if len(name) > 60:
        name = name[:57] + "..."
    return f"event {index} ({ev.cat} {name!r})"
