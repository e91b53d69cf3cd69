"""The test table: one plain HTML row per test (sortable, filterable by the page's script) and its detail data.

The rows are readable without script, each with an SVG bar of its categories; the detail view is
built on click from one JSON block, an entry per row (``detail_data``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence

from pytest_gpuutil.rundoc.metrics import finite_number as _finite
from pytest_gpuutil.report.tables import shorten
from pytest_gpuutil.report.html_report.comparison import BaselineView, ComparedMetric
from pytest_gpuutil.report.html_report.counters import counters_of, has_counters
from pytest_gpuutil.report.html_report.fields import (
    as_map,
    as_text,
    bar_parts,
    categories_of,
    fixed,
    mappings_in,
    memory_of,
    rounded,
)
from pytest_gpuutil.report.html_report.svg import Palette, esc, legend, sparkline, stacked_bar

if TYPE_CHECKING:
    from pytest_gpuutil.history.series import Trend

#: Threshold states of the run document's ``thresholds`` map, as the table shows them
THRESHOLD_TEXT = {"failed": "limits failed", "not_checked": "limits not checked", "passed": ""}


@dataclass(frozen=True)
class _Column:
    title: str
    sort: str  # "num", "str" or "" (not sortable)
    numeric: bool = False
    tip: str = ""


COLUMNS = (
    _Column("test", "str"),
    _Column("outcome", "str"),
    _Column("wall ms", "num", True, "the test's call phase"),
    _Column("GPU ms", "num", True, "busy time: union of GPU work over streams, summed over devices"),
    _Column("busy %", "num", True, "busy time / (window x devices)"),
    _Column("mm/conv %", "num", True, "matmul and convolution kernels, % of window"),
    _Column("attn %", "num", True, "attention kernels, % of window"),
    _Column("comm %", "num", True, "communication (NCCL) kernels, % of window"),
    _Column("peak mem MiB", "num", True, "peak allocated GPU memory; - when not measured"),
    _Column("kernels", "num", True),
    _Column("categories (% of window)", ""),
    _Column("top kernel", "str"),
    _Column("limits", "str", False, "@pytest.mark.gpu_util limits and baseline regressions"),
)
#: Last, when any test has hardware counters (so the other columns keep their places)
COUNTER_COLUMNS = (
    _Column("SM %", "num", True, "SMs active, % of peak (hardware counters); – : not measured or too short"),
    _Column("tensor %", "num", True, "tensor pipes active, % of peak (hardware counters)"),
)


def _th(column: _Column, initial: bool) -> str:
    """A header cell: sortable ones carry ``data-sort``; the initial order is marked with ``aria-sort``."""
    attrs = [f'data-sort="{column.sort}"'] if column.sort else []
    if column.numeric:
        attrs.append('class="n"')
    if column.tip:
        attrs.append(f'title="{esc(column.tip)}"')
    if initial:
        attrs.append('aria-sort="descending"')
    return f"<th {' '.join(attrs)}>{esc(column.title)}</th>" if attrs else f"<th>{esc(column.title)}</th>"


#: Top kernel names longer than this are cut in the table (the detail view has the whole name)
TOP_KERNEL_CHARS = 72
#: ... and longer than this in the detail view's list of top kernels (the JSON has the whole name)
DETAIL_KERNEL_CHARS = 400


#: The column added after the others when the page is given a run history (the script's indices stay)
TREND_COLUMN = _Column("trend", "", False, "the test's metric over its last runs in the run history, this run last")


def trend_cell(trend: Optional[Trend], regressed: bool) -> str:
    """A test's trend line with a tooltip naming the metric and its first and last values ("" without one)."""
    if trend is None:
        return ""
    shown = [v for v in trend.values if v is not None]
    unit = f" {trend.unit}" if trend.unit else ""
    title = (f"{trend.metric} over {len(trend.values)} runs, oldest first: {fixed(shown[0], 3)} … "
             f"now {fixed(shown[-1], 3)}{unit} (min {fixed(min(shown), 3)}, max {fixed(max(shown), 3)})")
    return sparkline(trend.values, title, bad=regressed)


