"""The analyzer on real H200 traces, against an independent reference."""
from __future__ import annotations

from decimal import Decimal

import pytest

from pytest_gpuutil import KernelClassifier, Window, analyze, read_trace, rule
from pytest_gpuutil.traces.model import GpuEvent, Trace
from tests.helpers.reference import (
    DATA,
    PUBLISHED_BUSY_NS,
    PUBLISHED_SPAN_NS,
    exact_union_us,
    load_events,
    plain_sum_us,
    us_to_ns,
)

TRACES = sorted(PUBLISHED_BUSY_NS)


def ns(us: float) -> int:
    """A time the analyzer gives in µs, as whole nanoseconds (it computes in integer ns)."""
    return round(us * 1000)


def summary(name: str, **kwargs):
    return analyze(read_trace(DATA / f"{name}.json.gz"), **kwargs)


@pytest.mark.parametrize("name", TRACES)
def test_busy_matches_exact_reference_to_the_nanosecond(name):
    assert ns(summary(name).busy_us) == us_to_ns(exact_union_us(load_events(name)))


@pytest.mark.parametrize("name", TRACES)
def test_busy_matches_published_reference_to_the_nanosecond(name):
    """tests/data/TRACES.md gives exact unions (decimal arithmetic on the JSON text): no allowance."""
    assert ns(summary(name).busy_us) == PUBLISHED_BUSY_NS[name]


@pytest.mark.parametrize("name", TRACES)
def test_independent_reference_matches_the_published_table(name):
    assert us_to_ns(exact_union_us(load_events(name))) == PUBLISHED_BUSY_NS[name]


@pytest.mark.parametrize("name", [n for n in TRACES if PUBLISHED_SPAN_NS[n]])
def test_gpu_span_matches_published_span_to_the_nanosecond(name):
    trace = read_trace(DATA / f"{name}.json.gz")
    s = analyze(Trace(trace.path, trace.columns, profiler_span=None))
    assert s.window_source == "gpu_span"
    assert ns(s.window_us) == PUBLISHED_SPAN_NS[name]


def test_two_streams_union_less_than_sum():
    s = summary("two_streams_overlap")
    kernel_sum = float(plain_sum_us(load_events("two_streams_overlap")))
    assert plain_sum_us(load_events("two_streams_overlap")) == Decimal("5528.743")  # TRACES.md
    assert s.busy_us < kernel_sum
    assert {st.stream for st in s.streams} >= {"7", "47"} or len(s.streams) >= 2
    assert sum(st.busy_us for st in s.streams) > s.busy_us  # streams overlap in time


def test_user_annotations_are_not_busy():
    events = load_events("user_annotations")
    with_annotations = float(exact_union_us(events, cats=("kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation")))
    s = summary("user_annotations")
    assert s.busy_us < with_annotations
    assert ns(s.busy_us) == 979_937  # TRACES.md
    assert plain_sum_us(events) == Decimal("977.537")  # the kernel sum TRACES.md gives
    assert all(k.name for k in s.top_kernels)
    assert not any("nccl" in k.name or k.category == "gpu_user_annotation" for k in s.top_kernels)


def test_idle_trace_gives_zero_without_dividing_by_zero():
    s = summary("idle_no_gpu_work")
    assert (s.busy_us, s.busy_pct, s.mm_conv_pct, s.kernel_count) == (0.0, 0.0, 0.0, 0)
    assert s.window_source == "profiler" and s.window_us > 0
    assert s.categories == () and s.devices == ()


def test_window_is_profiler_span_when_present():
    s = summary("duty_cycle_25")
    assert s.window_source == "profiler"
    assert s.window_us == pytest.approx(24954.003, abs=1e-9)
    assert s.busy_pct == pytest.approx(100 * s.busy_us / s.window_us, rel=1e-12)


def test_window_falls_back_to_gpu_span():
    trace = read_trace(DATA / "duty_cycle_25.json.gz")
    s = analyze(Trace(trace.path, trace.columns, profiler_span=None))
    assert s.window_source == "gpu_span"
    assert ns(s.window_us) == 20_667_218  # the published span


def test_explicit_window_clips_work():
    ev = [GpuEvent("k", "kernel", "0", "7", 1_000, 4_000), GpuEvent("k", "kernel", "0", "7", 10_000, 1_000)]
    s = analyze(Trace.from_events("t", ev), window=Window(3_000, 10_500, "explicit"))
    assert s.busy_us == pytest.approx(2.0 + 0.5)
    assert s.window_us == 7.5
    assert s.busy_pct == pytest.approx(100 * 2.5 / 7.5)


