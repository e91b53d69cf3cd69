"""How the analyses group events: by the repeated values of their columns, and by overlapping time.

- Codes: small integers for the repeated values of event columns (names, kinds, devices,
  streams). Both analyses group events by code: one classification per distinct (name, kind)
  pair, one union per device or stream.
- Unions of time intervals: what busy time, category time and idle gaps are made of. Intervals
  overlap when several streams work at once; a union counts each nanosecond once, as blocks of
  overlapping intervals (many unions at once, one per window and device, are
  ``analysis/intervals/window_columns.py``'s, a flush's figures).

The ``plain_`` functions take and give plain lists (small traces, in a process without numpy);
the others give numpy arrays, and import numpy only when called.
"""
from __future__ import annotations

import operator
from collections import Counter
from itertools import accumulate, compress

from pytest_gpuutil.traces.model import CodedColumn

try:  # the unions in C (analysis/intervals/_unions.c, built at install where a C compiler is found)
    from pytest_gpuutil.analysis.intervals import _unions as _C_UNIONS
except ImportError:  # pragma: no cover - the same integers from the plain-Python passes
    _C_UNIONS = None

TYPE_CHECKING = False  # typing's, without importing typing at run time (gpuutil analyze's start-up)
if TYPE_CHECKING:
    from typing import Any, Iterable, Sequence

    import numpy as np


# -- codes for repeated values ------------------------------------------------------------------
def value_codes(values: Sequence[Any]) -> tuple[list[int], list[Any]]:
    """Small integer codes for the values, and the distinct values in first-seen order."""
    distinct = list(dict.fromkeys(values))
    index = {v: i for i, v in enumerate(distinct)}
    return list(map(index.__getitem__, values)), distinct


def column_codes(column: Sequence[Any]) -> tuple[Sequence[int], list[Any]]:
    """Codes and their values: a :class:`CodedColumn` as it is, a numpy integer array (CUPTI's
    device and stream ids) by :func:`array_codes`, else by :func:`value_codes`."""
    if isinstance(column, CodedColumn):
        return column.codes, list(column.values)
    if getattr(column, "dtype", None) is not None and column.dtype.kind in "iu" and column.ndim == 1:
        return array_codes(column)
    return value_codes(column)


