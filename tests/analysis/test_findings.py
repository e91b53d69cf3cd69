"""The findings engine on windows built event by event: what each rule reads, its limits, its silence.

The rules on real traces recorded on a GPU are in test_findings_traces.py.
"""
from __future__ import annotations

import json
from typing import Any

import pytest

from pytest_gpuutil.analysis.classify import KernelClassifier
from pytest_gpuutil.analysis.finding_records import Finding, severity_of
from pytest_gpuutil.analysis.findings import RULE_IDS, find, parse_rule_ids
from pytest_gpuutil.analysis.rules import RULES, RULES_BY_ID, is_fp32_gemm
from pytest_gpuutil.analysis.window_facts import WindowFacts
from pytest_gpuutil.traces.model import GpuColumns, GpuEvent, SyncColumns, Window

US = 1000
MS = 1_000_000
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>>"
GEMM_BF16 = "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"
SGEMM = "void cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nn_align1>(cutlass_80_simt_sgemm_256x128_8x4_nn_align1::Params)"
TF32 = "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x256x32_warpgroupsize2x1x1_execute_segment_k_off_kernel"


def ev(name: str, start: int, dur: int, kind: str = "kernel", device: int = 0, stream: int = 7) -> GpuEvent:
    return GpuEvent(name, kind, device, stream, start, dur)


def cols(*events: GpuEvent) -> GpuColumns:
    return GpuColumns.from_events(events)


def window(end: int, start: int = 0) -> Window:
    return Window(start, end, "test_call")


def rules_of(found: tuple[Finding, ...]) -> list[str]:
    return [f.rule for f in found]


def back_to_back(name: str, count: int, dur: int, gap: int, start: int = 0, **kw: Any) -> list[GpuEvent]:
    return [ev(name, start + i * (dur + gap), dur, **kw) for i in range(count)]


# -- the facts ------------------------------------------------------------------------------------

def test_idle_time_is_split_before_between_and_after_per_device() -> None:
    events = cols(ev("a", 2 * MS, 1 * MS), ev("b", 5 * MS, 1 * MS), ev("c", 4 * MS, 4 * MS, device=1),
                  ev("d", 6 * MS, 1 * MS, device=1))  # d inside c on device 1
    facts = WindowFacts(events, window(10 * MS), KernelClassifier())
    t = facts.timeline
    assert t.devices == 2 and t.busy_ns == 6 * MS
    assert (t.idle_before_ns, t.idle_between_ns, t.idle_after_ns) == (6 * MS, 2 * MS, 6 * MS)
    assert t.idle_ns + t.busy_ns == 20 * MS and facts.busy_pct == 30.0
    assert t.gaps_ns == (2 * MS,)
    assert (t.any_busy_starts, t.any_busy_ends) == ([2 * MS, 4 * MS], [3 * MS, 8 * MS])


def test_events_are_clipped_to_the_window_as_analyze_clips_them() -> None:
    events = cols(ev("before", 0, 1 * MS), ev("touching", 1 * MS, 1 * MS), ev("across", 3 * MS, 4 * MS),
                  ev("after", 11 * MS, 1 * MS))
    facts = WindowFacts(events, window(10 * MS, start=2 * MS), KernelClassifier())
    assert facts.event_count == 1  # "touching" ends where the window starts: not in it
    assert facts.timeline.busy_ns == 4 * MS and facts.kernel_lengths == [4 * MS]


def test_waits_are_merged_and_charged_the_gpu_idle_that_follows_them() -> None:
    events = cols(ev("k1", 0, 100 * US), ev("k2", 300 * US, 100 * US), ev("k3", 450 * US, 50 * US))
    syncs = SyncColumns(["cudaStreamSynchronize", "Stream Sync", "cudaDeviceSynchronize", "cudaStreamSynchronize"],
                        [10 * US, 20 * US, 390 * US, 520 * US], [90 * US, 79 * US, 5 * US, 10 * US])
    facts = WindowFacts(events, window(1 * MS), KernelClassifier(), syncs)
    waits = facts.waits
    assert waits.count == 3  # the runtime call and its "Stream Sync" record are one wait
    # after the first wait (ends at 100 µs) the GPU idles until 300 µs; the second ends 5 µs before
    # k2 does in the records (the clocks a few µs apart): the GPU idles from k2's end to k3's start;
    # nothing follows the third
    assert waits.idle_after_ns == 200 * US + 50 * US
    assert dict(waits.by_name) == {"cudaStreamSynchronize": 2, "Stream Sync": 1, "cudaDeviceSynchronize": 1}
    assert waits.worst[0] == (10 * US, 100 * US, 200 * US)


