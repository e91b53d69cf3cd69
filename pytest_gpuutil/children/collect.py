"""The parent's side: read the spool at each flush, merge the children's work with this process's.

At a flush the capture hands over its own events and the windows closed since the last flush;
:meth:`ProcessTree.attribute` reads every child's new chunks (asking children that still run to
hand over first), puts their events on this process's clock and device numbering, and returns
one set of columns for the windows to be split from: GPU ms, busy % (the union over all
processes, per device), categories, top kernels and idle gaps then include the children's work.
It also gives each window its per-process breakdown and its notes (a child killed before it
handed over, one that could not be measured, one still running at the end).

Work a child does outside every window (while the parent is in set-up or teardown) is dropped,
as the parent's own is; work that arrives after its window's record was written is counted in a
session note instead of silently.
"""
from __future__ import annotations

import os
import time
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Optional, Sequence

import numpy as np

from pytest_gpuutil.analysis.classify import KernelClassifier
from pytest_gpuutil.analysis.windows import assign_windows, window_stats
from pytest_gpuutil.capture.memory import MIB
from pytest_gpuutil.children.columns import (
    ChildStart,
    ProcessShare,
    WindowExtras,
    concat_columns,
    overlap_note,
    overlap_text,
    overlaps,
    take_columns,
)
from pytest_gpuutil.children.spool import SPOOL_ENV, Spool
from pytest_gpuutil.children.spool_format import (
    CAPTURE_NAMES,
    EXITED,
    INJECTION,
    MONOTONIC,
    NESTED,
    TERMINATED,
    ChunkReader,
    End,
    Events,
    Header,
    Memory,
    Note,
)
from pytest_gpuutil.machine.processes import environment_value, is_running, started_realtime_ns
from pytest_gpuutil.traces.model import CodedColumn, GpuColumns, Window

#: how long a flush waits for running children to hand over what they have
WAIT_S = 1.0
#: a process's start is known to a clock tick (10 ms): one that seems to start this much before a
#: window may have been started in it
START_SLACK_NS = 20_000_000
#: flushed windows remembered to recognise work that arrives after its record was written
HISTORY = 512


@dataclass
class _Child:
    """One child process as the spool (and NVML) tell of it."""

    path: str
    reader: Optional[ChunkReader]
    header: Optional[Header] = None
    pending: list[Events] = field(default_factory=list)
    covered_ns: int = 0
    end: Optional[End] = None
    memory: Optional[Memory] = None
    notes: list[Note] = field(default_factory=list)
    #: notes already placed in a window
    said: set = field(default_factory=set)
    lost_noted: bool = False
    gone: bool = False
    #: did not answer a poke in time once: poked again, but not waited for (a stopped or hung child
    #: must not cost every flush a second)
    slow: bool = False
    #: NVML: (device, max used bytes) and when it was seen
    nvml_peak: dict[int, int] = field(default_factory=dict)
    nvml_seen_ns: int = 0
    nvml_program: str = ""

    @property
    def pid(self) -> int:
        return self.header.pid if self.header is not None else int(self.path.rsplit(":", 1)[-1])

    @property
    def program(self) -> str:
        return self.header.program if self.header is not None else (self.nvml_program or "?")

    def label(self) -> str:
        return f"pid {self.pid} ({self.program})"

    def lane_label(self) -> str:
        """How a timeline names the child's lanes: pid, program (shortened) and rank."""
        program = self.program if len(self.program) <= 48 else self.program[:47] + "…"
        rank = self.header.rank if self.header is not None and self.header.rank else ""
        return f"pid {self.pid} {program}" + (f" rank {rank}" if rank else "")

    def last_known_ns(self) -> int:
        times = [self.covered_ns, self.header.created_ns if self.header else 0, self.nvml_seen_ns]
        times += [n.at_ns for n in self.notes]
        return max(times)


