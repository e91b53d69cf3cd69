"""(CPU) A whole flush on the plugin's default path, for instruction counts: ``Measuring.flush``; or its figures
alone, or CUPTI's drain before it.

    python benchmarks/parts/flush_path_cost.py [--windows 100] [--flushes 1] [--package DIR]
        [--profile] [--no-children] [--kernels N] [--figures-only [--out FILE]]
        [--drain RECORDS [--drain-shape kernels|small]] [--due CALLS [--due-source cupti|method]]

Builds what the plugin builds on its default settings (findings on, child processes on, no
timelines, no trace files): a :class:`~pytest_gpuutil.measurement.Measurement` over an event
source whose clock runs through prepared windows and whose ``drain()`` gives CUPTI-shaped columns
(flush_cost.py's "small" shape: fill, mul and reduce kernels, a device-to-host copy and one stream
synchronize a window), and a :class:`~pytest_gpuutil.session.measuring.Measuring` over it. Then
``--flushes`` times: ``--windows`` windows opened and closed through ``begin_test``/``end_test``,
and one ``Measuring.flush`` (the same prepared columns each time), with the collector off.

For callgrind, each flush runs inside ``operator.call`` (a C function nothing else here calls), so
that callgrind counts the flushes alone::

    valgrind --tool=callgrind --callgrind-out-file=/dev/null --collect-atstart=no \
        --toggle-collect='_operator_call*' python ... --flushes 5

(its "Collected" over 5 is one flush); ``--windows 100`` and ``--windows 1000`` give the fixed part
and the part per window; ``--kernels N`` (N tiny kernels a window, flush_cost.py's launch-bound shape)
at two N gives the part per GPU record. Prints the flushes' wall time (µs a window: the minimum and the median);
``--profile`` prints cProfile's count of Python calls inside the
flushes. ``--gc``: Python's collector stays on (it is off otherwise), and each counted call is the flush
and then one allocation the collector counts, where a collection the flush left due runs. No torch is imported (a stand-in module: CUDA not up), so the runs stay short under
valgrind. ``--package DIR`` imports pytest_gpuutil from DIR (an older checkout) to compare.

``--figures-only``: ``window_columns.figures`` alone over the same columns, ``--flushes`` calls each inside
``operator.call`` (``--out FILE`` pickles every figure, to compare two checkouts' files byte for byte).

``--due CALLS``: ``Measurement.flush_due`` alone, asked CALLS times inside one ``operator.call`` with half of
``--windows`` closed and no bound reached (two CALLS: the difference is the instructions a teardown's
question); ``--due-source method`` for a source that answers only ``pending_bytes()`` (the tests'
synthetic GPU), ``cupti`` (the default) for one that keeps ``completed_bytes`` as CUPTI does.

``--drain RECORDS``: CuptiSource.drain on synthetic activity buffers, ``--flushes`` drains each inside
``operator.call`` (Collected over the drains and RECORDS: our cost a GPU record). The buffers are 8 MiB,
laid out as CUPTI 13.0 writes them (tests/capture/test_cupti_records.py's layouts: Kernel10 216 bytes,
Memcpy6 96, Memset4 88): ``--drain-shape kernels``, a launch loop (three kernel names, a thousand of
each in turn); ``small``, a small test's mix (fill, mul and reduce kernels, a device-to-host copy and a
memset, again and again). They are handed to a CuptiSource as CUPTI's completion callback hands them,
CUPTI's own flush stubbed: what is counted is ours (the walk, the fields, the clock, the codes, the
columns). The kernels' names are real C strings, read and kept as the source reads them.
"""
from __future__ import annotations

import argparse
import ctypes
import gc
import operator
import pickle
import struct
import sys
import threading
import time
import types
from pathlib import Path
from typing import Any, Optional

#: the flushes run inside this C function (Python 3.11+), so that callgrind can count them alone
call = getattr(operator, "call", lambda function: function())
HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
#: flush_cost.py (the prepared columns)
DIAGNOSTICS = ROOT / "benchmarks" / "diagnostics"
#: what --figures-only --out pickles, in this order
FIGURE_FIELDS = ("busy_us", "busy_pct", "mm_conv_pct", "kernel_count", "event_count", "devices", "category_rows",
                 "kernel_rows", "gap_rows", "kernel_totals")


class _Results:
    """What a test's fixtures give the measurement (only ``measurement`` is set by it)."""

    measurement: Any = None