def test_the_captures_own_closing_sync_is_not_the_tests() -> None:
    syncs = SyncColumns(["Context Sync"] * 2, [100 * US, 900 * US], [10 * US, 50 * US])
    facts = WindowFacts(cols(ev("k", 0, 10 * US)), window(1 * MS), KernelClassifier(), syncs, sync_end_ns=880 * US)
    assert [row[1] for row in facts.sync_rows] == [100 * US]


def test_totals_go_by_name_and_kind_with_clipped_time() -> None:
    events = cols(ev("x", 0, 10), ev("x", 20, 10), ev("x", 40, 10, kind="gpu_memcpy"), ev("y", 60, 10))
    facts = WindowFacts(events, window(65), KernelClassifier())
    rows = facts.totals([True, True, False])
    assert [(r.name, r.kind, r.count, r.total_ns) for r in rows] == [("x", "kernel", 2, 20), ("x", "gpu_memcpy", 1, 10)]


# -- each rule: a problem, a healthy control, the limits ------------------------------------------

def test_pageable_memcpy_fires_on_pageable_copies_not_on_pinned_ones() -> None:
    def copies(memory: str) -> GpuColumns:
        return cols(*(ev(f"Memcpy HtoD ({memory} -> Device)", i * 2 * MS, 1 * MS, kind="gpu_memcpy") for i in range(5)),
                    ev(GEMM_BF16, 10 * MS, 2 * MS))
    found = find(copies("Pageable"), window(12 * MS))
    assert rules_of(found) == ["pageable-memcpy"]
    finding = found[0]
    assert finding.evidence["copies"] == 5 and finding.evidence["total_us"] == 5000
    assert finding.evidence["share_of_busy_pct"] == pytest.approx(71.4, abs=0.1)
    assert "5 copies" in finding.message and "pin the host memory" in finding.fix
    # pinned copies are not pageable-memcpy's; that copies are most of the GPU's work is memcpy-dominant's
    assert rules_of(find(copies("Pinned"), window(12 * MS))) == ["memcpy-dominant"]


def test_pageable_memcpy_leaves_tiny_copies_alone() -> None:
    scalars = [ev("Memcpy DtoH (Device -> Pageable)", i * 20 * US, 2 * US, kind="gpu_memcpy") for i in range(200)]
    assert "pageable-memcpy" not in rules_of(find(cols(*scalars), window(4 * MS)))


def test_host_sync_fires_when_the_gpu_idles_after_many_waits() -> None:
    kernels, waits = [], []
    for i in range(50):  # each step: a 20 µs kernel, the host waits for it, then 40 µs to launch the next
        start = i * 60 * US
        kernels.append(ev(GEMM_BF16, start, 20 * US))
        waits.append((start + 5 * US, 16 * US))
    syncs = SyncColumns(["cudaStreamSynchronize"] * 50, [w[0] for w in waits], [w[1] for w in waits])
    found = find(cols(*kernels), window(3 * MS), syncs=syncs)
    assert "host-sync" in rules_of(found)
    finding = next(f for f in found if f.rule == "host-sync")
    assert finding.evidence["waits"] == 50 and finding.evidence["by_name"] == {"cudaStreamSynchronize": 50}
    assert finding.evidence["idle_after_us"] == pytest.approx(49 * 39, abs=1)
    assert finding.impact_pct == pytest.approx(100 * 49 * 39 / 3000, abs=0.01)
    # one wait instead of 50: 49/50 of the idle after them comes back (1.87 ms of a 3 ms window)
    assert finding.saving_ms == pytest.approx(49 * 39 / 1000 * 49 / 50, abs=0.001)
    assert finding.saving_pct == pytest.approx(100 * 49 * 39 * 49 / 50 / 3000, abs=0.01)
    assert finding.severity == "low"  # under 3 ms: little at stake, however large its share
    assert "one wait instead of 50" in finding.saving_basis
    assert "gpu-idle" not in rules_of(found)  # the idle is between kernels: host-sync says why


