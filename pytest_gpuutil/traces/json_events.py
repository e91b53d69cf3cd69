"""Events from decoded JSON: the checks every trace reader shares, and the standard library's reader.

A reader hands over each kept event (GPU work, the profiler's span and the host's waits: an event of
a :data:`~pytest_gpuutil.traces.model.SYNC_CATEGORIES` category named in
:data:`~pytest_gpuutil.traces.model.HOST_SYNC_NAMES`) as a :class:`PlainEvent`
with its index in ``traceEvents``; :func:`trace_from_events` checks the fields the analysis uses
and reports any problem as one :class:`TraceError` line naming the file and the event.
:func:`trace_from_json_tolerant` reads any JSON with the standard library (numbers kept as
written, as ``Decimal``): the reader for small traces, odd shapes and precise error messages.
No msgspec and no numpy here, so a small trace is read without importing either.
"""
from __future__ import annotations

import math

from pytest_gpuutil.frozen import tuple_record
from pytest_gpuutil.traces.model import (
    GPU_WORK_CATEGORIES,
    HOST_SYNC_NAMES,
    SYNC_CATEGORIES,
    GpuEvent,
    SyncColumns,
    Trace,
)

TYPE_CHECKING = False  # typing's, without importing typing at run time (gpuutil analyze's start-up)
if TYPE_CHECKING:
    from typing import Any, Iterable, Optional

PROFILER_SPAN_CATEGORY = "Trace"
KEPT_CATEGORIES = GPU_WORK_CATEGORIES | {PROFILER_SPAN_CATEGORY}
#: what a GPU event's device (args.device or pid) and stream (args.stream or tid) may be
PLACE_TYPES = frozenset((int, str))
#: times are kept as int64 nanoseconds; the analysis adds starts and durations
_NS_LIMIT = 2**62
_JSON_KINDS = {dict: "an object", list: "an array", str: "a string", type(None): "null"}


class TraceError(Exception):
    """A trace that cannot be read; ``str()`` is one line: ``<path>: <what is wrong>``."""

    def __init__(self, path: str, problem: str):
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


@tuple_record
class PlainEvent:
    """A kept event with its fields as Python values (``ts``/``dur`` raw JSON text as bytes, or numbers)."""

    cat: Any = ""
    name: Any = ""
    device: Any = None
    stream: Any = None
    ts: Any = None
    dur: Any = None


def trace_from_json_tolerant(path: str, data: Any) -> Trace:
    """The standard library's reading of ``data``, for odd shapes and for precise error messages."""
    import json
    from decimal import Decimal

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
    except RecursionError:
        raise TraceError(path, "not readable: JSON nested deeper than Python's recursion limit") from None
    if isinstance(doc, list):
        events, base = doc, 0
    elif isinstance(doc, dict):
        events = doc.get("traceEvents")
        if "traceEvents" in doc and not isinstance(events, list):
            raise TraceError(path, f"'traceEvents' is {_json_kind(events)}, not a list of events")
        if not isinstance(events, list):
            raise TraceError(path, "JSON has no 'traceEvents' list: not a Chrome/Kineto trace")
        base = base_time(path, doc.get("baseTimeNanoseconds"))
    else:
        raise TraceError(path, f"JSON top level is a {type(doc).__name__}, not a trace object")
    return trace_from_events(path, _kept_dicts(path, events), base)


def _kept_dicts(path: str, events: list) -> list[tuple[int, PlainEvent]]:
    """The kept events of a decoded ``traceEvents`` list; an event that is not an object, or whose
    ``cat`` is not a string, or GPU work whose ``args`` is not an object, is an error. (``ph`` is
    not what GPU work is found by: a GPU event of any phase must have ``ts`` and ``dur``.)"""
    kept = []
    for index, raw in enumerate(events):
        if not isinstance(raw, dict):
            raise TraceError(path, f"event {index} is {_json_kind(raw)} ({_shown(raw)}), not an object")
        if "cat" in raw and not isinstance(raw["cat"], str):
            raise TraceError(path, f"event {index}: 'cat' is not a string: {_shown(raw['cat'])}")
        if raw.get("cat") not in KEPT_CATEGORIES:
            if raw.get("cat") in SYNC_CATEGORIES and is_host_sync(raw.get("name")):
                kept.append((index, _plain_from_dict(raw)))
            continue
        event = _plain_from_dict(raw)
        args = raw.get("args")
        if event.cat != PROFILER_SPAN_CATEGORY and args is not None and not isinstance(args, dict):
            raise TraceError(path, f"{_describe(index, event)}: 'args' is {_json_kind(args)}, not an object")
        kept.append((index, event))
    return kept


def is_host_sync(name: Any) -> bool:
    """True for the name of a host wait (an event of a sync category with another name is not kept)."""
    return type(name) is str and name in HOST_SYNC_NAMES


