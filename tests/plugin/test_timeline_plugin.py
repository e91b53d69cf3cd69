"""Timelines in real pytest runs: the synthetic GPU (tests/helpers SYNTHETIC_CONFTEST) runs known
kernels, host waits and streams; the run keeps the worst tests' timelines (timelines.json.gz), the
page draws them, ``gpuutil report`` draws them again from the saved run."""
from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from pytest_gpuutil.analysis.timeline import decode
from pytest_gpuutil.cli.report import main as report_main
from tests.helpers import SYNTHETIC_CONFTEST, output, run

pytestmark = pytest.mark.usefixtures("warm_torch")

TESTS = """
import pytest

@pytest.mark.parametrize("i", range(6))
def test_mm(gpu, i):
    gpu.run("nvjet_sm90_tst_256x128", 100_000 * (i + 1))

def test_streams(gpu):
    gpu.run("flash_fwd_kernel", 200_000, stream=7)
    gpu.run("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 50_000, stream=8)

def test_waits(gpu):
    gpu.replay([("nvjet_a", "kernel", 0, 100_000), ("Memcpy DtoH (Device -> Pageable)", "gpu_memcpy", 150_000, 20_000),
                ("nvjet_b", "kernel", 2_000_000, 100_000)], [("cudaStreamSynchronize", 150_000, 1_500_000)])

def test_idle():
    pass
"""


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(SYNTHETIC_CONFTEST)
    pytester.makepyfile(test_work=TESTS)
    return pytester


def sidecar(path: Path) -> dict:
    doc = json.loads(gzip.decompress((path / ".gpu_util" / "timelines.json.gz").read_bytes()))
    assert doc["format"] == "pytest-gpuutil-timelines"
    return doc["tests"]


def page_timelines(page: str) -> dict:
    found = re.search(r'id="gu-timelines">(.*?)</script>', page, re.S)
    return json.loads(found.group(1))["tests"] if found else {}


def test_the_worst_tests_get_timelines_by_default(suite: pytest.Pytester) -> None:
    result = run(suite, "--gpu-util", "--gpu-util-html")
    result.assert_outcomes(passed=9)
    kept = sidecar(suite.path)
    assert "test_work.py::test_idle" not in kept  # no GPU work, no timeline
    assert {f"test_work.py::test_mm[{i}]" for i in range(6)} | {"test_work.py::test_streams"} <= set(kept)
    streams = decode(kept["test_work.py::test_streams"])
    assert [(lane.device, lane.stream, lane.process) for lane in streams.lanes] == [("0", "7", ""), ("0", "8", "")]
    assert sorted(k[0] for k in streams.keys) == ["flash_fwd_kernel", "ncclDevKernel_AllReduce_Sum_f32_RING_LL"]
    assert streams.dur.tolist() == sorted([200_000, 50_000], key=lambda d: -d)  # stream 7 first
    waits = decode(kept["test_work.py::test_waits"])
    assert [w[2] for w in waits.waits] == ["cudaStreamSynchronize"]
    assert waits.waits[0][1] - waits.waits[0][0] == 1_500_000
    assert any(g[2] >= 1_700_000 for g in waits.gaps)  # the GPU idle while the host waited, and after
    page = (suite.path / ".gpu_util" / "report.html").read_text(encoding="utf-8")
    assert len(page_timelines(page)) == len(kept) and "window.guTimeline" in page
    assert ".gpu_util/timelines.json.gz" in output(result)


def slowest_and_least_busy(path: Path) -> tuple[str, str]:
    """The slowest and the least busy test with GPU work, by the run's own records (timings vary)."""
    records = [t for t in json.loads((path / ".gpu_util" / "gpu_util.json").read_text())["tests"] if t["kernel_count"]]
    return (max(records, key=lambda t: t["wall_ms"])["test"], min(records, key=lambda t: t["busy_pct"])["test"])


def test_n_worst_keeps_at_most_n(suite: pytest.Pytester) -> None:
    run(suite, "--gpu-util", "--gpu-util-html", "--gpu-util-timelines", "2").assert_outcomes(passed=9)
    assert set(sidecar(suite.path)) == set(slowest_and_least_busy(suite.path))  # N=2: one of each (maybe one test)
    run(suite, "--gpu-util", "--gpu-util-html", "--gpu-util-timelines", "1", "-k", "mm").assert_outcomes(passed=6, deselected=3)
    assert list(sidecar(suite.path)) == [slowest_and_least_busy(suite.path)[0]]  # N=1: the slowest