class _PreparedSource:
    """An event source whose clock runs through the windows' edges again and again, and whose drain
    gives the same prepared columns each flush."""

    name = "prepared"

    def __init__(self, gpu: Any, syncs: Any, spans: list[tuple[int, int]]):
        self.gpu, self.syncs = gpu, syncs
        # begin: now(); end: now() before the closing synchronize (the host-sync rule's limit), now()
        self.times = [t for start, end in spans for t in (start, end - 500, end)]
        self.at = 0

    def start(self) -> None: ...
    def stop(self) -> None: ...
    def pending_bytes(self) -> int: return 0

    def now(self) -> int:
        at = self.at
        self.at = (at + 1) % len(self.times)
        return self.times[at]

    def drain(self) -> tuple[Any, int]:
        return self.gpu, 0

    def drain_syncs(self) -> Any:
        return self.syncs


def _stand_in_torch() -> Any:
    """Enough of torch for the continuous capture's set-up with CUDA not up."""
    cuda = types.SimpleNamespace(is_initialized=lambda: False, synchronize=lambda: None)
    autograd = types.SimpleNamespace(profiler=types.SimpleNamespace())
    return types.SimpleNamespace(cuda=cuda, autograd=autograd, _C=types.SimpleNamespace())


def build(windows: int, children: bool, kernels: int = 0) -> tuple[Any, list[str]]:
    """A Measuring on the default settings over a prepared source of ``windows`` windows, and the node ids
    (``kernels``: that many tiny kernels a window, a launch-bound test's, instead of the small test's events)."""
    sys.path.insert(0, str(DIAGNOSTICS))
    from flush_cost import SMALL, TINY, columns

    from pytest_gpuutil.analysis.classify import KernelClassifier
    from pytest_gpuutil.capture.flush_policy import FlushPolicy
    from pytest_gpuutil.measurement import Measurement
    from pytest_gpuutil.session.measuring import Measuring

    gpu, syncs, spans = (columns(windows, kernels, TINY, "cudaStreamSynchronize") if kernels
                         else columns(windows, 4, SMALL, "cudaStreamSynchronize"))
    measurement = Measurement(KernelClassifier(), keep_events=False, cpu_activity=False,
                              policy=FlushPolicy(tests=windows), findings=True, children=children)
    measurement.prepare(_stand_in_torch(), False, _PreparedSource(gpu, syncs, spans))
    measuring = Measuring(measurement, lambda tests: [], worker_id="", traces="none", output_dir=Path("."),
                          trace_errors=[])
    return measuring, [f"test_small.py::test_small[{i}]" for i in range(windows)]


def _flush_then_allocate(measuring: Any) -> None:
    """The flush, then one allocation the collector counts (a set: no free list), where a collection the
    flush left due runs (``--gc``)."""
    measuring.flush()
    set()


def run(measuring: Any, nodeids: list[str], flushes: int, profile: Any = None, counted: bool = True,
        seconds: Optional[list[float]] = None, collector: bool = False) -> int:
    """``flushes`` rounds of every window and a flush (``counted``: inside ``operator.call``; each
    flush's seconds appended to ``seconds``); the profiles the last flush gave."""
    results = _Results()
    got: dict[str, Any] = {}
    clock = time.perf_counter
    for _ in range(flushes):
        for nodeid in nodeids:
            measuring.begin_test(nodeid, results)
            measuring.end_test(nodeid, results)
        measuring.profiles.clear()
        if profile is not None:
            profile.enable()
        began = clock()
        if counted and collector:
            call(lambda: _flush_then_allocate(measuring))
        elif counted:
            call(measuring.flush)  # operator.call: what callgrind's --toggle-collect counts (see the docstring)
        else:
            measuring.flush()
        if seconds is not None:
            seconds.append(clock() - began)
        if profile is not None:
            profile.disable()
        got = measuring.profiles
    return len(got)


BUFFER_BYTES = 8 << 20
SIZES = {10: 216, 1: 96, 2: 88}
NAMES = [ctypes.create_string_buffer(name) for name in (b"vectorized_elementwise_kernel_fill", b"elementwise_mul",
                                                        b"reduce_kernel_sum")]


