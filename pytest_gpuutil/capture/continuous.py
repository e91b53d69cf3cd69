"""One capture for many tests: mark each test's window, attribute the GPU work in bulk at a flush.

The event source (CUPTI, or any object with the same five methods) keeps collecting across tests.
Each test's call phase is a window: the GPU is synchronised and the source's clock read when it
opens and again when it closes, so the test is charged for exactly the work it launched. At a
flush, everything collected is drained once and split among the windows closed since the last
flush (:func:`~pytest_gpuutil.analysis.windows.window_stats`); a
:class:`~pytest_gpuutil.capture.flush_policy.FlushPolicy` says when.

With ``findings``, each window's findings come at the flush too
(:func:`~pytest_gpuutil.analysis.findings.find`): a window whose statistics rule every rule out
(:func:`~pytest_gpuutil.analysis.findings.may_fire`) is not looked at again; the others get their
own events and the host's waits (a source with ``drain_syncs()``, as CUPTI with activity kind 38).
The capture's own closing synchronize is not the test's wait: the clock is read before it.

When another profiler is about to start (a test's own torch.profiler, ``gpu_trace``) or a fixture
needs an unperturbed GPU (``kernel_bench``), the capture steps aside: the source flushes what it
has and stops, and the window open at that moment is reported as not measured, with the reason.
It resumes at the next window.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from itertools import starmap
from typing import Any, Callable, Optional, Protocol

from pytest_gpuutil.analysis.classify import KernelClassifier
from pytest_gpuutil.analysis.findings import Finding, with_child_start
from pytest_gpuutil.analysis.windows import WindowStats
from pytest_gpuutil.analysis import timeline as timelines
from pytest_gpuutil.capture.window_split import FirstUses, attribute_rows, findings_of, spans_of, syncs_of, timelines_of
from pytest_gpuutil.traces.model import GpuColumns, SyncColumns

_clock = time.perf_counter

ALREADY_ACTIVE = "a torch.profiler session was already active"
FOREIGN_PROFILER = "the test started its own torch.profiler session"


class EventSource(Protocol):
    """Where GPU work comes from: CUPTI on a GPU, a synthetic source in the plugin's own tests."""

    name: str

    def start(self) -> None: ...  # begin or resume collecting
    def stop(self) -> None: ...  # keep what was collected, stop collecting
    def now(self) -> int: ...  # the clock events are stamped with, in ns
    def pending_bytes(self) -> int: ...  # collected and waiting (for the memory bound)
    def drain(self) -> tuple[GpuColumns, int]: ...  # everything since the last drain, and records lost


@dataclass(frozen=True)
class WindowResult:
    """What the capture found for one test's window."""

    key: Any
    wall_ms: float
    stats: Optional[WindowStats]
    #: why ``stats`` is None (not measured), or a remark about the figures; else ""
    note: str
    #: what measuring this test cost: its own window bookkeeping plus its share of the flush
    measure_ms: float
    #: the window's own events, when the capture was asked to keep them (for trace files)
    events: Optional[GpuColumns] = None
    #: what to fix (None: findings were not looked for, or the window was not measured)
    findings: Optional[tuple[Finding, ...]] = None
    #: the host's waits in the window, when the capture was asked to keep events and recorded waits
    syncs: Optional[SyncColumns] = None
    #: the processes that took part, when child processes did (see pytest_gpuutil.children)
    processes: tuple[Any, ...] = ()
    #: the window's timeline in its compact form (analysis/timeline.py), when one was asked for
    timeline: Optional[dict[str, Any]] = None


class _Window:
    """One call's window while it waits for a flush (slots: no ``__dict__`` for Python's collector to
    track across the flush's hundred tests). Made with every field by position (keywords to this
    __init__ cost ~1.2k instructions more a window)."""

    __slots__ = ("key", "start_ns", "perf_start", "note", "end_ns", "wall_ms", "own_s", "remark", "sync_end_ns",
                 "cuda_came_up", "began_ns", "memory")

    def __init__(self, key: Any, start_ns: int, perf_start: float, note: str, end_ns: int = 0, wall_ms: float = 0.0,
                 own_s: float = 0.0, remark: str = "", sync_end_ns: Optional[int] = None, cuda_came_up: bool = False,
                 began_ns: int = 0, memory: Any = None):
        self.key, self.start_ns, self.perf_start, self.note = key, start_ns, perf_start, note
        #: the allocator meter's start of this call (None: no meter, or its begin failed)
        self.memory = memory
        self.end_ns, self.wall_ms, self.own_s = end_ns, wall_ms, own_s
        #: a remark about the window's figures (not a reason they are missing; that is ``note``)
        self.remark = remark
        #: the clock before the closing synchronize: later waits are the capture's, not the test's
        self.sync_end_ns = sync_end_ns
        #: CUDA came up during the call (the window starts after the context was created)
        self.cuda_came_up = cuda_came_up
        #: where the window began before CUDA came up in it (0: it did not)
        self.began_ns = began_ns


