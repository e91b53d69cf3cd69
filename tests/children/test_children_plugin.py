"""Child processes end to end under pytest --gpu-util (pytester), without a GPU.

The parent measures through the synthetic source of tests/helpers (the event-source hook, on the
monotonic clock); the tests start real child processes (synthetic_child.py) that hand real spool
chunks over, stamped on the wall clock as CUPTI stamps them: the merge, the clocks, the windows,
the records, xdist, SIGKILL and the session's end all run for real.
"""
from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest

from tests.helpers import SYNTHETIC_CONFTEST, output, read_json, records_by_test, run

pytestmark = pytest.mark.usefixtures("warm_torch")

CHILD = str(Path(__file__).resolve().parent / "synthetic_child.py")
CONFTEST = SYNTHETIC_CONFTEST + f'''

import subprocess, sys

CHILD = {CHILD!r}


@pytest.fixture
def child():
    """child("kernel:NAME:MS", ...) runs the synthetic child to its end."""
    def start(*steps):
        subprocess.run([sys.executable, CHILD, *steps], check=True, timeout=60)
    return start
'''


def said(result: pytest.RunResult) -> str:
    """The run's output as one line of words (the summary wraps its prose to the terminal)."""
    return " ".join(output(result).split())


def records(pytester: pytest.Pytester) -> dict:
    return records_by_test(read_json(pytester.path / ".gpu_util" / "gpu_util.json"))


def test_a_childs_gpu_work_is_its_tests(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_kids="""
import os

def test_child_only(child):
    child("kernel:nvjet_sm90_child:30", "kernel:vectorized_elementwise_kernel:10")

def test_parent_and_child(gpu, child):
    gpu.run("nvjet_sm90_parent", 20_000_000)
    child("kernel:nvjet_sm90_child:15:1")

def test_no_process(gpu):
    gpu.run("nvjet_sm90_parent", 5_000_000)
    assert os.environ.get("PYTEST_GPUUTIL_SPOOL")
""")
    result = run(pytester, "--gpu-util")
    result.assert_outcomes(passed=3)
    got = records(pytester)
    only = got["test_kids.py::test_child_only"]
    assert only["gpu_busy_ms"] == pytest.approx(40.0, rel=0.02)
    assert only["kernel_count"] == 2 and only["top_kernel"] == "nvjet_sm90_child"
    (kid,) = only["processes"]  # the parent did no GPU work: only the child takes part
    assert kid["program"] == "python synthetic_child.py" and not kid["parent"]
    assert kid["gpu_ms"] == pytest.approx(40.0, rel=0.02) and kid["devices"] == ["0"]
    assert kid["peak_mb"] == pytest.approx(64.0) and kid["memory_source"] == "allocator"
    assert kid["startup_ms"] == pytest.approx(3.0) and kid["note"] == ""

    both = got["test_kids.py::test_parent_and_child"]
    assert both["devices"] == ["0", "1"] and both["kernel_count"] == 2
    assert both["gpu_busy_us_by_device"]["0"] == pytest.approx(20_000, rel=0.02)
    assert both["gpu_busy_us_by_device"]["1"] == pytest.approx(15_000, rel=0.02)
    parent, kid = both["processes"]
    assert parent["parent"] and parent["pid"] == os.getpid() and parent["gpu_ms"] == pytest.approx(20.0, rel=0.02)
    assert kid["devices"] == ["1"] and kid["gpu_ms"] == pytest.approx(15.0, rel=0.02)

    assert got["test_kids.py::test_no_process"]["processes"] == []
    out = said(result)
    assert "3 tests profiled, 1 with GPU work only in child processes, 0 launched no GPU work" in out
    assert "child processes: 2 measured, CUPTI start-up 3.0 ms each" in out
    assert "PYTEST_GPUUTIL_SPOOL" not in os.environ  # the run's environment is put back


