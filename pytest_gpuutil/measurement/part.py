"""What a source of per-test figures beside the call's window implements (memory, counters, children).

A part is registered once in :class:`~pytest_gpuutil.measurement.measurement.Measurement`'s list;
the measurement calls each part at the same moments, in the list's order, so a new source of
per-test figures is one new module and one line there. Every method has a default that does
nothing.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_gpuutil.measurement.call_profile import TestProfile
    from pytest_gpuutil.measurement.windows import CallWindows


@dataclass(frozen=True)
class Setup:
    """What a part may use when it starts, once before the first test."""

    torch: Any
    cuda: bool
    #: how the calls are measured (the continuous capture, a profiler per test, or not at all)
    windows: CallWindows
    #: what a ``pytest_gpuutil_counter_source`` hook returned (None: the real counters)
    counter_source: Any = None


class MeasurementPart:
    """One source of per-test figures; see the module docstring."""

    #: started after the measurement's start-up is timed (a part that reports its own start-up)
    starts_late = False

    def start(self, setup: Setup) -> None:
        """Once, before the first test."""

    @property
    def per_test(self) -> bool:
        """Whether this part does anything per test in this run (asked once, after every part started:
        one that does not is left out of the per-test calls)."""
        return True

    def begin(self, nodeid: str) -> None:
        """The call is about to begin; its window is not open yet."""

    def opened(self, nodeid: str) -> None:
        """The call's window is open."""

    def end(self, nodeid: str) -> None:
        """The call's window has closed."""

    def waiting(self) -> int:
        """Tests whose profiles this part holds back that a flush could now complete."""
        return 0

    def complete(self, profiles: dict[str, TestProfile], wait: bool) -> dict[str, TestProfile]:
        """The profiles with this part's figures (``wait=False``: figures not read yet may come later)."""
        return profiles

    def close(self) -> None:
        """The session's end (after the last flush)."""

    def info(self) -> dict[str, Any]:
        """What the run's summary says of this part in this process (JSON-able)."""
        return {}

