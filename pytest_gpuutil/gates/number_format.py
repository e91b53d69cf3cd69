"""Short human-readable numbers for messages and tables."""
from __future__ import annotations


def compact_number(value: float) -> str:
    """No trailing zeros, at most 3 decimals: ``5``, ``12.3``, ``0.125``."""
    if float(value).is_integer():
        return str(int(value))
    return f"{value:.3f}".rstrip("0").rstrip(".")
