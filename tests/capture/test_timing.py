"""Tests of pytest_gpuutil.capture.timing: pure statistics everywhere, CUDA timing on a GPU machine."""
from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_gpuutil.timing_stats import (
    FwdBwdResult,
    TimingResult,
    TimingStats,
    quantile,
    summarize,
    throughput,
)
from pytest_gpuutil.capture import timing
from pytest_gpuutil.capture.timing import bench, bench_fwd_bwd, plan_reps


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


HAS_CUDA = _cuda_available()
needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
cpu_only = pytest.mark.skipif(HAS_CUDA, reason="checks the CPU fallback")


def _sleep_2ms() -> None:
    time.sleep(0.002)


def _ordered(result: TimingResult) -> bool:
    return result.min <= result.p20 <= result.median <= result.p80 <= result.max


# --------------------------------------------------------------------------- pure statistics


def test_summarize_odd_count_exact() -> None:
    stats = summarize([5.0, 1.0, 3.0, 2.0, 4.0])
    assert stats.median == 3.0
    assert stats.mean == 3.0
    assert stats.std == pytest.approx(math.sqrt(2.5))  # sample std: 10 / (5 - 1)
    assert (stats.min, stats.max, stats.reps) == (1.0, 5.0, 5)
    assert stats.p20 == pytest.approx(1.8)  # position 0.8 between 1 and 2
    assert stats.p80 == pytest.approx(4.2)  # position 3.2 between 4 and 5


def test_summarize_even_count_interpolates_median() -> None:
    stats = summarize([4.0, 1.0, 2.0, 3.0])
    assert stats.median == 2.5  # torch.median would say 2.0
    assert stats.p20 == pytest.approx(1.6)
    assert stats.p80 == pytest.approx(3.4)
    assert stats.std == pytest.approx(math.sqrt(5.0 / 3.0))


def test_summarize_single_time() -> None:
    stats = summarize([0.25])
    assert stats == TimingStats(
        median=0.25, mean=0.25, std=0.0, min=0.25, max=0.25, p20=0.25, p80=0.25, reps=1
    )


def test_summarize_does_not_touch_input() -> None:
    times = [3.0, 1.0, 2.0]
    summarize(times)
    assert times == [3.0, 1.0, 2.0]


def test_summarize_matches_torch_quantile() -> None:
    torch = pytest.importorskip("torch")
    times = [0.91, 0.87, 1.3, 0.88, 0.9, 2.5, 0.86, 0.89, 0.95, 0.92, 0.87]
    stats = summarize(times)
    expected = torch.quantile(
        torch.tensor(times, dtype=torch.float64), torch.tensor([0.2, 0.5, 0.8], dtype=torch.float64)
    ).tolist()
    assert [stats.p20, stats.median, stats.p80] == pytest.approx(expected)
    assert stats.std == pytest.approx(torch.tensor(times, dtype=torch.float64).std().item())


@pytest.mark.parametrize("times", [[], [1.0, float("nan")], [float("inf")], [-1.0]])
def test_summarize_rejects_bad_times(times: list[float]) -> None:
    with pytest.raises(ValueError):
        summarize(times)


def test_quantile_bounds() -> None:
    assert quantile([1.0, 2.0, 4.0], 0.0) == 1.0
    assert quantile([1.0, 2.0, 4.0], 1.0) == 4.0
    assert quantile([1.0, 2.0, 4.0], 0.75) == 3.0
    with pytest.raises(ValueError, match="q must be"):
        quantile([1.0], 1.5)


@pytest.mark.parametrize(
    ("estimate", "expected"),
    [
        (2.0, (12, 50)),  # int(25 / 2), int(100 / 2)
        (0.3, (83, 333)),
        (1000.0, (1, 1)),  # slower than the budget: still one of each
        (0.0, (25_000, 100_000)),  # floored at MIN_ESTIMATE_MS
        (-1.0, (25_000, 100_000)),
    ],
)
def test_plan_reps(estimate: float, expected: tuple[int, int]) -> None:
    assert plan_reps(estimate, 25, 100) == expected


