"""pytest-benchmark interop: report a ``kernel_bench`` timing as the ``benchmark`` fixture's result.

pytest-benchmark times calls with its own clock (``benchmark(fn)``, ``benchmark.pedantic(fn)``):
on a GPU that is host time, launch overhead and synchronisation included. ``as_benchmark`` gives
it the per-rep CUDA-event times of a ``kernel_bench`` call instead, so its table, ``--benchmark-json``,
``--benchmark-save``/``--benchmark-autosave`` and ``--benchmark-compare-fail=median:5%`` act on GPU
times. pytest-benchmark has no public call for measurements taken elsewhere, so this uses
``BenchmarkFixture._make_stats`` (unchanged from pytest-benchmark 3.x to 5.3) and says so plainly
if a later version drops it. Nothing here imports pytest or torch; pytest-benchmark only for its FixtureAlreadyUsed.
"""
from __future__ import annotations

from typing import Any

from pytest_gpuutil.timing_stats import TimingResult

#: TimingResult fields copied into ``benchmark.extra_info["kernel_bench"]``
EXTRA_INFO_FIELDS = ("label", "timer", "device", "reps", "warmup_reps", "gbps", "tflops", "bytes", "flops", "note")


def as_benchmark(benchmark: Any, result: TimingResult) -> None:
    """Store ``result``'s per-rep times (ms) as ``benchmark``'s rounds (seconds, 1 iteration each).

    Uses the fixture up (a later ``benchmark(...)`` raises pytest-benchmark's FixtureAlreadyUsed)
    and records the timer, device and rates in ``benchmark.extra_info["kernel_bench"]``. Under
    ``--benchmark-disable`` (and pytest-xdist, where pytest-benchmark disables itself) only
    ``extra_info`` is filled.
    """
    if not isinstance(result, TimingResult):
        raise TypeError(f"as_benchmark: expected a TimingResult from kernel_bench, got {type(result).__name__}")
    if not result.times_ms:
        raise ValueError(
            f"as_benchmark: timing {result.label!r} carries no per-rep times "
            "(results read back from gpu_util.json keep only the statistics); pass kernel_bench's return value"
        )
    make_stats = getattr(benchmark, "_make_stats", None)
    extra_info = getattr(benchmark, "extra_info", None)
    if not callable(make_stats) or not isinstance(extra_info, dict):
        raise TypeError(
            f"as_benchmark: expected pytest-benchmark's benchmark fixture, got {type(benchmark).__name__} "
            "(or a pytest-benchmark version without BenchmarkFixture._make_stats)"
        )
    extra_info["kernel_bench"] = {name: getattr(result, name) for name in EXTRA_INFO_FIELDS}
    if getattr(benchmark, "disabled", False):
        return
    if getattr(benchmark, "_mode", None):
        from pytest_benchmark.fixture import FixtureAlreadyUsed

        benchmark.has_error = True
        raise FixtureAlreadyUsed(f"Fixture can only be used once. Previously it was used in {benchmark._mode} mode.")
    benchmark._mode = "kernel_bench.as_benchmark(...)"
    stats = make_stats(1)
    stats.options = {**stats.options, "timer": f"pytest_gpuutil.kernel_bench[{result.timer}]"}
    for time_ms in result.times_ms:
        stats.update(time_ms / 1000.0)  # pytest-benchmark keeps seconds


def gpu_extra_info(stats: Any) -> dict[str, Any]:
    """A test's GPU figures for ``benchmark.extra_info["gpu_util"]`` (``stats``: its WindowStats)."""
    return {
        "gpu_busy_ms": stats.busy_us / 1000,
        "busy_pct": stats.busy_pct,
        "mm_conv_pct": stats.mm_conv_pct,
        "kernel_count": stats.kernel_count,
        "top_kernel": stats.top_kernel,
    }


def record_extra_info(record: Any) -> dict[str, Any]:
    """The same figures as :func:`gpu_extra_info`, read from a test's record (filled after the test)."""
    return {
        "gpu_busy_ms": record.gpu_busy_ms,
        "busy_pct": record.busy_pct,
        "mm_conv_pct": record.mm_conv_pct,
        "kernel_count": record.kernel_count,
        "top_kernel": record.top_kernel,
    }


def machine_extra_info(info: dict[str, Any], torch: Any) -> dict[str, Any]:
    """The GPUs this run may use (CUDA_VISIBLE_DEVICES), as gpu_util.json and baselines describe
    them, for pytest-benchmark's ``machine_info["gpu_util"]``."""
    return {
        "gpu_model": info.get("gpu_model"),
        "gpu_count": info.get("gpu_count"),
        "driver": info.get("driver"),
        "cuda": getattr(getattr(torch, "version", None), "cuda", None),
    }
