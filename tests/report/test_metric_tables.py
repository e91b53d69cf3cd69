"""Tests of pytest_gpuutil.report.metric_tables on real files under tmp_path."""
from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_gpuutil.report.metric_tables import (
    MetricRow,
    MetricTableError,
    MetricTableRegistry,
    format_value,
    table_filename,
)


def _read(path: Path) -> list[list[str]]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.reader(handle))


@pytest.fixture
def registry(tmp_path: Path) -> MetricTableRegistry:
    return MetricTableRegistry(tmp_path / "tables")


# --------------------------------------------------------------------------- formatting


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1.0, "1.000000"),
        (0.1234567, "0.123457"),
        (2.5e-7, "0.000000"),
        (None, ""),
        (7, "7"),
        (True, "True"),
        ("gemm", "gemm"),
    ],
)
def test_format_value(value: object, text: str) -> None:
    assert format_value(value) == text


def test_rows_written_with_header_once(registry: MetricTableRegistry) -> None:
    table = registry.register("kernels", ["kernel", "ms", "bytes"])
    table.add_row({"kernel": "gemm", "ms": 1.5, "bytes": None}, test="t.py::a")
    table.add_row({"bytes": 1024, "ms": 0.25, "kernel": "softmax, fused"}, test="t.py::b")
    path = registry.output_dir / "metric_table_kernels.csv"
    assert table.path == path
    assert _read(path) == [
        ["test", "kernel", "ms", "bytes"],
        ["t.py::a", "gemm", "1.500000", ""],
        ["t.py::b", "softmax, fused", "0.250000", "1024"],  # quoted by csv, order by columns
    ]
    assert path.read_text(encoding="utf-8").count("test,kernel") == 1


def test_add_row_returns_record(registry: MetricTableRegistry) -> None:
    table = registry.register("t", ["x", "y"])
    record = table.add_row({"x": 1.0, "y": "a"}, test="t.py::c")
    assert record == MetricRow(table="t", test="t.py::c", values=("1.000000", "a"), columns=("x", "y"))


def test_header_written_when_file_was_purged_mid_session(registry: MetricTableRegistry) -> None:
    table = registry.register("t", ["x"])
    table.add_row({"x": 1}, test="a")
    registry.purge()
    table.add_row({"x": 2}, test="b")
    assert _read(table.path) == [["test", "x"], ["b", "2"]]


def test_appends_to_existing_file_with_same_header(tmp_path: Path) -> None:
    first = MetricTableRegistry(tmp_path).register("t", ["x"])
    first.add_row({"x": 1}, test="a")
    second = MetricTableRegistry(tmp_path).register("t", ["x"])  # a later session, no purge
    second.add_row({"x": 2}, test="b")
    assert _read(second.path) == [["test", "x"], ["a", "1"], ["b", "2"]]


def test_existing_file_with_other_header_is_an_error(tmp_path: Path) -> None:
    MetricTableRegistry(tmp_path).register("t", ["x"]).add_row({"x": 1}, test="a")
    table = MetricTableRegistry(tmp_path).register("t", ["x", "y"])
    with pytest.raises(MetricTableError, match="has header 'test', 'x'.*purge"):
        table.add_row({"x": 1, "y": 2}, test="b")
    assert _read(table.path) == [["test", "x"], ["a", "1"]]  # left valid


# --------------------------------------------------------------------------- wrong rows


def test_wrong_row_names_table_missing_and_extra(registry: MetricTableRegistry) -> None:
    table = registry.register("attn", ["kernel", "ms", "gbps"])
    with pytest.raises(MetricTableError) as excinfo:
        table.add_row({"kernel": "flash", "msec": 1.0}, test="t.py::a")
    message = str(excinfo.value)
    assert "'attn'" in message
    assert "missing column(s) 'ms', 'gbps'" in message
    assert "extra column(s) 'msec'" in message
    assert not table.path.exists()


def test_row_with_only_extra_column(registry: MetricTableRegistry) -> None:
    table = registry.register("t", ["x"])
    with pytest.raises(MetricTableError, match="extra column\\(s\\) 'y'") as excinfo:
        table.format_row({"x": 1, "y": 2}, test="a")
    assert "missing" not in str(excinfo.value)