def test_throughput() -> None:
    gbps, tflops = throughput(2.0, bytes=4_000_000_000, flops=10**12)
    assert gbps == pytest.approx(2000.0)  # 4e9 B / 2e-3 s / 1e9
    assert tflops == pytest.approx(500.0)  # 1e12 / 2e-3 s / 1e12
    assert throughput(2.0, None, None) == (None, None)
    assert throughput(0.0, 10, 10) == (None, None)


# --------------------------------------------------------------------------- records


def _record(**overrides: object) -> TimingResult:
    values: dict[str, object] = dict(
        label="mm",
        median=1.0,
        mean=1.1,
        std=0.1,
        min=0.9,
        max=1.5,
        p20=0.95,
        p80=1.2,
        reps=80,
        warmup_reps=20,
        timer="cuda_event",
        device="NVIDIA H100 80GB HBM3",
        gbps=3.0,
        tflops=None,
        bytes=3_000_000,
        flops=None,
    )
    values.update(overrides)
    return TimingResult(**values)  # type: ignore[arg-type]


def test_timing_result_json_round_trip() -> None:
    record = _record()
    data = json.loads(json.dumps(record.to_dict()))
    assert data["unit"] == "ms"
    assert data["note"] == ""
    assert TimingResult.from_dict(data) == record


def test_timing_result_from_dict_ignores_unknown_and_names_missing() -> None:
    data = _record().to_dict()
    data["added_later"] = 1
    assert TimingResult.from_dict(data) == _record()
    del data["median"], data["timer"]
    with pytest.raises(ValueError, match="median, timer"):
        TimingResult.from_dict(data)


def test_timing_result_rejects_unknown_timer() -> None:
    with pytest.raises(ValueError, match="timer must be one of"):
        _record(timer="stopwatch")


def test_fwd_bwd_result_round_trip() -> None:
    result = FwdBwdResult(forward=_record(label="f"), backward=_record(label="b"))
    assert FwdBwdResult.from_dict(json.loads(json.dumps(result.to_dict()))) == result


# --------------------------------------------------------------------------- argument checks


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"warmup_ms": 0}, ValueError, "warmup_ms"),
        ({"warmup_ms": -5}, ValueError, "warmup_ms"),
        ({"rep_ms": float("inf")}, ValueError, "rep_ms"),
        ({"rep_ms": float("nan")}, ValueError, "rep_ms"),
        ({"rep_ms": "100"}, TypeError, "rep_ms"),
        ({"warmup_ms": True}, TypeError, "warmup_ms"),
        ({"bytes": -1}, ValueError, "bytes"),
        ({"bytes": 1.5}, TypeError, "bytes"),
        ({"flops": -10}, ValueError, "flops"),
        ({"flops": "1e12"}, TypeError, "flops"),
        ({"label": 3}, TypeError, "label"),
    ],
)
def test_bench_rejects_bad_arguments(kwargs: dict, error: type, match: str) -> None:
    calls = []
    with pytest.raises(error, match=match):
        bench(lambda: calls.append(1), **kwargs)
    assert calls == []  # checked before anything runs


