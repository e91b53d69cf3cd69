"""The Kineto-layout fast path: taken on real traces, declined on anything else, never different."""
from __future__ import annotations

import gzip
import json
import mmap
import re

import pytest

from pytest_gpuutil import TraceError, read_trace
from pytest_gpuutil.kineto_layout import read_kineto_layout
from pytest_gpuutil.trace_model import Trace
from pytest_gpuutil.trace_reader import MAP_FILES_FROM_BYTES, _read_bytes, trace_from_json

from .reference import DATA

REAL_TRACES = sorted(p.name for p in DATA.glob("*.json.gz"))
KERNEL_LINE = re.compile(rb'"cat": "kernel", "name": "[^"]*", "pid": [^,]*, "tid": [^,]*,\n    "ts": ([0-9.]+), "dur": ([0-9.]+)')


def raw_text(name: str) -> bytes:
    return gzip.decompress((DATA / name).read_bytes())


def general(data: bytes):
    return trace_from_json("t.json", data)


def fast(data: bytes):
    """The fast path's result as a Trace, or None when it declines."""
    kineto = read_kineto_layout(data)
    if kineto is None:
        return None
    return Trace("t.json", kineto.columns, kineto.profiler_span)


def same(a, b) -> bool:
    return a.events == b.events and a.profiler_span == b.profiler_span


def test_every_real_trace_is_in_the_fast_layout():
    assert len(REAL_TRACES) == 16


@pytest.mark.parametrize("name", REAL_TRACES)
def test_real_traces_take_the_fast_path_and_match_the_general_reader(name):
    data = raw_text(name)
    quick, slow = fast(data), general(data)
    assert quick is not None, f"{name} should be read by the fast path"
    assert same(quick, slow)
    assert len(quick.events) == len(slow.events)
    assert all(type(e.start_ns) is int and type(e.dur_ns) is int for e in quick.events)


def first_kernel(data: bytes) -> tuple[int, int]:
    """Start and end of the first kernel event's text (from ``{`` to its closing ``}``)."""
    at = data.index(b'"cat": "kernel"')
    start = data.rindex(b"{", 0, at)
    end = data.index(b"\n  }", at) + 4
    return start, end


def replace_first_kernel(data: bytes, new_event: dict) -> bytes:
    start, end = first_kernel(data)
    return data[:start] + json.dumps(new_event).encode() + data[end:]


def first_kernel_event(data: bytes) -> dict:
    start, end = first_kernel(data)
    return json.loads(data[start:end])


def variants(data: bytes) -> dict[str, bytes]:
    """The same trace written in ways the fast path must decline (so the general reader decides)."""
    kernel = first_kernel_event(data)
    start, end = first_kernel(data)
    reordered = dict(kernel, args={"stream": kernel["args"]["stream"], "device": kernel["args"]["device"]})
    p2p = dict(kernel, args={"fromDevice": 0, "inDevice": 0, "toDevice": 1, "stream": 7})
    unsorted_keys = {k: kernel[k] for k in sorted(kernel)}
    return {
        "compact JSON": json.dumps(json.loads(data), separators=(",", ":")).encode(),
        "indented JSON": json.dumps(json.loads(data), indent=1).encode(),
        "args with stream before device": replace_first_kernel(data, reordered),
        "peer-to-peer args without device": replace_first_kernel(data, p2p),
        "keys in another order": replace_first_kernel(data, unsorted_keys),
        "escaped cat key": data[:start] + data[start:end].replace(b'"cat": "kernel"', b'"c\\u0061t": "kernel"') + data[end:],
        "escaped quote in a name": data[:start] + data[start:end].replace(b'"name": "', b'"name": "q\\"', 1) + data[end:],
        "two-decimal ts": KERNEL_LINE.sub(lambda m: m.group(0).replace(m.group(1), m.group(1)[:-1]), data, count=1),
        "16-digit ts": KERNEL_LINE.sub(lambda m: m.group(0).replace(m.group(1), b"1234567890123456.789"), data, count=1),
        "extra kernel in compact form": data.replace(
            b'"traceEvents": [', b'"traceEvents": [{"ph":"X","cat":"kernel","name":"extra","pid":0,"tid":7,'
            b'"ts":1.5,"dur":2.5,"args":{"device":0,"stream":7}},', 1),
        "profiler span in another order": data.replace(
            b'"ph": "X", "cat": "Trace", "ts": ', b'"ph": "X", "cat": "Trace", "x": 1, "ts": ', 1),
    }


