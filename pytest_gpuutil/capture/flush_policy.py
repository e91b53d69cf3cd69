"""When a continuous capture is turned into per-test figures (light: parsed at option time)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class FlushPolicy:
    """When a capture is turned into per-test figures, besides when a test needs its own at once."""

    #: 1,000, not 100: each flush's work is cold in situ (pytest's own work between flushes evicts it), so
    #: its fixed part dominates; on an H100 a flush every 1,000 tests cut the default's self-timed cost per
    #: test from 174 to 124 µs and lean's from 117 to 87 (benchmarks/results/2026-11-28_h100/, 5 rounds)
    tests: int = 1000
    seconds: float = 10.0
    megabytes: float = 64.0

    def reason(self, pending_tests: int, pending_bytes: int, seconds: float) -> Optional[str]:
        """Why a flush is due now, or None."""
        if pending_tests >= self.tests:
            return f"{pending_tests} tests"
        if pending_bytes >= self.megabytes * (1 << 20):
            return f"{pending_bytes / (1 << 20):.1f} MB of events"
        if pending_tests and seconds >= self.seconds:
            return f"{seconds:.1f} s since the last flush"
        return None

    @classmethod
    def parse(cls, text: str, source: str) -> "FlushPolicy":
        """``"tests=1000 seconds=10 megabytes=64"`` (any subset, spaces or commas)."""
        values: dict[str, float] = {}
        for part in text.replace(",", " ").split():
            name, sep, value = part.partition("=")
            if not sep or name not in ("tests", "seconds", "megabytes"):
                raise ValueError(f"{source}: {part!r} is not tests=N, seconds=S or megabytes=M")
            try:
                number = float(value)
            except ValueError:
                raise ValueError(f"{source}: {part!r}: {value!r} is not a number") from None
            if number <= 0 or (name == "tests" and not number.is_integer()):
                raise ValueError(f"{source}: {part!r} must be a positive {'whole ' if name == 'tests' else ''}number")
            values[name] = number
        return cls(**{k: (int(v) if k == "tests" else v) for k, v in values.items()})
