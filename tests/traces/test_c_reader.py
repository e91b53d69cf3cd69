"""The C reader (``traces/_scan.c``) gives what the pure-Python readers give, or declines.

Every real trace (tests/data, the zoo, the 40k-kernel benchmark trace) is read both ways, and in
parts on several threads. Every shape the C reader declines, and a few hundred corruptions of a
real trace (cut short, a byte changed, a byte dropped), must give ``read_trace`` exactly what
``read_trace_python`` gives: the same events, span and base time, or the same one-line error.
Where the C reader accepts a corrupted document, the standard library must accept it as JSON too.
"""
from __future__ import annotations

import gzip
import json
import random
import re
import shutil
import sysconfig
from pathlib import Path
from typing import Any

import pytest

from pytest_gpuutil.traces.reader import (
    TraceError,
    c_reader_available,
    read_trace,
    read_trace_python,
)
from pytest_gpuutil.traces.model import HOST_SYNC_NAMES
from tests.helpers.reference import DATA

REAL_TRACES = (sorted(DATA.glob("*.json.gz")) + sorted((DATA / "zoo").glob("*.json.gz"))
               + sorted((DATA / "findings").glob("*.json.gz")))
BIG_TRACE = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "h200_40k_kernels.json.gz"


def _compiler_and_headers() -> bool:
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    return shutil.which(compiler) is not None and Path(sysconfig.get_paths()["include"], "Python.h").is_file()


def test_the_c_reader_is_built_where_a_compiler_is() -> None:
    if not _compiler_and_headers():
        pytest.skip("no C compiler or Python headers here: traces are read by the pure-Python readers")
    assert c_reader_available(), "the install built no C reader (pip's log says why): traces are read in Python"


needs_c = pytest.mark.skipif(not c_reader_available(), reason="the C reader is not built here")


def scan(data: bytes, *args: int) -> Any:
    from pytest_gpuutil.traces import _scan

    return _scan.scan(data, *args)


def outcome(read: Any, path: Path) -> tuple:
    """What a reader makes of ``path``: the trace's contents, or its error line."""
    try:
        trace = read(path)
    except TraceError as error:
        return ("error", str(error))
    # devices and streams as text: the readers keep ids as ints or text, and they are shown as text
    return ("trace", trace.events, trace.profiler_span, trace.base_time_ns, trace.syncs.rows())


PARTS = 10  # where the C reader's tuple says how many parts read the events


def without_parts(found: tuple) -> tuple:
    return found[:PARTS] + found[PARTS + 1:]


def write(tmp_path: Path, data: bytes, name: str = "t.json") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


@needs_c
@pytest.mark.parametrize("path", REAL_TRACES, ids=lambda p: p.name)
def test_real_traces_read_alike_and_are_never_declined(path: Path) -> None:
    found = scan(gzip.decompress(path.read_bytes()), 1)
    assert not isinstance(found, str), f"the C reader declined a real trace: {found}"
    assert outcome(read_trace, path) == outcome(read_trace_python, path)


@needs_c
@pytest.mark.parametrize("path", REAL_TRACES[::4], ids=lambda p: p.name)
def test_parts_on_several_threads_give_what_one_pass_gives(path: Path) -> None:
    data = gzip.decompress(path.read_bytes())
    whole = scan(data, 1)
    for threads in (2, 3, 8):
        parted = scan(data, threads, 1)  # parts of any size
        assert without_parts(parted) == without_parts(whole)
        assert parted[PARTS] > 1  # it did read in parts
    assert whole[PARTS] == 1


@needs_c
def test_the_40k_kernel_trace_reads_alike_in_parts() -> None:
    if not BIG_TRACE.exists():
        pytest.skip("benchmarks/data/h200_40k_kernels.json.gz is not in this checkout")
    data = gzip.decompress(BIG_TRACE.read_bytes())
    whole, parted = scan(data, 1), scan(data, 4)
    assert without_parts(parted) == without_parts(whole) and parted[PARTS] == 4 and len(whole[6]) == 40_100
    assert outcome(read_trace, BIG_TRACE) == outcome(read_trace_python, BIG_TRACE)


def kernel(**changes: Any) -> dict:
    event = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10.5, "dur": 2.25,
             "args": {"device": 0, "stream": 7}}
    event.update(changes)
    return {k: v for k, v in event.items() if v is not DROP}


