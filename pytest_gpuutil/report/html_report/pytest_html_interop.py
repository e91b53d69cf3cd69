"""pytest-html: its report's rows gain each test's GPU figures and category bar."""
from __future__ import annotations

from typing import Any, Mapping

from pytest_gpuutil.rundoc.metrics import finite_number as _finite
from pytest_gpuutil.report.html_report.fields import as_text, bar_parts, fixed, memory_of
from pytest_gpuutil.report.html_report.svg import Palette, esc, inline_bar


#: pytest-html builds a test's row once the test's teardown is logged from 4.1 on (4.0 built the call's
#: row at once, before the record that comes with the teardown)
PYTEST_HTML_NEEDED = (4, 1)


def pytest_html_too_old() -> str:
    """The line saying the pytest-html report gets no GPU columns, or "" where its version gives them."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("pytest-html")
    except PackageNotFoundError:
        return ""
    numbers = tuple(int(part) for part in found.split(".")[:2] if part.isdigit())
    if numbers >= PYTEST_HTML_NEEDED:
        return ""
    return f"the pytest-html report gets no GPU columns: they need pytest-html 4.1 or later ({found} here)"


def record_extra_html(record: Mapping[str, Any]) -> str:
    """A test's GPU figures and category bar as an HTML fragment with inline styles (pytest-html extras)."""
    parts = bar_parts(record)
    palette = Palette.of(name for name, _ in parts)
    figures = " · ".join(
        f"{label} {value}" for label, value in (
            ("GPU", f"{fixed(record.get('gpu_busy_ms'), 3)} ms"), ("busy", f"{fixed(record.get('busy_pct'), 1)}%"),
            ("mm/conv", f"{fixed(record.get('mm_conv_pct'), 1)}%"), ("attention", f"{fixed(record.get('attention_pct'), 1)}%"),
            ("communication", f"{fixed(record.get('communication_pct'), 1)}%"),
            ("kernels", str(record.get("kernel_count") if record.get("kernel_count") is not None else "")),
        )
    )
    memory = memory_of(record)
    swatches = " ".join(
        f'<span style="white-space:nowrap"><i style="display:inline-block;width:9px;height:9px;background:'
        f'{palette.color(name)}"></i> {esc(name)} {pct:.1f}%</span>' for name, pct in parts
    )
    top = as_text(record.get("top_kernel"))
    return (
        '<div class="gpuutil" style="font:13px/1.5 sans-serif;margin:4px 0">'
        f"<b>GPU utilization</b> (pytest-gpuutil): {esc(figures)}"
        + (f" · peak {fixed(memory.get('peak_alloc_mb'), 1)} MiB" if memory and "peak_alloc_mb" in memory else "")
        + f"<br>{inline_bar(parts, palette)} <small>categories, % of the test's window</small><br>{swatches}"
        + (f'<br>top kernel: <code style="word-break:break-all">{esc(top)}</code>' if top else "")
        + (f"<br>note: {esc(record['note'])}" if as_text(record.get("note")) else "")
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
        #: each test's call report until its teardown: the figures go into its extras, which every
        #: pytest-html from 4.1 shows (4.1 shows only the call's; 4.2 joins every phase's)
        self.calls: dict[str, Any] = {}

    def pytest_runtest_logreport(self, report: Any) -> None:
        if report.when == "call":
            self.calls[report.nodeid] = report
        batch = getattr(report, "gpu_util", None)
        call = self.calls.pop(report.nodeid, None) if report.when == "teardown" else None
        if report.when != "teardown" or not batch:
            return
        for payload in batch.get("payloads", ()):
            record = payload.get("record") or {}
            if isinstance(record.get("test"), str):
                self.records[record["test"]] = record
        own = self.records.get(report.nodeid)
        if own is not None and _finite(own.get("gpu_busy_ms")) is not None:  # measured on a GPU
            from pytest_html import extras

            shown = call if call is not None else report
            shown.extras = [*getattr(shown, "extras", []), extras.html(record_extra_html(own))]

    def pytest_html_results_table_header(self, cells: list) -> None:
        cells.insert(3, '<th title="GPU busy time (pytest-gpuutil)">GPU ms</th>')
        cells.insert(4, '<th title="GPU busy % of the call phase (pytest-gpuutil)">GPU busy %</th>')

    def pytest_html_results_table_row(self, report: Any, cells: list) -> None:
        record = self.records.get(getattr(report, "nodeid", ""), {})
        cells.insert(3, f'<td class="col-gpu-ms">{fixed(record.get("gpu_busy_ms"), 3)}</td>')
        cells.insert(4, f'<td class="col-gpu-busy">{fixed(record.get("busy_pct"), 1)}</td>')
