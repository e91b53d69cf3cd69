"""The three readers (Kineto layout, msgspec, standard library) read every trace alike."""
from __future__ import annotations

import gzip
import json
import mmap
import re

import pytest

from pytest_gpuutil import TraceError, analyze, read_trace
from pytest_gpuutil.traces.kineto_layout import read_kineto_layout
from pytest_gpuutil.traces.model import CodedColumn, Trace
from pytest_gpuutil.traces.msgspec_reader import _DOCUMENT
from pytest_gpuutil.traces.reader import (
    MAP_FILES_FROM_BYTES,
    MAP_POPULATE,
    _read_bytes,
    trace_from_json,
    trace_from_json_tolerant,
)
from tests.helpers.reference import DATA

REAL_TRACES = sorted(p.name for p in DATA.glob("*.json.gz"))
KERNEL_TIMES = re.compile(rb'"cat": "kernel", "name": "[^"]*", "pid": [^,]*, "tid": [^,]*,\n    "ts": ([0-9.]+), "dur": ')


def raw_text(name: str) -> bytes:
    return gzip.decompress((DATA / name).read_bytes())


def same(a, b) -> bool:
    return (a.events == b.events and a.profiler_span == b.profiler_span and a.base_time_ns == b.base_time_ns
            and a.syncs.rows() == b.syncs.rows())


def kineto(data: bytes):
    """The Kineto-layout reader's result as a Trace, or None when it declines."""
    found = read_kineto_layout(data)
    return None if found is None else Trace("t", found.columns, found.profiler_span, found.base_time, found.syncs)


def test_all_sixteen_real_traces_are_checked():
    assert len(REAL_TRACES) == 16


@pytest.mark.parametrize("name", REAL_TRACES)
def test_real_traces_read_alike_by_all_readers(name):
    data = raw_text(name)
    _DOCUMENT.decode(data)  # the msgspec reader's single pass accepts every real trace
    fast = kineto(data)
    assert fast is not None, f"{name} should be read in Kineto's layout"
    general, tolerant = trace_from_json("t", data), trace_from_json_tolerant("t", data)
    assert same(fast, general) and same(general, tolerant)
    assert all(type(e.start_ns) is int and type(e.dur_ns) is int for e in fast.events + general.events)
    assert analyze(fast, top=0).to_dict() == analyze(general, top=0).to_dict()  # coded columns, plain lists


def test_coded_columns_behave_like_the_lists_they_stand_for():
    column = CodedColumn([1, 0, 1, 1], ("a", "b"))
    assert list(column) == ["b", "a", "b", "b"] and len(column) == 4
    assert column[0] == "b" and column[1:3] == ["a", "b"] and column == ["b", "a", "b", "b"]
    assert column != ["b", "a"] and "a" in column


def first_kernel(data: bytes) -> tuple[int, int]:
    """Start and end of the first kernel event's text (from ``{`` to its closing ``}``)."""
    at = data.index(b'"cat": "kernel"')
    return data.rindex(b"{", 0, at), data.index(b"\n  }", at) + 4


def with_first_kernel(data: bytes, event: dict) -> bytes:
    start, end = first_kernel(data)
    return data[:start] + json.dumps(event).encode() + data[end:]


def first_kernel_event(data: bytes) -> dict:
    start, end = first_kernel(data)
    return json.loads(data[start:end])


def with_first_wait(data: bytes, change) -> bytes:
    """``data`` with its first host wait (a cudaDeviceSynchronize) replaced by ``change(event)``."""
    at = data.index(b'"name": "cudaDeviceSynchronize"')
    start, end = data.rindex(b"{", 0, at), data.index(b"\n  }", at) + 4
    return data[:start] + json.dumps(change(json.loads(data[start:end]))).encode() + data[end:]


