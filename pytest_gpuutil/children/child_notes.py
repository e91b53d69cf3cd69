"""What the records say of the children besides their figures: notes, each said once, in its window.

A child's notes (what it wrote, a damaged spool file, a hand-over it missed, an end without
handing over, being measured by a nested pytest --gpu-util run, using the GPU unmeasured) go to
the window holding their time (else the next, else the last; without a window, to the session).
Children's work that arrives after its window's record was written is counted in a session note
instead of silently, as are children still running when the session ends.
"""
from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional, Sequence

import numpy as np

from pytest_gpuutil.analysis.windows import assign_windows
from pytest_gpuutil.children.spool_format import NESTED, Note
from pytest_gpuutil.children.child_state import Child
from pytest_gpuutil.traces.model import GpuColumns, Window

#: flushed windows remembered to recognise work that arrives after its record was written
HISTORY = 512


@dataclass
class ChildNotes:
    """The notes of one run's children: per window, and for the whole session (see the module docstring)."""

    #: whether a child still runs (:meth:`SpoolReader.running <pytest_gpuutil.children.child_state.SpoolReader.running>`)
    running: Callable[[Child], bool]
    #: why non-Python children cannot be measured ("" when they can), said on each one NVML sees
    injection_problem: str = ""
    #: remarks for the whole run (late work, children still running at the end)
    session_notes: list[str] = field(default_factory=list)
    #: (start, end, key) of the windows already flushed
    _history: deque = field(default_factory=lambda: deque(maxlen=HISTORY))

    def say(self, child: Child, key: Any, at_ns: int, text: str) -> None:
        """Note ``text`` on the child once per ``key``."""
        if key in child.said:
            return
        child.notes.append(Note(at_ns, text))
        child.said.add(key)

    def unsaid(self, child: Child) -> bool:
        """Whether the child has something to say that no window has said yet."""
        if child.header is None:
            return bool(child.nvml_peak) and "unmeasured" not in child.said
        if child.end is not None and child.end.reason == NESTED and "nested" not in child.said:
            return True
        if any(id(n) not in child.said for n in child.notes):
            return True
        return not child.lost_noted and child.end is None and not self.running(child)

    def _process_notes(self, child: Child) -> list[Note]:
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
                                               f"{clock_text(child.end.at_ns)} on (not counted here)"))
        if child.end is None and not child.lost_noted and not self.running(child):
            child.lost_noted = True
            found.append(Note(child.last_known_ns(), f"child {label} ended without handing over its records "
                                                     f"(killed?): its work after {clock_text(child.covered_ns)} is missing"
                                                     f"{_missing_bound(child)}"))
        return found

    def place(self, children: Sequence[Child], spans: Sequence[Window]) -> tuple[list[list[str]], list[set[int]]]:
        """Each window's notes, and which children (1-based, as in the merge) each names."""
        notes: list[list[str]] = [[] for _ in spans]
        noted: list[set[int]] = [set() for _ in spans]
        for index, child in enumerate(children, start=1):
            for note in self._process_notes(child):
                w = _window_for(note.at_ns, spans)
                if w is None:
                    self.session_notes.append(note.text)
                else:
                    notes[w].append(note.text)
                    noted[w].add(index)
        return notes, noted

    def remember(self, spans: Sequence[Window], keys: Sequence[Any]) -> None:
        """The flushed windows, to recognise work that arrives after their records were written."""
        self._history.extend([(s.start_ns, s.end_ns, key) for s, key in zip(spans, keys)])  # (start, end, key) each

    def note_late(self, merged: GpuColumns, owner: np.ndarray, children: Sequence[Child]) -> None:
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

    def still_running(self, children: Iterable[Child]) -> list[str]:
        """Children that run on at the session's end (said once each)."""
        found = []
        for child in children:
            if self.running(child) and "running" not in child.said:
                child.said.add("running")
                found.append(f"child {child.label()} was still running when the session ended: its work after "
                             f"{clock_text(child.covered_ns)} is not counted")
        return found


def _window_for(at_ns: int, spans: Sequence[Window]) -> Optional[int]:
    """The window a process note belongs to: the one holding its time, else the next, else the last."""
    if not spans:
        return None
    for i, span in enumerate(spans):
        if span.start_ns <= at_ns <= span.end_ns:
            return i
    later = [i for i, span in enumerate(spans) if span.start_ns > at_ns]
    return min(later, key=lambda i: spans[i].start_ns) if later else max(range(len(spans)), key=lambda i: spans[i].end_ns)


def _missing_bound(child: Child) -> str:
    """How much of its run that is: from its last hand-over to when it was found ended."""
    if child.gone_ns <= 0 or child.covered_ns <= 0 or child.gone_ns < child.covered_ns:
        return ""
    return f" (at most the {(child.gone_ns - child.covered_ns) / 1e9:.1f} s until it was found ended)"


def clock_text(ns: int) -> str:
    """A time for a note: a time of day to the millisecond, or seconds on a test's own clock."""
    if ns <= 0:
        return "its start"
    seconds = ns / 1e9
    if seconds < 1e8:  # not a wall-clock time (a test clock): no time of day
        return f"{seconds:.3f} s"
    return time.strftime("%H:%M:%S", time.localtime(seconds)) + f".{int(ns % 1_000_000_000) // 1_000_000:03d}"
