"""The parent's side: children's chunks merged with this process's events and split by windows."""
from __future__ import annotations

import os
import time
from dataclasses import dataclass

import numpy as np
import pytest

from pytest_gpuutil.analysis.classify import KernelClassifier
from pytest_gpuutil.analysis.windows import window_stats
from pytest_gpuutil.children.collect import ProcessTree
from pytest_gpuutil.children.columns import concat_columns, take_columns, union_shares
from pytest_gpuutil.children.spool import child_file
from pytest_gpuutil.children.spool_format import (
    INJECTION,
    MONOTONIC,
    NESTED,
    End,
    Header,
    Memory,
    Note,
    encode_end,
    encode_events,
    encode_header,
    encode_memory,
    encode_note,
)
from pytest_gpuutil.machine.processes import proc_start
from pytest_gpuutil.traces.model import GpuColumns, GpuEvent, Window

BASE = time.time_ns() - 10_000_000_000  # the children's times: wall-clock ns, like CUPTI's
MS = 1_000_000


def write(spool, pid: int, *chunks: bytes, running: bool = False, created: int = BASE, **header) -> str:
    """A child file; ``running`` makes the header name this (live) process, else a dead one."""
    start = proc_start(os.getpid()) if running else 1
    fields = dict(pid=os.getpid() if running else pid, ppid=os.getpid(), proc_start=start, created_ns=created,
                  startup_ns=40 * MS, program=f"child{pid}", command=f"child{pid} --x")
    fields.update(header)
    path = child_file(str(spool.directory), pid, created)
    with open(path, "ab") as handle:
        handle.write(encode_header(Header(**fields)) + b"".join(chunks))
    return path


def events(*rows: tuple, covered: int = 0) -> bytes:
    """EVENTS from (name, start ms after BASE, duration ms, device)."""
    columns = GpuColumns.from_events([GpuEvent(n, "kernel", d, "7", BASE + int(s * MS), int(dur * MS))
                                      for n, s, dur, d in rows])
    return encode_events(columns, covered or BASE + int(max((s + d for _, s, d, _ in rows), default=0) * MS) + 1)


def ended(at_ms: float = 100) -> bytes:
    return encode_end(End(BASE + int(at_ms * MS)))


def tree(spool, now=time.time_ns, **kwargs) -> ProcessTree:
    kwargs.setdefault("wait_s", 0.05)
    return ProcessTree(spool, KernelClassifier(), parent_now=now, **kwargs)


def win(start_ms: float, end_ms: float) -> Window:
    return Window(BASE + int(start_ms * MS), BASE + int(end_ms * MS), "test_call")


def own(*rows: tuple) -> GpuColumns:
    return GpuColumns.from_events([GpuEvent(n, "kernel", d, "7", BASE + int(s * MS), int(dur * MS)) for n, s, dur, d in rows])


def test_children_work_joins_the_window_it_ran_in(spool) -> None:
    write(spool, 101, events(("nvjet_child", 12, 5, "0"), ("setup_work", 1, 2, "0")), ended(30))
    t = tree(spool)
    spans = [win(10, 20), win(20, 40)]
    merged, extras = t.attribute(own(("nvjet_parent", 11, 2, "0"), ("nvjet_parent", 25, 3, "0")), spans, ["a", "b"])
    stats = window_stats(merged, spans, KernelClassifier())
    assert stats[0].busy_us == pytest.approx(6000)  # parent 11-13 and child 12-17: the union 11-17
    a = {p.pid: p for p in extras[0].processes}
    assert a[os.getpid()].parent and a[os.getpid()].gpu_ms == pytest.approx(2.0)
    assert a[101].program == "child101" and a[101].gpu_ms == pytest.approx(5.0) and a[101].devices == ("0",)
    assert a[101].measured_by == "python" and a[101].startup_ms == pytest.approx(40.0)
    assert extras[1].processes == ()  # no child in the second window: no breakdown
    assert stats[0].kernel_count == 2 and stats[1].kernel_count == 1  # setup_work (1-3 ms) is in no window


def test_busy_is_the_union_over_processes_per_device(spool) -> None:
    write(spool, 101, events(("k", 10, 10, "0")), ended())
    write(spool, 102, events(("k", 15, 10, "0"), ("k", 10, 5, "1")), ended())
    merged, extras = tree(spool).attribute(GpuColumns(), [win(0, 50)], ["t"])
    (stats,) = window_stats(merged, [win(0, 50)], KernelClassifier())
    assert dict(stats.devices) == {"0": pytest.approx(15_000), "1": pytest.approx(5_000)}
    shares = {p.pid: p.gpu_ms for p in extras[0].processes}
    assert shares == {101: pytest.approx(10.0), 102: pytest.approx(15.0)}
    assert os.getpid() not in shares  # the parent did no GPU work in the window


