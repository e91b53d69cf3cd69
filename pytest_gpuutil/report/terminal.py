"""The end-of-session summary, written through pytest's terminal reporter."""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Protocol, Sequence

from tabulate import tabulate

from pytest_gpuutil.report.tables import shorten

if TYPE_CHECKING:
    from pytest_gpuutil.gates.baseline import RunDoc
    from pytest_gpuutil.gates.regression import Comparison, FailExpr
    from pytest_gpuutil.records import TestRecord


class RunState(Protocol):
    """What the summary reads from the run's state (the plugin's GpuUtilSession provides it)."""

    settings: Any
    records: list[TestRecord]
    usage_errors: list[str]
    trace_errors: list[str]
    thresholds_not_checked: list[str]
    baseline_messages: list[str]
    baseline: Optional[RunDoc]
    comparison: Optional[Comparison]
    fail_exprs: Sequence[FailExpr]
    metric_rows_written: int
    #: per process (worker id or "main"): mode, source, startup_s, fallback, broken
    processes: dict[str, dict[str, Any]]
    output_dir: Path
    written: list[Path]

    def has_output(self) -> bool: ...
    def no_cuda(self) -> bool: ...
    def measured(self) -> list[TestRecord]: ...
    def totals(self) -> dict[str, Any]: ...
    def machine_info(self) -> dict[str, Any]: ...
    def gpu_table(self) -> list[dict[str, Any]]: ...


SECTION = "GPU utilization (pytest-gpuutil)"


def _num(value: Any, fmt: str) -> str:
    return "" if value is None else format(value, fmt)


def top_tests_table(state: RunState) -> str:
    measured = [r for r in state.measured() if r.kernel_count or r.gpu_busy_ms]
    measured.sort(key=lambda r: (-(r.gpu_busy_ms or 0.0), r.test))
    if state.settings.top:
        measured = measured[: state.settings.top]
    rows = [
        (
            shorten(r.test, 60),
            r.outcome,
            _num(r.wall_ms, ".3f"),
            _num(r.gpu_busy_ms, ".3f"),
            _num(r.busy_pct, ".1f"),
            _num(r.mm_conv_pct, ".1f"),
            _num(r.attention_pct, ".1f"),
            _num(r.communication_pct, ".1f"),
            _num(r.peak_alloc_mb, ".1f"),
            r.kernel_count,
            shorten(r.top_kernel or "", 50),
        )
        for r in measured
    ]
    return tabulate(
        rows,
        headers=("test", "outcome", "wall ms", "GPU ms", "busy %", "mm/conv %", "attn %", "comm %", "peak MiB",
                 "kernels", "top kernel"),
        tablefmt="simple",
        disable_numparse=True,
    )


def top_memory_table(state: RunState) -> str:
    """The tests with the highest peak of allocated GPU memory ("" when none was measured)."""
    with_memory = sorted((r for r in state.records if r.peak_alloc_mb is not None),
                         key=lambda r: (-(r.peak_alloc_mb or 0.0), r.test))
    if not with_memory:
        return ""
    if state.settings.top:
        with_memory = with_memory[: state.settings.top]
    rows = [(shorten(r.test, 60), r.outcome, _num(r.peak_alloc_mb, ".1f"), _num(r.peak_reserved_mb, ".1f"),
             _num(r.leaked_mb, ".1f"), r.alloc_retries, r.ooms) for r in with_memory]
    return tabulate(rows, headers=("top tests by peak GPU memory", "outcome", "peak alloc MiB", "peak reserved MiB",
                                   "left behind MiB", "retries", "OOMs"), tablefmt="simple", disable_numparse=True)


def totals_line(state: RunState) -> str:
    t = state.totals()
    info = state.machine_info()
    gpu = f"{info.get('gpu_count') or 0} x {info.get('gpu_model')}" if info.get("gpu_model") else "no GPU"
    return (
        f"session GPU busy {t['busy_pct']:.1f}%: {t['gpu_busy_ms']:.3f} ms of GPU work in "
        f"{t['profiled_wall_ms']:.3f} ms of profiled test calls; {t['profiled']} tests profiled, "
        f"{t['profiled'] - t['with_gpu_work']} launched no GPU work ({gpu})"
    )


def measurement_lines(state: RunState) -> list[str]:
    """How tests were measured: the profiler's one-time start-up, and what measuring cost."""
    lines = []
    t = state.totals()
    processes = state.processes.values()
    startups = [p["startup_s"] for p in processes if p.get("startup_s") is not None]
    sources = sorted({p["source"] for p in processes if p.get("source")})
    if startups:
        each = f" (each of {len(startups)} processes; longest)" if len(startups) > 1 else ""
        lines.append(f"profiler start-up {max(startups):.3f} s{each} ({', '.join(sources)}), not charged to any test")
    if t["measure_ms"]:
        lines.append(
            f"measurement cost {t['measure_ms'] / 1000:.3f} s ({t['measure_in_tests_ms'] / 1000:.3f} s with the tests, "
            f"the rest at the end), {t['measure_share_pct']:.1f}% of the {t['test_s']:.2f} s the tests took "
            f"({_count(t['profiled'], 'test')} measured)"
        )
    return lines


