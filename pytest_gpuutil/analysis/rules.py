"""The findings rules: each one's limits (with the reason for each), what it checks and the fix.

Rules are data: :data:`RULES` lists them in the order they are reported; each has its limits in
one table (``Limit``: value, unit, why that value) and a check that reads
:class:`~pytest_gpuutil.analysis.window_facts.WindowFacts` and returns a
:class:`~pytest_gpuutil.analysis.finding_records.Finding` or None. The README's "Findings" section
states every limit; a test holds the two together.

Every finding estimates ``saving_ms``, the time its fix would save, from its own evidence, with
the basis in ``saving_basis`` (each rule's ``saving`` field says how; the constants it uses are its
``estimates``). Severity, and the floor below which a finding is not reported, go by that saving
(:mod:`pytest_gpuutil.analysis.finding_records`). ``impact_pct`` (the share of the window the
problem takes) stays in the evidence of each finding.
"""
from __future__ import annotations

import re
from types import MappingProxyType

from pytest_gpuutil.analysis.classify import CONV, GEMM
from pytest_gpuutil.analysis.classify import MEMCPY as MEMCPY_CATEGORY
from pytest_gpuutil.analysis.finding_records import UNDER_LIMIT, Finding, Limit, Rule, severity_of
from pytest_gpuutil.analysis.window_facts import MEMCPY, WindowFacts
from pytest_gpuutil.frozen import tuple_record

TYPE_CHECKING = False  # typing's, without importing typing at run time (gpuutil analyze's start-up)
if TYPE_CHECKING:
    from typing import Any, Mapping, Optional, Sequence

    from pytest_gpuutil.analysis.finding_records import Gate


def _finding(facts: Any, rule_id: str, message: str, fix: str, impact: float, saving_ns: float, basis: str,
             **evidence: Any) -> Finding:
    saving_ns = max(0.0, saving_ns)
    saving_pct = _pct(saving_ns, facts.window_ns)
    return Finding(rule_id, severity_of(saving_ns / 1e6, saving_pct), message, fix, evidence, round(impact, 2),
                   round(saving_ns / 1e6, 3), round(saving_pct, 2), basis)


