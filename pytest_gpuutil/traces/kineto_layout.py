"""The fast path for traces in the layout torch's profiler (Kineto) writes.

Kineto writes every GPU event the same way, with times in µs and exactly three decimals::

    {
      "ph": "X", "cat": "kernel", "name": "...", "pid": 0, "tid": 7,
      "ts": 4447590737267.362, "dur": 0.832,
      "args": {
        "External id": 30942,      "queued": 0, "device": 0, "context": 1,      "stream": 7, ...

(torch 2.13 writes the same members one per line, with ``dur`` followed by a comma on a line of
its own), so one regular-expression pass over the ``traceEvents`` text picks out the fields the
analysis uses, without building an object per event (a trace recorded with CPU activity has four
non-GPU events for each GPU one). It is used only when all of these hold, and otherwise
returns None so the general reader takes over (same numbers, slower):

- msgspec has checked the whole document is valid JSON (a truncated or corrupt file never
  gives a smaller number), and it has a ``traceEvents`` array whose every element is an object
  (the general reader reports any other element with its index);
- the document has no backslash at all, so no escaped quote or ``\\u`` escape can hide a
  ``"cat"`` key or change a name;
- the array's text is found without parsing: its key is the first ``"traceEvents"`` in the
  text and sits in the top-level object, and only plain members (strings, numbers, literals)
  follow the array, as Kineto writes them (``traceName``);
- every ``"cat"`` key's value is a string, and every one that is a GPU-work category (or the
  profiler's ``"Trace"`` span), in any spacing, starts exactly Kineto's layout: name, pid, tid, ``ts``, ``dur``, and
  ``args.device`` / ``args.stream`` (device and stream come from args, as in the general reader);
- every ``ts`` and ``dur`` is written ``d.ddd`` (three decimals, at most 15 digits before the
  point, no negative ``dur``), and every device and stream is a plain number;
- every name is valid UTF-8;
- every event of a sync category (``cuda_runtime``, ``cuda_driver``, ``cuda_sync``) either starts
  Kineto's layout (``"name"`` right after ``"cat"``) with a name that is not a host wait (a launch:
  skipped at once), or is a host wait in Kineto's layout: name, pid, tid, ``ts``, ``dur``.

Each distinct kernel (kind and name), device and stream is kept once, with a code per event
(:class:`CodedColumn`), which the analysis reads without hashing every row again.
"""
from __future__ import annotations

import functools
import re
import sys
from operator import itemgetter
from typing import TYPE_CHECKING, Any, NamedTuple, Optional, Union

from pytest_gpuutil.traces.exact_times import micros_to_ns
from pytest_gpuutil.traces.model import HOST_SYNC_NAMES, CodedColumn, GpuColumns, SyncColumns, use_plain_python

if TYPE_CHECKING:
    import numpy as np

_LINE_BREAK = rb",\s*"  # between members torch writes on separate lines
#: every space there, never fewer: possessive ``\s*+`` from Python 3.11 on; before it, spaces that no space follows
_ALL_SPACES = rb"\s*+" if sys.version_info >= (3, 11) else rb"\s*(?!\s)"


