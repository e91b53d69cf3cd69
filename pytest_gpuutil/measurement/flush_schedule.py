"""When the windows closed so far become profiles: the flush policy applied to what is waiting."""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from pytest_gpuutil.capture.flush_policy import FlushPolicy


class FlushSchedule:
    """The policy (tests, bytes, seconds) and the time of the last flush.

    ``tests``, ``byte_limit`` and ``seconds`` are the policy's bounds as :meth:`FlushPolicy.reason
    <pytest_gpuutil.capture.flush_policy.FlushPolicy.reason>` compares them, and ``last`` the clock
    at the last flush: the measurement's ``flush_due`` reads them to say "not yet" without a call
    (the policy is asked only where a bound is reached, for its reason).
    """

    def __init__(self, policy: FlushPolicy):
        self.policy = policy
        self.tests = policy.tests
        self.byte_limit = policy.megabytes * (1 << 20)
        self.seconds = policy.seconds
        self.last = time.perf_counter()

    def due(self, pending_tests: int, pending_bytes: int) -> Optional[str]:
        """Why a flush is due now (the policy's reason), or None."""
        if not pending_tests:
            return None
        return self.policy.reason(pending_tests, pending_bytes, time.perf_counter() - self.last)

    def flushed(self) -> None:
        self.last = time.perf_counter()
