"""Short human-readable numbers for messages and tables."""
from __future__ import annotations


def compact_number(value: float) -> str:
    """No trailing zeros, at most 3 decimals: ``5``, ``12.3``, ``0.125``."""
    if float(value).is_integer():
        return str(int(value))
    return f"{value:.3f}".rstrip("0").rstrip(".")


def format_value(value: float) -> str:
    """A compared value as shown (the gate's table, the HTML report): whole numbers plainly,
    others to 3-4 significant figures."""
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    magnitude = abs(value)
    if magnitude >= 100:
        return f"{value:.1f}"
    if magnitude >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"