DROP = object()
CPU_OP = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1.0, "dur": 1.0}


def wait(**changes: Any) -> dict:
    """A host wait as torch.profiler records it (a runtime call)."""
    event = {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "pid": 1, "tid": 1, "ts": 40.25,
             "dur": 12.5, "args": {"cbid": 131, "correlation": 7}}
    event.update(changes)
    return {k: v for k, v in event.items() if v is not DROP}


def doc(*events: Any, **top: Any) -> bytes:
    return json.dumps({"traceEvents": list(events), **top}, indent=1, ensure_ascii=False).encode()


#: (what, document, part of the C reader's reason)
DECLINED = [
    ("an escape in a name", doc(kernel(name='a"b')), "backslash"),
    ("a \\u escape", doc(kernel(name="\u00e9")).replace("\u00e9".encode(), b"\\u00e9"), "backslash"),
    ("a bare array", json.dumps([kernel()]).encode(), "top level is not an object"),
    ("no traceEvents", b'{"other": 1}', "no traceEvents"),
    ("an empty object", b"{}", "no traceEvents"),
    ("traceEvents null", b'{"traceEvents": null}', "not an array"),
    ("traceEvents twice", b'{"traceEvents": [], "traceEvents": []}', "repeated"),
    ("an event that is a number", doc(kernel(), 3), "not an object"),
    ("a repeated cat", b'{"traceEvents": [{"cat": "kernel", "cat": "cpu_op"}]}', "repeated"),
    ("a repeated args.stream", b'{"traceEvents": [{"args": {"stream": 1, "stream": 2}}]}', "repeated"),
    ("a cat that is a number", doc(CPU_OP, {"cat": 5}), "'cat' is not a string"),
    ("a kernel without ph", doc(kernel(ph=DROP)), "'ph'"),
    ("a kernel of phase B", doc(kernel(ph="B")), "'ph'"),
    ("a span of phase i", doc({"ph": "i", "cat": "Trace", "ts": 1.0}), "'ph'"),
    ("a name that is a number", doc(kernel(name=3)), "name is not a string"),
    ("a name that is null", doc(kernel(name=None)), "name is not a string"),
    ("ts with an exponent", doc(kernel(ts=1e22)), "times"),
    ("ts with four decimals", b'{"traceEvents": [{"ph": "X", "cat": "kernel", "ts": 1.2345, "dur": 1}]}', "times"),
    ("ts of 17 digits", b'{"traceEvents": [{"ph": "X", "cat": "kernel", "ts": 12345678901234567, "dur": 1}]}',
     "times"),
    ("ts beyond 2^62 ns", b'{"traceEvents": [{"ph": "X", "cat": "kernel", "ts": 4611686018427388, "dur": 1}]}',
     "times"),
    ("a negative dur", doc(kernel(dur=-1.5)), "times"),
    ("a missing ts", doc(kernel(ts=DROP)), "times"),
    ("a string ts", doc(kernel(ts="10.5")), "times"),
    ("a span with a bad dur", doc({"ph": "X", "cat": "Trace", "ts": 1.0, "dur": "x"}), "span"),
    ("args that is an array", doc(kernel(args=[1])), "args is not an object"),
    ("a device that is a float", doc(kernel(args={"device": 0.5, "stream": 7})), "device or stream"),
    ("a device that is true", doc(kernel(args={"device": True, "stream": 7})), "device or stream"),
    ("no device and no pid", doc(kernel(args={"stream": 7}, pid=DROP)), "device or stream"),
    ("a stream of 19 digits", doc(kernel(args={"device": 0, "stream": 10**18})), "device or stream"),
    ("nesting deeper than 1024", b'{"traceEvents": [{"cat": "cpu_op", "args": ' + b"[" * 1100 + b"]" * 1100 + b"}]}",
     "nesting"),
    ("cut short", doc(kernel(), CPU_OP)[:-9], "truncated"),
    ("a trailing comma", b'{"traceEvents": [{"cat": "cpu_op"},]}', "not valid JSON"),
    ("a trailing comma in args", b'{"traceEvents": [{"cat": "cpu_op", "args": {"a": 1,}}]}', "not valid JSON"),
    ("a tab inside a string", b'{"traceEvents": [{"cat": "cpu\top"}]}', "control character"),
    ("bytes that are not UTF-8", b'{"traceEvents": [{"cat": "cpu_op", "name": "\xff"}]}', "UTF-8"),
    ("an overlong UTF-8 slash", b'{"traceEvents": [{"cat": "cpu_op", "name": "\xc0\xaf"}]}', "UTF-8"),
    ("a UTF-8 surrogate", b'{"traceEvents": [{"cat": "cpu_op", "name": "\xed\xa0\x80"}]}', "UTF-8"),
    ("a leading zero", b'{"traceEvents": [{"cat": "cpu_op", "ts": 01}]}', "not valid JSON"),
    ("a bad literal", b'{"traceEvents": [{"cat": "cpu_op", "x": tru}]}', "not valid JSON"),
    ("a missing colon", b'{"traceEvents": [{"cat" "cpu_op"}]}', "not valid JSON"),
    ("text after the document", doc(kernel()) + b" x", "text after"),
    ("a second document", doc(kernel()) + doc(kernel()), "text after"),
    ("NaN", b'{"traceEvents": [{"cat": "cpu_op", "x": NaN}]}', "not valid JSON"),
    ("a host wait of phase B", doc(kernel(), wait(ph="B")), "'ph'"),
    ("a host wait without ph", doc(wait(ph=DROP)), "'ph'"),
    ("a host wait with four decimals", doc(wait(ts=1.2345)), "host wait times"),
    ("a host wait with a negative dur", doc(wait(dur=-2.0)), "host wait times"),
    ("a host wait without dur", doc(wait(cat="cuda_sync", name="Stream Sync", dur=DROP)), "host wait times"),
]