def test_parent_and_child_work_share_one_clock(pytester: pytest.Pytester) -> None:
    """Parent, child, parent: the test's trace keeps that order, with the child's work in between."""
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_order="""
def test_interleaved(gpu, child):
    gpu.run("parent_a", 10_000_000)
    child("kernel:child_b:10")
    gpu.run("parent_c", 10_000_000)
""")
    run(pytester, "--gpu-util", "--gpu-util-traces", "all").assert_outcomes(passed=1)
    from pytest_gpuutil.traces.reader import read_trace

    (trace_file,) = (pytester.path / ".gpu_util" / "traces").iterdir()
    events = sorted(read_trace(str(trace_file)).events, key=lambda e: e.start_ns)
    assert [e.name for e in events] == ["parent_a", "child_b", "parent_c"]
    assert events[0].end_ns <= events[1].start_ns and events[1].end_ns <= events[2].start_ns
    record = records(pytester)["test_order.py::test_interleaved"]
    assert record["gpu_busy_ms"] == pytest.approx(30.0, rel=0.03)


def test_work_in_set_up_goes_where_the_parents_does(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_setup="""
import pytest

@pytest.fixture
def warmed(child):
    child("kernel:setup_kernel:20")

def test_call(child, warmed):
    child("kernel:call_kernel:10")
""")
    run(pytester, "--gpu-util").assert_outcomes(passed=1)
    record = records(pytester)["test_setup.py::test_call"]
    assert record["kernel_count"] == 1 and record["top_kernel"] == "call_kernel"
    assert record["gpu_busy_ms"] == pytest.approx(10.0, rel=0.03)


def test_a_killed_child_keeps_what_it_handed_over_and_is_noted(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_kill=f"""
import os, signal, subprocess, sys

def test_killed():
    env = dict(os.environ, PYTEST_GPUUTIL_PERIOD="3600")  # hands over at its synchronize only
    proc = subprocess.Popen([sys.executable, {CHILD!r}, "kernel:handed_over:20", "sync",
                             "kernel:never_handed_over:20", "ready", "sleep:60000"], stdout=subprocess.PIPE, text=True,
                            env=env)
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
""")
    result = run(pytester, "--gpu-util")
    result.assert_outcomes(passed=1)
    record = records(pytester)["test_kill.py::test_killed"]
    assert record["top_kernel"] == "handed_over" and record["kernel_count"] == 1
    assert "ended without handing over its records (killed?)" in record["note"]
    assert re.search(r"is missing \(at most the \d+\.\d s until it was found ended\)", record["note"]), record["note"]
    (kid,) = record["processes"]
    assert kid["note"] == "ended without handing over its records" and kid["gpu_ms"] == pytest.approx(20.0, rel=0.03)


def test_xdist_workers_children_go_to_the_workers_tests(pytester: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_spread="""
import os, pytest

@pytest.mark.parametrize("i", range(6))
def test_spread(child, i):
    child(f"kernel:kernel_{i}:{5 * (i + 1)}")
""")
    result = run(pytester, "-n", "2", "--gpu-util")
    result.assert_outcomes(passed=6)
    got = records(pytester)
    assert {r["worker"] for r in got.values()} == {"gw0", "gw1"}
    for i in range(6):
        record = got[f"test_spread.py::test_spread[{i}]"]
        assert record["top_kernel"] == f"kernel_{i}" and record["kernel_count"] == 1
        assert record["gpu_busy_ms"] == pytest.approx(5.0 * (i + 1), rel=0.05)
        assert [p["gpu_ms"] for p in record["processes"]] == [pytest.approx(5.0 * (i + 1), rel=0.05)]
    assert "6 with GPU work only in child processes" in said(result)


