"""The fast path for traces in the layout torch's profiler (Kineto) writes.

Kineto writes every GPU event the same way, with times in µs and exactly three decimals::

    {
      "ph": "X", "cat": "kernel", "name": "...", "pid": 0, "tid": 7,
      "ts": 4447590737267.362, "dur": 0.832,
      "args": {
        "External id": 30942,      "queued": 0, "device": 0, "context": 1,      "stream": 7, ...

so one regular-expression pass over the ``traceEvents`` text picks out the fields the analysis
uses, without building an object per event (a trace recorded with CPU activity has four
non-GPU events for each GPU one). It is used only when all of these hold, and otherwise
returns None so the general reader takes over (same numbers, slower):

- msgspec has checked the whole document is valid JSON (a truncated or corrupt file never
  gives a smaller number), and it has a ``traceEvents`` array;
- the document has no backslash at all, so no escaped quote or ``\\u`` escape can hide a
  ``"cat"`` key or change a name;
- every ``"cat"`` key whose value is a GPU-work category (or the profiler's ``"Trace"`` span),
  in any spacing, starts exactly Kineto's layout: name, pid, tid, ``ts``, ``dur``, and
  ``args.device`` / ``args.stream`` (device and stream come from args, as in the general reader);
- every ``ts`` and ``dur`` is written ``d.ddd`` (three decimals, at most 15 digits before the
  point, no negative ``dur``), and every device and stream is a plain number;
- every name is valid UTF-8.

Each distinct kernel (kind and name), device and stream is kept once, with a code per event
(:class:`CodedColumn`), which the analysis reads without hashing every row again.
"""
from __future__ import annotations

import re
from operator import itemgetter
from typing import Any, NamedTuple, Optional

import msgspec
import numpy as np

from .trace_model import CodedColumn, GpuColumns

_NAME_SEPARATOR = b'", "name": "'
_NAME_SEPARATOR_TEXT = _NAME_SEPARATOR.decode()
_TIMES_SEPARATOR = b', "dur": '
# Fields are captured loosely ([^,]*) and checked afterwards, in bulk: far cheaper than checking
# each number's digits inside the pattern. \s is JSON whitespace here (msgspec checked the JSON).
_GPU_EVENT = (  # groups: kind and name, times, place
    rb'((?:kernel|gpu_memcpy|gpu_memset)' + _NAME_SEPARATOR + rb'[^"]*)", "pid": [^,]*, "tid": [^,]*,\s*'
    rb'"ts": ([^,]*' + _TIMES_SEPARATOR + rb'[^,]*),\s*'
    rb'"args": \{\s*(?:"External id": [^,]*,\s*|)(?:"queued": [^,]*,\s*|)'
    rb'"device": ([^,]*, "context": [^,]*,\s*"stream": [^,\s}]*)'
)
_SPAN_EVENT = rb'Trace", "ts": ([^,]*' + _TIMES_SEPARATOR + rb'[^,]*),'
#: one row per "cat" key with a kept value, in any spacing: (kind and name, times, place, span
#: times), e.g. ``kernel", "name": "gemm``, ``12.345, "dur": 0.800`` and ``0, "context": 1, "stream": 7``;
#: an event not in Kineto's layout gives a row of empty fields
_KEPT_EVENT = re.compile(
    rb'"cat"\s*:\s*"(?=(?:kernel|gpu_memcpy|gpu_memset|Trace)")(?:' + _GPU_EVENT + rb"|" + _SPAN_EVENT + rb")?"
)
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
_PLACE = re.compile(rb'([0-9]+), "context": [0-9]+,\s*"stream": ([0-9]+)')


class _Document(msgspec.Struct):
    traceEvents: msgspec.Raw = msgspec.Raw()
    baseTimeNanoseconds: Any = None


_DOCUMENT = msgspec.json.Decoder(_Document)


class KinetoEvents(NamedTuple):
    """What the fast path read: the GPU events, the profiler span, raw ``baseTimeNanoseconds``."""

    columns: GpuColumns
    profiler_span: Optional[tuple[int, int]]
    base_time: Any