def _estimate(hw: Mapping[str, float], rule_id: str, name: str) -> float:
    """An estimate's constant: a figure measured on this device (``hw``) where given, else the registry's."""
    value = hw.get(name)
    return value if value is not None and value > 0 else RULES_BY_ID[rule_id].estimates[name].value


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
    if hasattr(values, "partition"):  # numpy: the same order statistic, without a sorted list
        sample = values[::step].copy()
        sample.partition((len(sample) - 1) // 2)
        return float(sample[(len(sample) - 1) // 2])
    # ints, or an array('q'): in C where it is built, else sorted
    from pytest_gpuutil.analysis.intervals.event_figures import sample_median
    return float(sample_median(values, step))


def _at_most(values: Sequence[int], limit: float) -> int:
    """How many values are at most ``limit`` (a list: in C through map; an array: numpy)."""
    return int((values <= limit).sum()) if hasattr(values, "dtype") else _count_within(values, limit, False)


def _count_within(values: Sequence[int], limit: float, strict: bool) -> int:
    """How many of a list's values are at most ``limit`` (under it where ``strict``; in C where built)."""
    from pytest_gpuutil.analysis.intervals.event_figures import count_under
    return count_under(values, limit, strict)


def _median_at_most(values: Sequence[int], limit: float) -> bool:
    """Whether the lower median of ``values`` is at most ``limit``: exactly, by counting (no sort)."""
    return _at_most(values, limit) >= (len(values) + 1) // 2


def _median_below(values: Sequence[int], limit: float) -> bool:
    """Whether the lower median of ``values`` is under ``limit``, exactly."""
    below = int((values < limit).sum()) if hasattr(values, "dtype") else _count_within(values, limit, True)
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
    pageable, pinned = _estimate(hw, "pageable-memcpy", "pageable_gbps"), _estimate(hw, "pageable-memcpy", "pinned_gbps")
    latency = _estimate(hw, "pageable-memcpy", "copy_latency_us") * 1000
    moving = max(0.0, total - copies * latency)
    faster = moving * (1 - pageable / pinned)
    # the host stages a pageable copy through a buffer of its own and is held until it is done: the
    # GPU idles right before and after each copy while the host copies the bytes (on an H100, 48
    # copies of 8 MB: 6 ms of such idle; the 145 ms more that issue 42 saw in that window was the
    # test's comparison run for the first time, not the copies: examples/test_gpu_workloads.py)
    held, gaps = facts.idle_next_to(wanted)
    saving = faster + held
    return _finding(
        facts, "pageable-memcpy",
        f"{copies} copies from or to pageable host memory took {_ms_text(total)}, {share:.0f}% of GPU busy time"
        + (f"; the GPU sat idle {_ms_text(held)} next to them while the host staged them" if held >= 1e5 else ""),
        "pin the host memory (tensor.pin_memory(), DataLoader(pin_memory=True)) and copy with non_blocking=True, "
        "or create the tensors on the GPU (device='cuda')",
        facts.pct_of_window(total), saving,
        f"{_ms_text(total)} of pageable copies (less {latency / 1000:g} µs each) at {pageable:g} GB/s, "
        f"the same bytes at {pinned:g} GB/s pinned: {_ms_text(faster)}; the GPU's idle right before and after "
        f"them, while the host staged them ({gaps} gaps): {_ms_text(held)}; together {_ms_text(saving)}",
        copies=copies, total_us=_us(total), share_of_busy_pct=round(share, 1),
        longest_us=_us(int(max(facts.lengths_of(wanted)))), by_name=by_name, held_idle_us=_us(held))


# -- host-sync ----------------------------------------------------------------------------------

def _host_sync(facts: WindowFacts, limits: Mapping[str, Limit], hw: Mapping[str, float]) -> Optional[Finding]:
    if len(facts.sync_rows) < limits["min_waits"].value or not facts.event_count:
        return None
    waits = facts.waits
    idle = waits.idle_ns
    share = _pct(idle, facts.window_ns)
    if waits.count < limits["min_waits"].value or not idle:
        return None
    # under the idle floor: kept under the findings' floor (gpu_util.json's below_floor), with its places
    under = {} if share >= limits["min_idle_after_pct"].value else {UNDER_LIMIT: "min_idle_after_pct"}
    names = ", ".join(f"{name} {count}" for name, count in waits.by_name)
    read_back = (f" ({_ms_text(waits.read_back_idle_ns)} of it before the read-backs' copies)"
                 if waits.read_back_idle_ns else "")
    # one wait stays (the value is read once, at the end): the idle after the others is saved
    saving = idle * (waits.count - 1) / waits.count
    return _finding(
        facts, "host-sync",
        f"the host waited for the GPU {waits.count} times ({names}); the GPU then sat idle "
        f"{_ms_text(idle)}{read_back}, {share:.0f}% of the window",
        "keep results on the GPU inside loops: drop .item(), .cpu(), .tolist(), print() of GPU tensors and "
        "torch.cuda.synchronize() from the loop, read values once at the end",
        share, saving, f"the GPU sat idle {_ms_text(idle)} around {waits.count} waits{read_back}; one wait "
                       f"instead of {waits.count} keeps {waits.count - 1}/{waits.count} of it: {_ms_text(saving)}",
        waits=waits.count, by_name=dict(waits.by_name), wait_us=_us(waits.wait_ns),
        idle_after_us=_us(waits.idle_after_ns), read_back_idle_us=_us(waits.read_back_idle_ns),
        worst=[{"start_us": _us(s), "dur_us": _us(e - s), "idle_after_us": _us(i)} for s, e, i in waits.worst], **under)


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
    floor = _estimate(hw, "launch-bound", "graph_gap_us") * 1000
    saving = timeline.idle_between_ns - count * floor
    return _finding(
        facts, "launch-bound",
        f"{count:,} kernels, median {median_kernel / 1000:.1f} µs, median gap {median_gap / 1000:.1f} µs: "
        f"the GPU was busy {busy_pct:.0f}% of the window",
        "launch fewer, larger kernels: capture the loop in a CUDA graph (torch.cuda.graphs, "
        "torch.compile(mode='reduce-overhead')), fuse small ops (torch.compile) or batch the work",
        impact, saving, f"{_ms_text(timeline.idle_between_ns)} idle between {count:,} kernels, less "
                        f"{floor / 1000:g} µs a launch that a CUDA graph still leaves: {_ms_text(saving)}",
        kernels=count, median_kernel_us=_us(median_kernel), median_gap_us=_us(median_gap),
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
    gemm_x, conv_x = _estimate(hw, "fp32-matmul", "gemm_speedup"), _estimate(hw, "fp32-matmul", "conv_speedup")
    conv_ns = sum(r.total_ns for r in rows if r.category == CONV)
    conv_share = conv_ns / max(1, sum(r.total_ns for r in rows))
    saving = total * ((1 - conv_share) * (1 - 1 / gemm_x) + conv_share * (1 - 1 / conv_x))
    return _finding(
        facts, "fp32-matmul",
        f"{count} fp32 matmul/conv kernels without TF32 took {_ms_text(total)}, {share:.0f}% of GPU busy time "
        f"({_short(rows[0].name, 60)})",
        "allow TF32 (torch.set_float32_matmul_precision('high'); torch.backends.cudnn.allow_tf32 = True for "
        "convolutions) or run them in bf16 (torch.autocast) where the test's tolerance allows",
        facts.pct_of_window(total), saving,
        f"{_ms_text(total)} of fp32 kernels ({conv_share * 100:.0f}% convolutions) at the TF32 speed-up "
        f"({gemm_x:g}x matmul, {conv_x:g}x convolution): {_ms_text(saving)}",
        kernels=count, total_us=_us(total), share_of_busy_pct=round(share, 1),
        top_kernels=[{"name": _short(r.name), "count": r.count, "total_us": _us(r.total_ns)} for r in rows[:3]])


# -- gpu-idle -----------------------------------------------------------------------------------

_IDLE_FIXES = {
    "between": "the host kept the GPU waiting between kernels: look for Python work, data loading or host syncs "
               "between GPU ops; batch the work, overlap loading (DataLoader workers, pinned non_blocking copies)",
    "after": "the GPU finished early and the test went on on the host: keep checks and post-processing on the GPU, "
             "or move them out of the measured code",
}

#: what the time before the first kernel was, as far as the capture can name it: (what, fix, paid once
#: per process: moving it elsewhere saves the run nothing)
BEFORE_CAUSES: Mapping[str, tuple[str, str, bool]] = MappingProxyType({
    "cuda-init": ("CUDA context and kernel loading: the first GPU work of this process",
                  "paid once per process: nothing to save for the run; a session fixture that touches the GPU "
                  "(torch.zeros(1, device='cuda')) keeps it out of this test's figures", True),
    "library-init": ("cuBLAS/cuDNN/NCCL start-up: their first use in this process",
                     "paid once per process: nothing to save for the run; a session fixture that runs one small "
                     "matmul/conv keeps it out of this test's figures", True),
    "child-process": ("a child process starting",
                      "start the process once (a module- or session-scoped fixture) and reuse it, or keep the work "
                      "in the test's process", False),
    "host-work": ("the test's own host work (set-up)",
                  "the GPU waited for the test's set-up: build models and data in a fixture (scope='module' or "
                  "'session'), or warm up outside the measured code", False),
})


def before_cause(hw: Mapping[str, float]) -> str:
    """What the idle time before the first kernel was, from what the capture knew of the window
    (``child_startup_ms``, ``cuda_came_up``, ``first_gpu_work``, ``first_library_use``)."""
    if hw.get("child_startup_ms", 0.0) > 0:
        return "child-process"
    if hw.get("cuda_came_up") or hw.get("first_gpu_work"):
        return "cuda-init"
    return "library-init" if hw.get("first_library_use") else "host-work"


def _gpu_idle(facts: WindowFacts, limits: Mapping[str, Limit], hw: Mapping[str, float]) -> Optional[Finding]:
    if not facts.event_count or facts.window_ns < limits["min_window_ms"].value * 1e6:
        return None
    timeline = facts.timeline
    idle_pct = facts.pct_of_window(timeline.idle_ns)
    if idle_pct < limits["min_idle_pct"].value:
        return None
    parts = {"before": timeline.idle_before_ns, "between": timeline.idle_between_ns, "after": timeline.idle_after_ns}
    worst = max(parts, key=parts.__getitem__)
    cause = before_cause(hw)
    what, before_fix, once = BEFORE_CAUSES[cause]
    saving = (0 if once else parts["before"]) + parts["between"] + parts["after"]
    basis = (f"the idle time the fix can remove: {_ms_text(parts['before'])} before the first kernel"
             f"{' (paid once per process: not counted)' if once else ''}, {_ms_text(parts['between'])} between, "
             f"{_ms_text(parts['after'])} after: {_ms_text(saving)} (an upper bound)")
    return _finding(
        facts, "gpu-idle",
        f"the GPU was idle {idle_pct:.0f}% of the {_ms_text(facts.window_ns)} window: "
        f"{_ms_text(parts['before'])} before the first kernel ({what}), {_ms_text(parts['between'])} between "
        f"kernels, {_ms_text(parts['after'])} after the last",
        before_fix if worst == "before" else _IDLE_FIXES[worst],
        idle_pct, saving, basis, idle_pct=round(idle_pct, 1), window_us=_us(facts.window_ns),
        idle_before_us=_us(parts["before"]), idle_between_us=_us(parts["between"]),
        idle_after_us=_us(parts["after"]), mostly=worst, before=cause)


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
        facts, "memcpy-dominant",
        f"copies took {_ms_text(total)}, {share:.0f}% of GPU busy time ({count} copies, most in {rows[0].name})",
        "keep the data on the GPU between steps (move it once, in a fixture) or overlap the copies with compute "
        "(pinned memory, non_blocking=True)",
        facts.pct_of_window(total), total,
        f"the copies' {_ms_text(total)}, all of it where the data is moved once, outside the test (an upper bound)",
        copies=count, total_us=_us(total),
        share_of_busy_pct=round(share, 1), by_name={r.name: r.count for r in rows})


# -- low-sm-activity (hardware counters) --------------------------------------------------------

def _low_sm_activity(facts: WindowFacts, limits: Mapping[str, Limit], hw: Mapping[str, float]) -> Optional[Finding]:
    sm = hw.get("sm_pct")
    if sm is None or not (facts.event_count or hw.get("events")):  # "events": a record's figures, see counter_findings
        return None
    busy = hw.get("busy_pct", facts.busy_pct)
    if busy < limits["min_busy_pct"].value or sm >= busy * limits["max_sm_share_of_busy"].value / 100:
        return None
    window_ns = hw.get("window_ms", 0.0) * 1e6 or facts.window_ns
    unused = window_ns * (busy - sm) / 100
    saving = unused * _estimate(hw, "low-sm-activity", "recoverable_share") / 100
    return _finding(
        _CounterFacts(window_ns), "low-sm-activity",
        f"the GPU was busy {busy:.0f}% of the window, but its SMs were active only {sm:.1f}%",
        "the kernels launch too few blocks to fill the GPU or wait on memory: give each kernel more work "
        "(larger batches, fused ops, torch.compile) and check the launch grid of custom kernels",
        max(0.0, busy - sm), saving,
        f"{_ms_text(unused)} busy with the SMs idle, a {_estimate(hw, 'low-sm-activity', 'recoverable_share'):g} % "
        f"share of it recovered by fuller kernels: {_ms_text(saving)} (a rough guess)",
        busy_pct=round(busy, 1), sm_pct=round(sm, 2))


@tuple_record
class _CounterFacts:
    """The one figure a counters-only finding's saving is a share of."""

    window_ns: float


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
         _pageable, gate=_category_at_least((MEMCPY_CATEGORY,), "min_total_us"),
         saving="the copies' time (less a fixed latency each) minus the same bytes at the pinned bandwidth: "
                "(time - copies x copy_latency_us) x (1 - pageable_gbps / pinned_gbps), the bandwidths measured "
                "on this device when given, else the H100 recording's; plus the GPU's idle right before and "
                "after the copies, while the host staged them (pinned copies with non_blocking=True do not hold "
                "the host)",
         estimates=_limits(
             pageable_gbps=Limit(11, "GB/s", "8 MB pageable host-to-device copies on the H100 recording "
                                            "(tests/data/findings/pageable_copies: 10 copies, 7.5 ms)"),
             pinned_gbps=Limit(48, "GB/s", "the same 8 MB copies from pinned memory (pinned_copies: 1.7 ms)"),
             copy_latency_us=Limit(2, "µs", "what any copy costs whatever its memory: pinning does not change it")),
         action="pin the host tensors"),
    Rule("host-sync", "the host waited for the GPU many times, and the GPU sat idle after each wait",
         "keep results on the GPU inside loops; read values once at the end",
         _limits(
             min_waits=Limit(10, "", "one or two waits (the end of a test, a final .item()) are normal; a wait "
                                     "in a loop shows up tens of times"),
             min_idle_after_pct=Limit(10, "%", "the GPU idle after the waits (the host launching the next work) "
                                               "and right before the copies they waited for (a read-back's copy "
                                               "queued behind the work) is what the waits cost; under a tenth of "
                                               "the window the finding is listed under the floor, not reported")),
         _host_sync, gate=lambda g, limits: (g.event_count > 0) & ((0 if g.waits is None else g.waits) >= limits["min_waits"].value),
         saving="the GPU's idle time after the waits and before their read-backs' copies, less one wait's share: "
                "one read at the end instead of N keeps the GPU fed between them (idle x (N - 1) / N)",
         action="read GPU values once, after the loop"),
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
         _launch_bound, gate=lambda g, limits: ((g.kernel_count >= limits["min_kernels"].value)
                                                  & (g.busy_pct < limits["max_busy_pct"].value)),
         saving="the idle time between the kernels minus a per-launch floor that a CUDA graph still leaves: "
                "idle between - kernels x graph_gap_us (the kernels' own time stays)",
         estimates=_limits(
             graph_gap_us=Limit(1, "µs", "replayed from a CUDA graph, the H100 recording's 1 µs kernels ran 0.1 µs "
                                         "apart (small_kernels_graph); 1 µs allows for the graph's own launch")),
         action="capture the launch loops in a CUDA graph"),
    Rule("fp32-matmul", "fp32 GEMM or convolution kernels without TF32 take a large share of GPU time",
         "allow TF32 (torch.set_float32_matmul_precision('high')) or use bf16 where the test allows",
         _limits(
             min_share_of_busy=Limit(20, "%", "TF32 runs these 4-8x faster on Ampere and Hopper (7x on the "
                                              "H100 zoo's 2048^3 matmul), so a fifth of GPU time saves ~15 %"),
             min_total_us=Limit(100, "µs", "below 0.1 ms the saving is too small to act on")),
         _fp32_matmul, gate=_category_at_least((GEMM, CONV), "min_total_us"),
         saving="the fp32 kernels' time minus the same FLOPs at the TF32 rate: time x (1 - 1 / speed-up), the "
                "speed-up of this GPU's TF32 over its fp32 peak where the peaks table knows it "
                "(pytest_gpuutil/machine/peaks.py), else the H100 recording's; convolutions at their own",
         estimates=_limits(
             gemm_speedup=Limit(7.4, "x", "H100 SXM datasheet: 494.7 TF32 against 67 fp32 TFLOP/s; the recording's "
                                         "4096^3 matmul ran 7.8x faster (fp32_matmul 2,629 µs, tf32_matmul 336 µs)"),
             conv_speedup=Limit(2.3, "x", "H100 recording: a 128x64x56x56 Conv2d took 707 µs in fp32 and 304 µs "
                                         "with TF32 (fp32_conv, tf32_conv); cuDNN's fp32 kernels are already fast")),
         action="allow TF32 (or bf16)"),
    Rule("gpu-idle", "the GPU was idle most of the window (split: before the first kernel, between kernels, after "
                     "the last)",
         "the largest part says where: set-up before, host work between, host work after",
         _limits(
             min_idle_pct=Limit(50, "%", "idle most of the window: the test measures the host more than the GPU"),
             min_window_ms=Limit(1, "ms", "a shorter test's idle time is too small to act on")),
         _gpu_idle, superseded_by=("launch-bound", "host-sync", "pageable-memcpy"), superseded_when=lambda f: f.evidence.get("mostly") == "between",
         gate=lambda g, limits: ((g.event_count > 0) & (g.window_ns >= limits["min_window_ms"].value * 1e6)
                                 & (100 - g.busy_pct >= limits["min_idle_pct"].value * (1 - 1e-9))),
         saving="the idle time by part: before the first kernel (unless it is CUDA's or a library's start-up, "
                "paid once per process), between kernels (unless launch-bound or host-sync counts it) and after "
                "the last; an upper bound",
         action="cut the host work around the GPU work"),
    Rule("memcpy-dominant", "copies (pinned or not) take most of the GPU's time",
         "keep the data on the GPU between steps, or overlap copies with compute",
         _limits(
             min_share_of_busy=Limit(50, "%", "most of the GPU's work is moving data, not computing"),
             min_total_us=Limit(1000, "µs", "below 1 ms of copies a test has little to gain")),
         _memcpy_dominant, superseded_by=("pageable-memcpy",), gate=_category_at_least((MEMCPY_CATEGORY,), "min_total_us"),
         saving="the copies' time: all of it where the data moves once, outside the test (an upper bound)",
         action="move the data to the GPU once"),
    Rule("low-sm-activity", "the GPU was busy but its SMs were barely active (hardware counters)",
         "give each kernel more work: larger batches, fused ops, a bigger launch grid",
         _limits(
             min_busy_pct=Limit(20, "%", "with less GPU work the SMs' share says little"),
             max_sm_share_of_busy=Limit(25, "%", "SMs active under a quarter of the busy time: the kernels "
                                                 "leave most of the GPU unused (a 1k-element add_ loop: 0.035 % SM)")),
         _low_sm_activity,
         saving="a share of the busy time the SMs sat idle: window x (busy % - SM %) x recoverable_share "
                "(a rough guess: no trace says how much fuller kernels would gain)",
         estimates=_limits(
             recoverable_share=Limit(50, "%", "an even guess: fuller kernels rarely reach the busy share in SM "
                                              "activity, and small launches are often bound by the host too")),
         action="give the kernels more work"),
)

RULES_BY_ID: Mapping[str, Rule] = MappingProxyType({r.id: r for r in RULES})
RULE_IDS: tuple[str, ...] = tuple(RULES_BY_ID)
