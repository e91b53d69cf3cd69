"""``gpuutil trace RUN_DIR TEST``: one test's window as a Chrome trace, opened again by a reader of that format."""
from __future__ import annotations

import json
from pathlib import Path

from pytest_gpuutil.analysis import timeline as timelines
from pytest_gpuutil.analysis.classify import KernelClassifier
from pytest_gpuutil.cli import main
from pytest_gpuutil.records import TestRecord
from pytest_gpuutil.report.timelines import write_sidecar
from pytest_gpuutil.rundoc.document import RUN_FORMAT, RUN_VERSION
from pytest_gpuutil.traces.model import GpuColumns, GpuEvent, SyncColumns, Window
from pytest_gpuutil.traces.reader import read_trace

US = 1_000
TEST = "tests/test_loop.py::test_item_in_a_loop"
PLACE = {"file": "tests/test_loop.py", "line": 14, "function": "test_item_in_a_loop", "text": "loss.item()",
         "what": "20 syncs, 1.0 ms of host time", "count": 20, "ms": 1.0}


def run_dir(tmp_path: Path) -> Path:
    events = [GpuEvent("nvjet_sm90_tst", "kernel", "0", "7", 1_000 * US + i * 100 * US, 40 * US) for i in range(20)]
    events += [GpuEvent("Memcpy DtoH (Device -> Pinned)", "gpu_memcpy", "0", "7", 1_041 * US + i * 100 * US, 2 * US)
               for i in range(20)]
    syncs = SyncColumns(["cudaStreamSynchronize"] * 20, [1_010 * US + i * 100 * US for i in range(20)], [35 * US] * 20)
    window = Window(0, 4_000 * US, "test_call")
    compact = timelines.encode(timelines.build(GpuColumns.from_events(events), window, KernelClassifier(), syncs=syncs))
    compact["hs"] = [[1_050 * US + i * 500 * US, "tests/test_loop.py:14 test_item_in_a_loop: loss.item()"] for i in range(5)]
    write_sidecar(tmp_path, {TEST: compact, "tests/test_loop.py::test_other": compact})
    finding = {"rule": "host-sync", "severity": "high", "message": "the host waited 20 times", "fix": "f",
               "saving_ms": 1.5, "saving_pct": 40.0, "evidence": {}, "places": [PLACE]}
    doc = {"format": RUN_FORMAT, "version": RUN_VERSION, "tests": [TestRecord(TEST, "passed", findings=(finding,)).to_dict()]}
    (tmp_path / "gpu_util.json").write_text(json.dumps(doc))
    return tmp_path


def test_the_window_is_a_chrome_trace_that_trace_readers_open(tmp_path: Path, capsys) -> None:
    out = tmp_path / "loop.json"
    assert main(["trace", str(run_dir(tmp_path)), "item_in_a_loop", "-o", str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    doc = json.loads(out.read_text())
    events = doc["traceEvents"]
    assert all({"ph", "name", "pid"} <= set(e) for e in events)
    complete = [e for e in events if e["ph"] == "X"]
    assert all(isinstance(e["ts"], (int, float)) and e["dur"] >= 0 for e in complete)
    assert len([e for e in complete if e["cat"] == "kernel"]) == 20
    assert len([e for e in complete if e["cat"] == "cuda_sync"]) == 20
    samples = [e for e in complete if e["cat"] == "host_sample"]
    assert len(samples) == 5 and samples[0]["name"] == "tests/test_loop.py:14 test_item_in_a_loop"
    (finding,) = [e for e in events if e["ph"] == "i"]
    assert finding["name"] == "host-sync" and finding["args"]["places"][0]["line"] == 14
    # the project's own trace reader opens it: the GPU work and the host's waits come back
    trace = read_trace(out)
    assert len(trace.columns) == 40 and len(trace.syncs) == 20
    kernel = next(e for e in complete if e["cat"] == "kernel")
    assert kernel["ts"] == 1_000 and kernel["dur"] == 40


def test_a_test_without_a_timeline_is_one_error_line(tmp_path: Path, capsys) -> None:
    directory = run_dir(tmp_path)
    assert main(["trace", str(directory), "test_nothing_like_it"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no timeline of a test matching 'test_nothing_like_it'" in err
    assert main(["trace", str(directory), "tests/test_loop.py"]) == 1  # two tests match
    assert "matches 2 tests" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["trace", str(tmp_path / "empty"), "x"]) == 1
    assert "no timelines in this run" in capsys.readouterr().err
