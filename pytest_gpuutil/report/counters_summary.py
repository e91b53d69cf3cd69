"""The hardware counters in the end-of-session summary: the session's figures, their cost, fallbacks."""
from __future__ import annotations

from operator import attrgetter
from typing import Any, Iterable, Mapping, Optional, Sequence

from pytest_gpuutil.records import TestRecord

#: how the summary names each figure
LABELS = (("sm_pct", "SM"), ("tensor_pct", "tensor"), ("dram_bw_pct", "DRAM"), ("occupancy_pct", "occupancy"),
          ("fp16_pct", "FP16"), ("fp32_pct", "FP32"), ("fp64_pct", "FP64"))
TOO_SHORT = "too short for the hardware counters"


def _pct(value: Optional[float]) -> str:
    return f"{value:.1f}%" if value is not None else ""


def session_line(records: Sequence[TestRecord], processes: Iterable[Mapping[str, Any]]) -> str:
    """The session's hardware figures over its test calls, short tests included ("" when none)."""
    if not any(map(attrgetter("counter_sums"), records)):
        return ""
    from pytest_gpuutil.analysis.counters import summarise

    session = summarise((r.test, r.counter_sums) for r in records).get("session", {})
    sources = list(dict.fromkeys(p.get("counters") for p in processes if p.get("counters")))
    shown = [f"{label} {_pct(session.get(field))}" for field, label in LABELS if session.get(field) is not None]
    energy = session.get("energy_j")
    if energy is not None:
        shown.append(f"{energy:.1f} J ({session.get('avg_power_w') or 0.0:.0f} W)")
    short = sum(1 for r in records if TOO_SHORT in r.counters_note)
    shared = sum(1 for r in records if "another process used the GPU" in r.counters_note)
    covered = session.get("covered_ms")
    over = f" over {covered / 1000:.2f} s of test calls" if covered else ""
    tail = []
    if short:
        tail.append(f"{short} test{'s' if short != 1 else ''} too short for figures of their own (they count here)")
    if shared:
        tail.append(f"{shared} test{'s' if shared != 1 else ''} shared the GPU with another process")
    source = f" ({'; '.join(sources)})" if sources else ""
    return f"hardware counters{source}{over}: {', '.join(shown) or 'no figures'}" + (f"; {'; '.join(tail)}" if tail else "")


def cost_line(processes: Iterable[Mapping[str, Any]], test_s: float) -> str:
    """The counters' one-time start-up and what the sampler thread cost ("" when they did not run)."""
    opened = [p for p in processes if p.get("counters")]
    if not opened:
        return ""
    startups = [p["counters_startup_s"] for p in opened if p.get("counters_startup_s") is not None]
    costs = [p.get("counters_cost") or {} for p in opened]
    cpu = sum(c.get("thread_cpu_s") or 0.0 for c in costs)
    flush = sum(c.get("flush_s") or 0.0 for c in costs)
    each = f" (longest of {len(startups)} processes)" if len(startups) > 1 else ""
    on_thread = [c["thread_startup_s"] for c in costs if c.get("thread_startup_s")]
    beside = f" (and {max(on_thread):.3f} s on their own thread while the tests ran)" if on_thread else ""
    parts = [f"hardware counters start-up {max(startups):.3f} s{each}{beside}, not charged to any test"] if startups else []
    share = f" ({100 * cpu / test_s:.1f}% of the {test_s:.2f} s the tests took)" if test_s > 0 else ""
    parts.append(f"their thread used {cpu:.3f} s of CPU{share} and flushes waited {flush:.3f} s for samples")
    return "; ".join(parts)


def fallback_lines(processes: Iterable[Mapping[str, Any]]) -> list[str]:
    """Why the counters fell back or are off, one line per distinct reason."""
    lines = []
    for process in processes:
        lines.append(process.get("counters_fallback") or "")
        cost = process.get("counters_cost") or {}
        error = cost.get("error")
        lines.append(f"hardware counters stopped during the run: {error}" if error else "")
        lines.extend(str(problem) for problem in cost.get("later") or ())
    return list(dict.fromkeys(line for line in lines if line))