@dataclass
class ContinuousCapture:
    """Windows over one long-running event source; see the module docstring."""

    source: EventSource
    classifier: KernelClassifier
    #: waits for the GPU (torch.cuda.synchronize), so a window holds exactly its own work
    synchronize: Callable[[], None]
    #: whether another torch.profiler session is running now
    profiler_active: Callable[[], bool] = lambda: False
    keep_events: bool = False
    #: look for findings in each window, leaving out these rules
    findings: bool = False
    findings_ignore: frozenset[str] = frozenset()
    #: the GPU's name once CUDA is up (None before): the findings' estimates for it (machine.peaks.findings_figures)
    device_name: Callable[[], Optional[str]] = lambda: None
    started: bool = False
    #: seconds the source took to start the first time (CUPTI's one-time start-up)
    startup_s: Optional[float] = None
    #: why the source cannot run at all (then every window is "not measured" with this note)
    broken: str = ""
    #: whether the source may start yet. CUPTI waits for CUDA in this process (see
    #: Measurement): until then the windows are measured, and idle, since nothing of this
    #: process can be on the GPU; ``cuda_ready()`` starts it at once when CUDA comes up
    ready: Callable[[], bool] = lambda: True
    closed: bool = False
    _marked_ready: bool = False
    _pid: int = field(default_factory=os.getpid)
    #: the GPU work of the processes the tests start, merged at each flush: an object with
    #: ``attribute(own columns, windows, keys) -> (merged columns, per-window extras with
    #: .processes and .note)`` (a :class:`~pytest_gpuutil.children.collect.ProcessTree`), or None
    children: Any = None
    #: which windows get a timeline for the HTML page: ``wanted(key, wall_ms, stats, findings)``
    #: (None: no timelines), and the shortest idle gap a timeline shows (ns)
    timeline_wanted: Optional[Callable[[Any, float, WindowStats, Optional[tuple[Finding, ...]]], bool]] = None
    timeline_gap_ns: int = timelines.GAP_NS
    _open: Optional[_Window] = None
    #: the windows closed since the last flush (Measurement.flush_due counts them with len() at every teardown)
    _closed: list[_Window] = field(default_factory=list)
    #: what earlier windows of this process ran (gpu-idle names a library's start-up by its first use)
    _first_uses: Optional[FirstUses] = None
    #: the host's places for the findings (a :class:`~pytest_gpuutil.capture.places.host.HostPlaces`:
    #: ``begin()``/``end()`` around each call, ``take()`` per flush), or None
    places: Any = None
    #: whether a window's end reads the clock before its closing synchronize (findings, and a source
    #: that records the host's waits); None until the first window ends
    _stamps_sync_end: Optional[bool] = None
    #: a MemoryMeter read at the windows' edges (begin() before the opening synchronize, read() after the
    #: closing one), or None; ``keep_memory(key, (start, reads, seconds))`` takes each call's as it closes
    allocator: Any = None
    keep_memory: Callable[[Any, tuple[Any, Any, float]], None] = lambda key, call: None
    #: seconds in torch's calls at the edges so far (synchronizes, the allocator's reset and read)
    torch_s: float = 0.0

    # -- the source -----------------------------------------------------------------------------
    def ensure_started(self) -> bool:
        """Start or resume the source unless another profiler holds the GPU; False if it is not running."""
        if self.broken:
            return False
        if self.profiler_active():
            self._pause()
            return False
        if not self.started:
            if not (self._marked_ready or self.ready()):
                return True  # measured: this process cannot have GPU work before CUDA is up
            began = time.perf_counter()
            try:
                self.source.start()
            except Exception as exc:  # noqa: BLE001 - a source that cannot start must not fail tests
                self.broken = f"{self.source.name} did not start: {exc}"
                return False
            if self.startup_s is None:
                self.startup_s = time.perf_counter() - began
            self.started = True
        return True

    def cuda_ready(self) -> None:
        """CUDA has come up in this process (torch's lazy initialisation calls this): start now.

        Runs inside torch's CUDA initialisation, so it never raises; after the session it does nothing.
        """
        if self.closed or os.getpid() != self._pid:
            return  # after the session, or in a forked child (which inherited torch's queued calls)
        self._marked_ready = True
        try:
            self.ensure_started()
            # the call brought CUDA up: the GPU could do nothing of this process's before, so
            # the window starts now (creating the context is not GPU time to divide by)
            self._start_open_window_now("creating the CUDA context")
        except Exception as exc:  # noqa: BLE001
            self.broken = self.broken or f"{self.source.name} did not start: {exc}"

    def _start_open_window_now(self, what: str) -> None:
        window = self._open
        if window is None or window.note or not self.started:
            return
        now = self.source.now()
        if now > window.start_ns:
            window.began_ns = window.began_ns or window.start_ns
            window.remark = (f"CUDA came up during this call: its first {(now - window.began_ns) / 1e6:.1f} ms "
                             f"({what}) are not in the window")
            window.start_ns = now
            window.cuda_came_up = True

    def counters_started(self) -> None:
        """The hardware counters started as CUDA came up in the open window (after :meth:`cuda_ready`):
        their start-up is the plugin's, not the test's, so the window starts after it too."""
        if self.closed or os.getpid() != self._pid:
            return
        try:
            window = self._open
            if window is not None and window.began_ns:
                self._start_open_window_now("creating the CUDA context, starting the hardware counters")
        except Exception:  # noqa: BLE001 - runs inside torch's CUDA initialisation
            pass

    def _pause(self) -> None:
        if self.started:
            self.started = False
            try:
                self.source.stop()
            except Exception as exc:  # noqa: BLE001
                self.broken = f"{self.source.name} failed to stop: {exc}"

    def before_foreign_profiler(self) -> None:
        """Another profiler is about to start: hand CUPTI over (the open window is not measured)."""
        self.step_aside(FOREIGN_PROFILER)
        self._pause()

    # -- windows --------------------------------------------------------------------------------
    def begin(self, key: Any, began: Optional[float] = None) -> float:
        """Open ``key``'s window from the caller's clock ``began``; the clock when its call's wall time starts."""
        clock = _clock
        if began is None:
            began = clock()
        note = ""
        # the source running and no other profiler: ensure_started's answer without its call
        if not (self.started and not self.broken and not self.profiler_active()) and not self.ensure_started():
            note = self.broken or ALREADY_ACTIVE
        meter = self.allocator
        torch_began = clock()
        start = None
        if meter is not None:
            try:
                start = meter.begin()
            except Exception:  # noqa: BLE001 - memory figures are then missing, the test runs on
                start = None
        start_ns = 0
        if not note:
            self.synchronize()
            start_ns = self.source.now()
        perf_start = clock()
        self.torch_s += perf_start - torch_began
        if self.places is not None and not note:
            self.places.begin()
            perf_start = clock()  # the call's wall clock starts after the plugin's own work
        self._open = _Window(key, start_ns, perf_start, note, 0, 0.0, perf_start - began, "", None, False, 0, start)
        return perf_start

    def step_aside(self, reason: str) -> None:
        """Stop measuring the open window (someone else needs the profiler or a quiet GPU)."""
        window = self._open
        if window is None or window.note:
            return
        window.note = reason
        self._pause()

    def end(self, began: Optional[float] = None) -> float:
        """Close the open window from the caller's clock ``began`` (the call's end); the clock when its work ended."""
        clock = _clock
        if began is None:
            began = clock()
        window = self._open
        if window is None:
            return began
        self._open = None
        if self.places is not None:
            self.places.end()
        torch_began = clock()
        if not window.note:
            source = self.source
            stamps = self._stamps_sync_end
            if stamps is None:  # asked once (the source's methods do not change)
                stamps = self._stamps_sync_end = self.findings and self._records_waits
            if stamps:
                window.sync_end_ns = source.now()
            self.synchronize()
            window.end_ns = source.now()
        start, meter = window.memory, self.allocator
        if start is not None and meter is not None:
            try:
                self.keep_memory(window.key, (start, meter.read(), 0.0))  # its seconds are the window's own
            except Exception:  # noqa: BLE001 - memory figures are then missing
                pass
        ended = clock()
        self.torch_s += ended - torch_began
        window.wall_ms = (began - window.perf_start) * 1000
        window.own_s += ended - began
        self._closed.append(window)
        return ended

    @property
    def pending_tests(self) -> int:
        return len(self._closed)

    def pending_bytes(self) -> int:
        return self.source.pending_bytes() if self.started else 0

    # -- flushing -------------------------------------------------------------------------------
    def flush(self, make_all: Optional[Callable[[tuple[list[Any], ...]], Any]] = None) -> Any:
        """Figures for every window closed since the last flush, in the order they closed: a list of
        :class:`WindowResult`, one each, or what ``make_all`` makes of every window's fields at once,
        as columns in WindowResult's order (:func:`window_results`; the measurement makes its profiles
        so, with no WindowResult between and no call per window). No window closed: ``[]``."""
        began = time.perf_counter()
        windows, self._closed = self._closed, []
        if not windows:
            return []
        measured = [w for w in windows if not w.note]
        columns, dropped, error = GpuColumns(), 0, ""
        syncs: Optional[SyncColumns] = None
        if self.started or measured:
            try:
                columns, dropped = self.source.drain()
                syncs = self.source.drain_syncs() if self._records_waits else None
            except Exception as exc:  # noqa: BLE001 - what was measured before stays; this batch says why
                error = f"{self.source.name} could not be read: {exc}"
        host = self.places.take() if self.places is not None else None
        stats: dict[int, WindowStats] = {}
        events: dict[int, GpuColumns] = {}
        findings: dict[int, tuple[Finding, ...]] = {}
        extras: dict[int, Any] = {}
        children_error = ""
        rows = None
        spans = spans_of(measured) if measured and not error else []  # once: the children's merge and the attribution
        if spans and self.children is not None:
            try:
                columns, found = self.children.attribute(columns, spans, [w.key for w in measured])
                # only the windows the children add something to (most add nothing: one shared empty extras)
                if not (found and found.count(found[0]) == len(found) and not _adds(found[0])):
                    extras = {id(w): x for w, x in zip(measured, found) if _adds(x)}
            except Exception as exc:  # noqa: BLE001 - this process's own figures still count
                children_error = f"child processes could not be read: {exc}"
        if spans:
            try:
                stats, events, rows = attribute_rows(columns, measured, self.classifier, self.keep_events, spans)
            except Exception as exc:  # noqa: BLE001 - a failing analysis must not end the session
                error = f"the capture could not be split into tests: {exc}"
        if self.findings and stats:
            try:
                if self._first_uses is None:
                    self._first_uses = FirstUses(self.device_name)
                looked = measured if len(stats) == len(measured) else [w for w in measured if id(w) in stats]
                contexts = self._first_uses.contexts(looked, stats, extras, rows)
                findings = findings_of(columns, syncs, looked, stats, self.classifier, self.findings_ignore, contexts,
                                       host=host, rows=rows)
            except Exception as exc:  # noqa: BLE001 - the figures stand without findings; this batch says why
                error = f"findings could not be looked for: {exc}"
        for w in measured if extras else ():  # gpu-idle names a child's start-up where the window's first GPU work was a child's
            started = getattr(extras.get(id(w)), "child_start", None)
            if started is not None and findings.get(id(w)):
                findings[id(w)] = tuple(with_child_start(f, started.program, started.startup_ns) for f in findings[id(w)])
        drawn: dict[int, dict[str, Any]] = {}
        if self.timeline_wanted is not None and stats:
            try:
                drawn = timelines_of(columns, syncs, [w for w in measured if id(w) in stats], stats, findings,
                                     wanted=self.timeline_wanted, classifier=self.classifier, children=self.children,
                                     gap_ns=self.timeline_gap_ns, rows=rows)
            except Exception as exc:  # noqa: BLE001 - the figures stand without timelines; this batch says why
                error = error or f"timelines could not be drawn: {exc}"
        if host is not None:  # the time before CUDA came up in a call: the test's own host work and CUDA's start-up
            for w in measured:
                w.remark = self.places.before_cuda_note(w.remark, host, w.began_ns, w.start_ns)
            for w in measured:
                if id(w) in drawn:
                    drawn[id(w)] = self.places.with_host_frames(drawn[id(w)], host, spans_of([w])[0])
        note = error or (f"{self.source.name} dropped {dropped} records in this batch: figures may be low" if dropped else "")
        share = (time.perf_counter() - began) / len(windows)
        fields = window_results(windows, share, stats, events, findings, drawn, extras, (note, children_error),
                                syncs if self.keep_events else None)
        return make_all(fields) if make_all is not None else list(starmap(WindowResult, zip(*fields)))

    @property
    def _records_waits(self) -> bool:
        """Whether the source records the host's waits (CUPTI with activity kind 38 does)."""
        return callable(getattr(self.source, "drain_syncs", None))

    def close(self, make_all: Optional[Callable[[tuple[list[Any], ...]], Any]] = None) -> Any:
        """Flush what is left and stop the source (the end of the session); ``make_all`` as for :meth:`flush`."""
        self.allocator = None  # a call the session's end left open gets no memory figures
        self.end()
        results = self.flush(make_all)
        self._pause()
        if self.places is not None:
            self.places.close()
        self.closed = True
        return results