def test_row_must_be_a_mapping(registry: MetricTableRegistry) -> None:
    table = registry.register("t", ["x"])
    with pytest.raises(MetricTableError, match="row is list"):
        table.add_row([1], test="a")  # type: ignore[arg-type]
    with pytest.raises(MetricTableError, match="callable returned tuple"):
        table.add_row(lambda: (1,), test="a")  # type: ignore[arg-type, return-value]


# --------------------------------------------------------------------------- callables, enabling


def test_callable_row_evaluated_when_enabled(registry: MetricTableRegistry) -> None:
    table = registry.register("t", ["x"])
    calls = []

    def row() -> dict[str, float]:
        calls.append(1)
        return {"x": 0.5}

    record = table.add_row(row, test="a")
    assert calls == [1]
    assert record is not None and record.values == ("0.500000",)


def test_disabled_table_does_not_call_or_write(tmp_path: Path) -> None:
    registry = MetricTableRegistry(tmp_path, enabled={"wanted"})
    wanted = registry.register("wanted", ["x"])
    other = registry.register("other", ["x"])
    calls = []
    assert other.add_row(lambda: calls.append(1) or {"x": 1}, test="a") is None
    assert calls == []
    assert not other.path.exists()
    assert wanted.add_row(lambda: calls.append(2) or {"x": 1}, test="a") is not None
    assert calls == [2]
    assert (registry.is_enabled("wanted"), registry.is_enabled("other")) == (True, False)


def test_all_tables_enabled_by_default(registry: MetricTableRegistry) -> None:
    assert registry.enabled is None
    assert registry.is_enabled("anything")


def test_validate_enabled_lists_registered_tables(registry: MetricTableRegistry) -> None:
    registry.register("kernels", ["ms"])
    registry.register("attn", ["ms"])
    registry.enabled = ["kernels", "kernals"]
    with pytest.raises(MetricTableError) as excinfo:
        registry.validate_enabled()
    message = str(excinfo.value)
    assert "unknown metric table(s) 'kernals'" in message
    assert "registered tables: 'attn', 'kernels'" in message
    registry.enabled = ["kernels"]
    registry.validate_enabled()  # no error


def test_validate_enabled_with_nothing_registered(registry: MetricTableRegistry) -> None:
    registry.enabled = {"x"}
    with pytest.raises(MetricTableError, match="registered tables: none"):
        registry.validate_enabled()


def test_enabled_must_be_a_collection(registry: MetricTableRegistry) -> None:
    with pytest.raises(MetricTableError, match="collection of names"):
        registry.enabled = "kernels"  # type: ignore[assignment]
    with pytest.raises(MetricTableError, match="invalid metric table name"):
        registry.enabled = ["bad name"]


# --------------------------------------------------------------------------- registration


def test_register_same_columns_returns_same_table(registry: MetricTableRegistry) -> None:
    table = registry.register("t", ["x", "y"])
    assert registry.register("t", ("x", "y")) is table
    assert dict(registry.tables) == {"t": table}


def test_register_different_columns_is_an_error(registry: MetricTableRegistry) -> None:
    registry.register("t", ["x", "y"])
    with pytest.raises(MetricTableError, match="already registered with columns 'x', 'y', not 'y', 'x'"):
        registry.register("t", ["y", "x"])


def test_registries_are_independent(tmp_path: Path) -> None:
    MetricTableRegistry(tmp_path / "a").register("t", ["x"])
    assert MetricTableRegistry(tmp_path / "b").tables == {}


@pytest.mark.parametrize("name", ["", "a b", "x/y", "../etc", "naïve", "a.b", 3])
def test_invalid_table_names(registry: MetricTableRegistry, name: object) -> None:
    with pytest.raises(MetricTableError, match="letters, digits, '_' and '-' only"):
        registry.register(name, ["x"])  # type: ignore[arg-type]


def test_valid_table_names(registry: MetricTableRegistry) -> None:
    assert registry.register("Attn-v2_bf16", ["x"]).path.name == "metric_table_Attn-v2_bf16.csv"
    assert table_filename("k") == "metric_table_k.csv"


@pytest.mark.parametrize(
    ("columns", "match"),
    [
        ([], "must not be empty"),
        ("xy", "sequence of column names"),
        (["x", "x", "y"], "duplicate column\\(s\\) 'x'"),
        (["test", "x"], "'test' is added automatically"),
        (["x", ""], "invalid column name\\(s\\) ''"),
        (["a,b"], "invalid column name"),
        ([1], "invalid column name\\(s\\) 1"),
    ],
)
def test_invalid_columns(registry: MetricTableRegistry, columns: object, match: str) -> None:
    with pytest.raises(MetricTableError, match=match) as excinfo:
        registry.register("t", columns)  # type: ignore[arg-type]
    assert "'t'" in str(excinfo.value)
    assert "t" not in registry.tables


