"""The continuous capture and its flush policy, in process, with a synthetic event source."""
from __future__ import annotations

import os
import time

import pytest

from pytest_gpuutil import GpuColumns, GpuEvent, KernelClassifier
from pytest_gpuutil.capture.continuous import (
    ALREADY_ACTIVE,
    FOREIGN_PROFILER,
    ContinuousCapture,
)
from pytest_gpuutil.capture.flush_policy import FlushPolicy
from pytest_gpuutil.capture.window_split import waits_by_window


class ScriptedSource:
    """A clock the test moves by hand, and events the test places on it."""

    name = "scripted"

    def __init__(self) -> None:
        self.clock = 1_000
        self.events: list[GpuEvent] = []
        self.collecting = False
        self.calls: list[str] = []
        self.fail_start = ""

    def start(self) -> None:
        self.calls.append("start")
        if self.fail_start:
            raise RuntimeError(self.fail_start)
        self.collecting = True

    def stop(self) -> None:
        self.calls.append("stop")
        self.collecting = False

    def now(self) -> int:
        return self.clock

    def pending_bytes(self) -> int:
        return 100 * len(self.events)

    def drain(self) -> tuple[GpuColumns, int]:
        self.calls.append("drain")
        events, self.events = self.events, []
        return GpuColumns.from_events(events), 2

    def kernel(self, name: str, dur: int, gap: int = 10) -> None:
        if self.collecting:
            self.events.append(GpuEvent(name, "kernel", "0", "7", self.clock + gap, dur))
        self.clock += gap + dur + gap


def capture(source: ScriptedSource, **kwargs) -> ContinuousCapture:
    synced = []
    cap = ContinuousCapture(source, KernelClassifier(), synchronize=lambda: synced.append(1), **kwargs)
    cap.ensure_started()
    return cap


def test_windows_are_split_at_the_flush() -> None:
    source = ScriptedSource()
    cap = capture(source)
    cap.begin("a")
    source.kernel("nvjet_x", 100)
    source.kernel("nvjet_x", 50)
    cap.end()
    source.kernel("between_tests", 1_000)  # teardown/setup: in no window
    cap.begin("b")
    cap.end()
    assert cap.pending_tests == 2
    results = cap.flush()
    assert [r.key for r in results] == ["a", "b"]
    a, b = results
    assert (a.stats.kernel_count, a.stats.busy_us, a.stats.top_kernel) == (2, 0.15, "nvjet_x")
    assert (b.stats.kernel_count, b.stats.busy_us) == (0, 0.0)
    assert a.note == b.note == "scripted dropped 2 records in this batch: figures may be low"
    assert a.measure_ms > 0 and b.measure_ms > 0
    assert cap.pending_tests == 0 and cap.flush() == []


def test_stepping_aside_leaves_the_window_unmeasured_and_resumes_next_time() -> None:
    source = ScriptedSource()
    cap = capture(source)
    cap.begin("a")
    source.kernel("k", 10)
    cap.step_aside("kernel_bench times this test")
    source.kernel("not_collected", 10)
    cap.end()
    cap.begin("b")
    source.kernel("k", 20)
    cap.end()
    a, b = cap.flush()
    assert a.stats is None and a.note == "kernel_bench times this test"
    assert b.stats.kernel_count == 1 and b.stats.busy_us == 0.02
    assert source.calls == ["start", "stop", "start", "drain"]


def test_a_foreign_profiler_between_tests_keeps_what_was_collected() -> None:
    source = ScriptedSource()
    cap = capture(source)
    cap.begin("a")
    source.kernel("k", 10)
    cap.end()
    cap.before_foreign_profiler()  # e.g. a fixture starting torch.profiler in setup
    active = [True]
    cap.profiler_active = lambda: active[0]
    cap.begin("b")  # the fixture's profiler is still running
    cap.end()
    active[0] = False
    cap.begin("c")
    source.kernel("k", 30)
    cap.end()
    a, b, c = cap.flush()
    assert a.stats.kernel_count == 1
    assert b.stats is None and b.note == ALREADY_ACTIVE
    assert c.stats.kernel_count == 1 and c.stats.busy_us == 0.03
    assert FOREIGN_PROFILER == "the test started its own torch.profiler session"