def test_a_nested_pytest_run_is_not_counted_twice(pytester: pytest.Pytester) -> None:
    """A test that runs pytest --gpu-util in a child (pytester's runpytest_subprocess): the nested run
    reports its own tests' work, and its process and children are not added to the outer test."""
    pytester.makeconftest(CONFTEST)
    inner = pytester.mkdir("inner")
    (inner / "conftest.py").write_text(CONFTEST)
    (inner / "test_inner.py").write_text("def test_inner(child):\n    child('kernel:inner_kernel:20')\n")
    pytester.makepyfile(test_outer=f"""
import subprocess, sys

def test_outer(child):
    child("kernel:outer_kernel:10")
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--gpu-util",
                    "--gpu-util-dir", {str(inner / "out")!r}, {str(inner)!r}], check=True, timeout=120)
""")
    run(pytester, "--gpu-util", "test_outer.py").assert_outcomes(passed=1)
    outer = records(pytester)["test_outer.py::test_outer"]
    assert outer["top_kernel"] == "outer_kernel" and outer["kernel_count"] == 1
    assert outer["gpu_busy_ms"] == pytest.approx(10.0, rel=0.05)
    nested = records_by_test(read_json(inner / "out" / "gpu_util.json"))
    (record,) = nested.values()
    assert record["top_kernel"] == "inner_kernel" and record["gpu_busy_ms"] == pytest.approx(20.0, rel=0.05)


def test_children_off_turns_it_all_off(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_off="""
import os

def test_off(child):
    assert "PYTEST_GPUUTIL_SPOOL" not in os.environ and "CUDA_INJECTION64_PATH" not in os.environ
    child("kernel:unseen:10")
""")
    result = run(pytester, "--gpu-util", "--gpu-util-children=off")
    result.assert_outcomes(passed=1)
    record = records(pytester)["test_off.py::test_off"]
    assert record["processes"] == [] and record["kernel_count"] == 0
    assert "child processes" not in output(result)


def test_the_session_ends_with_a_child_still_running(pytester: pytest.Pytester, tmp_path: Path) -> None:
    pytester.makeconftest(CONFTEST)
    pidfile, spoolfile = tmp_path / "pid", tmp_path / "spool"
    pytester.makepyfile(test_daemon=f"""
import os, subprocess, sys

def test_starts_a_server():
    proc = subprocess.Popen([sys.executable, {CHILD!r}, "kernel:served:10", "ready", "sleep:20000"],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    open({str(pidfile)!r}, "w").write(str(proc.pid))
    open({str(spoolfile)!r}, "w").write(os.environ["PYTEST_GPUUTIL_SPOOL"])
""")
    try:
        result = run(pytester, "--gpu-util")
        result.assert_outcomes(passed=1)
        assert "was still running when the session ended" in said(result)
        record = records(pytester)["test_daemon.py::test_starts_a_server"]
        assert record["top_kernel"] == "served"  # the running child was asked and handed over
        assert not Path(spoolfile.read_text()).exists()  # the spool is removed
    finally:
        if pidfile.exists():
            try:
                os.kill(int(pidfile.read_text()), 9)
            except ProcessLookupError:
                pass


def test_the_option_is_checked(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_a="def test_a(): pass")
    result = run(pytester, "--gpu-util", "--gpu-util-children=sometimes")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--gpu-util-children" in output(result) and "expected on or off" in output(result)


if sys.platform != "linux":  # pragma: no cover - /proc, fork and the injection are Linux's
    pytestmark = [pytestmark, pytest.mark.skip("child-process measurement is Linux-only")]


