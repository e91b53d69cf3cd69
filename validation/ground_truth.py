"""(GPU) Ground truth for pytest-gpuutil's figures: busy %, kernel categories and timings.

    python validation/ground_truth.py --out DIR [--sections duty,categories,timing] [--periods 30]

1. duty: ``periods`` × (spin kernel ``torch.cuda._sleep`` of ``--spin-ms``, synchronize, host
   ``time.sleep``) at 10/25/50/75/90 % duty. Truth = periods × the spin length (calibrated from
   back-to-back spins between CUDA events) / the wall window between two CUDA events. A "gate"
   spin runs before the window's start event, so that event is stamped exactly when the gate
   kernel ends and the trace shows where the window starts; a last tiny kernel marks its end.
   (The per-spin event pairs, which include launch latency, are kept as a cross-check.) Beside
   the truth: ours (``analyze`` of the profiled run without the gate kernel, over the truth window
   and over the profiler span, from the exported trace and, when ``pytest_gpuutil.capture.live_events``
   works, from the live profiler) and ``torch._functorch.benchmark_utils.benchmark_utilization``
   (denominator: an unprofiled run; compared with the truth of the whole call, gate included).
2. categories: matmuls, conv, SDPA per backend, LSTM, torch.compile, a training step: our
   shares of busy time (mm/conv, attention) beside benchmark_utilization's mm/conv, top kernels.
   Each profiled trace is kept in ``DIR/traces/`` (gzip'd) for the project's tests.
3. timing: ``pytest_gpuutil.capture.timing.bench`` vs ``triton.testing.do_bench`` (median) vs
   ``torch.utils.benchmark.Timer.blocked_autorange``, 5 interleaved repeats: medians, ratios, CV.

Every measurement is guarded: a failure is recorded under ``errors`` and the run goes on.
Writes ``DIR/ground_truth.json`` and ``DIR/ground_truth.md``; prints the tables last.
About 2-3 minutes on an H100 (torch.compile is the slowest single step).
"""
from __future__ import annotations

import argparse
import contextlib
import gzip
import math
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pytest_gpuutil.capture.timing import copy_ceiling_gbps  # noqa: E402
from benchmarks.report import (  # noqa: E402
    attempt,
    error_points,
    host_info,
    markdown_table,
    ratio,
    share_pct,
    summarize_repeats,
    text_table,
    write_results,
)

SECTIONS = ("duty", "categories", "timing")
CALIBRATION_CYCLES = 1_000_000
TOP_KERNELS = 5


# ---------------------------------------------------------------------------------------------
# Duty-cycle schedule maths (pure; tested on the CPU in tests/validation/)
#
# One period = a spin kernel of ``spin_ms`` on the GPU, a host synchronize, then a host sleep of
# ``sleep_ms``; the GPU is busy ``spin_ms / (spin_ms + sleep_ms)`` of the time. ``torch.cuda._sleep``
# takes clock cycles, so the spin length comes from a measured cycles-per-millisecond rate.

#: Duty cycles the ground-truth script measures, as fractions.
DEFAULT_DUTIES: tuple[float, ...] = (0.10, 0.25, 0.50, 0.75, 0.90)


@dataclass(frozen=True)
class DutyPlan:
    """One duty-cycle workload: ``periods`` × (spin ``spin_ms``, sync, sleep ``sleep_ms``)."""

    duty: float
    spin_ms: float
    sleep_ms: float
    periods: int
    spin_cycles: int

    @property
    def period_ms(self) -> float:
        return self.spin_ms + self.sleep_ms

    @property
    def total_ms(self) -> float:
        return self.period_ms * self.periods

    @property
    def expected_busy_pct(self) -> float:
        """Busy % if spins and sleeps were exact (host sleeps overshoot: measure the truth)."""
        return 100.0 * self.spin_ms / self.period_ms


def cycles_for_ms(ms: float, cycles_per_ms: float) -> int:
    """Clock cycles for a spin of ``ms`` milliseconds at the measured rate (at least 1)."""
    if not (math.isfinite(ms) and ms > 0):
        raise ValueError(f"spin length must be a positive number of ms, got {ms!r}")
    if not (math.isfinite(cycles_per_ms) and cycles_per_ms > 0):
        raise ValueError(f"cycles_per_ms must be positive, got {cycles_per_ms!r}")
    return max(1, round(ms * cycles_per_ms))