def test_interleaved_parent_and_child_work_lands_in_order_on_one_clock(spool) -> None:
    """Parent, then child, then parent again: the merged time line keeps that order (one clock)."""
    write(spool, 101, events(("child", 20, 10, "0")), ended())
    merged, _ = tree(spool).attribute(own(("parent_a", 5, 10, "0"), ("parent_c", 35, 10, "0")), [win(0, 50)], ["t"])
    order = np.argsort(merged.starts_ns, kind="stable")
    assert [list(merged.names)[i] for i in order] == ["parent_a", "child", "parent_c"]


def test_a_parent_on_another_clock_gets_the_children_converted(spool) -> None:
    """A monotonic parent clock (the synthetic source of the plugin's tests) and wall-clock children."""
    offset = time.time_ns() - time.monotonic_ns()
    write(spool, 101, events(("child", 20, 10, "0")), ended())
    spans = [Window(w.start_ns - offset, w.end_ns - offset, "test_call") for w in [win(0, 50)]]
    merged, extras = tree(spool, now=time.monotonic_ns).attribute(GpuColumns(), spans, ["t"])
    (stats,) = window_stats(merged, spans, KernelClassifier())
    assert stats.busy_us == pytest.approx(10_000, abs=5)
    assert int(merged.starts_ns[0]) - spans[0].start_ns == pytest.approx(20 * MS, abs=50_000)


def test_a_child_on_the_monotonic_clock_is_converted(spool) -> None:
    offset = time.time_ns() - time.monotonic_ns()
    columns = GpuColumns.from_events([GpuEvent("child", "kernel", "0", "7", BASE - offset + 20 * MS, 10 * MS)])
    write(spool, 101, encode_events(columns, BASE - offset + 31 * MS), ended(), clock=MONOTONIC)
    merged, _ = tree(spool).attribute(GpuColumns(), [win(0, 50)], ["t"])
    assert int(merged.starts_ns[0]) - BASE == pytest.approx(20 * MS, abs=50_000)


def test_a_killed_child_is_noted_in_its_window_and_keeps_what_it_handed_over(spool) -> None:
    write(spool, 101, events(("k", 12, 3, "0")))  # no END, and the pid is not running
    merged, extras = tree(spool).attribute(GpuColumns(), [win(0, 10), win(10, 20)], ["a", "b"])
    assert extras[0].note == ""
    assert "child pid 101 (child101) ended without handing over its records" in extras[1].note
    (share,) = extras[1].processes
    assert share.gpu_ms == pytest.approx(3.0) and share.note == "ended without handing over its records"


def test_notes_are_said_once(spool) -> None:
    write(spool, 101, events(("k", 12, 3, "0")))
    t = tree(spool)
    _, first = t.attribute(GpuColumns(), [win(10, 20)], ["a"])
    _, second = t.attribute(GpuColumns(), [win(30, 40)], ["b"])
    assert "ended without handing over" in first[0].note and second[0].note == ""


def test_not_measured_nested_and_memory(spool) -> None:
    write(spool, 101, encode_note(Note(BASE + 12 * MS, "not measured: CUPTI did not start (no libcupti)")), ended(13))
    write(spool, 102, events(("k", 14, 1, "0")), encode_end(End(BASE + 15 * MS, NESTED)))
    write(spool, 103, events(("k", 16, 2, "1")), encode_memory(Memory(((1, 300 * (1 << 20), 400 * (1 << 20)),))),
          ended(18))
    _, (extras,) = tree(spool).attribute(GpuColumns(), [win(10, 20)], ["a"])
    assert "pid 101 (child101): not measured: CUPTI did not start (no libcupti)" in extras.note
    assert "pid 102 (child102) is measured by its own pytest --gpu-util run" in extras.note
    shares = {p.pid: p for p in extras.processes}
    assert shares[101].note == "not measured" and shares[102].note == "measured by its own pytest --gpu-util run"
    assert shares[103].peak_mb == pytest.approx(300.0) and shares[103].memory_source == "allocator"