def test_processes_sharing_a_gpu_at_once_are_said_to_overlap_and_never_added(pytester: pytest.Pytester) -> None:
    """Two children busy on GPU 0 at the same time (as time-sliced ranks are): the test's figure is the
    union, the record, its process rows and the HTML page say they overlapped, and no output shows the rows' sum."""
    pytester.makeconftest(CONFTEST)
    # both start their work when the test says go, after both are ready (not when their start-ups happen to end)
    pytester.makepyfile(test_ranks=f"""
import subprocess, sys

def test_ranks(tmp_path):
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, {CHILD!r}, "ready", f"go:{{go}}", "kernel:rank_kernel:600"],
                              stdout=subprocess.PIPE, text=True) for _ in range(2)]
    for proc in procs:
        assert proc.stdout.readline().strip() == "ready"
    go.touch()
    for proc in procs:
        assert proc.wait(120) == 0
""")
    result = run(pytester, "--gpu-util", "--gpu-util-html")
    result.assert_outcomes(passed=1)
    record = records(pytester)["test_ranks.py::test_ranks"]
    rows = record["processes"]
    assert len(rows) == 2 and all(r["overlap"].startswith("overlapped on GPU 0 with pid ") for r in rows)
    row_sum = sum(r["gpu_ms"] for r in rows)
    assert record["gpu_busy_ms"] < row_sum - 100  # the union: the rows overlapped by more than 100 ms
    assert "overlapped on GPU 0" in record["note"] and "their gpu_ms are not to be added" in record["note"]
    # the rows' shares (the shared time split between them) add up to the test's figure; each lies
    # between its own time alone and its raw GPU ms
    assert sum(r["share_ms"] for r in rows) == pytest.approx(record["gpu_busy_ms"], rel=1e-6)
    assert all(r["gpu_ms"] / 2 - 1e-6 <= r["share_ms"] <= r["gpu_ms"] + 1e-6 for r in rows)
    html = (pytester.path / ".gpu_util" / "report.html").read_text()
    assert html.count("overlapped on GPU 0 with pid") >= 2 and "the time they shared is split between them" in html
    detail = re.search(r'"p":(\[\[.*?\]\])', html)
    assert detail and [row[4] for row in json.loads(detail.group(1))] == pytest.approx([r["share_ms"] for r in rows], rel=1e-4)  # (5 digits)
    texts = {"terminal": output(result), "html": html, "json": (pytester.path / ".gpu_util" / "gpu_util.json").read_text(),
             "csv": (pytester.path / ".gpu_util" / "gpu_util.csv").read_text()}
    # (a kernel's total µs adds its durations in both processes, by definition: the note says kernel times include the slices)
    # as whole numbers only: a wall time of 1200.04 ms, or 21200.0, is not the rows' sum shown
    shown = [f"{row_sum:.{d}f}" for d in (1, 2, 3)] + [f"{row_sum:,.1f}", f"{row_sum:,.0f} ms"]
    found = {name: [s for s in shown if re.search(rf"(?<![\d.,]){re.escape(s)}(?![\d])", text)]
             for name, text in texts.items()}
    assert found == {n: [] for n in texts}


def test_gpu_idle_names_the_start_up_of_a_child_the_test_started(pytester: pytest.Pytester) -> None:
    """The idle time before a child's first kernel is mostly the child starting: the finding says so and
    advises keeping the process alive; a child started before the test (a fixture's) is not named."""
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_start=f"""
import subprocess, sys
import pytest

def test_starts_its_child(child):
    child("sleep:600", "kernel:late_kernel:100")

@pytest.fixture
def started():
    proc = subprocess.Popen([sys.executable, {CHILD!r}, "ready", "sleep:300", "kernel:fixture_kernel:100"],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    return proc

def test_child_from_a_fixture(started):
    assert started.wait(60) == 0
""")
    result = run(pytester, "--gpu-util")
    result.assert_outcomes(passed=2)
    got = records(pytester)
    (idle,) = [f for f in got["test_start.py::test_starts_its_child"]["findings"] if f["rule"] == "gpu-idle"]
    assert "before the first kernel (of which the child `python synthetic_child.py` took " in idle["message"]
    assert " to start its GPU work), " in idle["message"] and idle["evidence"]["before"] == "child-process"
    assert idle["evidence"]["child_program"] == "python synthetic_child.py"
    assert 600_000 <= idle["evidence"]["child_startup_us"] <= idle["evidence"]["idle_before_us"]
    assert idle["fix"].startswith("start the process once") and "session-scoped" in idle["fix"]
    (idle,) = [f for f in got["test_start.py::test_child_from_a_fixture"].get("findings") or [] if f["rule"] == "gpu-idle"] or [{}]
    # the fixture's child started before the call: its start-up is no test's (no child named, no child cause)
    assert "child_program" not in idle.get("evidence", {}) and idle.get("evidence", {}).get("before") != "child-process"
