"""Hooks that pytest-gpuutil calls; implement them in a ``conftest.py`` or a plugin.

Registered by ``pytest_addhooks`` in ``plugin.py``. Nothing here imports torch.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

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
