"""One flush's batch of GPU work split among the windows it covers: each window's figures, its
events and host waits, its findings and its timeline.

The windows are the continuous capture's closed windows (anything with ``key``, ``start_ns``,
``end_ns``, ``wall_ms``, ``sync_end_ns`` and ``cuda_came_up``), in the order they ran. Windows in
order are done in one pass over the batch; where the wall clock stepped back between tests, one
window at a time. Results are keyed by ``id(window)``.
"""
from __future__ import annotations

from typing import Any, Callable, Iterator, Mapping, Optional, Sequence

import numpy as np

from pytest_gpuutil.analysis.classify import ATTENTION, COMMUNICATION, CONV, GEMM, KernelClassifier
from pytest_gpuutil.analysis.findings import find, gated_rules
from pytest_gpuutil.analysis.finding_records import Finding, Glance, Rule
from pytest_gpuutil.analysis.intervals.window_columns import figures, row_bounds, stats_rows
from pytest_gpuutil.analysis.windows import WindowStats, assign_windows, stats_of_rows
from pytest_gpuutil.analysis import timeline as timelines
from pytest_gpuutil.frozen import records_of
from pytest_gpuutil.traces.model import GpuColumns, SyncColumns, Window

#: kernel categories whose library (cuBLAS, cuDNN, NCCL) starts up on its first use in a process
LIBRARY_CATEGORIES = frozenset({GEMM, CONV, ATTENTION, COMMUNICATION})


def spans_of(windows: Sequence[Any]) -> list[Window]:
    """``Window(w.start_ns, w.end_ns, "test_call")`` of each window (no ``__init__`` call per window)."""
    return records_of(Window, [{"start_ns": w.start_ns, "end_ns": w.end_ns, "source": "test_call"} for w in windows])


def in_order(spans: Sequence[Window]) -> bool:
    return all(a.end_ns <= b.start_ns for a, b in zip(spans, spans[1:]))


def attribute(columns: GpuColumns, windows: Sequence[Any], classifier: KernelClassifier,
              keep_events: bool) -> tuple[dict[int, WindowStats], dict[int, GpuColumns]]:
    """Each window's figures (and events, when kept)."""
    stats, events, _ = attribute_rows(columns, windows, classifier, keep_events)
    return stats, events


def attribute_rows(columns: GpuColumns, windows: Sequence[Any], classifier: KernelClassifier, keep_events: bool,
                   spans: Optional[Sequence[Window]] = None) -> tuple[dict[int, WindowStats], dict[int, GpuColumns], "WindowRows"]:
    """:func:`attribute`, and each window's event indices as the attribution found them (for the
    findings, the timelines and the kept events: no second search), with the attribution's columns
    where it made them in one pass (``spans``: the windows' :func:`spans_of`, when made already)."""
    spans = spans_of(windows) if spans is None else spans
    starts = np.fromiter([s.start_ns for s in spans], dtype=np.int64, count=len(spans))  # (asarray's values, faster)
    ends = np.fromiter([s.end_ns for s in spans], dtype=np.int64, count=len(spans))
    rows = WindowRows()
    if starts.size < 2 or bool((starts[1:] >= ends[:-1]).all()):  # in order (in_order(spans)): one pass
        found = figures(columns, starts, ends, classifier)
        made = stats_of_rows(stats_rows(found, spans))
        rows.add(windows, *found.assigned)
        rows.columns = (windows, found, starts, ends)
    else:  # the wall clock stepped back between tests: one window at a time
        made = []
        for i, w in enumerate(windows):
            found = figures(columns, starts[i:i + 1], ends[i:i + 1], classifier)
            made.extend(stats_of_rows(stats_rows(found, spans[i:i + 1])))
            rows.add([w], *found.assigned)
    stats = dict(zip(map(id, windows), made))
    events = {id(w): columns.take(rows.of(id(w))) for w in windows} if keep_events else {}
    return stats, events, rows


