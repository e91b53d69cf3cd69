"""Where in the source a finding's cause lies: its places, from the host's calls and stack samples.

A pure attribution (no torch, no pytest). Its inputs are what the capture recorded on the host in
one window, on the clock of the GPU events:

- :class:`HostCalls`: the synchronizing calls and copies, each with the source places it was made
  from (innermost first; the CUPTI callback reads them, see ``capture/places/calls.py``);
- :class:`HostSamples`: the test thread's stack sampled at a low rate (``capture/places/sampler.py``),
  each sample with its places and whether it was inside CUDA's start-up.

A place is ``(file, line, function)``; torch's, the plugin's, pytest's, pluggy's and the standard
library's frames are left out where they are recorded, so places are the user's code. Each finding
gets up to :data:`MAX_PLACES` :class:`Place` records, largest first: for ``host-sync`` the lines whose
synchronizing calls were most numerous, for the copy rules the lines whose copies held the host
longest, for the others the lines the host was sampled at most (in the GPU's idle time for
``gpu-idle``), as milliseconds of host time (samples × interval).
"""
from __future__ import annotations

import bisect
import dataclasses
import functools
import linecache
import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Optional, Sequence

from pytest_gpuutil.analysis.finding_records import Finding
from pytest_gpuutil.traces.model import Window

#: a finding names at most this many places
MAX_PLACES = 3
#: (file, line, function)
Site = tuple[str, int, str]

SYNC, COPY = "sync", "copy"
#: rules whose places are the lines of their calls: the synchronizing calls, the copies
CALL_RULES: Mapping[str, str] = {"host-sync": SYNC, "pageable-memcpy": COPY, "memcpy-dominant": COPY}


@dataclass(frozen=True)
class HostCalls:
    """Synchronizing calls and copies made on the host, column by column (times in ns)."""

    kinds: Sequence[str] = ()
    starts_ns: Sequence[int] = ()
    ends_ns: Sequence[int] = ()
    #: per call, its places innermost first
    sites: Sequence[tuple[Site, ...]] = ()

    def __len__(self) -> int:
        return len(self.starts_ns)

    def within(self, start_ns: int, end_ns: int) -> "HostCalls":
        """The calls that overlap [start_ns, end_ns] (the calls in order of their starts, as taken)."""
        starts = self.starts_ns
        if not len(starts):
            return self
        longest = max(e - s for s, e in zip(starts, self.ends_ns)) if len(starts) < 64 else self._longest
        lo, hi = bisect.bisect_left(starts, start_ns - longest), bisect.bisect_left(starts, end_ns)
        rows = [i for i in range(lo, hi) if self.ends_ns[i] > start_ns]
        return HostCalls([self.kinds[i] for i in rows], [self.starts_ns[i] for i in rows],
                         [self.ends_ns[i] for i in rows], [self.sites[i] for i in rows])


    @functools.cached_property
    def _longest(self) -> int:
        return max(e - s for s, e in zip(self.starts_ns, self.ends_ns))


@dataclass(frozen=True)
class HostSamples:
    """The test thread's stack, sampled every ``interval_ns`` while a test's call ran."""

    interval_ns: int = 5_000_000
    times_ns: Sequence[int] = ()
    sites: Sequence[tuple[Site, ...]] = ()
    #: per sample: the thread was inside CUDA's start-up (torch.cuda's lazy initialisation)
    in_cuda_init: Sequence[bool] = ()
    #: per sample: the time it stands for (ns since the previous sample of the same call; the sampler
    #: waits for the GIL, so samples come less often than the interval while Python runs)
    weights_ns: Sequence[int] = ()

    def weight(self, i: int) -> int:
        return self.weights_ns[i] if self.weights_ns else self.interval_ns

    def __len__(self) -> int:
        return len(self.times_ns)

    def within(self, start_ns: int, end_ns: int) -> "HostSamples":
        lo, hi = bisect.bisect_left(self.times_ns, start_ns), bisect.bisect_left(self.times_ns, end_ns)
        return HostSamples(self.interval_ns, list(self.times_ns[lo:hi]), list(self.sites[lo:hi]),
                           list(self.in_cuda_init[lo:hi]) if self.in_cuda_init else [False] * (hi - lo),
                           list(self.weights_ns[lo:hi]) if self.weights_ns else [])


@dataclass(frozen=True)
class HostActivity:
    """What the host did in one flush's span: its calls and its samples."""

    calls: HostCalls = field(default_factory=HostCalls)
    samples: HostSamples = field(default_factory=HostSamples)

    def within(self, window: Window) -> "HostActivity":
        return HostActivity(self.calls.within(window.start_ns, window.end_ns),
                            self.samples.within(window.start_ns, window.end_ns))


@dataclass(frozen=True)
class Place:
    """One source line behind a finding and what happened there."""

    file: str
    line: int
    function: str
    #: the source line, stripped ("" when the file cannot be read)
    text: str
    #: what happened there, in words: "300 syncs", "48 copies, 210 ms of host time", "62 ms of host time"
    what: str
    #: calls at that line (syncs or copies; 0 for sampled places)
    count: int = 0
    #: host time at that line, ms (the calls' own time, or samples × interval)
    ms: float = 0.0

    @property
    def where(self) -> str:
        """``path:line``, as the terminal shows it."""
        return f"{self.file}:{self.line}"

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "function": self.function, "text": self.text,
                "what": self.what, "count": self.count, "ms": round(self.ms, 3)}


