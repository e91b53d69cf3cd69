"""``gpuutil merge A.json B.json ... -o OUT.json``: CI shards into one run, and what it refuses in one line."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_gpuutil.cli import merge as merge_cli
from pytest_gpuutil.cli import report as report_cli
from pytest_gpuutil.records import TestRecord
from pytest_gpuutil.rundoc.reading import load_run_doc

H100 = {"gpu_model": "NVIDIA H100 80GB HBM3", "gpu_count": 1, "host": "gpu-a", "git_commit": "abc"}


def write_run(path: Path, tests: dict[str, float], machine=H100) -> Path:
    records = [TestRecord(t, "passed", busy_pct=b, gpu_busy_ms=10.0, kernel_count=3).to_dict() for t, b in tests.items()]
    path.write_text(json.dumps({"format": "pytest-gpuutil", "version": 1, "created": "2026-11-23T10:00:00+00:00",
                                "machine_info": machine, "tests": records}))
    return path


@pytest.fixture
def shards(tmp_path: Path) -> tuple[Path, Path]:
    return (write_run(tmp_path / "a.json", {"t.py::test_a": 50.0}),
            write_run(tmp_path / "b.json", {"t.py::test_b": 20.0, "t.py::test_c": 30.0}))


def test_two_shards_make_one_run_that_report_and_compare_read(tmp_path, shards, capsys):
    out = tmp_path / "merged" / "gpu_util.json"
    assert merge_cli.main([*map(str, shards), "-o", str(out)]) == 0
    stdout, stderr = capsys.readouterr()
    assert stdout == f"merged 2 runs into {out} (3 tests)\n" and stderr == ""
    assert set(load_run_doc(out).records) == {"t.py::test_a", "t.py::test_b", "t.py::test_c"}
    assert report_cli.main([str(out)]) == 0
    page = (out.parent / "report.html").read_text(encoding="utf-8")
    assert all(t in page for t in ("t.py::test_a", "t.py::test_b", "t.py::test_c"))


def test_a_shard_merged_with_itself_exits_2_with_one_line(tmp_path, shards, capsys):
    out = tmp_path / "out.json"
    assert merge_cli.main([str(shards[0]), str(shards[0]), "-o", str(out)]) == 2
    stdout, stderr = capsys.readouterr()
    assert stdout == "" and stderr == (f"error: {shards[0]}: test t.py::test_a is twice in the list "
                                       "(each test may come from one shard only)\n")
    assert not out.exists()


def test_shards_of_different_machines_merge_with_a_warning(tmp_path, shards, capsys):
    other = write_run(tmp_path / "c.json", {"t.py::test_d": 10.0}, machine={**H100, "host": "gpu-b",
                                                                             "gpu_model": "NVIDIA H200"})
    out = tmp_path / "out.json"
    assert merge_cli.main([*map(str, shards), str(other), "-o", str(out)]) == 0
    stdout, stderr = capsys.readouterr()
    assert stdout == f"merged 3 runs into {out} (4 tests, 2 machines)\n"
    assert stderr == ("warning: the shards ran on 2 machines (they differ in gpu_model, host): each record names its "
                      "own (gpu-a, gpu-b)\n")
    records = load_run_doc(out).records
    assert records["t.py::test_d"].machine == "gpu-b" and records["t.py::test_a"].machine == "gpu-a"


@pytest.mark.parametrize("content, problem", [
    (None, "no such file"),
    (b"\x00\xff garbage", "not UTF-8 text"),
    (b"{not json", "not valid JSON"),
])
def test_a_bad_shard_is_one_error_line(tmp_path, shards, capsys, content, problem):
    bad = tmp_path / "bad.json"
    if content is not None:
        bad.write_bytes(content)
    assert merge_cli.main([str(shards[0]), str(bad), "-o", str(tmp_path / "out.json")]) == 2
    stdout, stderr = capsys.readouterr()
    assert stdout == "" and len(stderr.splitlines()) == 1 and stderr.startswith(f"error: {bad}: ") and problem in stderr


def test_without_an_output_is_a_usage_error(shards, capsys):
    assert merge_cli.main([str(shards[0])]) == 2
    assert capsys.readouterr().err == "error: the following arguments are required: -o/--output\n"


def test_an_output_that_cannot_be_written(tmp_path, shards, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert merge_cli.main([str(shards[0]), "-o", str(blocker / "out.json")]) == 2
    assert capsys.readouterr().err.startswith(f"error: {blocker / 'out.json'}: cannot write: ")


def test_python_dash_m_runs_it(tmp_path, shards):
    out = tmp_path / "out.json"
    done = subprocess.run([sys.executable, "-m", "pytest_gpuutil", "merge", *map(str, shards), "-o", str(out)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert len(load_run_doc(out).records) == 3
    done = subprocess.run([sys.executable, "-m", "pytest_gpuutil", "merge", str(shards[1]), str(shards[1]), "-o",
                           str(out)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1 and "Traceback" not in done.stderr


PLANTED = Path(__file__).resolve().parents[1] / "data" / "html_golden" / "planted_timelines.json.gz"


def planted_timeline() -> dict:
    """The timeline of the HTML golden page's planted window (a real one, as a run writes it)."""
    import gzip

    return next(iter(json.loads(gzip.decompress(PLANTED.read_bytes()))["tests"].values()))


def test_the_shards_timelines_are_merged_beside_the_output_and_drawn_by_report(tmp_path, capsys):
    from pytest_gpuutil.report.timelines import read_sidecar, write_sidecar

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = write_run(tmp_path / "a" / "gpu_util.json", {"t.py::test_a": 50.0})
    b = write_run(tmp_path / "b" / "gpu_util.json", {"t.py::test_b": 20.0, "t.py::test_c": 30.0})
    timeline = planted_timeline()
    write_sidecar(a.parent, {"t.py::test_a": timeline, "t.py::test_gone": timeline})  # not a test of this run
    write_sidecar(b.parent, {"t.py::test_c": timeline})
    out = tmp_path / "merged" / "gpu_util.json"
    assert merge_cli.main([str(a), str(b), "-o", str(out)]) == 0
    stdout, stderr = capsys.readouterr()
    assert stdout == f"merged 2 runs into {out} (3 tests, 2 with a timeline)\n" and stderr == ""
    merged, problem = read_sidecar(out)
    assert problem == "" and merged == {"t.py::test_a": timeline, "t.py::test_c": timeline}
    assert report_cli.main([str(out)]) == 0
    assert capsys.readouterr().out.endswith("(3 tests, 2 with a timeline)\n")
    page = (out.parent / "report.html").read_text(encoding="utf-8")
    assert 'id="gu-timelines"' in page and "t.py::test_c" in page


def test_a_shards_broken_timelines_are_a_warning_and_an_old_merge_s_are_removed(tmp_path, shards, capsys):
    (tmp_path / "timelines.json.gz").write_bytes(b"not gzip")  # beside both shards
    out_dir = tmp_path / "merged"
    out_dir.mkdir()
    (out_dir / "timelines.json.gz").write_bytes(b"an earlier merge's")
    out = out_dir / "gpu_util.json"
    assert merge_cli.main([*map(str, shards), "-o", str(out)]) == 0
    stdout, stderr = capsys.readouterr()
    assert stdout == f"merged 2 runs into {out} (3 tests)\n"
    assert stderr.startswith(f"warning: {tmp_path / 'timelines.json.gz'}: not a timelines file (")
    assert stderr.endswith("; its tests are merged without their timelines\n") and stderr.count("\n") == 1
    assert not (out_dir / "timelines.json.gz").exists()
