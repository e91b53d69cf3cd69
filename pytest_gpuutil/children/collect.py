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
session note instead of silently. Reading the spool is :mod:`~pytest_gpuutil.children.child_state`'s
job, the notes :mod:`~pytest_gpuutil.children.child_notes`'; this module merges and attributes.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Optional, Sequence

import numpy as np

from pytest_gpuutil.analysis.classify import KernelClassifier
from pytest_gpuutil.analysis.windows import assign_windows, window_stats
from pytest_gpuutil.capture.memory import MIB
from pytest_gpuutil.children.child_notes import ChildNotes, clock_text
from pytest_gpuutil.children.columns import (
    ChildStart,
    ProcessShare,
    WindowExtras,
    concat_columns,
    overlap_note,
    overlap_text,
    overlaps,
    take_columns,
    window_shares,
)
from pytest_gpuutil.children.spool import Spool
from pytest_gpuutil.children.spool_format import CAPTURE_NAMES, NESTED, TERMINATED
from pytest_gpuutil.children.child_state import WAIT_S, Child, SpoolReader
from pytest_gpuutil.machine.processes import started_realtime_ns
from pytest_gpuutil.traces.model import GpuColumns, Window

#: a process's start is known to a clock tick (10 ms): one that seems to start this much before a
#: window may have been started in it
START_SLACK_NS = 20_000_000


