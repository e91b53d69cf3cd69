"""Chrome traces written from columns read back to the same events and the same window."""
from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from pytest_gpuutil import Window, analyze, read_trace
from pytest_gpuutil.analysis.windows import WindowStats, window_stats
from pytest_gpuutil.traces.writer import chrome_trace_text, write_chrome_trace
from tests.helpers import DATA

REAL_TRACES = sorted(p.name for p in DATA.glob("*.json.gz") if "idle" not in p.name)


@pytest.mark.parametrize("name", REAL_TRACES)
def test_a_written_window_reads_back_to_the_same_figures(name: str, tmp_path) -> None:
    trace = read_trace(str(DATA / name))
    starts = np.asarray(trace.columns.starts_ns, dtype=np.int64)
    ends = starts + np.asarray(trace.columns.durs_ns, dtype=np.int64)
    window = Window(int(starts.min()) + 7, int(ends.max()) - 3, "test_call")
    path = tmp_path / "t.json.gz"
    write_chrome_trace(str(path), trace.columns, window, label="t.py::test_x")
    back = read_trace(str(path))
    summary = analyze(back)
    assert summary.window_source == "profiler"
    assert summary.window.duration_ns == window.duration_ns
    (expected,) = window_stats(trace.columns, [window])
    got = WindowStats.from_summary(summary)
    assert (got.busy_us, got.busy_pct, got.mm_conv_pct, got.kernel_count, got.categories, got.top_kernel, got.devices) == (
        expected.busy_us, expected.busy_pct, expected.mm_conv_pct, expected.kernel_count, expected.categories,
        expected.top_kernel, expected.devices)


def test_times_are_exact_and_names_escaped(tmp_path) -> None:
    from pytest_gpuutil import GpuColumns

    cols = GpuColumns(['say "hi"\\n'], ["kernel"], [0], ["7"], [1_234_567_891_001], [1_001])
    text = chrome_trace_text(cols, Window(1_234_567_890_500, 1_234_567_899_999, "test_call"))
    doc = json.loads(text)
    kernel = doc["traceEvents"][1]
    assert doc["baseTimeNanoseconds"] == 1_234_567_890_000
    assert '"ts": 1.001, "dur": 1.001' in text and kernel["name"] == 'say "hi"\\n'
    path = tmp_path / "x.json.gz"
    write_chrome_trace(str(path), cols, Window(1_234_567_890_500, 1_234_567_899_999, "test_call"))
    assert json.loads(gzip.decompress(path.read_bytes())) == doc
    assert [p.name for p in tmp_path.iterdir()] == ["x.json.gz"]  # no temporary file left


def test_the_host_waits_are_written_and_read_back_with_the_same_findings(tmp_path) -> None:
    from pytest_gpuutil.analysis.findings import find, find_in_trace
    from pytest_gpuutil.traces.model import GpuColumns, GpuEvent, SyncColumns

    events = GpuColumns.from_events(GpuEvent("nvjet_sm90_tst", "kernel", 0, 7, 1_000_000 + i * 60_000, 20_000)
                                    for i in range(50))
    syncs = SyncColumns(["Stream Sync"] * 50, [1_005_000 + i * 60_000 for i in range(50)], [16_000] * 50)
    window = Window(1_000_000, 4_000_000, "test_call")
    path = tmp_path / "t.json.gz"
    write_chrome_trace(str(path), events, window, label="t.py::test_x", syncs=syncs)
    back = read_trace(str(path))
    assert [(n, s + back.base_time_ns, d) for n, s, d in back.syncs.rows()] == syncs.rows()
    assert find_in_trace(back) == find(events, window, syncs=syncs) and find_in_trace(back)[0].rule == "host-sync"