def test_off_draws_none_and_the_page_is_as_before(suite: pytest.Pytester) -> None:
    run(suite, "--gpu-util", "--gpu-util-html", "--gpu-util-timelines=off").assert_outcomes(passed=9)
    assert not (suite.path / ".gpu_util" / "timelines.json.gz").exists()
    page = (suite.path / ".gpu_util" / "report.html").read_text(encoding="utf-8")
    assert 'id="gu-timelines"' not in page and "guTimeline" not in page


def test_without_the_page_no_timelines_are_drawn(suite: pytest.Pytester) -> None:
    run(suite, "--gpu-util").assert_outcomes(passed=9)
    assert not (suite.path / ".gpu_util" / "timelines.json.gz").exists()


def test_a_bad_value_is_one_usage_error(suite: pytest.Pytester) -> None:
    result = run(suite, "--gpu-util", "--gpu-util-timelines", "worst")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "expected a number of tests, all or off, got 'worst'" in output(result)
    suite.makeini("[pytest]\ngpu_util_timeline_gap = -3\n")
    result = run(suite, "--gpu-util")
    assert result.ret == pytest.ExitCode.USAGE_ERROR and "gpu_util_timeline_gap" in output(result)


def test_gpuutil_report_draws_the_saved_timelines(suite: pytest.Pytester, capsys: pytest.CaptureFixture) -> None:
    run(suite, "--gpu-util", "--gpu-util-html", "--gpu-util-timelines=all", "--gpu-util-timeline-gap=0.5")
    kept = sidecar(suite.path)
    assert len(kept) == 9 and all(t["gt"] == 500_000 for t in kept.values())  # test_idle too: an empty timeline
    out = suite.path / "again.html"
    assert report_main([str(suite.path / ".gpu_util" / "gpu_util.json"), "-o", str(out)]) == 0
    assert "9 with a timeline" in capsys.readouterr().out
    assert len(page_timelines(out.read_text(encoding="utf-8"))) == 9
    (suite.path / ".gpu_util" / "timelines.json.gz").write_bytes(b"not gzip")
    assert report_main([str(suite.path / ".gpu_util" / "gpu_util.json"), "-o", str(out)]) == 0
    assert "not a timelines file" in capsys.readouterr().err
    assert 'id="gu-timelines"' not in out.read_text(encoding="utf-8")  # an older run, or a broken file: no timelines


def test_under_xdist_the_timelines_travel_to_the_controller(suite: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    run(suite, "-n", "2", "--gpu-util", "--gpu-util-html").assert_outcomes(passed=9)
    kept = sidecar(suite.path)
    assert "test_work.py::test_streams" in kept and "test_work.py::test_waits" in kept


def test_ci_shards_timelines_survive_gpuutil_merge(suite: pytest.Pytester) -> None:
    """Two shards of one suite (each its own run, as two CI jobs), merged: the merged page draws
    the timelines of both."""
    from pytest_gpuutil.cli.merge import main as merge_main

    run(suite, "--gpu-util", "--gpu-util-html", "--gpu-util-dir=shard1", "-k", "test_mm").assert_outcomes(passed=6)
    run(suite, "--gpu-util", "--gpu-util-html", "--gpu-util-dir=shard2", "-k", "not test_mm").assert_outcomes(passed=3)
    first = json.loads(gzip.decompress((suite.path / "shard1" / "timelines.json.gz").read_bytes()))["tests"]
    second = json.loads(gzip.decompress((suite.path / "shard2" / "timelines.json.gz").read_bytes()))["tests"]
    assert first and second and not set(first) & set(second)
    merged = suite.path / "merged" / "gpu_util.json"
    assert merge_main([str(suite.path / "shard1" / "gpu_util.json"), str(suite.path / "shard2" / "gpu_util.json"),
                       "-o", str(merged)]) == 0
    assert report_main([str(merged)]) == 0
    drawn = page_timelines((merged.parent / "report.html").read_text(encoding="utf-8"))  # keyed by the page's rows
    assert len(drawn) == len(first) + len(second)
    assert sorted(drawn.values(), key=json.dumps) == sorted([*first.values(), *second.values()], key=json.dumps)
