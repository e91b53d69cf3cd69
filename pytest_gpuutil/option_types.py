"""Each option's value, checked and converted: the ``type=`` functions of the option table.

Every function takes the text given on the command line or in the ini file and returns the
value, or raises ``argparse.ArgumentTypeError`` with what was expected (pytest names the option);
the table itself, and how the command line and the ini file are resolved, are in
:mod:`pytest_gpuutil.options`. What a value names elsewhere (findings rules, fail expressions) is
imported only when the option is used.
"""
from __future__ import annotations

import argparse
import re
from typing import Any

from pytest_gpuutil.capture.flush_policy import FlushPolicy

TRACE_MODES = ("none", "failed", "all")
SOURCES = ("cupti", "torch")
SWITCH = ("on", "off")


def non_negative_int(text: str) -> int:
    try:
        value = int(str(text).strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {value}")
    return value


def trace_mode(text: str) -> str:
    value = str(text).strip().lower()
    if value not in TRACE_MODES:
        raise argparse.ArgumentTypeError(f"expected one of {', '.join(TRACE_MODES)}, got {text!r}")
    return value


def event_source(text: str) -> str:
    value = str(text).strip().lower()
    if value not in SOURCES:
        raise argparse.ArgumentTypeError(f"expected one of {', '.join(SOURCES)}, got {text!r}")
    return value


def on_off(text: str) -> bool:
    value = str(text).strip().lower()
    if value not in SWITCH:
        raise argparse.ArgumentTypeError(f"expected on or off, got {text!r}")
    return value == "on"


def rule_ids(text: str) -> frozenset[str]:
    """Findings rule ids, comma- or space-separated."""
    from pytest_gpuutil.analysis.findings import parse_rule_ids  # only when the option is used

    try:
        return parse_rule_ids(str(text), "expected findings rule ids")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).replace("expected findings rule ids: ", "")) from None


def findings_floor(text: str) -> Any:
    """The least saving a finding is reported with: ``MS`` and/or ``PCT%``, e.g. ``1ms,2%`` (``0``: all)."""
    from pytest_gpuutil.analysis.finding_records import DEFAULT_FLOOR, Floor  # only when the option is used

    words = [w for w in re.split(r"[,\s]+", str(text).strip().lower()) if w]
    ms, pct = DEFAULT_FLOOR.ms, DEFAULT_FLOOR.pct
    if words == ["0"]:
        return Floor(0.0, 0.0)
    for word in words:
        match = re.fullmatch(r"(\d+(?:\.\d*)?|\.\d+)\s*(ms|%)", word)
        if match is None or not words:
            raise argparse.ArgumentTypeError(f"expected MSms and/or PCT%, e.g. '1ms,2%' (or 0: report all), got {text!r}")
        value = float(match.group(1))
        if match.group(2) == "%":
            pct = value
        else:
            ms = value
    if not words:
        raise argparse.ArgumentTypeError("expected MSms and/or PCT%, e.g. '1ms,2%', got an empty value")
    return Floor(ms, pct)


def table_list(text: str) -> tuple[str, ...]:
    names = tuple(n for n in re.split(r"[,\s]+", str(text).strip()) if n)
    bad = [n for n in names if not re.fullmatch(r"[A-Za-z0-9_-]+", n)]
    if bad:
        raise argparse.ArgumentTypeError(f"invalid table name(s) {', '.join(map(repr, bad))}")
    return names


def nonempty_name(text: str) -> str:
    value = str(text).strip()
    if not value or not re.fullmatch(r"[A-Za-z0-9_.\-]+", value):
        raise argparse.ArgumentTypeError(f"expected a name of letters, digits, '_', '-', '.', got {text!r}")
    return value


def flush_policy(text: str) -> FlushPolicy:
    try:
        return FlushPolicy.parse(str(text), "expected tests=N seconds=S megabytes=M")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


COUNTER_MODES = ("auto", "cupti", "gpm", "off")


def counter_mode(text: str) -> str:
    value = str(text).strip().lower()
    if value not in COUNTER_MODES:
        raise argparse.ArgumentTypeError(f"expected one of {', '.join(COUNTER_MODES)}, got {text!r}")
    return value


def _milliseconds(text: str, low: float, high: float) -> float:
    """A number of milliseconds (an "ms" suffix allowed) from ``low`` to ``high``."""
    try:
        value = float(str(text).strip().removesuffix("ms").strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of milliseconds, got {text!r}") from None
    if not low <= value <= high:
        raise argparse.ArgumentTypeError(f"expected {low:g} to {high:g} milliseconds, got {text!r}")
    return value


def sampling_interval_ms(text: str) -> float:
    """A PM sampling interval in milliseconds: 0.01 (CUPTI's finest) to 1000."""
    return _milliseconds(text, 0.01, 1000)


#: --gpu-util-timelines all, as parsed (Settings.timelines holds None for it)
ALL_TIMELINES = -1


def timeline_count(text: str) -> int:
    """--gpu-util-timelines: a number of worst tests (0 or off: none) or all (ALL_TIMELINES)."""
    value = str(text).strip().lower()
    if value == "all":
        return ALL_TIMELINES
    if value == "off":
        return 0
    try:
        count = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of tests, all or off, got {text!r}") from None
    if count < 0:
        raise argparse.ArgumentTypeError(f"expected a number of tests >= 0, all or off, got {count}")
    return count


def gap_ms(text: str) -> float:
    """The shortest idle gap a timeline labels, in ms (0.001 to 60000)."""
    return _milliseconds(text, 0.001, 60_000)


def plain_string(text: str) -> str:
    return str(text).strip()


def positive_int(text: str) -> int:
    try:
        value = int(str(text).strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {value}")
    return value


def baseline_spec(text: str) -> str:
    """A baseline NAME or PATH for --gpu-util-compare (test paths are kept apart by keep_test_paths)."""
    value = str(text).strip()
    if not value:
        raise argparse.ArgumentTypeError("expected a baseline NAME or a .json PATH, got an empty value")
    return value


def fail_expressions(text: str) -> str:
    """One --gpu-util-fail value: METRIC:N or METRIC:N%, several comma- or space-separated."""
    from pytest_gpuutil.gates.regression import (
        parse_fail_exprs,  # only when the option is used
    )

    value = str(text).strip()
    try:
        exprs = parse_fail_exprs(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if not exprs:
        raise argparse.ArgumentTypeError("expected METRIC:N or METRIC:N%, got an empty value")
    return value
