"""What a finding is, and what a rule is declared with: the records the rules and the engine share.

A :class:`Finding` is what is wrong in one window, what its fix would save and the evidence.
Severity comes from what is at stake: the saving and its share of the window (the test's wall
time): ``high`` from 10 ms and 25 %, ``medium`` from 3 ms and 10 %, else ``low``
(:data:`SEVERITY_FROM`). A finding below the floor (:data:`DEFAULT_FLOOR`: a saving under 1 ms or
under 2 % of the window; ``--gpu-util-findings-floor``) is not reported, but kept with its figures
(:func:`split_by_floor`). A rule (:class:`Rule`) is declared with its limits (:class:`Limit`:
value, unit, why that value), a check, and a gate that reads a window's :class:`Glance`.
The rules themselves are in :mod:`pytest_gpuutil.analysis.rules`.
"""
from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from pytest_gpuutil.frozen import field, frozen, tuple_record

TYPE_CHECKING = False  # typing's, without importing typing at run time (gpuutil analyze's start-up)
if TYPE_CHECKING:
    from typing import Any, Callable, Optional, Sequence

    from pytest_gpuutil.analysis.window_facts import WindowFacts

HIGH, MEDIUM, LOW = "high", "medium", "low"
SEVERITIES = (HIGH, MEDIUM, LOW)
#: (severity, least saving in ms, least saving as % of the window): the first that both reach
SEVERITY_FROM = ((HIGH, 10.0, 25.0), (MEDIUM, 3.0, 10.0))


@tuple_record
class Floor:
    """The least saving a finding is reported with: both ``ms`` and ``pct`` (of the test's wall time)."""

    ms: float = 1.0
    pct: float = 2.0

    @property
    def text(self) -> str:
        return f"{self.ms:g} ms and {self.pct:g} % of the test's time"

    def keeps(self, finding: "Finding") -> bool:
        if finding.evidence.get(UNDER_LIMIT):  # under one of its rule's own limits: listed, never reported
            return False
        return finding.saving_ms >= self.ms and finding.saving_pct >= self.pct


#: the evidence key of a finding its rule keeps under one of its limits (the limit's name): such a
#: finding is listed under the floor with its places, never reported, and supersedes nothing
UNDER_LIMIT = "under_limit"


#: a saving under 1 ms is too small to act on in one test, and under 2 % of a test's time it is
#: within the run-to-run noise of its wall time
DEFAULT_FLOOR = Floor()