@dataclass
class ProcessTree:
    """The children of this process's tests, read from its spool (see the module docstring)."""

    spool: Spool
    classifier: KernelClassifier
    #: this process's event-source clock, to put children's times on it
    parent_now: Callable[[], int]
    demangle: Callable[[str], str] = lambda name: name
    #: CUDA_VISIBLE_DEVICES of this process (None: every GPU, in order)
    visible_devices: Optional[str] = None
    #: NVML per-process samples, when NVML is there (see nvml.py)
    sampler: Any = None
    #: why non-Python children cannot be measured ("" when they can), said on each one NVML sees
    injection_problem: str = ""
    wait_s: float = WAIT_S
    own_pid: int = field(default_factory=os.getpid)
    #: remarks for the whole run (late work, children still running at the end)
    session_notes: list[str] = field(default_factory=list)
    _children: dict[str, _Child] = field(default_factory=dict)
    _history: deque = field(default_factory=lambda: deque(maxlen=HISTORY))
    _demangled: dict[str, str] = field(default_factory=dict)
    #: pids NVML saw, and whether they report to another run's spool
    _elsewhere: dict[int, bool] = field(default_factory=dict)
    #: the last merge's process of each event (0: this one; i: the i-th child) and each one's lane
    #: label, for the timelines (None: no child took part)
    last_owners: Optional[tuple[np.ndarray, tuple[str, ...]]] = None

    # -- reading --------------------------------------------------------------------------------
    def read(self) -> None:
        """New chunks from every child file (new files found too)."""
        for path in self.spool.files():
            child = self._children.get(path)
            if child is None:
                child = self._children[path] = _Child(path, ChunkReader(path))
            if child.reader is None or child.end is not None:
                continue  # an END chunk is the last
            for chunk in child.reader.read_new():
                self._take(child, chunk)
            if child.reader.error and "damaged" not in child.said:
                child.said.add("damaged")
                child.notes.append(Note(child.last_known_ns(), f"its spool file is damaged ({child.reader.error})"))
        if self.sampler is not None:
            self._take_samples()

    def _take(self, child: _Child, chunk: Any) -> None:
        if isinstance(chunk, Header):
            child.header = chunk
            child.covered_ns = max(child.covered_ns, self._to_parent(chunk, chunk.created_ns))
        elif isinstance(chunk, Events):
            child.pending.append(chunk)
            if child.header is not None:
                child.covered_ns = max(child.covered_ns, self._to_parent(child.header, chunk.covered_ns))
        elif isinstance(chunk, Memory):
            child.memory = chunk
        elif isinstance(chunk, Note):
            child.notes.append(Note(self._to_parent(child.header, chunk.at_ns), chunk.text))
        elif isinstance(chunk, End):
            child.end = End(self._to_parent(child.header, chunk.at_ns), chunk.reason, chunk.note)

    def _take_samples(self) -> None:
        by_pid = {c.header.pid: c for c in self._children.values() if c.header is not None}
        for sample in self.sampler.take():
            child = by_pid.get(sample.pid)
            if child is None and self._reports_elsewhere(sample.pid):
                continue  # a nested pytest --gpu-util run measures it, in its own spool and report
            if child is None:
                key = f"nvml:{sample.pid}"
                child = self._children.get(key)
                if child is None:
                    child = self._children[key] = _Child(key, None, nvml_program=sample.program)
                by_pid[sample.pid] = child
            child.nvml_peak[sample.device] = max(child.nvml_peak.get(sample.device, 0), sample.used_bytes)
            child.nvml_seen_ns = max(child.nvml_seen_ns, self._realtime_to_parent(sample.at_ns))

    def _reports_elsewhere(self, pid: int) -> bool:
        """Whether ``pid`` started with another run's spool in its environment: the children of a
        nested pytest --gpu-util run (pytester's runpytest_subprocess) report to that run, which
        measures them; the nested pytest process itself may never use CUDA, and so never say so
        here. Decided once per pid (on an H100, NVML named such a child "not measured" before)."""
        known = self._elsewhere.get(pid)
        if known is None:
            spool = environment_value(pid, SPOOL_ENV)
            ours = os.path.realpath(self.spool.directory)
            known = self._elsewhere[pid] = bool(spool) and os.path.realpath(spool) != ours
        return known

    def _running(self, child: _Child) -> bool:
        if child.end is not None or child.header is None or child.gone:
            return False
        if is_running(child.header.pid, child.header.proc_start):
            return True
        child.gone = True
        return False

    def wait_for(self, until_ns: int) -> list[_Child]:
        """Ask running children to hand over up to ``until_ns`` and wait (bounded); the ones that did not."""
        lagging = [c for c in self._children.values() if self._running(c) and c.covered_ns < until_ns]
        if not lagging:
            return []
        self.spool.poke()
        lagging = [c for c in lagging if not c.slow]
        deadline = time.monotonic() + self.wait_s
        while lagging and time.monotonic() < deadline:
            time.sleep(0.01)
            self.read()
            lagging = [c for c in lagging if self._running(c) and c.covered_ns < until_ns]
        for child in lagging:
            child.slow = True
        return lagging

    # -- clocks and devices ---------------------------------------------------------------------
    def _offset(self, clock: int) -> int:
        """Add this to a child's time on ``clock`` to get this process's source clock."""
        parent = self.parent_now()
        real = time.time_ns()
        to_parent = 0 if abs(parent - real) < 1_000_000_000 else parent - real
        if clock == MONOTONIC:
            return to_parent + (time.time_ns() - time.monotonic_ns())
        return to_parent

    def _to_parent(self, header: Optional[Header], ns: int) -> int:
        return ns + self._offset(header.clock if header is not None else 0)

    def _realtime_to_parent(self, ns: int) -> int:
        return ns + self._offset(0)

    def _device_map(self, header: Header) -> Callable[[int], str]:
        mine, theirs = _visible(self.visible_devices), _visible(header.visible_devices)
        if mine == theirs:
            return str

        def to_parent(device: int) -> str:
            physical = theirs[device] if theirs is not None and device < len(theirs) else str(device)
            if mine is None:
                return physical if physical.isdigit() else f"GPU {physical}"
            return str(mine.index(physical)) if physical in mine else f"GPU {physical} (not visible to pytest)"

        return to_parent

    def _child_columns(self, child: _Child) -> GpuColumns:
        header = child.header
        parts = [e.columns() for e in child.pending if len(e)]
        if header is None or not parts:
            return GpuColumns()
        columns = concat_columns(parts)
        offset = self._offset(header.clock)
        device_of = self._device_map(header)
        names = columns.names
        if header.capture == INJECTION:
            names = CodedColumn(names.codes, [self._demangle_once(n) for n in names.values])
        devices = CodedColumn(columns.devices.codes, [device_of(int(d)) for d in columns.devices.values])
        return GpuColumns(names, CodedColumn(columns.kinds.codes, columns.kinds.values), devices, columns.streams,
                          np.asarray(columns.starts_ns, dtype=np.int64) + offset, columns.durs_ns)

    def _demangle_once(self, name: str) -> str:
        done = self._demangled.get(name)
        if done is None:
            try:
                done = self.demangle(name)
            except Exception:  # noqa: BLE001
                done = name
            self._demangled[name] = done
        return done

    # -- one flush --------------------------------------------------------------------------------
    def attribute(self, own: GpuColumns, spans: Sequence[Window], keys: Sequence[Any]) -> tuple[GpuColumns, list[WindowExtras]]:
        """This process's events merged with its children's, and each window's extras (``spans`` sorted)."""
        self.read()
        if spans:
            for child in self.wait_for(max(s.end_ns for s in spans)):
                self._say(child, "slow", child.last_known_ns(),
                          f"child {child.label()} did not hand over its latest records in time: its work after "
                          f"{_clock_text(child.covered_ns)} may be missing")
        involved = [c for c in self._children.values() if c.pending or self._unsaid(c)]
        self.last_owners = None
        if not involved:
            self._history.extend((s.start_ns, s.end_ns, k) for s, k in zip(spans, keys))
            return own, [WindowExtras() for _ in spans]
        parts, owners, children = [own], [np.zeros(len(own), dtype=np.int64)], []
        for child in involved:
            columns = self._child_columns(child)
            child.pending = []
            children.append(child)
            if len(columns):
                parts.append(columns)
                owners.append(np.full(len(columns), len(children), dtype=np.int64))
        merged = concat_columns(parts) if len(parts) > 1 else own
        owner = np.concatenate(owners)
        self.last_owners = (owner, ("", *(c.lane_label() for c in children)))
        self._note_late(merged, owner, spans, children)
        extras = self._breakdown(merged, owner, spans, children)
        self._history.extend((s.start_ns, s.end_ns, k) for s, k in zip(spans, keys))
        return merged, extras

    def _unsaid(self, child: _Child) -> bool:
        """Whether the child has something to say that no window has said yet."""
        if child.header is None:
            return bool(child.nvml_peak) and "unmeasured" not in child.said
        if child.end is not None and child.end.reason == NESTED and "nested" not in child.said:
            return True
        if any(id(n) not in child.said for n in child.notes):
            return True
        return not child.lost_noted and child.end is None and not self._running(child)

    def _say(self, child: _Child, key: Any, at_ns: int, text: str) -> None:
        if key in child.said:
            return
        child.notes.append(Note(at_ns, text))
        child.said.add(key)

    def _process_notes(self, child: _Child) -> list[Note]:
        """Notes for the record, each once, from what the child wrote and what it failed to do."""
        found: list[Note] = []
        label = child.label()
        if child.header is None:
            if child.nvml_peak and "unmeasured" not in child.said:
                child.said.add("unmeasured")
                why = f": {self.injection_problem}" if self.injection_problem else ""
                found.append(Note(child.nvml_seen_ns, f"{label} used the GPU but was not measured{why}"))
            return found
        for note in child.notes:
            if id(note) in child.said:
                continue
            child.said.add(id(note))
            text = note.text if note.text.startswith("child ") else f"{label}: {note.text}"
            found.append(Note(note.at_ns, text))
        if child.end is not None and child.end.reason == NESTED and "nested" not in child.said:
            child.said.add("nested")
            found.append(Note(child.end.at_ns, f"{label} is measured by its own pytest --gpu-util run from "
                                               f"{_clock_text(child.end.at_ns)} on (not counted here)"))
        if child.end is None and not child.lost_noted and not self._running(child):
            child.lost_noted = True
            found.append(Note(child.last_known_ns(), f"child {label} ended without handing over its records "
                                                     f"(killed?): its work after {_clock_text(child.covered_ns)} is missing"))
        return found

    def _breakdown(self, merged: GpuColumns, owner: np.ndarray, spans: Sequence[Window],
                   children: list[_Child]) -> list[WindowExtras]:
        n = len(spans)
        notes: list[list[str]] = [[] for _ in range(n)]
        noted: list[set[int]] = [set() for _ in range(n)]
        for index, child in enumerate(children, start=1):
            for note in self._process_notes(child):
                w = _window_for(note.at_ns, spans)
                if w is None:
                    self.session_notes.append(note.text)
                else:
                    notes[w].append(note.text)
                    noted[w].add(index)
        starts = np.asarray(merged.starts_ns, dtype=np.int64)
        ends = starts + np.asarray(merged.durs_ns, dtype=np.int64)
        w_start = np.asarray([s.start_ns for s in spans], dtype=np.int64)
        w_end = np.asarray([s.end_ns for s in spans], dtype=np.int64)
        in_order = n < 2 or bool((w_start[1:] >= w_end[:-1]).all())
        present: list[set[int]] = [set(x) for x in noted]
        first: dict[int, int] = {}  # window -> its first event's row
        if in_order and n:
            event, win = assign_windows(starts, ends, w_start, w_end)
            for w, o in set(zip(win.tolist(), owner[event].tolist())):
                present[w].add(o)
            order = np.lexsort((starts[event], win))
            windows_seen, at = np.unique(win[order], return_index=True)
            first = dict(zip(windows_seen.tolist(), event[order][at].tolist()))
        else:
            for w, span in enumerate(spans):
                hit = (starts <= span.end_ns) & (ends >= span.start_ns)
                present[w].update(owner[hit].tolist())
                if hit.any():
                    rows = np.flatnonzero(hit)
                    first[w] = int(rows[np.argmin(starts[rows])])
        with_children = [w for w in range(n) if present[w] - {0}]
        busy: dict[int, dict[int, tuple[float, dict[str, float]]]] = {}
        union: dict[int, dict[str, float]] = {}
        if with_children:
            sub_spans = [spans[w] for w in with_children]
            groups = [sub_spans] if in_order else [[s] for s in sub_spans]
            for o in sorted(set().union(*(present[w] for w in with_children))):
                rows = np.flatnonzero(owner == o)
                columns = take_columns(merged, rows)
                stats = [s for group in groups for s in window_stats(columns, group, self.classifier)]
                busy[o] = {w: (s.busy_us / 1000, {d: b / 1000 for d, b in s.devices}) for w, s in zip(with_children, stats)}
            stats = [s for group in groups for s in window_stats(merged, group, self.classifier)]
            union = {w: {d: b / 1000 for d, b in s.devices} for w, s in zip(with_children, stats)}
        extras = []
        for w in range(n):
            shares = []
            if w in with_children:
                found = overlaps({o: busy.get(o, {}).get(w, (0.0, {}))[1] for o in present[w]}, union.get(w, {}))
                for o in sorted(present[w]):
                    gpu_ms, devices = busy.get(o, {}).get(w, (0.0, {}))
                    share = self._share(None if o == 0 else children[o - 1], gpu_ms, tuple(devices))
                    shares.append(replace(share, overlap=overlap_text(o, found, self._pid_of(children))))
                notes[w].extend(overlap_note(o, self._pid_of(children)) for o in found)
            started = None
            if w in with_children and w in first and owner[first[w]] > 0:
                started = self._child_start(children[owner[first[w]] - 1], spans[w], int(starts[first[w]]))
            extras.append(WindowExtras(tuple(shares), "; ".join(notes[w]), started))
        return extras

    def _child_start(self, child: _Child, span: Window, first_ns: int) -> Optional[ChildStart]:
        """The child whose kernel was the window's first, if its process started in the window."""
        began = started_realtime_ns(child.header.proc_start) if child.header is not None else None
        if began is None:
            return None
        began = self._realtime_to_parent(began)
        if not span.start_ns - START_SLACK_NS <= began <= first_ns:
            return None  # started before the test (a session's worker): its start-up is no test's
        return ChildStart(child.program, first_ns - max(began, span.start_ns))

    def _pid_of(self, children: list[_Child]) -> Callable[[int], str]:
        return lambda o: f"pid {self.own_pid} (pytest)" if o == 0 else children[o - 1].label()

    def _share(self, child: Optional[_Child], gpu_ms: float, devices: tuple[str, ...]) -> ProcessShare:
        if child is None:
            return ProcessShare(self.own_pid, "pytest", devices=devices, gpu_ms=gpu_ms, parent=True)
        header = child.header
        peak, source = None, ""
        if child.memory is not None and child.memory.devices:
            peak, source = max(d[1] for d in child.memory.devices) / MIB, "allocator"
        elif child.nvml_peak:
            peak, source = max(child.nvml_peak.values()) / MIB, "nvml"
        note = ""
        if child.end is None and not self._running(child) and header is not None:
            note = "ended without handing over its records"
        elif child.end is not None and child.end.reason == NESTED:
            note = "measured by its own pytest --gpu-util run"
        elif child.end is not None and child.end.reason == TERMINATED:
            note = "ended by SIGTERM (records handed over first)"
        elif header is None:
            note = "not measured"
        elif any(n.text.startswith("not measured") for n in child.notes):
            note = "not measured"
        return ProcessShare(
            pid=child.pid, program=child.program, rank=header.rank if header else "", devices=devices, gpu_ms=gpu_ms,
            peak_mb=peak, memory_source=source, note=note, parent=False,
            measured_by=CAPTURE_NAMES.get(header.capture, "") if header else "",
            startup_ms=header.startup_ns / 1e6 if header is not None and header.startup_ns else None,
        )

    def _note_late(self, merged: GpuColumns, owner: np.ndarray, spans: Sequence[Window], children: list[_Child]) -> None:
        """Children's work that belongs to a window already written: said once per batch, not lost silently."""
        if not self._history or not (owner > 0).any():
            return
        old = sorted(self._history)
        o_start = np.asarray([s for s, _, _ in old], dtype=np.int64)
        o_end = np.asarray([e for _, e, _ in old], dtype=np.int64)
        if (o_start[1:] < o_end[:-1]).any():
            return
        rows = np.flatnonzero(owner > 0)
        starts = np.asarray(merged.starts_ns, dtype=np.int64)[rows]
        ends = starts + np.asarray(merged.durs_ns, dtype=np.int64)[rows]
        event, win = assign_windows(starts, ends, o_start, o_end)
        if not event.size:
            return
        late_ms = float(np.sum(np.minimum(ends[event], o_end[win]) - np.maximum(starts[event], o_start[win]))) / 1e6
        pids = sorted({children[int(owner[rows[e]]) - 1].pid for e in event.tolist()})
        tests = sorted({str(old[w][2]) for w in win.tolist()})
        self.session_notes.append(
            f"{late_ms:.3f} ms of GPU work by child pid {', '.join(map(str, pids))} arrived after the record of "
            f"{', '.join(tests[:3])}{' ...' if len(tests) > 3 else ''} was written (not counted)")

    # -- the end ----------------------------------------------------------------------------------
    def close(self, environ: Optional[dict] = None) -> None:
        """The session's end: note children still running, stop sampling, restore the environment,
        remove the spool (children still running then stop handing over quietly)."""
        self.session_notes.extend(self.still_running())
        if self.sampler is not None:
            self.sampler.stop()
        self.spool.restore(os.environ if environ is None else environ)
        problem = self.spool.remove()
        if problem:
            self.session_notes.append(problem)

    def summary(self) -> dict[str, Any]:
        """What the run's summary says of the children (JSON-able)."""
        headers = [c.header for c in self._children.values() if c.header is not None]
        startups = sorted(h.startup_ns / 1e6 for h in headers if h.startup_ns)
        return {
            "processes": len(headers),
            "measured": len(startups),
            "by": {name: sum(1 for h in headers if CAPTURE_NAMES.get(h.capture) == name and h.startup_ns)
                   for name in ("python", "injection")},
            "startup_ms": startups,
            "unmeasured_gpu_processes": sum(1 for c in self._children.values() if c.header is None),
            "injection": self.injection_problem or "available",
            "notes": list(self.session_notes),
        }

    def still_running(self) -> list[str]:
        """Children that run on at the session's end (said once each)."""
        found = []
        for child in self._children.values():
            if self._running(child) and "running" not in child.said:
                child.said.add("running")
                found.append(f"child {child.label()} was still running when the session ended: its work after "
                             f"{_clock_text(child.covered_ns)} is not counted")
        return found

    def measured_processes(self) -> list[Header]:
        return [c.header for c in self._children.values() if c.header is not None and c.header.startup_ns]

    def ended_normally(self) -> int:
        return sum(1 for c in self._children.values() if c.end is not None and c.end.reason == EXITED)


