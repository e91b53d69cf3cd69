"""(CPU) What a flush's analysis costs: attribution and findings over CUPTI-shaped columns.

    python benchmarks/diagnostics/flush_cost.py [--repeats 60] [--package DIR]

Builds the columns a CUPTI drain gives (names and kinds coded together, numpy ids and times) for
two shapes and times the two steps of a flush that turn them into per-test figures,
``window_split.attribute`` (each window's statistics) and ``window_split.findings_of``:

- ``small``: 100 windows of a small test (fill, mul and reduce kernels, a device-to-host copy, one
  stream synchronize), the shape of the 300-test overhead suite between two flushes;
- ``launch_bound``: 20 windows of 2,000 tiny kernels and a context synchronize each.

``--whole`` also times a whole ``ContinuousCapture.flush`` with findings (the windows opened and
closed through ``begin()``/``end()`` on a scripted clock, the source's ``drain()`` giving the
prepared columns and waits): the attribution, the findings' gates and looks, the first uses and
the per-window results together, in µs a window and µs an event.

Prints the minimum over ``--repeats`` runs in milliseconds (the development machine scatters; the
minimum is the run the machine disturbed least). ``--package DIR`` imports pytest_gpuutil from DIR
(an older checkout: ``git worktree add DIR COMMIT``) to compare, one process per package.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

SMALL = [("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>", "kernel"),
         ("void at::native::vectorized_elementwise_kernel<4, at::native::MulFunctor<float>>", "kernel"),
         ("void at::native::reduce_kernel<512, 1>", "kernel"),
         ("Memcpy DtoH (Device -> Pageable)", "gpu_memcpy")]
TINY = [("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>", "kernel")]


def columns(windows: int, per_window: int, pairs: list[tuple[str, str]], wait: str) -> tuple[Any, Any, list]:
    """CUPTI-shaped GpuColumns, the host's waits (one per window) and the windows' (start, end)."""
    import numpy as np

    from pytest_gpuutil.traces.model import CodedColumn, GpuColumns, SyncColumns

    starts, codes, spans, waits = [], [], [], []
    t = 1_000_000
    for _ in range(windows):
        begin = t
        for k in range(per_window):
            starts.append(t + 3_000)
            codes.append(k % len(pairs))
            t += 5_000
        waits.append(t - 3_000)
        spans.append((begin, t + 1_000))
        t += 1_500_000
    codes_array = np.asarray(codes, dtype=np.int64)
    n = len(starts)
    gpu = GpuColumns(names=CodedColumn(codes_array, [name for name, _ in pairs]),
                     kinds=CodedColumn(codes_array, [kind for _, kind in pairs]),
                     devices=np.zeros(n, dtype=np.int64), streams=np.full(n, 7, dtype=np.int64),
                     starts_ns=np.asarray(starts, dtype=np.int64), durs_ns=np.full(n, 1_500, dtype=np.int64))
    syncs = SyncColumns(CodedColumn(np.zeros(windows, dtype=np.int64), [wait]), np.asarray(waits, dtype=np.int64),
                        np.full(windows, 2_500, dtype=np.int64))
    return gpu, syncs, spans


def time_flush(shape: str, repeats: int) -> tuple[float, float]:
    """Minimum milliseconds of the attribution and of the findings over ``repeats`` runs."""
    from pytest_gpuutil.analysis.classify import KernelClassifier
    from pytest_gpuutil.capture.continuous import _Window
    from pytest_gpuutil.capture.window_split import attribute, findings_of

    gpu, syncs, spans = (columns(100, 4, SMALL, "Stream Sync") if shape == "small"
                         else columns(20, 2_000, TINY, "Context Sync"))
    classifier = KernelClassifier()
    best_attribute = best_findings = float("inf")
    for _ in range(repeats + 3):  # the first three warm up
        windows = [_Window(f"t{i}", start, 0.0, "", end_ns=end, sync_end_ns=end - 500)
                   for i, (start, end) in enumerate(spans)]
        began = time.perf_counter()
        stats, _ = attribute(gpu, windows, classifier, keep_events=False)
        between = time.perf_counter()
        findings_of(gpu, syncs, windows, stats, classifier, frozenset())
        ended = time.perf_counter()
        best_attribute, best_findings = min(best_attribute, between - began), min(best_findings, ended - between)
    return best_attribute * 1000, best_findings * 1000


class _PreparedSource:
    """An event source whose clock runs through the windows' (start, end) and whose drain gives prepared columns."""

    name = "prepared"

    def __init__(self, gpu: Any, syncs: Any, spans: list) -> None:
        self.gpu, self.syncs = gpu, syncs
        self.times = [t for span in spans for t in (span[0], span[1] - 500, span[1])]
        self.at = 0

    def start(self) -> None: ...
    def stop(self) -> None: ...
    def pending_bytes(self) -> int: return 0

    def now(self) -> int:
        self.at += 1
        return self.times[self.at - 1]

    def drain(self) -> tuple[Any, int]:
        return self.gpu, 0

    def drain_syncs(self) -> Any:
        return self.syncs


def time_whole_flush(shape: str, repeats: int) -> float:
    """Minimum milliseconds of a whole ContinuousCapture.flush (findings on) over ``repeats`` runs."""
    from pytest_gpuutil.analysis.classify import KernelClassifier
    from pytest_gpuutil.capture.continuous import ContinuousCapture

    gpu, syncs, spans = (columns(100, 4, SMALL, "Stream Sync") if shape == "small"
                         else columns(20, 2_000, TINY, "Context Sync"))
    classifier = KernelClassifier()
    best = float("inf")
    for _ in range(repeats + 3):
        source = _PreparedSource(gpu, syncs, spans)
        capture = ContinuousCapture(source, classifier, synchronize=lambda: None, findings=True)
        capture.ensure_started()
        for i in range(len(spans)):
            capture.begin(f"t{i}")
            capture.end()
        began = time.perf_counter()
        results = capture.flush()
        best = min(best, time.perf_counter() - began)
        assert len(results) == len(spans) and all(r.stats is not None for r in results), results[:1]
    return best * 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=60)
    parser.add_argument("--package", type=Path, help="import pytest_gpuutil from this folder")
    parser.add_argument("--whole", action="store_true", help="also time a whole ContinuousCapture.flush")
    args = parser.parse_args(argv)
    sys.path.insert(0, str((args.package or ROOT).resolve()))
    import pytest_gpuutil

    print(f"pytest_gpuutil from {Path(pytest_gpuutil.__file__).parent}; minima of {args.repeats} runs")
    for shape in ("small", "launch_bound"):
        attribute, findings = time_flush(shape, args.repeats)
        print(f"  {shape:13} attribution {attribute:7.2f} ms  findings {findings:6.2f} ms  total {attribute + findings:7.2f} ms")
        if args.whole:
            windows, events = (100, 400) if shape == "small" else (20, 40_000)
            whole = time_whole_flush(shape, args.repeats)
            print(f"  {shape:13} whole flush {whole:7.2f} ms  {whole * 1000 / windows:7.2f} µs a window  "
                  f"{whole * 1000 / events:6.3f} µs an event")
    return 0


if __name__ == "__main__":
    sys.exit(main())
