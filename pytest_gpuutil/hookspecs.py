"""Hooks that pytest-gpuutil calls; implement them in a ``conftest.py`` or a plugin.

Registered by ``pytest_addhooks`` in ``plugin.py``. Nothing here imports torch.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

import pytest

if TYPE_CHECKING:
    from pytest_gpuutil.records import TestRecord


@pytest.hookspec(firstresult=True)
def pytest_gpuutil_record(item: pytest.Item, record: TestRecord, when: str) -> Optional[TestRecord]:
    """Called with a test's finished :class:`~pytest_gpuutil.records.TestRecord`; may replace it.

    Return a new record (``dataclasses.replace(record, ...)``) to replace it, or None to keep it;
    the first non-None result wins. ``when`` is ``"call"`` for the record that the
    ``@pytest.mark.gpu_util`` / ``gpu_util_thresholds`` limits are checked against right after the
    call phase (only for tests that have limits; its ``outcome`` reflects the call alone), and
    ``"teardown"`` for the record that is kept: written to gpu_util.csv/json, compared with a
    baseline, saved and shown. Implementations that ship records elsewhere should act on
    ``"teardown"`` only. Under pytest-xdist the hook runs on the worker that ran the test.

    Uses: add notes or numbers measured by other tools, or, in the plugin's own CPU-only tests,
    plant GPU numbers so that thresholds and regression gates run for real without a GPU.
    """


@pytest.hookspec(firstresult=True)
def pytest_gpuutil_event_source(config: pytest.Config) -> Optional[Any]:
    """Return the source ``--gpu-util`` collects GPU work from, or None for the default.

    Called once per process (each xdist worker) before the first test. The default on a CUDA
    machine reads CUPTI's activity records (kernels, memcpy, memset). A source is any object with
    ``name`` and five methods: ``start()`` (begin or resume collecting), ``stop()`` (stop, keeping
    what was collected), ``now()`` (its clock, in ns), ``pending_bytes()`` and ``drain()``
    (returns ``(GpuColumns, records lost)`` for everything since the last drain); see
    ``pytest_gpuutil/capture/continuous.py``. The plugin's own CPU tests use a synthetic source to
    run the continuous capture without a GPU.
    """


@pytest.hookspec(firstresult=True)
def pytest_gpuutil_counter_source(config: pytest.Config) -> Optional[Any]:
    """Return the source ``--gpu-util`` reads hardware counters from, or None for the default.

    Called once per process (each xdist worker) before the first test, unless
    ``--gpu-util-counters off``. The default is CUPTI PM sampling, else NVML GPM, else NVML's
    energy counter alone (see the README's "Hardware counters"). A source is any object with
    ``name``, ``period_ns`` (its sampling period), ``fields`` (record fields it measures, e.g.
    ``("sm_pct", "tensor_pct")``) and three methods: ``start()``, ``poll()`` and ``stop()``, the
    last two returning :class:`~pytest_gpuutil.analysis.counters.CounterSamples` completed since the
    previous call; optionally ``now()`` (its clock in ns, default ``time.time_ns``), ``energy_mj()``
    (an energy counter) and ``process_pids()`` (the pids on the GPU). See
    ``pytest_gpuutil/hardware/sampler.py``. The plugin's own CPU tests use a synthetic source.
    """
