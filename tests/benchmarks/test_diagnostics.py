"""The diagnostics (benchmarks/diagnostics/: hook_timer.py, flush_cost.py, floor_probe.py) and the
benchmarks' helpers for them (bench_overhead.py's plain variants, pool_overhead.py)."""
from __future__ import annotations

import importlib
import json
import os
import re
from pathlib import Path

import pytest

from tests.helpers import SYNTHETIC_CONFTEST

DIAGNOSTICS = Path(__file__).resolve().parents[2] / "benchmarks" / "diagnostics"


@pytest.fixture
def hook_timer(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(DIAGNOSTICS))
    return importlib.import_module("hook_timer")


def test_every_method_it_times_is_still_there(hook_timer) -> None:
    """A renamed method would drop out of the figures without a word: name them all here."""
    for module, cls, names in hook_timer.METHODS:
        owner = getattr(importlib.import_module(module), cls)
        assert [n for n in names if n not in vars(owner)] == [], f"{module}.{cls}"


def test_a_run_prints_each_part_with_its_calls(pytester: pytest.Pytester, hook_timer,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makeconftest(SYNTHETIC_CONFTEST)
    pytester.makepyfile(test_three="""
import pytest

@pytest.mark.parametrize("i", range(3))
def test_t(gpu, i):
    gpu.run("nvjet_sm90_tst", 100_000)
""")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(DIAGNOSTICS), os.environ.get("PYTHONPATH")])))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "hook_timer", "--gpu-util", "-s")
    result.assert_outcomes(passed=3)
    line = re.search(r"^HOOKTIME (\{.*\})$", result.stdout.str(), re.M)
    times = json.loads(line.group(1))
    # the continuous windows alone act at a call's edges here: Measuring calls them straight (not Measurement's)
    for name in ("test function", "whole test protocol", "hook pytest_runtest_call", "ContinuousWindows.begin_at",
                 "ContinuousWindows.end_at", "ContinuousCapture.begin", "Measuring.ready"):
        calls, seconds, median = times[name]
        assert calls >= 3 and seconds >= median >= 0, name


