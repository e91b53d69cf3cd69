"""Many windows at once against analyze() one window at a time, on real traces and edge cases."""
from __future__ import annotations

import numpy as np
import pytest

from pytest_gpuutil import (
    GpuColumns,
    GpuEvent,
    KernelClassifier,
    Window,
    analyze,
    read_trace,
)
from pytest_gpuutil.analysis.intervals import window_columns
from pytest_gpuutil.analysis.windows import WindowStats, assign_windows, window_stats
from pytest_gpuutil.traces.model import Trace
from tests.helpers import DATA

REAL_TRACES = sorted(p.name for p in DATA.glob("*.json.gz") if "idle" not in p.name)


def cut_windows(columns: GpuColumns, seed: int) -> list[Window]:
    """Windows over a trace's span, some cut exactly at event starts and ends."""
    starts = np.asarray(columns.starts_ns, dtype=np.int64)
    ends = starts + np.asarray(columns.durs_ns, dtype=np.int64)
    rng = np.random.default_rng(seed)
    cuts = np.concatenate([rng.integers(starts.min() - 1000, ends.max() + 1000, 14), starts[:4], ends[-4:]])
    cuts = np.sort(cuts)
    return [Window(int(a), int(b), "test_call") for a, b in zip(cuts[0::2], cuts[1::2])]


@pytest.mark.parametrize("name", REAL_TRACES)
def test_every_window_matches_analyze_on_real_traces(name: str) -> None:
    trace = read_trace(str(DATA / name))
    classifier = KernelClassifier()
    for seed in range(3):
        spans = cut_windows(trace.columns, seed)
        got = window_stats(trace.columns, spans, classifier)
        assert len(got) == len(spans)
        for window, stats in zip(spans, got):
            assert stats == WindowStats.from_summary(analyze(trace, classifier, window=window)), window


def test_one_window_over_the_whole_trace_is_the_trace() -> None:
    trace = read_trace(str(DATA / "nccl_allreduce_rank0.json.gz"))
    whole = Window(trace.profiler_span[0], trace.profiler_span[1], "profiler")
    (stats,) = window_stats(trace.columns, [whole])
    summary = analyze(trace)
    assert stats.busy_us == summary.busy_us == pytest.approx(3802.223, abs=1e-9)
    assert stats.kernel_count == 15 and stats.event_count == 27


def events(*rows: tuple) -> GpuColumns:
    """(name, start, dur[, device, stream, kind]) rows."""
    full = [(r[0], r[5] if len(r) > 5 else "kernel", str(r[3]) if len(r) > 3 else "0", str(r[4]) if len(r) > 4 else "7",
             r[1], r[2]) for r in rows]
    return GpuColumns.from_events(GpuEvent(*row) for row in full)


def test_edges_follow_analyze() -> None:
    cols = events(
        ("ends_at_start", 0, 100),  # positive length, ends exactly at the window start: out
        ("zero_at_start", 100, 0),  # zero length at the window start: in, counts, no time
        ("starts_at_end", 300, 50),  # starts exactly at the window end: in, clipped to nothing
        ("inside", 150, 50),
        ("spans_both", 280, 100),  # overlaps windows 0 and 1: clipped into each
    )
    spans = [Window(100, 300, "test_call"), Window(350, 500, "test_call")]
    got = window_stats(cols, spans)
    for window, stats in zip(spans, got):
        assert stats == WindowStats.from_summary(analyze(Trace("t", cols), window=window))
    assert got[0].kernel_count == 4 and got[0].busy_us == pytest.approx(0.07, abs=1e-12)
    assert got[1].kernel_count == 1 and got[1].busy_us == pytest.approx(0.03, abs=1e-12)


def test_overlapping_streams_and_devices() -> None:
    cols = events(("nvjet_a", 100, 100, 0, 7), ("nvjet_b", 150, 100, 0, 8), ("flash_fwd", 120, 10, 1, 7))
    (stats,) = window_stats(cols, [Window(0, 1000, "test_call")])
    assert stats.busy_us == pytest.approx(0.16, abs=1e-12)  # 150 ns on device 0, 10 on device 1
    assert stats.devices == (("0", 0.15), ("1", 0.01))
    assert stats.busy_pct == pytest.approx(100 * 160 / 2000)
    assert {c.name: c.count for c in stats.categories} == {"gemm": 2, "attention": 1}
    assert stats == WindowStats.from_summary(analyze(Trace("t", cols), window=Window(0, 1000, "test_call")))


def test_top_kernel_ties_go_by_name() -> None:
    cols = events(("b_kernel", 0, 10), ("a_kernel", 20, 10))
    (stats,) = window_stats(cols, [Window(0, 100, "test_call")])
    assert stats.top_kernel == "a_kernel"