def read_kineto_layout(data: Any) -> Optional[KinetoEvents]:
    """The events in ``data`` (bytes or a buffer), or None when any guard above fails."""
    try:
        document = _DOCUMENT.decode(data)  # skips what it does not keep, but checks all of it
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    events = memoryview(document.traceEvents)
    if not events or events[:1] != b"[" or data.find(b"\\") != -1:
        return None
    rows = _KEPT_EVENT.findall(events)
    kinds_names, times, places, span_times = (list(map(itemgetter(i), rows)) for i in range(4))
    gpu_rows, span_rows = len(rows) - times.count(b""), len(rows) - span_times.count(b"")
    if gpu_rows + span_rows != len(rows):  # an event not in Kineto's layout
        return None
    span = None
    if span_rows:
        first_span = _micros_to_ns([next(filter(None, span_times))])
        if first_span is None:
            return None
        span = (int(first_span[0]), int(first_span[0] + first_span[1]))
        at_spans = _positions(times, b"")
        for column in (kinds_names, times, places):
            for at in reversed(at_spans):
                del column[at]
    keys = _coded(kinds_names)  # each distinct kind and name once
    try:
        kinds_and_names = [raw.decode().split(_NAME_SEPARATOR_TEXT, 1) for raw in keys.values]
    except UnicodeDecodeError:
        return None
    ns = _micros_to_ns(times)
    if ns is None:
        return None
    places = _coded(places)
    matches = [_PLACE.fullmatch(place) for place in places.values]
    if None in matches:  # a device or stream that is not a plain number
        return None
    ids = [tuple(map(int, match.groups())) for match in matches]
    columns = GpuColumns(
        CodedColumn(keys.codes, [name for _, name in kinds_and_names]),
        CodedColumn(keys.codes, [kind for kind, _ in kinds_and_names]),
        CodedColumn(places.codes, [device for device, _ in ids]),
        CodedColumn(places.codes, [stream for _, stream in ids]),
        ns[0::2],
        ns[1::2],
    )
    return KinetoEvents(columns, span, document.baseTimeNanoseconds)


def _coded(rows: list[bytes]) -> CodedColumn:
    """``rows`` as codes into their distinct values, in first-seen order."""
    values = tuple(dict.fromkeys(rows))
    code_of = {value: code for code, value in enumerate(values)}
    return CodedColumn(list(map(code_of.__getitem__, rows)), values)


def _positions(values: list, wanted: Any) -> list[int]:
    """Indices of ``wanted`` in ``values`` (found in C; there are only a few)."""
    found, at = [], -1
    for _ in range(values.count(wanted)):
        at = values.index(wanted, at + 1)
        found.append(at)
    return found


def _micros_to_ns(times: list[bytes]) -> Optional[np.ndarray]:
    """``[b'0.800, "dur": 12.345', ...]`` (µs) to ``[800, 12345, ...]`` ns, exactly; None unless
    every ``ts`` is ``-?d.ddd`` and every ``dur`` ``d.ddd``, with at most 15 digits before the point
    (so nanoseconds fit in int64)."""
    if not times:
        return np.zeros(0, dtype=np.int64)
    joined = b",".join(times)
    if b'"dur": -' in joined:
        return None  # a negative duration: the general reader reports it
    text = joined.replace(_TIMES_SEPARATOR, b",")
    count = 2 * len(times)
    shape = text.translate(_DIGITS_AS_ZERO) + b","
    if (
        shape.translate(None, b"0.-,")  # nothing but digits, points, minus signs and commas
        or shape.count(b",") != count
        or shape.count(b".") != count  # one point per number (a JSON number has at most one)
        or shape.count(b".000,") != count  # ... followed by exactly three digits
        or b"0000000000000000" in shape  # 16 digits before the point
    ):
        return None
    try:
        ns = np.fromstring(text.replace(b".", b""), dtype=np.int64, sep=",")
    except ValueError:  # cannot happen for text that passed the checks; never guess
        return None
    return ns if ns.size == count else None
