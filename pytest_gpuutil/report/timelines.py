"""Which tests get a timeline on the HTML page, what a run keeps of them, and the run's timelines file.

By default the worst tests get one: the slowest, the least busy (of those with GPU work) and those
whose findings cost the most, a third of ``--gpu-util-timelines N`` each (a test may be in
several, so fewer than N may be kept). :class:`TimelineChoice` keeps that ranking as tests come, with at most N tests in it,
so a run holds at most N timelines whatever its length (:class:`TimelineStore`; besides them, for
a moment, those drawn in one flush of the capture until their records are made); ``all`` keeps
every test's, each past :data:`HELD_BYTES` of held timelines reduced to
:data:`COARSE_ROWS` spans. The page then fits them into its byte budget (:func:`fit`): the
smallest first, each given its share of what is left, a larger one reduced to fit.

A run directory keeps them beside ``gpu_util.json`` in :data:`SIDECAR` (``{"format",
"version", "tests": {test id: timeline}}``, gzip'd JSON), so ``gpuutil report`` draws them again;
the run document itself is unchanged, and a run without the file has no timelines.
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence

from pytest_gpuutil.report.files import atomic_write_bytes

SIDECAR = "timelines.json.gz"
SIDECAR_FORMAT = "pytest-gpuutil-timelines"
#: tests with a timeline by default (a third slowest, a third least busy, a third with findings)
DEFAULT_COUNT = 30
#: the page's budget for its timelines by default (the page of 1,000 tests stays under 2 MB)
PAGE_BUDGET_BYTES = 420_000
#: with all tests' timelines kept: past this many bytes held, each new one is reduced to COARSE_ROWS spans
HELD_BYTES = 64 << 20
COARSE_ROWS = 2_000
#: the fewest rows the page's budget reduces a timeline to (below that it is left out)
MIN_ROWS = 50


class TimelineChoice:
    """The worst tests so far, by three rankings of about ``count / 3`` tests each, ``count`` in all
    (``count`` None: every test; 0: none)."""

    def __init__(self, count: Optional[int]):
        self.count = count
        #: each ranking's size: N split in three (N=2: 1, 1, 0), so at most N tests are kept
        self._sizes = None if count is None else tuple(count // 3 + (1 if i < count % 3 else 0) for i in range(3))
        #: per ranking, test -> score (larger is worse)
        self._ranks: tuple[dict[str, float], ...] = ({}, {}, {})

    @staticmethod
    def scores(wall_ms: Optional[float], busy_pct: Optional[float], has_work: bool,
               impact: Optional[float]) -> tuple[Optional[float], ...]:
        """The test's score in each ranking (None: not in it): slowest, least busy, costliest findings."""
        return (wall_ms if wall_ms is not None and has_work else None,
                -busy_pct if busy_pct is not None and has_work else None,
                impact if impact is not None else None)

    def offer(self, test: str, scores: Sequence[Optional[float]]) -> tuple[bool, list[str]]:
        """Rank one test: whether it is among the worst now, and the tests that no longer are."""
        if self._sizes is None:
            return True, []
        kept, dropped = False, []
        for rank, size, score in zip(self._ranks, self._sizes, scores):
            if score is None or size == 0:
                continue
            if len(rank) < size:
                rank[test] = score
                kept = True
                continue
            worst_kept = min(rank, key=lambda t: (rank[t], t))
            if (score, test) > (rank[worst_kept], worst_kept):
                del rank[worst_kept]
                rank[test] = score
                kept = True
                dropped.append(worst_kept)
        return kept, [t for t in dropped if not any(t in r for r in self._ranks)]

    def would_keep(self, scores: Sequence[Optional[float]]) -> bool:
        """Whether a test with these scores would be kept now (nothing changes)."""
        if self._sizes is None:
            return True
        return any(score is not None and size > 0 and (len(rank) < size or score > min(rank.values()))
                   for rank, size, score in zip(self._ranks, self._sizes, scores))


def record_scores(record: Any) -> tuple[Optional[float], ...]:
    """A record's scores (a TestRecord or its dict)."""
    get = record.get if isinstance(record, Mapping) else lambda name: getattr(record, name, None)
    found = get("findings") or ()
    impact = max((float(f.get("impact_pct") or 0.0) for f in found if isinstance(f, Mapping)), default=None)
    has_work = bool(get("kernel_count") or get("gpu_busy_ms"))
    return TimelineChoice.scores(get("wall_ms"), get("busy_pct"), has_work, impact)


