"""The page: the sections, the test table, the detail data, and the CSS and JavaScript, in one HTML file.

Everything is inline, so the page loads nothing and opens offline and as a CI artifact: the style
and the script are package data (``assets/report.css``, ``assets/report.js``), read at each
render and written into the page.
"""
from __future__ import annotations

import importlib.resources
import json
import os
import urllib.parse
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Optional, Sequence

from pytest_gpuutil.report.files import atomic_write_text
from pytest_gpuutil.report.findings_report import findings_section
from pytest_gpuutil.report.html_report.comparison import BaselineView
from pytest_gpuutil.report.html_report.counters import counters_section
from pytest_gpuutil.report.html_report.fields import as_map, as_text, categories_of
from pytest_gpuutil.report.html_report.sections import (
    baseline_section,
    gpu_section,
    header,
    session_charts,
    totals_of,
)
from pytest_gpuutil.report.html_report.svg import Palette, esc, palette_css
from pytest_gpuutil.report.html_report.table import table_order, tests_section
from pytest_gpuutil.report.html_report.why_view import why_section

if TYPE_CHECKING:
    from pytest_gpuutil.history.series import Trend

DEFAULT_NAME = "report.html"
#: The package holding ``assets/``
ASSETS_PACKAGE = "pytest_gpuutil.report.html_report"


def asset(name: str) -> str:
    """A file of the page's assets (its CSS or script), as text."""
    return (importlib.resources.files(ASSETS_PACKAGE) / "assets" / name).read_text(encoding="utf-8")


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


def json_script(data: Any) -> str:
    """JSON safe inside a <script> element (no "<" can close it)."""
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return text.replace("<", "\\u003c").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def timeline_parts(tests: Sequence[Mapping[str, Any]], timelines: Optional[Mapping[str, Mapping[str, Any]]],
                   budget: Optional[int], palette: Palette) -> tuple[str, str, str]:
    """The timelines' data block, style and script ("" each when no test has a timeline): the data
    keyed by the test's place in the detail data, fitted into ``budget`` bytes (None: all)."""
    if not timelines:
        return "", "", ""
    from pytest_gpuutil.report.timelines import fit

    place = {str(t["test"]): i for i, t in enumerate(table_order(tests))}
    fitted = fit({test: t for test, t in timelines.items() if test in place}, budget)
    if not fitted:
        return "", "", ""
    colours = {name: palette.color(name) for name in palette.order}
    for t in fitted.values():
        for key in t.get("k") or ():
            if len(key) > 2 and key[2] not in colours:
                colours[str(key[2])] = palette.color(str(key[2]))
    data = json_script({"colors": colours, "tests": {str(place[test]): t for test, t in sorted(fitted.items())}})
    return (f'<script type="application/json" id="gu-timelines">{data}</script>', asset("timeline.css"),
            asset("timeline.js"))


def render_report(doc: Mapping[str, Any], baseline: Optional[BaselineView] = None,
                  links: Optional[Mapping[str, str]] = None, trends: Optional[Mapping[str, Trend]] = None,
                  timelines: Optional[Mapping[str, Mapping[str, Any]]] = None,
                  timeline_budget: Optional[int] = None) -> str:
    """The whole page for a run document (the dict ``gpu_util.json`` holds), as one HTML string; with
    ``trends`` (from a run history), a trend line per test; with ``timelines`` (test id -> compact
    timeline, analysis/timeline.py), a timeline in those tests' detail views, within
    ``timeline_budget`` bytes (None: all of them as they are)."""
    tests = [t for t in (doc.get("tests") or ()) if isinstance(t, Mapping) and isinstance(t.get("test"), str)]
    totals = totals_of(doc, tests)
    thresholds = as_map(doc.get("thresholds"))
    palette = Palette.of(name for t in tests for name, _ in categories_of(t))
    table, details = tests_section(tests, palette, thresholds, baseline, links or {}, trends)
    info = as_map(doc.get("machine_info"))
    title = f"GPU utilization · {info.get('gpu_model') or 'no GPU'} · {as_text(doc.get('created'))}"
    data = json_script({"categories": [[name, palette.css_class(name)] for name in palette.order], "tests": details})
    style, script = asset("report.css"), asset("report.js")
    tl_data, tl_style, tl_script = timeline_parts(tests, timelines, timeline_budget, palette)
    if tl_style:
        style, script = f"{style}\n{tl_style}", f"{script}\n{tl_script}"
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1"><title>{esc(title)}</title>'
        f"<style>\n{style}\n{palette_css(palette)}</style></head><body><main>"
        f"{header(doc, tests, totals, baseline)}"
        f"{baseline_section(baseline) if baseline else ''}{why_section(doc)}"
        f"{session_charts(tests, totals, palette)}{findings_section(tests, as_map(doc.get('findings_summary')))}{counters_section(doc, tests)}{gpu_section(doc, tests)}{table}"
        f'<footer>pytest-gpuutil HTML report · one self-contained file: no network, nothing loaded from elsewhere. '
        f"Trace files open in Perfetto (ui.perfetto.dev, Open trace file) or with <code>gpuutil analyze</code>.</footer>"
        f'</main><script type="application/json" id="gu-data">{data}</script>{tl_data}<script>\n{script}</script></body></html>\n'
    )


def write_html_report(path: str | os.PathLike[str], doc: Mapping[str, Any], *, baseline: Optional[BaselineView] = None,
                      traces_dir: Optional[Path] = None, trace_name: Optional[Callable[[str], str]] = None,
                      trends: Optional[Mapping[str, Trend]] = None,
                      timelines: Optional[Mapping[str, Mapping[str, Any]]] = None,
                      timeline_budget: Optional[int] = None) -> Path:
    """Render and write the page atomically; links to the trace files in ``traces_dir`` that exist."""
    target = Path(path)
    links = {}
    if traces_dir is not None and trace_name is not None:
        names = [t["test"] for t in doc.get("tests") or () if isinstance(t, Mapping) and isinstance(t.get("test"), str)]
        links = trace_links(names, traces_dir, target.parent.resolve(), trace_name)
    return atomic_write_text(target, render_report(doc, baseline, links, trends, timelines, timeline_budget))
