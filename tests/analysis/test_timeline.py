"""A window's timeline (analysis/timeline.py): lanes, clipping, waits, gaps, the compact form, the
reduction of big windows, and the continuous capture drawing the windows it is asked for."""
from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import pytest

from pytest_gpuutil import GpuColumns, GpuEvent, KernelClassifier
from pytest_gpuutil.analysis import timeline
from pytest_gpuutil.capture.continuous import ContinuousCapture
from pytest_gpuutil.traces.model import SyncColumns, Window
from pytest_gpuutil.traces.reader import read_trace
from tests.capture.test_continuous_capture import ScriptedSource
from tests.helpers.timelines import GAPS, MS, PLANTED, WAIT, planted_window

DATA = Path(__file__).resolve().parents[1] / "data"


def test_the_planted_window_round_trips_through_the_compact_form() -> None:
    data = planted_window()
    assert json.loads(json.dumps(data)) == data  # plain JSON
    t = timeline.decode(data)
    assert [(lane.device, lane.stream, lane.process) for lane in t.lanes] == [("0", "7", ""), ("1", "7", "pid 4242 train.py rank 1")]
    got = sorted((t.keys[k][0], t.keys[k][2], s, s + d) for k, s, d in zip(t.key.tolist(), t.start.tolist(), t.dur.tolist()))
    assert got == sorted((p[0], p[7], round(p[5] * MS), round(p[6] * MS)) for p in PLANTED)
    assert t.waits == ((round(WAIT[1] * MS), round(WAIT[2] * MS), WAIT[0]),)
    assert t.gaps == tuple((d, round(s * MS), round(n * MS)) for d, s, n in GAPS)
    assert data["c"]["sm_pct"][1] == 80 and data["c"]["t"][:2] == [0, MS]


def test_events_are_clipped_to_the_window_and_those_outside_left_out() -> None:
    cols = GpuColumns(["before", "across_start", "inside", "across_end", "after", "ends_at_start"], ["kernel"] * 6,
                      [0] * 6, [7] * 6, [0, 50, 200, 900, 1_100, 80], [40, 100, 10, 200, 5, 20])
    t = timeline.build(cols, Window(100, 1_000, "test_call"), KernelClassifier(), gap_ns=1)
    rows = sorted((t.keys[k][0], s, d) for k, s, d in zip(t.key.tolist(), t.start.tolist(), t.dur.tolist()))
    assert rows == [("across_end", 800, 100), ("across_start", 0, 50), ("inside", 100, 10)]
    assert t.events == 3 and t.window_ns == 900


def test_waits_merge_and_stop_at_the_captures_own_synchronize() -> None:
    syncs = SyncColumns(["cudaStreamSynchronize", "Stream Sync", "cudaDeviceSynchronize", "cudaDeviceSynchronize"],
                        [200, 210, 500, 950], [100, 150, 50, 40])
    t = timeline.build(GpuColumns(), Window(100, 1_000, "test_call"), KernelClassifier(), syncs=syncs, sync_end_ns=900)
    assert t.waits == ((100, 260, "cudaStreamSynchronize"), (400, 450, "cudaDeviceSynchronize"))
    assert t.gaps == ()  # no device did work: no device to be idle


def test_gaps_are_per_device_over_all_its_lanes_and_at_least_the_threshold() -> None:
    # stream 8 covers stream 7's gap on device 0: device 0 idle only at the edges
    cols = GpuColumns(["a", "b", "c", "d"], ["kernel"] * 4, [0, 0, 0, 1], [7, 7, 8, 7], [0, 600, 100, 0], [100, 400, 500, 300])
    t = timeline.build(cols, Window(0, 1_000, "test_call"), KernelClassifier(), gap_ns=50)
    assert t.gaps == (("1", 300, 700),)
    t = timeline.build(cols, Window(0, 1_200, "test_call"), KernelClassifier(), gap_ns=50)
    assert t.gaps == (("0", 1_000, 200), ("1", 300, 900))


def test_the_varints_hold_any_non_negative_int64() -> None:
    values = np.asarray([0, 1, 127, 128, 300, 2**31, 2**53 - 1, 2**62], dtype=np.int64)
    raw = timeline._varints(values)
    back, end = timeline._read_varints(raw, values.size, 0)
    assert back.tolist() == values.tolist() and end == len(raw)
    assert len(timeline._varints(np.asarray([5, 100], dtype=np.int64))) == 2  # a byte each for small values


