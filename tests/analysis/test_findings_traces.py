"""The findings rules on real GPU recordings: each rule's problem shows it, its healthy control does not.

``tests/data/findings/`` holds torch.profiler traces and, in ``live/``, windows of the plugin's own
CUPTI capture (GPU work and the host's waits, activity kind 38), recorded on an H100 by
``validation/findings_truth.py`` (see FINDINGS.md there). The older traces (tests/data, the zoo)
check the gates and that reading a trace and its summary twice gives the same findings.
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from pytest_gpuutil.analysis.classify import KernelClassifier
from pytest_gpuutil.analysis.finding_records import UNDER_LIMIT
from pytest_gpuutil.analysis.findings import find, find_in_trace, glance, may_fire
from pytest_gpuutil.analysis.rules import RULES_BY_ID
from pytest_gpuutil.analysis.summary import analyze
from pytest_gpuutil.traces.model import GpuColumns, GpuEvent, SyncColumns, Window
from pytest_gpuutil.traces.reader import read_trace
from tests.helpers.reference import DATA

FINDINGS = DATA / "findings"
FIVE = ("pageable-memcpy", "host-sync", "launch-bound", "fp32-matmul", "gpu-idle")

#: recording -> (rules it must show, rules it must not show); "gpu-idle:before": most idle time before the first kernel
EXPECT = {
    "bf16_matmul_loop": ((), FIVE),
    "fp32_matmul": (("fp32-matmul",), ("gpu-idle",)),
    "tf32_matmul": ((), FIVE),
    "fp32_conv": (("fp32-matmul",), ("gpu-idle",)),
    "tf32_conv": ((), FIVE),
    "pageable_copies": (("pageable-memcpy",), ("host-sync",)),  # 10 waits, but the GPU is busy after them
    "pinned_copies": ((), FIVE + ("memcpy-dominant",)),  # the copies overlap the matmuls
    "small_kernels": (("launch-bound",), ("gpu-idle",)),  # its idle time is launch-bound's
    "small_kernels_graph": ((), FIVE),  # the same kernels, replayed from a CUDA graph
    "large_kernels": ((), FIVE),
    "item_in_loop": (("host-sync",), ("pageable-memcpy",)),  # .item()'s 4-byte copies are not pageable-memcpy's
    "item_in_loop_sync_events": (("host-sync",), ("pageable-memcpy",)),
    "sync_in_loop": (("host-sync",), ()),
    "no_sync_loop": ((), ("host-sync", "launch-bound")),  # under the profiler the host fell behind: gpu-idle
    "idle_between": (("gpu-idle:between",), ("launch-bound",)),
    "idle_before": (("gpu-idle:before",), ()),
    "idle_after": (("gpu-idle:after",), ()),
}
TRACES = sorted(p.name.removesuffix(".json.gz") for p in FINDINGS.glob("*.json.gz"))
LIVE = sorted(p.name.removesuffix(".json.gz") for p in (FINDINGS / "live").glob("*.json.gz"))
OLDER = sorted(DATA.glob("*.json.gz")) + sorted((DATA / "zoo").glob("*.json.gz"))


def assert_expected(name: str, found: list) -> None:
    must, must_not = EXPECT[name]
    # a finding its rule keeps under one of its limits is listed under the floor, never reported
    by_rule = {f.rule: f for f in found if not f.evidence.get(UNDER_LIMIT)}
    for want in must:
        rule, _, mostly = want.partition(":")
        assert rule in by_rule, f"{name}: no {rule} in {sorted(by_rule)}"
        if mostly:
            assert by_rule[rule].evidence["mostly"] == mostly, by_rule[rule].message
    for rule in must_not:
        assert rule not in by_rule, f"{name}: {rule}: {by_rule[rule].message}"


def live_window(name: str) -> tuple[GpuColumns, Window, SyncColumns, int]:
    doc = json.loads(gzip.decompress((FINDINGS / "live" / f"{name}.json.gz").read_bytes()))
    events = GpuColumns.from_events(GpuEvent(*row) for row in doc["events"])
    syncs = SyncColumns(*map(list, zip(*doc["syncs"]))) if doc["syncs"] else SyncColumns()
    return events, Window(0, doc["window_ns"], "test_call"), syncs, doc["cutoff_ns"]


def test_every_recording_has_its_expectations() -> None:
    assert set(TRACES) == set(EXPECT) and set(LIVE) == set(EXPECT) - {"item_in_loop_sync_events"}
    for rule in FIVE:  # each required rule is shown by a problem and held back in a control
        assert any(rule in (w.partition(":")[0] for w in must) for must, _ in EXPECT.values()), rule
        assert any(rule in must_not for _, must_not in EXPECT.values()), rule
    assert all(p.stat().st_size < 300_000 for p in FINDINGS.rglob("*.json.gz"))  # small, as the issue asks


@pytest.mark.parametrize("name", TRACES)
def test_rules_on_traces(name: str) -> None:
    trace = read_trace(FINDINGS / f"{name}.json.gz")
    found = find_in_trace(trace)
    assert_expected(name, list(found))
    # with analyze's summary (what gpuutil analyze passes) the findings are the same
    assert find_in_trace(trace, summary=analyze(trace)) == found


@pytest.mark.parametrize("name", LIVE)
def test_rules_on_live_capture_windows(name: str) -> None:
    events, window, syncs, cutoff = live_window(name)
    found = find(events, window, syncs=syncs, sync_end_ns=cutoff)
    assert_expected(name, list(found))
    # as the capture holds them: int64 arrays (the numpy way gives the same findings)
    assert find(as_arrays(events), window, syncs=syncs, sync_end_ns=cutoff) == found


def test_the_captures_closing_synchronize_is_left_out() -> None:
    events, window, syncs, cutoff = live_window("bf16_matmul_loop")
    assert list(syncs.names) == ["Context Sync"] and syncs.starts_ns[0] >= cutoff  # the capture's own wait
    found = find(events, window, syncs=syncs, sync_end_ns=cutoff)
    assert found == ()


def test_host_sync_reads_runtime_calls_and_cuda_sync_records_alike() -> None:
    plain = find_in_trace(read_trace(FINDINGS / "item_in_loop.json.gz"))
    both = find_in_trace(read_trace(FINDINGS / "item_in_loop_sync_events.json.gz"))
    waits = [next(f for f in found if f.rule == "host-sync").evidence for found in (plain, both)]
    assert waits[0]["waits"] == waits[1]["waits"] == 102  # 100 .item() and the recording's own two
    assert waits[1]["by_name"]["Stream Sync"] == 100 == waits[1]["by_name"]["cudaStreamSynchronize"]


def test_the_evidence_names_the_numbers() -> None:
    found = find_in_trace(read_trace(FINDINGS / "pageable_copies.json.gz"))
    finding = next(f for f in found if f.rule == "pageable-memcpy")
    assert finding.evidence["copies"] == 10 and finding.severity == "medium"  # 8 host->device, 2 device->host
    assert set(finding.evidence["by_name"]) == {"Memcpy HtoD (Pageable -> Device)", "Memcpy DtoH (Device -> Pageable)"}
    small = next(f for f in find_in_trace(read_trace(FINDINGS / "small_kernels.json.gz")) if f.rule == "launch-bound")
    assert small.evidence["kernels"] == 1000 and small.evidence["median_kernel_us"] < 2
    assert 2 <= small.evidence["median_gap_us"] <= 50


@pytest.mark.parametrize("path", OLDER + sorted(FINDINGS.glob("*.json.gz")), ids=lambda p: p.name)
def test_the_gates_never_hide_a_finding(path: Path) -> None:
    """A rule's gate (what a capture checks before looking at a window's events) is a necessary
    condition: on every real trace, each rule that fires passes its gate."""
    trace = read_trace(path)
    summary = analyze(trace, KernelClassifier())
    found = find_in_trace(trace)
    seen = glance(summary, len(trace.syncs))
    for finding in found:
        rule = RULES_BY_ID[finding.rule]
        assert rule.gate is None or rule.gate(seen, rule.limits), (path.name, finding.rule)
    assert may_fire(seen) or not found


def test_older_traces_show_what_they_hold() -> None:
    """The zoo's fp32 matmul and the SDPA math trace (fp32 without TF32) against the TF32 one."""
    rules = {p.name: {f.rule for f in find_in_trace(read_trace(p))} for p in OLDER}
    assert "fp32-matmul" in rules["matmul_fp32.json.gz"] and "fp32-matmul" not in rules["matmul_tf32.json.gz"]
    assert "fp32-matmul" in rules["sdpa_math.json.gz"] and "fp32-matmul" not in rules["matmul_bf16.json.gz"]
    assert "pageable-memcpy" not in rules["memcpy_h2d_d2h.json.gz"]  # pinned copies
    # a kernel, torch.cuda.synchronize(), a sleep: the GPU idles after each of the 13 waits
    assert rules["duty_cycle_25.json.gz"] == {"host-sync"} and rules["idle_no_gpu_work.json.gz"] == set()