class WindowRows:
    """Each window's event indices, ascending (keyed by ``id(window)``), from an assignment of events to
    windows; looked up by window only when asked (most windows never are)."""

    def __init__(self) -> None:
        self._groups: list[tuple[Sequence[Any], np.ndarray, list[int]]] = []
        self._where: Optional[dict[int, tuple[int, int]]] = None
        #: (windows, their WindowFigures, their starts and ends) where one pass attributed every window
        self.columns: Optional[tuple[Sequence[Any], Any, np.ndarray, np.ndarray]] = None

    def add(self, windows: Sequence[Any], event: np.ndarray, win: np.ndarray) -> None:
        if win.size > 1 and not (win[1:] >= win[:-1]).all():
            order = np.argsort(win, kind="stable")
            event, win = event[order], win[order]
        self._groups.append((windows, event, row_bounds(win, len(windows)).tolist()))
        self._where = None

    def _index(self) -> dict[int, tuple[int, int]]:
        if self._where is None:
            self._where = {id(w): (g, i) for g, (windows, _, _) in enumerate(self._groups) for i, w in enumerate(windows)}
        return self._where

    def __contains__(self, key: int) -> bool:
        return key in self._index()

    def of(self, key: int) -> np.ndarray:
        g, i = self._index()[key]
        _, event, bounds = self._groups[g]
        return event[bounds[i]:bounds[i + 1]]

    def figures_of(self, windows: Sequence[Any]) -> Optional[tuple[Any, np.ndarray, np.ndarray]]:
        """(WindowFigures, starts, ends) of exactly ``windows`` (the same list) where one pass made them, else None."""
        if self.columns is None or self.columns[0] is not windows:
            return None
        return self.columns[1:]


class FirstUses:
    """What earlier windows of this process ran: gpu-idle names a library's start-up by its first use,
    and the GPU's figures (its peaks) once its name is known."""

    def __init__(self, device_name: Callable[[], Optional[str]]):
        self._device_name = device_name
        self._device_figures: Optional[Mapping[str, float]] = None
        self._seen_work = False
        self._seen_libraries: set[str] = set()

    def contexts(self, windows: Sequence[Any], stats: dict[int, WindowStats], extras: dict[int, Any],
                 rows: Optional[WindowRows] = None) -> "Contexts":
        """What the findings know of each window besides its events (in the order the windows ran):
        whether it held this process's first GPU work or a library's first use, and a child's start-up.
        The first uses from the attribution's columns where ``rows`` has them for these windows (one
        look per library), else one pass over the windows; each window's figures are made when the
        findings ask for them (most windows are never looked at)."""
        if self._device_figures is None:
            name = self._device_name()
            if name:
                from pytest_gpuutil.machine.peaks import findings_figures

                self._device_figures = findings_figures(name)
        columns = rows.figures_of(windows) if rows is not None else None
        if columns is not None:
            own = self._first_uses_of(windows, columns[0])
        else:
            own = self._first_uses_by_window(windows, stats)
        for w in [w for w in windows if w.cuda_came_up]:
            own.setdefault(id(w), {})["cuda_came_up"] = 1.0
        for key, extra in extras.items():  # the window's first GPU work was a child's that started in the window
            started = getattr(extra, "child_start", None)
            if started is not None:
                own.setdefault(key, {})["child_startup_ms"] = started.startup_ns / 1e6
        return Contexts(dict(self._device_figures or {}), own, frozenset(map(id, windows)))

    def _first_uses_of(self, windows: Sequence[Any], found: Any) -> dict[int, dict[str, float]]:
        """The windows with this process's first GPU work or a library's first use, from the attribution's
        columns (``found``: their WindowFigures): the first window with events, and each library's first window."""
        own: dict[int, dict[str, float]] = {}
        if not self._seen_work:
            first = (found.columns[1] > 0).nonzero()[0]
            if first.size:
                own[id(windows[int(first[0])])] = {"first_gpu_work": 1.0}
                self._seen_work = True
        for c, name in enumerate(found.category_names):
            if name in LIBRARY_CATEGORIES and name not in self._seen_libraries:
                first = (found.category_count[:, c] > 0).nonzero()[0]
                if first.size:
                    own.setdefault(id(windows[int(first[0])]), {})["first_library_use"] = 1.0
                    self._seen_libraries.add(name)
        return own

    def _first_uses_by_window(self, windows: Sequence[Any], stats: dict[int, WindowStats]) -> dict[int, dict[str, float]]:
        """:meth:`_first_uses_of` from each window's statistics, in one pass."""
        own: dict[int, dict[str, float]] = {}
        every_library = self._seen_libraries >= LIBRARY_CATEGORIES
        for w in windows:
            if self._seen_work and every_library:
                break
            key = id(w)
            figures: dict[str, float] = {}
            window_stats = stats[key]
            if window_stats.event_count and not self._seen_work:
                figures["first_gpu_work"] = 1.0
                self._seen_work = True
            if not every_library:
                libraries = {name for name, *_, count in window_stats.category_rows
                             if count and name in LIBRARY_CATEGORIES}  # rows: no stats objects made
                if libraries - self._seen_libraries:
                    figures["first_library_use"] = 1.0
                    self._seen_libraries |= libraries
                    every_library = self._seen_libraries >= LIBRARY_CATEGORIES
            if figures:
                own[key] = figures
        return own