def test_a_big_window_is_reduced_to_spans_that_keep_its_busy_time_and_count() -> None:
    n = 20_000
    rng = np.random.default_rng(3)  # irregular, as real kernels are (a regular pattern zlibs to nothing)
    starts = np.arange(n, dtype=np.int64) * 1_000 + rng.integers(0, 300, n)
    cols = GpuColumns(["k%d" % (i % 3) for i in range(n)], ["kernel"] * n, [0] * n, [7] * n, starts, rng.integers(100, 600, n))
    window = Window(0, n * 1_000, "test_call")
    full = timeline.build(cols, window, KernelClassifier())
    small = timeline.build(cols, window, KernelClassifier(), max_events=1_000)
    assert len(full) == n and full.count is None
    assert len(small) <= 1_000 and int(small.count.sum()) == n and small.events == n
    assert small.gaps == full.gaps  # gaps come from every event, before the reduction
    back = timeline.decode(timeline.encode(small))
    assert back.count.tolist() == small.count.tolist() and back.start.tolist() == small.start.tolist()
    assert len(json.dumps(timeline.encode(small))) < len(json.dumps(timeline.encode(full))) / 5
    assert timeline.decode(timeline.shrink(timeline.encode(full), 1_000)).count.sum() == n


def test_a_real_trace_draws_its_streams_waits_and_copies() -> None:
    trace = read_trace(str(DATA / "two_streams_overlap.json.gz"))
    t = timeline.build(trace.columns, Window(*trace.profiler_span, "profiler"), KernelClassifier(), syncs=trace.syncs)
    assert [(lane.device, lane.stream) for lane in t.lanes] == [("0", "47"), ("0", "51")]
    assert len(t) == len(trace.columns) and t.waits  # every event of the trace is in the window, waits too
    assert {k[2] for k in t.keys} == {"gemm", "other", "memset"}


def test_bad_data_is_one_clear_error() -> None:
    data = planted_window()
    with pytest.raises(ValueError, match="not a timeline"):
        timeline.decode({**data, "e": base64.b64encode(b"\xff\xff").decode()})
    with pytest.raises(ValueError, match="not a timeline"):
        timeline.decode({k: v for k, v in data.items() if k != "l"})


class Children:
    """Stands in for the ProcessTree: adds one child's event to the merge and names its process."""

    def __init__(self, at: int):
        self.at = at
        self.last_owners = None

    def attribute(self, own, spans, keys):
        merged = GpuColumns.from_events(
            [GpuEvent(*row) for row in zip(own.names, own.kinds, own.devices, own.streams, own.starts_ns, own.durs_ns)]
            + [GpuEvent("child_kernel", "kernel", "1", "7", self.at, 30)])
        self.last_owners = (np.asarray([0] * len(own) + [1]), ("", "pid 77 worker.py rank 0"))
        return merged, [type("Extras", (), {"processes": (), "note": ""})() for _ in spans]


def test_the_capture_draws_the_windows_it_is_asked_for_with_their_children() -> None:
    source = ScriptedSource()
    asked = []
    cap = ContinuousCapture(source, KernelClassifier(), synchronize=lambda: None,
                            timeline_wanted=lambda key, wall, stats, found: asked.append(key) or key == "b",
                            timeline_gap_ns=5)
    cap.ensure_started()
    cap.begin("a")
    source.kernel("nvjet_a", 100)
    cap.end()
    cap.begin("b")
    source.kernel("nvjet_b", 100)
    child_at = source.clock
    source.kernel("nvjet_b2", 50)
    cap.end()
    cap.children = Children(child_at)
    a, b = cap.flush()
    assert asked == ["a", "b"] and a.timeline is None
    t = timeline.decode(b.timeline)
    assert [(lane.device, lane.process) for lane in t.lanes] == [("0", ""), ("1", "pid 77 worker.py rank 0")]
    assert sorted(k[0] for k in t.keys) == ["child_kernel", "nvjet_b", "nvjet_b2"]
    assert t.window_ns == b.stats.window.duration_ns and ("0", 0, 10) in t.gaps


def test_a_failing_timeline_leaves_the_figures_and_says_why() -> None:
    source = ScriptedSource()

    def broken(*_):
        raise RuntimeError("boom")

    cap = ContinuousCapture(source, KernelClassifier(), synchronize=lambda: None, timeline_wanted=broken)
    cap.ensure_started()
    cap.begin("a")
    source.kernel("nvjet_a", 100)
    cap.end()
    (a,) = cap.flush()
    assert a.stats.kernel_count == 1 and a.timeline is None and "timelines could not be drawn: boom" in a.note
