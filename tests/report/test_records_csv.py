"""gpu_util.csv built a column at a time says exactly what each record's csv_row says, value by value."""
from __future__ import annotations

import csv
import io

import numpy as np

from pytest_gpuutil.records import CSV_COLUMNS, TestRecord
from pytest_gpuutil.report.files import records_csv
from pytest_gpuutil.report.metric_tables import format_value

RECORDS = [
    TestRecord("t.py::test_a", "passed", wall_ms=1.5, gpu_busy_ms=0.25, busy_pct=16.666666666, kernel_count=3,
               devices=("0", "1"), top_kernel="gemm, \"quoted\"", worker="gw1",
               findings=({"rule": "host-sync"}, {"rule": "gpu-idle"})),
    TestRecord("t.py::test_b[x\ny]", "failed", note="no CUDA device", findings=()),
    TestRecord("t.py::test_c", "passed", busy_pct=np.float64(2.5), kernel_count=np.int64(7), sm_pct=0.0,
               counters_source="nvml_gpm", alloc_retries=0),
]


def _row_by_row(records: list[TestRecord]) -> str:
    """The definition: each record's csv_row, each value through format_value."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for record in records:
        row = record.csv_row()
        writer.writerow([format_value(row[c]) for c in CSV_COLUMNS])
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
            out = io.StringIO()
            writer = csv.writer(out, lineterminator="\n")
            writer.writerow(columns)
            for record in records:
                row = record.csv_row()
                writer.writerow([format_value(row[c]) for c in columns])
            assert records_csv(records, columns) == out.getvalue()
