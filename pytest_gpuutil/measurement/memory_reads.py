"""GPU memory of each call: the allocator's counters read around it (--gpu-util-memory).

Inside the test only the allocator's calls: its peaks and counts reset at the call's start, one
read at its end. What the read comes to (:class:`~pytest_gpuutil.measurement.call_profile.TestMemory`)
is worked out when a record or a limit asks for it, outside the test (:class:`CallMemories`).
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Optional, Union

from pytest_gpuutil.capture.memory import figures_of
from pytest_gpuutil.measurement.part import MeasurementPart
from pytest_gpuutil.measurement.call_profile import TestMemory

if TYPE_CHECKING:
    from pytest_gpuutil.capture.memory import MemoryMeter, Reads
    from pytest_gpuutil.measurement.part import Setup

_clock = time.perf_counter


class CallMemories:
    """Each finished call's GPU memory, by node id, until its record takes it: kept as it was read
    (the start, the end's read, the seconds the reads took), made a TestMemory the first time it is
    asked for (the same object every time after)."""

    __slots__ = ("_calls",)

    def __init__(self) -> None:
        self._calls: dict[str, Union[TestMemory, tuple[Any, Reads, float]]] = {}

    def add(self, nodeid: str, start: Any, reads: Reads, seconds: float) -> None:
        self._calls[nodeid] = (start, reads, seconds)

    def get(self, nodeid: str, default: Optional[TestMemory] = None) -> Optional[TestMemory]:
        call = self._calls.get(nodeid)
        if call is None:
            return default
        if type(call) is tuple:
            call = self._calls[nodeid] = _memory(call)
        return call

    def pop(self, nodeid: str, default: Optional[TestMemory] = None) -> Optional[TestMemory]:
        call = self._calls.pop(nodeid, None)
        if call is None:
            return default
        return _memory(call) if type(call) is tuple else call  # not asked for before: made now, for its record

    def clear(self) -> None:
        self._calls.clear()

    def __contains__(self, nodeid: object) -> bool:
        return nodeid in self._calls

    def __len__(self) -> int:
        return len(self._calls)


def _memory(call: tuple[Any, Reads, float]) -> TestMemory:
    """The TestMemory of a call kept as it was read: (the start, the end's read, the reads' seconds)."""
    start, reads, seconds = call
    made = _new_object(TestMemory)  # TestMemory(...) without the frozen dataclass's __init__ (its fields in
    _set_attribute(made, "__dict__", {"devices": figures_of(start, reads), "start": start,  # order, as it
                                      "cost_ms": seconds * 1000})  # sets them: ~6k instructions -> ~2k)
    return made


_new_object, _set_attribute = object.__new__, object.__setattr__


class MemoryReads(MeasurementPart):
    """The allocator's peaks and counts over each call, when CUDA is there and memory is on."""

    def __init__(self, on: bool, history: bool):
        self._on = on
        self._history = history
        #: GPU memory counters, once started on a CUDA machine
        self.meter: Optional[MemoryMeter] = None
        #: each finished call's memory, by node id, until its record takes it
        self.memory = CallMemories()
        #: ``keep(nodeid, (start, reads, seconds))``: CallMemories.add without its call (a dict's own setitem)
        self._keep = self.memory._calls.__setitem__
        #: the call begun and not ended yet: (node id, the meter's start, the seconds its begin took)
        self._open: Optional[tuple[str, Any, float]] = None
        #: the continuous capture reads the meter at its windows' edges (no call of this part per test)
        self._at_edges = False
        #: seconds of the allocator's calls made here (not at the capture's edges): torch's part of the cost
        self.torch_s = 0.0

    def start(self, setup: Setup) -> None:
        if setup.cuda and self._on:
            from pytest_gpuutil.capture.memory import MemoryMeter

            self.meter = MemoryMeter(setup.torch, history=self._history)
            capture = getattr(setup.windows, "capture", None)
            if capture is not None:  # its window's edges call the meter, in this part's order (before and after them)
                capture.allocator, capture.keep_memory = self.meter, self._keep
                self._at_edges = True

    @property
    def per_test(self) -> bool:
        return self.meter is not None and not self._at_edges

    def begin(self, nodeid: str) -> None:
        meter = self.meter
        if meter is None:
            return
        began = _clock()
        try:
            self._open = (nodeid, meter.begin(), _clock() - began)
        except Exception:  # noqa: BLE001 - memory figures are then missing, the test runs on
            self._open = None
        else:
            self.torch_s += self._open[2]

    def end(self, nodeid: str) -> None:
        opened = self._open
        if opened is None or opened[0] != nodeid or self.meter is None:
            return
        self._open = None
        began = _clock()
        try:
            reads = self.meter.read()
        except Exception:  # noqa: BLE001
            return
        seconds = _clock() - began
        self.torch_s += seconds
        self._keep(nodeid, (opened[1], reads, opened[2] + seconds))