def sleep_ms_for_duty(duty: float, spin_ms: float) -> float:
    """Host sleep per period that makes ``spin_ms`` a ``duty`` fraction of the period."""
    if not 0.0 < duty <= 1.0:
        raise ValueError(f"duty must be in (0, 1], got {duty!r}")
    if not spin_ms > 0:
        raise ValueError(f"spin_ms must be > 0, got {spin_ms!r}")
    return spin_ms * (1.0 - duty) / duty


def plan_duty_cycle(duty: float, spin_ms: float, periods: int, cycles_per_ms: float) -> DutyPlan:
    """The schedule for one duty cycle."""
    if periods < 1:
        raise ValueError(f"periods must be >= 1, got {periods!r}")
    return DutyPlan(
        duty=duty,
        spin_ms=spin_ms,
        sleep_ms=sleep_ms_for_duty(duty, spin_ms),
        periods=periods,
        spin_cycles=cycles_for_ms(spin_ms, cycles_per_ms),
    )


def truth_busy_pct(kernel_ms: Sequence[float], window_ms: float) -> float:
    """Ground-truth busy %: summed (non-overlapping) spin-kernel times over the wall window."""
    if window_ms <= 0:
        raise ValueError(f"window must be > 0 ms, got {window_ms!r}")
    return 100.0 * sum(kernel_ms) / window_ms


# ---------------------------------------------------------------------------------------------
# Shared: profile a callable, analyse it our way, and the seed's way


def profile_ours(torch: Any, fn: Callable[[], Any], name: str, trace_dir: str, errors: list,
                 runs: int = 1, warmup: int = 0) -> dict[str, Any]:
    """Profile ``runs`` calls (CUDA activity, as benchmark_utilization).

    Returns the exported trace (``trace``, ``trace_path``), its ``summary`` and, when the live
    path works, ``live_trace`` from ``pytest_gpuutil.capture.live_events.trace_from_profiler``.
    """
    from torch.profiler import ProfilerActivity, profile

    from pytest_gpuutil import analyze, read_trace

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(runs):
            fn()
        torch.cuda.synchronize()
    out: dict[str, Any] = {}
    out["live_trace"] = attempt(errors, f"{name}: live_events.trace_from_profiler", lambda: _live_trace(prof, name))
    os.makedirs(trace_dir, exist_ok=True)
    raw = os.path.join(trace_dir, f"{name}.json")
    prof.export_chrome_trace(raw)
    gz = raw + ".gz"
    with open(raw, "rb") as src, gzip.open(gz, "wb") as dst:
        shutil.copyfileobj(src, dst)
    os.remove(raw)
    out["trace_path"] = gz
    out["trace"] = read_trace(gz)
    out["summary"] = analyze(out["trace"])
    return out


def _live_trace(prof: Any, name: str) -> Any:
    from pytest_gpuutil.capture.live_events import trace_from_profiler

    return trace_from_profiler(prof, f"<live {name}>")


def without_gate(trace: Any) -> tuple[Any, Any]:
    """``(trace without its first GPU event, the truth window)``: gate kernel end to last GPU end."""
    from pytest_gpuutil import Window

    if len(trace.events) < 2:
        raise ValueError(f"{trace.path}: expected the gate kernel and the workload, got {len(trace.events)} events")
    gate = min(trace.events, key=lambda e: e.start_ns)
    rest = tuple(e for e in trace.events if e is not gate)
    window = Window(gate.start_ns + gate.dur_ns, max(e.start_ns + e.dur_ns for e in rest), "explicit")
    from pytest_gpuutil import Trace

    return Trace.from_events(trace.path, rest, trace.profiler_span, trace.base_time_ns), window


def seed_benchmark_utilization(fn: Callable[[], Any], name: str, num_runs: int = 1) -> tuple[float, float]:
    """torch's benchmark_utilization on ``fn`` as (busy %, mm/conv %) of its unprofiled wall time."""
    from torch._functorch.benchmark_utils import benchmark_utilization

    with tempfile.TemporaryDirectory() as folder:
        util, mm_conv = benchmark_utilization(lambda _input: fn(), None, folder, trace_file_name=name,
                                              num_runs=num_runs)
    return 100.0 * util, 100.0 * mm_conv