def test_a_source_that_does_not_start_marks_every_window() -> None:
    source = ScriptedSource()
    source.fail_start = "CUPTI_ERROR_NOT_INITIALIZED"
    cap = capture(source)
    assert cap.broken == "scripted did not start: CUPTI_ERROR_NOT_INITIALIZED"
    cap.begin("a")
    cap.end()
    (a,) = cap.flush()
    assert a.stats is None and a.note == cap.broken


def test_kept_events_are_each_windows_own() -> None:
    source = ScriptedSource()
    cap = capture(source, keep_events=True)
    for key, n in (("a", 2), ("b", 0), ("c", 3)):
        cap.begin(key)
        for _ in range(n):
            source.kernel(f"k_{key}", 5)
        cap.end()
    results = cap.flush()
    assert [len(r.events) for r in results] == [2, 0, 3]
    assert set(results[2].events.names) == {"k_c"}


def test_close_flushes_the_open_window_and_stops() -> None:
    source = ScriptedSource()
    cap = capture(source)
    cap.begin("interrupted")
    source.kernel("k", 10)
    (result,) = cap.close()
    assert result.key == "interrupted" and result.stats.kernel_count == 1
    assert source.calls[-1] == "stop"


@pytest.mark.parametrize(
    ("pending", "nbytes", "seconds", "expected"),
    [
        (999, 0, 0.0, None),
        (1000, 0, 0.0, "1000 tests"),
        (1, 64 << 20, 0.0, "64.0 MB of events"),
        (1, 0, 10.0, "10.0 s since the last flush"),
        (0, 0, 99.0, None),  # nothing waiting: no flush however long it has been
    ],
)
def test_flush_policy_rules(pending: int, nbytes: int, seconds: float, expected) -> None:
    assert FlushPolicy().reason(pending, nbytes, seconds) == expected


