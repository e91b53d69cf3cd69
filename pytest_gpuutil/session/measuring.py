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


class PendingTest(NamedTuple):
    """A finished test whose record waits for its profile (a continuous capture not yet flushed): a
    named tuple, made for every test (see :meth:`Measuring.test_finished`)."""

    __test__ = False

    item: Any
    nodeid: str
    outcome: str
    results: TestResults
    thresholds: str
    #: the record its call's limits were checked on (before the record hook), with the profile and
    #: memory it was built from: reused when they are still the test's (see :meth:`Measuring.ready`)
    call_record: Optional[tuple[Any, Any, Any]] = None


class FinishedTest(NamedTuple):
    """A test whose record is built: what the receiver keeps of it (or a worker sends as a payload).
    A named tuple: one is made for every test (a frozen dataclass's __init__ costs ~1 µs more)."""

    __test__ = False

    record: TestRecord
    results: TestResults
    thresholds: str
    #: the call's timeline in its compact form, when it is among those drawn
    timeline: Optional[dict[str, Any]] = None


def outcome_of(setup: Any, call: Any, teardown: Any) -> str:
    """One word for a test from its setup, call and teardown reports (None: not logged), read from
    each report's ``outcome`` (what its ``failed`` and ``skipped`` compare; no property call)."""
    if setup is not None:
        said = setup.outcome
        if said == "failed":
            return "error"
        if said == "skipped":
            return "skipped"
    if call is not None:
        said = call.outcome
        if hasattr(call, "wasxfail"):
            return "xfailed" if said == "skipped" else "xpassed"
        if said == "failed":
            return "failed"
        if said == "skipped":
            return "skipped"
    if teardown is not None and teardown.outcome == "failed":
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


#: a named tuple made from a tuple of all its fields, in C (its class's __new__ is a Python function)
_new_tuple = tuple.__new__


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

    def begin_test(self, nodeid: str, results: TestResults, began: Optional[float] = None) -> float:
        """Open the test's window (``began``: the caller's clock when its own work began); the clock when
        the plugin's work for it ended."""
        measurement = self.measurement
        edges = measurement.edges
        if edges is not None:  # the continuous windows alone: called straight
            self.windowed.add(nodeid)
            return edges.begin_at(nodeid, results, began)
        if measurement.continuous:
            self.windowed.add(nodeid)
        profile = measurement.begin(nodeid, results)
        if profile is not None:
            self.windowed.discard(nodeid)
            self.profiles[nodeid] = profile
        return time.perf_counter()

    def end_test(self, nodeid: str, results: TestResults, began: Optional[float] = None) -> float:
        """Close it; the clock when the plugin's work for it ended."""
        edges = self.measurement.edges
        if edges is not None:
            return edges.end_at(nodeid, results, began)
        profile = self.measurement.end(nodeid, results)
        if profile is not None:
            self.profiles[nodeid] = profile
        return time.perf_counter()

    def flush(self, wait: bool = True) -> None:
        """Turn the capture so far into profiles (``wait=False``: the last tests' hardware counters may
        come with a later flush; their records wait for them)."""
        self.profiles.update(self.measurement.flush(wait))
        self._flushed = True

    def flush_due(self) -> Optional[str]:
        return self.measurement.flush_due()

    def test_finished(self, item: Any, nodeid: str, outcome: str, results: TestResults, thresholds: str = "",
                      call_record: Optional[tuple[Any, Any, Any]] = None) -> None:
        """The test is over: it waits for its profile (a PendingTest, made without a Python call)."""
        self.pending.append(_new_tuple(PendingTest, (item, nodeid, outcome, results, thresholds, call_record)))

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
            profiles, windowed = self.profiles, self.windowed
            for test in self.pending:  # _ready's test, inline (a flush's every pending test)
                profile = profiles.get(test.nodeid)
                if profile is not None:
                    (waiting if profile.counters_pending else done).append(test)
                else:
                    (waiting if test.nodeid in windowed else done).append(test)
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
            built = _reused(test, profile, memory) if test.call_record is not None else None
            reused.append(built)
            if built is None:
                to_build.append((nodeid, test.outcome, profile, test.results, memory))
        made = iter(self._make_records(to_build) if to_build else ())
        share_ms = (time.perf_counter() - began) * 1000 / len(done)
        finished = []
        traces = self._traces != "none"
        clock = time.perf_counter
        for test, profile, built in zip(done, their_profiles, reused):
            began = clock()
            if built is None:
                built = next(made)
            record = finalize(test.item, built)
            if traces:
                self._write_trace(record, profile)
            measure_ms = record.measure_ms
            if measure_ms is not None:
                charged = measure_ms + (share_ms + (clock() - began) * 1000)
                if record is built:  # still this process's own (no hook replaced it): set in place, as the
                    record.__dict__["measure_ms"] = charged  # record's making sets it (no ~45 fields made again)
                else:
                    record = dataclasses.replace(record, measure_ms=charged)
            timeline = None
            if profile is not None and profile.timeline is not None:  # drawn only for a page (--gpu-util-html)
                timeline = profile.timeline_with_counters()
            finished.append(_new_tuple(FinishedTest, (record, test.results, test.thresholds, timeline)))
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