def test_metric_table_error_is_a_value_error() -> None:
    assert issubclass(MetricTableError, ValueError)


# --------------------------------------------------------------------------- records between processes


def test_format_row_is_pure(registry: MetricTableRegistry) -> None:
    table = registry.register("t", ["x"])
    record = table.format_row({"x": 3.0}, test="a")
    assert record.values == ("3.000000",)
    assert not registry.output_dir.exists()


def test_rows_ship_as_json_and_controller_writes_them(tmp_path: Path) -> None:
    worker = MetricTableRegistry(tmp_path / "worker")
    rows = [
        worker.register("k", ["ms"]).format_row({"ms": 1.0}, test="a"),
        worker.register("m", ["n"]).format_row({"n": None}, test="b"),
        worker.register("k", ["ms"]).format_row({"ms": 2.0}, test="c"),
    ]
    shipped = json.loads(json.dumps([r.to_dict() for r in rows]))
    controller = MetricTableRegistry(tmp_path / "controller")  # never saw the tables registered
    controller.write_rows(MetricRow.from_dict(d) for d in shipped)
    out = tmp_path / "controller"
    assert _read(out / "metric_table_k.csv") == [["test", "ms"], ["a", "1.000000"], ["c", "2.000000"]]
    assert _read(out / "metric_table_m.csv") == [["test", "n"], ["b", ""]]
    assert not (tmp_path / "worker").exists()


def test_write_rows_rejects_rows_of_another_table(registry: MetricTableRegistry) -> None:
    table = registry.register("t", ["x"])
    other = registry.register("u", ["x"]).format_row({"x": 1}, test="a")
    with pytest.raises(MetricTableError, match="row for table 'u'"):
        table.write_rows([other])
    forged = MetricRow(table="t", test="a", values=("1", "2"), columns=("x",))
    with pytest.raises(MetricTableError, match="has 2 value\\(s\\), expected 1"):
        table.write_rows([forged])
    assert not table.path.exists()


# --------------------------------------------------------------------------- purge


def test_purge_deletes_only_metric_table_csvs(tmp_path: Path) -> None:
    stale = [tmp_path / "metric_table_old.csv", tmp_path / "metric_table_x-1.csv"]
    kept = [
        tmp_path / "metric_table_old.json",
        tmp_path / "metric_tables.csv",
        tmp_path / "gpu_util.csv",
        tmp_path / "sub" / "metric_table_nested.csv",
    ]
    for path in stale + kept:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("old\n")
    (tmp_path / "metric_table_dir.csv").mkdir()
    removed = MetricTableRegistry(tmp_path).purge()
    assert sorted(removed) == sorted(stale)
    assert all(not p.exists() for p in stale)
    assert all(p.exists() for p in kept)
    assert (tmp_path / "metric_table_dir.csv").is_dir()


def test_purge_explicit_dir_and_missing_dir(tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "metric_table_a.csv").write_text("old\n")
    registry = MetricTableRegistry(tmp_path / "unused")
    assert registry.purge(other) == [other / "metric_table_a.csv"]
    assert registry.purge(tmp_path / "does-not-exist") == []


def test_purge_then_session_writes_fresh_file(tmp_path: Path) -> None:
    MetricTableRegistry(tmp_path).register("t", ["x"]).add_row({"x": 1}, test="old")
    session = MetricTableRegistry(tmp_path)
    session.purge()
    session.register("t", ["x", "y"]).add_row({"x": 2, "y": 3}, test="new")
    assert _read(tmp_path / "metric_table_t.csv") == [["test", "x", "y"], ["new", "2", "3"]]


def test_pure_modules_import_neither_pytest_nor_torch() -> None:
    code = (
        "import sys, pytest_gpuutil; before = set(sys.modules); "
        "import pytest_gpuutil.report.metric_tables, pytest_gpuutil.capture.timing; "
        "print(sorted(m for m in set(sys.modules) - before "
        "if m.split('.')[0] in ('pytest', '_pytest', 'torch')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[2],
    ).stdout
    assert out.strip() == "[]"
