"""GPU timing behind the ``kernel_bench`` fixture: CUDA events, the way Triton's do_bench times.

Nothing here imports pytest, and torch is imported only inside the functions that time: without a
CUDA device (or without torch) the same warm-up/repetition protocol runs on ``time.perf_counter``.
The statistics and the result records are in :mod:`pytest_gpuutil.timing_stats`.
"""
from __future__ import annotations

import dataclasses
import math
import numbers
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional, Protocol, Sequence

from pytest_gpuutil.timing_stats import (
    FwdBwdResult,
    Timer,
    TimingResult,
    summarize,
    throughput,
)

#: Bytes zeroed before each timed run to evict the L2 cache (do_bench's 256 MB buffer).
L2_FLUSH_BYTES = 256 * 1024 * 1024

#: Runs timed together to estimate one run's duration before planning warm-up and repetitions.
ESTIMATE_RUNS = 5

#: Floor for the per-run estimate, so a near-zero estimate plans at most ``rep_ms * 1000`` reps.
MIN_ESTIMATE_MS = 1e-3

#: Warm-up calls on a side stream before capturing a CUDA graph (the PyTorch CUDA-graph recipe).
GRAPH_WARMUP_CALLS = 3
#: a graph replay should last about this long, so its own launch cost is amortised
GRAPH_REPLAY_MS = 1.0
GRAPH_MAX_CALLS = 1000

NOTE_NO_CUDA = "no CUDA device: timed with time.perf_counter on the CPU"
NOTE_NO_TORCH = "torch is not importable: timed with time.perf_counter on the CPU"


# ---------------------------------------------------------------------------------------------
# Planning the reps, checking the arguments


def plan_reps(estimate_ms: float, warmup_ms: float, rep_ms: float) -> tuple[int, int]:
    """``(n_warmup, n_repeat)`` filling the time budgets, at least one each (do_bench's rule)."""
    estimate = max(float(estimate_ms), MIN_ESTIMATE_MS)
    return max(1, int(warmup_ms / estimate)), max(1, int(rep_ms / estimate))


def _check_budget_ms(name: str, value: object) -> float:
    """A positive, finite number of milliseconds, else TypeError/ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number of milliseconds, got {type(value).__name__}")
    result = float(value)
    if not math.isfinite(result) or result <= 0.0:
        raise ValueError(f"{name} must be a finite number of milliseconds > 0, got {value!r}")
    return result


def _check_count(name: str, value: object, minimum: int) -> int:
    """An int >= ``minimum``, else TypeError/ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value!r}")
    return int(value)


def _check_optional_count(name: str, value: object) -> int | None:
    """None or a non-negative int, else TypeError/ValueError naming ``name``."""
    return None if value is None else _check_count(name, value, 0)


def _check_callable(name: str, value: object) -> None:
    """TypeError naming ``name`` unless ``value`` is callable."""
    if not callable(value):
        raise TypeError(f"{name} must be callable, got {type(value).__name__}")


def _check_label(value: object) -> str:
    """The label, which must be a str."""
    if not isinstance(value, str):
        raise TypeError(f"label must be a str, got {type(value).__name__}")
    return value


# ---------------------------------------------------------------------------------------------
# Clocks: one protocol, run on CUDA events or on time.perf_counter


class _Event(Protocol):
    def record(self) -> None: ...

    def elapsed_time(self, end: Any) -> float: ...


class _Clock(Protocol):
    @property
    def timer(self) -> Timer: ...

    @property
    def device(self) -> str: ...

    def event(self) -> _Event: ...

    def synchronize(self) -> None: ...

    def flush(self) -> None: ...


class _PerfCounterEvent:
    """A CPU stand-in for ``torch.cuda.Event``: ``record`` reads ``time.perf_counter``."""

    __slots__ = ("_t",)

    def __init__(self) -> None:
        self._t = 0.0

    def record(self) -> None:
        self._t = time.perf_counter()

    def elapsed_time(self, end: _PerfCounterEvent) -> float:
        return (end._t - self._t) * 1e3


@dataclass(frozen=True)
class _CpuClock:
    """Host wall clock; synchronize and flush do nothing."""

    timer: Timer = "perf_counter"
    device: str = "cpu"

    def event(self) -> _Event:
        return _PerfCounterEvent()

    def synchronize(self) -> None:
        return None

    def flush(self) -> None:
        return None