def test_bench_rejects_non_callable() -> None:
    with pytest.raises(TypeError, match="fn must be callable, got int"):
        bench(3)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"warmup": -1}, ValueError, "warmup"),
        ({"runs": 0}, ValueError, "runs"),
        ({"runs": 2.5}, TypeError, "runs"),
    ],
)
def test_bench_fwd_bwd_rejects_bad_arguments(kwargs: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        bench_fwd_bwd(lambda: 1, lambda out: None, **kwargs)


def test_bench_fwd_bwd_rejects_non_callable_backward() -> None:
    with pytest.raises(TypeError, match="backward must be callable"):
        bench_fwd_bwd(lambda: 1, None)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- CPU fallback


@cpu_only
def test_bench_cpu_fallback_record() -> None:
    result = bench(lambda: sum(range(100)), warmup_ms=2, rep_ms=10, label="sum")
    assert result.timer == "perf_counter"
    assert result.device == "cpu"
    assert result.note == timing.NOTE_NO_CUDA
    assert result.label == "sum"
    assert result.unit == "ms"
    assert result.reps >= 1 and result.warmup_reps >= 1
    assert _ordered(result)
    assert result.gbps is None and result.tflops is None


@cpu_only
def test_bench_cpu_sleep_median_is_plausible() -> None:
    result = bench(_sleep_2ms, warmup_ms=5, rep_ms=40)
    assert 1.5 <= result.median <= 50.0
    # each run takes >= 2 ms, so a 40 ms budget cannot plan more than 20 reps
    assert 1 <= result.reps <= 20
    assert _ordered(result)


@cpu_only
def test_bench_passes_args_and_kwargs() -> None:
    seen = []
    bench(lambda a, b=0: seen.append((a, b)), 1, b=2, warmup_ms=1, rep_ms=1)
    # first call + 5 estimate runs + warm-up + reps
    assert len(seen) >= 1 + 5 + 1 + 1
    assert set(seen) == {(1, 2)}


@cpu_only
def test_bench_call_count_follows_plan() -> None:
    calls = []
    result = bench(lambda: calls.append(1), warmup_ms=3, rep_ms=7)
    assert len(calls) == 1 + timing.ESTIMATE_RUNS + result.warmup_reps + result.reps


@cpu_only
def test_bench_cpu_throughput_from_counts() -> None:
    result = bench(_sleep_2ms, warmup_ms=2, rep_ms=10, bytes=2_000_000, flops=4 * 10**9)
    assert result.bytes == 2_000_000 and result.flops == 4 * 10**9
    median_s = result.median / 1e3
    assert result.gbps == pytest.approx(2_000_000 / median_s / 1e9)
    assert result.tflops == pytest.approx(4 * 10**9 / median_s / 1e12)
    # 2 MB in >= 2 ms is at most 1 GB/s
    assert result.gbps <= 1.0


@pytest.mark.parametrize("estimate_ms, calls", [(0.002, 500), (0.0001, 1000), (0.5, 2), (1.0, 1), (50.0, 1)])
def test_graph_calls_per_replay(estimate_ms: float, calls: int) -> None:
    assert timing.graph_calls_per_replay(estimate_ms) == calls


@cpu_only
def test_bench_cpu_ignores_cuda_graph_and_says_so() -> None:
    result = bench(lambda: None, warmup_ms=1, rep_ms=1, cuda_graph=True)
    assert result.timer == "perf_counter"
    assert "cuda_graph=True not applied" in result.note


def test_bench_propagates_fn_errors() -> None:
    def broken() -> None:
        raise KeyError("boom")

    with pytest.raises(KeyError, match="boom"):
        bench(broken, warmup_ms=1, rep_ms=1)


class FakeClock:
    """``time.perf_counter`` for the timing module that moves only when a test says so (issue 44:
    no test times real sleeps; a loaded machine once made a 1 ms sleep take 4.7 ms, longer than 3)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def perf_counter(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@cpu_only
def test_bench_fwd_bwd_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    monkeypatch.setattr(timing, "time", clock)
    order = []

    def forward(x: int) -> int:
        order.append("f")
        clock.sleep(0.001)
        return x * 2

    def backward(out: int) -> None:
        order.append(("b", out))
        clock.sleep(0.003)

    result = bench_fwd_bwd(forward, backward, 21, warmup=2, runs=5, label="toy")
    assert order[:2] == ["f", ("b", 42)]  # backward receives forward's output
    assert len(order) == 2 * (2 + 5)
    fwd, bwd = result.forward, result.backward
    assert (fwd.label, bwd.label) == ("toy/forward", "toy/backward")
    assert fwd.timer == bwd.timer == "perf_counter"
    assert (fwd.reps, fwd.warmup_reps, bwd.reps) == (5, 2, 5)
    assert fwd.median == pytest.approx(1.0) and bwd.median == pytest.approx(3.0)  # timed separately
    assert _ordered(fwd) and _ordered(bwd)
    assert fwd.note == timing.NOTE_NO_CUDA


@cpu_only
def test_bench_fwd_bwd_default_labels() -> None:
    result = bench_fwd_bwd(lambda: None, lambda out: None, warmup=0, runs=1)
    assert (result.forward.label, result.backward.label) == ("forward", "backward")
    assert result.forward.warmup_reps == 0


def test_bench_without_torch_falls_back_to_perf_counter() -> None:
    code = (
        "import sys; sys.modules['torch'] = None; "  # makes `import torch` raise ImportError
        "from pytest_gpuutil.capture.timing import bench, bench_fwd_bwd; "
        "r = bench(lambda: None, warmup_ms=1, rep_ms=2); "
        "f = bench_fwd_bwd(lambda: 1, lambda out: None, runs=2); "
        "print(r.timer, r.device, f.backward.timer); print(r.note)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[2],
    ).stdout.splitlines()
    assert out == ["perf_counter cpu perf_counter", timing.NOTE_NO_TORCH]


# --------------------------------------------------------------------------- CUDA


@needs_cuda
def test_bench_cuda_bf16_matmul_is_plausible() -> None:
    import torch

    n = 4096
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    flops = 2 * n**3
    result = bench(torch.matmul, a, b, flops=flops, bytes=3 * n * n * 2, label="mm")
    assert result.timer == "cuda_event"
    assert result.device == torch.cuda.get_device_name()
    assert result.note == ""
    assert result.reps >= 1 and result.warmup_reps >= 1
    assert _ordered(result)
    # 137 GFLOP: under 1 ms needs > 137 TFLOP/s; every recent GPU is under 2000 TFLOP/s bf16 dense
    assert 0.05 <= result.median <= 100.0
    assert result.tflops == pytest.approx(flops / (result.median / 1e3) / 1e12)
    assert 1.0 <= result.tflops <= 2000.0


@needs_cuda
def test_bench_cuda_l2_flush_does_not_count_in_rep_times() -> None:
    import torch

    x = torch.randn(1024, device="cuda")
    flushed = bench(torch.neg, x, rep_ms=20)
    # zeroing 256 MB takes tens of microseconds at best; a 4 KB neg takes a few
    assert flushed.median < 0.05


@needs_cuda
def test_bench_cuda_graph_replays_captured_work() -> None:
    import torch

    x = torch.zeros(1 << 20, device="cuda")
    result = bench(x.add_, 1.0, cuda_graph=True, warmup_ms=5, rep_ms=20, label="add")
    torch.cuda.synchronize()
    assert result.timer == "cuda_graph"
    assert _ordered(result)
    assert 0.0 < result.median < 5.0
    # every call ran (graph warm-ups, captures do not execute, then replays): x counts them.
    # A one-call graph estimates the replay; then k calls are unrolled into the timed graph.
    k = int(result.note.split(" calls per graph replay")[0])
    assert 1 <= k <= timing.GRAPH_MAX_CALLS
    calls = int(x[0].item())
    one_call_graph = timing.GRAPH_WARMUP_CALLS + 1 + timing.ESTIMATE_RUNS
    timed_graph = (timing.GRAPH_WARMUP_CALLS if k > 1 else 0) + k * (
        1 + timing.ESTIMATE_RUNS + result.warmup_reps + result.reps
    )
    assert calls == one_call_graph + timed_graph
    assert bool((x == x[0]).all())


@needs_cuda
def test_bench_cuda_graph_capture_error_names_cuda_graph() -> None:
    import torch

    x = torch.ones(4, device="cuda")
    with pytest.raises(RuntimeError, match="cuda_graph=True: could not capture"):
        bench(lambda: x.sum().item(), cuda_graph=True, warmup_ms=1, rep_ms=1)
    # the failed capture must not break later random ops (torch leaves its RNG "capturing")
    assert torch.rand(8, device="cuda").shape == (8,)
    assert torch.nn.functional.dropout(x, 0.5).shape == (4,)


@needs_cuda
def test_bench_fwd_bwd_cuda_linear() -> None:
    import torch

    layer = torch.nn.Linear(2048, 2048, device="cuda")
    x = torch.randn(4096, 2048, device="cuda", requires_grad=True)

    def backward(out: torch.Tensor) -> None:
        out.sum().backward()

    result = bench_fwd_bwd(layer, backward, x, warmup=3, runs=10, label="linear")
    assert result.forward.timer == result.backward.timer == "cuda_event"
    assert result.forward.reps == 10
    assert 0.0 < result.forward.median < 100.0
    assert 0.0 < result.backward.median < 200.0
    # backward of a linear layer does about twice the forward's matmul work
    assert result.backward.median > result.forward.median