def test_flush_cost_times_both_shapes(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """benchmarks/diagnostics/flush_cost.py runs the flush's two analysis steps on both shapes."""
    monkeypatch.syspath_prepend(str(DIAGNOSTICS))
    flush_cost = importlib.import_module("flush_cost")
    assert flush_cost.main(["--repeats", "1", "--whole"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"small +attribution +[0-9.]+ ms +findings +[0-9.]+ ms", out)
    assert re.search(r"launch_bound +attribution", out)
    assert re.search(r"launch_bound +whole flush +[0-9.]+ ms +[0-9.]+ µs a window +[0-9.]+ µs an event", out)


def test_floor_probe_refuses_unknown_or_clashing_parts(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """benchmarks/diagnostics/floor_probe.py: one clear line for a bad --floor-probe, nothing run."""
    pytester.makepyfile(test_one="def test_one():\n    pass\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(DIAGNOSTICS), os.environ.get("PYTHONPATH")])))
    for value, said in (("kernels,bogus", "unknown part(s) ['bogus']"), ("kernels,gpu_work", "at most one of"),
                        ("window", "'window' needs a CUPTI source")):
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "floor_probe", f"--floor-probe={value}")
        assert result.ret == pytest.ExitCode.USAGE_ERROR, value
        assert said in result.stderr.str(), value
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "floor_probe")
    result.assert_outcomes(passed=1)  # no parts: the probe stays out of the way


def test_bench_overhead_runs_a_plain_variant_without_gpu_util(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """--plain-variant: the run has its arguments, no --gpu-util, and diagnostics/ on PYTHONPATH."""
    import subprocess

    from benchmarks import bench_overhead

    seen: list[tuple[list[str], str]] = []

    def fake_run(cmd, **kwargs):
        seen.append((cmd, kwargs["env"].get("PYTHONPATH", "")))
        return subprocess.CompletedProcess(cmd, 0, "floor probe window: profiler start-up 0.050 s\n1 passed in 0.50s\n", "")

    monkeypatch.setattr(bench_overhead.subprocess, "run", fake_run)
    result = bench_overhead.measure(["small"], 1, tmp_path, [], {}, plain_variants={"floor": ["-p", "floor_probe"]})
    (plain, _), (gpu_util, _), (floor, floor_path) = seen
    assert "--gpu-util" not in plain and "--gpu-util" in gpu_util
    assert "--gpu-util" not in floor and floor[-2:] == ["-p", "floor_probe"]
    assert str(DIAGNOSTICS) in floor_path.split(os.pathsep)
    variant = result["small"]["variants"]["floor"]
    assert variant["s"] == [0.5] and variant["startup_s"] == [0.05] and variant["ratio"] == pytest.approx(0.9)


def test_pool_overhead_pairs_each_round_with_its_own_plain_run(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """benchmarks/pool_overhead.py: rounds of two runs pooled, start-ups subtracted."""
    from benchmarks import pool_overhead
    first = {"suites": {"small": {"plain_s": [1.0, 2.0], "gpu_util_s": [1.2, 2.2], "startup_s": [0.1, 0.2],
                                  "variants": {"floor": {"s": [1.05, 2.1], "startup_s": [None, None]}}}}}
    second = {"suites": {"small": {"plain_s": [1.0], "gpu_util_s": [1.5], "startup_s": [0.0], "variants": {}}}}
    (tmp_path / "a.json").write_text(json.dumps(first))
    (tmp_path / "b.json").write_text(json.dumps(second))
    assert pool_overhead.main([str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--json", str(tmp_path / "t.json")]) == 0
    table = json.loads((tmp_path / "t.json").read_text())["small"]
    assert table["plain"]["rounds"] == 3 and table["plain"]["median_s"] == 1.0
    assert table["gpu_util"]["rounds"] == 3
    assert table["gpu_util"]["median_ratio"] == pytest.approx(1.1)  # 1.1, 1.0, 1.5
    assert table["floor"]["rounds"] == 2 and table["floor"]["median_ratio"] == pytest.approx(1.05)
    assert "gpu_util" in capsys.readouterr().out
    (tmp_path / "bad.json").write_text("{not json")
    assert pool_overhead.main([str(tmp_path / "bad.json")]) == 2
    assert "bad.json: cannot be read" in capsys.readouterr().err


def test_in_test_gpu_probe_times_each_part_in_situ_and_in_a_loop(tmp_path: Path) -> None:
    """benchmarks/checks/in_test_gpu_probe.py (a GPU probe) checked on the synthetic GPU: its runs pass
    and its table has the in-test parts, the loop's figures and the sampler's GIL turns."""
    import subprocess
    import sys

    probe = Path(__file__).resolve().parents[2] / "benchmarks" / "checks" / "in_test_gpu_probe.py"
    done = subprocess.run([sys.executable, str(probe), "--out", str(tmp_path), "--synthetic", "--tests", "5",
                           "--rounds", "1", "--variants", "default,sampler_py_wait"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    text = (tmp_path / "in_test_gpu_probe.txt").read_text(encoding="utf-8")
    for row in ("Measuring.begin_test", "ContinuousCapture.begin+end (loop)", "HostPlaces.begin",
                "sampler: GIL turns (a run)"):
        assert row in text, text
    runs = json.loads((tmp_path / "in_test_gpu_probe.json").read_text(encoding="utf-8"))["runs"]
    assert [run["variant"] for run in runs] == ["default", "sampler_py_wait"] and not any("failed" in r for r in runs)


def test_columnar_floor_plugin_writes_every_tests_line_row_and_document(pytester: pytest.Pytester,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """benchmarks/checks/columnar_floor_plugin.py (floor_probe.py's columnar lower bound) without a GPU:
    every test, skipped and failed ones too, has its spool line, CSV row and document entry, in
    order, with its outcome; flushes every 100 tests; its own seconds are printed."""
    import csv

    checks = Path(__file__).resolve().parents[2] / "benchmarks" / "checks"
    root = Path(__file__).resolve().parents[2]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(checks), str(root), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("COLUMNAR_DIR", str(pytester.path / "out"))
    body = "".join(f"def test_{i}():\n    pass\n" for i in range(205))
    pytester.makepyfile(test_many="import pytest\n" + body + "@pytest.mark.skip\ndef test_skipped():\n    pass\n"
                                  "def test_fails():\n    assert 0\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "columnar_floor_plugin")
    result.assert_outcomes(passed=205, skipped=1, failed=1)
    own = [line.split() for line in result.outlines if line.startswith("FLOOR_OWN_S ")]
    assert own and float(own[-1][1]) > 0 and own[-1][3] == "207"
    parts = dict(p.split("=") for line in result.outlines if line.startswith("COLUMNAR_PARTS ") for p in line.split()[1:])
    assert set(parts) == {"in_test", "reports", "flush", "end"}
    assert abs(sum(map(float, parts.values())) - float(own[-1][1])) < 1e-6  # the parts add up to its own seconds
    spooled = [json.loads(line) for line in (pytester.path / "out" / "gpu_util.spooled.jsonl").read_text().splitlines()]
    document = json.loads((pytester.path / "out" / "gpu_util.json").read_text())
    with open(pytester.path / "out" / "gpu_util.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    names = [f"test_many.py::test_{i}" for i in range(205)] + ["test_many.py::test_skipped", "test_many.py::test_fails"]
    assert [r["test"] for r in spooled] == [r["test"] for r in document["tests"]] == [r["test"] for r in rows] == names
    assert [r["outcome"] for r in rows[-3:]] == ["passed", "skipped", "failed"]
    import dataclasses

    from pytest_gpuutil.records import TestRecord

    assert set(spooled[0]) == {f.name for f in dataclasses.fields(TestRecord)}  # the run document's every key
    assert document["totals"]["tests"] == 207