def table_row(record: Mapping[str, Any], palette: Palette, limits: str, regressed: bool,
              extra_cells: Sequence[str] = ()) -> str:
    """One row of the test table (the cells' text is what the page's script sorts and filters on)."""
    outcome = as_text(record.get("outcome")) or "unknown"
    memory = memory_of(record)
    peak = fixed(memory.get("peak_alloc_mb"), 1) if memory else ""
    kernels = record.get("kernel_count")
    top = as_text(record.get("top_kernel"))
    cells = (
        esc(record["test"]),
        esc(outcome),
        fixed(record.get("wall_ms"), 1),
        fixed(record.get("gpu_busy_ms"), 3),
        fixed(record.get("busy_pct"), 1),
        fixed(record.get("mm_conv_pct"), 1),
        fixed(record.get("attention_pct"), 1),
        fixed(record.get("communication_pct"), 1),
        peak or "–",
        str(kernels) if isinstance(kernels, int) and not isinstance(kernels, bool) else "",
        stacked_bar(bar_parts(record), palette) if record.get("categories") else "",
        esc(shorten(top, TOP_KERNEL_CHARS)),
        esc(limits),
        *extra_cells,
    )
    css = " ".join(c for c in ("" if outcome == "passed" else f"o-{outcome}", "reg" if regressed else "") if c)
    attrs = f' class="{esc(css)}"' if css else ""
    return f'<tr tabindex="0"{attrs}><td>{"</td><td>".join(cells)}</td></tr>'


def detail_data(record: Mapping[str, Any], categories: Sequence[str], link: Optional[str],
                compared: Sequence[ComparedMetric]) -> dict[str, Any]:
    """What the detail view adds to the row's own cells (JSON for the page's script; empty parts left out)."""
    top = as_text(record.get("top_kernel"))
    detail = {
        "w": as_text(record.get("worker")),
        "gpu": [str(g) for g in as_map(record.get("gpu_busy_us_by_device"))],
        "note": as_text(record.get("note")),
        "f": {k: record.get(k) for k in ("memcpy_pct", "measure_ms") if _finite(record.get(k)) is not None},
        "c": [[categories.index(name), c.get("time_us"), c.get("share_of_busy"), c.get("pct_of_window"), c.get("count")]
              for name, c in categories_of(record)],
        "tk": top if len(top) > TOP_KERNEL_CHARS else "",
        "k": [[shorten(as_text(k.get("name")), DETAIL_KERNEL_CHARS), as_text(k.get("category")), k.get("count"),
               k.get("total_us"), k.get("pct_of_window")] for k in mappings_in(record.get("top_kernels"))],
        "g": [[as_text(g.get("device")), g.get("start_us"), g.get("dur_us")] for g in mappings_in(record.get("idle_gaps"))],
        "p": processes_of(record),
        "m": memory_of(record),
        "md": dict(as_map(record.get("memory_by_device"))) if len(as_map(record.get("memory_by_device"))) > 1 else None,
        "kb": dict(as_map(record.get("kernel_bench"))),
        "gt": dict(as_map(record.get("gpu_trace"))),
        "tr": link,
        "cmp": [[r.metric, r.baseline, r.current, r.change_text, r.limit_text, int(r.regressed), round(r.severity, 3)]
                for r in compared],
        "fd": [finding_detail(f) for f in mappings_in(record.get("findings"))],
        "hw": counters_of(record),
    }
    return rounded({k: v for k, v in detail.items() if v}, 5)


def finding_detail(f: Mapping[str, Any]) -> list[Any]:
    """A finding for the detail view: [rule, severity, message, fix, evidence] and, when it has places,
    [[file, line, function, source line, what], ...] (issue 42)."""
    row: list[Any] = [as_text(f.get("rule")), as_text(f.get("severity")), as_text(f.get("message")),
                      as_text(f.get("fix")), dict(as_map(f.get("evidence")))]
    places = [[as_text(p.get("file")), p.get("line"), as_text(p.get("function")), as_text(p.get("text")),
               as_text(p.get("what"))] for p in mappings_in(f.get("places"))]
    return row + [places] if places else row


def processes_of(record: Mapping[str, Any]) -> list[list[Any]]:
    """The test's processes when children took part: pid, program, rank, GPUs, GPU ms, peak MiB,
    where the memory figure comes from, note (the pytest process first, its program "pytest"). The
    GPU ms are each one's share of the test's (``share_ms``, where worked out), which add up to the
    test's figure; a row that shared its GPU with another at the same time says so in its note."""
    return [[p.get("pid"), as_text(p.get("program")) + (" (this pytest process)" if p.get("parent") else ""),
             as_text(p.get("rank")), ", ".join(as_text(d) for d in p.get("devices") or ()),
             p.get("gpu_ms") if p.get("share_ms") is None else p.get("share_ms"),
             p.get("peak_mb"), as_text(p.get("memory_source")),
             "; ".join(t for t in (as_text(p.get("note")), _overlap(p)) if t)]
            for p in mappings_in(record.get("processes"))]