def category_share(summary: Any, name: str) -> Optional[float]:
    stat = summary.category(name) if summary is not None else None
    return stat.share_of_busy if stat is not None else 0.0


# ---------------------------------------------------------------------------------------------
# 1. Duty cycle


def calibrate_spin(torch: Any, cycles: int, n: int = 20) -> float:
    """Milliseconds one ``torch.cuda._sleep(cycles)`` takes, from ``n`` back-to-back spins."""
    torch.cuda._sleep(cycles)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(n):
        torch.cuda._sleep(cycles)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / n


def make_duty_workload(torch: Any, plan: Any, records: list) -> Callable[[], None]:
    """One call runs the plan; its CUDA-event truth is appended to ``records``."""
    marker = torch.zeros(1, device="cuda")
    sleep_s = plan.sleep_ms / 1e3

    def run() -> None:
        event = lambda: torch.cuda.Event(enable_timing=True)  # noqa: E731
        window_start, window_end = event(), event()
        spans = [(event(), event()) for _ in range(plan.periods)]
        torch.cuda._sleep(plan.spin_cycles)  # the gate: window_start is stamped when it ends
        window_start.record()
        for begin, finish in spans:
            begin.record()
            torch.cuda._sleep(plan.spin_cycles)
            finish.record()
            finish.synchronize()
            time.sleep(sleep_s)
        marker.add_(1)  # a last tiny kernel: the GPU span then ends where the wall window ends
        window_end.record()
        window_end.synchronize()
        records.append({"window_ms": window_start.elapsed_time(window_end),
                        "spin_event_ms": [b.elapsed_time(f) for b, f in spans]})

    return run


def run_duty(torch: Any, args: argparse.Namespace, trace_dir: str, errors: list) -> dict[str, Any]:
    per_mcycle_ms = calibrate_spin(torch, CALIBRATION_CYCLES)
    cycles_per_ms = CALIBRATION_CYCLES / per_mcycle_ms
    rows = []
    for duty in DEFAULT_DUTIES:
        plan = plan_duty_cycle(duty, args.spin_ms, args.periods, cycles_per_ms)
        spin_ms = calibrate_spin(torch, plan.spin_cycles)
        label = f"duty_{round(duty * 100):02d}"
        row: dict[str, Any] = {"duty_pct": 100 * duty, "planned_busy_pct": plan.expected_busy_pct,
                               "spin_cycles": plan.spin_cycles, "spin_ms_calibrated": spin_ms,
                               "sleep_ms": plan.sleep_ms, "periods": plan.periods}
        records: list = []
        workload = make_duty_workload(torch, plan, records)
        ours = attempt(errors, f"{label}: ours", lambda: profile_ours(torch, workload, label, trace_dir, errors,
                                                                      runs=1, warmup=1))
        if ours is not None and records:
            truth = records[-1]
            row["window_ms"] = truth["window_ms"]
            row["truth_pct"] = truth_busy_pct([spin_ms] * plan.periods, truth["window_ms"])
            row["truth_events_pct"] = truth_busy_pct(truth["spin_event_ms"], truth["window_ms"])
            row["trace"] = os.path.relpath(ours["trace_path"], args.out)
            for key, trace in (("ours", ours["trace"]), ("ours_live", ours["live_trace"])):
                figures = attempt(errors, f"{label}: {key} analyze", lambda: _duty_figures(trace)) if trace else None
                if figures is not None:
                    row[f"{key}_truth_window_pct"], row[f"{key}_profiler_span_pct"], row[f"{key}_busy_ms"] = figures
        records.clear()
        run = attempt(errors, f"{label}: gpu_trace.run", lambda: gpu_trace_run(workload, label))
        if run is not None and records:
            # gpu_trace.run profiles its last call; its window is that call's wall time
            row["gpu_trace_run_pct"] = run.busy_pct
            row["gpu_trace_run_truth_pct"] = truth_busy_pct([spin_ms] * (plan.periods + 1), run.profiled_ms)
            row["gpu_trace_run_overhead"] = run.profiler_overhead
        records.clear()
        plugin = attempt(errors, f"{label}: --gpu-util", lambda: gpu_util_plugin_run(plan, trace_dir, label))
        if plugin is not None:
            row["plugin_pct"] = plugin["busy_pct"]
            # the spin length as calibrated in the pytest process itself, just before and after the test
            row["plugin_spin_ms"] = plugin["spin_ms"]
            row["plugin_truth_pct"] = truth_busy_pct([plugin["spin_ms"]] * (plan.periods + 1), plugin["wall_ms"])
            row["plugin_spin_slope_ms"] = plugin["spin_slope_ms"]
            row["plugin_slope_truth_pct"] = truth_busy_pct([plugin["spin_slope_ms"]] * (plan.periods + 1), plugin["wall_ms"])
        seed = attempt(errors, f"{label}: benchmark_utilization",
                       lambda: seed_benchmark_utilization(workload, label))
        if seed is not None and records:
            truth = records[-1]  # the profiled call is benchmark_utilization's last
            row["seed_pct"] = seed[0]
            # the seed sees the whole call: the gate spin, then the window
            row["seed_truth_pct"] = truth_busy_pct([spin_ms] * (plan.periods + 1), truth["window_ms"] + spin_ms)
        for key, truth_key in (("ours_truth_window_pct", "truth_pct"), ("ours_profiler_span_pct", "truth_pct"),
                               ("ours_live_truth_window_pct", "truth_pct"), ("seed_pct", "seed_truth_pct"),
                               ("gpu_trace_run_pct", "gpu_trace_run_truth_pct"), ("plugin_pct", "plugin_truth_pct")):
            row[key.replace("_pct", "_err_pts")] = error_points(row.get(key), row.get(truth_key))
        row["plugin_slope_err_pts"] = error_points(row.get("plugin_pct"), row.get("plugin_slope_truth_pct"))
        rows.append(row)
        print(f"  {label}: truth {row.get('truth_pct')}, ours {row.get('ours_truth_window_pct')}, "
              f"seed {row.get('seed_pct')}", file=sys.stderr)
    return {"spin_ms_per_1M_cycles": per_mcycle_ms, "rows": rows}


