"""CPU tests of the benchmark helpers: the seed re-implementation, duty-cycle maths, reports,
and the synthetic trace generator."""
from __future__ import annotations

import gzip
import json
import math
import shutil
from pathlib import Path

import pytest

from benchmarks import bench_analyze_speed, duty_cycle, report, seed_reference
from benchmarks.make_synthetic_trace import write_synthetic_trace
from pytest_gpuutil import analyze, read_trace
from tests.helpers import DATA

ALL_TRACES = sorted(p.stem.replace(".json", "") for p in DATA.glob("*.json.gz"))


def trace(name: str) -> str:
    return str(DATA / f"{name}.json.gz")


# --- the seed re-implementation ---------------------------------------------------------------


@pytest.mark.parametrize("name", [n for n in ALL_TRACES if n != "user_annotations" and not n.startswith("nccl")])
def test_seed_busy_matches_ours_without_annotations(name):
    _, _, seed_busy_us = seed_reference.seed_compute_utilization(trace(name))
    ours = analyze(read_trace(trace(name)))
    # the seed sums float µs; ours is exact integer ns: they agree to float rounding
    assert seed_busy_us == pytest.approx(ours.busy_us, abs=0.01)


def test_seed_misses_hopper_cublas_matmuls():
    busy_pct, mm_conv_pct, busy_us = seed_reference.seed_compute_utilization(trace("bmm_bf16"))
    ours = analyze(read_trace(trace("bmm_bf16")))
    assert busy_us == pytest.approx(172.063, abs=0.01)  # TRACES.md reference (the seed sums floats)
    assert busy_pct == pytest.approx(ours.busy_pct, abs=0.01)
    assert mm_conv_pct == 0.0  # nvjet_* has no "gemm" in its name
    assert ours.mm_conv_pct > 0.9 * ours.busy_pct


def test_seed_counts_memory_efficient_attention_as_matmul():
    busy_pct, mm_conv_pct, _ = seed_reference.seed_compute_utilization(trace("sdpa_efficient"))
    assert mm_conv_pct == pytest.approx(busy_pct)  # fmha_cutlassF_* matches "cutlass"
    assert analyze(read_trace(trace("sdpa_efficient"))).mm_conv_pct == 0.0


def test_seed_overcounts_gpu_user_annotations():
    busy_pct, _, busy_us = seed_reference.seed_compute_utilization(trace("user_annotations"))
    ours = analyze(read_trace(trace("user_annotations")))
    assert round(ours.busy_us * 1000) == 979_937  # TRACES.md reference, to the nanosecond
    assert busy_us > ours.busy_us + 30  # the annotation ranges reach past the kernels
    assert busy_pct > ours.busy_pct


def test_seed_gpu_pids_come_from_process_labels():
    events = seed_reference.get_chrome_trace_events(trace("bmm_bf16"))
    pids = seed_reference.get_gpu_pids(events)
    labels = [e for e in events if e.get("name") == "process_labels"]
    assert pids == [e["pid"] for e in labels if "GPU" in e["args"]["labels"]]
    assert len(pids) >= 8 and all(isinstance(p, int) for p in pids)


def test_seed_union_loop_matches_the_seed_semantics():
    events = [{"ph": "X", "pid": 0, "ts": ts, "dur": dur, "name": n}
              for ts, dur, n in [(10.0, 5.0, "a"), (0.0, 4.0, "gemm"), (12.0, 1.0, "b"), (3.0, 2.0, "conv")]]
    ordered = seed_reference.get_sorted_gpu_events(events, [0])
    assert [e["ts"] for e in ordered] == [0.0, 3.0, 10.0, 12.0]
    assert seed_reference.get_duration(ordered) == 10.0  # [0,5) + [10,15)
    assert seed_reference.get_duration(seed_reference.get_sorted_gpu_mm_conv_events(events, [0])) == 5.0
    assert seed_reference.get_duration(seed_reference.get_sorted_gpu_events(events, [1])) == 0


