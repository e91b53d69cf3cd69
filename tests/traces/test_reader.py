"""Reading traces: formats, exact timestamps, and every kind of bad input."""
from __future__ import annotations

import gzip
import json

import pytest

from pytest_gpuutil import TraceError, read_trace
from tests.helpers.reference import DATA


def write(tmp_path, name, content, compress=False):
    path = tmp_path / name
    data = content.encode() if isinstance(content, str) else content
    path.write_bytes(gzip.compress(data) if compress else data)
    return path


def kernel(ts=10.5, dur=2.25, **extra):
    ev = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": ts, "dur": dur,
          "args": {"device": 0, "stream": 7}}
    ev.update(extra)
    return ev


def test_reads_gz_and_plain_json_alike(tmp_path):
    raw = gzip.decompress((DATA / "bmm_bf16.json.gz").read_bytes())
    plain = read_trace(write(tmp_path, "t.json", raw))
    zipped = read_trace(DATA / "bmm_bf16.json.gz")
    assert plain.events == zipped.events and plain.profiler_span == zipped.profiler_span


def test_keeps_only_gpu_work_and_finds_the_profiler_span():
    trace = read_trace(DATA / "user_annotations.json.gz")
    assert {e.kind for e in trace.events} == {"kernel", "gpu_memset"}
    assert trace.profiler_span is not None
    assert trace.base_time_ns == 1790857026000000000


def test_fractional_microseconds_are_exact(tmp_path):
    doc = {"traceEvents": [kernel(ts=4444766747350.889, dur=1.001), kernel(ts=0.0005, dur=1e-3)]}
    trace = read_trace(write(tmp_path, "t.json", json.dumps(doc)))
    assert trace.events[0].start_ns == 4444766747350889
    assert trace.events[0].dur_ns == 1001
    assert trace.events[1].start_ns == 0  # 0.5 ns rounds to even
    assert trace.events[1].dur_ns == 1


def test_string_and_negative_pids_unsorted_events_and_fallbacks(tmp_path):
    events = [
        {"ph": "X", "cat": "overhead", "name": "o", "pid": -1, "tid": 0, "ts": 1, "dur": 5},
        {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "tid": "PyTorch Profiler",
         "ts": 0, "dur": 100},
        kernel(ts=50, dur=5, args={}),  # device/stream fall back to pid/tid
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy", "pid": 1, "tid": 9, "ts": 20, "dur": 5},
        {"ph": "X", "cat": "gpu_user_annotation", "name": "ann", "pid": 0, "tid": 7, "ts": 0, "dur": 100},
        {"ph": "M", "name": "process_name", "pid": "Spans", "args": {"name": "Spans"}},
    ]
    trace = read_trace(write(tmp_path, "t.json", json.dumps({"traceEvents": events})))
    assert [(e.kind, e.device, e.stream) for e in trace.events] == [("kernel", "0", "7"), ("gpu_memcpy", "1", "9")]
    assert trace.profiler_span == (0, 100_000)


def test_bare_event_array_is_accepted(tmp_path):
    trace = read_trace(write(tmp_path, "t.json", json.dumps([kernel()])))
    assert len(trace.events) == 1


def test_odd_shapes_take_the_tolerant_path(tmp_path):
    # an event that is not an object is an error (tests/traces/test_malformed_events.py)
    doc = {"traceEvents": [{"ph": "X", "cat": "cpu_op", "args": 5}, kernel(ts=1, dur=2)]}
    trace = read_trace(write(tmp_path, "t.json", json.dumps(doc)))
    assert [(e.start_ns, e.dur_ns) for e in trace.events] == [(1000, 2000)]


BAD_INPUTS = [
    ("missing", None, "no such file"),
    ("empty.json", "", "empty file"),
    ("blank.json", "  \n", "empty file"),
    ("notjson.json", "this is not json", "not valid JSON"),
    ("truncated.json", '{"traceEvents": [{"ph": "X", "cat": "kernel", "ts": 1', "not valid JSON (truncated?)"),
    ("badgzip.json.gz", b"\x1f\x8b\x08\x00garbage", "not a valid gzip stream"),
    ("plain-named.json.gz", '{"traceEvents": []}', "not a valid gzip stream (no gzip header)"),
    ("noevents.json", '{"schemaVersion": 1}', "no 'traceEvents' list"),
    ("scalar.json", "42", "JSON top level is a int"),
    ("nots.json", json.dumps({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "dur": 1}]}), "event 0 (kernel 'k'): missing 'ts'"),
    ("nodur.json", json.dumps({"traceEvents": [{"ph": "X", "cat": "gpu_memcpy", "name": "m", "ts": 1}]}), "event 0 (gpu_memcpy 'm'): missing 'dur'"),
    ("negdur.json", json.dumps({"traceEvents": [kernel(dur=-3)]}), "negative dur -3 µs"),
    ("nandur.json", '{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": NaN}]}', "'dur' is not a finite number: nan"),
    ("strts.json", json.dumps({"traceEvents": [kernel(ts="soon")]}), '\'ts\' is not a number: "soon"'),
]


@pytest.mark.parametrize("name, content, message", BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_input_is_one_clear_line(tmp_path, name, content, message):
    path = tmp_path / name if content is None else write(tmp_path, name, content)
    with pytest.raises(TraceError) as info:
        read_trace(path)
    text = str(info.value)
    assert text.startswith(f"{path}: ")
    assert message in text
    assert "\n" not in text


def test_directory_is_rejected(tmp_path):
    with pytest.raises(TraceError, match="is a directory"):
        read_trace(tmp_path)


def test_a_bad_profiler_span_is_reported_with_its_index(tmp_path):
    events = [{"ph": "M", "name": "process_name"},
              {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "ts": 1.0}]
    path = write(tmp_path, "t.json", json.dumps({"traceEvents": events}))
    with pytest.raises(TraceError, match=r"event 1 \(Trace 'PyTorch Profiler \(0\)'\): missing 'dur'"):
        read_trace(path)