def gpu_trace_run(workload: Callable[[], None], label: str) -> Any:
    """The ``gpu_trace`` fixture's ``run`` on the workload (no pytest needed: it takes callbacks)."""
    from pytest_gpuutil.analysis.classify import KernelClassifier
    from pytest_gpuutil.fixtures import GpuTraceFixture, TestResults

    return GpuTraceFixture(TestResults(label), KernelClassifier(), lambda: True).run(workload, warmup=1, runs=1)


PLUGIN_TEST = """
import json, time, torch

def _back_to_back(cycles, n=20):
    torch.cuda._sleep(cycles)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(n):
        torch.cuda._sleep(cycles)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / n

def _calibrate(name):
    # 20 back-to-back spins under one event pair (one launch gap in 20), on the clock of this process
    # now; per spin that still holds the GPU's gap between two kernels. Spins of twice the cycles
    # give the slope, which holds no gap (nor the kernel's own fixed cost): the truth lies between.
    one, two = _back_to_back({cycles}), _back_to_back(2 * {cycles})
    with open(name, "w") as handle:
        json.dump({{"back_to_back": one, "slope": two - one}}, handle)

def test_1_calibrate_before():
    _calibrate("spin_before.json")

def test_2_duty():
    marker = torch.zeros(1, device="cuda")
    torch.cuda._sleep({cycles})
    for _ in range({periods}):
        torch.cuda._sleep({cycles})
        torch.cuda.synchronize()
        time.sleep({sleep_s})
    marker.add_(1)

def test_3_calibrate_after():
    _calibrate("spin_after.json")
"""


def gpu_util_plugin_run(plan: Any, trace_dir: str, label: str) -> dict[str, float]:
    """``pytest --gpu-util`` on a test that runs the plan (gate spin first); its busy % and wall ms."""
    import json
    import subprocess

    folder = os.path.join(trace_dir, f"plugin_{label}")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "test_duty.py"), "w") as handle:
        handle.write(PLUGIN_TEST.format(cycles=plan.spin_cycles, periods=plan.periods, sleep_s=plan.sleep_ms / 1e3))
    warm = os.path.join(folder, "test_warm.py")  # CUDA and the profiler start in this earlier test
    with open(warm, "w") as handle:
        handle.write("import torch\ndef test_a_warm():\n    torch.zeros(1, device='cuda').add_(1)\n")
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--gpu-util",
                          "--gpu-util-dir", os.path.join(folder, "out"), warm, os.path.join(folder, "test_duty.py")],
                         capture_output=True, text=True, cwd=folder)
    if res.returncode != 0:
        raise RuntimeError(res.stdout[-2000:] + res.stderr[-1000:])
    doc = json.load(open(os.path.join(folder, "out", "gpu_util.json")))
    record = next(t for t in doc["tests"] if t["test"].endswith("test_2_duty"))
    spins = [json.load(open(os.path.join(folder, name))) for name in ("spin_before.json", "spin_after.json")]
    return {"busy_pct": record["busy_pct"], "wall_ms": record["wall_ms"],
            "spin_ms": sum(s["back_to_back"] for s in spins) / len(spins),
            "spin_slope_ms": sum(s["slope"] for s in spins) / len(spins)}


