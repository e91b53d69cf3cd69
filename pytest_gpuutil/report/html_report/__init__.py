"""The HTML report: one self-contained page rendered from a run document (``gpu_util.json``).

Everything is inline (CSS, hand-written SVG, a little vanilla JavaScript for sorting, filtering
and the per-test detail view): the page loads nothing, so it opens offline and as a CI artifact.
The test table is plain HTML rows (readable without script), each with an SVG bar of its
categories; the detail view is built on click from one JSON block. ``render_report`` reads the
document as plain data and copes with fields it does not know or lacks (older files).

The modules: ``page`` (the page as one HTML string, and writing it), ``sections`` (header,
baseline, session and GPU charts), ``table`` (the test table and each row's detail data), ``svg``
(colours, bars, charts), ``comparison`` (what the page shows of a baseline comparison),
``fields`` (records read as plain data), ``pytest_html_interop`` (pytest-html's rows gain the
same figures); the page's CSS and JavaScript are the files in ``assets/``, inlined at render time.
This package's names below are what the rest of pytest-gpuutil imports.
"""
from pytest_gpuutil.report.html_report.comparison import (
    BaselineView,
    ComparedMetric,
    baseline_view,
    baseline_view_of,
)
from pytest_gpuutil.report.html_report.page import (
    DEFAULT_NAME,
    render_report,
    trace_links,
    write_html_report,
)
from pytest_gpuutil.report.html_report.pytest_html_interop import (
    PytestHtmlInterop,
    pytest_html_too_old,
    record_extra_html,
)

__all__ = [
    "DEFAULT_NAME",
    "BaselineView",
    "ComparedMetric",
    "PytestHtmlInterop",
    "baseline_view",
    "baseline_view_of",
    "pytest_html_too_old",
    "record_extra_html",
    "render_report",
    "trace_links",
    "write_html_report",
]
