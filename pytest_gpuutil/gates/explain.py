"""Why a test regressed: the differences between two records of it that account for the change.

The change explained is the test's GPU time (``gpu_busy_ms``), plus its idle time (the window less the
GPU time) where that grew by the floor or more and a gate on the window (``busy_pct``, ``wall_ms``,
...) flagged the test (a busy % that fell with the GPU work unchanged: the host waited or launched
more). The differences:

- kernel families (gates/kernel_families.py) new, gone, slower or faster: name, ms and count
  before and after; within GEMM/convolution and copies, a family that lost time beside one of
  another precision or host memory that gained is one *shift* (``gemm bf16/fp16 -> fp32 (no
  TF32)``, ``memcpy pinned/device -> pageable``);
- the host's waits (the ``host-sync`` figures: waits and the GPU's idle time after them) and the
  idle time left (with the launches, ``kernel_count``, before and after);
- findings new in this run (with their place where findings carry one): shown, not counted.

Each difference has its share of the change; ``explained_pct`` is the listed differences' net sum
over the change (at most 100), leaving out the two that name no cause: the idle time not after a
wait, and the kernels summed as "(other kernels)". Nothing here reads files or pytest: records in, an Explanation out.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

from pytest_gpuutil.analysis.classify import KernelClassifier
from pytest_gpuutil.gates.kernel_families import OTHERS, KernelTotal, family_totals, short_name
from pytest_gpuutil.gates.noise_floor import FLOOR_MS
from pytest_gpuutil.records import TestRecord
from pytest_gpuutil.rundoc.metrics import finite_number

#: differences listed in the files (the terminal shows the first three under one heading)
MOST_LISTED = 8
TERMINAL_LINES = 4
#: a difference smaller than this share of the change (or 10 µs) is noise, not listed
MIN_SHARE = 0.02
_MIN_MS = 0.01
_SHIFT_GROUPS = ("gemm", "conv", "memcpy")
_HOST_KINDS = ("host waits", "idle")
#: gates on the test's window: its idle time is part of the change they flag
_WINDOW_METRICS = ("busy_pct", "mm_conv_pct", "attention_pct", "wall_ms")


@dataclass(frozen=True)
class Difference:
    """One thing that changed between the runs, and how many ms of the change it stands for."""

    kind: str  # "new kernel" | "kernel gone" | "slower" | "faster" | "shift" | "host waits" | "idle" | "new finding"
    name: str
    delta_ms: float
    before_ms: float = 0.0
    after_ms: float = 0.0
    count_before: int = 0
    count_after: int = 0
    #: share of the change, percent (0 for a new finding: shown, not counted)
    share_pct: float = 0.0
    place: str = ""
    #: the kernel names behind a family or a shift
    kernels: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        """One line: ``+9.8 ms: new kernel `elementwise_kernel<...MulFunctor...>` x200 (was absent)``."""
        ms = f"{self.delta_ms:+.1f} ms" if abs(self.delta_ms) >= 0.1 else f"{self.delta_ms * 1000:+.0f} µs"
        counts = f"x{self.count_before} -> x{self.count_after}"
        times = f"{self.before_ms:.2f} -> {self.after_ms:.2f} ms"
        if self.kind == "new kernel":
            body = f"new kernel `{self.name}` x{self.count_after} (was absent)"
        elif self.kind == "kernel gone":
            body = f"kernel gone `{self.name}` (was x{self.count_before}, {self.before_ms:.2f} ms)"
        elif self.kind in ("slower", "faster"):
            body = f"{self.kind} kernel `{self.name}` {times}, {counts}"
        elif self.kind == "shift":
            body = f"{self.name} ({times}, {counts})"
        elif self.kind == "host waits":
            body = f"host waits {counts} (GPU idle after them {times})"
        elif self.kind == "idle":
            body = f"more idle GPU time between launches, not after a wait ({times}; launches {counts})"
        else:
            where = f" at {self.place}" if self.place else ""
            return f"new finding {self.name}{where}"
        share = f" [{self.share_pct:.0f}%]" if self.share_pct else ""
        return f"{ms}: {body}{share}"

    def to_dict(self) -> dict[str, Any]:
        data = {k: v for k, v in self.__dict__.items() if v not in ("", ())}
        data["text"] = self.text
        return data


@dataclass(frozen=True)
class Explanation:
    """What changed in one test's GPU work between a baseline record and this run's."""

    test: str
    #: the ms explained: GPU time change plus the idle time's growth (see the module)
    change_ms: float
    gpu_ms: tuple[float, float]
    idle_ms: Optional[tuple[float, float]]
    differences: tuple[Difference, ...]
    explained_pct: float
    metrics: tuple[str, ...] = field(default=())
    #: (label, ms before, ms after) per kernel label (``gemm bf16/fp16``, ``memcpy pageable``), most time first
    by_label: tuple[tuple[str, float, float], ...] = ()

    @property
    def first_line(self) -> str:
        return self.differences[0].text if self.differences else "no difference in the kernels or waits recorded"

    def heading(self) -> str:
        gpu = f"GPU {self.gpu_ms[0]:.2f} -> {self.gpu_ms[1]:.2f} ms"
        idle = f", idle {self.idle_ms[0]:.2f} -> {self.idle_ms[1]:.2f} ms" if self.idle_ms else ""
        return f"why {self.test.rsplit('::', 1)[-1]} ({gpu}{idle}; {self.explained_pct:.0f}% explained):"

    def terminal_lines(self, width: int = 120) -> list[str]:
        """At most TERMINAL_LINES lines: a heading, then the largest differences."""
        lines = [self.heading()]
        for difference in self.differences[: TERMINAL_LINES - 1]:
            text = "  " + difference.text
            lines.append(text if len(text) <= width else text[: max(10, width - 3)] + "...")
        return lines

    def to_dict(self) -> dict[str, Any]:
        return {"test": self.test, "metrics": list(self.metrics), "change_ms": round(self.change_ms, 4),
                "gpu_ms": list(self.gpu_ms), "idle_ms": list(self.idle_ms) if self.idle_ms else None,
                "explained_pct": round(self.explained_pct, 1), "first_line": self.first_line,
                "differences": [d.to_dict() for d in self.differences],
                "by_label": [[label, round(a, 4), round(b, 4)] for label, a, b in self.by_label]}

    @property
    def one_line(self) -> str:
        """The heading and the differences on one line (the JUnit property ``gpu_util.why``)."""
        return " ".join([self.heading(), *(f"{d.text};" for d in self.differences)]).rstrip(";")


def _kernel_differences(before: Mapping[str, KernelTotal], after: Mapping[str, KernelTotal]) -> list[Difference]:
    out = []
    for family in dict.fromkeys([*after, *before]):
        old, new = before.get(family), after.get(family)
        delta = ((new.total_us if new else 0.0) - (old.total_us if old else 0.0)) / 1000
        shown = (new or old).name  # type: ignore[union-attr]
        kind = "new kernel" if old is None else "kernel gone" if new is None else "slower" if delta > 0 else "faster"
        out.append(Difference(kind, short_name(shown), delta, (old.total_us / 1000) if old else 0.0,
                              (new.total_us / 1000) if new else 0.0, old.count if old else 0, new.count if new else 0,
                              kernels=tuple(dict.fromkeys(t.name for t in (old, new) if t)),
                              place=(new or old).label))  # type: ignore[union-attr]
    return out


def _shifts(kernels: list[Difference], threshold: float) -> list[Difference]:
    """Within GEMM, convolution and copies: a label that lost time beside one that gained, as one shift."""
    out = []
    for group in _SHIFT_GROUPS:
        members = [d for d in kernels if d.place.split(" ", 1)[0] == group and d.delta_ms]
        by_label: dict[str, list[Difference]] = {}
        for d in members:
            by_label.setdefault(d.place, []).append(d)
        net = {label: sum(d.delta_ms for d in ds) for label, ds in by_label.items()}
        losers = [label for label, n in net.items() if n < 0]
        gainers = [label for label, n in net.items() if n > 0]
        if not losers or not gainers:
            continue
        lost, gained = min(losers, key=net.__getitem__), max(gainers, key=net.__getitem__)
        if max(-net[lost], net[gained]) < threshold:
            continue
        parts = by_label[lost] + by_label[gained]
        tail = gained.split(" ", 1)[1] if " " in gained else gained
        out.append(Difference(
            "shift", f"{lost} -> {tail}", sum(d.delta_ms for d in parts),
            sum(d.before_ms for d in parts), sum(d.after_ms for d in parts),
            sum(d.count_before for d in parts), sum(d.count_after for d in parts),
            kernels=tuple(k for d in parts for k in d.kernels)))
        for d in parts:
            kernels.remove(d)
    return out


def _waits(record: TestRecord) -> tuple[int, float]:
    """The host's waits and the GPU's idle ms after them (the host-sync rule's figures, reported or not)."""
    for finding in (*(record.findings or ()), *record.below_floor):
        if finding.get("rule") == "host-sync":
            evidence = finding.get("evidence") or {}
            return int(evidence.get("waits") or 0), (float(evidence.get("idle_after_us") or 0.0)
                                                        + float(evidence.get("read_back_idle_us") or 0.0)) / 1000
    return 0, 0.0


def _place(finding: Mapping[str, Any]) -> str:
    places = finding.get("places") or finding.get("place")
    first = places[0] if isinstance(places, (list, tuple)) and places else places
    if isinstance(first, Mapping):
        where = first.get("file") or first.get("path") or ""
        line = first.get("line")
        return f"{where}:{line}" if where and line else str(where or first.get("text") or "")
    return str(first or "")


def _new_findings(old: TestRecord, new: TestRecord) -> list[Difference]:
    if old.findings is None or new.findings is None:
        return []
    before = set(old.finding_rules)
    return [Difference("new finding", str(f.get("rule", "")), 0.0, place=_place(f))
            for f in new.findings if f.get("rule") not in before]


def _window(record: TestRecord) -> Optional[float]:
    wall = finite_number(record.wall_ms)
    return None if wall is None else wall * max(1, len(record.devices))


def explain(old: TestRecord, new: TestRecord, metrics: Sequence[str] = (), floor_ms: float = FLOOR_MS,
            classifier: Optional[KernelClassifier] = None) -> Explanation:
    """The differences between ``old`` and ``new`` that account for the change, largest first."""
    classifier = classifier or KernelClassifier()
    gpu = (finite_number(old.gpu_busy_ms) or 0.0, finite_number(new.gpu_busy_ms) or 0.0)
    windows = (_window(old), _window(new))
    idle = None if None in windows else (max(0.0, windows[0] - gpu[0]), max(0.0, windows[1] - gpu[1]))  # type: ignore[operator]
    gpu_delta = gpu[1] - gpu[0]
    idle_delta = 0.0 if idle is None else idle[1] - idle[0]
    window_gate = not metrics or any(m.split("[", 1)[0] in _WINDOW_METRICS for m in metrics)
    explain_idle = idle is not None and idle_delta >= floor_ms and window_gate
    explain_gpu = abs(gpu_delta) >= floor_ms / 2 or not explain_idle
    change = (gpu_delta if explain_gpu else 0.0) + (idle_delta if explain_idle else 0.0)
    threshold = max(_MIN_MS, MIN_SHARE * abs(change))
    found: list[Difference] = []
    families = (family_totals(old.kernels, classifier), family_totals(new.kernels, classifier))
    if explain_gpu:
        kernels = _kernel_differences(*families)
        found.extend(_shifts(kernels, threshold))
        found.extend(replace_place(d) for d in kernels)
    if explain_idle:
        waits = (_waits(old), _waits(new))
        wait_delta = waits[1][1] - waits[0][1]
        if waits[0][0] or waits[1][0]:
            found.append(Difference("host waits", "", wait_delta, waits[0][1], waits[1][1], waits[0][0], waits[1][0]))
        rest = idle_delta - wait_delta
        found.append(Difference("idle", "", rest, idle[0] - waits[0][1], idle[1] - waits[1][1],  # type: ignore[index]
                                int(old.kernel_count or 0), int(new.kernel_count or 0)))
    sign = 1.0 if change >= 0 else -1.0
    # what changed in the GPU work leads when the GPU time moved by the floor; the host's side then follows
    gpu_first = explain_gpu and abs(gpu_delta) >= floor_ms
    listed = sorted((d for d in found if abs(d.delta_ms) >= threshold),
                    key=lambda d: (gpu_first and d.kind in _HOST_KINDS, -sign * d.delta_ms))[:MOST_LISTED]
    listed = [_with_share(d, change) for d in listed]
    # net (a kernel gone offsets the two that replaced it), of the differences that name a cause: the
    # idle time left after the waits and the kernels summed as "(other kernels)" are shown, not counted
    accounted = sum(d.delta_ms for d in listed if d.kind != "idle" and d.name != OTHERS)
    explained = min(100.0, max(0.0, 100.0 * accounted / change)) if change else 0.0
    fresh = _new_findings(old, new)
    return Explanation(new.test, change, gpu, idle, tuple(listed + fresh)[: MOST_LISTED + len(fresh)], explained,
                       tuple(metrics), _by_label(*families))


def _by_label(before: Mapping[str, KernelTotal], after: Mapping[str, KernelTotal]) -> tuple[tuple[str, float, float], ...]:
    sums: dict[str, list[float]] = {}
    for side, totals in enumerate((before, after)):
        for total in totals.values():
            sums.setdefault(total.label, [0.0, 0.0])[side] += total.total_us / 1000
    return tuple(sorted(((label, a, b) for label, (a, b) in sums.items()), key=lambda r: -max(r[1], r[2])))


def replace_place(difference: Difference) -> Difference:
    """A kernel difference without the label it was grouped by (``place`` is for a finding's place)."""
    from dataclasses import replace

    return replace(difference, place="")


def _with_share(difference: Difference, change: float) -> Difference:
    from dataclasses import replace

    return replace(difference, share_pct=100.0 * difference.delta_ms / change if change else 0.0)


def explain_comparison(baseline: Mapping[str, TestRecord], current: Sequence[TestRecord], comparison: Any,
                       classifier: Optional[KernelClassifier] = None) -> dict[str, Explanation]:
    """An Explanation per flagged test of ``comparison`` (this run's id -> it), against its baseline record
    (``baseline`` keyed by the baseline's ids; ids matched by a leading path are followed)."""
    classifier = classifier or KernelClassifier()
    base_id = {now: then for then, now in getattr(comparison, "moved", ())}
    records = {r.test: r for r in current}
    metrics: dict[str, list[str]] = {}
    for regression in comparison.regressions:
        metrics.setdefault(regression.test, []).append(regression.metric)
    out = {}
    for test, flagged in metrics.items():
        old, new = baseline.get(base_id.get(test, test)), records.get(test)
        if old is not None and new is not None:
            out[test] = explain(old, new, flagged, classifier=classifier)
    return out
