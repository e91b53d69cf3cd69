"""This process's side of measuring: a plain run, or one xdist worker.

Each test's call phase is measured by :class:`~pytest_gpuutil.measurement.Measurement` (a window
of the continuous capture, or a per-test profiler). A finished test waits here until its profile
is known (a continuous capture gives profiles when it is flushed); then its record is built and
handed on as a :class:`FinishedTest`: in a plain run straight to the receiver, from an xdist worker
packed with its fixtures' metric rows into a payload (JSON-able, so xdist can carry it on the
test's teardown report to the controller; see :mod:`pytest_gpuutil.session.receiving`).
"""
from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, NamedTuple, Optional

from pytest_gpuutil.report.terminal import display_path
from pytest_gpuutil.rundoc.document import safe_name

if TYPE_CHECKING:
    from pytest_gpuutil.measurement import Measurement, TestMemory, TestProfile
    from pytest_gpuutil.per_test import TestResults
    from pytest_gpuutil.records import TestRecord

    #: ``[(nodeid, outcome, profile, results, memory), ...] -> their records``
    MakeRecords = Callable[[list[tuple[str, str, Optional[TestProfile], TestResults, Optional[TestMemory]]]],
                           list[TestRecord]]


class PendingTest:
    """A finished test whose record waits for its profile (a continuous capture not yet flushed); slots:
    no ``__dict__`` for Python's collector to track while it waits."""

    __test__ = False
    __slots__ = ("item", "nodeid", "outcome", "results", "thresholds", "call_record")

    def __init__(self, item: Any, nodeid: str, outcome: str, results: TestResults, thresholds: str,
                 call_record: Optional[tuple[Any, Any, Any]] = None):
        self.item, self.nodeid, self.outcome, self.results, self.thresholds = item, nodeid, outcome, results, thresholds
        #: the record its call's limits were checked on (before the record hook), with the profile and
        #: memory it was built from: reused when they are still the test's (see :meth:`Measuring.ready`)
        self.call_record = call_record


class FinishedTest(NamedTuple):
    """A test whose record is built: what the receiver keeps of it (or a worker sends as a payload).
    A named tuple: one is made for every test (a frozen dataclass's __init__ costs ~1 µs more)."""

    __test__ = False

    record: TestRecord
    results: TestResults
    thresholds: str
    #: the call's timeline in its compact form, when it is among those drawn
    timeline: Optional[dict[str, Any]] = None


def outcome_of(phases: dict[str, Any]) -> str:
    """One word for a test from its setup/call/teardown reports."""
    setup, call, teardown = phases.get("setup"), phases.get("call"), phases.get("teardown")
    if setup is not None and setup.failed:
        return "error"
    if setup is not None and setup.skipped:
        return "skipped"
    if call is not None:
        if hasattr(call, "wasxfail"):
            return "xfailed" if call.skipped else "xpassed"
        if call.failed:
            return "failed"
        if call.skipped:
            return "skipped"
    if teardown is not None and teardown.failed:
        return "error"
    return "passed"


def _reused(test: PendingTest, profile: Any, memory: Any) -> Optional[TestRecord]:
    """The record built when the test's limits were checked, if it was built from this same profile
    and memory and the test's outcome has not changed since (a teardown error changes it)."""
    if test.call_record is None:
        return None
    record, its_profile, its_memory = test.call_record
    if its_profile is not profile or its_memory is not memory or record.outcome != test.outcome:
        return None
    return record


def _charged(record: TestRecord, built_here: bool, ms: float) -> TestRecord:
    """The record with ``ms`` more of measuring cost (building it, its trace file).

    A record built here and handed back as it was is still this process's own (the record hook,
    if any, returned None): its ``measure_ms`` is set in place, as the dataclass's own __init__
    sets fields, without ``dataclasses.replace`` building all ~35 fields again (several µs a
    test); a record that a hook replaced is copied.
    """
    total = (record.measure_ms or 0.0) + ms
    if built_here:
        object.__setattr__(record, "measure_ms", total)
        return record
    return dataclasses.replace(record, measure_ms=total)