@dataclass
class ProcessTree:
    """The children of this process's tests, read from its spool (see the module docstring).

    Three jobs, three objects: :attr:`reader` (a :class:`~pytest_gpuutil.children.child_state.SpoolReader`)
    reads the children's state; :attr:`notes` (a :class:`~pytest_gpuutil.children.child_notes.ChildNotes`)
    places what is said of them; the tree merges their events with this process's and splits each
    window's figures by process (:meth:`attribute`).
    """

    spool: Spool
    classifier: KernelClassifier
    #: this process's event-source clock, to put children's times on it
    parent_now: Callable[[], int]
    demangle: Callable[[str], str] = lambda name: name
    #: CUDA_VISIBLE_DEVICES of this process (None: every GPU, in order)
    visible_devices: Optional[str] = None
    #: NVML per-process samples, when NVML is there (see the NVML part of child_state.py)
    sampler: Any = None
    #: why non-Python children cannot be measured ("" when they can), said on each one NVML sees
    injection_problem: str = ""
    wait_s: float = WAIT_S
    own_pid: int = field(default_factory=os.getpid)
    #: the last merge's process of each event (0: this one; i: the i-th child) and each one's lane
    #: label, for the timelines (None: no child took part)
    last_owners: Optional[tuple[np.ndarray, tuple[str, ...]]] = None
    reader: SpoolReader = field(init=False)
    notes: ChildNotes = field(init=False)

    def __post_init__(self) -> None:
        self.reader = SpoolReader(self.spool, self.parent_now, self.demangle, self.visible_devices, self.sampler,
                                  self.wait_s)
        self.notes = ChildNotes(self.reader.running, self.injection_problem)

    @property
    def session_notes(self) -> list[str]:
        """Remarks for the whole run (late work, children still running at the end)."""
        return self.notes.session_notes

    # -- one flush --------------------------------------------------------------------------------
    def attribute(self, own: GpuColumns, spans: Sequence[Window], keys: Sequence[Any]) -> tuple[GpuColumns, list[WindowExtras]]:
        """This process's events merged with its children's, and each window's extras (``spans`` sorted)."""
        self.reader.read()
        if spans:
            for child in self.reader.wait_for(max([s.end_ns for s in spans])):
                self.notes.say(child, "slow", child.last_known_ns(),
                               f"child {child.label()} did not hand over its latest records in time: its work after "
                               f"{clock_text(child.covered_ns)} may be missing")
        involved = [c for c in self.reader.children.values() if c.pending or self.notes.unsaid(c)]
        self.last_owners = None
        if not involved:
            self.notes.remember(spans, keys)
            return own, [WindowExtras()] * len(spans)  # frozen: one empty extras for every window
        parts, owners, children = [own], [np.zeros(len(own), dtype=np.int64)], []
        for child in involved:
            columns = self.reader.columns_of(child)
            child.pending = []
            children.append(child)
            if len(columns):
                parts.append(columns)
                owners.append(np.full(len(columns), len(children), dtype=np.int64))
        merged = concat_columns(parts) if len(parts) > 1 else own
        owner = np.concatenate(owners)
        self.last_owners = (owner, ("", *(c.lane_label() for c in children)))
        self.notes.note_late(merged, owner, children)
        extras = self._breakdown(merged, owner, spans, children)
        self.notes.remember(spans, keys)
        return merged, extras

    def _breakdown(self, merged: GpuColumns, owner: np.ndarray, spans: Sequence[Window],
                   children: list[Child]) -> list[WindowExtras]:
        n = len(spans)
        notes, noted = self.notes.place(children, spans)
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
                parts = window_shares(merged, owner, spans[w].start_ns, spans[w].end_ns)
                for o in sorted(present[w]):
                    gpu_ms, devices = busy.get(o, {}).get(w, (0.0, {}))
                    share = self._share(None if o == 0 else children[o - 1], gpu_ms, tuple(devices))
                    shares.append(replace(share, overlap=overlap_text(o, found, self._pid_of(children)),
                                          share_ms=parts.get(o, 0.0)))
                notes[w].extend(overlap_note(o, self._pid_of(children)) for o in found)
            started = None
            if w in with_children and w in first and owner[first[w]] > 0:
                started = self._child_start(children[owner[first[w]] - 1], spans[w], int(starts[first[w]]))
            extras.append(WindowExtras(tuple(shares), "; ".join(notes[w]), started))
        return extras

    def _child_start(self, child: Child, span: Window, first_ns: int) -> Optional[ChildStart]:
        """The child whose kernel was the window's first, if its process started in the window."""
        began = started_realtime_ns(child.header.proc_start) if child.header is not None else None
        if began is None:
            return None
        began = self.reader.realtime_to_parent(began)
        if not span.start_ns - START_SLACK_NS <= began <= first_ns:
            return None  # started before the test (a session's worker): its start-up is no test's
        return ChildStart(child.program, first_ns - max(began, span.start_ns))

    def _pid_of(self, children: list[Child]) -> Callable[[int], str]:
        return lambda o: f"pid {self.own_pid} (pytest)" if o == 0 else children[o - 1].label()

    def _share(self, child: Optional[Child], gpu_ms: float, devices: tuple[str, ...]) -> ProcessShare:
        if child is None:
            return ProcessShare(self.own_pid, "pytest", devices=devices, gpu_ms=gpu_ms, parent=True)
        header = child.header
        peak, source = None, ""
        if child.memory is not None and child.memory.devices:
            peak, source = max(d[1] for d in child.memory.devices) / MIB, "allocator"
        elif child.nvml_peak:
            peak, source = max(child.nvml_peak.values()) / MIB, "nvml"
        note = ""
        if child.end is None and not self.reader.running(child) and header is not None:
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
        known = self.reader.children.values()
        headers = [c.header for c in known if c.header is not None]
        startups = sorted(h.startup_ns / 1e6 for h in headers if h.startup_ns)
        return {
            "processes": len(headers),
            "measured": len(startups),
            "by": {name: sum(1 for h in headers if CAPTURE_NAMES.get(h.capture) == name and h.startup_ns)
                   for name in ("python", "injection")},
            "startup_ms": startups,
            "unmeasured_gpu_processes": sum(1 for c in known if c.header is None),
            "injection": self.injection_problem or "available",
            "notes": list(self.session_notes),
        }

    def still_running(self) -> list[str]:
        """Children that run on at the session's end (said once each)."""
        return self.notes.still_running(self.reader.children.values())


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
        from pytest_gpuutil.children.child_state import NvmlError, NvmlSampler

        try:
            sampler = NvmlSampler()
            sampler.start()
        except NvmlError:
            sampler = None
    return ProcessTree(spool, classifier, parent_now, demangle=demangle or (lambda name: name),
                       visible_devices=env.get("CUDA_VISIBLE_DEVICES"), sampler=sampler, injection_problem=problem)