def _duty_figures(trace: Any) -> tuple[float, float, float]:
    """(busy % over the truth window, busy % over the profiler span, busy ms), gate excluded."""
    from pytest_gpuutil import analyze

    workload, window = without_gate(trace)
    over_window = analyze(workload, window=window)
    return over_window.busy_pct, analyze(workload).busy_pct, over_window.busy_us / 1e3


DUTY_HEADERS = ["duty", "truth %", "ours %", "err pts", "ours live %", "err pts", "ours profiler-span %",
                "err pts", "gpu_trace.run truth %", "gpu_trace.run %", "err pts", "--gpu-util truth %",
                "--gpu-util %", "err pts", "--gpu-util slope truth %", "err pts", "seed truth %", "benchmark_utilization %",
                "err pts"]


def duty_table_rows(duty: dict[str, Any]) -> list[list[Any]]:
    return [[f"{r['duty_pct']:.0f} %", r.get("truth_pct"), r.get("ours_truth_window_pct"),
             r.get("ours_truth_window_err_pts"), r.get("ours_live_truth_window_pct"),
             r.get("ours_live_truth_window_err_pts"), r.get("ours_profiler_span_pct"),
             r.get("ours_profiler_span_err_pts"), r.get("gpu_trace_run_truth_pct"), r.get("gpu_trace_run_pct"),
             r.get("gpu_trace_run_err_pts"), r.get("plugin_truth_pct"), r.get("plugin_pct"), r.get("plugin_err_pts"),
             r.get("plugin_slope_truth_pct"), r.get("plugin_slope_err_pts"),
             r.get("seed_truth_pct"), r.get("seed_pct"), r.get("seed_err_pts")]
            for r in duty["rows"]]


# ---------------------------------------------------------------------------------------------
# 2. Categories


def category_workloads(torch: Any) -> list[tuple[str, str, Callable[[], Callable[[], Any]]]]:
    """(name, what to expect, builder); a builder returns the zero-argument workload."""
    F = torch.nn.functional
    dev = "cuda"

    def matmul(dtype: Any) -> Callable[[], Callable[[], Any]]:
        def build() -> Callable[[], Any]:
            a = torch.randn(4096, 4096, device=dev, dtype=dtype)
            b = torch.randn(4096, 4096, device=dev, dtype=dtype)
            return lambda: a @ b
        return build

    def conv() -> Callable[[], Any]:
        layer = torch.nn.Conv2d(64, 128, 3, padding=1).to(dev)
        x = torch.randn(32, 64, 56, 56, device=dev, requires_grad=True)

        def step() -> None:
            layer(x).sum().backward()
        return step

    def sdpa(backend_name: str) -> Callable[[], Callable[[], Any]]:
        def build() -> Callable[[], Any]:
            from torch.nn.attention import SDPBackend, sdpa_kernel

            backend = getattr(SDPBackend, backend_name)
            q, k, v = (torch.randn(8, 16, 2048, 64, device=dev, dtype=torch.bfloat16) for _ in range(3))

            def step() -> Any:
                with sdpa_kernel(backend):
                    return F.scaled_dot_product_attention(q, k, v, is_causal=True)
            step()  # raises here if the backend cannot run these inputs
            return step
        return build

    def lstm() -> Callable[[], Any]:
        net = torch.nn.LSTM(512, 512, num_layers=2).to(dev)
        x = torch.randn(64, 32, 512, device=dev)

        def step() -> None:
            out, _ = net(x)
            out.sum().backward()
        return step

    def compiled() -> Callable[[], Any]:
        x = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
        w = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)

        @torch.compile
        def f(x: Any, w: Any) -> Any:
            return torch.softmax(torch.relu(x @ w) * 0.01, dim=-1)
        return lambda: f(x, w)

    def train_step() -> Callable[[], Any]:
        nn = torch.nn
        model = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
                              nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
                              nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10)).to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        x = torch.randn(128, 3, 32, 32, device=dev)
        y = torch.randint(0, 10, (128,), device=dev)

        def step() -> None:
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(model(x), y).backward()
            opt.step()
        return step

    return [
        ("matmul_bf16_4096", "gemm ~100 % (cuBLAS nvjet_* on Hopper)", matmul(torch.bfloat16)),
        ("matmul_fp32_4096", "gemm ~100 %", matmul(torch.float32)),
        ("conv2d_fwd_bwd", "conv dominant", conv),
        ("sdpa_flash", "attention ~100 %", sdpa("FLASH_ATTENTION")),
        ("sdpa_efficient", "attention ~100 %", sdpa("EFFICIENT_ATTENTION")),
        ("sdpa_cudnn", "attention ~100 %", sdpa("CUDNN_ATTENTION")),
        ("sdpa_math", "gemm + softmax, no attention kernel", sdpa("MATH")),
        ("lstm_fwd_bwd", "gemm + cuDNN RNN kernels", lstm),
        ("compiled_mm_softmax", "gemm + triton_* kernels", compiled),
        ("cnn_train_step", "conv + normalization + optimizer", train_step),
    ]