@pytest.mark.parametrize("policy", [FlushPolicy(), FlushPolicy(1, 0.25, 0.5), FlushPolicy(3, 1e-9, 1e-6)])
def test_the_schedule_answers_as_its_policy(policy: FlushPolicy, monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_gpuutil.measurement import flush_schedule

    schedule = flush_schedule.FlushSchedule(policy)
    for seconds in (0.0, 1e-7, 0.25, 0.5, 9.9, 10.0, 11.0):
        now = schedule.last + seconds
        monkeypatch.setattr(flush_schedule.time, "perf_counter", lambda now=now: now)
        for pending in (0, 1, 2, 3, 99, 100, 101):
            for nbytes in (0, 1, 1 << 18, (64 << 20) - 1, 64 << 20, 1 << 30):
                want = policy.reason(pending, nbytes, now - schedule.last) if pending else None
                assert schedule.due(pending, nbytes) == want, (pending, nbytes, seconds)


class _CountedSource(ScriptedSource):
    """Keeps its pending bytes as an attribute, as CUPTI does (CuptiSource.completed_bytes)."""

    completed_bytes = 0

    def pending_bytes(self) -> int:
        raise AssertionError("flush_due reads completed_bytes where the source keeps it")


@pytest.mark.parametrize("policy", [FlushPolicy(), FlushPolicy(1, 0.25, 0.5), FlushPolicy(3, 1e-9, 1e-6)])
@pytest.mark.parametrize("counted", [False, True])
def test_flush_due_answers_as_its_policy_in_one_frame(policy: FlushPolicy, counted: bool,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Measurement.flush_due (asked at every teardown) says what the policy says around every bound, for
    a source that keeps its bytes as CUPTI does and one that answers pending_bytes(), started or not; and
    where no bound is reached it calls no Python function at all."""
    import sys

    from pytest_gpuutil.measurement import Measurement, flush_schedule
    from pytest_gpuutil.measurement.windows import ContinuousWindows

    source = _CountedSource() if counted else ScriptedSource()
    cap = capture(source)
    measurement = Measurement(KernelClassifier(), keep_events=False, cpu_activity=False, policy=policy,
                              memory=False, children=False)
    measurement.windows = ContinuousWindows(cap, source, lambda: None)
    measurement._per_test_parts()
    schedule = measurement.schedule
    for seconds in (0.0, 1e-7, 0.25, 0.5, 9.9, 10.0, 11.0):
        now = schedule.last + seconds
        monkeypatch.setattr(flush_schedule.time, "perf_counter", lambda now=now: now)
        for pending in (0, 1, 2, 3, 99, 100, 101):
            cap._closed[:] = [object()] * pending
            for nbytes in (0, 1, 1 << 18, (64 << 20) - 1, 64 << 20, 1 << 30):
                for started in (True, False):
                    cap.started = started
                    if counted:
                        source.completed_bytes = nbytes
                    else:
                        source.events = [None] * (nbytes // 100 + (nbytes % 100 > 0))  # pending_bytes() >= nbytes
                    seen = source.pending_bytes() if not counted else nbytes
                    waiting = seen if started else 0
                    want = policy.reason(pending, waiting, now - schedule.last) if pending else None
                    assert measurement.flush_due() == want, (pending, nbytes, seconds, started)
    cap._closed[:] = [object()]
    cap.started = True
    if counted:
        source.completed_bytes = 0
    source.events = []
    monkeypatch.undo()  # the real clock (a stand-in would be a Python call of its own)
    measurement.schedule = flush_schedule.FlushSchedule(FlushPolicy())  # no bound near
    calls: list[str] = []
    sys.setprofile(lambda frame, event, arg: calls.append(frame.f_code.co_name) if event == "call" else None)
    try:
        due = measurement.flush_due()
    finally:
        sys.setprofile(None)
    assert due is None
    assert calls == (["flush_due"] if counted else ["flush_due", "pending_bytes"])


def test_flush_policy_text() -> None:
    assert FlushPolicy.parse("tests=5, seconds=0.5 megabytes=8", "x") == FlushPolicy(5, 0.5, 8.0)
    assert FlushPolicy.parse("", "x") == FlushPolicy()
    for bad, message in (("tests=0", "positive whole"), ("tests=2.5", "positive whole"), ("secs=1", "is not tests=N"),
                         ("seconds=soon", "is not a number"), ("megabytes=-1", "positive number")):
        with pytest.raises(ValueError, match=message):
            FlushPolicy.parse(bad, "--gpu-util-flush")


def test_windows_out_of_order_are_split_one_at_a_time() -> None:
    """The wall clock stepped back between two tests: each window still gets its own events."""
    source = ScriptedSource()
    cap = capture(source)
    cap.begin("a")
    source.kernel("k_a", 40)
    cap.end()
    source.clock -= 10_000
    cap.begin("b")
    source.kernel("k_b", 70)
    cap.end()
    a, b = cap.flush()
    assert (a.stats.kernel_count, a.stats.busy_us, a.stats.top_kernel) == (1, 0.04, "k_a")
    assert (b.stats.kernel_count, b.stats.busy_us, b.stats.top_kernel) == (1, 0.07, "k_b")


def test_an_analysis_that_fails_is_a_note_not_a_crash() -> None:
    source = ScriptedSource()
    cap = capture(source)
    cap.begin("a")
    source.kernel("k", 10)
    source.clock -= 1_000  # the window ends before it starts
    cap.end()
    (a,) = cap.flush()
    assert a.stats is None and a.note.startswith("the capture could not be split into tests: windows must be")


class WaitingSource(ScriptedSource):
    """The scripted source with the host's waits, as CUPTI with activity kind 38."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: list[tuple[str, int, int]] = []
        self.clock_reads = 0

    def now(self) -> int:
        self.clock_reads += 1
        return self.clock

    def wait(self, dur: int, name: str = "Stream Sync") -> None:
        if self.collecting:
            self.waits.append((name, self.clock, dur))
        self.clock += dur

    def drain_syncs(self):
        from pytest_gpuutil.traces.model import SyncColumns

        waits, self.waits = self.waits, []
        return SyncColumns(*map(list, zip(*waits))) if waits else SyncColumns()


def _loop(source: WaitingSource, steps: int, wait: bool) -> None:
    for _ in range(steps):
        source.kernel("nvjet_sm90_tst", 20_000, gap=5_000)  # a kernel, then 5 µs before the host goes on
        if wait:
            source.wait(3_000)
        source.clock += 30_000  # the host's own work until the next launch


def test_each_window_gets_its_findings_from_its_own_events_and_waits() -> None:
    source = WaitingSource()
    cap = capture(source, findings=True)
    cap.begin("item_loop")
    _loop(source, 50, wait=True)
    cap.end()
    cap.begin("no_wait_loop")
    _loop(source, 50, wait=False)
    cap.end()
    cap.begin("short")  # under the rules' limits: not looked at
    source.kernel("k", 100)
    cap.end()
    source.wait(500_000, "Context Sync")  # between tests: no window's
    results = {r.key: r for r in cap.flush()}
    item = {f.rule: f for f in results["item_loop"].findings}
    assert item["host-sync"].evidence["waits"] == 50
    assert "host-sync" not in {f.rule for f in results["no_wait_loop"].findings}
    assert results["short"].findings == ()


def test_the_clock_is_read_before_the_closing_synchronize_only_when_waits_are_recorded() -> None:
    for findings, source, extra_reads in ((True, WaitingSource(), 1), (False, WaitingSource(), 0)):
        cap = capture(source, findings=findings)
        before = source.clock_reads
        cap.begin("t")
        cap.end()
        assert source.clock_reads - before == 2 + extra_reads
        (result,) = cap.flush()
        assert result.findings == (() if findings else None)


def test_a_failing_rule_keeps_the_figures_and_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    import pytest_gpuutil.capture.window_split as window_split

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(window_split, "find", broken)
    source = WaitingSource()
    cap = capture(source, findings=True)
    cap.begin("t")
    _loop(source, 50, wait=True)
    cap.end()
    (result,) = cap.flush()
    assert result.stats is not None and result.findings is None
    assert result.note == "findings could not be looked for: boom"


def test_a_source_that_waits_for_cuda_starts_when_cuda_comes_up() -> None:
    """CUPTI waits for CUDA (a process that touched CUPTI before fork breaks its forked children):
    windows before are measured as idle, and torch's initialisation starts the source."""
    source, up = ScriptedSource(), []
    cap = ContinuousCapture(source, KernelClassifier(), synchronize=lambda: None, ready=lambda: bool(up))
    assert cap.ensure_started() and source.calls == []  # not started, not broken
    cap.begin("before")
    source.kernel("lost_if_any", 100)
    cap.end()
    cap.cuda_ready()  # torch's lazy CUDA initialisation calls this
    assert source.calls == ["start"] and source.collecting
    cap.begin("after")
    source.kernel("nvjet_counted", 100)
    cap.end()
    before, after = cap.flush()
    assert before.stats is not None and before.stats.kernel_count == 0  # measured, idle
    assert after.stats.kernel_count == 1 and after.stats.top_kernel == "nvjet_counted"
    cap.close()
    cap.cuda_ready()  # after the session: nothing starts again
    assert source.calls.count("start") == 1


def test_a_call_that_brings_cuda_up_is_measured_from_then() -> None:
    """Creating the CUDA context inside a test's call is not GPU time to divide by: the window
    starts when CUDA comes up, and the record says how much of the call that left out."""
    source, up = ScriptedSource(), []
    cap = ContinuousCapture(source, KernelClassifier(), synchronize=lambda: None, ready=lambda: bool(up))
    cap.ensure_started()
    cap.begin("first_gpu_test")
    source.clock += 400_000_000  # the context's creation: 400 ms
    up.append(True)
    cap.cuda_ready()
    source.kernel("nvjet_sm90_tst", 100_000_000)
    cap.end()
    cap.begin("next_test")  # CUDA already up: nothing left out
    source.kernel("nvjet_sm90_tst", 100_000_000)
    cap.end()
    first, following = cap.flush()
    assert first.stats.busy_pct > 99 and following.stats.busy_pct > 99
    assert "CUDA came up during this call: its first 400.0 ms (creating the CUDA context) are not in the window" in first.note
    assert "CUDA came up" not in following.note
    cap.close()


def test_each_windows_waits_are_those_that_overlap_it_and_began_before_its_closing_synchronize() -> None:
    """The waits found per window (vectorised lookups) against every wait checked one by one."""
    import random

    from pytest_gpuutil.capture.continuous import _Window
    from pytest_gpuutil.traces.model import SyncColumns, Window

    rng = random.Random(3)
    for _ in range(200):
        waits = [(rng.randrange(0, 10_000), rng.randrange(0, 800)) for _ in range(rng.randrange(1, 40))]
        syncs = SyncColumns(["Stream Sync"] * len(waits), [s for s, _ in waits], [d for _, d in waits])
        windows, t = [], 0
        for _ in range(rng.randrange(1, 8)):
            start = t + rng.randrange(0, 1_000)
            end = start + rng.randrange(0, 3_000)
            windows.append(_Window("k", start, 0.0, "", end_ns=end,
                                   sync_end_ns=rng.choice([None, end - rng.randrange(0, 500)])))
            t = end
        spans = [Window(w.start_ns, w.end_ns, "test_call") for w in windows]
        got = waits_by_window(syncs, windows, spans)
        for w, span, found in zip(windows, spans, got):
            limit = span.end_ns if w.sync_end_ns is None else min(span.end_ns, w.sync_end_ns)
            assert found == [i for i, (s, d) in enumerate(waits) if s < limit and s + d > span.start_ns]


class Meter:
    """The allocator meter's two calls, each taking ``seconds``; its read fails when told to."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.fail_read = False

    def begin(self) -> str:
        time.sleep(self.seconds)
        return "start"

    def read(self) -> tuple:
        time.sleep(self.seconds)
        if self.fail_read:
            raise RuntimeError("allocator gone")
        return ((0, (1, 2, 3, 4, 0, 0, 1)),)


def test_torchs_calls_at_the_edges_are_timed_and_the_memory_kept_as_the_window_closes() -> None:
    source = ScriptedSource()
    kept: dict = {}
    cap = ContinuousCapture(source, KernelClassifier(), synchronize=lambda: time.sleep(0.002))
    cap.allocator, cap.keep_memory = Meter(0.001), kept.__setitem__
    cap.ensure_started()
    began = time.perf_counter()
    opened = cap.begin("t1", began)
    assert opened >= began + 0.003
    ended = cap.end()
    assert kept == {"t1": ("start", ((0, (1, 2, 3, 4, 0, 0, 1)),), 0.0)}  # its seconds are the window's own
    # two synchronizes and the meter's two calls: torch's part, within the window's own time
    (window,) = cap._closed
    assert 0.006 <= cap.torch_s <= window.own_s <= ended - began
    cap.allocator.fail_read = True
    cap.begin("t2")
    cap.end()
    assert "t2" not in kept and len(cap.flush()) == 2  # a read that fails: no memory, the window stands
    cap.allocator.fail_read = False
    cap.begin("t3")
    cap.close()
    assert "t3" not in kept  # a call the session's end left open: no memory figures


@pytest.mark.parametrize("quietly", [False, True])
def test_the_edges_synchronize_once_cuda_is_up_and_a_forked_child_asks_torch_again(quietly, monkeypatch) -> None:
    from types import SimpleNamespace

    from pytest_gpuutil.capture.continuous import synchronize_if_used

    pid, up, asked, calls = [100], [False], [], []

    def is_initialized() -> bool:
        asked.append(1)
        return up[0]

    monkeypatch.setattr(os, "getpid", lambda: pid[0])
    torch = SimpleNamespace(cuda=SimpleNamespace(is_initialized=is_initialized),
                            _C=SimpleNamespace(_cuda_synchronize=lambda: calls.append("sync")))
    sync = synchronize_if_used(torch, calls.append if quietly else None)
    sync()
    assert calls == [] and len(asked) == 1  # CUDA not up: no synchronize (it would bring CUDA up)
    up[0] = True
    sync()
    sync()
    assert calls.count("sync") == 2 and len(asked) == 2  # up: torch asked once more, then known in this process
    assert calls[:3] == ([True, "sync", False] if quietly else ["sync", "sync"])[:3]
    pid[0], up[0] = 101, False  # a forked child: torch says not initialised there (a bad fork)
    sync()
    assert calls.count("sync") == 2 and len(asked) == 3


@pytest.mark.parametrize("enabled", [True, False])
def test_the_collector_waits_for_the_flush_and_comes_back_as_it_was(enabled: bool) -> None:
    """Measurement.flush turns Python's collector off while the capture makes the flush's records (their
    young objects are collected once, after), and leaves it as it found it, also where the flush fails."""
    import gc

    from pytest_gpuutil.measurement import Measurement
    from pytest_gpuutil.measurement.windows import CallWindows

    seen: list[bool] = []

    class Windows(CallWindows):
        fail = False

        def flush(self):
            seen.append(gc.isenabled())
            if self.fail:
                raise RuntimeError("broken")
            return {}

    measurement = Measurement(KernelClassifier(), keep_events=False, cpu_activity=False, policy=FlushPolicy(),
                              memory=False, children=False)
    measurement.windows = windows = Windows()
    was = gc.isenabled()
    try:
        (gc.enable if enabled else gc.disable)()
        assert measurement.flush() == {}
        windows.fail = True
        with pytest.raises(RuntimeError):
            measurement.flush()
        assert seen == [False, False] and gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()