@functools.lru_cache(maxsize=None)  # compiled when first needed: each layout's pattern costs ~2 ms
def _kept_event_pattern(same_line: bytes) -> "re.Pattern[bytes]":
    """One row per ``"cat"`` key with a kept value, in any spacing: (kind and name, times, place,
    span times, wait name, wait times), e.g. ``kernel", "name": "gemm``, ``12.345, "dur": 0.800`` and
    ``0, "context": 1, "stream": 7``; an event not in the layout gives a row of empty fields. An
    event of a sync category whose name, in the layout, is not a host wait gives no row at all.

    ``same_line`` separates the members torch 2.11 writes on one line (``, ``); torch 2.13 writes
    every member on its own line. Fields are captured loosely and checked afterwards, in bulk:
    far cheaper than checking each number's digits inside the pattern.
    """
    brk = _LINE_BREAK
    times = rb'"ts": ([^,\s]*' + same_line + rb'"dur": [^,\s]*)\s*' + brk  # group: ts and dur
    gpu_event = (  # groups: kind and name, times, place
        rb'((?:kernel|gpu_memcpy|gpu_memset)"' + same_line + rb'"name": "[^"]*)"' + same_line
        + rb'"pid": [^,]*' + same_line + rb'"tid": [^,]*' + brk + times
        + rb'"args": \{\s*(?:"External id": [^,]*' + brk + rb'|)(?:"queued": [^,]*' + brk + rb'|)'
        + rb'"device": ([^,]*' + same_line + rb'"context": [^,]*' + brk + rb'"stream": [^,\s}]*)'
    )
    span_event = (  # group: times
        rb'Trace"' + brk + rb'(?:"name": "[^"]*"' + brk + rb'"pid": [^,]*' + brk + rb'"tid": [^,]*' + brk + rb'|)'
        + times
    )
    waits = rb"|".join(re.escape(name.encode()) for name in HOST_SYNC_NAMES)
    sync_event = (  # groups: name, times
        rb'cuda_(?:runtime|driver|sync)"' + same_line + rb'"name": "(' + waits + rb')"' + same_line
        + rb'"pid": [^,]*' + same_line + rb'"tid": [^,]*' + brk + times
    )
    # a sync category is looked at unless the layout's name follows and is not a host wait
    not_a_wait = same_line + rb'"name": "(?!(?:' + waits + rb')")'
    return re.compile(  # a "cat" that is not a string gives an empty row too: the general reader reports it
        rb'"cat"' + _ALL_SPACES + rb':' + _ALL_SPACES + rb'(?:"(?=(?:kernel|gpu_memcpy|gpu_memset|Trace)"|cuda_(?:runtime|driver|sync)"(?!'
        + not_a_wait + rb'))(?:' + gpu_event + rb"|" + span_event + rb"|" + sync_event
        + rb')?|(?!"))'  # all the spaces, never fewer: no second try at each of the many other "cat" keys
    )


#: torch 2.11 writes an event's members on a few lines (a tighter pattern runs faster); 2.13, one per line
_ONE_LINE, _LINE_PER_MEMBER = b", ", _LINE_BREAK
_ONE_LINE_MARK = b'"ph": "X", "cat": "'
_KIND_AND_NAME = re.compile(rb'(kernel|gpu_memcpy|gpu_memset)",\s*"name": "(.*)', re.DOTALL)
_PLACE = re.compile(rb'([0-9]+),\s*"context": [0-9]+,\s*"stream": ([0-9]+)')
_WHITESPACE = b" \t\r\n"


@functools.lru_cache(maxsize=None)  # built when first needed: a small trace never imports msgspec
def _document_decoder() -> tuple[Any, tuple[type[Exception], ...]]:
    """msgspec's decoder of a trace document that checks every event is an object, and its errors."""
    import msgspec

    any_object = msgspec.defstruct("_Object", [], gc=False)  # members skipped: it checks each event is an object
    document = msgspec.defstruct(
        "_Document", [("traceEvents", Union[list[any_object], None], None), ("baseTimeNanoseconds", Any, None)]
    )
    return msgspec.json.Decoder(document), (msgspec.DecodeError, msgspec.ValidationError, RecursionError)


_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_STRING = re.compile(rb'"[^"]*"')  # a whole string: the document has no backslash
#: from the array's closing bracket to the end: plain members, then the top-level object's end
_PLAIN_MEMBERS_TO_END = re.compile(
    rb'\]\s*(?:,\s*"[^"]*"\s*:\s*(?:"[^"]*"|[-+.0-9eE]+|true|false|null)\s*)*\}\s*'
)
_TAIL_BYTES = 1 << 16


class KinetoEvents(NamedTuple):
    """What the fast path read: the GPU events, the profiler span, raw ``baseTimeNanoseconds``, the host's waits."""

    columns: GpuColumns
    profiler_span: Optional[tuple[int, int]]
    base_time: Any
    syncs: SyncColumns = SyncColumns()


