"""When the windows closed so far become profiles: the flush policy applied to what is waiting."""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from pytest_gpuutil.capture.flush_policy import FlushPolicy


class FlushSchedule:
    """The policy (tests, bytes, seconds) and the time of the last flush."""

    def __init__(self, policy: FlushPolicy):
        self.policy = policy
        self._last = time.perf_counter()

    def due(self, pending_tests: int, pending_bytes: int) -> Optional[str]:
        """Why a flush is due now (the policy's reason), or None."""
        if not pending_tests:
            return None
        return self.policy.reason(pending_tests, pending_bytes, time.perf_counter() - self._last)

    def flushed(self) -> None:
        self._last = time.perf_counter()