@dataclass(frozen=True)
class _CudaClock:
    """CUDA events on the current stream of the current device; flush zeroes a 256 MB buffer."""

    torch: Any
    device: str
    l2_buffer: Any
    timer: Timer = "cuda_event"

    def event(self) -> _Event:
        return self.torch.cuda.Event(enable_timing=True)

    def synchronize(self) -> None:
        self.torch.cuda.synchronize()

    def flush(self) -> None:
        if self.l2_buffer is not None:
            self.l2_buffer.zero_()


def _cuda_torch() -> tuple[Any, str]:
    """``(torch, "")`` when a CUDA device can time, else ``(None, why)`` for the fallback note."""
    try:
        import torch
    except ImportError:
        return None, NOTE_NO_TORCH
    if not torch.cuda.is_available():
        return None, NOTE_NO_CUDA
    return torch, ""


def _cuda_clock(torch: Any, flush_l2: bool) -> _CudaClock:
    """A CUDA clock on the current device, with the L2 flush buffer when asked."""
    index = torch.cuda.current_device()
    buffer = None
    if flush_l2:
        buffer = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device=f"cuda:{index}")
    return _CudaClock(torch=torch, device=torch.cuda.get_device_name(index), l2_buffer=buffer)


def _run_protocol(
    target: Callable[[], Any], clock: _Clock, warmup_ms: float, rep_ms: float, flush: bool,
    span: Optional[list[int]] = None, clock_ns: Optional[Callable[[], int]] = None,
) -> tuple[list[float], int]:
    """Time ``target`` as do_bench does; return the per-rep times (ms) and the warm-up count.

    With ``clock_ns``, ``span`` gets the reps' start and end on that clock (the GPU synchronised
    at both, so the span holds the reps' work and nothing else).
    """
    target()
    clock.synchronize()

    start, end = clock.event(), clock.event()
    start.record()
    for _ in range(ESTIMATE_RUNS):
        if flush:
            clock.flush()
        target()
    end.record()
    clock.synchronize()
    n_warmup, n_repeat = plan_reps(start.elapsed_time(end) / ESTIMATE_RUNS, warmup_ms, rep_ms)

    for _ in range(n_warmup):
        target()

    starts = [clock.event() for _ in range(n_repeat)]
    ends = [clock.event() for _ in range(n_repeat)]
    if clock_ns is not None and span is not None:
        clock.synchronize()
        span.append(clock_ns())
    for begin, finish in zip(starts, ends):
        if flush:
            clock.flush()
        begin.record()
        target()
        finish.record()
    clock.synchronize()
    if clock_ns is not None and span is not None:
        span.append(clock_ns())
    return [begin.elapsed_time(finish) for begin, finish in zip(starts, ends)], n_warmup


def graph_calls_per_replay(estimate_ms: float) -> int:
    """Calls to unroll into one graph so a replay lasts about GRAPH_REPLAY_MS (at most GRAPH_MAX_CALLS)."""
    return max(1, min(GRAPH_MAX_CALLS, int(GRAPH_REPLAY_MS / max(estimate_ms, MIN_ESTIMATE_MS))))


def _replay_estimate_ms(replay: Callable[[], Any], clock: "_CudaClock") -> float:
    replay()
    start, end = clock.event(), clock.event()
    start.record()
    for _ in range(ESTIMATE_RUNS):
        replay()
    end.record()
    clock.synchronize()
    return start.elapsed_time(end) / ESTIMATE_RUNS


def _capture_graph(torch: Any, call: Callable[[], Any], what: str, calls: int = 1) -> Any:
    """Warm ``call`` up on a side stream, then capture ``calls`` calls into a ``torch.cuda.CUDAGraph``."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(GRAPH_WARMUP_CALLS):
            call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            for _ in range(calls):
                call()
        torch.cuda.synchronize()
    except RuntimeError as exc:
        _reset_after_failed_capture(torch)
        raise RuntimeError(
            f"cuda_graph=True: could not capture {what} into a CUDA graph (host syncs such as "
            f".item() cannot be captured): {exc}"
        ) from exc
    return graph


def _reset_after_failed_capture(torch: Any) -> None:
    """Capture a tiny graph so torch's CUDA RNG leaves the capture state a failed capture left."""
    # torch (seen on 2.11) leaves the generator "capturing" when capture_end fails, and every
    # later random op raises "Offset increment outside graph capture"; a good capture resets it.
    try:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            torch.empty(1, device="cuda").zero_()
        torch.cuda.synchronize()
    except RuntimeError:
        pass


