"""The unions in C (analysis/intervals/_unions.c) give the integers of the Python passes they replace.

The plain-Python analysis of a trace (``gpuutil analyze`` without numpy) takes each device's busy
blocks and its unions by category, matmul/conv, communication and stream from the C part where it
is built, else from C-level iterators in several passes: random intervals, every real trace, and
the values the C part refuses go through both.
"""
from __future__ import annotations

import random

import pytest

from pytest_gpuutil import analyze, read_trace
from pytest_gpuutil.analysis import grouping
from pytest_gpuutil.analysis.grouping import plain_blocks, plain_union_where, unions_in_c
from pytest_gpuutil.traces.model import Trace
from pytest_gpuutil.traces.reader import c_reader_available
from tests.helpers.reference import DATA

REAL_TRACES = sorted(p.name for p in DATA.glob("*.json.gz"))
needs_c = pytest.mark.skipif(grouping._C_UNIONS is None, reason="analysis/intervals/_unions.c is not built here")


def random_intervals(rng: random.Random, n: int) -> tuple[list[int], list[int], list[int]]:
    """``n`` intervals sorted by start, overlapping, touching and apart, with codes 0-3."""
    starts = sorted(rng.randrange(0, 10 * n) for _ in range(n))
    ends = [s + rng.choice((0, 1, 2, 5, 30, 200)) for s in starts]
    return starts, ends, [rng.randrange(4) for _ in range(n)]


def test_the_c_part_is_built_wherever_the_c_reader_is() -> None:
    assert (grouping._C_UNIONS is not None) == c_reader_available()


@needs_c
@pytest.mark.parametrize("seed", range(40))
def test_blocks_and_grouped_unions_match_the_python_passes(seed: int) -> None:
    rng = random.Random(seed)
    starts, ends, codes = random_intervals(rng, rng.choice((0, 1, 2, 17, 300)))
    maps = [[0, 1, 2, 3], [1, -1, 0, 1], [-1, -1, -1, -1]]
    found = unions_in_c(starts, ends, codes, maps)
    assert found is not None
    block_starts, block_ends, per_map = found
    for m, groups in zip(per_map, maps):
        want = [plain_union_where(starts, ends, [groups[c] == g for c in codes]) for g in range(max(groups) + 1)]
        assert m == want
    assert (block_starts, block_ends) == grouping._C_UNIONS.blocks(starts, ends)


@needs_c
@pytest.mark.parametrize("seed", range(10))
def test_c_blocks_match_the_python_blocks(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(1000 + seed)
    starts, ends, _ = random_intervals(rng, 500)
    in_c = plain_blocks(starts, ends)
    monkeypatch.setattr(grouping, "_C_UNIONS", None)
    assert plain_blocks(starts, ends) == in_c


@needs_c
def test_what_the_c_part_refuses_goes_back_to_the_python_passes() -> None:
    assert unions_in_c([1.5], [2.0], [0], [[0]]) is None  # not ints
    assert unions_in_c([0, 5], [1, 6], [0, 7], [[0, 1]]) is None  # a code past the map
    assert unions_in_c([0], [1, 2], [0], [[0]]) is None  # columns of different lengths
    assert unions_in_c([2**70], [2**70], [0], [[0]]) is None  # past int64
    assert plain_blocks([0, 1, 2], [0.5, 3.0, 2.5]) == ([0, 1], [0.5, 3.0])  # floats: the Python passes


@needs_c
@pytest.mark.parametrize("name", REAL_TRACES)
def test_real_traces_analyse_alike_with_and_without_the_c_part(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    trace = read_trace(DATA / name)
    if not isinstance(trace.columns.starts_ns, list):
        trace = Trace(trace.path, trace.columns.__class__(
            *(list(col) if hasattr(col, "tolist") else col for col in (
                trace.columns.names, trace.columns.kinds, trace.columns.devices, trace.columns.streams,
                trace.columns.starts_ns.tolist(), trace.columns.durs_ns.tolist()))), trace.profiler_span)
    monkeypatch.setattr("pytest_gpuutil.analysis.summary.use_plain_python", lambda count: True)
    in_c = analyze(trace, gap_count=50).to_dict()
    monkeypatch.setattr(grouping, "_C_UNIONS", None)  # the Python passes, as where no C compiler built it
    assert analyze(trace, gap_count=50).to_dict() == in_c
