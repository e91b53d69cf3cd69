"""What the run writes at its end, and the whole run's figures.

gpu_util.csv and gpu_util.json (with the run's totals and the per-GPU table), the baselines asked
for (``--gpu-util-save``, ``--gpu-util-autosave``) and the HTML report (``--gpu-util-html``).
Per-test files (``traces/<test>.json.gz``, ``memory/<test>.pickle``) are named by :func:`safe_name`.
"""
from __future__ import annotations

import datetime as _dt
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence

from pytest_gpuutil.gates.baseline import RunDoc, free_autosave_name, save_baseline
from pytest_gpuutil.gates.regression import Comparison, FailExpr
from pytest_gpuutil.options import Settings
from pytest_gpuutil.records import TestRecord, gpu_totals
from pytest_gpuutil.report.files import run_document, write_run_files
from pytest_gpuutil.report.terminal import display_path

if TYPE_CHECKING:
    from pytest_gpuutil.history.series import Trend


def safe_name(nodeid: str) -> str:
    """A file name for a test id."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid).strip("_")[:180]


def write_run(records: Sequence[TestRecord], machine: Mapping[str, Any], *, gpus: list[dict[str, Any]],
              totals: dict[str, Any], thresholds: dict[str, str], settings: Settings, output_dir: Path,
              invocation_dir: Path, baseline: Optional[RunDoc], fail_exprs: Sequence[FailExpr],
              comparison: Optional[Comparison], written: list[Path], usage_errors: list[str],
              created: Optional[str] = None, baseline_label: Optional[str] = None,
              trends: Optional[Mapping[str, Trend]] = None,
              timelines: Optional[Mapping[str, Mapping[str, Any]]] = None) -> None:
    """Write gpu_util.csv/json, save the baselines asked for, write the HTML report if asked.

    Each file goes into ``written`` once it is written (an OSError stops the rest); an HTML report
    that cannot be written goes into ``usage_errors``. ``created``: the run's time (default now);
    ``baseline_label``: what the page calls the baseline; ``trends``: the page's trend lines;
    ``timelines``: the tests' timelines, written beside gpu_util.json (timelines.json.gz) and drawn on the page.
    """
    records = sorted(records, key=lambda r: r.test)
    created = created or now_utc()
    extra: dict[str, Any] = {}
    if any(r.counter_sums for r in records):
        from pytest_gpuutil.analysis.counters import summarise

        extra["counters"] = summarise((r.test, r.counter_sums) for r in records)  # per file and session
    if any(r.findings is not None for r in records):
        from pytest_gpuutil.analysis.findings import findings_summary

        extra["findings_summary"] = findings_summary([r.to_dict() for r in records], settings.findings_floor)
    doc = run_document(records, machine, created, gpus=gpus, totals=totals, thresholds=thresholds, **extra)
    written.extend(write_run_files(output_dir, records, doc))
    if settings.html is not None:
        from pytest_gpuutil.report.timelines import write_sidecar

        sidecar = write_sidecar(output_dir, timelines or {})
        if sidecar is not None:
            written.append(sidecar)
    for name in filter(None, (settings.save, free_autosave_name(output_dir, machine) if settings.autosave else None)):
        written.append(save_baseline(doc, output_dir, name))
    if settings.html is not None:
        from pytest_gpuutil.report.html_report import (
            DEFAULT_NAME,
            baseline_view_of,
            write_html_report,
        )

        target = invocation_dir / settings.html if settings.html else output_dir / DEFAULT_NAME
        view = baseline_view_of(baseline, records, fail_exprs, comparison, baseline_label) if baseline else None
        try:
            from pytest_gpuutil.report.timelines import PAGE_BUDGET_BYTES

            written.append(write_html_report(target, doc, baseline=view, traces_dir=output_dir / "traces",
                                             trace_name=safe_name, trends=trends, timelines=timelines,
                                             timeline_budget=None if settings.timelines is None else PAGE_BUDGET_BYTES))
        except OSError as exc:
            usage_errors.append(f"--gpu-util-html: could not write {display_path(target)}: {exc}")


def now_utc() -> str:
    """The time a run document is stamped with (UTC, whole seconds)."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def measured(records: Sequence[TestRecord]) -> list[TestRecord]:
    """The records with GPU figures."""
    return [r for r in records if r.gpu_busy_ms is not None]


def totals(records: Sequence[TestRecord], processes: Mapping[str, Mapping[str, Any]], test_s: float,
           finish_s: float) -> dict[str, Any]:
    """The whole run: tests, what measuring cost, GPU busy time over the profiled tests' time."""
    in_tests_ms = sum(r.measure_ms or 0.0 for r in records)
    measure_ms = in_tests_ms + (finish_s * 1000 if in_tests_ms else 0.0)
    startups = [p["startup_s"] for p in processes.values() if p.get("startup_s") is not None]
    figures = gpu_totals(records)
    return {
        "tests": figures.pop("tests"),
        "measure_ms": measure_ms,
        "measure_in_tests_ms": in_tests_ms,
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
    return {
        "counters": sorted({p["counters"] for p in opened}),
        "counters_fallback": fallbacks,
        "counters_startup_s": max(startups) if startups else None,
        "counters_thread_cpu_s": sum(c.get("thread_cpu_s") or 0.0 for c in costs),
        "counters_flush_s": sum(c.get("flush_s") or 0.0 for c in costs),
        "counters_samples": sum(c.get("samples") or 0 for c in costs),
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
    """Busy time per physical GPU and which workers used it."""
    per_gpu: dict[str, dict[str, Any]] = {}
    for record in records:
        for gpu, busy_us in record.gpu_busy_us_by_device.items():
            entry = per_gpu.setdefault(gpu, {"gpu": gpu, "busy_ms": 0.0, "tests": 0, "workers": set()})
            entry["busy_ms"] += busy_us / 1000
            entry["tests"] += 1
            entry["workers"].add(record.worker or "main")
    return [
        {**e, "workers": sorted(e["workers"])}
        for _, e in sorted(per_gpu.items(), key=lambda kv: (not kv[0].isdigit(), int(kv[0]) if kv[0].isdigit() else 0, kv[0]))
    ]
