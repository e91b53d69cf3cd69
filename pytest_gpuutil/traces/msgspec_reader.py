"""Any trace msgspec can decode: one pass decodes every event into a small struct.

Complete events keep ``cat``, ``name``, ``pid``/``tid``, ``args.device``/``args.stream`` and
``ts``/``dur`` as raw JSON text; flow, metadata and other events keep only ``cat``. The host's
waits (complete events of a sync category named as one) are kept beside the GPU work. The GPU events'
times become integer nanoseconds in a few C calls when each is written with three decimals, else
event by event, so fractional microseconds stay exact. What msgspec cannot take (odd shapes, NaN
literals) goes to the standard library's reader, which also words every error.
"""
from __future__ import annotations

import operator
from typing import Any, Optional, Sequence, Union

import msgspec

from pytest_gpuutil.traces.exact_times import micros_to_ns
from pytest_gpuutil.traces.json_events import (
    KEPT_CATEGORIES,
    PLACE_TYPES,
    PROFILER_SPAN_CATEGORY,
    PlainEvent,
    TraceError,
    base_time,
    event_times,
    is_host_sync,
    trace_from_events,
    trace_from_json_tolerant,
)
from pytest_gpuutil.traces.model import SYNC_CATEGORIES, GpuColumns, SyncColumns, Trace, use_plain_python


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


def trace_from_json(path: str, data: Any) -> Trace:
    """Any Chrome/Kineto trace JSON in ``data`` (bytes or a buffer; ``path`` names it in errors)."""
    try:
        document = _DOCUMENT.decode(data)  # also checks that the whole file is valid JSON
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError, RecursionError):  # a name not UTF-8; deep nesting
        return trace_from_json_tolerant(path, data)
    if isinstance(document, list):
        events, base = document, 0
    elif document.traceEvents is None:  # missing or null: the tolerant reader says which
        return trace_from_json_tolerant(path, data)
    else:
        events, base = document.traceEvents, base_time(path, document.baseTimeNanoseconds)
    kept = [ev for ev in events if ev.cat in KEPT_CATEGORIES or (ev.cat in SYNC_CATEGORIES and _may_be_wait(ev))]
    if not all(map(_Complete.__instancecheck__, kept)):  # GPU work (or a wait?) that is not a complete event
        return trace_from_json_tolerant(path, data)
    fast = _columns_at_once(path, kept, base)
    if fast is not None:
        return fast
    indices = [i for i, ev in enumerate(events)
               if ev.cat in KEPT_CATEGORIES or (ev.cat in SYNC_CATEGORIES and _may_be_wait(ev))]
    return trace_from_events(path, zip(indices, map(_plain_from_kept, kept)), base)


def _may_be_wait(ev: Any) -> bool:
    """A complete event named as a host wait; or an event of another phase, whose name is not
    decoded (the tolerant reader then decides by its name)."""
    return type(ev) is not _Complete or is_host_sync(ev.name)


def _plain_from_kept(ev: _Complete) -> PlainEvent:
    args = ev.args
    device = ev.pid if args is None or args.device is None else args.device
    stream = ev.tid if args is None or args.stream is None else args.stream
    return PlainEvent(ev.cat, ev.name, device, stream, bytes(ev.ts) or None, bytes(ev.dur) or None)


def _columns_at_once(path: str, events: Sequence[_Complete], base_time_ns: int) -> Optional[Trace]:
    """The common case in a few C calls: every GPU event's times written with 3 decimals.

    The raw times become integer nanoseconds all at once (:func:`micros_to_ns`). Anything else
    returns None and the event-by-event path (with its precise error messages) takes over.
    """
    gpu = [ev for ev in events if ev.cat != PROFILER_SPAN_CATEGORY and ev.cat not in SYNC_CATEGORIES]
    waits = [ev for ev in events if ev.cat in SYNC_CATEGORIES]
    span_at = next((n for n, ev in enumerate(events) if ev.cat == PROFILER_SPAN_CATEGORY), None)
    columns = GpuColumns()
    if gpu:
        plain = use_plain_python(len(gpu))
        starts = micros_to_ns(b",".join(map(_TS, gpu)), len(gpu), signed=True, plain=plain)
        durs = micros_to_ns(b",".join(map(_DUR, gpu)), len(gpu), signed=False, plain=plain)
        if starts is None or durs is None:
            return None
        names = list(map(_NAME, gpu))
        args = list(map(_ARGS, gpu))
        devices = list(map(_DEVICE, args)) if None not in args else [None]
        streams = list(map(_STREAM, args)) if None not in args else [None]
        if None in devices or None in streams:  # some event lacks args.device/stream: use pid/tid
            devices = [ev.pid if a is None or a.device is None else a.device for ev, a in zip(gpu, args)]
            streams = [ev.tid if a is None or a.stream is None else a.stream for ev, a in zip(gpu, args)]
        if not all(map(str.__instancecheck__, names)) or not PLACE_TYPES.issuperset(map(type, devices + streams)):
            return None  # a name, device or stream of the wrong type: the event path says which
        columns = GpuColumns(
            names,
            list(map(_CAT, gpu)),
            devices,  # ids as the trace has them; made text where they are shown
            streams,
            starts,
            durs,
        )
    span = None
    if span_at is not None:
        try:
            start, dur = event_times(path, span_at, _plain_from_kept(events[span_at]))
        except TraceError:
            return None  # the event-by-event path reports it with the event's index in the file
        span = (start, start + dur)
    syncs = SyncColumns()
    if waits:
        plain = use_plain_python(len(waits))
        starts = micros_to_ns(b",".join(map(_TS, waits)), len(waits), signed=True, plain=plain)
        durs = micros_to_ns(b",".join(map(_DUR, waits)), len(waits), signed=False, plain=plain)
        if starts is None or durs is None:
            return None
        syncs = SyncColumns(list(map(_NAME, waits)), starts, durs)
    return Trace(path, columns, span, base_time_ns, syncs)