@pytest.mark.parametrize(
    "name, category, share",
    [
        ("bmm_bf16", "gemm", 98.0),
        ("linear_fp16", "gemm", 99.0),
        ("conv3d_fp32_fwd_bwd", "conv", 80.0),
        ("sdpa_flash", "attention", 99.9),
        ("sdpa_efficient", "attention", 99.9),
        ("memcpy_h2d_d2h", "memcpy", 99.9),
        ("inductor_pointwise_reduction", "triton_persistent_reduction", 99.9),
        ("layernorm_softmax", "normalization", 99.9),
    ],
)
def test_dominant_category(name, category, share):
    s = summary(name)
    assert s.category(category) is not None and s.category(category).share_of_busy >= share


def test_mm_conv_is_union_of_gemm_and_conv_over_window():
    s = summary("bmm_bf16")
    nvjet = float(exact_union_us(load_events("bmm_bf16"), cats=("kernel",), name_filter=lambda n: n.startswith("nvjet")))
    assert s.mm_conv_us == pytest.approx(nvjet, rel=1e-12)
    assert s.mm_conv_pct == pytest.approx(100 * nvjet / s.window_us, rel=1e-9)
    assert s.mm_conv_pct > 4.0  # the seed's substring rule reads 0 here


def test_attention_is_not_counted_as_matmul():
    s = summary("sdpa_efficient")  # fmha_cutlassF_*: "cutlass" in the name
    assert s.mm_conv_pct == 0.0
    assert s.category("attention").count == 3


def test_nccl_pair_shows_communication_and_overlap():
    for rank in (0, 1):
        s = summary(f"nccl_allreduce_rank{rank}")
        comm = s.category("communication")
        assert comm is not None and comm.count == 3 and comm.time_us > 1000
        o = s.overlap
        assert o is not None
        assert 0 < o.overlap_us < o.communication_us
        assert o.overlap_us == pytest.approx(o.communication_us + o.compute_us - s.busy_us, abs=1e-6)
    assert summary("bmm_bf16").overlap is None


def test_top_kernels_and_counts():
    s = summary("conv3d_fp32_fwd_bwd")
    totals = [k.total_us for k in s.top_kernels]
    assert totals == sorted(totals, reverse=True)
    top = s.top_kernels[0]
    assert "xmma" in top.name and top.category == "conv"
    assert top.mean_us == pytest.approx(top.total_us / top.count)
    assert sum(c.count for c in s.categories) == s.event_count


def test_idle_gaps_are_largest_first_and_inside_window():
    s = summary("duty_cycle_25")
    durations = [g.dur_us for g in s.idle_gaps]
    assert durations == sorted(durations, reverse=True) and durations[0] > 1000
    assert all(0 <= g.start_us and g.start_us + g.dur_us <= s.window_us + 1e-9 for g in s.idle_gaps)
    total_idle_upper = s.window_us - s.busy_us
    assert sum(durations) <= total_idle_upper + 1e-6


def test_top_other_names_unclassified_kernels():
    s = summary("two_streams_overlap")
    assert [k.name for k in s.top_other] == ["at::cuda::(anonymous namespace)::spin_kernel(long)"]


def test_user_rule_changes_the_category():
    classifier = KernelClassifier([rule("spin", r"spin_kernel")])
    s = summary("two_streams_overlap", classifier=classifier)
    assert s.category("spin") is not None and s.category("other") is None


def test_multi_device_denominator_counts_devices_with_work():
    ev = (
        GpuEvent("a", "kernel", "0", "7", 0, 500),
        GpuEvent("b", "kernel", "1", "7", 0, 1000),
    )
    s = analyze(Trace.from_events("t", ev), window=Window(0, 1000, "explicit"))
    assert s.busy_us == 1.5
    assert s.busy_pct == pytest.approx(75.0)
    assert {d.device: d.busy_pct for d in s.devices} == {"0": 50.0, "1": 100.0}


def test_to_dict_has_documented_keys():
    d = summary("nccl_allreduce_rank0").to_dict()
    for key in ("path", "window_us", "window_source", "busy_us", "busy_pct", "mm_conv_pct", "kernel_count",
                "categories", "devices", "top_kernels"):
        assert key in d
    assert set(d["categories"]["communication"]) >= {"time_us", "share_of_busy", "count"}
    assert set(d["devices"]["0"]) >= {"busy_us"}
    assert set(d["top_kernels"][0]) >= {"name", "category", "count", "total_us"}