def test_seed_compute_utilization_divides_by_total_length(tmp_path):
    plain = tmp_path / "bmm.json"
    with gzip.open(trace("bmm_bf16"), "rb") as src, open(plain, "wb") as dst:
        shutil.copyfileobj(src, dst)
    util, mm_conv = seed_reference.compute_utilization(str(plain), total_length=0.001)
    assert util == pytest.approx(172.063 / 1000, abs=1e-5)  # a plain .json reads the same
    assert mm_conv == 0.0
    assert seed_reference.seed_compute_utilization(str(plain), total_length_s=0.001)[0] == pytest.approx(100 * util)


def test_seed_handles_a_trace_with_no_gpu_work():
    busy_pct, mm_conv_pct, busy_us = seed_reference.seed_compute_utilization(trace("idle_no_gpu_work"))
    assert (busy_pct, mm_conv_pct, busy_us) == (0.0, 0.0, 0.0)


# --- duty-cycle maths -------------------------------------------------------------------------


@pytest.mark.parametrize("duty", duty_cycle.DEFAULT_DUTIES)
def test_duty_plan_hits_its_duty(duty):
    plan = duty_cycle.plan_duty_cycle(duty, spin_ms=1.0, periods=30, cycles_per_ms=1_923_000)
    assert plan.expected_busy_pct == pytest.approx(100 * duty)
    assert plan.total_ms == pytest.approx(30 / duty)
    assert plan.spin_cycles == 1_923_000


def test_duty_maths_values_and_errors():
    assert duty_cycle.sleep_ms_for_duty(0.25, 0.5) == pytest.approx(1.5)
    assert duty_cycle.sleep_ms_for_duty(1.0, 2.0) == 0.0
    assert duty_cycle.cycles_for_ms(1.04, 2_000_000 / 1.04) == 2_000_000
    assert duty_cycle.truth_busy_pct([0.5] * 10, 20.0) == pytest.approx(25.0)
    for bad in (0.0, 1.5, -0.1):
        with pytest.raises(ValueError, match="duty"):
            duty_cycle.sleep_ms_for_duty(bad, 1.0)
    with pytest.raises(ValueError, match="periods"):
        duty_cycle.plan_duty_cycle(0.5, 1.0, 0, 1e6)
    with pytest.raises(ValueError, match="cycles_per_ms"):
        duty_cycle.cycles_for_ms(1.0, 0)
    with pytest.raises(ValueError, match="window"):
        duty_cycle.truth_busy_pct([1.0], 0)


def test_duty_truth_on_recorded_traces_is_what_the_schedule_says():
    # the H200 recordings: 10 x (0.532 ms spin, sync, sleep); busy = 10 spins of the trace window
    for name in ("duty_cycle_25", "duty_cycle_75"):
        ours = analyze(read_trace(trace(name)))
        assert ours.busy_us / 10 == pytest.approx(505.6, abs=1.0)


# --- report helpers ---------------------------------------------------------------------------


def test_statistics_helpers():
    assert report.median([3.0, 1.0, 2.0]) == 2.0
    assert report.cv([2.0, 2.0, 2.0]) == 0.0
    assert report.cv([1.0, 3.0]) == pytest.approx(math.sqrt(2) / 2)
    assert report.cv([5.0]) == 0.0
    assert report.ratio(1.0, 4.0) == 0.25 and report.ratio(1.0, 0) is None and report.ratio(None, 1) is None
    assert report.error_points(26.5, 25.0) == pytest.approx(1.5)
    assert report.error_points(None, 25.0) is None
    assert report.share_pct(1.0, 4.0) == 25.0
    stats = report.summarize_repeats([1.0, 2.0, 4.0])
    assert (stats["median"], stats["min"], stats["max"]) == (2.0, 1.0, 4.0)
    with pytest.raises(ValueError):
        report.median([])


