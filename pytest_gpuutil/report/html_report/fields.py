"""Reading a run document's records as plain data: the fields the page shows, whatever the file holds.

The page copes with fields it does not know or lacks (older files): a wrong type reads as empty.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Optional

from pytest_gpuutil.rundoc.metrics import finite_number as _finite

#: Memory fields a record may carry (sizes in MiB); the page's script labels them
MEMORY_FIELDS = ("peak_alloc_mb", "peak_reserved_mb", "leaked_mb", "alloc_retries", "ooms")


def as_map(value: Any) -> Mapping[str, Any]:
    """The value if it is a mapping, else an empty one."""
    return value if isinstance(value, Mapping) else {}


def as_text(value: Any) -> str:
    """The value if it is a string, else ""."""
    return value if isinstance(value, str) else ""


def fixed(value: Any, digits: int) -> str:
    """A finite number with ``digits`` decimals; "" for anything else."""
    number = _finite(value)
    return "" if number is None else f"{number:.{digits}f}"


def rounded(value: Any, digits: int = 5) -> Any:
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
        return {str(k): rounded(v, digits) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [rounded(v, digits) for v in value]
    return str(value)


def categories_of(record: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """The record's categories, largest time first, skipping malformed entries."""
    items = [(str(k), v) for k, v in as_map(record.get("categories")).items() if isinstance(v, Mapping)]
    return sorted(items, key=lambda kv: -(_finite(kv[1].get("time_us")) or 0.0))


def bar_parts(record: Mapping[str, Any]) -> list[tuple[str, float]]:
    """(category, % of the window) for a stacked bar, largest time first."""
    return [(name, _finite(c.get("pct_of_window")) or 0.0) for name, c in categories_of(record)]


def memory_of(record: Mapping[str, Any]) -> Optional[dict[str, Any]]:
    """The record's memory figures, or None when it has none (not measured)."""
    found = {key: record[key] for key in MEMORY_FIELDS if key in record and record[key] is not None}
    return found or None


def mappings_in(value: Any) -> list[Mapping[str, Any]]:
    """The mappings in a record's list field (anything else in it, or the field itself, ignored)."""
    return [item for item in value if isinstance(item, Mapping)] if isinstance(value, (list, tuple)) else []
