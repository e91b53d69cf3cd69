"""Findings: what to fix in one window of GPU work (a test's call, a trace), with the evidence.

A pure rule engine (no torch, no pytest): give it one window's GPU events, the window, the kernel
classifier, and, where the source recorded them, the host's waits for the GPU and hardware
counters; it gives frozen :class:`~pytest_gpuutil.analysis.finding_records.Finding` records, one per rule
that fired, in the order of :data:`~pytest_gpuutil.analysis.rules.RULES`. The rules, their limits
and the reasons for them are in :mod:`pytest_gpuutil.analysis.rules`; what they read, in
:mod:`pytest_gpuutil.analysis.window_facts`. A rule whose input is missing (no host waits
recorded, no hardware counters) stays silent: it never guesses.

A capture of many windows asks :func:`may_fire` first, with the figures it already has for each
window (:class:`~pytest_gpuutil.analysis.finding_records.Glance`): most tests of a suite are skipped there,
without looking at their events. Rules that read only counter figures (``low-sm-activity``) run
from a record's figures with :func:`counter_findings`.
"""
from __future__ import annotations

import math
import re
from collections.abc import Mapping
from itertools import compress
from operator import attrgetter

from pytest_gpuutil.analysis.classify import KernelClassifier
from pytest_gpuutil.analysis.finding_records import DEFAULT_FLOOR, UNDER_LIMIT, Finding, Floor, Glance, Rule, severity_of
from pytest_gpuutil.analysis.rules import BEFORE_CAUSES, RULE_IDS, RULES, RULES_BY_ID
from pytest_gpuutil.analysis.window_facts import Timeline, WindowFacts
from pytest_gpuutil.frozen import frozen, replace
from pytest_gpuutil.traces.model import GpuColumns, SyncColumns, Trace, Window

TYPE_CHECKING = False  # typing's, without importing typing at run time (gpuutil analyze's start-up)
if TYPE_CHECKING:
    from typing import Any, Iterable, Optional, Sequence

    from pytest_gpuutil.analysis.summary import TraceSummary
    from pytest_gpuutil.analysis.windows import WindowStats
    from pytest_gpuutil.records import TestRecord

__all__ = ["Finding", "Fix", "Glance", "RULE_IDS", "counter_findings", "find", "find_in_trace", "findings_summary",
           "gated_rules", "glance", "may_fire", "parse_rule_ids", "rank_fixes", "ranked_findings",
           "records_findings_summary", "worst_places", "worst_tests"]


def find(events: GpuColumns, window: Window, classifier: Optional[KernelClassifier] = None,
         syncs: Optional[SyncColumns] = None, *, hardware: Optional[Mapping[str, Any]] = None,
         ignore: Iterable[str] = (), sync_end_ns: Optional[int] = None, timeline: Optional[Timeline] = None,
         seen: Optional[Glance] = None, context: Optional[Mapping[str, Any]] = None) -> tuple[Finding, ...]:
    """The findings of one window.

    ``syncs``: the host's waits (None or empty: ``host-sync`` is not checked); ``hardware``: counter
    figures of the window (``sm_pct``, ``busy_pct``; absent: ``low-sm-activity`` is not checked);
    ``ignore``: rule ids left out; ``sync_end_ns``: waits from then on are not the test's (the
    capture's own closing synchronize); ``timeline`` and ``seen``: what an analysis of the same
    window already found (its timeline, its figures for the rules' gates), so that it is not
    computed again. They change nothing but the time it takes. ``context``: what the capture knew of
    the window and the device, for the savings and gpu-idle's naming of its time before the first
    kernel (``first_gpu_work``, ``cuda_came_up``, ``first_library_use``, ``child_startup_ms``; the
    estimates' constants measured on this device, e.g. ``gemm_speedup`` from
    :func:`pytest_gpuutil.machine.peaks.findings_figures`).
    """
    if window.duration_ns <= 0:
        return ()
    facts = WindowFacts(events, window, classifier or KernelClassifier(), syncs or None, sync_end_ns, timeline,
                        seen.event_count if seen is not None else None)
    given = {**(context or {}), **(hardware or {})}
    figures = {key: float(value) for key, value in given.items() if _finite(value)}
    skipped = set(ignore)
    found = {}
    for rule in RULES:
        if rule.id not in skipped and (seen is None or rule.gate is None or rule.gate(seen, rule.limits)):
            finding = rule.check(facts, rule.limits, figures)
            if finding is not None:
                found[rule.id] = finding
    counted = {rule_id: finding for rule_id, finding in found.items() if not finding.evidence.get(UNDER_LIMIT)}
    kept = {rule_id: finding for rule_id, finding in found.items() if not _superseded(rule_id, finding, counted)}
    if "gpu-idle" in kept and ("launch-bound" in counted or "host-sync" in counted):
        kept["gpu-idle"] = without_between(kept["gpu-idle"], window.duration_ns)
    return tuple(kept.values())


