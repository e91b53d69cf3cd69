"""The plain-Python analysis's per-event work in one C call (analysis/intervals/_figures.c) gives
the figures of the Python passes it replaces, to the nanosecond.

Three ways go side by side: the C call; the Python passes with the unions in C (_unions.c); the
Python passes alone (no C part built); and numpy's analysis where it applies. Every real trace
(tests/data, its zoo and findings, /work/shared/traces where present, the recorded 40k-kernel
trace) over its own window, its GPU span and a window that cuts it; random traces of several
devices, streams and categories; the edge cases (no event, one, none in the window, zero-length
events on the window's edges); and the values the C part refuses.
"""
from __future__ import annotations

import copy
import dataclasses
import pickle
import random
from array import array
from pathlib import Path
from typing import Any, Optional

import pytest

from pytest_gpuutil import KernelClassifier, Window, analyze, read_trace, rule
from pytest_gpuutil.analysis import grouping, rules, summary
from pytest_gpuutil.analysis.findings import find_in_trace
from pytest_gpuutil.analysis.intervals import event_figures
from pytest_gpuutil.analysis.intervals.event_figures import count_within, lower_median
from pytest_gpuutil.traces.model import GpuColumns, Trace
from tests.helpers.reference import DATA

ROOT = Path(__file__).resolve().parents[2]
SHARED = Path("/work/shared/traces")
BIG = ROOT / "benchmarks" / "data" / "h200_40k_kernels.json.gz"
REAL_TRACES = sorted(
    [*DATA.glob("*.json.gz"), *(DATA / "zoo").glob("*.json.gz"), *(DATA / "findings").glob("*.json.gz"),
     *(SHARED.rglob("*.json.gz") if SHARED.is_dir() else [])],
    key=str)
needs_c = pytest.mark.skipif(event_figures._C_FIGURES is None, reason="analysis/intervals/_figures.c is not built here")
#: the ways of computing the plain-Python figures: (the C call, the unions in C)
WAYS = {"c_call": (True, True), "python_and_c_unions": (False, True), "python_alone": (False, False)}


def as_lists(trace: Trace) -> Trace:
    """The trace with plain-list columns (what the C reader gives a big trace), whatever read it."""
    cols = trace.columns
    listed = [col.tolist() if hasattr(col, "tolist") else col for col in
              (cols.names, cols.kinds, cols.devices, cols.streams, cols.starts_ns, cols.durs_ns)]
    return dataclasses.replace(trace, columns=GpuColumns(*listed))


def one_way(monkeypatch: pytest.MonkeyPatch, way: str, trace: Trace, **kwargs: Any) -> tuple[dict, tuple]:
    """analyze's JSON and its timeline, in plain Python, one of the WAYS."""
    c_call, c_unions = WAYS[way]
    with monkeypatch.context() as patch:
        patch.setattr(summary, "use_plain_python", lambda count: True)
        if not c_call:
            patch.setattr(event_figures, "_C_FIGURES", None)
        if not c_unions:
            patch.setattr(grouping, "_C_UNIONS", None)
        found = analyze(trace, **kwargs)
    return found.to_dict(), values_of(found.timeline)


def values_of(timeline: Any) -> tuple:
    """A timeline's fields with every sequence as a list (the C call gives ``array('q')`` where the
    Python passes give lists and tuples)."""
    return tuple(v if v is None or isinstance(v, int) else list(v) for v in timeline)


def all_ways(monkeypatch: pytest.MonkeyPatch, trace: Trace, **kwargs: Any) -> dict[str, tuple[dict, tuple]]:
    return {way: one_way(monkeypatch, way, trace, **kwargs) for way in WAYS}


def with_numpy(monkeypatch: pytest.MonkeyPatch, trace: Trace, **kwargs: Any) -> dict:
    with monkeypatch.context() as patch:
        patch.setattr(summary, "use_plain_python", lambda count: False)
        return analyze(trace, **kwargs).to_dict()


def assert_alike(found: dict[str, tuple[dict, tuple]]) -> None:
    first = found["c_call"]
    for way, other in found.items():
        assert other[0] == first[0], way
        assert other[1] == first[1], way  # the timeline too: gaps, blocks, kernel lengths


