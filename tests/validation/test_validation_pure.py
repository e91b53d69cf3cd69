"""CPU tests of the validation helpers: the seed re-implementation, duty-cycle maths, the gate kernel."""
from __future__ import annotations

import gzip
import shutil

import pytest

from pytest_gpuutil import analyze, read_trace
from tests.helpers import DATA
from validation import ground_truth, seed_reference

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


@pytest.mark.parametrize("duty", ground_truth.DEFAULT_DUTIES)
def test_duty_plan_hits_its_duty(duty):
    plan = ground_truth.plan_duty_cycle(duty, spin_ms=1.0, periods=30, cycles_per_ms=1_923_000)
    assert plan.expected_busy_pct == pytest.approx(100 * duty)
    assert plan.total_ms == pytest.approx(30 / duty)
    assert plan.spin_cycles == 1_923_000


def test_duty_maths_values_and_errors():
    assert ground_truth.sleep_ms_for_duty(0.25, 0.5) == pytest.approx(1.5)
    assert ground_truth.sleep_ms_for_duty(1.0, 2.0) == 0.0
    assert ground_truth.cycles_for_ms(1.04, 2_000_000 / 1.04) == 2_000_000
    assert ground_truth.truth_busy_pct([0.5] * 10, 20.0) == pytest.approx(25.0)
    for bad in (0.0, 1.5, -0.1):
        with pytest.raises(ValueError, match="duty"):
            ground_truth.sleep_ms_for_duty(bad, 1.0)
    with pytest.raises(ValueError, match="periods"):
        ground_truth.plan_duty_cycle(0.5, 1.0, 0, 1e6)
    with pytest.raises(ValueError, match="cycles_per_ms"):
        ground_truth.cycles_for_ms(1.0, 0)
    with pytest.raises(ValueError, match="window"):
        ground_truth.truth_busy_pct([1.0], 0)


def test_duty_truth_on_recorded_traces_is_what_the_schedule_says():
    # the H200 recordings: 10 x (0.532 ms spin, sync, sleep); busy = 10 spins of the trace window
    for name in ("duty_cycle_25", "duty_cycle_75"):
        ours = analyze(read_trace(trace(name)))
        assert ours.busy_us / 10 == pytest.approx(505.6, abs=1.0)


# --- ground truth's gate kernel ------------------------------------------------------------


def test_without_gate_drops_the_first_kernel_and_windows_the_rest():
    from validation.ground_truth import without_gate
    from pytest_gpuutil import GpuEvent, Trace

    events = [GpuEvent("gate", "kernel", "0", "7", 0, 100), GpuEvent("a", "kernel", "0", "7", 300, 50),
              GpuEvent("b", "kernel", "0", "7", 500, 100)]
    trace, window = without_gate(Trace.from_events("t", events))
    assert [e.name for e in trace.events] == ["a", "b"]
    assert (window.start_ns, window.end_ns) == (100, 600)


# --- the history's false-alarm count (validation/history_noise.py) -------------------------------


def test_history_noise_counts_what_a_single_baseline_flags_and_the_history_rule_does_not():
    from pytest_gpuutil.records import TestRecord
    from validation import history_noise

    def run(noisy: float, steady: float) -> dict:
        return {t: TestRecord(t, "passed", kernel_bench={"k": {"median": v, "unit": "ms"}})
                for t, v in (("s/test_suite.py::test_kb_small", noisy), ("s/test_suite.py::test_other", steady))}

    unchanged = [run(v, 1.0) for v in (1.0, 1.3, 0.8, 1.2, 0.9, 1.25, 0.85)]  # noisy, never slower
    slowed = run(5.0, 1.0)
    counts = history_noise.count(unchanged, slowed)
    entry = counts["limits"]["kernel_bench.median:10%"]
    assert counts["runs_judged"] == 4  # the 4th run on: 3 earlier runs each
    assert entry["single_baseline_flags"] == 2 and entry["history_flags"] == 0  # 0.8 -> 1.2 and 0.9 -> 1.25: avoided
    assert entry["slowed"]["history_caught"] == ["s/test_suite.py::test_kb_small"] and entry["slowed"]["history_other"] == []
