"""gpu_util.csv built a column at a time says exactly what each record's csv_row says, value by value."""
from __future__ import annotations

import csv
import io

import numpy as np

from pytest_gpuutil.records import CSV_COLUMNS, TestRecord
from pytest_gpuutil.report import files
from pytest_gpuutil.report.files import records_csv, records_csv_bytes
from pytest_gpuutil.report.metric_tables import format_value

RECORDS = [
    TestRecord("t.py::test_a", "passed", wall_ms=1.5, gpu_busy_ms=0.25, busy_pct=16.666666666, kernel_count=3,
               devices=("0", "1"), top_kernel="gemm, \"quoted\"", worker="gw1",
               findings=({"rule": "host-sync"}, {"rule": "gpu-idle"})),
    TestRecord("t.py::test_b[x\ny]", "failed", note="no CUDA device", findings=()),
    TestRecord("t.py::test_c", "passed", busy_pct=np.float64(2.5), kernel_count=np.int64(7), sm_pct=0.0,
               counters_source="nvml_gpm", alloc_retries=0),
]


def _row_by_row(records: list[TestRecord], columns: tuple[str, ...] = CSV_COLUMNS) -> str:
    """The definition: each record's csv_row, each value through format_value."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for record in records:
        row = record.csv_row()
        writer.writerow([format_value(row[c]) for c in columns])
    return out.getvalue()


def test_the_columns_say_what_the_rows_say() -> None:
    assert records_csv(RECORDS) == _row_by_row(RECORDS)
    assert list(csv.reader(io.StringIO(records_csv(RECORDS))))[1][CSV_COLUMNS.index("findings")] == "host-sync gpu-idle"


def test_no_records_is_the_header_alone() -> None:
    assert records_csv([]) == _row_by_row([]) == ",".join(CSV_COLUMNS) + "\n"


#: values a column at a time must write as csv writes them row by row: delimiters, quotes, line
#: breaks (quoted), a carriage return and a NUL (each as this Python's csv writes it), bools, a mix
#: of floats, ints and None in one column, numpy scalars, a column that is None throughout
ODD = [
    TestRecord("t.py::test_d[1,2]", "passed", wall_ms=0.0, gpu_busy_ms=None, kernel_count=True, worker="gw\r0",
               top_kernel='a "b"', counters_note="x\x00y", devices=(), findings=None),
    TestRecord("t.py::test_e[\"q\"]", "passed", wall_ms=-0.0, gpu_busy_ms=float("inf"), kernel_count=2,
               peak_alloc_mb=np.float64(1 / 3), busy_pct=float("nan"), devices=("0,1",), counters_note="",
               findings=({"rule": "a,b"},)),
    TestRecord("t.py::test_f", "skipped", wall_ms=1e-9, gpu_busy_ms=12345678.9, kernel_count=None,
               peak_alloc_mb=2.0, busy_pct=1e300, leaked_mb=0, devices=("0",)),
]


def test_odd_values_are_written_as_csv_writes_them() -> None:
    for records in (ODD, ODD + RECORDS, RECORDS * 3 + ODD, ODD[2:]):
        assert records_csv(records) == _row_by_row(records)


def test_other_columns_and_one_column() -> None:
    for columns in (("test",), ("devices",), ("worker", "devices"), ("kernel_count", "findings")):
        for records in (ODD, RECORDS, [TestRecord("", "passed")]):
            assert records_csv(records, columns) == _row_by_row(records, columns)


def test_the_rows_written_in_c_are_the_same_bytes(monkeypatch) -> None:
    import pytest

    pytest.importorskip("pytest_gpuutil.report._csv_rows", reason="the C part is not built here")
    wide = [TestRecord("t.py::test_g", "passed", kernel_count=2**70, alloc_retries=-3, worker="é漢🙂",
                       counters_note="a\nb", top_kernel=False, wall_ms=float("-inf"), devices=("0", "1"))]
    cases = [RECORDS, ODD, ODD[1:], ODD[2:], wide, RECORDS * 3 + wide, [TestRecord("", "passed")], []]
    for records in cases:
        for columns in (CSV_COLUMNS, ("test",), ("worker", "devices"), ("kernel_count", "findings"), ("test", "nope")):
            try:
                expected = records_csv(records, columns).encode("utf-8")
            except AttributeError:  # a column that is no field: both say so
                with pytest.raises(AttributeError):
                    records_csv_bytes(records, columns)
                continue
            assert records_csv_bytes(records, columns) == expected
    calls = []
    rows = files._ROWS.rows
    monkeypatch.setattr(files, "_ROWS", type("C", (), {"rows": staticmethod(lambda *a: calls.append(rows(*a)) or calls[-1])}))
    records_csv_bytes(RECORDS[:2] * 2 + ODD[2:])  # quotes, commas, newlines, ints, floats, None: C
    records_csv_bytes(ODD)  # a carriage return, a NUL, a numpy float: Python
    assert isinstance(calls[0], bytes) and calls[1] is None  # C wrote the first; the second needs csv's rules
