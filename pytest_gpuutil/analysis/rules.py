"""The findings rules: each one's limits (with the reason for each), what it checks and the fix.

Rules are data: :data:`RULES` lists them in the order they are reported; each has its limits in
one table (``Limit``: value, unit, why that value) and a check that reads
:class:`~pytest_gpuutil.analysis.window_facts.WindowFacts` and returns a :class:`Finding` or None.
The README's "Findings" section states every limit; a test holds the two together.

Severity comes from ``impact_pct``, the share of the window (× devices that worked, as busy %)
that the problem takes: ``high`` from 50 %, ``medium`` from 20 %, else ``low``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Mapping, NamedTuple, Optional, Sequence

from pytest_gpuutil.analysis.classify import CONV, GEMM
from pytest_gpuutil.analysis.classify import MEMCPY as MEMCPY_CATEGORY
from pytest_gpuutil.analysis.window_facts import MEMCPY, WindowFacts

HIGH, MEDIUM, LOW = "high", "medium", "low"
SEVERITIES = (HIGH, MEDIUM, LOW)
#: impact (percent of the window) from which a finding is high or medium
SEVERITY_FROM = ((HIGH, 50.0), (MEDIUM, 20.0))


@dataclass(frozen=True)
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
    #: the share of the window the problem takes, percent (what severity and "worst tests" go by)
    impact_pct: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "severity": self.severity, "message": self.message, "fix": self.fix,
                "impact_pct": round(self.impact_pct, 2), "evidence": dict(self.evidence)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Finding":
        """A finding read back from gpu_util.json (missing fields take their defaults)."""
        impact = data.get("impact_pct", 0.0)
        evidence = data.get("evidence")
        return cls(str(data.get("rule", "")), str(data.get("severity", LOW)), str(data.get("message", "")),
                   str(data.get("fix", "")), dict(evidence) if isinstance(evidence, Mapping) else {},
                   float(impact) if isinstance(impact, (int, float)) and not isinstance(impact, bool) else 0.0)


class Limit(NamedTuple):  # NamedTuples here, not dataclasses: cheaper to define (the CLI's start-up)
    value: float
    unit: str  # "%", "µs", "ms" or "" (a count)
    reason: str

    @property
    def text(self) -> str:
        number = f"{self.value:g}"
        return f"{number} %" if self.unit == "%" else f"{number} {self.unit}".strip()


Check = Callable[[WindowFacts, Mapping[str, Limit], Mapping[str, float]], Optional[Finding]]


class Glance(NamedTuple):
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


#: ``gate(glance, limits) -> False`` only when the rule cannot fire on the window (a necessary
#: condition: cheap, and never wrong the other way; the tests check it on every window they build)
Gate = Callable[[Glance, Mapping[str, Limit]], bool]


class Rule(NamedTuple):
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


def severity_of(impact_pct: float) -> str:
    return next((name for name, least in SEVERITY_FROM if impact_pct >= least), LOW)


def _finding(rule_id: str, message: str, fix: str, impact: float, **evidence: Any) -> Finding:
    return Finding(rule_id, severity_of(impact), message, fix, evidence, round(impact, 2))


def _us(ns: float) -> float:
    return round(ns / 1000, 3)


def _ms_text(ns: float) -> str:
    """A duration for a message: 850 ms, 4.1 ms, 310 µs."""
    if ns >= 100e6:
        return f"{ns / 1e6:,.0f} ms"
    if ns >= 1e6:
        return f"{ns / 1e6:.1f} ms"
    return f"{ns / 1e3:.0f} µs" if ns >= 10e3 else f"{ns / 1e3:.1f} µs"


#: a median shown of more values than this is read from this many, evenly spaced (the decisions
#: count all of them: :func:`_median_at_most` is exact)
MEDIAN_SAMPLE = 5_000


def _median(values: Sequence[int]) -> float:
    """The lower median (the ⌈n/2⌉-th smallest); of an evenly spaced sample of a long sequence."""
    step = max(1, len(values) // MEDIAN_SAMPLE)
    ordered = sorted(values[::step].tolist() if hasattr(values, "tolist") else values[::step])
    return float(ordered[(len(ordered) - 1) // 2])


def _at_most(values: Sequence[int], limit: float) -> int:
    """How many values are at most ``limit`` (a list: in C through map; an array: numpy)."""
    return int((values <= limit).sum()) if hasattr(values, "dtype") else sum(map(limit.__ge__, values))


def _median_at_most(values: Sequence[int], limit: float) -> bool:
    """Whether the lower median of ``values`` is at most ``limit``: exactly, by counting (no sort)."""
    return _at_most(values, limit) >= (len(values) + 1) // 2


def _median_below(values: Sequence[int], limit: float) -> bool:
    """Whether the lower median of ``values`` is under ``limit``, exactly."""
    below = int((values < limit).sum()) if hasattr(values, "dtype") else sum(map(limit.__gt__, values))
    return below >= (len(values) + 1) // 2


def _pct(part: float, whole: float) -> float:
    return 100.0 * part / whole if whole > 0 else 0.0


def _short(name: str, width: int = 90) -> str:
    return name if len(name) <= width else name[: width - 3] + "..."


def _large_share(facts: WindowFacts, wanted: Sequence[bool], limits: Mapping[str, Limit],
                 min_length: int = 0) -> Optional[tuple[int, int, float]]:
    """(time, count, % of busy time) of the ``wanted`` events, when the time reaches the rule's
    ``min_total_us`` and the share its ``min_share_of_busy``; else None."""
    total, count = facts.union_ns(wanted, min_length=min_length)
    share = _pct(total, facts.timeline.busy_ns)
    if total < limits["min_total_us"].value * 1000 or share < limits["min_share_of_busy"].value:
        return None
    return total, count, share


# -- pageable-memcpy ----------------------------------------------------------------------------

PAGEABLE = "Pageable"


def _pageable(facts: WindowFacts, limits: Mapping[str, Limit], hw: Mapping[str, float]) -> Optional[Finding]:
    _, names, kinds = facts.keys
    wanted = [kind == MEMCPY and PAGEABLE in name for name, kind in zip(names, kinds)]
    if not any(wanted):
        return None
    least = limits["min_copy_us"].value * 1000
    found = _large_share(facts, wanted, limits, min_length=int(least))
    if found is None:
        return None
    total, copies, share = found
    by_name = {row.name: row.count for row in facts.totals(wanted)}
    return _finding(
        "pageable-memcpy",
        f"{copies} copies from or to pageable host memory took {_ms_text(total)}, {share:.0f}% of GPU busy time",
        "pin the host memory (tensor.pin_memory(), DataLoader(pin_memory=True)) and copy with non_blocking=True, "
        "or create the tensors on the GPU (device='cuda')",
        facts.pct_of_window(total), copies=copies, total_us=_us(total), share_of_busy_pct=round(share, 1),
        longest_us=_us(int(max(facts.lengths_of(wanted)))), by_name=by_name)


# -- host-sync ----------------------------------------------------------------------------------

def _host_sync(facts: WindowFacts, limits: Mapping[str, Limit], hw: Mapping[str, float]) -> Optional[Finding]:
    if len(facts.sync_rows) < limits["min_waits"].value or not facts.event_count:
        return None
    waits = facts.waits
    share = _pct(waits.idle_after_ns, facts.window_ns)
    if waits.count < limits["min_waits"].value or share < limits["min_idle_after_pct"].value:
        return None
    names = ", ".join(f"{name} {count}" for name, count in waits.by_name)
    return _finding(
        "host-sync",
        f"the host waited for the GPU {waits.count} times ({names}); the GPU then sat idle "
        f"{_ms_text(waits.idle_after_ns)}, {share:.0f}% of the window",
        "keep results on the GPU inside loops: drop .item(), .cpu(), .tolist(), print() of GPU tensors and "
        "torch.cuda.synchronize() from the loop, read values once at the end",
        share, waits=waits.count, by_name=dict(waits.by_name), wait_us=_us(waits.wait_ns),
        idle_after_us=_us(waits.idle_after_ns),
        worst=[{"start_us": _us(s), "dur_us": _us(e - s), "idle_after_us": _us(i)} for s, e, i in waits.worst])


# -- launch-bound -------------------------------------------------------------------------------

def _launch_bound(facts: WindowFacts, limits: Mapping[str, Limit], hw: Mapping[str, float]) -> Optional[Finding]:
    lengths = facts.kernel_lengths
    count = len(lengths)
    if count < limits["min_kernels"].value:
        return None
    if not _median_at_most(lengths, limits["max_median_kernel_us"].value * 1000):
        return None
    timeline = facts.timeline
    busy_pct = facts.busy_pct
    gaps = timeline.gaps_ns
    if (busy_pct >= limits["max_busy_pct"].value or not len(gaps)
            or not _median_at_most(gaps, limits["max_median_gap_us"].value * 1000)
            or _median_below(gaps, limits["min_median_gap_us"].value * 1000)):
        return None
    median_kernel, median_gap = _median(lengths), _median(gaps)
    impact = facts.pct_of_window(timeline.idle_between_ns)
    top = facts.counts(facts.is_kernel)[:3]
    return _finding(
        "launch-bound",
        f"{count:,} kernels, median {median_kernel / 1000:.1f} µs, median gap {median_gap / 1000:.1f} µs: "
        f"the GPU was busy {busy_pct:.0f}% of the window",
        "launch fewer, larger kernels: capture the loop in a CUDA graph (torch.cuda.graphs, "
        "torch.compile(mode='reduce-overhead')), fuse small ops (torch.compile) or batch the work",
        impact, kernels=count, median_kernel_us=_us(median_kernel), median_gap_us=_us(median_gap),
        busy_pct=round(busy_pct, 1), idle_between_us=_us(timeline.idle_between_ns),
        most_launched=[{"name": _short(name), "count": count} for name, count in top])


# -- fp32-matmul --------------------------------------------------------------------------------

#: fp32 GEMM kernels that do not use TF32: SIMT sgemm (cuBLAS, CUTLASS), xmma/cuDNN kernels with fp32
#: inputs and FFMA math (``f32f32_f32f32``, ``_ffma_``); any name with ``tf32`` is TF32, and GEMV
#: (matrix-vector) kernels are memory-bound, where TF32 does not help
FP32_GEMM = re.compile(r"(?i)sgemm|f32f32_f32f32|_ffma_")
NOT_FP32_GEMM = re.compile(r"(?i)tf32|gemv")


def is_fp32_gemm(name: str, category: str) -> bool:
    """True for a GEMM or convolution kernel that runs in fp32 without TF32."""
    return category in (GEMM, CONV) and FP32_GEMM.search(name) is not None and NOT_FP32_GEMM.search(name) is None


def _fp32_matmul(facts: WindowFacts, limits: Mapping[str, Limit], hw: Mapping[str, float]) -> Optional[Finding]:
    _, names, kinds = facts.keys
    wanted = [kind == "kernel" and is_fp32_gemm(name, cat) for name, kind, cat in zip(names, kinds, facts.categories)]
    if not any(wanted):
        return None
    found = _large_share(facts, wanted, limits)
    if found is None:
        return None
    total, count, share = found
    rows = facts.totals(wanted)
    return _finding(
        "fp32-matmul",
        f"{count} fp32 matmul/conv kernels without TF32 took {_ms_text(total)}, {share:.0f}% of GPU busy time "
        f"({_short(rows[0].name, 60)})",
        "allow TF32 (torch.set_float32_matmul_precision('high'); torch.backends.cudnn.allow_tf32 = True for "
        "convolutions) or run them in bf16 (torch.autocast) where the test's tolerance allows",
        facts.pct_of_window(total), kernels=count, total_us=_us(total), share_of_busy_pct=round(share, 1),
        top_kernels=[{"name": _short(r.name), "count": r.count, "total_us": _us(r.total_ns)} for r in rows[:3]])


# -- gpu-idle -----------------------------------------------------------------------------------

_IDLE_FIXES = {
    "before": "the GPU waited for the test's set-up: build models and data in a fixture (scope='module' or "
              "'session'), or warm up outside the measured code",
    "between": "the host kept the GPU waiting between kernels: look for Python work, data loading or host syncs "
               "between GPU ops; batch the work, overlap loading (DataLoader workers, pinned non_blocking copies)",
    "after": "the GPU finished early and the test went on on the host: keep checks and post-processing on the GPU, "
             "or move them out of the measured code",
}


def _gpu_idle(facts: WindowFacts, limits: Mapping[str, Limit], hw: Mapping[str, float]) -> Optional[Finding]:
    if not facts.event_count or facts.window_ns < limits["min_window_ms"].value * 1e6:
        return None
    timeline = facts.timeline
    idle_pct = facts.pct_of_window(timeline.idle_ns)
    if idle_pct < limits["min_idle_pct"].value:
        return None
    parts = {"before": timeline.idle_before_ns, "between": timeline.idle_between_ns, "after": timeline.idle_after_ns}
    worst = max(parts, key=parts.__getitem__)
    return _finding(
        "gpu-idle",
        f"the GPU was idle {idle_pct:.0f}% of the {_ms_text(facts.window_ns)} window: "
        f"{_ms_text(parts['before'])} before the first kernel, {_ms_text(parts['between'])} between kernels, "
        f"{_ms_text(parts['after'])} after the last",
        _IDLE_FIXES[worst],
        idle_pct, idle_pct=round(idle_pct, 1), window_us=_us(facts.window_ns),
        idle_before_us=_us(parts["before"]), idle_between_us=_us(parts["between"]),
        idle_after_us=_us(parts["after"]), mostly=worst)


def _s_text(ns: float) -> str:
    """A start-up time for a message: 3.6 s, 850 ms."""
    return f"{ns / 1e9:.1f} s" if ns >= 1e9 else _ms_text(ns)


CHILD_START_FIX = ("most of the wait was a child process starting (Python, imports, CUDA) before its GPU work: keep "
                   "the process alive across tests (start the worker once in a session-scoped fixture and send it "
                   "each test's work, or reuse a persistent pool), so each test pays for its work only")


def with_child_start(finding: Finding, program: str, startup_ns: float) -> Finding:
    """gpu-idle on a test whose first GPU work was a child's that the test started: the idle time
    before the first kernel names the child's start-up, and where that is most of the idle time the
    fix is to keep the process alive (building models in a fixture would not help). Other findings
    come back unchanged."""
    before_ns = float(finding.evidence.get("idle_before_us", 0.0)) * 1000
    part = min(float(startup_ns), before_ns)
    if finding.rule != "gpu-idle" or part <= 0:
        return finding
    message = (f"{finding.message} (of the {_ms_text(before_ns)} before the first kernel, the child `{program}` "
               f"took {_s_text(part)} to start its GPU work)")
    mostly = finding.evidence.get("mostly") == "before" and part >= before_ns / 2
    evidence = {**finding.evidence, "child_program": program, "child_startup_us": _us(part)}
    return Finding(finding.rule, finding.severity, message, CHILD_START_FIX if mostly else finding.fix, evidence,
                   finding.impact_pct)


# -- memcpy-dominant ----------------------------------------------------------------------------

def _memcpy_dominant(facts: WindowFacts, limits: Mapping[str, Limit], hw: Mapping[str, float]) -> Optional[Finding]:
    _, names, kinds = facts.keys
    wanted = [kind == MEMCPY for kind in kinds]
    if not any(wanted):
        return None
    found = _large_share(facts, wanted, limits)
    if found is None:
        return None
    total, count, share = found
    rows = facts.totals(wanted)
    return _finding(
        "memcpy-dominant",
        f"copies took {_ms_text(total)}, {share:.0f}% of GPU busy time ({count} copies, most in {rows[0].name})",
        "keep the data on the GPU between steps (move it once, in a fixture) or overlap the copies with compute "
        "(pinned memory, non_blocking=True)",
        facts.pct_of_window(total), copies=count, total_us=_us(total),
        share_of_busy_pct=round(share, 1), by_name={r.name: r.count for r in rows})


# -- low-sm-activity (hardware counters) --------------------------------------------------------

def _low_sm_activity(facts: WindowFacts, limits: Mapping[str, Limit], hw: Mapping[str, float]) -> Optional[Finding]:
    sm = hw.get("sm_pct")
    if sm is None or not (facts.event_count or hw.get("events")):  # "events": a record's figures, see counter_findings
        return None
    busy = hw.get("busy_pct", facts.busy_pct)
    if busy < limits["min_busy_pct"].value or sm >= busy * limits["max_sm_share_of_busy"].value / 100:
        return None
    return _finding(
        "low-sm-activity",
        f"the GPU was busy {busy:.0f}% of the window, but its SMs were active only {sm:.1f}%",
        "the kernels launch too few blocks to fill the GPU or wait on memory: give each kernel more work "
        "(larger batches, fused ops, torch.compile) and check the launch grid of custom kernels",
        max(0.0, busy - sm), busy_pct=round(busy, 1), sm_pct=round(sm, 2))


def _limits(**limits: Limit) -> Mapping[str, Limit]:
    return MappingProxyType(limits)


def _category_at_least(categories: tuple[str, ...], limit: str) -> Gate:
    """Gate: these categories hold at least the rule's ``limit`` of time (µs)."""
    return lambda g, limits: sum(g.category_us.get(c, 0.0) for c in categories) >= limits[limit].value * (1 - 1e-9)