def window_results(windows: list[_Window], share_s: float, stats: dict[int, WindowStats],
                   events: dict[int, GpuColumns], findings: dict[int, tuple[Finding, ...]],
                   drawn: dict[int, dict[str, Any]], extras: dict[int, Any], batch_notes: tuple[str, str],
                   syncs: Optional[SyncColumns]) -> tuple[list[Any], ...]:
    """WindowResult's fields ``(key, wall_ms, stats, note, measure_ms, events, findings, syncs, processes,
    timeline)`` as columns, a list each in the windows' order (results keyed by ``id(window)``; ``syncs``:
    the batch's waits where events are kept): a column a field, made by ``map`` where it is looked up,
    not a tuple a window (a slot of a window read by a comprehension: attrgetter's map is twice its cost)."""
    ids = list(map(id, windows))
    nothing: list[Any] = [None] * len(windows)  # a column of Nones (read, never changed)
    if not (any(batch_notes) or extras):  # a window's note is its own, or its remark
        notes = [w.note or w.remark for w in windows]
        processes: list[Any] = [()] * len(windows)
    else:
        notes, processes = [], []
        for w, key in zip(windows, ids):
            extra = extras.get(key)
            window_notes = (*batch_notes, getattr(extra, "note", ""), w.remark)
            notes.append(w.note or ("; ".join(n for n in window_notes if n) if any(window_notes) else ""))
            processes.append(getattr(extra, "processes", ()))
    return ([w.key for w in windows], [w.wall_ms for w in windows], list(map(stats.get, ids)), notes,
            [(w.own_s + share_s) * 1000 for w in windows],
            list(map(events.get, ids)) if events else nothing,
            list(map(findings.get, ids)) if findings else nothing,
            nothing if syncs is None else [None if key not in events else syncs_of(syncs, w)
                                           for w, key in zip(windows, ids)],
            processes, list(map(drawn.get, ids)) if drawn else nothing)