def cut_window(trace: Trace) -> Optional[Window]:
    """A window over the middle of the trace's GPU span: events cut at both ends, others left out."""
    cols = trace.columns
    if not len(cols):
        return None
    starts = list(cols.starts_ns)
    first, last = min(starts), max(s + d for s, d in zip(starts, cols.durs_ns))
    return Window(first + (last - first) // 3, last - (last - first) // 4, "explicit")


def test_the_c_call_is_built_wherever_the_unions_in_c_are() -> None:
    assert (event_figures._C_FIGURES is not None) == (grouping._C_UNIONS is not None)


@needs_c
@pytest.mark.parametrize("path", REAL_TRACES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_real_traces_analyse_alike_every_way(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trace = as_lists(read_trace(path))
    no_span = dataclasses.replace(trace, profiler_span=None)
    cases = [(trace, {}), (trace, {"gap_count": 50, "top": 0}), (no_span, {}),
             (trace, {"window": cut_window(trace), "gap_count": 3})]
    for case, kwargs in cases:
        found = all_ways(monkeypatch, case, **kwargs)
        assert_alike(found)
        assert found["c_call"][0] == with_numpy(monkeypatch, case, **kwargs)


@needs_c
def test_the_recorded_40k_kernel_trace_analyses_and_finds_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    if not BIG.exists():
        pytest.skip("benchmarks/data/h200_40k_kernels.json.gz is not in this checkout")
    trace = as_lists(read_trace(BIG))
    found = all_ways(monkeypatch, trace, gap_count=20)
    assert_alike(found)
    assert found["c_call"][0]["kernel_count"] == 40_100
    with monkeypatch.context() as patch:
        patch.setattr(summary, "use_plain_python", lambda count: True)
        in_c = find_in_trace(trace, summary=analyze(trace))
        patch.setattr(event_figures, "_C_FIGURES", None)
        in_python = find_in_trace(trace, summary=analyze(trace))
    assert [f.to_dict() for f in in_c] == [f.to_dict() for f in in_python]
    assert "launch-bound" in {f.rule for f in in_c}  # its medians and counts went through the C part


@needs_c
@pytest.mark.parametrize("devices", [[0], [0, 1]])
def test_the_c_call_gives_blocks_and_gaps_as_int64_arrays(devices: list[int],
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    rows = [("k", "kernel", d, 7, start, 10) for d in devices for start in (0, 30, 35, 100)]
    trace = Trace("views", columns(*rows))
    with monkeypatch.context() as patch:
        patch.setattr(summary, "use_plain_python", lambda count: True)
        timeline = analyze(trace).timeline
    assert timeline is not None
    views = [timeline.any_busy_starts, timeline.any_busy_ends] + ([timeline.gaps_ns] if len(devices) == 1 else [])
    assert all(isinstance(v, array) and v.typecode == "q" for v in views)
    assert copy.deepcopy(timeline) == timeline and pickle.loads(pickle.dumps(timeline)) == timeline
    assert (timeline.any_busy_starts.tolist(), timeline.any_busy_ends.tolist()) == ([0, 30, 100], [10, 45, 110])
    assert list(timeline.gaps_ns) == [20, 55] * len(devices) and timeline.idle_between_ns == 75 * len(devices)
    assert rules._median(timeline.gaps_ns) == 20.0 and rules._at_most(timeline.gaps_ns, 20) == len(devices)


def random_trace(seed: int) -> tuple[Trace, dict[str, Any]]:
    """Events on up to three devices (0 and "0" one device) and streams, of every category."""
    rng = random.Random(seed)
    names = ["nvjet_gemm", "ncclDevKernel_AllReduce", "flash_fwd", "elementwise", "spin", "sm80_xmma_fprop"]
    kinds = ["kernel"] * 5 + ["gpu_memcpy", "gpu_memset"]
    devices = rng.choice([[0], [0, 1], [0, "0", 1, "gpu 2"], [3, -1]])
    streams = rng.choice([[7], [7, 13], [7, 13, "s"]])
    rows = []
    t = rng.randint(0, 1_000)
    for _ in range(rng.choice([0, 1, 2, 5, 50, 400])):
        t += rng.choice([0, 0, 1, 5, 100, 2_000]) - rng.choice([0, 0, 0, 50])  # runs out of order now and then
        rows.append((rng.choice(names), rng.choice(kinds), rng.choice(devices), rng.choice(streams),
                     t, rng.choice([0, 0, 1, 7, rng.randint(1, 3_000)])))
    columns = GpuColumns(*(list(column) for column in zip(*rows))) if rows else GpuColumns()
    span = rng.choice([None, (rng.randint(-100, 2_000), rng.randint(5_000, 400_000))])
    start = rng.randint(0, 60_000)
    kwargs = {"window": rng.choice([None, None, Window(start, start + rng.randint(0, 60_000), "explicit")]),
              "top": rng.randint(0, 5), "gap_count": rng.choice([0, 1, 3, 5, 100]),
              "classifier": KernelClassifier([rule("spin", "spin")])}
    return Trace(f"random-{seed}", columns, span), kwargs


@needs_c
@pytest.mark.parametrize("seed", range(200))
def test_random_traces_analyse_alike_every_way(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    trace, kwargs = random_trace(seed)
    found = all_ways(monkeypatch, trace, **kwargs)
    assert_alike(found)
    assert found["c_call"][0] == with_numpy(monkeypatch, trace, **kwargs)


def columns(*rows: tuple[Any, ...]) -> GpuColumns:
    """Rows of (name, kind, device, stream, start, duration)."""
    return GpuColumns(*(list(column) for column in zip(*rows))) if rows else GpuColumns()


EDGE_CASES = {
    "no events": (columns(), None),
    "one event": (columns(("k", "kernel", 0, 7, 100, 50)), None),
    "none in the window": (columns(("k", "kernel", 0, 7, 100, 50), ("k", "kernel", 0, 7, 900, 5)),
                           Window(300, 800, "explicit")),
    "zero-length at the window's edges": (columns(("k", "kernel", 0, 7, 100, 0), ("k", "kernel", 0, 7, 200, 0),
                                                  ("k", "kernel", 0, 7, 50, 50), ("k", "kernel", 0, 7, 150, 20)),
                                          Window(100, 200, "explicit")),
    "cut at both ends": (columns(("nvjet_a", "kernel", 0, 7, 0, 500), ("b", "gpu_memcpy", 0, 13, 400, 300)),
                         Window(100, 600, "explicit")),
    "devices and streams out of order": (
        columns(("ncclDevKernel_x", "kernel", 1, 13, 500, 100), ("nvjet_a", "kernel", 0, 7, 400, 300),
                ("ncclDevKernel_x", "kernel", "0", 13, 10, 600), ("e", "kernel", 1, 7, 0, 20),
                ("nvjet_a", "kernel", 1, 7, 520, 10), ("e", "gpu_memset", 0, "s", 1_000, 1)), None),
    "one device of all communication": (columns(("ncclDevKernel_x", "kernel", 0, 7, 0, 10),
                                                ("ncclDevKernel_x", "kernel", 0, 7, 5, 10)), None),
    "an empty window": (columns(("k", "kernel", 0, 7, 100, 50)), Window(120, 120, "explicit")),
}


@needs_c
@pytest.mark.parametrize("case", EDGE_CASES)
@pytest.mark.parametrize("gap_count", [0, 1, 5])
def test_edge_cases_analyse_alike_every_way(case: str, gap_count: int, monkeypatch: pytest.MonkeyPatch) -> None:
    cols, window = EDGE_CASES[case]
    trace = Trace(case, cols)
    found = all_ways(monkeypatch, trace, window=window, gap_count=gap_count)
    assert_alike(found)
    assert found["c_call"][0] == with_numpy(monkeypatch, trace, window=window, gap_count=gap_count)


def test_the_edge_cases_figures_are_the_ones_worked_out_by_hand(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two of the cases above, by hand (so that alike ways cannot be alike and wrong)."""
    edges, cut = (one_way(monkeypatch, "c_call", Trace(c, EDGE_CASES[c][0]), window=EDGE_CASES[c][1])[0]
                  for c in ("zero-length at the window's edges", "cut at both ends"))
    # kept: 100+0 (at the start, zero-length), 200+0 (at the end), 50..100 clipped to 100..100 is left out
    # (it ends at the window's start and lasts > 0), 150..170
    assert (edges["event_count"], edges["busy_us"]) == (3, 0.02)
    assert [(g["start_us"], g["dur_us"]) for g in edges["idle_gaps"]] == [(0.0, 0.05), (0.07, 0.03)]
    # 100..500 and 400..600 clipped: busy 100..600; the copy's union alone 400..600
    assert cut["busy_us"] == 0.5 and cut["categories"]["memcpy"]["time_us"] == 0.2
    assert {s["stream"]: s["busy_us"] for s in cut["streams"]} == {"7": 0.4, "13": 0.2}


@needs_c
def test_what_the_c_call_refuses_goes_to_the_python_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    floats = columns(("k", "kernel", 0, 7, 1.5, 2.0), ("k", "kernel", 0, 7, 3.0, 1.0))
    near_the_end = columns(("k", "kernel", 0, 7, 2**63 - 10, 20))  # its end is past int64
    past_int64 = columns(("k", "kernel", 0, 7, 2**70, 5))
    for cols in (floats, near_the_end, past_int64):
        pairs, names, kinds = grouping.kernel_pairs(cols.names, cols.kinds)
        win = Window(0, 2**71, "explicit")
        assert event_figures.figures_in_c(cols, win, pairs, kinds, [0] * len(names), ["other"], 5) is None
    for cols in (near_the_end, past_int64):  # the Python passes take them (analyze takes no floats)
        assert_alike(all_ways(monkeypatch, Trace("refused", cols)))
    with pytest.raises(ValueError, match="out of range"):
        event_figures._C_FIGURES.figures([0], [1], [3], [0], [1], [0], 1, [0], 1, [0], 0, 10, 5)
    with pytest.raises(ValueError, match="differ in length"):
        event_figures._C_FIGURES.figures([0, 1], [1], [0], [0], [1], [0], 1, [0], 1, [0], 0, 10, 5)


@needs_c
@pytest.mark.parametrize("seed", range(30))
def test_counts_under_a_limit_and_medians_match_the_python_ones(seed: int) -> None:
    rng = random.Random(seed)
    values = [rng.choice([0, 1, 5, 1_000, rng.randint(0, 10**6)]) for _ in range(rng.choice([1, 2, 7, 300, 12_000]))]
    for limit in (0, 0.5, 5, 1_000.0, 10**5 * rng.random(), float("inf"), float("nan"), -3):
        assert count_within(values, limit) == sum(map(limit.__ge__, values))
        assert count_within(tuple(values), limit, strict=True) == sum(map(limit.__gt__, values))
    as_array = array("q", values)  # what the C call gives
    as_view = memoryview(as_array).cast("B").cast("q")  # any int64 buffer
    for step in (1, 2, 7, max(1, len(values) // rules.MEDIAN_SAMPLE)):
        ordered = sorted(values[::step])
        want = ordered[(len(ordered) - 1) // 2]
        assert lower_median(values, step) == lower_median(as_array, step) == lower_median(as_view, step) == want
    assert count_within(as_array, 1_000) == count_within(as_view, 1_000) == sum(map((1_000).__ge__, values))


@needs_c
def test_what_the_counts_and_medians_refuse_goes_to_the_python_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    assert count_within([2**53, 1], 10) is None  # not every such int is a double
    assert count_within([1, 2], 2**60) is None
    assert count_within([1.5], 2) is None and lower_median([1.5], 1) is None
    assert lower_median([], 1) is None and lower_median([1, 2], 0) is None
    assert count_within(array("i", [1, 2]), 5) is None  # a buffer of other than int64s
    assert rules._at_most([1, 2, 2**60], 5.0) == 2 and rules._median_at_most([2**60, 1, 2], 5)
    monkeypatch.setattr(event_figures, "_C_FIGURES", None)
    assert count_within([1], 1) is None and lower_median([1], 1) is None
    assert rules._median([5, 1, 3]) == 3.0 and rules._median_below([5, 1, 3], 4)