def drain_records(count: int, shape: str) -> list[bytes]:
    """``count`` records of the shape, 5 µs apart on CUPTI's (wall-clock ns) time line."""
    out, t = [], 1_700_000_000_000_000_000
    pattern = (10,) if shape == "kernels" else (10, 10, 10, 1, 2)
    for i in range(count):
        kind = pattern[i % len(pattern)]
        record = bytearray(SIZES[kind])
        if kind == 10:
            struct.pack_into("<I", record, 0, kind)
            struct.pack_into("<QQ", record, 16, t, t + 2_000)
            struct.pack_into("<III", record, 40, 0, 1, 7)
            struct.pack_into("<Q", record, 104, ctypes.addressof(NAMES[i % 3 if shape == "small" else (i // 1000) % 3]))
        elif kind == 1:
            struct.pack_into("<IBBBB", record, 0, kind, 2, 3, 1, 0)
            struct.pack_into("<QQQ", record, 8, 1 << 20, t, t + 3_000)
            struct.pack_into("<III", record, 32, 0, 1, 7)
        else:
            struct.pack_into("<II", record, 0, kind, 0)
            struct.pack_into("<QQQ", record, 8, 4096, t, t + 500)
            struct.pack_into("<III", record, 32, 0, 1, 7)
            struct.pack_into("<H", record, 50, 3)
        out.append(bytes(record))
        t += 5_000
    return out


def drain_buffers(count: int, shape: str) -> list[tuple[Any, int]]:
    """The records in 8 MiB numpy buffers, as CUPTI fills them: (buffer, valid bytes)."""
    import numpy as np

    filled, part, size = [], [], 0
    for record in drain_records(count, shape):
        if size + len(record) > BUFFER_BYTES:
            filled.append(b"".join(part))
            part, size = [], 0
        part.append(record)
        size += len(record)
    filled.append(b"".join(part))
    out = []
    for data in filled:
        buffer = np.zeros(BUFFER_BYTES, dtype=np.uint8)
        buffer[:len(data)] = np.frombuffer(data, dtype=np.uint8)
        out.append((buffer, len(data)))
    return out


class _StubLibrary:
    """CUPTI's flush and dropped-records calls, answering success (the buffers are already handed over)."""

    def cuptiActivityFlushAll(self, flag: int) -> int:
        return 0

    def cuptiActivityGetNumDroppedRecords(self, context: Any, stream: int, dropped: Any) -> int:
        return 0


def source_over(filled: list[tuple[Any, int]]) -> Any:
    """A started CuptiSource over the stub library (no libcupti here), its kinds' sizes known."""
    from pytest_gpuutil.capture.cupti import CuptiSource
    from pytest_gpuutil.traces.model import SyncColumns

    source = object.__new__(CuptiSource)
    state = {"_lib": _StubLibrary(), "_demangle": lambda name: name, "_callbacks": None, "_given": {}, "_spare": [],
             "_completed": [], "completed_bytes": 0, "_lock": threading.Lock(), "_parsed": [], "_sync_parsed": [],
             "_syncs_drained": SyncColumns(), "_names": {}, "_sizes": dict(SIZES), "_dropped": 0, "_active": True,
             "_tsc": None}
    source.__dict__.update(state)
    return source


def drain(source: Any, filled: list[tuple[Any, int]], counted: bool) -> int:
    source._completed = list(filled)  # what CUPTI's completion callback appends
    source.completed_bytes = sum(valid for _, valid in filled)
    columns, _ = call(source.drain) if counted else source.drain()
    source._spare.clear()
    return len(columns)


def figures_only(kernels: int, windows: int, calls: int, out: Optional[Path]) -> None:
    """``window_columns.figures`` alone over the columns of :func:`build`'s shape, ``calls`` times."""
    sys.path.insert(0, str(DIAGNOSTICS))
    import numpy as np

    from flush_cost import SMALL, TINY, columns
    from pytest_gpuutil.analysis.classify import KernelClassifier
    from pytest_gpuutil.analysis.intervals.window_columns import figures

    gpu, _, spans = (columns(windows, kernels, TINY, "cudaStreamSynchronize") if kernels
                     else columns(windows, 4, SMALL, "cudaStreamSynchronize"))
    starts = np.asarray([a for a, _ in spans], dtype=np.int64)
    ends = np.asarray([b for _, b in spans], dtype=np.int64)
    classifier = KernelClassifier()
    found = figures(gpu, starts, ends, classifier)  # warm: the classifier's cache, first uses
    for _ in range(calls):
        call(figures, gpu, starts, ends, classifier)
    if out is not None:
        out.write_bytes(pickle.dumps([getattr(found, name) for name in FIGURE_FIELDS]))
    print(f"figures() of {len(gpu)} events in {len(spans)} windows, {calls} calls")


def due_only(windows: int, calls: int, kept_bytes: bool) -> None:
    """``Measurement.flush_due`` asked ``calls`` times inside one ``operator.call`` with half of ``windows``
    closed and no bound reached (the policy's tests=``windows``): what each teardown asks. ``kept_bytes``:
    the source keeps its pending bytes as CUPTI does (``completed_bytes``), else answers ``pending_bytes()``."""
    measuring, nodeids = build(windows, True)
    results = _Results()
    for nodeid in nodeids[:windows // 2]:
        measuring.begin_test(nodeid, results)
        measuring.end_test(nodeid, results)
    measurement = measuring.measurement
    if kept_bytes:
        measurement.windows.source.completed_bytes = 0
    due = measurement.flush_due
    if due() is not None:
        raise SystemExit("a flush is due: no bound may be reached here")

    def ask() -> None:
        for _ in range(calls):
            due()

    call(ask)
    print(f"flush_due asked {calls} times, {windows // 2} windows waiting ({'completed_bytes' if kept_bytes else 'pending_bytes()'})")


def drain_only(records: int, shape: str, drains: int) -> None:
    """``drains`` drains of ``records`` synthetic records (see the module), each timed."""
    filled = drain_buffers(records, shape)
    source = source_over(filled)
    if drain(source, filled, counted=False) != records:  # warm: imports, the names read once
        raise SystemExit("the drain did not give every record")
    seconds = []
    for _ in range(drains):
        began = time.perf_counter()
        drain(source, filled, counted=True)
        seconds.append(time.perf_counter() - began)
    seconds.sort()
    print(f"CuptiSource.drain of {records} records ({shape}): {seconds[0] * 1e9 / records:.1f} ns a record "
          f"(minimum of {drains}; median {seconds[len(seconds) // 2] * 1e9 / records:.1f})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=100)
    parser.add_argument("--flushes", type=int, default=1)
    parser.add_argument("--package", type=Path, help="import pytest_gpuutil from this folder")
    parser.add_argument("--profile", action="store_true", help="count the Python calls inside the flushes")
    parser.add_argument("--no-children", action="store_true", help="child processes off (--gpu-util-children=off)")
    parser.add_argument("--gc", action="store_true",
                        help="Python's collector on (as in a session), an allocation after each flush counted with it")
    parser.add_argument("--kernels", type=int, default=0,
                        help="that many tiny kernels a window (a launch-bound suite's flush: the cost a GPU record)")
    parser.add_argument("--figures-only", action="store_true", help="window_columns.figures alone (see the module)")
    parser.add_argument("--out", type=Path, help="with --figures-only: pickle every figure into this file")
    parser.add_argument("--drain", type=int, default=0, metavar="RECORDS",
                        help="CuptiSource.drain of that many synthetic records instead (see the module)")
    parser.add_argument("--drain-shape", choices=("kernels", "small"), default="kernels")
    parser.add_argument("--due", type=int, default=0, metavar="CALLS",
                        help="Measurement.flush_due asked that many times instead (see due_only)")
    parser.add_argument("--due-source", choices=("cupti", "method"), default="cupti")
    args = parser.parse_args(argv)
    sys.path.insert(0, str((args.package or ROOT).resolve()))
    if args.due:
        due_only(args.windows, args.due, args.due_source == "cupti")
        return 0
    if args.drain:
        drain_only(args.drain, args.drain_shape, args.flushes)
        return 0
    if args.figures_only:
        figures_only(args.kernels, args.windows, args.flushes, args.out)
        return 0
    measuring, nodeids = build(args.windows, not args.no_children, args.kernels)
    run(measuring, nodeids, 1, counted=False)  # warm: imports, first uses, the classifier's cache
    profile = None
    if args.profile:
        import cProfile

        profile = cProfile.Profile()
    seconds: list[float] = []
    if not args.gc:
        gc.disable()
    got = run(measuring, nodeids, args.flushes, profile, seconds=seconds, collector=args.gc)
    gc.enable()
    measuring.measurement.close()
    if got != args.windows:
        raise SystemExit(f"the last flush gave {got} profiles, not {args.windows}")
    print(f"Measuring.flush of {args.windows} windows: {min(seconds) * 1e6 / args.windows:.2f} µs a window "
          f"(minimum of {args.flushes}; median {sorted(seconds)[len(seconds) // 2] * 1e6 / args.windows:.2f})")
    if profile is not None:
        import pstats

        stats = pstats.Stats(profile)
        calls = sum(entry[1] for entry in stats.stats.values())  # type: ignore[attr-defined]
        print(f"{calls} Python calls in {args.flushes} flushes of {args.windows} windows: "
              f"{calls / args.flushes:.0f} a flush, {calls / args.flushes / args.windows:.1f} a window")
    return 0


if __name__ == "__main__":
    sys.exit(main())
