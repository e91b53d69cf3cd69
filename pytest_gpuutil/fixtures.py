"""The objects behind the ``gpu_trace``, ``kernel_bench`` and ``metric_table`` fixtures.

They know nothing of pytest: the plugin hands each one a :class:`TestResults` for the current
test, and the fixtures put what they measured there (as pytest-benchmark's fixture gets an
``add_stats`` callback). torch is imported only when a fixture is used.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional

from pytest_gpuutil.analysis.classify import KernelClassifier
from pytest_gpuutil.analysis.summary import TraceSummary
from pytest_gpuutil.capture.profiler import RegionProfile, RegionProfiler
from pytest_gpuutil.timing_stats import FwdBwdResult, TimingResult
from pytest_gpuutil.capture.timing import bench, bench_fwd_bwd
from pytest_gpuutil.per_test import TestResults
from pytest_gpuutil.report.metric_tables import (
    MetricRow,
    MetricTable,
    MetricTableRegistry,
    Row,
)


def summary_brief(summary: TraceSummary) -> dict[str, Any]:
    """The part of a TraceSummary that goes into a test's record."""
    return {
        "window_us": summary.window_us,
        "busy_us": summary.busy_us,
        "busy_pct": summary.busy_pct,
        "mm_conv_pct": summary.mm_conv_pct,
        "kernel_count": summary.kernel_count,
        "categories": {c.name: c.share_of_busy for c in summary.categories},
        "top_kernel": summary.top_kernels[0].name if summary.top_kernels else None,
    }


class GpuTraceBlock:
    """``with gpu_trace() as t:`` — profiles the block; ``t.summary`` after it, ``t.save(path)``."""

    def __init__(self, results: TestResults, classifier: KernelClassifier, cuda: bool, label: str, cpu_activity: bool):
        self._results = results
        self._label = label
        self._profiler = RegionProfiler(classifier, cuda=cuda, cpu_activity=cpu_activity, keep=True,
                                        window_source="gpu_trace")
        self.profile: Optional[RegionProfile] = None

    @property
    def summary(self) -> Optional[TraceSummary]:
        """The analysis of the block (None until it ends, or if something else took the profiler)."""
        return self.profile.summary if self.profile else None

    def __enter__(self) -> "GpuTraceBlock":
        self._results.quiet_measurement("the gpu_trace fixture profiles this test itself")
        self._profiler.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.profile = self._profiler.stop()
        if self.profile.summary is not None:
            label = self._results.unique_label(self._label, self._results.gpu_trace)
            self._results.gpu_trace[label] = summary_brief(self.profile.summary)

    def save(self, path: str) -> str:
        """Write the block's Chrome trace (Perfetto opens it; gzip'd if ``path`` ends in .gz)."""
        self._profiler.export(str(path))
        return str(path)


@dataclass(frozen=True)
class GpuTraceRun:
    """What ``gpu_trace.run`` measured (the analysis of ``_functorch.benchmark_utils``, done right)."""

    busy_pct: float
    mm_conv_pct: float
    #: category -> percent of busy time
    categories: Mapping[str, float]
    unprofiled_ms: float
    profiled_ms: float
    #: profiled ÷ unprofiled wall time of the same runs
    profiler_overhead: float
    summary: TraceSummary


class GpuTraceFixture:
    """Profile a block (``with gpu_trace() as t``) or a callable (``gpu_trace.run(fn, ...)``)."""

    def __init__(self, results: TestResults, classifier: KernelClassifier, cuda: Callable[[], bool]):
        self._results = results
        self._classifier = classifier
        self._cuda = cuda

    def __call__(self, label: str = "block", cpu_activity: bool = False) -> GpuTraceBlock:
        return GpuTraceBlock(self._results, self._classifier, self._cuda(), label, cpu_activity)

    def run(self, fn: Callable[..., Any], *args: Any, warmup: int = 5, runs: int = 1, seed: int = 1337,
            label: str = "", **kwargs: Any) -> GpuTraceRun:
        """Seeded warm-ups, ``runs`` unprofiled timed runs, then the same runs profiled."""
        if not callable(fn):
            raise TypeError(f"gpu_trace.run: fn must be callable, got {type(fn).__name__}")
        if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
            raise ValueError(f"gpu_trace.run: warmup must be a whole number >= 0, got {warmup!r}")
        if isinstance(runs, bool) or not isinstance(runs, int) or runs < 1:
            raise ValueError(f"gpu_trace.run: runs must be a whole number >= 1, got {runs!r}")
        import torch

        cuda = self._cuda()
        sync = torch.cuda.synchronize if cuda else (lambda: None)

        def repeat(count: int) -> None:
            for _ in range(count):
                fn(*args, **kwargs)
                sync()

        torch.manual_seed(seed)
        repeat(warmup)
        torch.manual_seed(seed)
        start = time.perf_counter()
        repeat(runs)
        unprofiled_ms = (time.perf_counter() - start) * 1000
        with self(label or getattr(fn, "__name__", "run")) as block:
            torch.manual_seed(seed)
            repeat(runs)
        profile = block.profile
        summary = profile.summary if profile else None
        if summary is None:
            raise RuntimeError(f"gpu_trace.run: not measured: {profile.note if profile else 'no profile'}")
        return GpuTraceRun(
            busy_pct=summary.busy_pct,
            mm_conv_pct=summary.mm_conv_pct,
            categories={c.name: c.share_of_busy for c in summary.categories},
            unprofiled_ms=unprofiled_ms,
            profiled_ms=profile.wall_ms,
            profiler_overhead=profile.wall_ms / unprofiled_ms if unprofiled_ms > 0 else float("nan"),
            summary=summary,
        )


