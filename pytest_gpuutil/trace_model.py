"""The in-memory form of a trace: GPU work intervals and the window they are measured over.

Times are integer nanoseconds on the trace's own clock, so fractional microseconds survive
exactly (Kineto writes µs with three decimals) and interval arithmetic has no rounding.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Optional

#: Trace categories that are GPU work. ``gpu_user_annotation`` is not: it is a label.
GPU_WORK_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})


class GpuEvent(NamedTuple):
    """One piece of GPU work: a kernel, a memcpy or a memset (a tuple: traces hold 100k+ of them)."""

    name: str
    kind: str  # "kernel" | "gpu_memcpy" | "gpu_memset"
    device: str
    stream: str
    start_ns: int
    dur_ns: int

    @property
    def end_ns(self) -> int:
        return self.start_ns + self.dur_ns


@dataclass(frozen=True)
class Window:
    """The span busy time is divided by, with where it came from."""

    start_ns: int
    end_ns: int
    #: "profiler" (the trace's own "PyTorch Profiler" span), "gpu_span" (first GPU start to
    #: last GPU end), "test_call" (the test's call phase), "explicit" (given by the caller),
    #: or "none" (no GPU work and no profiler span)
    source: str

    @property
    def duration_ns(self) -> int:
        return max(0, self.end_ns - self.start_ns)


@dataclass(frozen=True)
class Trace:
    """GPU events of one trace plus what the window needs."""

    path: str
    events: tuple[GpuEvent, ...]
    #: the profiler's own span (cat "Trace"), if the trace has one
    profiler_span: Optional[tuple[int, int]] = None
    #: the trace's ``baseTimeNanoseconds`` (0 when absent); event times are relative to it
    base_time_ns: int = 0
