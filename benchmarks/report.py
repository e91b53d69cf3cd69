"""Pure helpers shared by the benchmark scripts: statistics, Markdown tables, writing results."""
from __future__ import annotations

import json
import math
import os
import platform
import statistics
import sys
import traceback
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

from tabulate import tabulate


def median(values: Sequence[float]) -> float:
    """Median of a non-empty sequence."""
    if not values:
        raise ValueError("median of an empty sequence")
    return float(statistics.median(values))


def cv(values: Sequence[float]) -> float:
    """Coefficient of variation (sample std / mean), 0.0 for fewer than two values."""
    if len(values) < 2:
        return 0.0
    mean = statistics.fmean(values)
    if mean == 0:
        return math.inf
    return statistics.stdev(values) / mean


def ratio(numerator: Optional[float], denominator: Optional[float]) -> Optional[float]:
    """numerator / denominator, None when either is missing or the denominator is 0."""
    if numerator is None or denominator is None or denominator == 0:
        return None
    return numerator / denominator


def error_points(measured_pct: Optional[float], truth_pct: Optional[float]) -> Optional[float]:
    """Signed error in percentage points (measured - truth); None when either is missing."""
    if measured_pct is None or truth_pct is None:
        return None
    return measured_pct - truth_pct


def fmt(value: Any, digits: int = 2) -> str:
    """A table cell: floats with ``digits`` decimals, None as "-", anything else str()."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return str(value)
        return f"{value:.{digits}f}"
    return str(value)


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], digits: int = 2) -> str:
    """A GitHub-flavoured Markdown table with cells formatted by :func:`fmt`."""
    cells = [[fmt(v, digits) for v in row] for row in rows]
    return tabulate(cells, headers=list(headers), tablefmt="github", disable_numparse=True)


def text_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], digits: int = 2) -> str:
    """The same table for a terminal."""
    cells = [[fmt(v, digits) for v in row] for row in rows]
    return tabulate(cells, headers=list(headers), tablefmt="simple", disable_numparse=True)


def attempt(errors: list[dict[str, str]], what: str, fn: Callable[[], Any]) -> Any:
    """Run ``fn``; on an exception record ``{what, error}`` in ``errors`` and return None."""
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - a benchmark records failures and goes on
        message = f"{type(exc).__name__}: {exc}".strip()
        errors.append({"what": what, "error": message[:2000], "where": _last_frame(exc)})
        print(f"  [error] {what}: {message.splitlines()[0][:200] if message else ''}", file=sys.stderr)
        return None


def _last_frame(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return ""
    last = frames[-1]
    return f"{os.path.basename(last.filename)}:{last.lineno} in {last.name}"


def host_info() -> dict[str, Any]:
    """Python and platform facts that belong with any figure."""
    return {"python": platform.python_version(), "platform": platform.platform(), "cpu_count": os.cpu_count()}


def write_results(out_dir: str, stem: str, data: Mapping[str, Any], markdown: str) -> tuple[str, str]:
    """Write ``DIR/stem.json`` and ``DIR/stem.md``; return their paths."""
    os.makedirs(out_dir, exist_ok=True)
    json_path = os.path.join(out_dir, f"{stem}.json")
    md_path = os.path.join(out_dir, f"{stem}.md")
    with open(json_path, "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=1, default=_json_default, allow_nan=True)
        handle.write("\n")
    with open(md_path, "w", encoding="utf-8") as handle:
        handle.write(markdown.rstrip() + "\n")
    return json_path, md_path


def _json_default(value: Any) -> Any:
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict):
        return to_dict()
    return str(value)


def summarize_repeats(values: Sequence[float]) -> dict[str, Any]:
    """``{values, median, min, max, cv}`` of repeated measurements of one figure."""
    if not values:
        raise ValueError("no values to summarize")
    return {"values": list(values), "median": median(values), "min": min(values), "max": max(values), "cv": cv(values)}


def share_pct(part: Optional[float], whole: Optional[float]) -> Optional[float]:
    """``100 * part / whole``; None when either is missing or ``whole`` is 0."""
    value = ratio(part, whole)
    return None if value is None else 100.0 * value
