"""Each finding's saving_ms, from its evidence by its rule's basis, on the real H100 recordings and on
drawn windows; the floor; gpu-idle's naming of its time before the first kernel."""
from __future__ import annotations

import argparse

import pytest

from pytest_gpuutil.analysis.finding_records import DEFAULT_FLOOR, Finding, Floor, split_by_floor
from pytest_gpuutil.analysis.findings import find, find_in_trace
from pytest_gpuutil.analysis.rules import RULES_BY_ID
from pytest_gpuutil.machine.peaks import findings_figures as device_figures
from pytest_gpuutil.option_types import findings_floor
from pytest_gpuutil.traces.model import GpuColumns, GpuEvent, Window
from pytest_gpuutil.traces.reader import read_trace
from tests.analysis.test_findings_traces import FINDINGS, TRACES, live_window

MS, US = 1_000_000, 1_000


def estimate(rule: str, name: str) -> float:
    return RULES_BY_ID[rule].estimates[name].value


def by_rule(name: str, **context: float) -> dict[str, Finding]:
    trace = read_trace(FINDINGS / f"{name}.json.gz")
    from pytest_gpuutil.analysis.summary import choose_window

    found = find(trace.columns, choose_window(trace, None), syncs=trace.syncs, context=context)
    return {f.rule: f for f in found}


def test_pageable_copies_save_their_time_less_the_same_bytes_at_the_pinned_bandwidth() -> None:
    f = by_rule("pageable_copies")["pageable-memcpy"]
    total_ms, copies = f.evidence["total_us"] / 1000, f.evidence["copies"]
    moving = total_ms - copies * estimate("pageable-memcpy", "copy_latency_us") / 1000
    held_ms = f.evidence["held_idle_us"] / 1000  # the GPU idle next to the copies while the host staged them
    assert f.saving_ms == pytest.approx(moving * (1 - 11 / 48) + held_ms, abs=0.001)
    # the recording's pinned copies of the same bytes took 1.7 ms: the bandwidth part is what pinning measured
    pinned_ms = 1.720  # tests/data/findings/FINDINGS.md: pinned_copies, 10 copies
    assert f.saving_ms - held_ms == pytest.approx(total_ms - pinned_ms, rel=0.05)
    # the windows: pageable 19.4 ms, pinned 11.2 ms (FINDINGS.md): 8.2 ms saved, the estimate within 15 %
    assert f.saving_ms == pytest.approx(19.4 - 11.2, rel=0.15)
    events, window, syncs, cutoff = live_window("pageable_copies")  # the live windows: 12.6 and 7.4 ms
    live = {x.rule: x for x in find(events, window, syncs=syncs, sync_end_ns=cutoff)}["pageable-memcpy"]
    assert live.saving_ms == pytest.approx(window.duration_ns / MS - live_window("pinned_copies")[1].duration_ns / MS,
                                           rel=0.1)
    measured = by_rule("pageable_copies", pinned_gbps=96.0)["pageable-memcpy"]  # a faster host link, measured
    assert measured.saving_ms > f.saving_ms and "at 96 GB/s pinned" in measured.saving_basis


