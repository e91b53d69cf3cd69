"""A test's limits (``@pytest.mark.gpu_util(...)``, ``--gpu-util-min-busy`` and the like), checked
right after its call, and where its GPU memory went when it is over a memory limit or out of memory."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pytest_gpuutil.session.record_timing import hooked_record

if TYPE_CHECKING:
    from pytest_gpuutil.per_test import TestResults
    from pytest_gpuutil.session.state import GpuUtilSession

MEMORY_SECTION = "GPU memory (pytest-gpuutil)"


def check_call_limits(state: GpuUtilSession, item: Any, report: Any, results: TestResults) -> tuple[str, Any]:
    """Fail the call's report where the test misses a limit; "passed", "failed", "not_checked", or ""
    (no limits apply), and the record it was checked on, before the record hook, with the profile
    and memory it was built from (see Measuring.ready: the teardown reuses it), or None."""
    from pytest_gpuutil.gates.thresholds import Thresholds, check, merge
    from pytest_gpuutil.session.measuring import outcome_of

    thresholds = state.default_thresholds
    for marker in reversed(list(item.iter_markers("gpu_util"))):  # farthest first, so the closest marker wins
        thresholds = merge(thresholds, Thresholds.from_kwargs(marker.kwargs, f"@pytest.mark.gpu_util on {item.nodeid}"))
    if thresholds is None or thresholds.is_empty:
        return "", None
    profile, memory = state.measuring.profiles.get(item.nodeid), state.measuring.measurement.memory.get(item.nodeid)
    built = state.make_record(item.nodeid, outcome_of({"call": report}), profile, results, memory)
    record = hooked_record(item, built, "call")
    kept = (built, profile, memory)
    misses = check(thresholds, record)
    if misses is None:
        return "not_checked", kept
    if misses and report.passed:
        report.outcome = "failed"
        report.longrepr = "\n".join(m.message for m in misses)
    if any(m.threshold_name in ("max_memory", "max_leak") for m in misses):
        add_memory_section(state, item.nodeid, report)
    return ("failed" if misses else "passed"), kept


def add_memory_section(state: GpuUtilSession, nodeid: str, report: Any) -> None:
    """Where the memory went, in the failure report of a test over a memory limit or out of memory."""
    text = state.memory_report(nodeid)
    if text:
        report.sections.append((MEMORY_SECTION, text))


def ran_out_of_memory(state: GpuUtilSession, nodeid: str) -> bool:
    """Whether the allocator counted an out-of-memory error in the test's call."""
    memory = state.measuring.measurement.memory.get(nodeid)
    return memory is not None and any(d.ooms for d in memory.devices)
