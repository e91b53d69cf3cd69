"""(CPU) A whole flush on the plugin's default path, for instruction counts: ``Measuring.flush``.

    python benchmarks/checks/flush_path_cost.py [--windows 100] [--flushes 1] [--package DIR]
        [--profile] [--no-children]

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
flushes. No torch is imported (a stand-in module: CUDA not up), so the runs stay short under
valgrind. ``--package DIR`` imports pytest_gpuutil from DIR (an older checkout) to compare.
"""
from __future__ import annotations

import argparse
import gc
import operator
import sys
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


def run(measuring: Any, nodeids: list[str], flushes: int, profile: Any = None, counted: bool = True,
        seconds: Optional[list[float]] = None) -> int:
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
        if counted:
            call(measuring.flush)  # operator.call: what callgrind's --toggle-collect counts (see the docstring)
        else:
            measuring.flush()
        if seconds is not None:
            seconds.append(clock() - began)
        if profile is not None:
            profile.disable()
        got = measuring.profiles
    return len(got)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=100)
    parser.add_argument("--flushes", type=int, default=1)
    parser.add_argument("--package", type=Path, help="import pytest_gpuutil from this folder")
    parser.add_argument("--profile", action="store_true", help="count the Python calls inside the flushes")
    parser.add_argument("--no-children", action="store_true", help="child processes off (--gpu-util-children=off)")
    parser.add_argument("--kernels", type=int, default=0,
                        help="that many tiny kernels a window (a launch-bound suite's flush: the cost a GPU record)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str((args.package or ROOT).resolve()))
    measuring, nodeids = build(args.windows, not args.no_children, args.kernels)
    run(measuring, nodeids, 1, counted=False)  # warm: imports, first uses, the classifier's cache
    profile = None
    if args.profile:
        import cProfile

        profile = cProfile.Profile()
    seconds: list[float] = []
    gc.disable()
    got = run(measuring, nodeids, args.flushes, profile, seconds=seconds)
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
