"""``gpuutil compare --fail``: one expression per use, repeatable or comma-separated, anywhere."""
from __future__ import annotations

from pathlib import Path

import pytest

from pytest_gpuutil.cli import compare as compare_cli
from tests.cli.test_compare import rec, write_run


@pytest.fixture
def runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    monkeypatch.chdir(tmp_path)
    base = write_run(tmp_path / "base.json", [rec("t.py::test_a")])
    current = write_run(tmp_path / "cur.json", [rec("t.py::test_a", kernel_count=60, wall_ms=9.0)])
    write_run(tmp_path / "wall.json", [rec("t.py::test_a", wall_ms=1.0)])
    return str(base), str(current)


@pytest.mark.parametrize("where", ["before", "between", "after"])
@pytest.mark.parametrize("fail", [
    ["--fail", "kernel_count:5", "--fail", "busy_pct:5"],
    ["--fail", "kernel_count:5,busy_pct:5"],
    ["--fail=kernel_count:5", "--fail", "busy_pct:5"],
    ["--fail", "kernel_count:5 busy_pct:5"],
])
def test_fail_values_anywhere_give_the_same_gates(runs, capsys, fail, where):
    base, current = runs
    argv = {"before": [*fail, base, current], "between": [base, *fail, current], "after": [base, current, *fail]}[where]
    assert compare_cli.main(argv) == 1
    out, err = capsys.readouterr()
    assert out.splitlines()[-1].endswith("[kernel_count:5 busy_pct:5]"), out
    assert "kernel_count" in out and err == ""


def test_a_second_expression_after_fail_is_one_line_error_showing_the_repeatable_form(runs, capsys):
    base, current = runs
    assert compare_cli.main(["--fail", "kernel_count:5", "busy_pct:5", base, current]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        "error: --fail takes one expression per use: 'busy_pct:5' after --fail kernel_count:5 would not be read "
        "as one; write --fail kernel_count:5 --fail busy_pct:5 (or --fail kernel_count:5,busy_pct:5)\n"
    )


def test_a_run_file_after_fail_is_a_run_file(runs, capsys):
    base, _ = runs
    assert compare_cli.main([base, "--fail", "wall_ms:100%", "wall.json"]) == 0
    assert capsys.readouterr().out.startswith("no regressions: 1 tests compared")