@pytest.mark.parametrize("name", ["two_streams_overlap.json.gz", "nccl_allreduce_rank0.json.gz", "conv3d_fp32_fwd_bwd.json.gz"])
def test_variants_are_declined_and_read_exactly_by_the_general_reader(tmp_path, name):
    original = read_trace(DATA / name)
    for label, data in variants(raw_text(name)).items():
        assert data != raw_text(name), label
        assert read_kineto_layout(data) is None, f"fast path took the {label!r} variant"
        path = tmp_path / "variant.json"
        path.write_bytes(data)
        result = read_trace(path)
        assert same(result, general(data)), label
        if label in ("compact JSON", "indented JSON", "args with stream before device", "keys in another order",
                     "escaped cat key", "profiler span in another order"):
            assert same(result, original), label  # same content, other spelling


def test_declined_variants_keep_what_changed():
    data = raw_text("two_streams_overlap.json.gz")
    kernel = first_kernel_event(data)
    by_label = variants(data)
    names = {e.name for e in read_trace_bytes(by_label["escaped quote in a name"]).events}
    assert 'q"' + kernel["name"] in names
    extra = [e for e in read_trace_bytes(by_label["extra kernel in compact form"]).events if e.name == "extra"]
    assert [(e.start_ns, e.dur_ns) for e in extra] == [(1500, 2500)]
    p2p = read_trace_bytes(by_label["peer-to-peer args without device"])
    assert len(p2p.events) == len(read_trace(DATA / "two_streams_overlap.json.gz").events)
    starts = {e.start_ns for e in read_trace_bytes(by_label["16-digit ts"]).events}
    assert 1234567890123456789 in starts


def read_trace_bytes(data: bytes):
    return general(data)


def test_a_truncated_trace_is_an_error_not_a_smaller_number(tmp_path):
    data = raw_text("two_streams_overlap.json.gz")
    cut = data[: len(data) * 2 // 3]
    assert read_kineto_layout(cut) is None
    path = tmp_path / "cut.json"
    path.write_bytes(cut)
    with pytest.raises(TraceError, match="not valid JSON"):
        read_trace(path)


def test_a_name_that_is_not_utf8_is_declined(tmp_path):
    data = raw_text("bmm_bf16.json.gz").replace(b'"name": "nvjet', b'"name": "\xff\xfenvjet', 1)
    assert read_kineto_layout(data) is None
    path = tmp_path / "latin.json"
    path.write_bytes(data)
    with pytest.raises(TraceError, match="UTF-8"):
        read_trace(path)


def test_no_gpu_work_and_no_span():
    kineto = read_kineto_layout(b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1.000, "dur": 2.000}]}')
    assert kineto is not None
    assert len(kineto.columns) == 0 and kineto.profiler_span is None


def test_a_document_without_trace_events_is_left_to_the_general_reader():
    assert read_kineto_layout(b'{"schemaVersion": 1}') is None
    assert read_kineto_layout(b'{"traceEvents": {"a": 1}}') is None
    assert read_kineto_layout(b"[]") is None


MAPPED = pytest.mark.skipif(not hasattr(mmap, "MAP_POPULATE"), reason="big files are mapped only with MAP_POPULATE")
CPU_OP = '\n  {\n    "ph": "X", "cat": "cpu_op", "name": "aten::add_%s", "pid": 1, "tid": 1,\n    "ts": 5.000, "dur": 1.000\n  },'


def padded(data: bytes) -> bytes:
    """The trace with enough CPU events (in Kineto's layout) in front to be memory-mapped."""
    count = MAP_FILES_FROM_BYTES // 60
    head = "".join(CPU_OP % n for n in range(count)).encode()
    return data.replace(b'"traceEvents": [', b'"traceEvents": [' + head, 1)


@MAPPED
@pytest.mark.parametrize("layout", ["kineto", "compact"])
def test_big_plain_files_are_mapped_and_read_like_their_gzip(tmp_path, layout):
    data = padded(raw_text("two_streams_overlap.json.gz"))
    if layout == "compact":
        data = json.dumps(json.loads(data), separators=(",", ":")).encode()
    assert len(data) > MAP_FILES_FROM_BYTES
    assert (read_kineto_layout(data) is not None) == (layout == "kineto")
    plain, zipped = tmp_path / "big.json", tmp_path / "big.json.gz"
    plain.write_bytes(data)
    zipped.write_bytes(gzip.compress(data))
    assert isinstance(_read_bytes(str(plain)), mmap.mmap)
    assert same(read_trace(plain), read_trace(zipped))
    assert same(read_trace(plain), read_trace(DATA / "two_streams_overlap.json.gz"))