def test_work_that_arrives_after_its_record_is_said_in_the_session_notes(spool) -> None:
    t = tree(spool)
    t.attribute(GpuColumns(), [win(10, 20)], ["test_a"])
    write(spool, 101, events(("late", 12, 3, "0")), ended(15))
    _, extras = t.attribute(GpuColumns(), [win(30, 40)], ["test_b"])
    assert extras[0].processes == ()
    assert any("3.000 ms of GPU work by child pid 101 arrived after the record of test_a" in n for n in t.session_notes)


def test_devices_are_numbered_as_the_parent_sees_them(spool) -> None:
    write(spool, 101, events(("k", 12, 1, "0")), ended(), visible_devices="3")
    write(spool, 102, events(("k", 12, 1, "1")), ended(), visible_devices="1,2")
    write(spool, 103, events(("k", 12, 1, "0")), ended(), visible_devices="0")
    merged, extras = tree(spool, visible_devices="2,3").attribute(GpuColumns(), [win(10, 20)], ["a"])
    shares = {p.pid: p.devices for p in extras[0].processes}
    assert shares == {101: ("1",), 102: ("0",), 103: ("GPU 0 (not visible to pytest)",)}


def test_injected_childrens_kernel_names_are_demangled(spool) -> None:
    write(spool, 101, events(("_Z6matmulv", 12, 1, "0")), ended(), capture=INJECTION)
    merged, extras = tree(spool, demangle=lambda n: "matmul()" if n == "_Z6matmulv" else n).attribute(
        GpuColumns(), [win(10, 20)], ["a"])
    assert list(merged.names) == ["matmul()"] and extras[0].processes[0].measured_by == "injection"


class _WaitClock:
    """child_state's ``time``, with a monotonic clock that only its waits move (the rest is the real module)."""

    def __init__(self) -> None:
        self.now, self.waits = 0.0, []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.now += seconds

    def __getattr__(self, name: str):
        return getattr(time, name)


@pytest.fixture
def wait_clock(monkeypatch) -> _WaitClock:
    from pytest_gpuutil.children import child_state

    clock = _WaitClock()
    monkeypatch.setattr(child_state, "time", clock)
    return clock


def test_a_running_child_is_poked_and_waited_for_briefly(spool, wait_clock) -> None:
    write(spool, 101, events(("k", 12, 1, "0"), covered=BASE + 13 * MS), running=True)
    t = tree(spool, wait_s=0.2)
    _, extras = t.attribute(GpuColumns(), [win(10, 20)], ["a"])
    assert 0.2 <= wait_clock.now < 0.2 + 0.011  # waited its 0.2 s, in steps of 10 ms
    assert (spool.directory / "poke").exists()
    assert "did not hand over its latest records in time" in extras[0].note
    assert t.still_running() and t.still_running() == []  # said once


@dataclass(frozen=True)
class _Sample:
    pid: int
    device: int
    used_bytes: int
    at_ns: int
    program: str


class _Sampler:
    def __init__(self, samples):
        self.samples = samples

    def take(self):
        samples, self.samples = self.samples, []
        return samples


def test_nvml_names_a_gpu_process_that_handed_nothing_over(spool) -> None:
    write(spool, 101, events(("k", 12, 1, "0")), ended(14))
    sampler = _Sampler([_Sample(101, 0, 500 << 20, BASE + 13 * MS, "python"),
                        _Sample(555, 1, 200 << 20, BASE + 15 * MS, "cuda_prog")])
    t = tree(spool, sampler=sampler, injection_problem="the injection library was not built")
    _, (extras,) = t.attribute(GpuColumns(), [win(10, 20)], ["a"])
    shares = {p.pid: p for p in extras.processes}
    assert shares[101].peak_mb == pytest.approx(500.0) and shares[101].memory_source == "nvml"
    assert shares[555].note == "not measured" and shares[555].program == "cuda_prog"
    assert ("pid 555 (cuda_prog) used the GPU but was not measured: the injection library was not built"
            in extras.note)


