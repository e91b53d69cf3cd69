"""CI outputs: JUnit XML properties per test and a GitHub Actions job-summary Markdown block."""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence, Union

from pytest_gpuutil.gates.regression import (
    REGRESSION_HEADERS,
    Regression,
    regression_rows,
)
from pytest_gpuutil.records import TestRecord
from pytest_gpuutil.report.tables import shorten_kernel

PROPERTY_PREFIX = "gpu_util."

#: Record fields written as JUnit properties, in order.
_PROPERTY_FIELDS = (
    "busy_pct",
    "mm_conv_pct",
    "attention_pct",
    "communication_pct",
    "memcpy_pct",
    "gpu_busy_ms",
    "wall_ms",
    "kernel_count",
    "top_kernel",
    "sm_pct",
    "tensor_pct",
    "dram_bw_pct",
    "energy_j",
)
_TOP_KERNEL_WIDTH = 60


def _fmt(value: Any) -> str:
    """Property/cell text: numbers rounded to 3 decimals without trailing zeros."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        if value.is_integer():
            return str(int(value))
        return f"{value:.3f}".rstrip("0").rstrip(".")
    return str(value)


def junit_properties(record: TestRecord) -> list[tuple[str, str]]:
    """``(gpu_util.<field>, value)`` pairs for JUnit ``user_properties``; None values skipped."""
    props: list[tuple[str, str]] = []
    for name in _PROPERTY_FIELDS:
        value = getattr(record, name)
        if value is not None and value != "":
            props.append((PROPERTY_PREFIX + name, _fmt(value)))
    if record.devices:
        props.append((PROPERTY_PREFIX + "devices", " ".join(record.devices)))
    for label, stats in record.kernel_bench.items():
        median = stats.get("median") if isinstance(stats, Mapping) else None
        if isinstance(median, (int, float)) and not isinstance(median, bool):
            props.append((f"{PROPERTY_PREFIX}kernel_bench[{label}].median", _fmt(median)))
    if record.note:
        props.append((PROPERTY_PREFIX + "note", record.note))
    return props


class LateProperties:
    """JUnit properties and pytest-benchmark extra info of tests whose records come after their teardown.

    A test's record is built when a flush has its profile, usually after its teardown report was
    logged (and its JUnit ``<testcase>`` made): each such test's JUnit reporter (anything whose
    ``to_xml()`` returns the test's element once finalized) and its benchmark's ``extra_info`` wait
    here, and :meth:`fill` adds the figures once the records are known (before the JUnit file and
    pytest-benchmark's JSON are written, at the session's end). Nothing here imports pytest.
    """

    def __init__(self) -> None:
        self.junit: dict[str, Any] = {}
        self.benchmarks: dict[str, dict[str, Any]] = {}

    def wait_junit(self, nodeid: str, reporter: Any) -> None:
        self.junit[nodeid] = reporter

    def wait_benchmark(self, nodeid: str, extra_info: dict[str, Any]) -> None:
        self.benchmarks[nodeid] = extra_info

    def fill(self, records: Iterable[TestRecord], gpu_figures: bool) -> None:
        """Add each waiting test's figures from its record (``gpu_figures``: the run measured on a GPU,
        so a record's figures go into pytest-benchmark's extra info)."""
        if not (self.junit or self.benchmarks):
            return
        from pytest_gpuutil.report.benchmark_interop import record_extra_info

        for record in records:
            reporter = self.junit.pop(record.test, None)
            if reporter is not None:
                add_junit_properties(reporter.to_xml(), junit_properties(record))
            extra = self.benchmarks.pop(record.test, None)
            if extra is not None and gpu_figures and record.gpu_busy_ms is not None:
                extra["gpu_util"] = record_extra_info(record)


def add_junit_properties(testcase: Any, properties: Sequence[tuple[str, str]]) -> None:
    """Append ``properties`` to a JUnit ``<testcase>`` element (its ``<properties>`` first, as pytest writes it)."""
    if not properties:
        return
    import xml.etree.ElementTree as ET

    node = testcase.find("properties")
    if node is None:
        node = ET.Element("properties")
        testcase.insert(0, node)
    for name, value in properties:
        ET.SubElement(node, "property", name=name, value=str(value))


def _cell(text: str) -> str:
    """Markdown table cell text: pipes escaped, newlines flattened."""
    return text.replace("|", "\\|").replace("\r", " ").replace("\n", " ")


def _code(text: str) -> str:
    """Inline code span for a table cell (keeps ``<``, ``_`` and ``*`` literal)."""
    fence = "``" if "`" in text else "`"
    pad = " " if "`" in text else ""
    return f"{fence}{pad}{_cell(text)}{pad}{fence}"


def _opt(value: Any) -> str:
    """Cell for an optional number."""
    return "" if value is None else _fmt(value)


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[str]], align: str) -> str:
    """GitHub-flavoured Markdown table; ``align`` has one ``l``/``r`` per column."""
    marks = {"l": ":--", "r": "--:"}
    lines = [
        "| " + " | ".join(_cell(h) for h in headers) + " |",
        "|" + "|".join(marks[a] for a in align) + "|",
    ]
    lines.extend("| " + " | ".join(row) + " |" for row in rows)
    return "\n".join(lines)


def step_summary_markdown(
    records: Iterable[TestRecord],
    regressions: Sequence[Regression] = (),
    totals_line: str = "",
    top_n: int = 10,
    explanations: Mapping[str, Any] | None = None,
) -> str:
    """Job-summary Markdown: the ``top_n`` tests by GPU time, then the regressions if any, each flagged
    test's explanation (gates/explain.py) under them."""
    all_records = list(records)
    measured = [r for r in all_records if r.gpu_busy_ms is not None]
    measured.sort(key=lambda r: (-(r.gpu_busy_ms or 0.0), r.test))
    parts = ["### GPU utilization (pytest-gpuutil)", ""]
    if totals_line:
        parts += [_cell(totals_line), ""]
    if measured:
        shown = measured if top_n <= 0 else measured[:top_n]
        title = "All tests" if len(shown) == len(measured) else f"Top {len(shown)} tests"
        parts += [f"{title} by GPU time:", ""]
        rows = [
            [
                _code(r.test),
                _opt(r.busy_pct),
                _opt(r.mm_conv_pct),
                _opt(r.gpu_busy_ms),
                _opt(r.kernel_count),
                _code(shorten_kernel(r.top_kernel, _TOP_KERNEL_WIDTH)) if r.top_kernel else "",
            ]
            for r in shown
        ]
        parts.append(
            markdown_table(
                ("test", "busy %", "mm/conv %", "GPU ms", "kernels", "top kernel"),
                rows,
                "lrrrrl",
            )
        )
        if len(shown) < len(measured):
            parts += ["", f"_{len(measured) - len(shown)} more measured tests not shown._"]
    else:
        notes = sorted({r.note for r in all_records if r.note})
        why = f" ({_cell('; '.join(notes))})" if notes else ""
        parts.append(f"No GPU data in this run{why}.")
    if regressions:
        rows = [
            [_code(row[0])] + [_cell(cell) for cell in row[1:]]
            for row in regression_rows(regressions)
        ]
        parts += [
            "",
            f"#### :x: {len(regressions)} GPU regressions",
            "",
            markdown_table(REGRESSION_HEADERS, rows, "llrrrr"),
        ]
    for test, explanation in (explanations or {}).items():
        parts += ["", f"**Why {_code(test)}** ({explanation.explained_pct:.0f}% of the change explained):", ""]
        parts += [f"- {_cell(d.text)}" for d in explanation.differences]
    return "\n".join(parts) + "\n"


def step_summary_path(environ: Mapping[str, str] | None = None) -> Path | None:
    """``$GITHUB_STEP_SUMMARY`` as a Path, or None outside GitHub Actions."""
    value = (os.environ if environ is None else environ).get("GITHUB_STEP_SUMMARY", "")
    return Path(value) if value else None


def append_step_summary(path: Union[str, "os.PathLike[str]"], text: str) -> None:
    """Append ``text`` to the job-summary file, separated from earlier content by a blank line."""
    target = Path(path)
    needs_gap = target.is_file() and target.stat().st_size > 0
    with target.open("a", encoding="utf-8") as handle:
        if needs_gap:
            handle.write("\n")
        handle.write(text if text.endswith("\n") else text + "\n")