class TimelineStore:
    """The timelines a run keeps: those of the tests :class:`TimelineChoice` ranks among the worst."""

    def __init__(self, count: Optional[int]):
        self.choice = TimelineChoice(count)
        self.timelines: dict[str, dict[str, Any]] = {}
        self._bytes: dict[str, int] = {}

    def offer(self, test: str, scores: Sequence[Optional[float]], timeline: Optional[Mapping[str, Any]]) -> None:
        if timeline is None:
            return
        kept, dropped = self.choice.offer(test, scores)
        for name in dropped:
            self.timelines.pop(name, None)
            self._bytes.pop(name, None)
        if not kept:
            return
        data = dict(timeline)
        if self.choice.count is None and sum(self._bytes.values()) > HELD_BYTES:
            from pytest_gpuutil.analysis.timeline import shrink

            data = shrink(data, COARSE_ROWS)
        self.timelines[test] = data
        self._bytes[test] = size_of(data)


def size_of(timeline: Mapping[str, Any]) -> int:
    """Bytes the timeline takes on the page (its JSON)."""
    return len(json.dumps(timeline, separators=(",", ":"), ensure_ascii=False))


def fit(timelines: Mapping[str, Mapping[str, Any]], budget: Optional[int]) -> dict[str, dict[str, Any]]:
    """The timelines within ``budget`` bytes (None: as they are): the smallest first, each given
    an equal share of what is left; one larger than its share is reduced to fit (or left out)."""
    if budget is None:
        return {test: dict(t) for test, t in timelines.items()}
    from pytest_gpuutil.analysis.timeline import shrink

    sized = sorted(((size_of(t), test) for test, t in timelines.items()), key=lambda s: (s[0], s[1]))
    left, out = budget, {}
    for index, (size, test) in enumerate(sized):
        share = left // (len(sized) - index)
        data = dict(timelines[test])
        for _ in range(4):  # each pass aims under the share; a few always get there (or as small as it goes)
            rows = int(data.get("n", 0))
            if size <= share or rows <= MIN_ROWS:
                break
            data = shrink(data, max(MIN_ROWS, int(rows * share / size * 0.9)))
            size = size_of(data)
        if size <= share:
            out[test] = data
            left -= size
    return out


def write_sidecar(directory: Path, timelines: Mapping[str, Mapping[str, Any]]) -> Optional[Path]:
    """``directory/timelines.json.gz`` with the run's timelines (an old one removed when there are none)."""
    path = Path(directory) / SIDECAR
    if not timelines:
        if path.exists():
            path.unlink()
        return None
    doc = {"format": SIDECAR_FORMAT, "version": 1, "tests": dict(sorted(timelines.items()))}
    text = json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    return atomic_write_bytes(path, gzip.compress(text, mtime=0))


def read_sidecar(run_path: Path, consequence: str = "the page has no timelines") -> tuple[dict[str, dict[str, Any]], str]:
    """The timelines stored beside a run document, and what is wrong with the file ("" if fine or
    absent; ``consequence`` ends that line)."""
    path = Path(run_path).parent / SIDECAR
    if not path.is_file():
        return {}, ""
    try:
        doc = json.loads(gzip.decompress(path.read_bytes()))
    except (OSError, ValueError, EOFError) as exc:
        return {}, f"{path}: not a timelines file ({exc}); {consequence}"
    if not isinstance(doc, Mapping) or doc.get("format") != SIDECAR_FORMAT or not isinstance(doc.get("tests"), Mapping):
        return {}, f"{path}: not a timelines file (no format {SIDECAR_FORMAT!r}); {consequence}"
    return {str(k): dict(v) for k, v in doc["tests"].items() if isinstance(v, Mapping)}, ""


def worst_first(records: Iterable[Mapping[str, Any]], count: Optional[int]) -> list[str]:
    """The tests :class:`TimelineChoice` keeps out of these records (for pages made outside a run)."""
    choice = TimelineChoice(count)
    kept: set[str] = set()
    for record in records:
        test = str(record.get("test"))
        ok, dropped = choice.offer(test, record_scores(record))
        kept.difference_update(dropped)
        if ok:
            kept.add(test)
    return sorted(kept)