def variants(data: bytes) -> dict[str, bytes]:
    """The same trace written other ways, or with one event changed in a way that matters."""
    kernel = first_kernel_event(data)
    start, end = first_kernel(data)
    first = data[start:end]
    return {
        "compact JSON": json.dumps(json.loads(data), separators=(",", ":")).encode(),
        "indented JSON": json.dumps(json.loads(data), indent=1).encode(),
        "keys sorted": with_first_kernel(data, {k: kernel[k] for k in sorted(kernel)}),
        "escaped cat key": data[:start] + first.replace(b'"cat"', b'"c\\u0061t"') + data[end:],
        "escaped quote in a name": data[:start] + first.replace(b'"name": "', b'"name": "q\\"', 1) + data[end:],
        "peer-to-peer args without device": with_first_kernel(
            data, dict(kernel, args={"fromDevice": 0, "stream": kernel["args"]["stream"]})),
        "no args": with_first_kernel(data, {k: v for k, v in kernel.items() if k != "args"}),
        "two-decimal ts": KERNEL_TIMES.sub(lambda m: m.group(0).replace(m.group(1), m.group(1)[:-1]), data, count=1),
        "16-digit ts": KERNEL_TIMES.sub(lambda m: m.group(0).replace(m.group(1), b"1234567890123456.789"), data, count=1),
        "integer ts": KERNEL_TIMES.sub(lambda m: m.group(0).replace(m.group(1), b"123456"), data, count=1),
        "kernel without ph": with_first_kernel(data, {k: v for k, v in kernel.items() if k != "ph"}),
        "a wait's keys sorted": with_first_wait(data, lambda e: {k: e[k] for k in sorted(e)}),
        "a wait's dur with two decimals": with_first_wait(data, lambda e: dict(e, dur=round(e["dur"] + 0.01, 2))),
        "extra kernel first": data.replace(
            b'"traceEvents": [', b'"traceEvents": [{"ph":"X","cat":"kernel","name":"extra","pid":0,"tid":7,'
            b'"ts":1.5,"dur":2.5,"args":{"device":0,"stream":7}},', 1),
    }


#: variants whose events differ from the original's (the others only spell the same events differently;
#: Kineto's pid and tid are the device and stream, so dropping args changes nothing either)
CHANGED = {"escaped quote in a name", "two-decimal ts", "16-digit ts", "integer ts", "extra kernel first",
           "a wait's dur with two decimals"}


@pytest.mark.parametrize("name", ["two_streams_overlap.json.gz", "nccl_allreduce_rank0.json.gz", "conv3d_fp32_fwd_bwd.json.gz"])
def test_variants_read_alike_by_all_readers(tmp_path, name):
    original = read_trace(DATA / name)
    for label, data in variants(raw_text(name)).items():
        assert data != raw_text(name), label
        if label != "kernel without ph":  # the layout reader, like the tolerant one, does not need ph
            assert read_kineto_layout(data) is None, f"the Kineto-layout reader took the {label!r} variant"
        path = tmp_path / "variant.json"
        path.write_bytes(data)
        result = read_trace(path)
        assert same(result, trace_from_json(str(path), data)), label
        assert same(result, trace_from_json_tolerant(str(path), data)), label
        assert same(result, original) != (label in CHANGED), label


class _Number(str):
    """A JSON number kept as the text it was written as."""