class Contexts(Mapping[int, dict[str, float]]):
    """Each window's context for the findings (keyed by ``id(window)``): the device's figures and the
    window's own, made when asked for."""

    def __init__(self, device: dict[str, float], own: dict[int, dict[str, float]], keys: frozenset[int]):
        self._device, self._own, self._keys = device, own, keys

    def __getitem__(self, key: int) -> dict[str, float]:
        if key not in self._keys:
            raise KeyError(key)
        own = self._own.get(key)
        return {**self._device, **own} if own else dict(self._device)

    def __iter__(self) -> Iterator[int]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)


def findings_of(columns: GpuColumns, syncs: Optional[SyncColumns], windows: Sequence[Any],
                stats: dict[int, WindowStats], classifier: KernelClassifier, ignore: frozenset[str],
                contexts: Optional[Mapping[int, Mapping[str, float]]] = None, host: Any = None,
                rows: Optional[WindowRows] = None) -> dict[int, tuple[Finding, ...]]:
    """Each window's findings: the events and waits of those that may have some, looked at one by one
    (``host``: the host's activity, :class:`~pytest_gpuutil.analysis.places.HostActivity`: their places).
    Which windows may have some is asked of all windows at once (:func:`looked_at`), from the
    attribution's columns where ``rows`` has them for these windows."""
    figures_of = rows.figures_of(windows) if rows is not None else None
    # the attribution's spans of the windows (only those looked at, where the columns answer for all)
    spans = [stats[id(w)].window for w in windows] if figures_of is None else None
    found: dict[int, tuple[Finding, ...]] = dict.fromkeys(map(id, windows), ())
    looked = looked_at(windows, spans, stats, syncs, gated_rules(ignore), figures_of)
    if not looked:
        return found
    picked = [windows[i] for i in looked]
    picked_spans = [stats[id(w)].window for w in picked]
    events = events_by_window(columns, picked, picked_spans, rows)
    waits = waits_by_window(syncs, picked, picked_spans)
    for w, span, wait in zip(picked, picked_spans, waits or [None] * len(picked)):
        found[id(w)] = find(events[id(w)], span, classifier,
                            None if wait is None or syncs is None else syncs.take(wait),
                            ignore=ignore, sync_end_ns=w.sync_end_ns, context=(contexts or {}).get(id(w)))
        if host is not None and found[id(w)]:
            from pytest_gpuutil.capture.places.host import HostPlaces

            found[id(w)] = HostPlaces.attach(found[id(w)], host, span, events[id(w)])
    return found


def looked_at(windows: Sequence[Any], spans: Optional[Sequence[Window]], stats: dict[int, WindowStats],
              syncs: Optional[SyncColumns], rules: Sequence[Rule],
              columns: Optional[tuple[Any, np.ndarray, np.ndarray]] = None) -> list[int]:
    """The indices of the windows some rule's gate lets through (:func:`~pytest_gpuutil.analysis.findings.may_fire`),
    every gate asked once for all windows, with a :class:`Glance` of columns (one value per window):
    the attribution's (``columns``: its WindowFigures, the windows' starts and ends) where given,
    else made from each window's statistics (and ``spans``)."""
    if not windows or not rules:
        return []
    if columns is not None:
        figures = _glance_of_columns(windows, syncs, *columns)
    else:
        figures = _glance_of_stats(windows, spans or (), stats, syncs)
    fire = np.zeros(len(windows), dtype=bool)
    for rule in rules:
        fire |= rule.gate(figures, rule.limits)  # a bool or a column, broadcast in place (no broadcast_to per rule)
    return (fire & (figures.window_ns > 0)).nonzero()[0].tolist()