def glance(stats: "WindowStats | TraceSummary", waits: Optional[int] = None) -> Glance:
    """What the gates read, from a window's statistics (or a trace's summary) and the number of host waits in it."""
    return Glance(stats.window.duration_ns, stats.busy_pct, stats.event_count, stats.kernel_count,
                  stats.category_times_us(), waits)


def gated_rules(ignore: Iterable[str] = ()) -> tuple[Rule, ...]:
    """The rules with a gate, less ``ignore``: what :func:`may_fire` asks (a capture's flush asks
    once for all its windows)."""
    skipped = set(ignore)
    return tuple(rule for rule in RULES if rule.gate is not None and rule.id not in skipped)


def may_fire(figures: Glance, ignore: Iterable[str] = (), rules: Optional[Sequence[Rule]] = None) -> bool:
    """False only when no rule that reads events can fire on the window: its events need no look.
    ``rules``: :func:`gated_rules` of the same ``ignore``, when known."""
    return figures.window_ns > 0 and any(
        rule.gate(figures, rule.limits) for rule in (gated_rules(ignore) if rules is None else rules))


def counter_findings(busy_pct: Optional[float], sm_pct: Optional[float], ignore: Iterable[str] = (),
                     window_ms: Optional[float] = None) -> tuple[Finding, ...]:
    """The findings of the rules that read hardware counters (``low-sm-activity``), from a test's
    record figures (``window_ms``: its wall time, what the saving is a share of); none when a
    figure is missing."""
    if not (_finite(busy_pct) and _finite(sm_pct)):
        return ()
    empty = WindowFacts(GpuColumns(), Window(0, 1, "counters"), KernelClassifier())
    figures = {"busy_pct": float(busy_pct), "sm_pct": float(sm_pct), "events": 1.0,  # type: ignore[arg-type]
               "window_ms": float(window_ms) if _finite(window_ms) else 0.0}
    skipped = set(ignore)
    found = (rule.check(empty, rule.limits, figures) for rule in RULES if rule.gate is None and rule.id not in skipped)
    return tuple(f for f in found if f is not None)


def find_in_trace(trace: Trace, window: Optional[Window] = None, classifier: Optional[KernelClassifier] = None,
                  ignore: Iterable[str] = (), sync_end_ns: Optional[int] = None,
                  summary: Optional["TraceSummary"] = None) -> tuple[Finding, ...]:
    """The findings of a whole trace over its window (the profiler's span, else its GPU span), as
    :func:`~pytest_gpuutil.analysis.summary.analyze` chooses it, with the waits the trace recorded.
    ``summary``: ``analyze``'s result for the same trace and window (its work is then reused)."""
    from pytest_gpuutil.analysis.summary import choose_window

    win = summary.window if summary is not None else choose_window(trace, window)
    seen = None
    if summary is not None:
        seen = glance(summary, _waits_in(trace.syncs, win, sync_end_ns))
    return find(trace.columns, win, classifier, trace.syncs, ignore=ignore, sync_end_ns=sync_end_ns,
                timeline=summary.timeline if summary is not None else None, seen=seen)


def _waits_in(syncs: SyncColumns, window: Window, sync_end_ns: Optional[int]) -> int:
    """How many waits overlap the window (before ``sync_end_ns``): an upper bound of what host-sync counts."""
    limit = window.end_ns if sync_end_ns is None else min(window.end_ns, sync_end_ns)
    return sum(1 for _, start, dur in syncs.rows() if start < limit and start + dur > window.start_ns)


def parse_rule_ids(text: str, source: str) -> frozenset[str]:
    """Rule ids separated by commas or spaces; ValueError naming ``source`` and the known ids for any other."""
    ids = [word for word in re.split(r"[\s,]+", text.strip()) if word]
    unknown = [word for word in ids if word not in RULES_BY_ID]
    if unknown:
        raise ValueError(f"{source}: unknown findings rule {', '.join(unknown)} (rules: {', '.join(RULE_IDS)})")
    return frozenset(ids)