def _result(
    label: str,
    times_ms: Sequence[float],
    warmup_reps: int,
    clock: _Clock,
    timer: Timer,
    note: str,
    bytes: int | None = None,
    flops: int | None = None,
    flops_dtype: str = "bf16",
    span: Sequence[int] = (),
    copy_ceiling: Optional[Callable[[], float]] = None,
) -> TimingResult:
    """Build a TimingResult from raw per-rep times."""
    stats = summarize(times_ms)
    gbps, tflops = throughput(stats.median, bytes, flops)
    peaks = peak_fields(clock.device, gbps, tflops, flops_dtype, copy_ceiling) if clock.device != "cpu" else {}
    return TimingResult(
        label=label,
        **dataclasses.asdict(stats),
        warmup_reps=warmup_reps,
        timer=timer,
        device=clock.device,
        gbps=gbps,
        tflops=tflops,
        bytes=bytes,
        flops=flops,
        note=note,
        **peaks,
        times_ms=tuple(float(t) for t in times_ms),
        timed_span_ns=(span[0], span[1]) if len(span) == 2 else None,
    )


def peak_fields(device: str, gbps: float | None, tflops: float | None, flops_dtype: str,
                copy_ceiling: Optional[Callable[[], float]] = None) -> dict[str, Any]:
    """TimingResult's peak fields: the device's datasheet peaks (machine/peaks.py) and the share reached.

    For bandwidth on a GPU the table does not know, ``copy_ceiling()`` (GB/s of a large
    device-to-device copy) stands in for the peak.
    """
    from pytest_gpuutil.machine.peaks import device_peaks

    peaks = device_peaks(device)
    out: dict[str, Any] = {}
    sources = []
    if tflops is not None:
        out["flops_dtype"] = flops_dtype
        peak = peaks.tflops.get(flops_dtype) if peaks else None
        if peak:
            out.update(peak_tflops=peak, tflops_pct_of_peak=100.0 * tflops / peak)
            sources.append(peaks.source)  # type: ignore[union-attr]
    if gbps is not None:
        peak = peaks.memory_gbps if peaks else None
        source = peaks.source if peaks else ""
        if not peak and copy_ceiling is not None:
            try:
                peak, source = copy_ceiling(), "measured device-to-device copy"
            except Exception:  # noqa: BLE001 - no peak is better than a failed bench
                peak = None
        if peak:
            out.update(peak_gbps=peak, gbps_pct_of_peak=100.0 * gbps / peak)
            sources.append(source)
    if sources:
        out["peak_source"] = "; ".join(dict.fromkeys(sources))
    return out


def copy_ceiling_gbps(torch: Any, mib: int = 256, reps: int = 5) -> float:
    """GB/s of the best of ``reps`` device-to-device copies of ``mib`` MiB (read + write counted)."""
    src = torch.empty(mib << 18, dtype=torch.float32, device="cuda")
    dst = torch.empty_like(src)
    dst.copy_(src)
    best = math.inf
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end))
    return 2 * (mib << 20) / (best / 1e3) / 1e9


# ---------------------------------------------------------------------------------------------
# Public timers