def test_host_sync_is_silent_without_waits_few_waits_or_a_busy_gpu() -> None:
    kernels = [ev(GEMM_BF16, i * 60 * US, 20 * US) for i in range(50)]
    assert "host-sync" not in rules_of(find(cols(*kernels), window(3 * MS)))  # no waits recorded: no guess
    few = SyncColumns(["cudaStreamSynchronize"] * 9, [i * 60 * US + 5 * US for i in range(9)], [16 * US] * 9)
    assert "host-sync" not in rules_of(find(cols(*kernels), window(3 * MS), syncs=few))
    busy = [ev(GEMM_BF16, i * 60 * US, 59 * US) for i in range(50)]  # the next work is queued: no idle after
    many = SyncColumns(["cudaStreamSynchronize"] * 50, [i * 60 * US + 5 * US for i in range(50)], [50 * US] * 50)
    assert "host-sync" not in rules_of(find(cols(*busy), window(3 * MS), syncs=many))


def test_launch_bound_fires_on_many_tiny_kernels_with_launch_gaps() -> None:
    tiny = back_to_back(ADD, 1000, 2 * US, 6 * US)
    found = find(cols(*tiny), window(8 * MS))
    assert rules_of(found) == ["launch-bound"]  # gpu-idle's idle is between kernels: launch-bound says why
    assert found[0].evidence["median_kernel_us"] == 2 and found[0].evidence["median_gap_us"] == 6
    # idle between (999 gaps of 6 µs) less 1 µs a launch that a CUDA graph leaves
    assert found[0].saving_ms == pytest.approx((999 * 6 - 1000 * 1) / 1000, abs=0.001)
    assert found[0].severity == "medium"  # 5 ms, 62 % of the 8 ms window


@pytest.mark.parametrize("what,events", [
    ("a CUDA graph's replay: kernels queued back to back", back_to_back(ADD, 1000, 2 * US, 1 * US)),
    ("longer kernels", back_to_back(ADD, 1000, 40 * US, 6 * US)),
    ("few kernels", back_to_back(ADD, 99, 2 * US, 6 * US)),
])
def test_launch_bound_is_silent_on(what: str, events: list[GpuEvent]) -> None:
    assert "launch-bound" not in rules_of(find(cols(*events), window(events[-1].end_ns)))


def test_fp32_matmul_fires_on_sgemm_not_on_tf32_or_bf16() -> None:
    assert rules_of(find(cols(*back_to_back(SGEMM, 10, 300 * US, 1 * US)), window(3 * MS))) == ["fp32-matmul"]
    assert find(cols(*back_to_back(TF32, 10, 300 * US, 1 * US)), window(3 * MS)) == ()
    assert find(cols(*back_to_back(GEMM_BF16, 10, 300 * US, 1 * US)), window(3 * MS)) == ()


@pytest.mark.parametrize("name,category,expected", [
    (SGEMM, "gemm", True),
    ("ampere_sgemm_128x64_nn", "gemm", True),
    ("sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4_alignc4_execute_kernel_trt",
     "gemm", True),
    ("sm80_xmma_fprop_implicit_gemm_f32f32_f32f32_f32_nhwckrsc_nhwc_tilesize128x128x8_stage3_warpsize2x2x1_g1_ffma",
     "conv", True),
    (TF32, "gemm", False),
    ("sm80_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize256x128x32_stage3_warpsize4x2x1_tensor16x8x8_kernel", "gemm", False),
    ("void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false, false>", "gemm", False),
    (GEMM_BF16, "gemm", False),
    ("void at::native::sgemm_like_elementwise", "elementwise", False),
])
def test_which_kernels_are_fp32_gemms(name: str, category: str, expected: bool) -> None:
    assert is_fp32_gemm(name, category) is expected
    assert KernelClassifier().classify(name) == category or category != "gemm"


