"""When a test's record is needed, and the ``pytest_gpuutil_record`` hook that may replace it.

A record is normally built when a flush has the test's profile; some tests need it sooner: right
after their call (limits to check), or at their teardown (the last test, a pytest-html file, a
record hook that wants it then). JUnit properties and pytest-benchmark's extra info are filled
when the record comes, at the latest at the session's end (see report/ci.py's LateProperties).
"""
from __future__ import annotations

from typing import Any, Optional

import pytest

#: per item: whether it (or a parent) has the gpu_util marker
_MARKED_KEY = pytest.StashKey[bool]()


def hooked_record(item: Any, record: Any, when: str) -> Any:
    """The record after the pytest_gpuutil_record hook (see hookspecs.py)."""
    from pytest_gpuutil.records import TestRecord

    replaced = item.ihook.pytest_gpuutil_record(item=item, record=record, when=when)
    if replaced is None:
        return record
    if not isinstance(replaced, TestRecord):
        raise TypeError(
            f"pytest_gpuutil_record for {item.nodeid} returned {type(replaced).__name__}; "
            "return a TestRecord (dataclasses.replace(record, ...)) or None"
        )
    return replaced


class RecordTiming:
    """What each test needs of its record, asked of its item; answers that hold for a run are kept."""

    def __init__(self, enabled: bool, default_thresholds: Any):
        self._enabled = enabled
        self._default_thresholds = default_thresholds
        #: per collector (a module or class), whether a pytest_gpuutil_record hook applies to its tests
        self._record_hooks: dict[Any, bool] = {}
        #: whether a JUnit or pytest-html file wants every record at its test's teardown (read once)
        self._files_want_records: Optional[bool] = None

    @staticmethod
    def note_marked(item: Any, marked: bool) -> None:
        """What collection found of the item's gpu_util markers (so no test looks for them again)."""
        item.stash[_MARKED_KEY] = marked

    def thresholds_apply(self, item: Any) -> bool:
        """Limits apply to the item (run-wide ones, or its gpu_util marker); asked after its call
        and in its call's report, so the marker's answer is kept on the item."""
        if not self._enabled:
            return False
        if self._default_thresholds:
            return True
        marked = item.stash.get(_MARKED_KEY, None)
        if marked is None:
            marked = item.stash[_MARKED_KEY] = item.get_closest_marker("gpu_util") is not None
        return marked

    def needs_profile_at_call(self, item: Any) -> bool:
        """Its record is needed right after the call: limits to check."""
        return self.thresholds_apply(item)

    def needs_counters_at_call(self, item: Any) -> bool:
        """Its limits include the hardware counters' (min_sm_pct, min_tensor_pct, max_energy_j)."""
        from pytest_gpuutil.gates.thresholds import COUNTER_LIMITS

        default = self._default_thresholds
        if default is not None and any(getattr(default, name) is not None for name in COUNTER_LIMITS):
            return True
        return any(name in marker.kwargs for marker in item.iter_markers("gpu_util") for name in COUNTER_LIMITS)

    def needs_record_now(self, item: Any, last: bool) -> bool:
        """Its record is needed at its teardown: the last test, a pytest-html file (its rows are built
        then), or a record hook. (JUnit files get their properties later: report/ci.py.)"""
        files_want = self._files_want_records
        if files_want is None:
            files_want = self._files_want_records = bool(getattr(item.config.option, "htmlpath", None))
        if files_want or last:
            return True
        known = self._record_hooks.get(item.parent)  # has_record_hook's answer, when known (no call)
        return known if known is not None else self.has_record_hook(item)

    def has_record_hook(self, item: Any) -> bool:
        """Whether a pytest_gpuutil_record hook applies to the item (conftest files can implement it
        per folder); asked once per collector, whose tests share a folder."""
        parent = item.parent
        known = self._record_hooks.get(parent)
        if known is None:
            known = self._record_hooks[parent] = bool(item.ihook.pytest_gpuutil_record.get_hookimpls())
        return known

    def finalize(self, item: Any, record: Any) -> Any:
        """The record as the hook leaves it at the test's teardown (no hook: no call at all)."""
        known = self._record_hooks.get(item.parent)  # has_record_hook's answer, when known (no call)
        if not (known if known is not None else self.has_record_hook(item)):
            return record  # no pytest_gpuutil_record here: no hook call (pluggy's and the item's ihook)
        return hooked_record(item, record, "teardown")