def with_counters(result: TimingResult, figures: Any, flushed_l2: bool) -> TimingResult:
    """``result`` with the hardware counters over its timed reps (SM, tensor, DRAM % of peak)."""
    note = figures.note
    if flushed_l2 and not note:
        note = "the timed span includes the L2 flush between reps (DRAM traffic of its own): flush_l2=False leaves it out"
    return dataclasses.replace(result, sm_pct=figures.values.get("sm_pct"), tensor_pct=figures.values.get("tensor_pct"),
                               dram_bw_pct=figures.values.get("dram_bw_pct"), counters_note=note)


class KernelBenchFixture:
    """Time a callable with CUDA events the way triton's do_bench does (perf_counter on CPU)."""

    def __init__(self, results: TestResults, counters: Any = None):
        self._results = results
        #: the hardware counters' capture (hardware/capture.py), when they run: figures over the timed reps
        self._counters = counters

    def __call__(self, fn: Callable[..., Any], *args: Any, warmup_ms: float = 25, rep_ms: float = 100,
                 flush_l2: bool = True, cuda_graph: bool = False, bytes: Optional[int] = None,
                 flops: Optional[int] = None, label: str = "", flops_dtype: str = "bf16", **kwargs: Any) -> TimingResult:
        self._results.quiet_measurement("kernel_bench times this test; the profiler stepped aside")
        wanted = label or getattr(fn, "__name__", "bench")
        label = self._results.unique_label(wanted, self._results.kernel_bench)
        counters = self._counters
        if counters is not None:
            counters.wait_started()  # counters still starting on their thread would miss the timed reps
        result = bench(fn, *args, warmup_ms=warmup_ms, rep_ms=rep_ms, flush_l2=flush_l2, cuda_graph=cuda_graph,
                       bytes=bytes, flops=flops, label=label, flops_dtype=flops_dtype,
                       clock_ns=counters.sampler.now if counters is not None else None, **kwargs)
        if counters is not None and result.timed_span_ns is not None:
            result = with_counters(result, counters.figures_between(*result.timed_span_ns),
                                   flush_l2 and result.timer != "perf_counter")
        self._results.kernel_bench[label] = result.to_dict()
        return result

    def fwd_bwd(self, forward: Callable[..., Any], backward: Callable[[Any], Any], *args: Any,
                warmup: int = 10, runs: int = 50, label: str = "") -> FwdBwdResult:
        """Time forward and backward separately (as PyTorch's fastrnns bench); both are recorded."""
        self._results.quiet_measurement("kernel_bench times this test; the profiler stepped aside")
        wanted = label or getattr(forward, "__name__", "fwd_bwd")
        label = self._results.unique_label(wanted, {k.split("/")[0]: 1 for k in self._results.kernel_bench})
        result = bench_fwd_bwd(forward, backward, *args, warmup=warmup, runs=runs, label=label)
        for timing in (result.forward, result.backward):
            self._results.kernel_bench[timing.label] = timing.to_dict()
        return result

    @staticmethod
    def as_benchmark(benchmark: Any, result: TimingResult) -> None:
        """Hand ``result``'s per-rep times to pytest-benchmark's ``benchmark`` fixture as its rounds.

        Its table, ``--benchmark-save`` and ``--benchmark-compare-fail=median:5%`` then act on these
        times (CUDA events on a GPU). See :func:`pytest_gpuutil.report.benchmark_interop.as_benchmark`.
        """
        from pytest_gpuutil.report.benchmark_interop import as_benchmark

        as_benchmark(benchmark, result)


class BoundMetricTable:
    """A metric table as one test sees it: ``add_row`` fills the ``test`` column."""

    def __init__(self, table: MetricTable, results: TestResults):
        self.table = table
        self._results = results

    @property
    def name(self) -> str:
        return self.table.name

    @property
    def columns(self) -> tuple[str, ...]:
        return self.table.columns

    def add_row(self, row: Row) -> Optional[MetricRow]:
        """Check ``row`` (a mapping, or a callable returning one) and record it; None if disabled."""
        if not self.table.enabled:
            return None
        record = self.table.format_row(row, test=self._results.nodeid)
        self._results.metric_rows.append(record)
        return record


class MetricTableFixture:
    """``metric_table(name, columns)`` registers (or returns) a named CSV table."""

    def __init__(self, results: TestResults, registry: MetricTableRegistry):
        self._results = results
        self._registry = registry

    def __call__(self, name: str, columns: Any) -> BoundMetricTable:
        table = self._registry.register(name, columns)
        self._results.tables[table.name] = table.columns
        return BoundMetricTable(table, self._results)