def _glance_of_columns(windows: Sequence[Any], syncs: Optional[SyncColumns], found: Any, starts: np.ndarray,
                       ends: np.ndarray) -> Glance:
    """The Glance of the attribution's columns: the same values :func:`_glance_of_stats` reads from each
    window's statistics (a category's time is 0 in a window without its events)."""
    present = found.category_count.any(axis=0)
    category_us = {name: found.category_ns[:, c] / 1000 for c, name in enumerate(found.category_names) if present[c]}
    busy_pct, event_count, kernel_count = found.columns
    return Glance(np.maximum(ends - starts, 0), busy_pct, event_count, kernel_count,
                  category_us, wait_counts(syncs, windows, None, starts, ends))


def _glance_of_stats(windows: Sequence[Any], spans: Sequence[Window], stats: dict[int, WindowStats],
                     syncs: Optional[SyncColumns]) -> Glance:
    rows = [stats[id(w)] for w in windows]
    category_us: dict[str, np.ndarray] = {}
    for i, s in enumerate(rows):
        for name, time_us, *_ in s.category_rows:
            column = category_us.get(name)
            if column is None:
                column = category_us[name] = np.zeros(len(rows))
            column[i] = time_us
    return Glance(np.asarray([s.window.duration_ns for s in rows], dtype=np.int64),
                  np.asarray([s.busy_pct for s in rows], dtype=np.float64),
                  np.asarray([s.event_count for s in rows], dtype=np.int64),
                  np.asarray([s.kernel_count for s in rows], dtype=np.int64),
                  category_us, wait_counts(syncs, windows, spans))


def wait_counts(syncs: Optional[SyncColumns], windows: Sequence[Any], spans: Optional[Sequence[Window]],
                span_starts: Optional[np.ndarray] = None, span_ends: Optional[np.ndarray] = None) -> Optional[np.ndarray]:
    """How many waits :func:`waits_by_window` finds in each window, for all windows at once: those
    that began before the window's limit less those that ended by its start (a wait that ended by
    the start began before the limit where the limit is past the start). The windows' spans as
    ``spans``, or as columns of their starts and ends (spans made only where needed)."""
    if syncs is None:
        return None
    if not len(syncs):
        return np.zeros(len(windows), dtype=np.int64)
    starts = np.asarray(syncs.starts_ns, dtype=np.int64)
    durs = np.asarray(syncs.durs_ns, dtype=np.int64)
    if span_starts is None or span_ends is None:
        spans = spans or ()
        span_starts = np.asarray([span.start_ns for span in spans], dtype=np.int64)
        span_ends = np.asarray([span.end_ns for span in spans], dtype=np.int64)
    sync_ends = [w.sync_end_ns for w in windows]
    if None in sync_ends:
        limits = np.asarray([end if sync_end is None else min(end, sync_end)
                             for end, sync_end in zip(span_ends.tolist(), sync_ends)], dtype=np.int64)
    else:
        limits = np.minimum(span_ends, np.asarray(sync_ends, dtype=np.int64))

    def spans_at(indices: Any) -> list[Window]:
        return [spans[i] for i in indices] if spans is not None else [
            Window(int(span_starts[i]), int(span_ends[i]), "test_call") for i in indices]

    if (durs < 0).any():
        return np.asarray([len(found) for found in waits_by_window(syncs, windows, spans_at(range(len(windows))))
                           or ()], dtype=np.int64)
    counts = (np.searchsorted(np.sort(starts), limits, side="left")
              - np.searchsorted(np.sort(starts + durs), span_starts, side="right"))
    odd = np.flatnonzero(limits <= span_starts)  # a window with no time before its limit: one by one
    if odd.size:
        exact = waits_by_window(syncs, [windows[i] for i in odd], spans_at(odd.tolist())) or []
        counts[odd] = [len(found) for found in exact]
    return counts