def test_pageable_copies_that_hold_the_host_save_the_idle_they_cause() -> None:
    """A window where staging each pageable copy leaves the GPU idle before it (48 copies of 8 MB
    and 96 matmuls, 29 % busy in ~249 ms; pinned, ~24 ms): counting the idle next to the copies
    comes within 2x. (Issue 42 took its pair to be this; on an H100 that pair's idle was the
    comparison's first run instead: test_pageable_pair_h100.py.)"""
    events, t = [], 2 * MS
    for _ in range(48):
        t += 3_700 * US  # the host stages the next batch; the GPU has nothing to do
        events.append(GpuEvent("Memcpy HtoD (Pageable -> Device)", "gpu_memcpy", "0", "7", t, 1_190 * US))
        t += 1_190 * US + 5 * US
        for _ in range(2):
            events.append(GpuEvent("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "kernel", "0", "7", t, 155 * US))
            t += 157 * US
    window = Window(0, t + 1 * MS, "test_call")
    f = {x.rule: x for x in find(GpuColumns.from_events(events), window)}["pageable-memcpy"]
    busy = sum(e.dur_ns for e in events) / window.duration_ns
    assert window.duration_ns / MS == pytest.approx(249, rel=0.02) and busy == pytest.approx(0.29, abs=0.02)
    measured = window.duration_ns / MS - 24.2
    assert 0.5 <= f.saving_ms / measured <= 2.0, (f.saving_ms, measured)
    assert "while the host staged them" in f.message


def test_fp32_matmuls_save_their_time_less_the_same_flops_at_the_tf32_rate() -> None:
    matmul = by_rule("fp32_matmul")["fp32-matmul"]
    assert matmul.saving_ms == pytest.approx(matmul.evidence["total_us"] / 1000 * (1 - 1 / 7.4), abs=0.01)
    # the recording's TF32 run of twice the matmuls took 13.4 ms: 20 of them 6.7 ms, 46 ms saved
    assert matmul.saving_ms == pytest.approx(52.67 - 13.44 / 2, rel=0.02)
    conv = by_rule("fp32_conv")["fp32-matmul"]
    conv_ms = 14.148  # the conv kernels' share; the rest of the window is elementwise work
    assert conv.saving_ms == pytest.approx(conv_ms * (1 - 1 / 2.3), rel=0.01)
    l4 = by_rule("fp32_matmul", **device_figures("NVIDIA L4"))["fp32-matmul"]  # TF32 only 2x fp32 there
    assert l4.saving_ms == pytest.approx(matmul.evidence["total_us"] / 1000 * (1 - 30.3 / 60), rel=0.01)


def test_device_figures_come_from_the_peaks_table() -> None:
    assert device_figures("NVIDIA H200")["gemm_speedup"] == pytest.approx(494.7 / 67)
    assert device_figures("NVIDIA H100 PCIe")["gemm_speedup"] == pytest.approx(378 / 51)
    assert device_figures("Some Future GPU") == {} == device_figures(None) == device_figures("Tesla T4")


def test_host_syncs_save_the_idle_after_all_waits_but_one() -> None:
    f = by_rule("sync_in_loop")["host-sync"]
    waits, idle_ms = f.evidence["waits"], f.evidence["idle_after_us"] / 1000
    assert f.saving_ms == pytest.approx(idle_ms * (waits - 1) / waits, abs=0.001)


def test_launch_bound_saves_the_idle_between_kernels_less_a_graphs_per_launch_floor() -> None:
    events, window, syncs, cutoff = live_window("small_kernels")
    f = {x.rule: x for x in find(events, window, syncs=syncs, sync_end_ns=cutoff)}["launch-bound"]
    floor_ms = f.evidence["kernels"] * estimate("launch-bound", "graph_gap_us") / 1000
    assert f.saving_ms == pytest.approx(f.evidence["idle_between_us"] / 1000 - floor_ms, abs=0.001)
    assert 0 < f.saving_ms < window.duration_ns / MS


def test_gpu_idle_saves_its_parts_and_names_its_time_before_the_first_kernel() -> None:
    f = by_rule("idle_before")["gpu-idle"]
    parts = sum(f.evidence[k] for k in ("idle_before_us", "idle_between_us", "idle_after_us")) / 1000
    assert f.evidence["before"] == "host-work" and f.saving_ms == pytest.approx(parts, abs=0.001)
    assert "the test's own host work" in f.message and "fixture" in f.fix
    for context, cause, words in ((dict(first_gpu_work=1.0), "cuda-init", "CUDA context"),
                                  (dict(cuda_came_up=1.0), "cuda-init", "CUDA context"),
                                  (dict(first_library_use=1.0), "library-init", "cuBLAS/cuDNN/NCCL"),
                                  (dict(child_startup_ms=300.0, first_gpu_work=1.0), "child-process", "child process")):
        named = by_rule("idle_before", **context)["gpu-idle"]
        assert named.evidence["before"] == cause and words in named.message, cause
        once = cause in ("cuda-init", "library-init")  # paid once per process: nothing saved for the run
        expected = parts - (f.evidence["idle_before_us"] / 1000 if once else 0)
        assert named.saving_ms == pytest.approx(expected, abs=0.001), cause
        assert ("paid once per process" in named.fix) == once


def test_gpu_idle_leaves_the_time_between_kernels_to_launch_bound_and_host_sync() -> None:
    """A window where both fire: the idle between kernels is counted once, by launch-bound."""
    tiny = [GpuEvent("vectorized_elementwise_kernel", "kernel", "0", "7", 10 * MS + i * 8 * US, 2 * US)
            for i in range(1000)]
    found = {f.rule: f for f in find(GpuColumns.from_events(tiny), Window(0, 40 * MS, "test_call"))}
    idle = found["gpu-idle"]
    assert set(found) == {"launch-bound", "gpu-idle"} and idle.evidence["mostly"] == "after"
    expected = (idle.evidence["idle_before_us"] + idle.evidence["idle_after_us"]) / 1000
    assert idle.saving_ms == pytest.approx(expected, abs=0.01) and "launch-bound or host-sync counts" in idle.saving_basis


@pytest.mark.parametrize("name", TRACES)
def test_every_finding_on_every_recording_has_a_saving_within_its_window(name: str) -> None:
    trace = read_trace(FINDINGS / f"{name}.json.gz")
    for f in find_in_trace(trace):
        assert 0 <= f.saving_ms and f.saving_basis and f.saving_basis.endswith(("ms", "µs", "(an upper bound)")), f
        window_ms = f.saving_ms * 100 / f.saving_pct if f.saving_pct else 0
        assert f.saving_ms <= window_ms + 1e-6 and f.severity in ("high", "medium", "low")


def test_the_floor_splits_reported_from_kept() -> None:
    small = Finding("gpu-idle", "low", "m", "f", saving_ms=0.9, saving_pct=50)
    share = Finding("host-sync", "low", "m", "f", saving_ms=30, saving_pct=1.5)
    big = Finding("launch-bound", "high", "m", "f", saving_ms=30, saving_pct=30)
    assert split_by_floor((small, share, big)) == ((big,), (small, share))
    assert split_by_floor((small, share, big), Floor(0, 0)) == ((small, share, big), ())
    assert DEFAULT_FLOOR == Floor(1.0, 2.0) and DEFAULT_FLOOR.text == "1 ms and 2 % of the test's time"
    assert Finding.from_dict(big.to_dict()) == big


@pytest.mark.parametrize("text,floor", [("1ms,2%", Floor(1, 2)), ("5%", Floor(1, 5)), ("0.5ms", Floor(0.5, 2)),
                                        ("0", Floor(0, 0)), (" 3 ms 4 % ", None)])
def test_the_floor_option_reads_ms_and_percent(text: str, floor: Floor) -> None:
    if floor is None:
        with pytest.raises(argparse.ArgumentTypeError, match="expected MSms and/or PCT%"):
            findings_floor(text)
    else:
        assert findings_floor(text) == floor
    for bad in ("", "1s", "ms", "-1ms"):
        with pytest.raises(argparse.ArgumentTypeError):
            findings_floor(bad)
