"""Findings: what to fix in one window of GPU work (a test's call, a trace), with the evidence.

A pure rule engine (no torch, no pytest): give it one window's GPU events, the window, the kernel
classifier, and, where the source recorded them, the host's waits for the GPU and hardware
counters; it gives frozen :class:`~pytest_gpuutil.analysis.rules.Finding` records, one per rule
that fired, in the order of :data:`~pytest_gpuutil.analysis.rules.RULES`. The rules, their limits
and the reasons for them are in :mod:`pytest_gpuutil.analysis.rules`; what they read, in
:mod:`pytest_gpuutil.analysis.window_facts`. A rule whose input is missing (no host waits
recorded, no hardware counters) stays silent: it never guesses.
"""
from __future__ import annotations

import math
import re
from typing import Any, Iterable, Mapping, Optional

from pytest_gpuutil.analysis.classify import KernelClassifier
from pytest_gpuutil.analysis.rules import RULE_IDS, RULES, RULES_BY_ID, Finding
from pytest_gpuutil.analysis.window_facts import WindowFacts
from pytest_gpuutil.traces.model import GpuColumns, SyncColumns, Trace, Window

__all__ = ["Finding", "RULE_IDS", "find", "find_in_trace", "parse_rule_ids"]


def find(events: GpuColumns, window: Window, classifier: Optional[KernelClassifier] = None,
         syncs: Optional[SyncColumns] = None, *, hardware: Optional[Mapping[str, Any]] = None,
         ignore: Iterable[str] = (), sync_end_ns: Optional[int] = None) -> tuple[Finding, ...]:
    """The findings of one window.

    ``syncs``: the host's waits (None or empty: ``host-sync`` is not checked); ``hardware``: counter
    figures of the window (``sm_pct``, ``busy_pct``; absent: ``low-sm-activity`` is not checked);
    ``ignore``: rule ids left out; ``sync_end_ns``: waits from then on are not the test's (the
    capture's own closing synchronize).
    """
    if window.duration_ns <= 0:
        return ()
    facts = WindowFacts(events, window, classifier or KernelClassifier(), syncs or None, sync_end_ns)
    figures = {key: float(value) for key, value in (hardware or {}).items() if _finite(value)}
    skipped = set(ignore)
    found = {}
    for rule in RULES:
        if rule.id not in skipped:
            finding = rule.check(facts, rule.limits, figures)
            if finding is not None:
                found[rule.id] = finding
    return tuple(finding for rule_id, finding in found.items() if not _superseded(rule_id, finding, found))


def find_in_trace(trace: Trace, window: Optional[Window] = None, classifier: Optional[KernelClassifier] = None,
                  ignore: Iterable[str] = ()) -> tuple[Finding, ...]:
    """The findings of a whole trace over its window (the profiler's span, else its GPU span), as
    :func:`~pytest_gpuutil.analysis.summary.analyze` chooses it, with the waits the trace recorded."""
    from pytest_gpuutil.analysis.summary import choose_window

    return find(trace.columns, choose_window(trace, window), classifier, trace.syncs, ignore=ignore)


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
