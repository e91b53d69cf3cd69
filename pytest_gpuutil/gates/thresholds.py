"""Per-test limits from ``@pytest.mark.gpu_util(...)`` and the ini default, checked on a record."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, fields
from types import MappingProxyType
from typing import Any, Mapping

from pytest_gpuutil.rundoc.number_format import compact_number
from pytest_gpuutil.records import TestRecord


@dataclass(frozen=True)
class _Rule:
    """Which record field a threshold limits, and in which direction."""

    metric: str
    is_min: bool
    max_value: float | None  # upper bound on the threshold itself (100 for percentages)
    #: a size limit ("2 GiB", kept in bytes) on a memory field in MiB
    is_size: bool = False
    #: what the record must hold for the limit to be checked: "gpu" (the activity capture),
    #: "memory" (the memory counters) or "counters" (the hardware counters ran)
    needs: str = "gpu"


_RULES: Mapping[str, _Rule] = MappingProxyType({
    "min_busy_pct": _Rule("busy_pct", True, 100.0),
    "min_mm_conv_pct": _Rule("mm_conv_pct", True, 100.0),
    "max_gpu_ms": _Rule("gpu_busy_ms", False, None),
    "max_kernel_count": _Rule("kernel_count", False, None),
    "max_memory": _Rule("peak_alloc_mb", False, None, is_size=True, needs="memory"),
    "max_leak": _Rule("leaked_mb", False, None, is_size=True, needs="memory"),
    "min_sm_pct": _Rule("sm_pct", True, 100.0, needs="counters"),
    "min_tensor_pct": _Rule("tensor_pct", True, 100.0, needs="counters"),
    "max_energy_j": _Rule("energy_j", False, None, needs="counters"),
})

#: The limits that need the hardware counters.
COUNTER_LIMITS = tuple(name for name, rule in _RULES.items() if rule.needs == "counters")
#: Record fields whose presence means the test was measured on a GPU.
_GPU_FIELDS = ("gpu_busy_ms", "busy_pct", "kernel_count")
#: Record fields whose presence means the test's GPU memory was measured.
_MEMORY_FIELDS = ("peak_alloc_mb", "leaked_mb")
_MIB = 1 << 20



@dataclass(frozen=True)
class Thresholds:
    """Limits for one test; None means no limit on that metric."""

    min_busy_pct: float | None = None
    min_mm_conv_pct: float | None = None
    max_gpu_ms: float | None = None
    max_kernel_count: float | None = None
    #: bytes
    max_memory: float | None = None
    max_leak: float | None = None
    #: hardware counters: percent of peak, joules
    min_sm_pct: float | None = None
    min_tensor_pct: float | None = None
    max_energy_j: float | None = None

    @property
    def is_empty(self) -> bool:
        """True when no limit is set."""
        return all(getattr(self, f.name) is None for f in fields(self))

    @classmethod
    def from_kwargs(cls, kwargs: Mapping[str, Any], where: str) -> "Thresholds":
        """Build from marker kwargs; ValueError naming ``where`` for unknown keys or bad values."""
        unknown = sorted(set(kwargs) - set(_RULES))
        if unknown:
            raise ValueError(
                f"{where}: unknown threshold {', '.join(unknown)} "
                f"(valid: {', '.join(_RULES)})"
            )
        values: dict[str, float | None] = {}
        for key, value in kwargs.items():
            if value is None:
                values[key] = None
                continue
            if _RULES[key].is_size:
                from pytest_gpuutil.capture.memory import parse_size

                try:
                    values[key] = float(parse_size(value))
                except ValueError as exc:
                    raise ValueError(f"{where}: {key}: {exc}") from None
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"{where}: {key} must be a number, got {value!r}")
            number = float(value)
            if not math.isfinite(number) or number < 0:
                raise ValueError(f"{where}: {key} must be a non-negative number, got {value!r}")
            limit = _RULES[key].max_value
            if limit is not None and number > limit:
                raise ValueError(f"{where}: {key} is a percentage (0-100), got {value!r}")
            values[key] = number
        return cls(**values)


def merge(default: Thresholds | None, marker: Thresholds | None) -> Thresholds:
    """Per field: the marker's limit when set, else the default's."""
    base = default or Thresholds()
    if marker is None:
        return base
    return Thresholds(
        **{
            f.name: getattr(marker, f.name)
            if getattr(marker, f.name) is not None
            else getattr(base, f.name)
            for f in fields(Thresholds)
        }
    )


#: a size with its unit may be written with a space ("max_memory=2 GiB")
_SIZE_UNIT = re.compile(r"^(?:[KMGT]i?B|B)$", re.IGNORECASE)


def parse_ini(text: str | None, where: str = "gpu_util_thresholds") -> Thresholds:
    """Parse ``min_busy_pct=20 max_kernel_count=5000 max_memory=2 GiB`` (space or comma separated)."""
    if not text or not text.strip():
        return Thresholds()
    normalized = re.sub(r"\s*=\s*", "=", text.strip())
    tokens: list[str] = []
    for token in re.split(r"[\s,]+", normalized):
        if token and tokens and "=" not in token and _SIZE_UNIT.match(token):
            tokens[-1] += token  # "2" "GiB" -> "2GiB"
        elif token:
            tokens.append(token)
    values: dict[str, float | str] = {}
    for token in tokens:
        key, sep, raw = token.partition("=")
        if not sep or not key or not raw:
            raise ValueError(f"{where}: expected KEY=NUMBER, got {token!r}")
        if key in values:
            raise ValueError(f"{where}: {key} given twice")
        if key in _RULES and _RULES[key].is_size:
            values[key] = raw
            continue
        try:
            number = float(raw)
        except ValueError:
            raise ValueError(f"{where}: {key} must be a number, got {raw!r}") from None
        values[key] = number
    return Thresholds.from_kwargs(values, where)


@dataclass(frozen=True)
class ThresholdMiss:
    """A limit the test did not meet (``measured`` is None when the metric was not measured)."""

    metric: str
    threshold_name: str
    threshold: float
    measured: float | None
    #: why the metric was not measured (the record's counters note), when known
    why: str = ""

    @property
    def message(self) -> str:
        """One line, e.g. ``gpu_util: busy_pct 12.3 is below min_busy_pct=20``."""
        if _RULES[self.threshold_name].is_size:
            from pytest_gpuutil.capture.memory import format_size

            limit = f"{self.threshold_name}={format_size(self.threshold)}"
            if self.measured is None:
                return f"gpu_util: {self.metric} was not measured, required by {limit}"
            return f"gpu_util: {self.metric} {format_size(self.measured * _MIB)} is above {limit}"
        limit = f"{self.threshold_name}={compact_number(self.threshold)}"
        if self.measured is None:
            why = f" ({self.why})" if self.why else ""
            return f"gpu_util: {self.metric} was not measured{why}, required by {limit}"
        relation = "below" if _RULES[self.threshold_name].is_min else "above"
        return f"gpu_util: {self.metric} {compact_number(self.measured)} is {relation} {limit}"

    def __str__(self) -> str:
        return self.message


def _measured(raw: Any) -> float | None:
    """A finite float from a record field, else None."""
    if isinstance(raw, bool) or not isinstance(raw, (int, float)):
        return None
    return float(raw) if math.isfinite(raw) else None


def has_gpu_data(record: TestRecord) -> bool:
    """True when the record holds GPU measurements (False without CUDA or profiler)."""
    return any(getattr(record, name) is not None for name in _GPU_FIELDS)


def has_memory_data(record: TestRecord) -> bool:
    """True when the record holds GPU memory figures (False without CUDA)."""
    return any(getattr(record, name) is not None for name in _MEMORY_FIELDS)


def has_counter_data(record: TestRecord) -> bool:
    """True when the hardware counters ran for the record (its figures may still be empty: too short)."""
    return bool(record.counters_source)


#: what an energy figure needs, for the message when a call was too short for one
_ENERGY_WHY = "the energy figure needs a call of 1 s or more"


def _why_missing(rule: _Rule, record: TestRecord) -> str:
    if rule.needs != "counters":
        return ""
    if rule.metric == "energy_j":
        return _ENERGY_WHY if (record.wall_ms or 0.0) < 1000 else "the energy counter was not read"
    return record.counters_note or f"{record.counters_source} has no {rule.metric}"


def check(thresholds: Thresholds, record: TestRecord) -> tuple[ThresholdMiss, ...] | None:
    """Misses of ``record`` against ``thresholds``; ``()`` is a pass, None means not checked.

    Limits on GPU work need GPU data in the record, memory limits need memory figures (a test the
    profiler stepped aside for still has those), hardware-counter limits need the counters to have
    run. None when no set limit could be checked (no CUDA, or no counters on this GPU): the test was
    not checked, which must never count as a pass. A set limit whose metric is missing from an
    otherwise measured record (a call too short for the counters) is a miss with ``measured=None``.
    """
    if thresholds.is_empty:
        return ()
    checkable = {"gpu": has_gpu_data(record), "memory": has_memory_data(record), "counters": has_counter_data(record)}
    misses = []
    checked = False
    for name, rule in _RULES.items():
        limit = getattr(thresholds, name)
        if limit is None or not checkable[rule.needs]:
            continue
        checked = True
        measured = _measured(getattr(record, rule.metric))
        value = None if measured is None else (measured * _MIB if rule.is_size else measured)
        if value is None or (value < limit if rule.is_min else value > limit):
            misses.append(ThresholdMiss(rule.metric, name, limit, measured,
                                        _why_missing(rule, record) if measured is None else ""))
    return tuple(misses) if checked else None