def test_fp32_matmul_needs_a_share_and_a_time_worth_acting_on() -> None:
    small = cols(ev(SGEMM, 0, 90 * US))
    assert "fp32-matmul" not in rules_of(find(small, window(100 * US)))  # under 100 µs
    minor = cols(ev(SGEMM, 0, 150 * US), ev(GEMM_BF16, 150 * US, 1 * MS))
    assert "fp32-matmul" not in rules_of(find(minor, window(1200 * US)))  # 13 % of busy time


def test_gpu_idle_says_where_the_idle_time_is() -> None:
    before = find(cols(ev(GEMM_BF16, 8 * MS, 1 * MS)), window(10 * MS))
    assert rules_of(before) == ["gpu-idle"]
    assert before[0].evidence["mostly"] == "before" and "fixture" in before[0].fix
    assert before[0].evidence["idle_before_us"] == 8000 and before[0].evidence["idle_after_us"] == 1000
    assert "8.0 ms before the first kernel (the test's own host work" in before[0].message
    assert before[0].saving_ms == 9.0 and before[0].severity == "medium"  # 9 ms of 10: under 10 ms
    assert before[0].evidence["before"] == "host-work"
    between = find(cols(*back_to_back(GEMM_BF16, 10, 100 * US, 900 * US)), window(10 * MS))
    assert between[0].evidence["mostly"] == "between" and "host" in between[0].fix
    after = find(cols(ev(GEMM_BF16, 0, 1 * MS)), window(10 * MS))
    assert after[0].evidence["mostly"] == "after"


@pytest.mark.parametrize("what,events,span", [
    ("a busy GPU", back_to_back(GEMM_BF16, 10, 900 * US, 100 * US), 10 * MS),
    ("a short test", [ev(GEMM_BF16, 800 * US, 10 * US)], 900 * US),
    ("no GPU work at all", [], 10 * MS),
])
def test_gpu_idle_is_silent_on(what: str, events: list[GpuEvent], span: int) -> None:
    assert find(cols(*events), window(span)) == ()


def test_memcpy_dominant_is_superseded_by_pageable_memcpy() -> None:
    pinned = cols(*(ev("Memcpy HtoD (Pinned -> Device)", i * MS, 1 * MS, kind="gpu_memcpy") for i in range(4)))
    assert rules_of(find(pinned, window(4 * MS))) == ["memcpy-dominant"]
    pageable = cols(*(ev("Memcpy HtoD (Pageable -> Device)", i * MS, 1 * MS, kind="gpu_memcpy") for i in range(4)))
    assert rules_of(find(pageable, window(4 * MS))) == ["pageable-memcpy"]


def test_low_sm_activity_needs_the_counters() -> None:
    busy = cols(*back_to_back(ADD, 100, 80 * US, 20 * US))
    assert "low-sm-activity" not in rules_of(find(busy, window(10 * MS)))
    found = find(busy, window(10 * MS), hardware={"sm_pct": 1.5, "busy_pct": 80.0})
    assert rules_of(found) == ["low-sm-activity"] and found[0].evidence == {"busy_pct": 80.0, "sm_pct": 1.5}
    assert found[0].impact_pct == 78.5
    assert find(busy, window(10 * MS), hardware={"sm_pct": 60.0, "busy_pct": 80.0}) == ()
    assert find(busy, window(10 * MS), hardware={"sm_pct": None, "busy_pct": float("nan")}) == ()


# -- the engine ---------------------------------------------------------------------------------

def test_ignored_rules_are_not_checked_and_what_they_superseded_comes_back() -> None:
    tiny = cols(*back_to_back(ADD, 1000, 2 * US, 6 * US))
    assert rules_of(find(tiny, window(8 * MS), ignore={"launch-bound"})) == ["gpu-idle"]
    assert find(tiny, window(8 * MS), ignore=set(RULE_IDS)) == ()


def test_an_empty_window_has_no_findings() -> None:
    assert find(cols(ev(ADD, 0, 10)), Window(5, 5, "test_call")) == ()