def timelines_of(columns: GpuColumns, syncs: Optional[SyncColumns], windows: Sequence[Any],
                 stats: dict[int, WindowStats], findings: dict[int, tuple[Finding, ...]], *,
                 wanted: Callable[..., bool], classifier: KernelClassifier, children: Any,
                 gap_ns: int, rows: Optional[WindowRows] = None) -> dict[int, dict[str, Any]]:
    """The compact timelines of the windows ``wanted`` picks (their events, the host's waits, and
    which process ran each event when children took part)."""
    picked = [w for w in windows if wanted(w.key, w.wall_ms, stats[id(w)], findings.get(id(w)))]
    if not picked:
        return {}
    owners, labels = getattr(children, "last_owners", None) or (None, ("",))
    if owners is not None and len(owners) != len(columns):
        owners, labels = None, ("",)
    spans = spans_of(picked)
    rows_of = rows_by_window(columns, picked, spans, rows)
    out = {}
    for w, span in zip(picked, spans):
        events = columns.take(rows_of[id(w)])
        out[id(w)] = timelines.encode(timelines.build(
            events, span, classifier, syncs=None if syncs is None else syncs_of(syncs, w),
            owners=None if owners is None else owners[rows_of[id(w)]], owner_labels=labels,
            sync_end_ns=w.sync_end_ns, gap_ns=gap_ns))
    return out


def waits_by_window(syncs: Optional[SyncColumns], windows: Sequence[Any], spans: Sequence[Window]) -> Optional[list[list[int]]]:
    """For each window, the indices of the waits that overlap it and began before its closing synchronize."""
    if syncs is None:
        return None
    by_window: list[list[int]] = [[] for _ in windows]
    if not len(syncs):
        return by_window
    starts = np.asarray(syncs.starts_ns, dtype=np.int64)
    durs = np.asarray(syncs.durs_ns, dtype=np.int64)
    order = np.argsort(starts, kind="stable")
    sorted_starts, longest = starts[order], int(durs.max())
    span_starts = np.asarray([span.start_ns for span in spans], dtype=np.int64)
    limits = np.asarray([span.end_ns if w.sync_end_ns is None else min(span.end_ns, w.sync_end_ns)
                         for w, span in zip(windows, spans)], dtype=np.int64)
    # per window, the waits that began after (its start - the longest wait) and before its limit
    los = np.searchsorted(sorted_starts, span_starts - longest, side="left").tolist()
    his = np.searchsorted(sorted_starts, limits, side="left").tolist()
    for i, (lo, hi) in enumerate(zip(los, his)):
        if lo < hi:
            near = order[lo:hi]
            by_window[i] = sorted(near[starts[near] + durs[near] > span_starts[i]].tolist())
    return by_window


def syncs_of(syncs: SyncColumns, window: Any) -> SyncColumns:
    """The waits of one window (for its trace file)."""
    found = waits_by_window(syncs, [window], spans_of([window]))
    return syncs.take(found[0]) if found else SyncColumns()


def events_by_window(columns: GpuColumns, windows: Sequence[Any], spans: Sequence[Window],
                     rows: Optional[WindowRows] = None) -> dict[int, GpuColumns]:
    return {key: columns.take(found) for key, found in rows_by_window(columns, windows, spans, rows).items()}


def rows_by_window(columns: GpuColumns, windows: Sequence[Any], spans: Sequence[Window],
                   rows: Optional[WindowRows] = None) -> dict[int, np.ndarray]:
    """The indices of each window's events (windows in order; else one window at a time); from
    ``rows`` (the attribution's) where it has every window."""
    if rows is not None and all(id(w) in rows for w in windows):
        return {id(w): rows.of(id(w)) for w in windows}
    if not in_order(spans):
        found: dict[int, np.ndarray] = {}
        for w, s in zip(windows, spans):
            found.update(rows_by_window(columns, [w], [s]))
        return found
    starts = np.asarray(columns.starts_ns, dtype=np.int64)
    ends = starts + np.asarray(columns.durs_ns, dtype=np.int64)
    event, win = assign_windows(starts, ends, np.asarray([s.start_ns for s in spans], dtype=np.int64),
                                np.asarray([s.end_ns for s in spans], dtype=np.int64))
    order = np.argsort(win, kind="stable")
    event, win = event[order], win[order]
    bounds = np.searchsorted(win, np.arange(len(windows) + 1))
    return {id(w): event[bounds[i]:bounds[i + 1]] for i, w in enumerate(windows)}
