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
        #: the policy's bounds, to answer "not due" at once (most teardowns) and ask it only when one is reached
        self._bounds = (policy.tests, policy.megabytes * (1 << 20), policy.seconds)

    def due(self, pending_tests: int, pending_bytes: int) -> Optional[str]:
        """Why a flush is due now (the policy's reason), or None."""
        if not pending_tests:
            return None
        seconds = time.perf_counter() - self._last
        most_tests, most_bytes, most_seconds = self._bounds
        if pending_tests < most_tests and pending_bytes < most_bytes and seconds < most_seconds:
            return None  # none of FlushPolicy.reason's bounds reached
        return self.policy.reason(pending_tests, pending_bytes, seconds)

    def flushed(self) -> None:
        self._last = time.perf_counter()