def bench(
    fn: Callable[..., Any],
    *args: Any,
    warmup_ms: float = 25,
    rep_ms: float = 100,
    flush_l2: bool = True,
    cuda_graph: bool = False,
    bytes: int | None = None,
    flops: int | None = None,
    label: str = "",
    flops_dtype: str = "bf16",
    clock_ns: Optional[Callable[[], int]] = None,
    **kwargs: Any,
) -> TimingResult:
    """Time ``fn(*args, **kwargs)`` the way ``triton.testing.do_bench`` does.

    One call and a synchronize; 5 runs between two CUDA events estimate a run (flush included);
    ``max(1, int(warmup_ms / estimate))`` warm-up calls; then ``max(1, int(rep_ms / estimate))``
    reps, each with its own event pair, preceded by zeroing a 256 MB buffer when ``flush_l2``.
    Events are recorded on the current stream of the current device. ``cuda_graph=True`` warms up
    on a side stream, captures one call into a CUDA graph and times ``graph.replay()`` (the L2
    flush stays outside the graph). ``bytes``/``flops`` give ``gbps``/``tflops`` at the median,
    and the share of the device's peak (``flops_dtype``: "bf16" by default; see
    :mod:`pytest_gpuutil.machine.peaks`). With ``clock_ns`` the result's ``timed_span_ns`` is the
    timed reps' span on that clock (for the hardware counters over them).
    Without CUDA (or torch) the same protocol runs on ``time.perf_counter``
    (``timer="perf_counter"``, ``device="cpu"``, ``note`` says why; flush and graph do not apply).
    Keyword arguments named like a parameter of ``bench`` cannot reach ``fn``: wrap it in a lambda.
    """
    _check_callable("fn", fn)
    warmup = _check_budget_ms("warmup_ms", warmup_ms)
    rep = _check_budget_ms("rep_ms", rep_ms)
    n_bytes = _check_optional_count("bytes", bytes)
    n_flops = _check_optional_count("flops", flops)
    name = _check_label(label)
    from pytest_gpuutil.machine.peaks import check_dtype

    dtype = check_dtype(flops_dtype)
    span: list[int] = []

    def call() -> Any:
        return fn(*args, **kwargs)

    torch, why = _cuda_torch()
    if torch is None:
        clock: _Clock = _CpuClock()
        note = f"{why} (cuda_graph=True not applied)" if cuda_graph else why
        times, n_warmup = _run_protocol(call, clock, warmup, rep, flush=False, span=span, clock_ns=clock_ns)
        return _result(name, times, n_warmup, clock, "perf_counter", note, n_bytes, n_flops, dtype, span)

    cuda = _cuda_clock(torch, bool(flush_l2))
    if cuda_graph:
        what = name or getattr(fn, "__name__", "fn")
        graph = _capture_graph(torch, call, what, calls=1)
        calls = graph_calls_per_replay(_replay_estimate_ms(graph.replay, cuda))
        if calls > 1:  # as do_bench_cudagraph: unroll calls so one replay's launch cost is amortised
            graph = _capture_graph(torch, call, what, calls=calls)
        times, n_warmup = _run_protocol(graph.replay, cuda, warmup, rep, flush=bool(flush_l2), span=span, clock_ns=clock_ns)
        note = f"{calls} calls per graph replay; times are per call" + ("; L2 flushed once per replay" if flush_l2 and calls > 1 else "")
        return _result(name, [t / calls for t in times], n_warmup, cuda, "cuda_graph", note, n_bytes, n_flops, dtype,
                       span, lambda: copy_ceiling_gbps(torch))
    times, n_warmup = _run_protocol(call, cuda, warmup, rep, flush=bool(flush_l2), span=span, clock_ns=clock_ns)
    return _result(name, times, n_warmup, cuda, "cuda_event", "", n_bytes, n_flops, dtype, span,
                   lambda: copy_ceiling_gbps(torch))


def bench_fwd_bwd(
    forward: Callable[..., Any],
    backward: Callable[[Any], Any],
    *args: Any,
    warmup: int = 10,
    runs: int = 50,
    label: str = "",
) -> FwdBwdResult:
    """Time ``out = forward(*args)`` and ``backward(out)`` separately, as PyTorch's fastrnns bench.

    ``warmup`` untimed iterations (default 10), then ``runs`` timed ones (default 50; fastrnns
    uses 10 and 100): each records an event pair around forward, another around backward, then
    synchronizes. No L2 flush. Labels are ``"<label>/forward"`` and ``"<label>/backward"``
    (``"forward"``/``"backward"`` without a label). Without CUDA, times on ``time.perf_counter``.
    """
    _check_callable("forward", forward)
    _check_callable("backward", backward)
    n_warmup = _check_count("warmup", warmup, 0)
    n_runs = _check_count("runs", runs, 1)
    name = _check_label(label)

    torch, why = _cuda_torch()
    clock: _Clock = _CpuClock() if torch is None else _cuda_clock(torch, flush_l2=False)

    def iteration() -> tuple[float, float]:
        fwd_start, fwd_end, bwd_start, bwd_end = (clock.event() for _ in range(4))
        fwd_start.record()
        out = forward(*args)
        fwd_end.record()
        bwd_start.record()
        backward(out)
        bwd_end.record()
        clock.synchronize()
        return fwd_start.elapsed_time(fwd_end), bwd_start.elapsed_time(bwd_end)

    for _ in range(n_warmup):
        iteration()
    timed = [iteration() for _ in range(n_runs)]

    prefix = f"{name}/" if name else ""
    fwd_times = [f for f, _ in timed]
    bwd_times = [b for _, b in timed]
    return FwdBwdResult(
        forward=_result(f"{prefix}forward", fwd_times, n_warmup, clock, clock.timer, why),
        backward=_result(f"{prefix}backward", bwd_times, n_warmup, clock, clock.timer, why),
    )
