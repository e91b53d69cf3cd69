"""report.tables.simple_table: the CLI's trace tables as tabulate's "simple" format lays them out, without importing it."""
from __future__ import annotations

import glob
import os
import random

import pytest
from tabulate import tabulate

from pytest_gpuutil.analysis.summary import analyze
from pytest_gpuutil.report.tables import category_table, kernel_table, simple_table, summary_table
from pytest_gpuutil.traces.reader import read_trace

DATA = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data")
TRACES = sorted(glob.glob(os.path.join(DATA, "*.json.gz")))


def by_tabulate(rows, headers=()):
    return tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True)


@pytest.mark.parametrize("path", TRACES, ids=os.path.basename)
def test_the_trace_tables_are_tabulates(path):
    summary = analyze(read_trace(path))
    rows = [(c.name, f"{c.time_us:,.3f}", f"{c.share_of_busy:.2f}", f"{c.pct_of_window:.2f}", c.count)
            for c in summary.categories]
    headers = ("category", "time µs", "% of busy", "% of window", "count")
    if rows:
        assert category_table(summary) == by_tabulate(rows, headers)
    assert summary_table(summary).splitlines()[0].startswith("-")
    if summary.top_kernels:
        assert kernel_table(summary).splitlines()[0].split()[:2] == ["kernel", "category"]


def test_random_plain_tables_are_laid_out_as_tabulate_lays_them_out():
    rng = random.Random(44)
    words = ["", "a", "gemm", "nvjet_tst_128x256", "True", "1,234.500", "-3", "µs", "x y", "é", "0.00"]
    for _ in range(2000):
        ncols, nrows = rng.randint(1, 5), rng.randint(1, 6)
        kinds = [rng.choice(("int", "str")) for _ in range(ncols)]
        rows = [[rng.randint(-5, 10 ** rng.randint(0, 7)) if kind == "int" else rng.choice(words) for kind in kinds]
                for _ in range(nrows)]
        headers = [rng.choice(words[1:]) for _ in range(ncols)] if rng.random() < 0.7 else ()
        assert simple_table(rows, headers) == by_tabulate(rows, headers), (rows, headers)


@pytest.mark.parametrize("rows, headers", [
    ([[" padded", 1]], ("a", "b")),  # tabulate strips blanks
    ([["two\nlines", 1]], ("a", "b")),  # multiline cells
    ([["\x1b[31mred\x1b[0m", 1]], ("a", "b")),  # escape codes take no width
    ([["全角", 1]], ("a", "b")),  # wide characters (with wcwidth installed)
    ([[1, "x"], ["y", 2]], ("a", "b")),  # ints and text in one column
    ([[1.5, True, None]], ()),  # floats, bools and None
    ([], ("a", "b")),  # no rows
    ([[1, 2], [3]], ()),  # ragged rows
], ids=["blanks", "multiline", "ansi", "wide", "mixed", "other types", "empty", "ragged"])
def test_anything_else_is_left_to_tabulate(rows, headers):
    assert simple_table(rows, headers) == by_tabulate(rows, headers)