def test_concat_and_take_keep_names_devices_and_times() -> None:
    a = GpuColumns.from_events([GpuEvent("x", "kernel", 0, 7, 10, 1), GpuEvent("y", "gpu_memset", 1, 7, 20, 2)])
    b = GpuColumns(names=["x"], kinds=["gpu_memcpy"], devices=np.asarray([1]), streams=np.asarray([9]),
                   starts_ns=np.asarray([30]), durs_ns=np.asarray([3]))
    merged = concat_columns([a, GpuColumns(), b])
    assert list(merged.names) == ["x", "y", "x"] and list(merged.kinds) == ["kernel", "gpu_memset", "gpu_memcpy"]
    assert [int(d) for d in merged.devices] == [0, 1, 1] and merged.starts_ns.tolist() == [10, 20, 30]
    picked = take_columns(merged, np.asarray([2, 0]))
    assert list(picked.names) == ["x", "x"] and list(picked.kinds) == ["gpu_memcpy", "kernel"]
    assert picked.durs_ns.tolist() == [3, 1]


def test_a_child_that_does_not_answer_is_waited_for_once(spool, wait_clock) -> None:
    write(spool, 101, events(("k", 12, 1, "0"), covered=BASE + 13 * MS), running=True)
    t = tree(spool, wait_s=0.2)
    t.attribute(GpuColumns(), [win(10, 20)], ["a"])
    waited = len(wait_clock.waits)
    assert waited
    t.attribute(GpuColumns(), [win(30, 40)], ["b"])
    assert len(wait_clock.waits) == waited  # poked again, not waited for again


def test_a_nested_runs_own_children_are_not_called_unmeasured(spool, tmp_path) -> None:
    """A nested pytest --gpu-util run measures its children in its own spool: the outer run's NVML
    sampler sees them on the GPU without a file of theirs here, and must not call them unmeasured
    (on an H100 it did: "pid 862 (python3) used the GPU but was not measured"). A process started
    with this run's spool (or none) that handed nothing over still is."""
    import subprocess
    import sys

    def sleeper(spool_dir):
        env = {k: v for k, v in os.environ.items() if k != "PYTEST_GPUUTIL_SPOOL"}
        if spool_dir is not None:
            env["PYTEST_GPUUTIL_SPOOL"] = str(spool_dir)
        return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], env=env)

    other = tmp_path / "pytest-gpuutil-children-1-inner"
    other.mkdir()
    nested_child, own_child, bare_child = sleeper(other), sleeper(spool.directory), sleeper(None)
    try:
        sampler = _Sampler([_Sample(p.pid, 0, 800 << 20, BASE + 13 * MS, "python3")
                            for p in (nested_child, own_child, bare_child)])
        _, (extras,) = tree(spool, sampler=sampler).attribute(GpuColumns(), [win(10, 20)], ["a"])
        pids = {p.pid for p in extras.processes}
        assert nested_child.pid not in pids and f"pid {nested_child.pid} " not in extras.note
        for p in (own_child, bare_child):
            assert p.pid in pids and f"pid {p.pid} (python3) used the GPU but was not measured" in extras.note
    finally:
        for p in (nested_child, own_child, bare_child):
            p.kill()
            p.wait()


def test_processes_sharing_a_gpu_at_once_are_said_to_overlap_and_never_summed(spool) -> None:
    # two ranks on GPU 0 at the same time (time-sliced: each one's times include the other's slices)
    write(spool, 101, events(("k", 10, 20, "0")), ended())
    write(spool, 102, events(("k", 12, 20, "0"), ("k", 40, 5, "1")), ended())
    merged, extras = tree(spool).attribute(GpuColumns(), [win(0, 50)], ["t"])
    rows = {p.pid: p for p in extras[0].processes}
    assert rows[101].overlap == "overlapped on GPU 0 with pid 102 (child102)"
    assert rows[102].overlap == "overlapped on GPU 0 with pid 101 (child101)"  # GPU 1 was its alone
    note = extras[0].note
    assert "processes pid 101 (child101), pid 102 (child102) overlapped on GPU 0 (for 18.0 ms of the 22.0 ms" in note
    assert "their union" in note and "GPU 1" not in note
    assert "40.0" not in note and "45.0" not in note  # the rows' sums (GPU 0; all devices) are said nowhere


def test_processes_one_after_the_other_on_a_gpu_do_not_overlap(spool) -> None:
    write(spool, 101, events(("k", 10, 10, "0")), ended())
    write(spool, 102, events(("k", 20, 10, "0"), ("k", 10, 10, "1")), ended())  # 1 ms of touching is no overlap
    merged, extras = tree(spool).attribute(own(("p", 10, 5, "1")), [win(0, 50)], ["t"])
    rows = {p.pid: p.overlap for p in extras[0].processes}
    assert rows == {os.getpid(): "overlapped on GPU 1 with pid 102 (child102)", 101: "",
                    102: f"overlapped on GPU 1 with pid {os.getpid()} (pytest)"}  # the pytest process and 102 shared GPU 1
    assert "GPU 0" not in extras[0].note and "overlapped on GPU 1 (for 5.0 ms" in extras[0].note