def test_markdown_table_formats_cells():
    text = report.markdown_table(["a", "b"], [[1.23456, None], ["x", 2]], digits=2)
    lines = text.splitlines()
    assert lines[0].startswith("| a") and set(lines[1]) <= {"|", "-", ":"}
    assert "1.23" in lines[2] and "1.2346" not in lines[2] and "-" in lines[2]
    assert "| x" in lines[3]


def test_attempt_records_errors_and_goes_on(capsys):
    errors: list = []
    assert report.attempt(errors, "ok", lambda: 5) == 5
    assert report.attempt(errors, "boom", lambda: 1 / 0) is None
    assert errors[0]["what"] == "boom" and "ZeroDivisionError" in errors[0]["error"]
    assert "boom" in capsys.readouterr().err


def test_write_results(tmp_path):
    json_path, md_path = report.write_results(str(tmp_path / "out"), "x", {"v": 1.5, "nan": float("nan")}, "# hi")
    assert json.loads(Path(json_path).read_text().replace("NaN", "null"))["v"] == 1.5
    assert Path(md_path).read_text() == "# hi\n"


# --- synthetic trace --------------------------------------------------------------------------


@pytest.mark.parametrize("gzipped", [False, True])
def test_synthetic_trace_reads_back(tmp_path, gzipped):
    path = tmp_path / ("synthetic_trace.json.gz" if gzipped else "synthetic_trace.json")
    stats = write_synthetic_trace(str(path), steps=1000, gzipped=gzipped)
    assert stats.events >= 5 * 1000 and stats.kernels >= 1000
    parsed = read_trace(str(path))
    assert len(parsed.events) == stats.gpu_work_events
    assert parsed.profiler_span is not None
    summary = analyze(parsed)
    assert 0 < summary.busy_pct < 100 and summary.mm_conv_pct > 0
    # the seed counts the gpu_user_annotation ranges over idle gaps too
    _, _, seed_busy_us = seed_reference.seed_compute_utilization(str(path))
    assert seed_busy_us > 1.5 * summary.busy_us


def test_synthetic_trace_default_size_is_big_enough():
    # events per step are fixed by the generator: check the default reaches the benchmark's floor
    from benchmarks.make_synthetic_trace import DEFAULT_STEPS, iter_events

    per_1000 = sum(1 for _ in iter_events(1000))
    assert per_1000 * DEFAULT_STEPS / 1000 >= 150_000


def test_bench_analyze_speed_report_flags_goals(tmp_path):
    sides = {
        side: {"best_wall_s": wall, "wall_s": [wall], "peak_rss_mb": rss, "rss_after_imports_mb": 20.0,
               "tracemalloc_peak_mb": rss - 20, "maxrss_mb": [rss],
               "result": {"busy_us": 1.0, "busy_pct": 2.0, "mm_conv_pct": 0.5}}
        for side, wall, rss in (("ours", 0.1, 100.0), ("seed", 1.0, 200.0))
    }
    path = tmp_path / "synthetic_trace.json"
    path.write_text("{}")
    data, markdown, table = bench_analyze_speed.build_report(str(path), "synthetic", sides)
    assert data["time_ratio"] == pytest.approx(0.1) and data["verdict"]["time_ratio_ok"]
    assert data["verdict"]["peak_rss_ok"] and "synthetic" in markdown and "0.100" in table


def test_without_gate_drops_the_first_kernel_and_windows_the_rest():
    from benchmarks.ground_truth import without_gate
    from pytest_gpuutil import GpuEvent, Trace

    events = [GpuEvent("gate", "kernel", "0", "7", 0, 100), GpuEvent("a", "kernel", "0", "7", 300, 50),
              GpuEvent("b", "kernel", "0", "7", 500, 100)]
    trace, window = without_gate(Trace.from_events("t", events))
    assert [e.name for e in trace.events] == ["a", "b"]
    assert (window.start_ns, window.end_ns) == (100, 600)
