"""A test's limits (``@pytest.mark.gpu_util(...)``, ``--gpu-util-min-busy`` and the like), checked
right after its call, and where its GPU memory went when it is over a memory limit or out of memory."""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable, Generator

import pytest

from pytest_gpuutil.session.record_timing import hooked_record

if TYPE_CHECKING:
    from pytest_gpuutil.per_test import TestResults
    from pytest_gpuutil.session.state import GpuUtilSession

MEMORY_SECTION = "GPU memory (pytest-gpuutil)"
#: a limited test's limits' state ("passed", "failed", "not_checked"), and the record its call's limits
#: were checked on with what it was built from, until its teardown takes them
THRESHOLD_KEY: pytest.StashKey[str] = pytest.StashKey()
CALL_RECORD_KEY: pytest.StashKey[Any] = pytest.StashKey()


class CallLimits:
    """The call's report of a test with limits, checked as it is made (before any plugin logs it):
    registered only in a run where limits can apply (run-wide ones, or a gpu_util marker)."""

    def __init__(self, state: GpuUtilSession, timing: Any, results: Callable[[Any], TestResults]):
        self.state = state
        self.timing = timing
        self._results = results

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: Any, call: Any) -> Generator[None, Any, None]:
        outcome = yield
        if call.when != "call":
            return
        began = time.perf_counter()
        try:
            report = outcome.get_result()
            if self.timing.thresholds_apply(item):
                checked, built = check_call_limits(self.state, item, report, self._results(item))
                if checked:
                    item.stash[THRESHOLD_KEY] = checked
                if built is not None:
                    item.stash[CALL_RECORD_KEY] = built  # its teardown takes it, not built again
        finally:
            self.state.measuring.own_s += time.perf_counter() - began

    @staticmethod
    def taken(item: Any) -> tuple[str, Any]:
        """At the test's teardown: its limits' state and its call's record (the item lets go of the record)."""
        stash = item.stash
        call_record = stash.get(CALL_RECORD_KEY, None)
        if call_record is not None:
            del stash[CALL_RECORD_KEY]
        return stash.get(THRESHOLD_KEY, ""), call_record


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
    built = state.make_record(item.nodeid, outcome_of(None, report, None), profile, results, memory)
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
