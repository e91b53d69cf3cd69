"""Small integer codes for the repeated values of event columns (names, kinds, devices, streams).

Both analyses group events by code: one classification per distinct (name, kind) pair, one
union per device or stream. The ``plain_`` functions give plain lists (small traces, no numpy
import); the others give numpy arrays, and import numpy only when called.
"""
from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from pytest_gpuutil.traces.model import CodedColumn

if TYPE_CHECKING:
    import numpy as np


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
        codes = list(map(pair_of_code.__getitem__, names.codes))
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
    return list(map(codes_of_text.__getitem__, as_list() if as_list is not None else codes)), texts


def tally(codes: Iterable[int], size: int) -> list[int]:
    """How many times each code in ``range(size)`` occurs (counted in C)."""
    found = Counter(codes)
    return [found.get(code, 0) for code in range(size)]
