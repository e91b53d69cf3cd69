"""A pytest plugin that does, without pytest-gpuutil, the least a per-test GPU capture must do (``-p floor_probe``).

    pytest -p floor_probe --floor-probe=kernels,memory,window ...   (this folder on PYTHONPATH)

The floor under ``--gpu-util``'s cost: what each measured test pays for the parts the plugin's
figures cannot do without, with none of the plugin's own Python around them (no records, no
flushes, no analysis). The parts, comma-separated:

- ``kernels``: CUPTI's concurrent-kernel records for the whole session (the plugin's own
  ``CuptiSource``, kernels only), drained once at the session's end;
- ``gpu_work``: kernels, memcpy and memset records (``--gpu-util-findings=off``'s kinds);
- ``gpu_work_syncs``: and the host's waits (the plugin's default kinds);
- ``window``: per test, a synchronize and a CUPTI clock read before and after the call (a
  window's edges; needs one of the three above);
- ``memory``: per test, the allocator's peaks reset and its counters read before the call, read
  again after it (what the per-test memory figures need).

CUPTI's start is timed and printed as ``profiler start-up X s`` (the line bench_overhead.py
subtracts, as it does the plugin's), with the number of kernel records drained, so a run shows it
measured what it claims. ``benchmarks/bench_overhead.py --plain-variant NAME=ARGS`` runs it beside
the plugin, e.g. ``--plain-variant "floor=-p floor_probe --floor-probe=gpu_work_syncs,window,memory"``.
"""
from __future__ import annotations

import time
from typing import Any, Generator, Optional

import pytest

PARTS = ("kernels", "gpu_work", "gpu_work_syncs", "window", "memory")
SOURCES = ("kernels", "gpu_work", "gpu_work_syncs")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--floor-probe", default="", metavar="PARTS",
                     help=f"per-test capture floor without pytest-gpuutil: {', '.join(PARTS)} (comma-separated)")


def _parts(text: str) -> tuple[str, ...]:
    parts = tuple(p for p in text.replace(" ", "").split(",") if p)
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        raise pytest.UsageError(f"--floor-probe: unknown part(s) {unknown}; known: {', '.join(PARTS)}")
    if len([p for p in parts if p in SOURCES]) > 1:
        raise pytest.UsageError(f"--floor-probe: at most one of {', '.join(SOURCES)}")
    if "window" in parts and not any(p in SOURCES for p in parts):
        raise pytest.UsageError("--floor-probe: 'window' needs a CUPTI source (kernels, gpu_work or gpu_work_syncs)")
    return parts


class FloorProbe:
    """The probe's state for one session (CUPTI source, memory counters, what was drained)."""

    def __init__(self, parts: tuple[str, ...]):
        self.parts = parts
        self.source: Any = None
        self.startup_s: Optional[float] = None
        #: GPU records drained at the end (shows CUPTI recorded)
        self.records = 0
        self._torch: Any = None
        self._stats: Any = None
        self._reset: Any = None
        self._sync: Any = None

    def _start(self) -> None:
        """At the first test (CUDA is up by then): CUPTI's kinds on, the torch calls looked up."""
        import torch

        self._torch = torch
        self._sync = torch._C._cuda_synchronize
        self._stats = torch._C._cuda_memoryStats
        self._reset = torch._C._cuda_resetPeakMemoryStats
        source_part = next((p for p in self.parts if p in SOURCES), None)
        if source_part is None:
            return
        from pytest_gpuutil.capture import cupti

        began = time.perf_counter()
        self.source = cupti.CuptiSource(demangle=torch._C._demangle, host_syncs=source_part == "gpu_work_syncs")
        if source_part == "kernels":
            self.source.kinds = (cupti.KIND_CONCURRENT_KERNEL,)
        self.source.start()
        self.startup_s = time.perf_counter() - began

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, None, None]:
        if self._torch is None:
            self._start()
        window = "window" in self.parts
        memory = "memory" in self.parts
        if window:
            self._sync()
            self.source.now()
        if memory:
            self._reset(0)
            self._stats(0)
        yield
        if window:
            self._sync()
            self.source.now()
        if memory:
            self._stats(0)

    def pytest_sessionfinish(self) -> None:
        if self.source is not None:
            columns, _dropped = self.source.drain()
            self.records = len(columns)
            self.source.stop()

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        line = f"floor probe {','.join(self.parts)}"
        if self.startup_s is not None:
            line += f": profiler start-up {self.startup_s:.3f} s, {self.records} GPU records drained"
        terminalreporter.write_line(line)


def pytest_configure(config: pytest.Config) -> None:
    parts = _parts(config.getoption("--floor-probe"))
    if parts:
        config.pluginmanager.register(FloorProbe(parts), "floor_probe_state")