def array_codes(values: "np.ndarray") -> tuple["np.ndarray", list[int]]:
    """:func:`value_codes` of an integer array, in numpy: the same codes and first-seen order
    (hashing 40,000 numpy scalars one by one took milliseconds in a flush)."""
    import numpy as np

    if values.size == 0:
        return np.zeros(0, dtype=np.int64), []
    distinct, first, inverse = np.unique(values, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")  # distinct values by where they first occur
    rank = np.empty(order.size, dtype=np.int64)
    rank[order] = np.arange(order.size, dtype=np.int64)
    return rank[inverse.ravel()], distinct[order].tolist()


def kernel_pairs(names: Sequence[str], kinds: Sequence[str]) -> tuple[list[int], list[str], list[str]]:
    """Each event's code for its (name, kind) pair, and the pairs' names and kinds (plain lists)."""
    if isinstance(names, CodedColumn) and isinstance(kinds, CodedColumn) and names.codes is kinds.codes:
        pair_of_code, pairs = value_codes(list(zip(names.values, kinds.values)))  # a few values, not every row
        same = pair_of_code == list(range(len(pair_of_code)))  # every pair distinct (the usual case): the same codes
        codes = list(names.codes) if same else list(map(pair_of_code.__getitem__, names.codes))
    else:
        codes, pairs = value_codes(list(zip(names, kinds)))
    return codes, [name for name, _ in pairs], [kind for _, kind in pairs]


def kernel_keys(names: Sequence[str], kinds: Sequence[str]) -> tuple["np.ndarray", list[str], list[str]]:
    """Each event's code for its (name, kind) pair, and the pairs' names and kinds."""
    import numpy as np

    if isinstance(names, CodedColumn) and isinstance(kinds, CodedColumn) and names.codes is kinds.codes:
        pair_of_code, pairs = value_codes(list(zip(names.values, kinds.values)))  # a few values, not every row
        codes = np.asarray(pair_of_code, dtype=np.int64)[np.asarray(names.codes, dtype=np.int64)]
        return codes, [name for name, _ in pairs], [kind for _, kind in pairs]
    name_codes, distinct_names = value_codes(names)
    kind_codes, distinct_kinds = value_codes(kinds)
    n_kinds = max(1, len(distinct_kinds))
    pair_codes, pairs = value_codes((np.asarray(name_codes, dtype=np.int64) * n_kinds
                                     + np.asarray(kind_codes, dtype=np.int64)).tolist())
    return (np.asarray(pair_codes, dtype=np.int64), [distinct_names[p // n_kinds] for p in pairs],
            [distinct_kinds[p % n_kinds] for p in pairs])


def text_codes(ids: Sequence[Any], keep_idx: "np.ndarray") -> tuple["np.ndarray", list[str]]:
    """Codes of the kept events' ids, grouped by their text (device 0 and "0" are one device)."""
    import numpy as np

    codes, distinct = column_codes(ids)
    codes_of_text, texts = value_codes([str(v) for v in distinct])
    return np.asarray(codes_of_text, dtype=np.int64)[np.asarray(codes, dtype=np.int64)[keep_idx]], texts


def plain_text_codes(ids: Sequence[Any]) -> tuple[list[int], list[str]]:
    """Every event's code for the text of its id, and the texts (plain lists)."""
    codes, distinct = column_codes(ids)
    codes_of_text, texts = value_codes([str(v) for v in distinct])
    as_list = getattr(codes, "tolist", None)  # numpy codes: Python ints first, not one numpy scalar at a time
    codes = as_list() if as_list is not None else codes
    if codes_of_text == list(range(len(codes_of_text))):  # every id its own text (the usual case): the same codes
        return list(codes), texts
    return list(map(codes_of_text.__getitem__, codes)), texts


def tally(codes: Iterable[int], size: int) -> list[int]:
    """How many times each code in ``range(size)`` occurs (counted in C)."""
    found = Counter(codes)
    return [found.get(code, 0) for code in range(size)]



# -- unions of time intervals ------------------------------------------------------------------
def blocks(starts: "np.ndarray", ends: "np.ndarray") -> tuple["np.ndarray", "np.ndarray"]:
    """Union of intervals sorted by start, as arrays of disjoint block starts and ends."""
    if starts.size == 0:
        return starts, ends
    import numpy as np

    reach = np.maximum.accumulate(ends)
    first = np.flatnonzero(starts[1:] > reach[:-1]) + 1
    first = np.concatenate(([0], first))
    last = np.concatenate((first[1:] - 1, [starts.size - 1]))
    return starts[first], reach[last]


def union_ns(starts: "np.ndarray", ends: "np.ndarray") -> int:
    block_starts, block_ends = blocks(starts, ends)
    return int((block_ends - block_starts).sum())


def plain_blocks(starts: Sequence[int], ends: Sequence[int]) -> tuple[list[int], list[int]]:
    """:func:`blocks` on lists: a block ends where the next start is past every end so far."""
    if not starts:
        return [], []
    if _C_UNIONS is not None:
        try:
            return _C_UNIONS.blocks(starts, ends)
        except (TypeError, ValueError, OverflowError):
            pass  # not plain ints: the passes below
    if all(map(operator.lt, ends, starts[1:])) and all(map(operator.lt, ends, ends[1:])):
        return list(starts), list(ends)  # each event ends before the next starts: a block of its own
    reach = list(accumulate(ends, max))  # the furthest end so far, as numpy's maximum.accumulate
    new_block = list(map(operator.gt, starts[1:], reach))  # the next start is past every end so far
    return [starts[0], *compress(starts[1:], new_block)], [*compress(reach, new_block), reach[-1]]


def plain_union_ns(starts: Sequence[int], ends: Sequence[int]) -> int:
    """The length of the union of intervals sorted by start: :func:`plain_blocks`, summed as it goes."""
    if not starts:
        return 0
    total, first, reach = 0, starts[0], ends[0]
    for start, end in zip(starts, ends):
        if start > reach:
            total += reach - first
            first = start
        if end > reach:
            reach = end
    return total + reach - first


def unions_in_c(starts: Sequence[int], ends: Sequence[int], codes: Sequence[int],
                maps: Sequence[Sequence[int]]) -> "tuple[list[int], list[int], list[list[int]]] | None":
    """The blocks of intervals sorted by start, and per map (each code's group, or -1: not
    counted) the union length of each group's intervals, in one pass each in C; None where the C
    part is not built (or the values are not plain ints): the caller takes the Python passes."""
    if _C_UNIONS is None:
        return None
    try:
        return _C_UNIONS.unions(starts, ends, codes, maps)
    except (TypeError, ValueError, OverflowError):
        return None


def plain_union_where(starts: list[int], ends: list[int], chosen: Iterable[bool]) -> int:
    """:func:`plain_union_ns` of the intervals where ``chosen`` is true (in C: one mask, two picks)."""
    mask = list(chosen)
    return plain_union_ns(list(compress(starts, mask)), list(compress(ends, mask)))