def source_text(file: str, line: int) -> str:
    """The source line, stripped; "" when it cannot be read."""
    try:
        return linecache.getline(file, line).strip()
    except Exception:  # noqa: BLE001 - a file gone or unreadable: the place stands without its text
        return ""


def _ms_text(ms: float) -> str:
    return f"{ms:,.0f} ms" if ms >= 100 else (f"{ms:.1f} ms" if ms >= 1 else f"{ms * 1000:.0f} µs")


def shown_path(path: str) -> str:
    """A file as a place names it: relative to the working directory (the rootdir, as pytest's node
    ids are) when it lies inside it, else as recorded."""
    try:
        relative = os.path.relpath(path)
    except ValueError:  # another drive
        return path
    return path if relative.startswith("..") else relative


def _place(site: Site, what: str, count: int, ms: float) -> Place:
    file, line, function = site
    return Place(shown_path(file), line, function, source_text(file, line), what, count, ms)


def call_places(calls: HostCalls, kind: str) -> tuple[Place, ...]:
    """The lines of the ``kind`` calls (innermost place of each), most time first for copies and
    most calls first for syncs."""
    counts: Counter[Site] = Counter()
    times: Counter[Site] = Counter()
    for k, start, end, sites in zip(calls.kinds, calls.starts_ns, calls.ends_ns, calls.sites):
        if k == kind and sites:
            counts[sites[0]] += 1
            times[sites[0]] += end - start
    if kind == COPY:
        order = sorted(counts, key=lambda s: (-times[s], -counts[s], s))
    else:
        order = sorted(counts, key=lambda s: (-counts[s], -times[s], s))
    noun = "syncs" if kind == SYNC else "copies"
    return tuple(_place(s, f"{counts[s]} {noun}, {_ms_text(times[s] / 1e6)} of host time", counts[s], times[s] / 1e6)
                 for s in order[:MAX_PLACES])


def sampled_places(samples: HostSamples, keep: Optional[Sequence[bool]] = None) -> tuple[Place, ...]:
    """The lines the host was sampled at most (``keep``: which samples count), as host time. A line
    is one place whatever frame ran it (a generator expression's frame and its function's, on one
    line, are one place: the function's)."""
    counts: Counter[tuple[str, int]] = Counter()
    times: Counter[tuple[str, int]] = Counter()
    named: dict[tuple[str, int], Site] = {}
    for i, sites in enumerate(samples.sites):
        if sites and (keep is None or keep[i]):
            line = sites[0][:2]
            counts[line] += 1
            times[line] += samples.weight(i)
            site = sites[0]
            if line not in named or (named[line][2].startswith("<") and not site[2].startswith("<")):
                named[line] = site
    order = sorted(counts, key=lambda s: (-times[s], s))[:MAX_PLACES]
    return tuple(_place(named[s], f"{_ms_text(times[s] / 1e6)} of host time ({counts[s]} samples)", 0, times[s] / 1e6)
                 for s in order)


def idle_samples(samples: HostSamples, busy_starts: Sequence[int], busy_ends: Sequence[int]) -> list[bool]:
    """Per sample: whether the GPU was idle then (outside every busy block)."""
    starts, ends = list(busy_starts), list(busy_ends)
    found = []
    for t in samples.times_ns:
        at = bisect.bisect_right(starts, t) - 1
        found.append(not (at >= 0 and ends[at] > t))
    return found


def places_of(finding: Finding, host: HostActivity, busy: Optional[tuple[Sequence[int], Sequence[int]]] = None
              ) -> tuple[Place, ...]:
    """A finding's places from the host's activity in its window (``host``: already cut to it) and
    the GPU's busy blocks (``busy``: starts, ends; for gpu-idle's idle time)."""
    kind = CALL_RULES.get(finding.rule)
    if kind is not None:
        found = call_places(host.calls, kind)
        if found:
            return found
    keep = None
    if finding.rule == "gpu-idle" and busy is not None:
        keep = idle_samples(host.samples, *busy)
    return sampled_places(host.samples, keep)


def with_places(findings: Iterable[Finding], host: Optional[HostActivity],
                busy: Optional[tuple[Sequence[int], Sequence[int]]] = None) -> tuple[Finding, ...]:
    """The findings, each with its places (unchanged where the host recorded nothing)."""
    found = tuple(findings)
    if host is None or not (len(host.calls) or len(host.samples)):
        return found
    out = []
    for finding in found:
        places = places_of(finding, host, busy)
        out.append(dataclasses.replace(finding, places=tuple(p.to_dict() for p in places)) if places else finding)
    return tuple(out)


def before_cuda(samples: HostSamples) -> tuple[float, float, tuple[Place, ...]]:
    """(ms of the test's own host work, ms of CUDA's start-up, the host work's places) of the samples
    taken before CUDA came up in a call."""
    init = list(samples.in_cuda_init) or [False] * len(samples)
    own = [not flag for flag in init]
    own_ns = sum(samples.weight(i) for i in range(len(samples)) if own[i])
    init_ns = sum(samples.weight(i) for i in range(len(samples)) if init[i])
    return own_ns / 1e6, init_ns / 1e6, sampled_places(samples, own)


def first_place_text(finding_dict: Mapping[str, Any]) -> str:
    """``path:line`` of a finding's first place (a finding read back from gpu_util.json), or ""."""
    places = finding_dict.get("places") if isinstance(finding_dict, Mapping) else None
    if isinstance(places, (list, tuple)) and places and isinstance(places[0], Mapping):
        first = places[0]
        return f"{first.get('file', '')}:{first.get('line', '')}"
    return ""