def measurement_warnings(state: RunState) -> list[str]:
    """Why tests were measured the slow way, or not at all (one line per distinct reason)."""
    reasons = [p.get("broken") or p.get("fallback") for p in state.processes.values()]
    return list(dict.fromkeys(r for r in reasons if r))


def write_summary(state: RunState, tr: Any) -> None:
    if not state.has_output() and not state.usage_errors and state.settings.compare is None:
        return  # with --gpu-util-compare the gate's outcome is always reported (it may set the exit status)
    tr.write_sep("-", SECTION)
    for error in state.usage_errors:
        tr.write_line(f"ERROR: {error}", red=True)
    for problem in measurement_warnings(state) + state.trace_errors:
        tr.write_line(f"WARNING: {problem}", yellow=True)
    if state.settings.enabled and state.no_cuda():
        tr.write_line(
            f"no CUDA device found: GPU fields are empty in the files ({_count(len(state.records), 'test')} ran)"
        )
    elif state.settings.enabled:
        table = top_tests_table(state)
        if state.measured():
            tr.write_line(table)
        tr.write_line(totals_line(state))
        for line in measurement_lines(state):
            tr.write_line(line)
        memory = top_memory_table(state)
        if memory:
            tr.write_line(memory)
        write_findings(state, tr)
        gpus = state.gpu_table()
        if len(gpus) > 1 or any(w != "main" for g in gpus for w in g["workers"]):
            tr.write_line(
                "per GPU: "
                + "; ".join(f"GPU {g['gpu']}: {g['busy_ms']:.3f} ms busy, {g['tests']} tests ({', '.join(g['workers'])})" for g in gpus)
            )
    if state.thresholds_not_checked:
        tr.write_line(
            f"gpu_util thresholds NOT CHECKED for {len(state.thresholds_not_checked)} tests (no GPU measurement): "
            + ", ".join(shorten(t, 60) for t in state.thresholds_not_checked[:5])
        )
    write_gate(state, tr)
    if state.metric_rows_written:
        tr.write_line(f"metric tables: {state.metric_rows_written} rows in {state.output_dir}/metric_table_*.csv")
    if state.written:
        tr.write_line("wrote " + ", ".join(_rel(p) for p in state.written))
    _github_step_summary(state)


def write_findings(state: RunState, tr: Any) -> None:
    """What to fix, by rule, with the worst tests (nothing when findings were off)."""
    from pytest_gpuutil.report.findings_report import SECTION as FINDINGS, finding_lines

    lines = finding_lines(state.records)
    if not lines:
        return
    tr.write_sep("-", FINDINGS)
    for line in lines:
        tr.write_line(line)


def write_gate(state: RunState, tr: Any) -> None:
    for message in state.baseline_messages:
        tr.write_line(f"WARNING: {message}", yellow=True)
    if state.settings.compare is None:
        return
    if state.baseline is None:
        if state.settings.compare_strict:
            tr.write_line("FAILED: no baseline to compare with (--gpu-util-compare-strict)", red=True)
        return
    comparison = state.comparison
    if comparison is None:
        return
    from pytest_gpuutil.gates.regression import regression_table

    where = f"baseline {_rel(state.baseline.path)}"
    if comparison.failed:
        tr.write_sep("-", f"GPU regressions against {where}", red=True)
        tr.write_line(regression_table(comparison.regressions))
        tr.write_line(
            f"FAILED: {len(comparison.regressions)} regression(s) in {len({r.test for r in comparison.regressions})} "
            f"test(s) (limits: {' '.join(e.text for e in state.fail_exprs)})",
            red=True,
        )
    else:
        tr.write_line(f"no GPU regressions against {where}: {len(comparison.compared)} tests compared")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _rel(path: Any) -> str:
    try:
        return os.path.relpath(path)
    except ValueError:
        return str(path)


def _github_step_summary(state: RunState) -> None:
    from pytest_gpuutil.report.ci import (
        append_step_summary,
        step_summary_markdown,
        step_summary_path,
    )

    path = step_summary_path()
    regressions = state.comparison.regressions if state.comparison else ()
    if path is None or not (state.settings.enabled or regressions):  # kernel_bench gates run without --gpu-util
        return
    try:
        append_step_summary(path, step_summary_markdown(state.records, regressions, totals_line(state), state.settings.top))  # 0 = all
    except OSError:
        pass