#: The rules, in the order they are reported.
RULES: tuple[Rule, ...] = (
    Rule("pageable-memcpy", "copies from or to pageable (not pinned) host memory take a large share of GPU time",
         "pin the host memory and copy with non_blocking=True, or create the tensors on the GPU",
         _limits(
             min_share_of_busy=Limit(10, "%", "a tenth of the GPU's work: pinned 8 MB copies ran 4x faster in the "
                                             "H100 recording (48 against 11 GB/s) and overlap compute, so most of it comes back"),
             min_total_us=Limit(100, "µs", "below 0.1 ms the saving is too small to act on"),
             min_copy_us=Limit(10, "µs", "a copy under 10 µs moves at most tens of KB: its time is latency, which "
                                         "pinning does not change (.item()'s 4-byte copies are host-sync's)")),
         _pageable, gate=_category_at_least((MEMCPY_CATEGORY,), "min_total_us")),
    Rule("host-sync", "the host waited for the GPU many times, and the GPU sat idle after each wait",
         "keep results on the GPU inside loops; read values once at the end",
         _limits(
             min_waits=Limit(10, "", "one or two waits (the end of a test, a final .item()) are normal; a wait "
                                     "in a loop shows up tens of times"),
             min_idle_after_pct=Limit(10, "%", "the GPU idle after the waits (the host launching the next work) "
                                               "is what the waits cost; under a tenth of the window it is noise")),
         _host_sync, gate=lambda g, limits: bool(g.event_count) and (g.waits or 0) >= limits["min_waits"].value),
    Rule("launch-bound", "many short kernels separated by launch-sized gaps: the host's launches set the pace",
         "capture the loop in a CUDA graph, fuse small ops (torch.compile) or batch the work",
         _limits(
             min_kernels=Limit(100, "", "fewer launches cannot add up to much launch time (100 x ~5 µs = 0.5 ms)"),
             max_median_kernel_us=Limit(10, "µs", "a launch costs the host about 5-10 µs (148k launches/s on an "
                                                   "H100); kernels shorter than that finish before the next arrives"),
             min_median_gap_us=Limit(2, "µs", "gaps of about 1 µs are the GPU's own step from one queued kernel "
                                              "to the next: the host is ahead (a CUDA graph's replay looks so)"),
             max_median_gap_us=Limit(50, "µs", "gaps of a launch or two through PyTorch's eager path; longer "
                                               "gaps are other host work (gpu-idle)"),
             max_busy_pct=Limit(50, "%", "a GPU busy half the window or more is not held back by launches")),
         _launch_bound, gate=lambda g, limits: (g.kernel_count >= limits["min_kernels"].value
                                                  and g.busy_pct < limits["max_busy_pct"].value)),
    Rule("fp32-matmul", "fp32 GEMM or convolution kernels without TF32 take a large share of GPU time",
         "allow TF32 (torch.set_float32_matmul_precision('high')) or use bf16 where the test allows",
         _limits(
             min_share_of_busy=Limit(20, "%", "TF32 runs these 4-8x faster on Ampere and Hopper (7x on the "
                                              "H100 zoo's 2048^3 matmul), so a fifth of GPU time saves ~15 %"),
             min_total_us=Limit(100, "µs", "below 0.1 ms the saving is too small to act on")),
         _fp32_matmul, gate=_category_at_least((GEMM, CONV), "min_total_us")),
    Rule("gpu-idle", "the GPU was idle most of the window (split: before the first kernel, between kernels, after "
                     "the last)",
         "the largest part says where: set-up before, host work between, host work after",
         _limits(
             min_idle_pct=Limit(50, "%", "idle most of the window: the test measures the host more than the GPU"),
             min_window_ms=Limit(1, "ms", "a shorter test's idle time is too small to act on")),
         _gpu_idle, superseded_by=("launch-bound", "host-sync"), superseded_when=lambda f: f.evidence.get("mostly") == "between",
         gate=lambda g, limits: (bool(g.event_count) and g.window_ns >= limits["min_window_ms"].value * 1e6
                                 and 100 - g.busy_pct >= limits["min_idle_pct"].value * (1 - 1e-9))),
    Rule("memcpy-dominant", "copies (pinned or not) take most of the GPU's time",
         "keep the data on the GPU between steps, or overlap copies with compute",
         _limits(
             min_share_of_busy=Limit(50, "%", "most of the GPU's work is moving data, not computing"),
             min_total_us=Limit(1000, "µs", "below 1 ms of copies a test has little to gain")),
         _memcpy_dominant, superseded_by=("pageable-memcpy",), gate=_category_at_least((MEMCPY_CATEGORY,), "min_total_us")),
    Rule("low-sm-activity", "the GPU was busy but its SMs were barely active (hardware counters)",
         "give each kernel more work: larger batches, fused ops, a bigger launch grid",
         _limits(
             min_busy_pct=Limit(20, "%", "with less GPU work the SMs' share says little"),
             max_sm_share_of_busy=Limit(25, "%", "SMs active under a quarter of the busy time: the kernels "
                                                 "leave most of the GPU unused (a 1k-element add_ loop: 0.035 % SM)")),
         _low_sm_activity),
)

RULES_BY_ID: Mapping[str, Rule] = MappingProxyType({r.id: r for r in RULES})
RULE_IDS: tuple[str, ...] = tuple(RULES_BY_ID)