def as_arrays(columns: GpuColumns) -> GpuColumns:
    """The same events as the live capture holds them: int64 arrays, names and kinds coded together."""
    import numpy as np

    from pytest_gpuutil.traces.model import CodedColumn

    pairs = list(dict.fromkeys(zip(columns.names, columns.kinds)))
    code_of = {pair: i for i, pair in enumerate(pairs)}
    codes = np.asarray([code_of[pair] for pair in zip(columns.names, columns.kinds)], dtype=np.int64)
    return GpuColumns(CodedColumn(codes, [n for n, _ in pairs]), CodedColumn(codes, [k for _, k in pairs]),
                      np.asarray([int(d) for d in columns.devices], dtype=np.int64),
                      np.asarray([int(s) for s in columns.streams], dtype=np.int64),
                      np.asarray(columns.starts_ns, dtype=np.int64), np.asarray(columns.durs_ns, dtype=np.int64))


@pytest.mark.parametrize("path", OLDER + sorted(FINDINGS.glob("*.json.gz")), ids=lambda p: p.name)
def test_arrays_and_lists_give_the_same_findings(path: Path) -> None:
    """The numpy way (live capture, big traces) and the plain-Python way (small traces) agree,
    with and without analyze's timeline; on windows cut through the middle of the trace too."""
    trace = read_trace(path)
    if not all(str(d).lstrip("-").isdigit() for d in set(trace.columns.devices)):
        pytest.skip("device ids that are not numbers")
    arrays = as_arrays(trace.columns)
    summary = analyze(trace)
    window = summary.window
    middle = Window(window.start_ns + window.duration_ns // 3, window.end_ns - window.duration_ns // 4, "test_call")
    for win in (window, middle):
        plain = [f.to_dict() for f in find(trace.columns, win, syncs=trace.syncs)]
        assert [f.to_dict() for f in find(arrays, win, syncs=trace.syncs)] == plain, win
    with_summary = [f.to_dict() for f in find_in_trace(trace, summary=summary)]
    assert with_summary == [f.to_dict() for f in find(arrays, window, syncs=trace.syncs)]