@needs_c
@pytest.mark.parametrize("what,data,reason", DECLINED, ids=[d[0] for d in DECLINED])
def test_declined_shapes_go_to_the_python_readers(tmp_path: Path, what: str, data: bytes, reason: str) -> None:
    found = scan(data)
    assert isinstance(found, str) and reason in found, (what, found)
    path = write(tmp_path, data)
    assert outcome(read_trace, path) == outcome(read_trace_python, path)


ACCEPTED = [
    ("kernels, a memcpy, a span, base time", doc(
        {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "tid": "PyTorch Profiler",
         "ts": 1.0, "dur": 100.0},
        kernel(), kernel(name="gemm", ts=20, dur=5, args={"device": 1, "stream": 9}),
        kernel(cat="gpu_memcpy", name="Memcpy HtoD", ts=-3.125, dur=0),
        {"ph": "X", "cat": "Trace", "ts": 500.0, "dur": "not read: only the first span counts"},
        baseTimeNanoseconds=1790857026000000000)),
    ("device and stream from pid and tid", doc(kernel(args=DROP, pid="GPU 0", tid="stream 7"))),
    ("args null, args.device null", doc(kernel(args=None), kernel(args={"device": None, "stream": 3}))),
    ("no name", doc(kernel(name=DROP))),
    ("a UTF-8 name", doc(kernel(name="Kern\u00e9l \u2211 \U0001F600"), CPU_OP)),
    ("members in another order, no spaces",
     b'{"x":[1,{"a":[]}],"traceEvents":[{"args":{"stream":2,"device":0},"dur":1,"ts":2.5,"name":"n",'
     b'"cat":"kernel","ph":"X"}],"baseTimeNanoseconds":1.5e3}'),
    ("a base time that is a string", doc(kernel(), baseTimeNanoseconds="12")),
    ("empty traceEvents", b'{"traceEvents": []}'),
    ("a cat nobody keeps, of any value", doc({"cat": "cpu_op", "ts": "odd", "args": [1, {"k": [True, None]}]})),
    ("host waits of each category", doc(
        kernel(), wait(), wait(cat="cuda_driver", name="cuCtxSynchronize", ts=-1.5, dur=0),
        wait(cat="cuda_sync", name="Context Sync", pid=0, tid=-1, args={"device": 0, "stream": -1}),
        wait(name="cudaMemcpy", args=DROP), wait(name="cudaDeviceSynchronize", args=None))),
    ("calls that are not host waits, of any shape", doc(
        wait(name="cudaMemcpyAsync"), wait(name="cudaStreamWaitEvent", ph="i", dur=DROP),
        wait(cat="cuda_sync", name="Stream Wait Event", ts="odd"), wait(name="cudaStreamSynchronizeX"),
        wait(name="cudaStream"), wait(name=7), wait(name=None), wait(name=DROP), wait(name="Event sync"),
        wait(cat="cpu_op", name="cudaStreamSynchronize", ph="B", dur=DROP), wait(cat="cuda_runtimes"))),
]


