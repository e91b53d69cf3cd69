"""GPU memory of each call: the allocator's counters read around it (--gpu-util-memory)."""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Optional

from pytest_gpuutil.measurement.part import MeasurementPart
from pytest_gpuutil.measurement.call_profile import TestMemory

if TYPE_CHECKING:
    from pytest_gpuutil.capture.memory import MemoryMeter
    from pytest_gpuutil.measurement.part import Setup


class MemoryReads(MeasurementPart):
    """The allocator's peaks and counts over each call, when CUDA is there and memory is on."""

    def __init__(self, on: bool, history: bool):
        self._on = on
        self._history = history
        #: GPU memory counters, once started on a CUDA machine
        self.meter: Optional[MemoryMeter] = None
        #: each finished call's memory, by node id, until its record takes it
        self.memory: dict[str, TestMemory] = {}
        self._start: dict[str, tuple[Any, float]] = {}

    def start(self, setup: Setup) -> None:
        if setup.cuda and self._on:
            from pytest_gpuutil.capture.memory import MemoryMeter

            self.meter = MemoryMeter(setup.torch, history=self._history)

    @property
    def per_test(self) -> bool:
        return self.meter is not None

    def begin(self, nodeid: str) -> None:
        if self.meter is None:
            return
        began = time.perf_counter()
        try:
            self._start[nodeid] = (self.meter.begin(), time.perf_counter() - began)
        except Exception:  # noqa: BLE001 - memory figures are then missing, the test runs on
            pass

    def end(self, nodeid: str) -> None:
        started = self._start.pop(nodeid, None)
        if started is None or self.meter is None:
            return
        start, begin_cost = started
        began = time.perf_counter()
        try:
            devices = self.meter.end(start)
        except Exception:  # noqa: BLE001
            return
        self.memory[nodeid] = TestMemory(devices, start, (begin_cost + time.perf_counter() - began) * 1000)