def _visible(text: Optional[str]) -> Optional[list[str]]:
    if text is None:
        return None
    return [d.strip() for d in text.split(",") if d.strip()]


def _window_for(at_ns: int, spans: Sequence[Window]) -> Optional[int]:
    """The window a process note belongs to: the one holding its time, else the next, else the last."""
    if not spans:
        return None
    for i, span in enumerate(spans):
        if span.start_ns <= at_ns <= span.end_ns:
            return i
    later = [i for i, span in enumerate(spans) if span.start_ns > at_ns]
    return min(later, key=lambda i: spans[i].start_ns) if later else max(range(len(spans)), key=lambda i: spans[i].end_ns)


def _clock_text(ns: int) -> str:
    if ns <= 0:
        return "its start"
    seconds = ns / 1e9
    if seconds < 1e8:  # not a wall-clock time (a test clock): no time of day
        return f"{seconds:.3f} s"
    return time.strftime("%H:%M:%S", time.localtime(seconds)) + f".{int(ns % 1_000_000_000) // 1_000_000:03d}"


def start_process_tree(classifier: KernelClassifier, parent_now: Callable[[], int], *,
                       demangle: Optional[Callable[[str], str]] = None, cupti_library: Optional[str] = None,
                       environ: Optional[dict] = None, use_nvml: bool = True, base: Optional[str] = None) -> ProcessTree:
    """Create this process's spool, point every child to it, and return the tree that reads it.

    The environment gets the spool, the libcupti to use, this process's pid (the injection
    library leaves it alone) and ``CUDA_INJECTION64_PATH`` when the injection library was built
    and the variable is free; otherwise the tree remembers why non-Python children go unmeasured.
    Forked children are measured through the bootstrap's fork handler.
    """
    from pytest_gpuutil.children import bootstrap
    from pytest_gpuutil.children.spool import (
        CUPTI_ENV,
        INJECTED_ENV,
        INJECTION_ENV,
        SELF_ENV,
        SPOOL_ENV,
        injection_library,
    )

    env = os.environ if environ is None else environ
    spool = Spool.create(base)
    values: dict[str, Optional[str]] = {SPOOL_ENV: str(spool.directory), SELF_ENV: str(os.getpid()), INJECTED_ENV: None}
    if cupti_library:
        values[CUPTI_ENV] = cupti_library
    library = injection_library()
    taken = env.get(INJECTION_ENV)
    problem = ""
    if library is None:
        problem = "the injection library was not built (no C compiler when pytest-gpuutil was installed)"
    elif taken and taken != library:
        problem = f"CUDA_INJECTION64_PATH is already set ({taken})"
    elif not cupti_library:
        problem = "no libcupti loaded in the pytest process to hand to the injection library"
    else:
        values[INJECTION_ENV] = library
    spool.export(env, values)
    bootstrap.ensure_fork_hook()
    bootstrap.ensure_pool_hook()  # forked Pool workers inherit the per-task hand-over
    sampler = None
    if use_nvml:
        from pytest_gpuutil.children.nvml import NvmlError, NvmlSampler

        try:
            sampler = NvmlSampler()
            sampler.start()
        except NvmlError:
            sampler = None
    return ProcessTree(spool, classifier, parent_now, demangle=demangle or (lambda name: name),
                       visible_devices=env.get("CUDA_VISIBLE_DEVICES"), sampler=sampler, injection_problem=problem)
