from __future__ import annotations

from pathlib import Path

from pytest_gpuutil.gates.regression import find_regressions, parse_fail_exprs
from pytest_gpuutil.records import TestRecord
from pytest_gpuutil.report.ci import (
    append_step_summary,
    junit_properties,
    step_summary_markdown,
    step_summary_path,
)


def gpu_rec(test: str, gpu_ms: float, **fields) -> TestRecord:
    values = dict(busy_pct=75.25, mm_conv_pct=60.0, gpu_busy_ms=gpu_ms, kernel_count=42,
                  top_kernel="ampere_sgemm_128x64_nn", wall_ms=20.0)
    values.update(fields)
    return TestRecord(test=test, outcome="passed", **values)


def test_junit_properties():
    record = gpu_rec("t.py::test_a", 12.3456, devices=("0", "1"),
                     kernel_bench={"mm": {"median": 0.1234567, "unit": "ms"}})
    props = dict(junit_properties(record))
    assert props["gpu_util.busy_pct"] == "75.25"
    assert props["gpu_util.gpu_busy_ms"] == "12.346"
    assert props["gpu_util.kernel_count"] == "42"
    assert props["gpu_util.top_kernel"] == "ampere_sgemm_128x64_nn"
    assert props["gpu_util.devices"] == "0 1"
    assert props["gpu_util.kernel_bench[mm].median"] == "0.123"
    assert all(name.startswith("gpu_util.") and isinstance(v, str)
               for name, v in junit_properties(record))


def test_junit_properties_skip_none():
    record = TestRecord(test="t.py::test_cpu", outcome="passed", wall_ms=3.0,
                        note="no CUDA device")
    assert junit_properties(record) == [
        ("gpu_util.wall_ms", "3"),
        ("gpu_util.note", "no CUDA device"),
    ]


def test_step_summary_top_tests_sorted_and_limited():
    records = [gpu_rec(f"t.py::test_{i}", float(i)) for i in range(5)]
    records.append(TestRecord(test="t.py::test_cpu", outcome="passed"))
    text = step_summary_markdown(records, (), "5 tests, 10.0 GPU ms", top_n=3)
    lines = text.splitlines()
    assert "5 tests, 10.0 GPU ms" in lines
    header = lines.index("| test | busy % | mm/conv % | GPU ms | kernels | top kernel |")
    assert lines[header + 1] == "|:--|--:|--:|--:|--:|:--|"
    rows = lines[header + 2: header + 5]
    assert [r.split("|")[1].strip() for r in rows] == [
        "`t.py::test_4`", "`t.py::test_3`", "`t.py::test_2`",
    ]
    assert rows[0] == "| `t.py::test_4` | 75.25 | 60 | 4 | 42 | `ampere_sgemm_128x64_nn` |"
    assert "_2 more measured tests not shown._" in text
    assert "test_cpu" not in text
    assert "Regressions" not in text and "regressions" not in text


def test_step_summary_escapes_pipes_and_shortens_kernels():
    long_name = "void cutlass::Kernel<" + "x|" * 50 + ">"
    text = step_summary_markdown([gpu_rec("t.py::test[a|b]", 1.0, top_kernel=long_name)], (),
                                 "", top_n=10)
    row = next(line for line in text.splitlines() if "test[a" in line)
    assert "`t.py::test[a\\|b]`" in row
    kernel = row.split(" | ")[-1]
    assert kernel.startswith("`cutlass::Kernel<x\\|x") and kernel.endswith("x\\|>` |") and "…" in kernel  # both ends
    # the row keeps 6 cells: unescaped pipes only as separators
    assert len(row.replace("\\|", "").split("|")) == 8


def test_step_summary_with_regressions():
    found = find_regressions([gpu_rec("t.py::test_a", 10.0)],
                             [gpu_rec("t.py::test_a", 20.0, busy_pct=50.0)],
                             parse_fail_exprs("busy_pct:5 gpu_busy_ms:10%"))
    text = step_summary_markdown([gpu_rec("t.py::test_a", 20.0)], found, "", 10)
    assert "#### :x: 2 GPU regressions" in text
    assert "| test | metric | baseline | now | change | limit |" in text
    assert "| `t.py::test_a` | busy_pct | 75.25 | 50 | -25.2 pts | -5 pts |" in text
    assert "| `t.py::test_a` | gpu_busy_ms | 10 | 20 | +100.0% | +10% |" in text


def test_step_summary_without_gpu_data():
    text = step_summary_markdown(
        [TestRecord(test="t.py::a", outcome="passed", note="no CUDA device")], (), "", 10)
    assert "No GPU data in this run (no CUDA device)." in text
    assert "| test |" not in text


def test_append_step_summary(tmp_path: Path):
    path = tmp_path / "summary.md"
    append_step_summary(path, "first")
    append_step_summary(path, "second\n")
    assert path.read_text() == "first\n\nsecond\n"


def test_step_summary_path():
    assert step_summary_path({"GITHUB_STEP_SUMMARY": "/tmp/s.md"}) == Path("/tmp/s.md")
    assert step_summary_path({}) is None