def test_overlaps_counts_only_what_is_counted_more_than_once() -> None:
    from pytest_gpuutil.children.columns import overlaps

    (found,) = overlaps({0: {"0": 5.0}, 1: {"0": 10.0, "1": 3.0}, 2: {"1": 2.0}}, {"0": 12.0, "1": 5.0})
    assert (found.device, found.owners, found.overlap_ms, found.union_ms) == ("0", (0, 1), 3.0, 12.0)
    assert overlaps({1: {"0": 10.0}, 2: {"0": 10.05}}, {"0": 20.0}) == []  # 0.05 ms: noise


def test_gpu_idle_names_a_childs_start_up() -> None:
    from pytest_gpuutil.analysis.finding_records import Finding
    from pytest_gpuutil.analysis.findings import with_child_start

    idle = Finding("gpu-idle", "high", "the GPU was idle 90% of the 4,000 ms window: 3,661 ms before the first kernel "
                   "(a child process starting), 0.0 µs between kernels, 10 ms after the last", "start it once",
                   {"idle_before_us": 3_661_000.0, "mostly": "before"}, 90.0, saving_ms=3671.0)
    named = with_child_start(idle, "python3 -c", 3_600_000_000)
    assert named.message == ("the GPU was idle 90% of the 4,000 ms window: 3,661 ms before the first kernel (of which "
                             "the child `python3 -c` took 3.6 s to start its GPU work), 0.0 µs between kernels, 10 ms "
                             "after the last")
    assert named.evidence["child_startup_us"] == 3_600_000.0 and named.evidence["child_program"] == "python3 -c"
    assert (named.fix, named.severity, named.saving_ms) == (idle.fix, idle.severity, idle.saving_ms)
    assert "took 500 ms to start" in with_child_start(idle, "python3 -c", 500_000_000).message
    assert with_child_start(idle, "x", 9e12).evidence["child_startup_us"] == 3_661_000.0  # never more than the wait
    other = Finding("launch-bound", "low", "m", "f", {"idle_before_us": 5.0})
    assert with_child_start(other, "x", 1e9) is other


@pytest.mark.parametrize("intervals, expected", [
    ([(0, 10, 1)], {1: 10.0}),
    ([(0, 10, 1), (0, 10, 2)], {1: 5.0, 2: 5.0}),  # two at once: half each
    ([(0, 10, 1), (5, 15, 2)], {1: 7.5, 2: 7.5}),
    ([(0, 10, 1), (2, 4, 1), (3, 6, 2), (3, 6, 3)], {1: 8.0, 2: 1.0, 3: 1.0}),  # an owner's own overlaps count once
    ([(0, 4, 1), (6, 8, 2)], {1: 4.0, 2: 2.0}),
])
def test_union_shares_split_shared_time_and_add_up_to_the_union(intervals, expected) -> None:
    starts, ends, owners = (np.asarray(c) for c in zip(*intervals))
    shares = union_shares(starts, ends, owners)
    assert shares == pytest.approx(expected)
    covered = set().union(*(range(s, e) for s, e, _ in intervals))
    assert sum(shares.values()) == pytest.approx(len(covered))


def test_each_process_row_gets_its_share_and_the_shares_add_up_to_the_tests_figure(spool) -> None:
    # the parent 10-20 ms on GPU 0; a child 15-30 ms on GPU 0 and 12-14 ms on GPU 1; the window is 0-25 ms
    write(spool, 101, events(("k", 15, 15, "0"), ("k", 12, 2, "1")), ended(40))
    merged, (extras,) = tree(spool).attribute(own(("p", 10, 10, "0")), [win(0, 25)], ["t"])
    rows = {p.pid: p for p in extras.processes}
    parent, child = rows[os.getpid()], rows[101]
    assert parent.share_ms == pytest.approx(5 + 2.5) and child.share_ms == pytest.approx(2.5 + 5 + 2)
    (stats,) = window_stats(merged, [win(0, 25)], KernelClassifier())
    assert parent.share_ms + child.share_ms == pytest.approx(stats.busy_us / 1000)
    assert child.gpu_ms == pytest.approx(12.0) and child.to_dict()["share_ms"] == child.share_ms
