"""The HTML report: one self-contained page rendered from a run document (``gpu_util.json``).

Everything is inline (CSS, hand-written SVG, a little vanilla JavaScript for sorting, filtering
and the per-test detail view): the page loads nothing, so it opens offline and as a CI artifact.
The test table is plain HTML rows (readable without script), each with an SVG bar of its
categories; the detail view is built on click from one JSON block. ``render_report`` reads the
document as plain data and copes with fields it does not know or lacks (older files). The SVG is
plain strings, no library: a bar is a few ``<rect>``s, so 1,000 rows of them stay small.

Also here: ``PytestHtmlInterop``, which gives pytest-html's report the same per-test figures.
"""
from __future__ import annotations

import json
import math
import os
import urllib.parse
from collections import Counter
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Optional, Sequence

from pytest_gpuutil.analysis.classify import CATEGORIES
from pytest_gpuutil.gates.regression import (
    METRICS,
    Comparison,
    FailExpr,
    change_of,
    compare_records,
    format_value,
    metric_pairs,
    worsening,
)
from pytest_gpuutil.gates.regression import finite_number as _finite
from pytest_gpuutil.records import TestRecord
from pytest_gpuutil.report.ci import shorten
from pytest_gpuutil.report.files import atomic_write_text

if TYPE_CHECKING:
    from pytest_gpuutil.gates.baseline import RunDoc

DEFAULT_NAME = "report.html"
#: Memory fields a record may carry (sizes in MiB); the page's script labels them
MEMORY_FIELDS = ("peak_alloc_mb", "peak_reserved_mb", "leaked_mb", "alloc_retries", "ooms")
#: Threshold states of the run document's ``thresholds`` map, as the table shows them
THRESHOLD_TEXT = {"failed": "limits failed", "not_checked": "limits not checked", "passed": ""}
#: Bands of the busy-% histogram
BUSY_BINS = 10


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _fmt(value: Any, digits: int) -> str:
    number = _finite(value)
    return "" if number is None else f"{number:.{digits}f}"