class Measuring:
    """The tests of this process: measured, then waiting for their profiles, then sent on as payloads."""

    def __init__(self, measurement: Measurement, make_records: MakeRecords, *, worker_id: str, traces: str,
                 output_dir: Path, trace_errors: list[str]):
        self.measurement = measurement
        #: the records of several tests at once (a flush's)
        self._make_records = make_records
        self._worker_id = worker_id
        #: --gpu-util-traces: "none", "failed" or "all"
        self._traces = traces
        self._output_dir = output_dir
        #: trace files that could not be written (the run's summary lists them)
        self._trace_errors = trace_errors
        #: profiles known and not yet in a record, by node id
        self.profiles: dict[str, TestProfile] = {}
        #: tests whose call phase had a window in the continuous capture, until their record is built
        self.windowed: set[str] = set()
        self.pending: list[PendingTest] = []
        self._flushed = False
        #: seconds of the plugin's own work in this process so far: every hook's time (the session's
        #: start-up apart), the flushes, the session's end and the summary (the plugin adds to it)
        self.own_s = 0.0
        #: when the part being timed now began (the session's end, the summary), else None
        self.own_open: Optional[float] = None

    def own_now(self) -> float:
        """The plugin's own seconds in this process up to now (the part being timed now included)."""
        opened = self.own_open
        return self.own_s + (time.perf_counter() - opened if opened is not None else 0.0)

    def begin_test(self, nodeid: str, results: TestResults) -> None:
        measurement = self.measurement
        if measurement.continuous:
            self.windowed.add(nodeid)
        profile = measurement.begin(nodeid, results)
        if profile is not None:
            self.windowed.discard(nodeid)
            self.profiles[nodeid] = profile

    def end_test(self, nodeid: str, results: TestResults) -> None:
        profile = self.measurement.end(nodeid, results)
        if profile is not None:
            self.profiles[nodeid] = profile

    def flush(self, wait: bool = True) -> None:
        """Turn the capture so far into profiles (``wait=False``: the last tests' hardware counters may
        come with a later flush; their records wait for them)."""
        self.profiles.update(self.measurement.flush(wait))
        self._flushed = True

    def flush_due(self) -> Optional[str]:
        return self.measurement.flush_due()

    def test_finished(self, pending: PendingTest) -> None:
        self.pending.append(pending)

    def _ready(self, test: PendingTest) -> bool:
        profile = self.profiles.get(test.nodeid)
        if profile is not None and profile.counters_pending:
            return False
        return test.nodeid not in self.windowed or profile is not None

    def ready(self, finalize: Callable[[Any, TestRecord], TestRecord]) -> list[FinishedTest]:
        """The records of the finished tests whose profiles are known, in the order they finished.

        ``finalize(item, record)`` applies the pytest_gpuutil_record hook. Each test leaves the
        pending list once, so each record travels once. Between flushes only the newest test can
        have become ready, so only it is looked at.
        """
        if self._flushed:
            self._flushed = False
            done, waiting = [], []
            for test in self.pending:
                (done if self._ready(test) else waiting).append(test)
            self.pending = waiting
        elif not self.pending:
            return []
        else:
            newest = self.pending[-1].nodeid
            if newest in self.windowed and newest not in self.profiles:
                return []  # its window waits for a flush (most teardowns between flushes)
            if not self._ready(self.pending[-1]):
                return []
            done = [self.pending.pop()]
        return self._finished(done, finalize)

    def _finished(self, done: list[PendingTest],
                  finalize: Callable[[Any, TestRecord], TestRecord]) -> list[FinishedTest]:
        """The records of these tests, those not built yet built together (a flush's tests at once);
        each is charged an equal share of that and its own time after (the record hook, its trace)."""
        if not done:
            return []
        began = time.perf_counter()
        profiles, memories = self.profiles, self.measurement.memory
        windowed = self.windowed
        their_profiles, reused, to_build = [], [], []
        for test in done:
            nodeid = test.nodeid
            windowed.discard(nodeid)
            profile, memory = profiles.pop(nodeid, None), memories.pop(nodeid, None)
            their_profiles.append(profile)
            built = _reused(test, profile, memory)
            reused.append(built)
            if built is None:
                to_build.append((nodeid, test.outcome, profile, test.results, memory))
        made = iter(self._make_records(to_build) if to_build else ())
        share_ms = (time.perf_counter() - began) * 1000 / len(done)
        finished = []
        traces = self._traces != "none"
        for test, profile, built in zip(done, their_profiles, reused):
            began = time.perf_counter()
            if built is None:
                built = next(made)
            record = finalize(test.item, built)
            if traces:
                self._write_trace(record, profile)
            if record.measure_ms is not None:
                record = _charged(record, record is built, share_ms + (time.perf_counter() - began) * 1000)
            timeline = None
            if profile is not None and profile.timeline is not None:  # drawn only for a page (--gpu-util-html)
                timeline = profile.timeline_with_counters()
            finished.append(FinishedTest(record, test.results, test.thresholds, timeline))
        return finished

    def close(self, finalize: Callable[[Any, TestRecord], TestRecord]) -> list[FinishedTest]:
        """The session's end: the last profiles, and the records of every test still pending."""
        self.profiles.update(self.measurement.close())
        self.windowed.intersection_update(self.profiles)  # a window never closed has no profile: build without
        self._flushed = True
        return self.ready(finalize)

    def process_info(self) -> dict[str, Any]:
        m = self.measurement
        return {"worker": self._worker_id or "main", "mode": m.mode, "source": m.source_name,
                "startup_s": m.startup_s, "startup_gc_s": m.startup_gc_s if m.startup_s is not None else None,
                "fallback": m.fallback_reason,
                "broken": m.windows.broken, "own_s": self.own_now(), **m.info()}

    def _write_trace(self, record: TestRecord, profile: Optional[TestProfile]) -> None:
        mode = self._traces
        if profile is None or mode == "none" or (mode == "failed" and record.outcome not in ("failed", "error")):
            return
        if profile.profiler is None and (profile.events is None or profile.window is None):
            return
        path = self._output_dir / "traces" / f"{safe_name(record.test)}.json.gz"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            if profile.profiler is not None:
                tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp.json.gz")
                profile.profiler.export(str(tmp))
                os.replace(tmp, path)
            else:
                from pytest_gpuutil.traces.writer import write_chrome_trace

                write_chrome_trace(str(path), profile.events, profile.window, label=record.test, syncs=profile.syncs)
        except Exception as exc:  # noqa: BLE001 - a trace that cannot be written must not fail the test
            self._trace_errors.append(f"could not write trace {display_path(path)}: {exc}")

    @staticmethod
    def payload(test: FinishedTest) -> dict[str, Any]:
        """What travels on the teardown report (JSON-able, so xdist can carry it)."""
        return {
            "record": test.record.to_dict(),
            "metric_rows": [r.to_dict() for r in test.results.metric_rows],
            "tables": {name: list(cols) for name, cols in test.results.tables.items()},
            "thresholds": test.thresholds,
            **({"timeline": test.timeline} if test.timeline is not None else {}),
        }