def run_categories(torch: Any, args: argparse.Namespace, trace_dir: str, errors: list) -> list[dict[str, Any]]:
    from pytest_gpuutil import analyze

    rows = []
    for name, expect, build in category_workloads(torch):
        row: dict[str, Any] = {"workload": name, "expect": expect}
        rows.append(row)
        fn = attempt(errors, f"{name}: build", build)
        if fn is None:
            continue
        ours = attempt(errors, f"{name}: ours", lambda: profile_ours(torch, fn, name, trace_dir, errors,
                                                                     runs=3, warmup=3))
        if ours is not None:
            s = ours["summary"]
            row.update({
                "ours_busy_pct": s.busy_pct,
                "ours_mm_conv_share": share_pct(s.mm_conv_us, s.busy_us),
                "ours_attention_share": category_share(s, "attention"),
                "ours_categories": {c.name: round(c.share_of_busy, 2) for c in s.categories},
                "top_kernels": [{"name": k.name[:160], "category": k.category, "count": k.count,
                                 "total_us": k.total_us} for k in s.top_kernels[:TOP_KERNELS]],
                "trace": os.path.relpath(ours["trace_path"], args.out),
            })
            if ours["live_trace"] is not None:
                live = attempt(errors, f"{name}: live analyze", lambda: analyze(ours["live_trace"]))
                if live is not None:
                    row["ours_live_mm_conv_share"] = share_pct(live.mm_conv_us, live.busy_us)
                    row["ours_live_busy_us_vs_export"] = ratio(live.busy_us, s.busy_us)
        seed = attempt(errors, f"{name}: benchmark_utilization", lambda: seed_benchmark_utilization(fn, name, 3))
        if seed is not None:
            row.update({"seed_busy_pct": seed[0], "seed_mm_conv_pct": seed[1],
                        "seed_mm_conv_share": share_pct(seed[1], seed[0])})
        torch.cuda.empty_cache()
        print(f"  {name}: ours mm/conv {row.get('ours_mm_conv_share')}, attention {row.get('ours_attention_share')}, "
              f"seed mm/conv {row.get('seed_mm_conv_share')}", file=sys.stderr)
    return rows


CATEGORY_HEADERS = ["workload", "ours mm/conv % of busy", "ours attention % of busy", "seed mm/conv % of busy",
                    "ours busy %", "seed busy %", "top kernel (our category)"]


def category_table_rows(rows: list[dict[str, Any]]) -> list[list[Any]]:
    out = []
    for r in rows:
        top = r.get("top_kernels") or []
        first = f"{top[0]['name'][:60]} ({top[0]['category']})" if top else "-"
        out.append([r["workload"], r.get("ours_mm_conv_share"), r.get("ours_attention_share"),
                    r.get("seed_mm_conv_share"), r.get("ours_busy_pct"), r.get("seed_busy_pct"), first])
    return out


