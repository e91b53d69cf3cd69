"""Small integer codes for repeated column values: numpy's path gives what the plain one gives."""
from __future__ import annotations

import numpy as np
import pytest

from pytest_gpuutil.analysis.grouping import array_codes, column_codes, value_codes


@pytest.mark.parametrize("dtype", [np.int64, np.uint32, np.int32])
def test_an_integer_array_is_coded_in_first_seen_order_as_the_plain_path_codes_it(dtype: type) -> None:
    rng = np.random.default_rng(7)
    for size in (0, 1, 5, 40_000):
        ids = rng.choice(np.asarray([7, 0, 3, 1 << 30, 2], dtype=dtype), size=size)
        codes, distinct = array_codes(ids)
        plain_codes, plain_distinct = value_codes(ids.tolist())
        assert codes.tolist() == plain_codes and distinct == plain_distinct


def test_column_codes_takes_integer_arrays_by_numpy_and_everything_else_as_before() -> None:
    codes, distinct = column_codes(np.asarray([5, 5, 2, 5, 9], dtype=np.int64))
    assert codes.tolist() == [0, 0, 1, 0, 2] and distinct == [5, 2, 9]
    assert column_codes(["b", "a", "b"]) == ([0, 1, 0], ["b", "a"])
    assert column_codes(np.asarray(["x", "y", "x"])) == ([0, 1, 0], ["x", "y"])  # not integers: the plain path