@needs_c
@pytest.mark.parametrize("what,data", ACCEPTED, ids=[a[0] for a in ACCEPTED])
def test_accepted_shapes_read_alike(tmp_path: Path, what: str, data: bytes) -> None:
    assert not isinstance(scan(data), str), what
    path = write(tmp_path, data)
    assert outcome(read_trace, path) == outcome(read_trace_python, path)


@needs_c
def test_a_part_start_inside_an_event_is_caught() -> None:
    """Lines that look like part starts (a "," then a "{" on the next line) inside events' args:
    the parts do not fit together, and the array is read again in one pass."""
    nested = {**CPU_OP, "args": {"list": [{"a": 1}, {"b": 2}, {"c": 3}]}}
    events = [nested, kernel(), nested, kernel(ts=30.5)] * 50
    text = json.dumps({"traceEvents": events}, indent=2).encode()
    assert len(re.findall(rb",\n *\{", text)) > len(events)  # more look-alikes than events
    whole = scan(text, 1)
    for threads in (2, 5, 8):
        assert without_parts(scan(text, threads, 1)) == without_parts(whole)
    unindented = re.sub(rb"\n +", b"\n", text)  # every look-alike at the events' indentation
    whole, parted = scan(unindented, 1), [scan(unindented, threads, 1) for threads in range(2, 9)]
    assert all(without_parts(p) == without_parts(whole) for p in parted) and 1 in [p[PARTS] for p in parted]  # caught, read again


CHANGED_BYTES = b'"{}[],:\\ \n\t0-.5eEaxnu\xff\xc3\x00'


@needs_c
def test_corrupted_real_traces_read_alike(tmp_path: Path) -> None:
    original = gzip.decompress((DATA / "two_streams_overlap.json.gz").read_bytes())
    rng = random.Random(20261123)
    cases: list[bytes] = []
    for _ in range(150):
        at = rng.randrange(len(original))
        cases.append(original[:at])  # cut short
        cases.append(original[:at] + bytes([rng.choice(CHANGED_BYTES)]) + original[at + 1:])  # one byte changed
        cases.append(original[:at] + original[at + 1:])  # one byte dropped
    accepted = 0
    for n, data in enumerate(cases):
        path = write(tmp_path, data, f"case{n}.json")
        assert outcome(read_trace, path) == outcome(read_trace_python, path), f"case {n}"
        if not isinstance(scan(data), str):
            accepted += 1
            json.loads(data)  # what the C reader took is JSON
            for threads in (2, 4):
                assert without_parts(scan(data, threads, 1)) == without_parts(scan(data, 1)), f"case {n}"
    assert 0 < accepted < len(cases)  # some corruptions still parse (a changed digit), most do not


@needs_c
def test_the_c_reader_knows_the_host_waits_the_python_readers_know(tmp_path: Path) -> None:
    events = [wait(cat=cat, name=name, ts=float(n)) for n, name in enumerate(HOST_SYNC_NAMES)
              for cat in ("cuda_runtime", "cuda_driver", "cuda_sync")]
    data = doc(kernel(), *events)
    found = scan(data)
    assert set(found[PARTS + 2]) == set(HOST_SYNC_NAMES)  # its table is model.py's
    assert len(found[PARTS + 1]) == len(events)
    path = write(tmp_path, data)
    assert outcome(read_trace, path) == outcome(read_trace_python, path)
    assert read_trace(path).syncs.rows()[:2] == [("cudaDeviceSynchronize", 0, 12_500)] * 2


@needs_c
def test_host_waits_come_in_document_order_from_every_part() -> None:
    events = [e for n in range(300) for e in (kernel(ts=n * 10.0), wait(ts=n * 10.0 + 5, dur=1.0 + n))]
    data = doc(*events)
    whole = scan(data, 1)
    assert whole[PARTS + 3] == [n * 10_000 + 5_000 for n in range(300)]
    assert whole[PARTS + 4] == [1_000 + n * 1_000 for n in range(300)]
    for threads in (2, 3, 8):
        parted = scan(data, threads, 1)
        assert parted[PARTS] > 1 and without_parts(parted) == without_parts(whole)