def _round(value: Any, digits: int = 5) -> Any:
    """Numbers to ``digits`` significant figures (smaller JSON), recursively; non-finite as None."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        return float(f"{value:.{digits}g}")
    if isinstance(value, Mapping):
        return {str(k): _round(v, digits) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_round(v, digits) for v in value]
    return str(value)


# -- SVG: category colours, stacked bars, bar charts, a histogram ---------------------------------
#: A colour per built-in category (Tableau 10 and its light tints), then spares for categories of your own.
CATEGORY_COLORS: Mapping[str, str] = {
    "gemm": "#4e79a7",
    "conv": "#a0cbe8",
    "attention": "#f28e2b",
    "communication": "#e15759",
    "triton_pointwise": "#499894",
    "triton_reduction": "#86bcb6",
    "triton_persistent_reduction": "#b6992d",
    "triton_template": "#f1ce63",
    "fft": "#d37295",
    "linalg": "#ff9d9a",
    "sort_scan": "#d4a6c8",
    "normalization": "#8cd17d",
    "reduction": "#59a14f",
    "elementwise": "#b07aa1",
    "memcpy": "#76b7b2",
    "memset": "#9d7660",
    "other": "#bab0ac",
}
SPARE_COLORS = ("#fabfd2", "#d7b5a6", "#79706e", "#ffbe7d", "#8c564b", "#17becf", "#bcbd22", "#7f7f7f")
IDLE_COLOR = "#eaeef2"


def esc(text: object) -> str:
    """Text for HTML/SVG content or a quoted attribute."""
    return escape(str(text), quote=True)


def num(value: float, digits: int = 1) -> str:
    """A coordinate or width: fixed decimals without trailing zeros."""
    text = f"{value:.{digits}f}".rstrip("0").rstrip(".")
    return text if text not in ("", "-0") else "0"


@dataclass(frozen=True)
class Palette:
    """Category name -> CSS class and colour, in display order (built-ins first, then the rest by name)."""

    order: tuple[str, ...]

    @classmethod
    def of(cls, names: Iterable[str]) -> "Palette":
        present = set(names)
        known = [c for c in CATEGORIES if c in present]
        return cls(tuple(known + sorted(present - set(known))))

    def css_class(self, name: str) -> str:
        return f"k{self.order.index(name)}" if name in self.order else "kx"

    def color(self, name: str) -> str:
        if name in CATEGORY_COLORS:
            return CATEGORY_COLORS[name]
        extra = [n for n in self.order if n not in CATEGORY_COLORS]
        return SPARE_COLORS[extra.index(name) % len(SPARE_COLORS)] if name in extra else CATEGORY_COLORS["other"]


def palette_css(palette: Palette) -> str:
    """CSS rules giving each category class its colour (fill for SVG, background for legend swatches)."""
    rules = [f".{palette.css_class(n)}{{fill:{palette.color(n)};background:{palette.color(n)}}}" for n in palette.order]
    return "\n".join(rules + [f".kx{{fill:{CATEGORY_COLORS['other']};background:{CATEGORY_COLORS['other']}}}"])


def legend(palette: Palette) -> str:
    """Swatches naming each category, as HTML."""
    return "".join(f'<span><i class="{palette.css_class(n)}"></i>{esc(n)}</span>' for n in palette.order)


def _segments(parts: Sequence[tuple[str, float]]) -> list[tuple[str, float, float, float]]:
    """(name, x, width, pct) in a 0..100 box for shares given in percent, clipped to the box."""
    out, x = [], 0.0
    for name, pct in parts:
        width = min(max(pct, 0.0), 100.0 - x)
        if width >= 0.05:
            out.append((name, x, width, pct))
            x += width
    return out


def stacked_bar(parts: Sequence[tuple[str, float]], palette: Palette, css_class: str = "bar") -> str:
    """A 0-100 % stacked bar (e.g. categories as % of the test's window), sized by CSS; one tooltip."""
    segments = _segments(parts)
    rects = "".join(
        f'<rect class="{palette.css_class(name)}" x="{num(x, 2)}" width="{num(w, 2)}" height="1"/>'
        for name, x, w, _ in segments
    )
    tip = " · ".join(f"{name} {pct:.1f}%" for name, _, _, pct in segments)
    return (f'<svg class="{css_class}" viewBox="0 0 100 1" preserveAspectRatio="none">'
            f"{f'<title>{esc(tip)}</title>' if tip else ''}{rects}</svg>")


def inline_bar(parts: Sequence[tuple[str, float]], palette: Palette, width: int = 240, height: int = 14) -> str:
    """The same bar with inline colours and a fixed size (for pages without this report's CSS)."""
    rects = "".join(
        f'<rect fill="{palette.color(name)}" x="{num(x, 2)}" width="{num(w, 2)}" height="1">'
        f"<title>{esc(name)} {pct:.1f}%</title></rect>"
        for name, x, w, pct in _segments(parts)
    )
    return (f'<svg width="{width}" height="{height}" viewBox="0 0 100 1" preserveAspectRatio="none" '
            f'style="background:{IDLE_COLOR};vertical-align:middle">{rects}</svg>')


@dataclass(frozen=True)
class BarItem:
    """One bar of a horizontal bar chart."""

    label: str
    value: float
    text: str  # printed after the bar
    css_class: str = "kbar"
    tooltip: str = ""


def hbar_chart(items: Sequence[BarItem], title: str, width: int = 560, label_width: int = 200, row: int = 20) -> str:
    """Horizontal bars, one per item, longest = the largest value; labels shortened to fit."""
    if not items:
        return ""
    height = row * len(items) + 4
    largest = max((i.value for i in items), default=0.0) or 1.0
    room = max(width - label_width - max(6.2 * len(i.text) + 12 for i in items), 40.0)
    chars = max(8, label_width // 7)
    parts = [f'<svg class="chart" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
             f'aria-label="{esc(title)}">']
    for k, item in enumerate(items):
        y = k * row + 2
        w = max(room * max(item.value, 0.0) / largest, 0.0)
        label = item.label if len(item.label) <= chars else "…" + item.label[-(chars - 1):]
        tip = f"<title>{esc(item.tooltip or item.label)}</title>"
        parts.append(
            f'<g><text x="{label_width - 6}" y="{y + row * 0.68:.1f}" text-anchor="end">{esc(label)}</text>'
            f'<rect class="{item.css_class}" x="{label_width}" y="{y + 3}" width="{num(w)}" height="{row - 7}"/>'
            f'<text x="{label_width + w + 5:.1f}" y="{y + row * 0.68:.1f}" class="v">{esc(item.text)}</text>{tip}</g>'
        )
    parts.append("</svg>")
    return "".join(parts)


def histogram(counts: Sequence[int], labels: Sequence[str], title: str, width: int = 560, height: int = 180) -> str:
    """Vertical bars of counts (e.g. tests per busy-% band), the count above each bar."""
    if not counts:
        return ""
    top, bottom, left = 16, 22, 8
    slot = (width - 2 * left) / len(counts)
    largest = max(counts) or 1
    usable = height - top - bottom
    parts = [f'<svg class="chart" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
             f'aria-label="{esc(title)}">']
    for k, (count, label) in enumerate(zip(counts, labels)):
        h = usable * count / largest
        x = left + k * slot
        parts.append(
            f'<g><rect class="kbar" x="{num(x + 3)}" y="{num(top + usable - h)}" width="{num(slot - 6)}" height="{num(h)}"/>'
            f'<text x="{num(x + slot / 2)}" y="{num(top + usable - h - 3)}" text-anchor="middle" class="v">{count}</text>'
            f'<text x="{num(x + slot / 2)}" y="{height - 6}" text-anchor="middle">{esc(label)}</text>'
            f"<title>{esc(label)}: {count} tests</title></g>"
        )
    parts.append(f'<line x1="{left}" x2="{width - left}" y1="{top + usable}" y2="{top + usable}" class="axis"/></svg>')
    return "".join(parts)


# -- baseline comparison ------------------------------------------------------------------------------
@dataclass(frozen=True)
class ComparedMetric:
    """One metric of one test, baseline against now."""

    test: str
    metric: str
    baseline: float
    current: float
    change_text: str
    limit_text: str
    regressed: bool
    #: how far toward its limit it moved (1.0 = at the limit; negative = better)
    severity: float


@dataclass(frozen=True)
class BaselineView:
    """What the report shows of a comparison: every compared metric, regressions first."""

    label: str
    machine_id: str
    created: Optional[str]
    limits: tuple[str, ...]
    rows: tuple[ComparedMetric, ...]
    compared: int
    new_tests: int
    missing_tests: int

    @property
    def regressions(self) -> tuple[ComparedMetric, ...]:
        return tuple(r for r in self.rows if r.regressed)


def _change(expr: FailExpr, base: float, now: float) -> tuple[str, float]:
    """The change as the regression table writes it, and how bad it is relative to the limit."""
    found = change_of(expr, base, now)
    if found is None:
        return "n/a", 0.0
    change, text = found
    worse = worsening(expr, change)
    return text, worse / expr.threshold if expr.threshold > 0 else worse


def baseline_view(
    label: str,
    baseline: Mapping[str, TestRecord] | Iterable[TestRecord],
    current: Mapping[str, TestRecord] | Iterable[TestRecord],
    exprs: Sequence[FailExpr],
    *,
    machine_id: str = "",
    created: Optional[str] = None,
    comparison: Optional[Comparison] = None,
) -> BaselineView:
    """Every metric that ``exprs`` name, for every test in both runs; regressions first.

    The regressions are those of ``compare_records`` (computed here unless ``comparison`` is given),
    so the page and the gate never disagree.
    """
    base = {r.test: r for r in (baseline.values() if isinstance(baseline, Mapping) else baseline)}
    now = {r.test: r for r in (current.values() if isinstance(current, Mapping) else current)}
    result = comparison if comparison is not None else compare_records(base, now, exprs)
    regressed = {(r.test, r.metric) for r in result.regressions}
    rows = []
    for test in result.compared:
        if test not in base or test not in now:
            continue
        for expr in exprs:
            if expr.metric not in METRICS:
                continue
            for name, then, current_value in metric_pairs(base[test], now[test], expr.metric):
                text, severity = _change(expr, then, current_value)
                rows.append(ComparedMetric(test, name, then, current_value, text, expr.threshold_text,
                                           (test, name) in regressed, severity))
    rows.sort(key=lambda r: (not r.regressed, -r.severity, r.test, r.metric))
    return BaselineView(label, machine_id, created, tuple(e.text for e in exprs), tuple(rows),
                        len(result.compared), len(result.new_tests), len(result.missing_tests))


def baseline_view_of(run: RunDoc, current: Iterable[TestRecord], exprs: Sequence[FailExpr],
                     comparison: Optional[Comparison] = None, label: Optional[str] = None) -> BaselineView:
    """``baseline_view`` for a baseline read with ``gates.baseline.load_run_doc``."""
    return baseline_view(label or str(run.path), run.records, list(current), exprs, machine_id=run.machine_id,
                         created=run.created, comparison=comparison)


# -- trace links ------------------------------------------------------------------------------------------
def trace_links(tests: Iterable[str], traces_dir: Path, page_dir: Path, name_of: Callable[[str], str]) -> dict[str, str]:
    """Test id -> link (relative to the page) to ``traces_dir/<name_of(test)>.json.gz`` for those that exist."""
    try:
        present = set(os.listdir(traces_dir))
    except OSError:
        return {}
    links = {}
    for test in tests:
        name = f"{name_of(test)}.json.gz"
        if name in present:
            path = Path(traces_dir) / name
            try:
                links[test] = urllib.parse.quote(Path(os.path.relpath(path, page_dir)).as_posix())
            except ValueError:  # another drive (Windows)
                links[test] = path.resolve().as_uri()
    return links


# -- the page ---------------------------------------------------------------------------------------------
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


def _categories(record: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """The record's categories, largest time first, skipping malformed entries."""
    items = [(str(k), v) for k, v in _map(record.get("categories")).items() if isinstance(v, Mapping)]
    return sorted(items, key=lambda kv: -(_finite(kv[1].get("time_us")) or 0.0))


def _bar_parts(record: Mapping[str, Any]) -> list[tuple[str, float]]:
    return [(name, _finite(c.get("pct_of_window")) or 0.0) for name, c in _categories(record)]


def _memory(record: Mapping[str, Any]) -> Optional[dict[str, Any]]:
    """The record's memory figures, or None when it has none (not measured)."""
    found = {key: record[key] for key in MEMORY_FIELDS if key in record and record[key] is not None}
    return found or None


def _totals(doc: Mapping[str, Any], tests: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The document's totals, filled in from the records where an older file lacks them."""
    measured = [t for t in tests if _finite(t.get("gpu_busy_ms")) is not None]
    gpu_ms = sum(_finite(t.get("gpu_busy_ms")) or 0.0 for t in measured)
    wall = sum(_finite(t.get("wall_ms")) or 0.0 for t in measured)
    capacity = sum((_finite(t.get("wall_ms")) or 0.0) * max(1, len(t.get("devices") or ())) for t in measured)
    derived = {
        "tests": len(tests),
        "profiled": len(measured),
        "with_gpu_work": sum(1 for t in measured if t.get("kernel_count") or t.get("gpu_busy_ms")),
        "gpu_busy_ms": gpu_ms,
        "profiled_wall_ms": wall,
        "busy_pct": 100.0 * gpu_ms / capacity if capacity > 0 else 0.0,
    }
    given = _map(doc.get("totals"))
    return {**derived, **{k: v for k, v in given.items() if v is not None}}


def _card(value: str, label: str, sub: str = "", css: str = "") -> str:
    return (f'<div class="card {css}"><span>{esc(label)}</span><b>{esc(value)}</b>'
            f'{f"<small>{esc(sub)}</small>" if sub else ""}</div>')


def _header(doc: Mapping[str, Any], tests: Sequence[Mapping[str, Any]], totals: Mapping[str, Any],
            baseline: Optional[BaselineView]) -> str:
    info = _map(doc.get("machine_info"))
    model, count = info.get("gpu_model"), info.get("gpu_count")
    gpu = f"{count or 0} × {model}" if model else "no GPU"
    facts = [f"<b>{esc(gpu)}</b>"]
    for key, label in (("driver", "driver"), ("cuda", "CUDA"), ("torch", "torch"), ("python", "Python"), ("host", "host")):
        if info.get(key):
            facts.append(f"{label} {esc(info[key])}")
    created = _text(doc.get("created")) or "unknown date"
    commit = _text(info.get("git_commit"))
    sub = [esc(created.replace("T", " ")), f"commit <code>{esc(commit[:12])}</code>" if commit else "no git commit"]
    if info.get("argv"):
        sub.append(f"<code>pytest {esc(info['argv'])}</code>")
    outcomes = Counter(_text(t.get("outcome")) or "unknown" for t in tests)
    outcome_text = ", ".join(f"{n} {o}" for o, n in sorted(outcomes.items(), key=lambda kv: (-kv[1], kv[0])))
    cards = [
        _card(f"{_finite(totals.get('busy_pct')) or 0.0:.1f}%", "session GPU busy", "GPU work ÷ profiled test time"),
        _card(f"{_finite(totals.get('gpu_busy_ms')) or 0.0:.3f} ms", "GPU time",
              f"in {(_finite(totals.get('profiled_wall_ms')) or 0.0) / 1000:.2f} s of profiled calls"),
        _card(str(totals.get("tests", len(tests))), "tests",
              f"{totals.get('profiled', 0)} profiled, {totals.get('with_gpu_work', 0)} with GPU work"),
    ]
    startup = _finite(totals.get("startup_s"))
    if startup is not None:
        cards.append(_card(f"{startup:.3f} s", "profiler start-up", "once, not charged to any test"))
    cost = _finite(totals.get("measure_ms"))
    if cost:
        share, test_s = _finite(totals.get("measure_share_pct")), _finite(totals.get("test_s"))
        cards.append(_card(f"{cost / 1000:.3f} s", "measurement cost",
                           f"{share:.1f}% of the {test_s:.2f} s the tests took" if share is not None and test_s else ""))
    if baseline is not None:
        bad = baseline.regressions
        cards.append(_card(str(len(bad)), "regressions",
                           f"in {len({r.test for r in bad})} of {baseline.compared} tests compared",
                           "bad" if bad else "good"))
    return (f'<header><h1>GPU utilization</h1><p class="sub">{" · ".join(sub)}</p>'
            f'<p class="machine">{" · ".join(facts)}</p><p class="sub">{esc(outcome_text)}</p>'
            f'<div class="cards">{"".join(cards)}</div></header>')


CMP_HEAD = ('<thead><tr><th>test</th><th>metric</th><th class="n">baseline</th><th class="n">now</th>'
            '<th class="n">change</th><th class="n">limit</th></tr></thead>')


def _baseline_section(view: BaselineView) -> str:
    """Regressions as a table; the metrics within their limits are listed by the page's script on demand."""
    bad = view.regressions
    fine = len(view.rows) - len(bad)
    about = [f"baseline <code>{esc(view.label)}</code>"]
    if view.machine_id:
        about.append(f"machine {esc(view.machine_id)}")
    if view.created:
        about.append(f"saved {esc(view.created)}")
    about.append(f"limits <code>{esc(' '.join(view.limits))}</code>")
    counts = f"{view.compared} tests compared"
    if view.new_tests:
        counts += f", {view.new_tests} without a baseline record"
    if view.missing_tests:
        counts += f", {view.missing_tests} only in the baseline"
    verdict = (f'<p class="verdict bad">{len(bad)} regression(s) in {len({r.test for r in bad})} test(s)</p>' if bad
               else '<p class="verdict good">no regressions</p>')
    body = ""
    if bad:
        rows = "".join(
            f'<tr class="reg"><td class="t">{esc(r.test)}</td><td>{esc(r.metric)}<b class="badge">regression</b></td>'
            f'<td class="n">{format_value(r.baseline)}</td><td class="n">→ {format_value(r.current)}</td>'
            f'<td class="n">{esc(r.change_text)}</td><td class="n">{esc(r.limit_text)}</td></tr>'
            for r in bad
        )
        body = f'<table class="cmp">{CMP_HEAD}<tbody>{rows}</tbody></table>'
    if fine:
        body += (f'<details id="cmp-rest"><summary>{fine} compared metric(s) within their limits, closest to the '
                 f'limit first</summary><table class="cmp">{CMP_HEAD}<tbody></tbody></table></details>')
    return (f'<section id="baseline"><h2>Against the baseline</h2><p class="sub">{" · ".join(about)}</p>'
            f'{verdict}<p class="sub">{esc(counts)}</p>{body}</section>')


def _session_charts(tests: Sequence[Mapping[str, Any]], totals: Mapping[str, Any], palette: Palette) -> str:
    by_category: dict[str, float] = {}
    for record in tests:
        for name, c in _categories(record):
            by_category[name] = by_category.get(name, 0.0) + (_finite(c.get("time_us")) or 0.0) / 1000
    busy = _finite(totals.get("gpu_busy_ms")) or 0.0
    category_items = [
        BarItem(name, ms, f"{ms:.3f} ms" + (f" · {100 * ms / busy:.1f}% of busy" if busy else ""), palette.css_class(name))
        for name, ms in sorted(by_category.items(), key=lambda kv: -kv[1])
    ]
    working = [t for t in tests if (_finite(t.get("gpu_busy_ms")) or 0.0) > 0]
    top = sorted(working, key=lambda t: (-(_finite(t.get("gpu_busy_ms")) or 0.0), str(t.get("test"))))[:15]
    top_items = [
        BarItem(str(t["test"]).split("/")[-1], _finite(t.get("gpu_busy_ms")) or 0.0,
                f"{_finite(t.get('gpu_busy_ms')) or 0.0:.3f} ms · {_fmt(t.get('busy_pct'), 1)}% busy",
                palette.css_class(_categories(t)[0][0]) if _categories(t) else "kbar", str(t["test"]))
        for t in top
    ]
    counts = [0] * BUSY_BINS
    for t in working:
        pct = min(max(_finite(t.get("busy_pct")) or 0.0, 0.0), 100.0)
        counts[min(int(pct // (100 / BUSY_BINS)), BUSY_BINS - 1)] += 1
    labels = [f"{k * 10}–{k * 10 + 10}" for k in range(BUSY_BINS)]
    figures = []
    if category_items:
        figures.append(f"<figure><figcaption>GPU time by category</figcaption>{hbar_chart(category_items, 'GPU time by category')}"
                       '<p class="note">Categories can overlap (communication beside compute), so they may add up to '
                       "more than the busy time.</p></figure>")
    if top_items:
        figures.append(f"<figure><figcaption>Top tests by GPU time</figcaption>"
                       f"{hbar_chart(top_items, 'Top tests by GPU time')}<p class=\"note\">Bar colour: the test's "
                       "largest category.</p></figure>")
    if working:
        figures.append(f"<figure><figcaption>Busy % distribution ({len(working)} tests with GPU work)</figcaption>"
                       f"{histogram(counts, labels, 'Busy % distribution')}</figure>")
    if not figures:
        return ('<section id="session"><h2>Session</h2><p class="notice">No GPU work was measured in this run '
                "(no CUDA device, or no test launched GPU work): the GPU fields are empty.</p></section>")
    return f'<section id="session"><h2>Session</h2><div class="charts">{"".join(figures)}</div></section>'


def _gpu_section(doc: Mapping[str, Any], tests: Sequence[Mapping[str, Any]]) -> str:
    gpus = [g for g in (doc.get("gpus") or ()) if isinstance(g, Mapping)]
    workers: dict[str, dict[str, Any]] = {}
    for t in tests:
        entry = workers.setdefault(_text(t.get("worker")) or "main", {"ms": 0.0, "tests": 0, "gpus": set()})
        entry["ms"] += _finite(t.get("gpu_busy_ms")) or 0.0
        entry["tests"] += 1
        entry["gpus"].update(str(g) for g in _map(t.get("gpu_busy_us_by_device")))
    if len(gpus) <= 1 and set(workers) <= {"main"}:
        return ""
    gpu_items = [
        BarItem(f"GPU {g.get('gpu')}", _finite(g.get("busy_ms")) or 0.0,
                f"{_finite(g.get('busy_ms')) or 0.0:.3f} ms · {g.get('tests', 0)} tests · "
                f"{', '.join(str(w) for w in g.get('workers') or ())}")
        for g in gpus
    ]
    worker_items = [
        BarItem(name, w["ms"], f"{w['ms']:.3f} ms · {w['tests']} tests"
                + (f" · GPU {', '.join(sorted(w['gpus']))}" if w["gpus"] else ""))
        for name, w in sorted(workers.items())
    ]
    figures = "".join(
        f"<figure><figcaption>{caption}</figcaption>{hbar_chart(items, caption, label_width=90)}</figure>"
        for caption, items in (("Busy time per physical GPU", gpu_items), ("Busy time per worker", worker_items)) if items
    )
    return f'<section id="gpus"><h2>GPUs and workers</h2><div class="charts">{figures}</div></section>'


#: Top kernel names longer than this are cut in the table (the detail view has the whole name)
TOP_KERNEL_CHARS = 72
#: ... and longer than this in the detail view's list of top kernels (the JSON has the whole name)
DETAIL_KERNEL_CHARS = 400


def _row(record: Mapping[str, Any], palette: Palette, limits: str, regressed: bool) -> str:
    """One row of the test table (the cells' text is what the page's script sorts and filters on)."""
    outcome = _text(record.get("outcome")) or "unknown"
    memory = _memory(record)
    peak = _fmt(memory.get("peak_alloc_mb"), 1) if memory else ""
    kernels = record.get("kernel_count")
    top = _text(record.get("top_kernel"))
    cells = (
        esc(record["test"]),
        esc(outcome),
        _fmt(record.get("wall_ms"), 1),
        _fmt(record.get("gpu_busy_ms"), 3),
        _fmt(record.get("busy_pct"), 1),
        _fmt(record.get("mm_conv_pct"), 1),
        _fmt(record.get("attention_pct"), 1),
        _fmt(record.get("communication_pct"), 1),
        peak or "–",
        str(kernels) if isinstance(kernels, int) and not isinstance(kernels, bool) else "",
        stacked_bar(_bar_parts(record), palette) if record.get("categories") else "",
        esc(shorten(top, TOP_KERNEL_CHARS)),
        esc(limits),
    )
    css = " ".join(c for c in ("" if outcome == "passed" else f"o-{outcome}", "reg" if regressed else "") if c)
    attrs = f' class="{esc(css)}"' if css else ""
    return f'<tr tabindex="0"{attrs}><td>{"</td><td>".join(cells)}</td></tr>'


def _detail(record: Mapping[str, Any], categories: Sequence[str], link: Optional[str],
            compared: Sequence[ComparedMetric]) -> dict[str, Any]:
    """What the detail view adds to the row's own cells (JSON for the page's script; empty parts left out)."""
    top = _text(record.get("top_kernel"))
    detail = {
        "w": _text(record.get("worker")),
        "gpu": [str(g) for g in _map(record.get("gpu_busy_us_by_device"))],
        "note": _text(record.get("note")),
        "f": {k: record.get(k) for k in ("memcpy_pct", "measure_ms") if _finite(record.get(k)) is not None},
        "c": [[categories.index(name), c.get("time_us"), c.get("share_of_busy"), c.get("pct_of_window"), c.get("count")]
              for name, c in _categories(record)],
        "tk": top if len(top) > TOP_KERNEL_CHARS else "",
        "k": [[shorten(_text(k.get("name")), DETAIL_KERNEL_CHARS), _text(k.get("category")), k.get("count"),
               k.get("total_us"), k.get("pct_of_window")] for k in _list(record.get("top_kernels"))],
        "g": [[_text(g.get("device")), g.get("start_us"), g.get("dur_us")] for g in _list(record.get("idle_gaps"))],
        "m": _memory(record),
        "md": dict(_map(record.get("memory_by_device"))) if len(_map(record.get("memory_by_device"))) > 1 else None,
        "kb": dict(_map(record.get("kernel_bench"))),
        "gt": dict(_map(record.get("gpu_trace"))),
        "tr": link,
        "cmp": [[r.metric, r.baseline, r.current, r.change_text, r.limit_text, int(r.regressed), round(r.severity, 3)]
                for r in compared],
    }
    return _round({k: v for k, v in detail.items() if v}, 5)


def _list(value: Any) -> list[Mapping[str, Any]]:
    """The mappings in a record's list field (anything else in it, or the field itself, ignored)."""
    return [item for item in value if isinstance(item, Mapping)] if isinstance(value, (list, tuple)) else []


def _json_script(data: Any) -> str:
    """JSON safe inside a <script> element (no "<" can close it)."""
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return text.replace("<", "\\u003c").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


#: Rows in the table as the page opens; the rest are parsed inertly and added after the first paint
FIRST_ROWS = 100


def _more_rows(rows: Sequence[str]) -> str:
    """Rows beyond the first screenfuls, in a <template>: parsed but not laid out until the script adds them."""
    if not rows:
        return ""
    return (f'<template id="more-rows">{"".join(rows)}</template><noscript><p class="notice">Showing the first '
            f"{FIRST_ROWS} tests: the other {len(rows)} need JavaScript.</p></noscript>")


def render_report(doc: Mapping[str, Any], baseline: Optional[BaselineView] = None,
                  links: Optional[Mapping[str, str]] = None) -> str:
    """The whole page for a run document (the dict ``gpu_util.json`` holds), as one HTML string."""
    tests = [t for t in (doc.get("tests") or ()) if isinstance(t, Mapping) and isinstance(t.get("test"), str)]
    totals = _totals(doc, tests)
    thresholds = _map(doc.get("thresholds"))
    palette = Palette.of(name for t in tests for name, _ in _categories(t))
    compared: dict[str, list[ComparedMetric]] = {}
    for row in baseline.rows if baseline else ():
        compared.setdefault(row.test, []).append(row)
    regressed = {r.test for r in baseline.regressions} if baseline else set()
    order = sorted(tests, key=lambda t: (-(_finite(t.get("gpu_busy_ms")) or -1.0), t["test"]))
    rows, details = [], []
    for record in order:
        state = str(thresholds.get(record["test"], ""))
        limits = ", ".join(s for s in (THRESHOLD_TEXT.get(state, state), "regressed" if record["test"] in regressed else "") if s)
        rows.append(_row(record, palette, limits, record["test"] in regressed))
        details.append(_detail(record, palette.order, (links or {}).get(record["test"]), compared.get(record["test"], ())))
    heads = "".join(_th(c, initial=c.title == "GPU ms") for c in COLUMNS)
    outcomes = sorted({_text(t.get("outcome")) or "unknown" for t in tests})
    options = "".join(f'<option value="{esc(o)}">{esc(o)}</option>' for o in outcomes)
    table = (
        f'<section id="tests-section"><h2>Tests</h2><div class="controls">'
        f'<input id="filter-text" type="search" placeholder="filter by test or kernel name" aria-label="filter">'
        f'<select id="filter-outcome" aria-label="outcome"><option value="">any outcome</option>{options}</select>'
        f'<select id="filter-only" aria-label="which tests"><option value="">all tests</option>'
        f'<option value="gpu">with GPU work</option><option value="limits">limits or regressions</option></select>'
        f'<span id="shown">{len(tests)} tests</span><span class="legend">{legend(palette)}</span></div>'
        f'<p class="sub">Click a column to sort, a row for its details (categories, memory, kernel_bench and '
        f"gpu_trace results, trace file). – : not measured.</p>"
        f'<div class="scroll"><table id="tests"><thead><tr>{heads}</tr></thead><tbody>{"".join(rows[:FIRST_ROWS])}</tbody>'
        f"</table>{_more_rows(rows[FIRST_ROWS:])}</div></section>"
    )
    info = _map(doc.get("machine_info"))
    title = f"GPU utilization · {info.get('gpu_model') or 'no GPU'} · {_text(doc.get('created'))}"
    data = _json_script({"categories": [[name, palette.css_class(name)] for name in palette.order], "tests": details})
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1"><title>{esc(title)}</title>'
        f"<style>{CSS}\n{palette_css(palette)}</style></head><body><main>"
        f"{_header(doc, tests, totals, baseline)}"
        f"{_baseline_section(baseline) if baseline else ''}"
        f"{_session_charts(tests, totals, palette)}{_gpu_section(doc, tests)}{table}"
        f'<footer>pytest-gpuutil HTML report · one self-contained file: no network, nothing loaded from elsewhere. '
        f"Trace files open in Perfetto (ui.perfetto.dev, Open trace file) or with <code>gpuutil analyze</code>.</footer>"
        f'</main><script type="application/json" id="gu-data">{data}</script><script>{SCRIPT}</script></body></html>\n'
    )


def write_html_report(path: str | os.PathLike[str], doc: Mapping[str, Any], *, baseline: Optional[BaselineView] = None,
                      traces_dir: Optional[Path] = None, trace_name: Optional[Callable[[str], str]] = None) -> Path:
    """Render and write the page atomically; links to the trace files in ``traces_dir`` that exist."""
    target = Path(path)
    links = {}
    if traces_dir is not None and trace_name is not None:
        names = [t["test"] for t in doc.get("tests") or () if isinstance(t, Mapping) and isinstance(t.get("test"), str)]
        links = trace_links(names, traces_dir, target.parent.resolve(), trace_name)
    return atomic_write_text(target, render_report(doc, baseline, links))


# -- pytest-html ----------------------------------------------------------------------------------------
def record_extra_html(record: Mapping[str, Any]) -> str:
    """A test's GPU figures and category bar as an HTML fragment with inline styles (pytest-html extras)."""
    parts = _bar_parts(record)
    palette = Palette.of(name for name, _ in parts)
    figures = " · ".join(
        f"{label} {value}" for label, value in (
            ("GPU", f"{_fmt(record.get('gpu_busy_ms'), 3)} ms"), ("busy", f"{_fmt(record.get('busy_pct'), 1)}%"),
            ("mm/conv", f"{_fmt(record.get('mm_conv_pct'), 1)}%"), ("attention", f"{_fmt(record.get('attention_pct'), 1)}%"),
            ("communication", f"{_fmt(record.get('communication_pct'), 1)}%"),
            ("kernels", str(record.get("kernel_count") if record.get("kernel_count") is not None else "")),
        )
    )
    memory = _memory(record)
    swatches = " ".join(
        f'<span style="white-space:nowrap"><i style="display:inline-block;width:9px;height:9px;background:'
        f'{palette.color(name)}"></i> {esc(name)} {pct:.1f}%</span>' for name, pct in parts
    )
    top = _text(record.get("top_kernel"))
    return (
        '<div class="gpuutil" style="font:13px/1.5 sans-serif;margin:4px 0">'
        f"<b>GPU utilization</b> (pytest-gpuutil): {esc(figures)}"
        + (f" · peak {_fmt(memory.get('peak_alloc_mb'), 1)} MiB" if memory and "peak_alloc_mb" in memory else "")
        + f"<br>{inline_bar(parts, palette)} <small>categories, % of the test's window</small><br>{swatches}"
        + (f'<br>top kernel: <code style="word-break:break-all">{esc(top)}</code>' if top else "")
        + (f"<br>note: {esc(record['note'])}" if _text(record.get("note")) else "")
        + "</div>"
    )


class PytestHtmlInterop:
    """pytest-html: each test's row gains GPU ms and busy % columns, and its extras the figures and bar.

    Registered on the controller only when pytest-html writes a report. pytest-html builds a test's
    row when the test's teardown report is logged; the plugin then builds every record at its
    test's teardown (as for JUnit files), and the record travels on that report, so this reads it
    from there and adds it before pytest-html (which logs last) renders the row.
    """

    def __init__(self) -> None:
        self.records: dict[str, Mapping[str, Any]] = {}

    def pytest_runtest_logreport(self, report: Any) -> None:
        batch = getattr(report, "gpu_util", None)
        if report.when != "teardown" or not batch:
            return
        for payload in batch.get("payloads", ()):
            record = payload.get("record") or {}
            if isinstance(record.get("test"), str):
                self.records[record["test"]] = record
        own = self.records.get(report.nodeid)
        if own is not None and _finite(own.get("gpu_busy_ms")) is not None:  # measured on a GPU
            from pytest_html import extras

            report.extras = [*getattr(report, "extras", []), extras.html(record_extra_html(own))]

    def pytest_html_results_table_header(self, cells: list) -> None:
        cells.insert(3, '<th title="GPU busy time (pytest-gpuutil)">GPU ms</th>')
        cells.insert(4, '<th title="GPU busy % of the call phase (pytest-gpuutil)">GPU busy %</th>')

    def pytest_html_results_table_row(self, report: Any, cells: list) -> None:
        record = self.records.get(getattr(report, "nodeid", ""), {})
        cells.insert(3, f'<td class="col-gpu-ms">{_fmt(record.get("gpu_busy_ms"), 3)}</td>')
        cells.insert(4, f'<td class="col-gpu-busy">{_fmt(record.get("busy_pct"), 1)}</td>')


# -- the page's style and script ---------------------------------------------------------------------------
CSS = """
:root{--fg:#1f2328;--muted:#59636e;--line:#d1d9e0;--soft:#f6f8fa;--bad:#cf222e;--badbg:#ffebe9;--good:#1a7f37}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",sans-serif;color:var(--fg);background:#fff}
main{max-width:1600px;margin:0 auto;padding:16px 24px 40px}
h1{font-size:24px;margin:0 0 2px}
h2{font-size:17px;margin:26px 0 8px;padding-bottom:4px;border-bottom:1px solid var(--line)}
code{font:12px ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;background:var(--soft);padding:0 3px;border-radius:3px}
.sub{color:var(--muted);margin:2px 0}
.machine{margin:6px 0 2px;font-size:15px}
.cards{display:flex;flex-wrap:wrap;gap:10px;margin:12px 0 0}
.card{border:1px solid var(--line);border-radius:8px;padding:8px 14px;min-width:150px}
.card span{display:block;color:var(--muted);font-size:12px}
.card b{display:block;font-size:22px;line-height:1.3}
.card small{color:var(--muted)}
.card.bad{border-color:var(--bad);background:var(--badbg)}.card.bad b{color:var(--bad)}.card.good b{color:var(--good)}
.verdict{font-weight:600;margin:6px 0}.verdict.bad{color:var(--bad)}.verdict.good{color:var(--good)}
.notice{background:var(--soft);border:1px solid var(--line);border-radius:6px;padding:8px 12px}
table{border-collapse:collapse;font-size:13px}
th,td{padding:3px 8px;border-bottom:1px solid var(--line);text-align:left;vertical-align:middle}
th{background:var(--soft);font-weight:600;position:sticky;top:0}
.n,#tests td:nth-child(n+3):nth-child(-n+10){text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.t,#tests td:first-child{overflow-wrap:anywhere;min-width:220px;max-width:460px}
#tests td:nth-child(13){white-space:nowrap}
#tests td:nth-child(12){max-width:260px;overflow:hidden;text-overflow:ellipsis;white-space:nowrap;font:12px ui-monospace,Menlo,Consolas,monospace}
.scroll{overflow-x:auto}
#tests th[data-sort]{cursor:pointer;user-select:none;white-space:nowrap}
#tests th[aria-sort=ascending]::after{content:" \\25B2"}#tests th[aria-sort=descending]::after{content:" \\25BC"}
#tests tbody tr{cursor:pointer}#tests tbody tr:hover,#tests tbody tr[aria-expanded=true]{background:#eef4fb}
tr.o-failed td:nth-child(2),tr.o-error td:nth-child(2),tr.o-xpassed td:nth-child(2){color:var(--bad);font-weight:600}
tr.o-skipped td:nth-child(2),tr.o-xfailed td:nth-child(2){color:var(--muted)}
tr.reg{background:var(--badbg)}
.badge{margin-left:6px;font-size:11px;color:#fff;background:var(--bad);border-radius:8px;padding:0 6px;font-weight:600}
svg.bar{display:block;width:150px;height:12px;background:#eaeef2}
svg.chart{max-width:100%;height:auto}
svg.chart text{font-size:11px;fill:var(--fg)}svg.chart text.v{fill:var(--muted)}
svg .kbar{fill:#4e79a7}svg .axis{stroke:var(--line)}
.charts{display:grid;grid-template-columns:repeat(auto-fit,minmax(460px,1fr));gap:14px}
figure{margin:0;border:1px solid var(--line);border-radius:8px;padding:10px 12px}
figcaption{font-weight:600;margin-bottom:6px}
.note{color:var(--muted);font-size:12px;margin:4px 0 0}
.controls{display:flex;flex-wrap:wrap;gap:10px;align-items:center;margin:8px 0}
.controls input{min-width:260px;padding:4px 8px}
.controls select{padding:3px 6px}
#shown{color:var(--muted)}
.legend span{display:inline-flex;align-items:center;margin-right:10px;font-size:12px}
.legend i{display:inline-block;width:10px;height:10px;margin-right:4px;border-radius:2px}
details{margin:8px 0}summary{cursor:pointer;color:var(--muted)}
tr.detail>td{background:var(--soft);padding:10px 16px 14px}
.dv h3{margin:0 0 6px;font-size:15px;overflow-wrap:anywhere}
.dv h4{margin:12px 0 4px;font-size:13px}
.dv .kv{display:flex;flex-wrap:wrap;gap:4px 18px}
.dv .kv b{font-weight:600}
.dv table{background:#fff}
.dv .share{display:inline-block;height:10px;vertical-align:middle;min-width:1px}
.dv .mono{font:12px ui-monospace,Menlo,Consolas,monospace;overflow-wrap:anywhere}
footer{margin-top:28px;color:var(--muted);font-size:12px}
"""

SCRIPT = r"""
(function () {
  "use strict";
  var DATA = JSON.parse(document.getElementById("gu-data").textContent);
  var table = document.getElementById("tests");
  var body = table.tBodies[0];
  var heads = Array.prototype.slice.call(table.tHead.rows[0].cells);
  var more = document.getElementById("more-rows");
  var byIndex = Array.prototype.slice.call(body.rows).concat(more ? Array.prototype.slice.call(more.content.children) : []);
  var rows = byIndex.slice();
  // The rows beyond the first screenfuls join the table after the first paint (or when a sort,
  // filter or detail view needs them), so the page opens before 1,000 rows are laid out. A timer
  // backs the frame up: where no frame comes (some headless browsers), the rows still join.
  function showAll() {
    if (more) {
      body.appendChild(more.content);
      more = null;
      document.documentElement.setAttribute("data-gu-rows", "all");
      document.dispatchEvent(new Event("gu-rows"));
    }
  }
  window.guReport = { showAll: showAll };
  if (more) {
    requestAnimationFrame(function () { setTimeout(showAll, 0); });
    setTimeout(showAll, 200);
  } else document.documentElement.setAttribute("data-gu-rows", "all");
  var C = { test: 0, outcome: 1, wall: 2, gpu: 3, busy: 4, mm: 5, attn: 6, comm: 7, mem: 8, kernels: 9, top: 11, limits: 12 };
  byIndex.forEach(function (r, i) { r.guIndex = i; });

  function cellText(row, col) { return row.cells[col].textContent.trim(); }
  function cellKey(row, col, numeric) {
    var text = cellText(row, col);
    if (numeric) { var v = parseFloat(text); return isNaN(v) ? null : v; }
    return text === "" ? null : text.toLowerCase();
  }

  function sortBy(th) {
    showAll();
    var col = heads.indexOf(th), numeric = th.getAttribute("data-sort") === "num";
    var now = th.getAttribute("aria-sort");
    var dir = now === "descending" ? 1 : now === "ascending" ? -1 : numeric ? -1 : 1;
    heads.forEach(function (h) { h.removeAttribute("aria-sort"); });
    th.setAttribute("aria-sort", dir > 0 ? "ascending" : "descending");
    var keyed = rows.map(function (r, n) { return { r: r, k: cellKey(r, col, numeric), n: n }; });
    keyed.sort(function (a, b) {
      if (a.k === b.k) return a.n - b.n;
      if (a.k === null) return 1;
      if (b.k === null) return -1;
      return (a.k < b.k ? -1 : 1) * dir;
    });
    var frag = document.createDocumentFragment();
    keyed.forEach(function (e) { frag.appendChild(e.r); if (e.r.guDetail) frag.appendChild(e.r.guDetail); });
    body.appendChild(frag);
    rows = keyed.map(function (e) { return e.r; });
  }
  heads.forEach(function (th) {
    if (th.hasAttribute("data-sort")) th.addEventListener("click", function () { sortBy(th); });
  });

  var text = document.getElementById("filter-text");
  var outcome = document.getElementById("filter-outcome");
  var only = document.getElementById("filter-only");
  var shown = document.getElementById("shown");
  function applyFilter() {
    showAll();
    var q = text.value.trim().toLowerCase(), o = outcome.value, which = only.value, count = 0;
    rows.forEach(function (r) {
      var d = DATA.tests[r.guIndex];
      var ok = (!q || (cellText(r, C.test) + " " + (d.tk || cellText(r, C.top))).toLowerCase().indexOf(q) >= 0)
        && (!o || cellText(r, C.outcome) === o)
        && (which !== "gpu" || parseFloat(cellText(r, C.kernels)) > 0)
        && (which !== "limits" || cellText(r, C.limits) !== "");
      r.hidden = !ok;
      if (r.guDetail) r.guDetail.hidden = !ok;
      if (ok) count++;
    });
    shown.textContent = count === rows.length ? rows.length + " tests" : count + " of " + rows.length + " tests";
  }
  text.addEventListener("input", applyFilter);
  outcome.addEventListener("change", applyFilter);
  only.addEventListener("change", applyFilter);

  function el(tag, attrs, kids) {
    var e = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    (kids || []).forEach(function (k) {
      if (k !== null && k !== undefined) e.appendChild(typeof k === "string" ? document.createTextNode(k) : k);
    });
    return e;
  }
  function fmt(v, digits) {
    if (v === null || v === undefined || v === "") return "–";
    if (typeof v !== "number") return String(v);
    return digits === undefined ? (Number.isInteger(v) ? String(v) : String(Number(v.toPrecision(4)))) : v.toFixed(digits);
  }
  function grid(headers, body2, numericFrom) {
    var head = el("tr", {}, headers.map(function (h, i) { return el("th", i >= numericFrom ? { "class": "n" } : {}, [h]); }));
    var tb = el("tbody", {}, body2.map(function (r) {
      return el("tr", r.cls ? { "class": r.cls } : {}, r.map(function (c, i) {
        return el("td", i >= numericFrom ? { "class": "n" } : {}, [c instanceof Node ? c : fmt(c)]);
      }));
    }));
    return el("table", {}, [el("thead", {}, [head]), tb]);
  }
  function kv(pairs) {
    return el("div", { "class": "kv" }, pairs.map(function (p) { return el("span", {}, [p[0] + ": ", el("b", {}, [p[1]])]); }));
  }
  var MEM = [["peak_alloc_mb", "peak allocated MiB", 1], ["peak_reserved_mb", "peak reserved MiB", 1],
    ["leaked_mb", "leaked MiB", 1], ["alloc_retries", "allocator retries"], ["ooms", "out-of-memory errors"]];
  var KB = ["median", "mean", "std", "min", "max", "p20", "p80", "reps", "timer", "tflops", "gbps", "note"];
  var GT = ["window_us", "busy_us", "busy_pct", "mm_conv_pct", "kernel_count", "profiler_overhead", "top_kernel"];
  function results(title, obj, keys) {
    var labels = Object.keys(obj || {});
    if (!labels.length) return null;
    var cols = keys.filter(function (k) {
      return labels.some(function (l) { return obj[l] && obj[l][k] !== undefined && obj[l][k] !== null && obj[l][k] !== ""; });
    });
    var withCats = labels.some(function (l) { return obj[l] && obj[l].categories; });
    var body2 = labels.map(function (l) {
      var r = [l].concat(cols.map(function (k) { return obj[l] ? obj[l][k] : null; }));
      if (withCats) {
        var c = (obj[l] && obj[l].categories) || {};
        r.push(Object.keys(c).map(function (n) { return n + " " + (typeof c[n] === "number" ? c[n].toFixed(1) + "%" : ""); }).join(", "));
      }
      return r;
    });
    return el("div", {}, [el("h4", {}, [title]), grid(["label"].concat(cols, withCats ? ["categories (% of busy)"] : []), body2, 99)]);
  }

  function detail(row) {
    var d = DATA.tests[row.guIndex];
    var kids = [el("h3", {}, [cellText(row, C.test)])];
    var facts = [["outcome", cellText(row, C.outcome)]];
    if (d.w) facts.push(["worker", d.w]);
    if (d.gpu) facts.push(["physical GPU", d.gpu.join(", ")]);
    if (cellText(row, C.limits)) facts.push(["limits", cellText(row, C.limits)]);
    kids.push(kv(facts));
    if (d.note) kids.push(el("p", {}, ["note: " + d.note]));
    var figs = [["wall ms", C.wall], ["GPU ms", C.gpu], ["busy %", C.busy], ["mm/conv %", C.mm], ["attention %", C.attn],
      ["communication %", C.comm], ["kernels", C.kernels]].filter(function (f) { return cellText(row, f[1]) !== ""; })
      .map(function (f) { return [f[0], cellText(row, f[1])]; });
    var f = d.f || {};
    if (f.memcpy_pct !== undefined) figs.push(["memcpy %", fmt(f.memcpy_pct, 1)]);
    if (f.measure_ms !== undefined) figs.push(["measuring it cost ms", fmt(f.measure_ms, 3)]);
    kids.push(el("h4", {}, ["Figures"]), figs.length ? kv(figs) : el("p", {}, ["not measured on a GPU"]));
    if (d.c) {
      kids.push(el("h4", {}, ["Categories"]), grid(["category", "share of busy", "time µs", "% of busy", "% of window", "kernels"],
        d.c.map(function (c) {
          var cat = DATA.categories[c[0]], w = Math.max(0, Math.min(100, c[2] || 0));
          return [cat[0], el("span", { "class": "share " + cat[1], "style": "width:" + (1.6 * w).toFixed(1) + "px" }, []),
            fmt(c[1], 1), fmt(c[2], 2), fmt(c[3], 2), fmt(c[4])];
        }), 2));
    }
    if (d.k) {
      kids.push(el("h4", {}, ["Top kernels"]), grid(["kernel", "category", "count", "time µs", "% of window"],
        d.k.map(function (k) { return [el("span", { "class": "mono" }, [k[0]]), k[1], fmt(k[2]), fmt(k[3], 1), fmt(k[4], 2)]; }), 2));
    } else {
      var top = d.tk || cellText(row, C.top);
      if (top) kids.push(el("h4", {}, ["Top kernel"]), el("div", { "class": "mono" }, [top]));
    }
    if (d.g) {
      kids.push(el("h4", {}, ["Longest idle gaps"]), grid(["GPU", "from µs (after the call's start)", "idle µs"],
        d.g.map(function (g) { return [g[0], fmt(g[1], 1), fmt(g[2], 1)]; }), 1));
    }
    kids.push(el("h4", {}, ["Memory"]));
    kids.push(d.m ? kv(MEM.filter(function (m) { return d.m[m[0]] !== undefined; }).map(function (m) { return [m[1], fmt(d.m[m[0]], m[2])]; }))
      : el("p", {}, ["not measured"]));
    Object.keys(d.md || {}).forEach(function (g) {
      var m = d.md[g] || {};
      kids.push(kv([["GPU " + g, ""]].concat(MEM.filter(function (x) { return m[x[0]] !== undefined && m[x[0]] !== null; })
        .map(function (x) { return [x[1], fmt(m[x[0]], x[2])]; }))));
    });
    kids.push(results("kernel_bench", d.kb, KB));
    kids.push(results("gpu_trace", d.gt, GT));
    if (d.cmp) {
      kids.push(el("h4", {}, ["Against the baseline"]), grid(["metric", "baseline", "now", "change", "limit", ""],
        d.cmp.map(function (r) { var x = [r[0], r[1], r[2], r[3], r[4], r[5] ? "regression" : "within"]; if (r[5]) x.cls = "reg"; return x; }), 1));
    }
    if (d.tr) {
      kids.push(el("h4", {}, ["Trace"]), el("p", {}, [el("a", { "href": d.tr }, ["trace file"]),
        " (gzip'd Chrome trace: open it in Perfetto, ui.perfetto.dev > Open trace file, or with gpuutil analyze)"]));
    }
    return el("div", { "class": "dv" }, kids);
  }
  function toggle(row) {
    if (row.guDetail) {
      body.removeChild(row.guDetail);
      row.guDetail = null;
      row.setAttribute("aria-expanded", "false");
      return;
    }
    var tr = el("tr", { "class": "detail" }, [el("td", { "colspan": String(heads.length) }, [detail(row)])]);
    body.insertBefore(tr, row.nextSibling);
    row.guDetail = tr;
    row.setAttribute("aria-expanded", "true");
  }
  body.addEventListener("click", function (ev) {
    if (ev.target.closest("a")) return;
    var row = ev.target.closest("tr");
    if (row && row.guIndex !== undefined) toggle(row);
  });
  body.addEventListener("keydown", function (ev) {
    var row = ev.target.closest("tr");
    if (row && row.guIndex !== undefined && (ev.key === "Enter" || ev.key === " ")) { ev.preventDefault(); toggle(row); }
  });

  var rest = document.getElementById("cmp-rest");
  if (rest) {
    rest.addEventListener("toggle", function () {
      var tb = rest.querySelector("tbody");
      if (!rest.open || tb.rows.length) return;
      var items = [];
      DATA.tests.forEach(function (d, i) {
        (d.cmp || []).forEach(function (r) { if (!r[5]) items.push([i, r]); });
      });
      items.sort(function (a, b) { return b[1][6] - a[1][6]; });
      var frag = document.createDocumentFragment();
      items.forEach(function (it) {
        var r = it[1];
        frag.appendChild(el("tr", {}, [el("td", { "class": "t" }, [cellText(byIndex[it[0]], C.test)]), el("td", {}, [r[0]]),
          el("td", { "class": "n" }, [fmt(r[1])]), el("td", { "class": "n" }, ["→ " + fmt(r[2])]),
          el("td", { "class": "n" }, [r[3]]), el("td", { "class": "n" }, [r[4]])]));
      });
      tb.appendChild(frag);
    });
  }
})();
"""
