"""Text tables for one analysed trace (CLI ``--format table``) and the one-line tabulate summary."""
from __future__ import annotations

from typing import Optional, Sequence

from tabulate import tabulate

from pytest_gpuutil.analysis.rules import Finding
from pytest_gpuutil.analysis.summary import TraceSummary

#: Categories given a column of their own in the one-line summary (percent of window).
TABULATE_LINE_CATEGORIES = (
    "attention",
    "communication",
    "triton_pointwise",
    "triton_reduction",
    "triton_persistent_reduction",
    "triton_template",
    "other",
)
TABULATE_LINE_COLUMNS = (
    ("name", "busy %", "mm/conv %")
    + tuple(f"{c} %" for c in TABULATE_LINE_CATEGORIES)
    + ("window ms",)
)


def shorten(name: str, width: int = 80) -> str:
    """Kernel names can be kilobytes of C++ templates: keep the head."""
    return name if len(name) <= width else name[: width - 3] + "..."


def tabulate_line(label: str, summary: TraceSummary) -> str:
    """The ``Output for tabulate:`` line of torch/_inductor/wrapper_benchmark.py, for this trace."""
    cells = [label, f"{summary.busy_pct:.2f}%", f"{summary.mm_conv_pct:.2f}%"]
    cells += [f"{summary.category_pct_of_window(c):.2f}%" for c in TABULATE_LINE_CATEGORIES]
    cells.append(f"{summary.window_us / 1000:.3f}ms")
    return "Output for tabulate: " + ", ".join(cells)


def summary_table(summary: TraceSummary) -> str:
    rows = [
        ("window", f"{summary.window_us:,.3f} µs ({summary.window_source})"),
        ("devices with GPU work", f"{len(summary.devices)} (ids: {', '.join(d.device for d in summary.devices)})"
         if summary.devices else "none"),
        ("GPU busy", f"{summary.busy_us:,.3f} µs"),
        ("GPU busy %", f"{summary.busy_pct:.2f}"),
        ("mm/conv %", f"{summary.mm_conv_pct:.2f}"),
        ("kernels", f"{summary.kernel_count:,} (GPU events {summary.event_count:,})"),
    ]
    if summary.overlap is not None:
        o = summary.overlap
        rows.append(
            (
                "communication overlap",
                f"{o.overlap_us:,.3f} of {o.communication_us:,.3f} µs ({o.overlap_pct_of_communication:.1f}%)",
            )
        )
    return tabulate(rows, tablefmt="simple", disable_numparse=True)


def category_table(summary: TraceSummary) -> str:
    rows = [
        (c.name, f"{c.time_us:,.3f}", f"{c.share_of_busy:.2f}", f"{c.pct_of_window:.2f}", c.count)
        for c in summary.categories
    ]
    return tabulate(
        rows,
        headers=("category", "time µs", "% of busy", "% of window", "count"),
        tablefmt="simple",
        disable_numparse=True,
    )


def kernel_table(summary: TraceSummary, width: int = 80) -> str:
    rows = [
        (shorten(k.name, width), k.category, k.count, f"{k.total_us:,.3f}", f"{k.mean_us:,.3f}", f"{k.pct_of_window:.2f}")
        for k in summary.top_kernels
    ]
    return tabulate(
        rows,
        headers=("kernel", "category", "count", "total µs", "mean µs", "% of window"),
        tablefmt="simple",
        disable_numparse=True,
    )


def trace_report(summary: TraceSummary, label: str) -> str:
    """Everything the CLI prints for one trace."""
    parts: Sequence[str] = (
        f"== {summary.path}",
        summary_table(summary),
        "",
        category_table(summary) if summary.categories else "(no GPU work in the window)",
        "",
        kernel_table(summary) if summary.top_kernels else "",
    )
    text = "\n".join(p for p in parts)
    if summary.top_other:
        text += "\nunclassified ('other') kernels: " + "; ".join(
            f"{shorten(k.name, 60)} ({k.total_us:,.1f} µs)" for k in summary.top_other[:3]
        )
    return text + "\n" + tabulate_line(label, summary)


def findings_text(findings: Optional[Sequence[Finding]]) -> str:
    """The findings of one trace, after its report ("" when they were not looked for)."""
    if findings is None:
        return ""
    if not findings:
        return "\nfindings: none"
    lines = ["", "findings (what to fix):"]
    for f in findings:
        lines.append(f"  {f.rule} [{f.severity}]: {f.message}")
        lines.append(f"      fix: {f.fix}")
    return "\n".join(lines)