def _plain_from_dict(raw: dict) -> PlainEvent:
    args = raw.get("args")
    args = args if isinstance(args, dict) else {}
    device = args.get("device")
    stream = args.get("stream")
    return PlainEvent(
        raw.get("cat"),
        raw.get("name", ""),
        raw.get("pid") if device is None else device,
        raw.get("tid") if stream is None else stream,
        raw.get("ts"),
        raw.get("dur"),
    )


def base_time(path: str, value: Any) -> int:
    if value is None:
        return 0
    if isinstance(value, bool) or not _is_number(value) or not math.isfinite(value):
        raise TraceError(path, f"baseTimeNanoseconds is not a number: {value}")
    return int(value)


def _is_number(value: Any) -> bool:
    """True for an int, a float, or the tolerant reader's ``Decimal`` (bools are ints here)."""
    if isinstance(value, (int, float)):
        return True
    from decimal import Decimal  # loaded already when the tolerant reader made one

    return isinstance(value, Decimal)


def trace_from_events(path: str, events: Iterable[tuple[int, PlainEvent]], base_time_ns: int) -> Trace:
    """Keep the GPU-work events, the profiler span and the host's waits, checking the fields the analysis uses."""
    gpu: list[GpuEvent] = []
    span: Optional[tuple[int, int]] = None
    waits: list[tuple[str, int, int]] = []
    for index, ev in events:
        if ev.cat in SYNC_CATEGORIES:
            waits.append((ev.name, *event_times(path, index, ev)))
            continue
        if ev.cat == PROFILER_SPAN_CATEGORY:
            if span is None:
                start, dur = event_times(path, index, ev)
                span = (start, start + dur)
            continue
        start, dur = event_times(path, index, ev)
        if not isinstance(ev.name, str):
            raise TraceError(path, f"{_describe(index, ev)}: 'name' is not a string: {_shown(ev.name)}")
        device, stream = _place(path, index, ev, "device", "pid"), _place(path, index, ev, "stream", "tid")
        gpu.append(GpuEvent(ev.name, ev.cat, device, stream, start, dur))
    syncs = SyncColumns(*map(list, zip(*waits))) if waits else SyncColumns()
    return Trace.from_events(path, gpu, span, base_time_ns, syncs)


def _place(path: str, index: int, ev: PlainEvent, field: str, fallback: str) -> str:
    """A GPU event's device or stream as text; it must be a whole number or a string."""
    value = getattr(ev, field)
    if type(value) in PLACE_TYPES:
        return str(value)
    what = "missing" if value is None else f"{_json_kind(value)} ({_shown(value)}), not a whole number or a string"
    raise TraceError(path, f"{_describe(index, ev)}: {field} (args.{field}, else {fallback}) is {what}")


def _json_kind(value: Any) -> str:
    """What a decoded JSON value is, in JSON's words: an object, an array, a string, ..."""
    if isinstance(value, bool):
        return "a boolean"
    if _is_number(value):
        return "a number"
    return _JSON_KINDS.get(type(value), f"a {type(value).__name__}")


def _shown(value: Any) -> str:
    """A decoded JSON value as JSON text, cut to 40 characters."""
    import json

    text = str(value) if _is_number(value) and not isinstance(value, bool) else json.dumps(value, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


def event_times(path: str, index: int, ev: PlainEvent) -> tuple[int, int]:
    start = _to_ns(path, index, ev, "ts", ev.ts)
    length = _to_ns(path, index, ev, "dur", ev.dur)
    if not (-_NS_LIMIT < start < _NS_LIMIT and length < _NS_LIMIT):
        raise TraceError(path, f"{_describe(index, ev)}: times beyond ±2^62 ns (ts {start / 1000:g} µs)")
    if length < 0:
        raise TraceError(path, f"{_describe(index, ev)}: negative dur {length / 1000:g} µs")
    return start, length


def _to_ns(path: str, index: int, ev: PlainEvent, field: str, value: Any) -> int:
    """Microseconds (raw JSON text or a number) to integer nanoseconds, exactly."""
    if isinstance(value, bytes):  # raw JSON text (the msgspec reader's)
        text = value
        if not text:
            raise TraceError(path, f"{_describe(index, ev)}: missing '{field}'")
        ns = _plain_decimal_to_ns(text)
        if ns is not None:
            return ns
        text_s = text.decode("ascii", "replace")
    elif value is None:
        raise TraceError(path, f"{_describe(index, ev)}: missing '{field}'")
    elif isinstance(value, bool) or not _is_number(value):
        raise TraceError(path, f"{_describe(index, ev)}: '{field}' is not a number: {value!r}")
    else:
        text_s = str(value)  # Decimal from the tolerant reader: the number as written
    from decimal import Decimal, InvalidOperation

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


def _describe(index: int, ev: PlainEvent) -> str:
    name = str(ev.name)
    if len(name) > 60:
        name = name[:57] + "..."
    return f"event {index} ({ev.cat} {name!r})"