def _superseded(rule_id: str, finding: Finding, found: Mapping[str, Finding]) -> bool:
    rule = RULES_BY_ID[rule_id]
    return any(other in found for other in rule.superseded_by) and rule.superseded_when(finding)


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def without_between(finding: Finding, window_ns: int) -> Finding:
    """gpu-idle's finding with the idle time between kernels left out of its saving (another rule of
    the same window, launch-bound or host-sync, names that time and counts it)."""
    between_ms = float(finding.evidence.get("idle_between_us", 0.0)) / 1000
    if not between_ms:
        return finding
    saving_ms = max(0.0, finding.saving_ms - between_ms)
    saving_pct = 100.0 * saving_ms * 1e6 / window_ns if window_ns > 0 else 0.0
    return replace(finding, saving_ms=round(saving_ms, 3), saving_pct=round(saving_pct, 2),
                   severity=severity_of(saving_ms, saving_pct),
                   saving_basis=f"{finding.saving_basis}; less the {between_ms:.1f} ms between kernels that "
                                f"launch-bound or host-sync counts: {saving_ms:.1f} ms")


# -- the run's ranking ---------------------------------------------------------------------------

#: the worst tests gpu_util.json's findings_summary lists
WORST_TESTS_KEPT = 10


@frozen
class Fix:
    """One entry of the session's ranking: a rule's fix in one file, over its tests."""

    rule: str
    #: the test file (the node id's path), where the fix is made
    scope: str
    tests: int
    saving_ms: float
    #: ``path:line`` of the first place of the group's largest finding that has places ("" when none has)
    first_place: str = ""

    @property
    def action(self) -> str:
        rule = RULES_BY_ID.get(self.rule)
        return rule.action if rule is not None and rule.action else f"fix {self.rule}"

    def to_dict(self) -> dict[str, Any]:
        found = {"rule": self.rule, "scope": self.scope, "tests": self.tests, "saving_ms": round(self.saving_ms, 3),
                 "action": self.action}
        if self.first_place:
            found["first_place"] = self.first_place
        return found


def scope_of(test: str) -> str:
    """The file a test id is in (``tests/test_models.py::test_x[a]`` -> ``tests/test_models.py``)."""
    return test.split("::", 1)[0]


def rank_fixes(pairs: Iterable[tuple[str, Optional[Sequence[Any]]]]) -> list[Fix]:
    """The reported findings of (test, findings) pairs grouped by rule and file, largest summed
    ``saving_ms`` first (then rule order, then file)."""
    sums: dict[tuple[str, str], list[float]] = {}
    placed: dict[tuple[str, str], tuple[float, str]] = {}  # the largest finding with places: (saving, place)
    for test, found in pairs:
        for item in found if isinstance(found, (list, tuple)) else ():
            if isinstance(item, Mapping):
                finding = Finding.from_dict(item)
                key = (finding.rule, scope_of(test))
                entry = sums.setdefault(key, [0, 0.0])
                entry[0] += 1
                entry[1] += finding.saving_ms
                if finding.places and finding.saving_ms >= placed.get(key, (-1.0, ""))[0]:
                    placed[key] = (finding.saving_ms, finding.first_place)
    order = {rule: i for i, rule in enumerate(RULES_BY_ID)}
    fixes = [Fix(rule, scope, int(n), total, placed.get((rule, scope), (0.0, ""))[1])
             for (rule, scope), (n, total) in sums.items()]
    return sorted(fixes, key=lambda f: (-f.saving_ms, order.get(f.rule, len(order)), f.scope))


def worst_places(pairs: Iterable[tuple[str, Optional[Sequence[Any]]]]) -> dict[str, str]:
    """Per test: ``path:line`` of the first place of its largest finding ("" where it has none)."""
    found = {}
    for test, items in pairs:
        findings = [Finding.from_dict(i) for i in items or () if isinstance(i, Mapping)]
        if findings:
            found[test] = max(findings, key=lambda f: f.saving_ms).first_place
    return found


