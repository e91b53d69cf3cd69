"""Shapes that used to read as "no GPU work" are errors naming the file and, for an event, its index.

Each bad shape goes through ``read_trace`` (whichever reader takes it) and through the standard
library's reader directly, and both must give the same one-line error; one goes through the
``gpuutil analyze`` command as a whole process.
"""
from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_gpuutil import TraceError, read_trace
from pytest_gpuutil.traces.kineto_layout import read_kineto_layout
from pytest_gpuutil.traces.reader import trace_from_json_tolerant
from tests.helpers.reference import DATA


def kernel(**changes) -> dict:
    event = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10.5, "dur": 2.25,
             "args": {"device": 0, "stream": 7}}
    event.update(changes)
    return {k: v for k, v in event.items() if v is not DROP}


DROP = object()

BAD_SHAPES = [
    ("bare array of numbers", [1, 2, 3], "event 0 is a number (1), not an object"),
    ("traceEvents of numbers", {"traceEvents": [1, 2, 3]}, "event 0 is a number (1), not an object"),
    ("a number after a kernel", {"traceEvents": [kernel(), 2]}, "event 1 is a number (2), not an object"),
    ("a string event", {"traceEvents": [kernel(), "kernel"]}, 'event 1 is a string ("kernel"), not an object'),
    ("a null event", [kernel(), kernel(), None], "event 2 is null (null), not an object"),
    ("an array event", {"traceEvents": [[kernel()]]}, "event 0 is an array ([{"),
    ("traceEvents null", {"traceEvents": None}, "'traceEvents' is null, not a list of events"),
    ("traceEvents an object", {"traceEvents": {"0": kernel()}}, "'traceEvents' is an object, not a list of events"),
    ("traceEvents a string", {"traceEvents": "[]"}, "'traceEvents' is a string, not a list of events"),
    ("top level a string", "trace", "JSON top level is a str, not a trace object"),
    ("top level a number", 3, "JSON top level is a int, not a trace object"),
    ("top level null", None, "JSON top level is a NoneType, not a trace object"),
    ("cat null", {"traceEvents": [kernel(cat=None)]}, "event 0: 'cat' is not a string: null"),
    ("cat a list", {"traceEvents": [kernel(cat=["kernel"])]}, "event 0: 'cat' is not a string: [\"kernel\"]"),
    ("pid a list", {"traceEvents": [kernel(args=DROP, pid=[0])]},
     "event 0 (kernel 'k'): device (args.device, else pid) is an array ([0]), not a whole number or a string"),
    ("device a fraction", {"traceEvents": [kernel(args={"device": 0.5, "stream": 7})]},
     "event 0 (kernel 'k'): device (args.device, else pid) is a number (0.5), not a whole number or a string"),
    ("stream a boolean", {"traceEvents": [kernel(args={"device": 0, "stream": True})]},
     "event 0 (kernel 'k'): stream (args.stream, else tid) is a boolean (true), not a whole number or a string"),
    ("no device at all", {"traceEvents": [kernel(args=DROP, pid=DROP)]},
     "event 0 (kernel 'k'): device (args.device, else pid) is missing"),
    ("args a string", {"traceEvents": [kernel(args="device 0")]}, "event 0 (kernel 'k'): 'args' is a string, not an object"),
    ("name a number", {"traceEvents": [kernel(name=5)]}, "event 0 (kernel '5'): 'name' is not a string: 5"),
]


