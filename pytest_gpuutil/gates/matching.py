"""Which test of this run is which test of the baseline: node ids, and ids moved under a new rootdir.

pytest writes node ids relative to its rootdir, and the rootdir is chosen before plugins are loaded:
a path option written as two words (``--gpu-util-dir PATH``) makes pytest take PATH for a test
path then, the rootdir moves up to the common folder, and every id gains a leading path
(``test_why.py::t`` becomes ``work/proj/test_why.py::t``). Ids are matched exactly first; an id
left over on both sides is matched when one ends with the other after a ``/`` (the same path
suffix), and that pairing is unambiguous: the one baseline id so matched, matched by no other test
of this run. Pairs matched this way are reported (``Matching.moved``), never silent.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence


@dataclass(frozen=True)
class Matching:
    """This run's tests paired with the baseline's."""

    #: (baseline id, this run's id) for every test compared, in this run's order
    pairs: tuple[tuple[str, str], ...]
    #: the pairs whose ids differ by a leading path (a moved rootdir)
    moved: tuple[tuple[str, str], ...]
    #: this run's ids with no baseline test
    new_tests: tuple[str, ...]
    #: the baseline's ids that no test of this run matched
    missing_tests: tuple[str, ...]
    #: baseline ids left out because several tests of this run (or several baseline ids) share their suffix
    ambiguous: tuple[str, ...] = ()


def _suffix_of(longer: str, shorter: str) -> bool:
    """True when ``longer`` is ``shorter`` under a leading path (``a/b/t.py::x`` ends with ``/t.py::x``)."""
    return len(longer) > len(shorter) and longer.endswith("/" + shorter)


def _related(a: str, b: str) -> bool:
    return _suffix_of(a, b) or _suffix_of(b, a)


def match_tests(baseline_ids: Iterable[str], current_ids: Sequence[str]) -> Matching:
    """Pair ``current_ids`` with ``baseline_ids``: equal ids, then ids that differ by a leading path."""
    base = list(dict.fromkeys(baseline_ids))
    base_set = set(base)
    exact = {test: test for test in current_ids if test in base_set}
    left_base = [b for b in base if b not in exact]
    left_now = [c for c in current_ids if c not in exact]
    moved: dict[str, str] = {}
    ambiguous: list[str] = []
    if left_base and left_now:
        by_tail: dict[str, list[str]] = {}
        for b in left_base:  # index by the part after the last '/': a cheap first cut
            by_tail.setdefault(b.rsplit("/", 1)[-1], []).append(b)
        candidates: dict[str, list[str]] = {}
        for c in left_now:
            tail = c.rsplit("/", 1)[-1]
            candidates[c] = [b for b in by_tail.get(tail, ()) if _related(b, c)]
        claimed: dict[str, int] = {}
        for found in candidates.values():
            for b in found:
                claimed[b] = claimed.get(b, 0) + 1
        for c, found in candidates.items():
            if len(found) == 1 and claimed[found[0]] == 1:
                moved[c] = found[0]
            elif found:
                ambiguous.extend(b for b in found if b not in ambiguous)
    pairs = []
    new_tests = []
    for c in current_ids:
        if c in exact:
            pairs.append((c, c))
        elif c in moved:
            pairs.append((moved[c], c))
        else:
            new_tests.append(c)
    matched = {b for b, _ in pairs}
    return Matching(
        pairs=tuple(pairs),
        moved=tuple((moved[c], c) for c in current_ids if c in moved),
        new_tests=tuple(new_tests),
        missing_tests=tuple(b for b in base if b not in matched),
        ambiguous=tuple(b for b in ambiguous if b not in matched),
    )


def common_shift(moved: Sequence[tuple[str, str]]) -> str:
    """How the ids moved, in words: ``'work/proj/' added`` when every pair differs by the same prefix."""
    shifts = set()
    for base, now in moved:
        if now.endswith(base):
            shifts.add(("added", now[: len(now) - len(base)]))
        else:
            shifts.add(("dropped", base[: len(base) - len(now)]))
    if len(shifts) == 1:
        how, prefix = shifts.pop()
        return f"{prefix!r} {how} at the front"
    return "leading paths differ"