def _value(value) -> str:
    if isinstance(value, _Number):
        return str(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)}: {_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(map(_value, value)) + "]"
    return json.dumps(value)


def _event_in_torch_2_13_layout(event: dict) -> str:
    """One member per line, ``dur`` then a lone comma, args packed as torch 2.13 writes them."""
    lines = [f'    {json.dumps(k)}: {_value(v)}' for k, v in event.items() if k != "args"]
    text = "  {\n" + ",\n".join(lines)
    if "args" in event:
        members = [f"{json.dumps(k)}: {_value(v)}" for k, v in event["args"].items()]
        packed = ",".join(members[:1] + [", ".join(members[1:])] if len(members) > 1 else members)
        packed = packed.replace(', "stream"', ',\n      "stream"')
        text += "\n    ,\n" + '    "args": {\n      ' + packed + "\n    }"
    return text + "\n  }"


def in_torch_2_13_layout(data: bytes) -> bytes:
    """The trace rewritten in the layout torch 2.13's profiler writes (members one per line)."""
    doc = json.loads(data, parse_float=_Number, parse_int=_Number)
    events = ",\n".join(_event_in_torch_2_13_layout(e) for e in doc["traceEvents"])
    rest = {k: v for k, v in doc.items() if k != "traceEvents"}
    return ("{\n" + "".join(f"  {json.dumps(k)}: {_value(v)},\n" for k, v in rest.items())
            + '  "traceEvents": [\n' + events + "\n  ]\n}").encode()


@pytest.mark.parametrize("name", REAL_TRACES)
def test_real_traces_in_torch_2_13s_layout_take_the_layout_reader(name):
    data = in_torch_2_13_layout(raw_text(name))
    assert b'    "dur": ' in data and b"\n    ,\n    \"args\"" in data
    fast = kineto(data)
    assert fast is not None, f"{name} in torch 2.13's layout should be read by the layout reader"
    assert same(fast, trace_from_json("t", data)) and same(fast, trace_from_json("t", raw_text(name)))


def test_what_the_variants_change_is_read_exactly():
    data = raw_text("two_streams_overlap.json.gz")
    kernel = first_kernel_event(data)
    by_label = {label: trace_from_json("t", text) for label, text in variants(data).items()}
    assert 'q"' + kernel["name"] in {e.name for e in by_label["escaped quote in a name"].events}
    assert [(e.start_ns, e.dur_ns) for e in by_label["extra kernel first"].events if e.name == "extra"] == [(1500, 2500)]
    assert 1234567890123456789 in {e.start_ns for e in by_label["16-digit ts"].events}
    assert 123456000 in {e.start_ns for e in by_label["integer ts"].events}
    no_args = {(e.name, e.device, e.stream) for e in by_label["no args"].events}
    assert (kernel["name"], str(kernel["pid"]), str(kernel["tid"])) in no_args


def test_times_beyond_int64_nanoseconds_are_one_clear_error(tmp_path):
    path = tmp_path / "far.json"
    data = raw_text("two_streams_overlap.json.gz")
    path.write_bytes(KERNEL_TIMES.sub(lambda m: m.group(0).replace(m.group(1), b"1234567890123456789.125"), data, count=1))
    with pytest.raises(TraceError, match=r"event \d+ \(kernel .*times beyond"):
        read_trace(path)


def test_a_truncated_trace_is_an_error_not_a_smaller_number(tmp_path):
    path = tmp_path / "cut.json"
    data = raw_text("two_streams_overlap.json.gz")
    path.write_bytes(data[: len(data) * 2 // 3])
    with pytest.raises(TraceError, match="not valid JSON"):
        read_trace(path)


def test_a_name_that_is_not_utf8_is_one_clear_error(tmp_path):
    path = tmp_path / "latin.json"
    path.write_bytes(raw_text("bmm_bf16.json.gz").replace(b'"name": "nvjet', b'"name": "\xff\xfenvjet', 1))
    with pytest.raises(TraceError, match="not UTF-8"):
        read_trace(path)


def test_gpu_work_that_is_not_a_complete_event_goes_to_the_tolerant_reader(tmp_path):
    path = tmp_path / "begin.json"
    path.write_text(json.dumps({"traceEvents": [
        {"ph": "B", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1.0},
    ]}))
    with pytest.raises(TraceError, match="missing 'dur'"):
        read_trace(path)


MAPPED = pytest.mark.skipif(not MAP_POPULATE, reason="big files are mapped only with MAP_POPULATE")
CPU_OP = '\n  {\n    "ph": "X", "cat": "cpu_op", "name": "aten::add_%s", "pid": 1, "tid": 1,\n    "ts": 5.000, "dur": 1.000\n  },'


def padded(data: bytes) -> bytes:
    """The trace with enough CPU events in front to be memory-mapped."""
    head = "".join(CPU_OP % n for n in range(MAP_FILES_FROM_BYTES // 60)).encode()
    return data.replace(b'"traceEvents": [', b'"traceEvents": [' + head, 1)


@pytest.mark.parametrize("times, expected", [
    ([b'12.345, "dur": 0.800', b'-0.500,\n    "dur": 1.000'], [12345, 800, -500, 1000]),
    ([b'123456789012345.678, "dur": 0.001'], [123456789012345678, 1]),
    ([b'1.5, "dur": 0.800'], None),  # one decimal
    ([b'1.2345, "dur": 0.800'], None),  # four
    ([b'12, "dur": 0.800'], None),  # none
    ([b'1.000e3, "dur": 0.800'], None),  # exponent
    ([b'12.345, "dur": -0.800'], None),  # negative duration: the general reader reports it
    ([b'"12.345", "dur": 0.800'], None),  # text
    ([b'true, "dur": 0.800'], None),
    ([b'1234567890123456.789, "dur": 0.800'], None),  # 16 digits: beyond int64 ns
    ([b'12.345, "dur": 0.800', b', "dur": 0.800'], None),  # one missing
])
def test_times_are_taken_only_in_kinetos_exact_form(times, expected):
    from pytest_gpuutil.traces.kineto_layout import _micros_to_ns

    ns = _micros_to_ns(times)
    assert (None if ns is None else ns.tolist()) == expected


def test_durations_may_not_be_negative_where_starts_may():
    from pytest_gpuutil.traces.exact_times import micros_to_ns

    assert micros_to_ns(b"-0.500,1.000", 2, signed=True).tolist() == [-500, 1000]
    assert micros_to_ns(b"-0.500,1.000", 2, signed=False) is None
    assert micros_to_ns(b"", 0, signed=False).tolist() == []


def test_no_gpu_work_and_no_span():
    found = read_kineto_layout(b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1.000, "dur": 2.000}]}')
    assert found is not None
    assert len(found.columns) == 0 and found.profiler_span is None


def test_a_document_without_trace_events_is_left_to_the_other_readers():
    assert read_kineto_layout(b'{"schemaVersion": 1}') is None
    assert read_kineto_layout(b'{"traceEvents": {"a": 1}}') is None
    assert read_kineto_layout(b"[]") is None


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


def test_a_trace_exported_by_the_installed_torch_reads_alike(tmp_path):
    """Whatever torch is installed (CPU here, CUDA on the GPU machine): its export reads alike."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    cuda = torch.cuda.is_available()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    x = torch.ones(256, 256, device="cuda" if cuda else "cpu")
    with profile(activities=activities) as prof:
        for _ in range(20):
            x = x @ x / 256
        if cuda:
            torch.cuda.synchronize()
    path = tmp_path / "exported.json"
    prof.export_chrome_trace(str(path))
    data = path.read_bytes()
    fast = kineto(data)
    general, tolerant = trace_from_json(str(path), data), trace_from_json_tolerant(str(path), data)
    assert same(general, tolerant)
    assert fast is not None, "the Kineto-layout reader should take this torch's own export"
    assert fast.events == general.events and fast.profiler_span == general.profiler_span
    if cuda:
        assert len(fast.events) >= 20 and {e.kind for e in fast.events} >= {"kernel"}


def test_host_waits_are_read_alike_by_all_readers():
    data = raw_text("duty_cycle_25.json.gz")
    traces = [kineto(data), trace_from_json("t", data), trace_from_json_tolerant("t", data)]
    rows = [t.syncs.rows() for t in traces]
    assert rows[0] == rows[1] == rows[2] and len(rows[0]) == 13
    assert {name for name, _, _ in rows[0]} == {"cudaDeviceSynchronize"}
    launches = data.count(b'"name": "cudaLaunchKernel"')
    assert launches == 10  # runtime calls that are not waits are left out


def test_a_wait_in_another_layout_is_left_to_the_general_reader():
    data = with_first_wait(raw_text("duty_cycle_25.json.gz"), lambda e: {k: e[k] for k in sorted(e)})
    assert read_kineto_layout(data) is None
    assert same(trace_from_json("t", data), trace_from_json("t", raw_text("duty_cycle_25.json.gz")))


FINDINGS_TRACES = sorted(p.name for p in (DATA / "findings").glob("*.json.gz"))


@pytest.mark.parametrize("name", FINDINGS_TRACES)
def test_traces_with_host_waits_read_alike_by_all_readers(name):
    data = gzip.decompress((DATA / "findings" / name).read_bytes())
    fast = kineto(data)
    assert fast is not None, f"{name} should be read in Kineto's layout"
    general, tolerant = trace_from_json("t", data), trace_from_json_tolerant("t", data)
    assert same(fast, general) and same(general, tolerant)
    assert len(fast.syncs) >= 2  # at least the recording's own two cudaDeviceSynchronize
    in_2_13 = in_torch_2_13_layout(data)
    assert same(kineto(in_2_13), general)