def read_kineto_layout(data: Any) -> Optional[KinetoEvents]:
    """The events in ``data`` (bytes or a buffer), or None when any guard above fails."""
    decoder, errors = _document_decoder()
    try:
        document = decoder.decode(data)  # skips what it does not keep, but checks all of it
    except errors:
        return None
    if document.traceEvents is None or data.find(b"\\") != -1:
        return None
    base_time = document.baseTimeNanoseconds
    del document  # one small object per event, checked: not kept while the events are read
    events = _events_text(data)
    if events is None:
        return None
    one_line = data.find(_ONE_LINE_MARK, 0, 1 << 22) != -1  # a guess: the other layout just declines
    rows = _kept_event_pattern(_ONE_LINE if one_line else _LINE_PER_MEMBER).findall(events)
    kinds_names, times, places, span_times, wait_names, wait_times = (list(map(itemgetter(i), rows)) for i in range(6))
    gpu_rows, span_rows = len(rows) - times.count(b""), len(rows) - span_times.count(b"")
    wait_rows = len(rows) - wait_times.count(b"")
    if gpu_rows + span_rows + wait_rows != len(rows):  # an event not in Kineto's layout
        return None
    syncs = SyncColumns()
    if wait_rows:
        at_waits = [i for i, t in enumerate(wait_times) if t]
        wait_ns = _micros_to_ns([wait_times[i] for i in at_waits], plain=use_plain_python(len(at_waits)))
        if wait_ns is None:
            return None
        coded = _coded([wait_names[i] for i in at_waits])
        syncs = SyncColumns(CodedColumn(coded.codes, [name.decode() for name in coded.values]), wait_ns[0::2], wait_ns[1::2])
        at_gpu = [i for i, t in enumerate(wait_times) if not t]
        kinds_names, times, places, span_times = ([column[i] for i in at_gpu] for column in (kinds_names, times, places, span_times))
    span = None
    if span_rows:
        first_span = _micros_to_ns([next(filter(None, span_times))], plain=True)
        if first_span is None:
            return None
        span = (int(first_span[0]), int(first_span[0] + first_span[1]))
        at_spans = _positions(times, b"")
        for column in (kinds_names, times, places):
            for at in reversed(at_spans):
                del column[at]
    keys = _coded(kinds_names)  # each distinct kind and name once
    split_keys = [_KIND_AND_NAME.fullmatch(key) for key in keys.values]
    if None in split_keys:
        return None
    try:
        kinds_and_names = [(kind.decode(), name.decode()) for kind, name in map(re.Match.groups, split_keys)]
    except UnicodeDecodeError:
        return None
    ns = _micros_to_ns(times, plain=use_plain_python(len(times)))
    if ns is None:
        return None
    places = _coded(places)
    matches = [_PLACE.fullmatch(place) for place in places.values]
    if None in matches:  # a device or stream that is not a plain number
        return None
    ids = [tuple(map(int, match.groups())) for match in matches]
    columns = GpuColumns.coded(
        keys.codes, [name for _, name in kinds_and_names], [kind for kind, _ in kinds_and_names],
        places.codes, [device for device, _ in ids], [stream for _, stream in ids], ns[0::2], ns[1::2],
    )
    return KinetoEvents(columns, span, base_time, syncs)


def _events_text(data: Any) -> Optional[memoryview]:
    """The text of the top-level ``traceEvents`` array, found without parsing; None when unsure.

    Only for a valid JSON document without backslashes, where every string is ``"[^"]*"``.
    """
    key = _EVENTS_KEY.search(data)
    if key is None:
        return None
    prefix = _STRING.sub(b"", data[: key.start()])  # strings removed: only structure is left
    if prefix.count(b"{") - prefix.count(b"}") != 1 or prefix.count(b"[") != prefix.count(b"]"):
        return None  # the first "traceEvents" key is not a member of the top-level object
    end = data.rfind(b"]", max(key.end(), len(data) - _TAIL_BYTES))
    if end == -1 or not _PLAIN_MEMBERS_TO_END.fullmatch(data, end):
        return None
    before = bytes(data[max(key.end() - 1, end - 256) : end]).rstrip()
    if before[-1:] not in (b"}", b"["):
        return None  # the last bracket closes something else than an array of objects
    return memoryview(data)[key.end() - 1 : end + 1]


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


def _micros_to_ns(times: list[bytes], plain: bool = False) -> Optional[Union["np.ndarray", list[int]]]:
    """``[b'12.345, "dur": 0.800', ...]`` (µs) to ``[12345, 800, ...]`` ns, exactly; None unless
    every ``ts`` is written ``-d.ddd`` or ``d.ddd`` and every ``dur`` ``d.ddd`` (see
    :func:`micros_to_ns`)."""
    joined = b",".join(times).translate(None, _WHITESPACE)  # 12.345,"dur":0.800,...
    if b'"dur":-' in joined:
        return None  # a negative duration: the general reader reports it
    return micros_to_ns(joined.replace(b',"dur":', b","), 2 * len(times), signed=True, plain=plain)