def test_findings_are_json_and_read_back() -> None:
    found = find(cols(*back_to_back(ADD, 1000, 2 * US, 6 * US)), window(8 * MS))
    data = json.loads(json.dumps([f.to_dict() for f in found]))
    assert [Finding.from_dict(d) for d in data] == list(found)
    assert Finding.from_dict({"rule": "x"}) == Finding("x", "low", "", "")
    assert Finding.from_dict({"rule": "x", "impact_pct": "7", "evidence": [1]}).impact_pct == 0.0


def test_severity_goes_by_what_is_at_stake() -> None:
    """Both the saving and its share of the test's time: a large share of a tiny test is low."""
    cases = [(0, 0), (9.9, 90), (10, 25), (10, 24.9), (3, 10), (2.9, 50), (500, 9.9), (500, 10)]
    assert [severity_of(ms, pct) for ms, pct in cases] == ["low", "medium", "high", "medium", "medium", "low",
                                                           "low", "medium"]


def test_rule_ids_are_parsed_and_checked() -> None:
    assert parse_rule_ids("gpu-idle, host-sync  launch-bound", "ini") == {"gpu-idle", "host-sync", "launch-bound"}
    assert parse_rule_ids("", "ini") == frozenset()
    with pytest.raises(ValueError, match=r"gpu_util_findings_ignore: unknown findings rule gpu_idle \(rules: pageable"):
        parse_rule_ids("gpu_idle", "gpu_util_findings_ignore")


def test_every_rule_is_documented_with_its_limits() -> None:
    assert list(RULES_BY_ID) == [r.id for r in RULES] and len(RULE_IDS) == len(set(RULE_IDS))
    for rule in RULES:
        assert rule.title and rule.fix and rule.limits, rule.id
        for name, limit in rule.limits.items():
            assert limit.reason and limit.unit in ("%", "µs", "ms", ""), (rule.id, name)
        assert rule.saving and rule.action, rule.id  # the findings page renders them
        for name, estimate in rule.estimates.items():
            assert estimate.reason and estimate.unit in ("%", "µs", "GB/s", "x"), (rule.id, name)


def test_counter_findings_come_from_a_records_figures() -> None:
    from pytest_gpuutil.analysis.findings import counter_findings

    found = counter_findings(busy_pct=80.0, sm_pct=2.0, window_ms=100.0)
    assert rules_of(found) == ["low-sm-activity"] and found[0].severity == "high"
    assert found[0].saving_ms == pytest.approx(100 * 0.78 * 0.5)  # half the busy time the SMs sat idle
    assert counter_findings(busy_pct=80.0, sm_pct=None) == () == counter_findings(None, 2.0)
    assert counter_findings(busy_pct=80.0, sm_pct=2.0, ignore={"low-sm-activity"}) == ()
    assert counter_findings(busy_pct=10.0, sm_pct=0.1) == ()  # too little GPU work to judge


def test_array_windows_are_looked_at_without_importing_numpy_ma() -> None:
    """np.unique without return_* imports numpy.ma (~10 ms, ~100 ms where no bytecode is cached):
    the per-window path must not pay it. numpy 1.x imports numpy.ma with numpy itself: there the
    check is that the path imports nothing numpy had not."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent("""
        import sys
        import numpy as np
        with_numpy = "numpy.ma" in sys.modules  # numpy 1.x: True
        from pytest_gpuutil.analysis.classify import KernelClassifier
        from pytest_gpuutil.analysis.findings import find
        from pytest_gpuutil.analysis.window_facts import WindowFacts
        from pytest_gpuutil.traces.model import GpuColumns, Window
        n = 400
        events = GpuColumns(["k"] * n, ["kernel"] * n, [0, 1] * (n // 2), [7] * n,
                            np.arange(n, dtype=np.int64) * 3000, np.full(n, 1000, dtype=np.int64))
        win = Window(0, 3000 * n, "test_call")
        facts = WindowFacts(events, win, KernelClassifier())
        assert facts.arrays
        find(events, win, KernelClassifier())
        print(facts.timeline.devices, facts.busy_pct > 0, facts.union_ns([True])[0], "numpy.ma" in sys.modules and not with_numpy)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["2", "True", "400000", "False"]