# ---------------------------------------------------------------------------------------------
# 3. Timing


def timing_workloads(torch: Any) -> list[tuple[str, Callable[[], Any], dict[str, Any], bool]]:
    """(name, fn, {bytes|flops}, cuda_graph)."""
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    src = torch.empty(64 * 2**20, device="cuda", dtype=torch.float32)  # 256 MiB
    dst = torch.empty_like(src)
    x = torch.randn(32 * 2**20, device="cuda", dtype=torch.float32)  # 128 MiB
    tiny = torch.zeros(1024, device="cuda")
    gelu = torch.nn.functional.gelu
    return [
        ("matmul_bf16_8192", lambda: a @ b, {"flops": 2 * n**3}, False),
        ("copy_256MiB", lambda: dst.copy_(src), {"bytes": 2 * src.numel() * 4}, False),
        ("gelu_128MiB", lambda: gelu(x), {"bytes": 2 * x.numel() * 4}, False),
        ("tiny_add_1k", lambda: tiny.add_(1), {}, False),
        ("tiny_add_1k_graph", lambda: tiny.add_(1), {}, True),
    ]


def timers_for(torch: Any, fn: Callable[[], Any], counts: dict[str, Any], graph: bool) -> dict[str, Callable[[], float]]:
    """name -> a callable returning one median in ms."""
    from pytest_gpuutil.capture.timing import bench

    def ours() -> float:
        return bench(fn, cuda_graph=graph, **counts).median

    def triton_median() -> float:
        import triton.testing

        if graph:
            return float(triton.testing.do_bench_cudagraph(fn, rep=100, return_mode="median"))
        return float(triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median"))

    def torch_timer() -> float:
        from torch.utils.benchmark import Timer

        return Timer(stmt="fn()", globals={"fn": fn}).blocked_autorange(min_run_time=0.2).median * 1e3

    names = ("gpuutil.bench" + ("(cuda_graph)" if graph else ""),
             "triton." + ("do_bench_cudagraph" if graph else "do_bench"), "torch Timer")
    return dict(zip(names, (ours, triton_median, torch_timer)))


def run_timing(torch: Any, args: argparse.Namespace, errors: list) -> dict[str, Any]:
    ceiling = attempt(errors, "copy ceiling", lambda: copy_ceiling_gbps(torch, mib=1024, reps=10))
    workloads = attempt(errors, "timing workloads", lambda: timing_workloads(torch)) or []
    rows = []
    for name, fn, counts, graph in workloads:
        timers = timers_for(torch, fn, counts, graph)
        values: dict[str, list[float]] = {t: [] for t in timers}
        for repeat in range(args.repeats):  # interleaved, so drift hits every timer alike
            for timer, measure in timers.items():
                value = attempt(errors, f"{name}: {timer} (repeat {repeat})", measure)
                if value is not None:
                    values[timer].append(value)
        for timer, vals in values.items():
            if not vals:
                continue
            stats = summarize_repeats(vals)
            row = {"workload": name, "timer": timer, "median_ms": stats["median"], "cv": stats["cv"],
                   "values_ms": vals}
            if "flops" in counts:
                row["tflops"] = counts["flops"] / (stats["median"] / 1e3) / 1e12
            if "bytes" in counts:
                row["gbps"] = counts["bytes"] / (stats["median"] / 1e3) / 1e9
                row["pct_of_copy_ceiling"] = share_pct(row["gbps"], ceiling)
            rows.append(row)
        ours_name = next(iter(timers))
        ours_median = next((r["median_ms"] for r in rows if r["workload"] == name and r["timer"] == ours_name), None)
        for r in rows:
            if r["workload"] == name:
                r["ours_over_this"] = ratio(ours_median, r["median_ms"])
        print(f"  {name}: " + ", ".join(f"{r['timer']} {r['median_ms']:.4f} ms" for r in rows if r["workload"] == name),
              file=sys.stderr)
    return {"copy_ceiling_gbps": ceiling, "rows": rows}


TIMING_HEADERS = ["workload", "timer", "median ms", "CV", "ours / this", "TFLOP/s", "GB/s", "% copy ceiling"]


def timing_table_rows(timing: dict[str, Any]) -> list[list[Any]]:
    return [[r["workload"], r["timer"], f"{r['median_ms']:.4f}", f"{r['cv']:.3f}", r.get("ours_over_this"),
             r.get("tflops"), r.get("gbps"), r.get("pct_of_copy_ceiling")] for r in timing["rows"]]


# ---------------------------------------------------------------------------------------------


def environment(torch: Any) -> dict[str, Any]:
    env = {"torch": torch.__version__, "cuda": torch.version.cuda, "gpu": torch.cuda.get_device_name(),
           "host": host_info()}
    with contextlib.suppress(Exception):
        import triton

        env["triton"] = triton.__version__
    return env


def render(data: dict[str, Any], table: Callable[..., str]) -> str:
    parts = []
    env = data["env"]
    parts.append(f"## Ground truth on {env.get('gpu')} (torch {env.get('torch')}, CUDA {env.get('cuda')}, "
                 f"triton {env.get('triton', '-')})")
    if "duty" in data:
        duty = data["duty"]
        parts += ["", f"### Duty cycle: busy % vs truth (spin {data['args']['spin_ms']} ms × {data['args']['periods']} "
                      f"periods; 1M cycles = {duty['spin_ms_per_1M_cycles']:.3f} ms)", "",
                  "ours: over the CUDA-event window; profiler-span: analyze()'s default window; seed truth: "
                  "the whole call (gate spin included), which benchmark_utilization divides by its unprofiled "
                  "wall time.", "",
                  table(DUTY_HEADERS, duty_table_rows(duty), digits=2)]
    if "categories" in data:
        parts += ["", "### Categories: share of busy time (%)", "",
                  table(CATEGORY_HEADERS, category_table_rows(data["categories"]), digits=1)]
    if "timing" in data:
        ceiling = data["timing"].get("copy_ceiling_gbps")
        parts += ["", f"### Timing: medians over {data['args']['repeats']} repeats "
                      f"(copy ceiling {ceiling and round(ceiling)} GB/s)", "",
                  table(TIMING_HEADERS, timing_table_rows(data["timing"]), digits=2)]
    if data["errors"]:
        parts += ["", f"### Errors ({len(data['errors'])})", ""]
        parts += [f"- {e['what']}: {e['error'].splitlines()[0][:200] if e['error'] else ''}" for e in data["errors"]]
    return "\n".join(parts)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="bench_out", help="output folder (default %(default)s)")
    parser.add_argument("--sections", default=",".join(SECTIONS), help="comma-separated subset of %(default)s")
    parser.add_argument("--periods", type=int, default=30, help="duty-cycle periods per workload")
    parser.add_argument("--spin-ms", type=float, default=1.0, help="spin kernel length per period (ms)")
    parser.add_argument("--repeats", type=int, default=5, help="timing repeats per timer")
    args = parser.parse_args(argv)
    sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    unknown = sorted(set(sections) - set(SECTIONS))
    if unknown:
        parser.error(f"--sections: unknown {', '.join(unknown)} (choose from {', '.join(SECTIONS)})")
    if args.periods < 1 or args.spin_ms <= 0 or args.repeats < 1:
        parser.error("--periods and --repeats must be >= 1, --spin-ms > 0")

    import torch

    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU")
    started = time.perf_counter()
    errors: list[dict[str, str]] = []
    trace_dir = os.path.join(args.out, "traces")
    data: dict[str, Any] = {"env": environment(torch), "args": vars(args), "errors": errors}
    if "duty" in sections:
        print("duty cycle ...", file=sys.stderr)
        data["duty"] = attempt(errors, "duty section", lambda: run_duty(torch, args, trace_dir, errors)) or {
            "spin_ms_per_1M_cycles": float("nan"), "rows": []}
    if "categories" in sections:
        print("categories ...", file=sys.stderr)
        data["categories"] = attempt(errors, "categories section",
                                     lambda: run_categories(torch, args, trace_dir, errors)) or []
    if "timing" in sections:
        print("timing ...", file=sys.stderr)
        data["timing"] = attempt(errors, "timing section", lambda: run_timing(torch, args, errors)) or {
            "copy_ceiling_gbps": None, "rows": []}
    data["runtime_s"] = time.perf_counter() - started
    json_path, md_path = write_results(args.out, "ground_truth", data, render(data, markdown_table))
    print(f"wrote {json_path} and {md_path} ({data['runtime_s']:.0f} s, {len(errors)} errors)")
    print(render(data, text_table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