def write(tmp_path: Path, doc, name: str = "bad.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize("doc, problem", [b[1:] for b in BAD_SHAPES], ids=[b[0] for b in BAD_SHAPES])
def test_a_bad_shape_is_one_line_naming_the_file(tmp_path, doc, problem):
    path = write(tmp_path, doc)
    with pytest.raises(TraceError) as read:
        read_trace(path)
    assert str(read.value).startswith(f"{path}: ")
    assert problem in read.value.problem, read.value.problem
    assert "\n" not in str(read.value)
    with pytest.raises(TraceError) as tolerant:  # the standard library's reader says the same
        trace_from_json_tolerant(str(path), path.read_bytes())
    assert tolerant.value.problem == read.value.problem


def test_shapes_that_stay_valid(tmp_path):
    assert len(read_trace(write(tmp_path, [kernel()])).events) == 1  # the bare-array Chrome format
    assert len(read_trace(write(tmp_path, {"traceEvents": []})).events) == 0  # no events: no GPU work
    named = read_trace(write(tmp_path, {"traceEvents": [kernel(pid="GPU 0", tid="s", args=DROP)]}))
    assert [(e.device, e.stream) for e in named.events] == [("GPU 0", "s")]
    no_cat = {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "python"}}  # Kineto's metadata
    assert len(read_trace(write(tmp_path, {"traceEvents": [no_cat, kernel()]})).events) == 1
    # "ph" is not what GPU work is found by (every reader takes a GPU event by its "cat", ts and dur)
    assert len(read_trace(write(tmp_path, {"traceEvents": [kernel(ph=88), {"ph": [1]}]})).events) == 1


def real_trace_with(extra: bytes, at_end: bool) -> tuple[bytes, int]:
    """A real trace in Kineto's layout with ``extra`` as its first or last event, and that index."""
    data = gzip.decompress((DATA / "bmm_bf16.json.gz").read_bytes())
    count = len(json.loads(data)["traceEvents"])
    if at_end:
        end = data.rindex(b"]")
        return data[:end].rstrip() + b",\n  " + extra + b"\n  " + data[end:], count
    start = data.index(b"[", data.index(b'"traceEvents"')) + 1
    return data[:start] + b"\n  " + extra + b"," + data[start:], 0


@pytest.mark.parametrize("at_end", [False, True])
@pytest.mark.parametrize("extra, kind", [(b"1", "a number (1)"), (b'"x"', 'a string ("x")'), (b"[]", "an array ([])")])
def test_the_kineto_layout_reader_declines_a_non_object_event_and_the_error_names_it(tmp_path, extra, kind, at_end):
    data, index = real_trace_with(extra, at_end)
    assert read_kineto_layout(data) is None
    path = tmp_path / "t.json"
    path.write_bytes(data)
    with pytest.raises(TraceError, match="^" + re.escape(f"{path}: event {index} is {kind}, not an object") + "$"):
        read_trace(path)


def test_the_kineto_layout_reader_still_reads_the_unchanged_trace():
    data = gzip.decompress((DATA / "bmm_bf16.json.gz").read_bytes())
    assert read_kineto_layout(data) is not None


@pytest.mark.parametrize("text", [
    # a "traceEvents" key nested before the top-level one
    b'{"meta": {"traceEvents": [{"cat": "kernel"}]}, "traceEvents": []}',
    # an array-valued member after the events
    b'{"traceEvents": [], "other": [1]}',
    # an object-valued member after the events
    b'{"traceEvents": [], "other": {"a": 1}}',
    # a "cat" that is not a string
    b'{"traceEvents": [{"ph": "X", "cat": null, "name": "k"}]}',
])
def test_the_kineto_layout_reader_declines_what_it_cannot_place(text):
    assert read_kineto_layout(text) is None


def test_gpuutil_analyze_reports_a_bad_event_in_one_line_and_exits_2(tmp_path):
    bad = write(tmp_path, {"traceEvents": [kernel(), 7]})
    result = subprocess.run(
        [sys.executable, "-m", "pytest_gpuutil", "analyze", str(bad), str(DATA / "bmm_bf16.json.gz"), "--format", "csv"],
        capture_output=True, text=True,
    )
    assert result.returncode == 2
    assert result.stderr == f"error: {bad}: event 1 is a number (7), not an object\n"
    rows = result.stdout.splitlines()
    assert len(rows) == 2 and rows[1].startswith(str(DATA / "bmm_bf16.json.gz"))  # the good trace still reported