def test_windows_must_be_sorted_and_apart() -> None:
    with pytest.raises(ValueError, match="must not overlap"):
        assign_windows(np.array([1]), np.array([2]), np.array([0, 5]), np.array([10, 20]))
    with pytest.raises(ValueError, match="ending at or after"):
        assign_windows(np.array([1]), np.array([2]), np.array([5]), np.array([0]))


def test_no_events_and_no_windows() -> None:
    assert window_stats(GpuColumns(), []) == []
    (stats,) = window_stats(GpuColumns(), [Window(0, 10, "test_call")])
    assert (stats.busy_us, stats.kernel_count, stats.top_kernel, stats.devices) == (0.0, 0, None, ())


def test_long_windows_are_split_so_offsets_stay_in_int64(monkeypatch: pytest.MonkeyPatch) -> None:
    trace = read_trace(str(DATA / "two_streams_overlap.json.gz"))
    spans = cut_windows(trace.columns, 7)
    expected = window_stats(trace.columns, spans)
    monkeypatch.setattr(window_columns, "_OFFSET_LIMIT", 1 << 24)  # forces one chunk per window or two
    assert len(window_columns._chunks(np.asarray([w.duration_ns for w in spans]), 4)) > 1
    assert window_stats(trace.columns, spans) == expected


@pytest.mark.parametrize("name", REAL_TRACES)
def test_every_kernel_of_a_window_is_listed_as_analyze_lists_them(name: str) -> None:
    trace = read_trace(str(DATA / name))
    classifier = KernelClassifier()
    spans = cut_windows(trace.columns, 1)
    for window, stats in zip(spans, window_stats(trace.columns, spans, classifier)):
        every = analyze(trace, classifier, window=window, top=0).top_kernels
        assert [(n, c) for n, c, _ in stats.kernel_totals] == [(k.name, k.count) for k in every], window
        assert [t for _, _, t in stats.kernel_totals] == pytest.approx([k.total_us for k in every], abs=1e-6)


@pytest.mark.parametrize("sorted_starts", [True, False])
@pytest.mark.parametrize("seed", range(6))
def test_each_event_goes_to_every_window_it_overlaps(seed: int, sorted_starts: bool) -> None:
    """assign_windows against the definition, one event and one window at a time: events in start
    order (a capture's) and not, long events that span windows, events that touch a window's edges."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    starts = rng.integers(0, 100_000, n).astype(np.int64)
    starts = np.sort(starts) if sorted_starts else starts
    durs = np.where(rng.random(n) < 0.1, rng.integers(0, 30_000, n), rng.integers(0, 300, n)).astype(np.int64)
    ends = starts + durs
    cuts = np.sort(np.concatenate([rng.integers(0, 100_000, 2 * int(rng.integers(1, 30))), ends[:3], starts[:3]]))
    cuts = cuts[: cuts.size - cuts.size % 2]
    w_start, w_end = cuts[0::2], cuts[1::2]
    expected = [(e, w) for e in range(n) for w in range(w_start.size)
                if starts[e] <= w_end[w] and ends[e] >= w_start[w] and not (ends[e] == w_start[w] and ends[e] > starts[e])]
    events, windows = assign_windows(starts, ends, w_start, w_end)
    assert sorted(zip(events.tolist(), windows.tolist())) == expected


@pytest.mark.skipif(window_columns._C_ROWS is None, reason="analysis/intervals/_figures.c is not built here")
@pytest.mark.parametrize("name", REAL_TRACES)
def test_the_rows_made_in_c_are_the_rows_of_tolist_and_zip(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """_figures.rows against the Python cut: every field of every window, kernel_totals too, the same
    values of the same types."""
    trace = read_trace(str(DATA / name))
    for seed in range(3):
        spans = cut_windows(trace.columns, seed)
        with_c = window_stats(trace.columns, spans)
        with monkeypatch.context() as patched:
            patched.setattr(window_columns, "_C_ROWS", None)
            in_python = window_stats(trace.columns, spans)
        for a, b in zip(with_c, in_python):
            assert a.__dict__ == b.__dict__
            for field in ("devices", "category_rows", "kernel_rows", "gap_rows", "kernel_totals"):
                assert [tuple(map(type, row)) for row in getattr(a, field)] == \
                    [tuple(map(type, row)) for row in getattr(b, field)], field


def test_the_rows_of_odd_columns_are_their_lists() -> None:
    """A column of another dtype (int32, a bool) goes as its tolist(); a window without rows is ()."""
    got = window_columns._cut(([1, 2, 3], np.asarray([4, 5, 6], dtype=np.int32), np.asarray([0.5, 1.5, 2.5])),
                              np.asarray([0, 0, 2]), 4)
    assert got == [((1, 4, 0.5), (2, 5, 1.5)), (), ((3, 6, 2.5),), ()]
    assert type(got[0][0][1]) is int and type(got[0][0][2]) is float
