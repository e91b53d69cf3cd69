"""Microseconds as Kineto writes them (three decimals) to integer nanoseconds, many at once."""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Union

if TYPE_CHECKING:
    import numpy as np

_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")


def micros_to_ns(joined: bytes, count: int, signed: bool, plain: bool = False) -> Optional[Union["np.ndarray", list[int]]]:
    """``b"12.345,0.800"`` (``count`` values in µs) to ``[12345, 800]`` ns, exactly.

    None unless every value is written ``d.ddd`` (``-d.ddd`` too when ``signed``) with at most 15
    digits before the point, so nanoseconds fit in int64; the caller then reads the values one by
    one, with precise errors. Checked with a few bytes operations over all values at once. An
    int64 array, or with ``plain`` a list of ints (numpy is then not imported).
    """
    if not count:
        return [] if plain else _numpy().zeros(0, dtype=_numpy().int64)
    shape = joined.translate(_DIGITS_AS_ZERO) + b","
    if (
        shape.translate(None, b"0.-," if signed else b"0.,")  # nothing but digits, points, commas (minus)
        or shape.count(b",") != count
        or shape.count(b".") != count  # one point per number (a JSON number has at most one)
        or shape.count(b".000,") != count  # ... followed by exactly three digits
        or b"0000000000000000" in shape  # 16 digits before the point
    ):
        return None
    digits = joined.replace(b".", b"")
    if plain:
        return list(map(int, digits.split(b",")))  # int() takes b"-0012" as -12, as numpy does
    np = _numpy()
    try:
        ns = np.fromstring(digits, dtype=np.int64, sep=",")
    except ValueError:  # cannot happen for text that passed the checks; never guess
        return None
    return ns if ns.size == count else None


def _numpy():  # type: ignore[no-untyped-def]
    import numpy  # only for big traces: plain lists need no numpy

    return numpy
