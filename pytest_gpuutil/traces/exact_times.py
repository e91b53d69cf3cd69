"""Microseconds as Kineto writes them (three decimals) to integer nanoseconds, many at once."""
from __future__ import annotations

from typing import Optional

import numpy as np

_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")


def micros_to_ns(joined: bytes, count: int, signed: bool) -> Optional[np.ndarray]:
    """``b"12.345,0.800"`` (``count`` values in µs) to ``[12345, 800]`` ns, exactly.

    None unless every value is written ``d.ddd`` (``-d.ddd`` too when ``signed``) with at most 15
    digits before the point, so nanoseconds fit in int64; the caller then reads the values one by
    one, with precise errors. Checked with a few bytes operations over all values at once.
    """
    if not count:
        return np.zeros(0, dtype=np.int64)
    shape = joined.translate(_DIGITS_AS_ZERO) + b","
    if (
        shape.translate(None, b"0.-," if signed else b"0.,")  # nothing but digits, points, commas (minus)
        or shape.count(b",") != count
        or shape.count(b".") != count  # one point per number (a JSON number has at most one)
        or shape.count(b".000,") != count  # ... followed by exactly three digits
        or b"0000000000000000" in shape  # 16 digits before the point
    ):
        return None
    try:
        ns = np.fromstring(joined.replace(b".", b""), dtype=np.int64, sep=",")
    except ValueError:  # cannot happen for text that passed the checks; never guess
        return None
    return ns if ns.size == count else None