@frozen
class Finding:
    """What is wrong in one window, how much it costs, the evidence and the fix."""

    rule: str
    severity: str
    #: one line with the numbers
    message: str
    #: one line: what to change
    fix: str
    #: the events, kernels and times behind it (JSON-able; times in µs, from the window's start)
    evidence: Mapping[str, Any] = field(default_factory=dict)
    #: the share of the window the problem takes, percent
    impact_pct: float = 0.0
    #: the time the fix would save, ms (estimated from the evidence; what severity and ranking go by)
    saving_ms: float = 0.0
    #: the saving's share of the window (the test's wall time), percent
    saving_pct: float = 0.0
    #: how ``saving_ms`` was estimated, one line with its figures
    saving_basis: str = ""
    #: where in the source: up to 3 places (file, line, function, text, what, count, ms), largest
    #: first (:mod:`pytest_gpuutil.analysis.places`); empty where the host recorded none
    places: tuple[Mapping[str, Any], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        found = {"rule": self.rule, "severity": self.severity, "message": self.message, "fix": self.fix,
                 "impact_pct": round(self.impact_pct, 2), "saving_ms": round(self.saving_ms, 3),
                 "saving_pct": round(self.saving_pct, 2), "saving_basis": self.saving_basis,
                 "evidence": dict(self.evidence)}
        if self.places:
            found["places"] = [dict(p) for p in self.places]
        return found

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Finding":
        """A finding read back from gpu_util.json (missing fields take their defaults)."""
        evidence = data.get("evidence")
        places = data.get("places")
        return cls(str(data.get("rule", "")), str(data.get("severity", LOW)), str(data.get("message", "")),
                   str(data.get("fix", "")), dict(evidence) if isinstance(evidence, Mapping) else {},
                   _number(data.get("impact_pct")), _number(data.get("saving_ms")), _number(data.get("saving_pct")),
                   str(data.get("saving_basis", "")),
                   tuple(dict(p) for p in places if isinstance(p, Mapping)) if isinstance(places, (list, tuple)) else ())

    @property
    def first_place(self) -> str:
        """``path:line`` of the first place, or ""."""
        return f"{self.places[0].get('file', '')}:{self.places[0].get('line', '')}" if self.places else ""


def _number(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def split_by_floor(findings: Sequence[Finding], floor: Floor = DEFAULT_FLOOR) -> tuple[tuple[Finding, ...], tuple[Finding, ...]]:
    """(reported, below the floor) of one test's findings, each in the order given."""
    return tuple(f for f in findings if floor.keeps(f)), tuple(f for f in findings if not floor.keeps(f))


@tuple_record
class Limit:  # named tuples here, not dataclasses: cheaper to define (the CLI's start-up)
    value: float
    unit: str  # "%", "µs", "ms", "" (a count); estimates also "GB/s" and "x" (a speed-up)
    reason: str

    @property
    def text(self) -> str:
        number = f"{self.value:g}"
        if self.unit == "x":
            return f"{number}x"
        return f"{number} %" if self.unit == "%" else f"{number} {self.unit}".strip()


if TYPE_CHECKING:  # for annotations only: at run time, typing would compile "WindowFacts" (the CLI's start-up)
    #: a rule's check: the window's facts, its limits, the device's figures -> a finding or None
    Check = Callable[["WindowFacts", Mapping[str, Limit], Mapping[str, float]], Optional[Finding]]


@tuple_record
class Glance:
    """A window's figures that are known before its events are looked at (a capture's per-window
    statistics): what each rule's gate reads to skip a window it cannot fire on."""

    window_ns: int
    busy_pct: float
    event_count: int
    kernel_count: int
    #: time per kernel category, µs (union per device, as the statistics give it)
    category_us: Mapping[str, float]
    #: the host's waits that overlap the window (None: none were recorded)
    waits: Optional[int] = None


if TYPE_CHECKING:
    #: ``gate(glance, limits) -> False`` only when the rule cannot fire on the window (a necessary
    #: condition: cheap, and never wrong the other way; the tests check it on every window they build).
    #: Gates are written with ``&`` and comparisons only, so that a Glance of numpy columns (one value
    #: per window) gets every window's answer at once (capture/window_split.py ``looked_at``)
    Gate = Callable[[Glance, Mapping[str, Limit]], bool]


@tuple_record
class Rule:
    id: str
    #: what it means, one line (the README's and the report's legend)
    title: str
    fix: str
    limits: Mapping[str, Limit]
    check: Check
    #: not reported when one of these rules was (they name the same cause more precisely) ...
    superseded_by: tuple[str, ...] = ()
    #: ... and this holds for the finding (default: always)
    superseded_when: Callable[[Finding], bool] = lambda finding: True
    #: False when the rule cannot fire on a window (see Glance); None: reads no events (counters)
    gate: Optional[Gate] = None
    #: how ``saving_ms`` is estimated, one line (the findings page and the report say it)
    saving: str = ""
    #: the constants the estimate uses, with where each comes from
    estimates: Mapping[str, Limit] = MappingProxyType({})
    #: the fix as the session's ranking words it: "<action> in <file>: N tests, about T"
    action: str = ""


def severity_of(saving_ms: float, saving_pct: float) -> str:
    """The severity of a saving of ``saving_ms``, ``saving_pct`` % of the test's wall time."""
    return next((name for name, ms, pct in SEVERITY_FROM if saving_ms >= ms and saving_pct >= pct), LOW)
