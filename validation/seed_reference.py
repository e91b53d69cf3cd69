"""A faithful re-implementation of torch/_functorch/benchmark_utils.py's trace analysis (the seed).

Same steps and the same quirks as ``compute_utilization`` there, so its figures and its speed can
be compared with ``pytest_gpuutil.analyze``:

- ``json.load`` of the whole file (``.json.gz`` is the only addition: it is opened with gzip);
- GPU pids are the ``pid`` of every ``process_labels`` event whose ``args.labels`` contains "GPU"
  (Kineto labels "GPU 0" … "GPU 15" whether or not those GPUs exist);
- a GPU event is any ``ph == "X"`` event on such a pid, whatever its ``cat``: kernels, memcpy,
  memset **and ``gpu_user_annotation``** (a label, not GPU work) all count as busy;
- events are sorted by ``ts`` over all devices together and merged by one Python loop
  (``get_duration``), in float microseconds, with no window clipping;
- mm/conv events are those whose name contains ``gemm``, ``conv``, ``cutlass`` or ``wgrad`` (so
  Hopper cuBLAS ``nvjet_*`` kernels are missed and ``fmha_cutlass*`` attention is counted);
- both figures are divided by ``total_length`` (seconds of the *unprofiled* run in the seed).

The module-level ``gpu_pids`` global of the seed is passed as an argument here instead; nothing
else differs. torch is not imported (the seed module imports it at load; that cost is left out).
"""
from __future__ import annotations

import gzip
import json
from typing import Any, Optional


def get_chrome_trace_events(filename: str) -> list[dict[str, Any]]:
    """``json.load`` the trace and return its ``traceEvents`` (gzip'd files are decompressed)."""
    with open(filename, "rb") as probe:
        gzipped = probe.read(2) == b"\x1f\x8b"
    opener = gzip.open if gzipped else open
    with opener(filename, "rt", encoding="utf-8") as f:  # type: ignore[operator]
        data = json.load(f)
    events = data["traceEvents"]
    return events


def get_gpu_pids(events: list[dict[str, Any]]) -> list[Any]:
    """The seed's loop: pids of ``process_labels`` events whose labels contain "GPU"."""
    gpu_pids = []
    for event in events:
        if "name" not in event:
            continue
        if event["name"] == "process_labels" and "GPU" in event["args"]["labels"]:
            gpu_pids.append(event["pid"])
    return gpu_pids


def is_gpu_compute_event(event: dict[str, Any], gpu_pids: list[Any]) -> bool:
    return "pid" in event and event["pid"] in gpu_pids and "ph" in event and event["ph"] == "X"


def get_sorted_gpu_events(events: list[dict[str, Any]], gpu_pids: list[Any]) -> list[dict[str, Any]]:
    sorted_gpu_events = []
    for event in events:
        if not is_gpu_compute_event(event, gpu_pids):
            continue
        sorted_gpu_events.append(event)
    return sorted(sorted_gpu_events, key=lambda x: x["ts"])


def get_duration(sorted_gpu_events: list[dict[str, Any]]) -> float:
    """The seed's union loop over events sorted by ``ts`` (float µs)."""
    if len(sorted_gpu_events) == 0:
        return 0
    event = sorted_gpu_events[0]
    current_end_time = event["ts"] + event["dur"]
    total_duration = event["dur"]
    for event in sorted_gpu_events[1:]:
        start_time = max(event["ts"], current_end_time)
        end_time = event["ts"] + event["dur"]
        total_duration = total_duration + max(end_time - start_time, 0)
        current_end_time = max(current_end_time, end_time)
    return total_duration


def is_mm_conv_event(event: dict[str, Any]) -> bool:
    return "name" in event and (
        "gemm" in event["name"]
        or "conv" in event["name"]
        or "cutlass" in event["name"]
        or "wgrad" in event["name"]
    )


def get_sorted_gpu_mm_conv_events(events: list[dict[str, Any]], gpu_pids: list[Any]) -> list[dict[str, Any]]:
    gpu_events = get_sorted_gpu_events(events, gpu_pids)
    sorted_events = []
    for event in gpu_events:
        if not is_mm_conv_event(event):
            continue
        sorted_events.append(event)
    return sorted_events


def _durations(events: list[dict[str, Any]]) -> tuple[float, float]:
    """(busy µs, mm/conv µs) exactly as the seed computes them (two passes, as it does)."""
    gpu_pids = get_gpu_pids(events)
    busy = get_duration(get_sorted_gpu_events(events, gpu_pids))
    mm_conv = get_duration(get_sorted_gpu_mm_conv_events(events, gpu_pids))
    return busy, mm_conv


def compute_utilization(filename: str, total_length: float) -> tuple[float, float]:
    """The seed's function: (utilization, mm/conv utilization) as fractions of ``total_length`` s."""
    busy, mm_conv = _durations(get_chrome_trace_events(filename))
    total_length = total_length * 1e6
    return busy / total_length, mm_conv / total_length


def profiler_span_s(events: list[dict[str, Any]]) -> Optional[float]:
    """Duration (s) of the profiler's own ``cat: "Trace"`` span, if the trace has one."""
    for event in events:
        if event.get("cat") == "Trace" and event.get("ph") == "X" and "dur" in event:
            return event["dur"] / 1e6
    return None


def seed_compute_utilization(path: str, total_length_s: Optional[float] = None) -> tuple[float, float, float]:
    """``(busy %, mm/conv %, busy µs)`` by the seed's method.

    ``total_length_s`` is the seed's denominator (the unprofiled run's wall time). When it is not
    given, the profiler's ``Trace`` span is used (the window ``analyze`` uses by default), else the
    first-to-last span of the seed's GPU events; with neither the percentages are 0.
    """
    events = get_chrome_trace_events(path)
    busy_us, mm_conv_us = _durations(events)
    if total_length_s is None:
        total_length_s = profiler_span_s(events)
    if total_length_s is None:
        gpu = get_sorted_gpu_events(events, get_gpu_pids(events))
        total_length_s = (max(e["ts"] + e["dur"] for e in gpu) - gpu[0]["ts"]) / 1e6 if gpu else 0.0
    if total_length_s <= 0:
        return 0.0, 0.0, float(busy_us)
    total_us = total_length_s * 1e6
    return 100.0 * busy_us / total_us, 100.0 * mm_conv_us / total_us, float(busy_us)