def _overlap(process: Mapping[str, Any]) -> str:
    text = as_text(process.get("overlap"))
    return (f"{text}: the time they shared is split between them (its own GPU ms, with the GPU's time slices "
            "for the other, are in gpu_util.json)") if text else ""


#: Rows in the table as the page opens; the rest are parsed inertly and added after the first paint
FIRST_ROWS = 100


def more_rows(rows: Sequence[str]) -> str:
    """Rows beyond the first screenfuls, in a <template>: parsed but not laid out until the script adds them."""
    if not rows:
        return ""
    return (f'<template id="more-rows">{"".join(rows)}</template><noscript><p class="notice">Showing the first '
            f"{FIRST_ROWS} tests: the other {len(rows)} need JavaScript.</p></noscript>")


def table_order(tests: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The table's rows as the page opens (and the detail data's order): most GPU time first."""
    return sorted(tests, key=lambda t: (-(_finite(t.get("gpu_busy_ms")) or -1.0), t["test"]))


def tests_section(tests: Sequence[Mapping[str, Any]], palette: Palette, thresholds: Mapping[str, Any],
                  baseline: Optional[BaselineView], links: Mapping[str, str],
                  trends: Optional[Mapping[str, Trend]] = None) -> tuple[str, list[dict[str, Any]]]:
    """The test table's section (busiest tests first) and the detail data of its rows, in the same order;
    with ``trends`` (a run history), a last column of trend lines."""
    compared: dict[str, list[ComparedMetric]] = {}
    for row in baseline.rows if baseline else ():
        compared.setdefault(row.test, []).append(row)
    regressed = {r.test for r in baseline.regressions} if baseline else set()
    order = table_order(tests)
    counters = has_counters(tests)
    rows, details = [], []
    for record in order:
        state = str(thresholds.get(record["test"], ""))
        limits = ", ".join(s for s in (THRESHOLD_TEXT.get(state, state), "regressed" if record["test"] in regressed else "") if s)
        extra = ((fixed(record.get("sm_pct"), 1) or "–", fixed(record.get("tensor_pct"), 1) or "–") if counters else ())
        if trends is not None:
            extra += (trend_cell(trends.get(record["test"]), record["test"] in regressed),)
        rows.append(table_row(record, palette, limits, record["test"] in regressed, extra))
        details.append(detail_data(record, palette.order, links.get(record["test"]), compared.get(record["test"], ())))
    heads = "".join(_th(c, initial=c.title == "GPU ms") for c in (
        *COLUMNS, *(COUNTER_COLUMNS if counters else ()), *((TREND_COLUMN,) if trends is not None else ())))
    outcomes = sorted({as_text(t.get("outcome")) or "unknown" for t in tests})
    options = "".join(f'<option value="{esc(o)}">{esc(o)}</option>' for o in outcomes)
    table = (
        f'<section id="tests-section"><h2>Tests</h2><div class="controls">'
        f'<input id="filter-text" type="search" placeholder="filter by test or kernel name" aria-label="filter">'
        f'<select id="filter-outcome" aria-label="outcome"><option value="">any outcome</option>{options}</select>'
        f'<select id="filter-only" aria-label="which tests"><option value="">all tests</option>'
        f'<option value="gpu">with GPU work</option><option value="limits">limits or regressions</option>'
        f'<option value="findings">with findings</option></select>'
        f'<span id="shown">{len(tests)} tests</span><span class="legend">{legend(palette)}</span></div>'
        f'<p class="sub">Click a column to sort, a row for its details (findings, categories, memory, kernel_bench '
        f"and gpu_trace results, trace file). – : not measured.</p>"
        f'<div class="scroll"><table id="tests"><thead><tr>{heads}</tr></thead><tbody>{"".join(rows[:FIRST_ROWS])}</tbody>'
        f"</table>{more_rows(rows[FIRST_ROWS:])}</div></section>"
    )
    return table, details
