"""How this process measures each test's call phase, and the profile each test ends up with.

- ``process.py``: :class:`Measurement`, the call's window and the parts beside it, in one object;
- ``windows.py``: the window: the continuous capture (the default on a CUDA machine), a
  torch.profiler session per test, or none; chosen once before the first test;
- ``part.py``: what a source of per-test figures beside the window implements; the parts:
  ``memory_reads.py`` (GPU memory), ``counter_reads.py`` (hardware counters),
  ``child_processes.py`` (the GPU work of the processes tests start);
- ``flush_schedule.py``: when the closed windows become profiles;
- ``call_profile.py``: what a test's call gave (:class:`TestProfile`, :class:`TestMemory`).
"""
from __future__ import annotations

from pytest_gpuutil.measurement.process import Measurement
from pytest_gpuutil.measurement.call_profile import CONTINUOUS, OFF, PER_TEST, TestMemory, TestProfile

__all__ = ["CONTINUOUS", "OFF", "PER_TEST", "Measurement", "TestMemory", "TestProfile"]
