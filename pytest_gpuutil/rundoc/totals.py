"""The whole run's figures in a run document: ``totals`` (tests, what measuring cost, GPU busy time,
the counters' and the child processes' costs) and ``gpus`` (busy time per physical GPU)."""
from __future__ import annotations

from operator import attrgetter
from typing import Any, Mapping, Sequence

from pytest_gpuutil.records import TestRecord, gpu_totals, sum_or_zero


def record_figures(records: Sequence[TestRecord]) -> dict[str, Any]:
    """The part of :func:`totals` that reads every record (a run's summary asks for the totals
    several times; its records no longer change by then, so this part can be kept)."""
    return {"measure_in_tests_ms": sum_or_zero(list(map(attrgetter("measure_ms"), records))), **gpu_totals(records)}


def totals(records: Sequence[TestRecord], processes: Mapping[str, Mapping[str, Any]], test_s: float,
           finish_s: float, figures: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The whole run: tests, what measuring cost, GPU busy time over the profiled tests' time.
    ``figures``: :func:`record_figures` of the same records, when known."""
    figures = dict(record_figures(records) if figures is None else figures)
    in_tests_ms = figures.pop("measure_in_tests_ms")
    measure_ms = in_tests_ms + (finish_s * 1000 if in_tests_ms else 0.0)
    # the plugin's own time in every hook of every process (flushes, the session's end, the summary
    # so far), where the processes say it: all of its work, not only what the records carry
    owns = [p["own_s"] for p in processes.values() if isinstance(p.get("own_s"), (int, float))]
    own_ms = sum(owns) * 1000 if owns else None
    # what the processes estimate was paid inside the tests where no timer sees it (measurement/unseen_cost.py)
    unseen_ms = sum(p["unseen_s"] for p in processes.values() if isinstance(p.get("unseen_s"), (int, float))) * 1000
    if own_ms is not None and in_tests_ms:
        measure_ms = own_ms + unseen_ms
        in_tests_ms += unseen_ms
    # of the hooks' time, torch's own calls at the tests' edges (the synchronizes, the allocator's reset and read)
    torch_calls = [p["torch_calls_s"] for p in processes.values() if isinstance(p.get("torch_calls_s"), (int, float))]
    startups = [p["startup_s"] for p in processes.values() if p.get("startup_s") is not None]
    return {
        "tests": figures.pop("tests"),
        "measure_ms": measure_ms,
        "measure_in_tests_ms": in_tests_ms,
        "measure_hooks_ms": own_ms,
        "measure_unseen_ms": unseen_ms if own_ms is not None and in_tests_ms else 0.0,
        "torch_calls_ms": sum(torch_calls) * 1000 if torch_calls else None,
        "test_s": test_s,
        "measure_share_pct": 100.0 * measure_ms / 1000 / test_s if test_s > 0 else 0.0,
        "startup_s": max(startups) if startups else None,
        **figures,
        **counter_totals(processes),
        **child_totals(processes),
    }


def counter_totals(processes: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The hardware counters' sources, fallbacks and cost over the run's processes ({} if none ran)."""
    opened = [p for p in processes.values() if p.get("counters")]
    fallbacks = sorted({p["counters_fallback"] for p in processes.values() if p.get("counters_fallback")})
    if not opened and not fallbacks:
        return {}
    costs = [p.get("counters_cost") or {} for p in opened]
    startups = [p["counters_startup_s"] for p in opened if p.get("counters_startup_s") is not None]
    thread_cpu = sum(c.get("thread_cpu_s") or 0.0 for c in costs)
    thread_startups = [c["thread_startup_s"] for c in costs if c.get("thread_startup_s")]
    thread_wall = sum(c.get("wall_s") or 0.0 for c in costs)
    return {
        "counters": sorted({p["counters"] for p in opened}),
        "counters_fallback": fallbacks,
        "counters_startup_s": max(startups) if startups else None,
        # a source started on the sampler's thread: that start-up, left out of the thread's figures below
        **({"counters_thread_startup_s": max(thread_startups)} if thread_startups else {}),
        "counters_thread_cpu_s": thread_cpu,
        "counters_flush_s": sum(c.get("flush_s") or 0.0 for c in costs),
        "counters_samples": sum(c.get("samples") or 0 for c in costs),
        # the sampling threads' CPU over their lives (summed over processes): % of one core
        "counters_thread_wall_s": thread_wall,
        "counters_thread_pct": 100.0 * thread_cpu / thread_wall if thread_wall > 0 else None,
        # by part (polls: decode and evaluation; energy reads; process checks), CPU s
        "counters_thread_parts_cpu_s": {part: sum(c.get(f"{part}_cpu_s") or 0.0 for c in costs)
                                        for part in ("poll", "energy", "process")},
    }


def child_totals(processes: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Where the GPU work was when tests started processes, and what measuring those cost."""
    summaries = [p["children"] for p in processes.values() if isinstance(p.get("children"), Mapping)]
    startups = sorted(ms for c in summaries for ms in c.get("startup_ms", ()))
    return {
        "children": {
            "processes": sum(c.get("processes", 0) for c in summaries),
            "measured": len(startups),
            "startup_ms_median": startups[len(startups) // 2] if startups else None,
            "startup_ms_max": startups[-1] if startups else None,
            "notes": [n for c in summaries for n in c.get("notes", ())],
            "problems": sorted({c["problem"] for c in summaries if c.get("problem")}),
            "injection": sorted({c["injection"] for c in summaries if c.get("injection")}),
        },
    }


def gpu_table(records: Sequence[TestRecord]) -> list[dict[str, Any]]:
    """Busy time per physical GPU and which workers used it (each GPU's busy time added up test by
    test, in the records' order)."""
    per_gpu: dict[str, dict[str, Any]] = {}
    for record in records:
        for gpu, busy_us in record.gpu_busy_us_by_device.items():
            entry = per_gpu.get(gpu)
            if entry is None:  # (not setdefault: its default, a dict and a set, would be made for every test)
                entry = per_gpu[gpu] = {"gpu": gpu, "busy_ms": 0.0, "tests": 0, "workers": set()}
            entry["busy_ms"] += busy_us / 1000
            entry["tests"] += 1
            entry["workers"].add(record.worker or "main")
    return [
        {**e, "workers": sorted(e["workers"])}
        for _, e in sorted(per_gpu.items(), key=lambda kv: (not kv[0].isdigit(), int(kv[0]) if kv[0].isdigit() else 0, kv[0]))
    ]