def worst_tests(pairs: Iterable[tuple[str, Optional[Sequence[Any]]]]) -> list[tuple[str, float, str]]:
    """(test, its findings' summed saving in ms, the rule with the largest), largest first."""
    found = []
    for test, items in pairs:
        findings = [Finding.from_dict(i) for i in items or () if isinstance(i, Mapping)]
        if findings:
            top = max(findings, key=lambda f: f.saving_ms)
            found.append((test, sum(f.saving_ms for f in findings), top.rule))
    return sorted(found, key=lambda t: (-t[1], t[0]))


def findings_summary(tests: Iterable[Mapping[str, Any]], floor: Optional[Floor] = None) -> Optional[dict[str, Any]]:
    """gpu_util.json's ``findings_summary`` from its tests (records' dicts): the counts, the floor,
    the ranking (``top``: every rule-and-file group, largest saving first) and the worst tests;
    None when findings were looked for in no test."""
    checked = [t for t in tests if isinstance(t.get("findings"), (list, tuple))]
    if not checked:
        return None
    pairs = [(str(t.get("test", "")), found) for t in checked if (found := t.get("findings"))]
    return ranked_findings(len(checked), pairs, [f for t in checked for f in t.get("below_floor") or ()], floor)


def records_findings_summary(records: Sequence[TestRecord], floor: Optional[Floor] = None) -> Optional[dict[str, Any]]:
    """:func:`findings_summary` of records (as of their ``findings_part``), their findings read a column
    at a time: the tests without findings, most of a suite, cost a look each."""
    found = list(map(attrgetter("findings"), records))
    if not set(map(type, found)) <= _SEQUENCES:  # not looked for in some tests (None)
        records = [r for r, f in zip(records, found) if isinstance(f, (list, tuple))]
        found = list(map(attrgetter("findings"), records))
    if not records:
        return None
    pairs = [(str(r.test), r.findings) for r in compress(records, found)]
    below = [f for r in compress(records, map(attrgetter("below_floor"), records)) for f in r.below_floor]
    return ranked_findings(len(records), pairs, below, floor)


_SEQUENCES = frozenset({tuple, list})


def ranked_findings(checked: int, pairs: Sequence[tuple[str, Sequence[Any]]], below_floor: Iterable[Any],
                    floor: Optional[Floor] = None) -> dict[str, Any]:
    """:func:`findings_summary` of ``checked`` tests looked at, from the (test, findings) of those with
    findings and the findings under the floor of them all."""
    floor = floor or DEFAULT_FLOOR
    fixes = rank_fixes(pairs)
    below = [Finding.from_dict(f) for f in below_floor if isinstance(f, Mapping)]
    places = worst_places(pairs)
    return {
        "floor": {"ms": floor.ms, "pct": floor.pct},
        "tests": checked,
        "tests_with_findings": len(pairs),
        "findings": sum(len(found) for _, found in pairs),
        "below_floor": len(below),
        "below_floor_saving_ms": round(sum(f.saving_ms for f in below), 3),
        "saving_ms": round(sum(f.saving_ms for f in fixes), 3),
        "top": [f.to_dict() for f in fixes],
        "worst_tests": [{"test": test, "saving_ms": round(ms, 3), "rule": rule,
                         **({"first_place": places[test]} if places.get(test) else {})}
                        for test, ms, rule in worst_tests(pairs)[:WORST_TESTS_KEPT]],
    }


def with_child_start(finding: Finding, program: str, startup_ns: float) -> Finding:
    """gpu-idle on a test whose first GPU work was a child's that the test started (the capture's
    ``child_startup_ms`` made its cause "a child process starting"): name the child and its start-up,
    "(of which the child `python3 -c` took 3.6 s to start its GPU work)". Others come back unchanged."""
    before_ns = float(finding.evidence.get("idle_before_us", 0.0)) * 1000
    part = min(float(startup_ns), before_ns)
    if finding.rule != "gpu-idle" or part <= 0:
        return finding
    took = f"{part / 1e9:.1f} s" if part >= 1e9 else f"{part / 1e6:,.0f} ms"
    named = f"(of which the child `{program}` took {took} to start its GPU work)"
    generic = f"({BEFORE_CAUSES['child-process'][0]})"
    message = finding.message.replace(generic, named) if generic in finding.message else f"{finding.message} {named}"
    return replace(finding, message=message, evidence={**finding.evidence, "child_program": program,
                                                                   "child_startup_us": round(part / 1000, 3)})