def _adds(extra: Any) -> bool:
    """Whether a window's extras from the children say anything (processes, a note, a child's start-up)."""
    return bool(extra.processes or extra.note or getattr(extra, "child_start", None) is not None)


def synchronize_if_used(torch: Any, quiet: Optional[Callable[[bool], None]] = None) -> Callable[[], None]:
    """torch.cuda.synchronize, but only once torch has initialised CUDA in this process.

    Before that no GPU work of this process can be pending, and synchronizing would initialise
    CUDA here: a test's forked child (multiprocessing's fork) could then not use CUDA at all.
    ``quiet(flag)``: the host-wait callbacks record nothing around it (the capture's own waits at a
    window's edges lie outside the window, or after its closing clock read: never a test's).
    """
    cuda = torch.cuda
    # torch.cuda.synchronize() of the current device without its Python wrapper (a device context
    # manager around this call: ~8 of its ~10 microseconds on an H100 host)
    device_synchronize = getattr(torch._C, "_cuda_synchronize", None) or cuda.synchronize
    getpid = os.getpid
    #: the process in which CUDA was seen up: it stays up there, so only the pid is asked at each edge (a
    #: forked child, where torch calls CUDA not initialised in a bad fork, asks torch again)
    up_in = [0]

    def up() -> bool:
        if cuda.is_initialized():
            up_in[0] = getpid()
            return True
        return False

    if quiet is None:
        def synchronize() -> None:
            if up_in[0] == getpid() or up():
                device_synchronize()

        return synchronize

    def synchronize_quietly() -> None:
        if up_in[0] == getpid() or up():
            quiet(True)
            try:
                device_synchronize()
            finally:
                quiet(False)

    return synchronize_quietly
