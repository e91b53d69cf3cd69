"""The findings' places (issue 42): the C frame reader at synchronizing calls and copies, the stack
sampler, the filtering of torch's, the plugin's and pytest's frames, and a capture whose findings
name the lines that caused them — all on the CPU, with the callback called as CUPTI calls it."""
from __future__ import annotations

import os
import sys
import threading
import time

import pytest

from pytest_gpuutil import GpuColumns, GpuEvent, KernelClassifier
from pytest_gpuutil.analysis.finding_records import Finding
from pytest_gpuutil.analysis.places import HostActivity, HostCalls, HostSamples, places_of, with_places
from pytest_gpuutil.capture import host_waits
from pytest_gpuutil.capture.continuous import ContinuousCapture
from pytest_gpuutil.capture.places.calls import CallPlaces, frames_module, is_users, skipped_prefixes
from pytest_gpuutil.capture.places.host import HostPlaces
from pytest_gpuutil.capture.places.sampler import StackSampler
from pytest_gpuutil.traces.model import SyncColumns, Window

THIS = os.path.abspath(__file__)
waits = host_waits.load_module()
frames = frames_module()
needs_c = pytest.mark.skipif(waits is None or frames is None or not hasattr(waits, "set_frame_reader"),
                             reason="the package was installed without its C parts, or this Python's frames are not read")
STREAM_SYNC, COPY_ASYNC = 131, 41


def line_of(marker: str) -> int:
    """The line of this file holding ``marker`` in a comment."""
    with open(THIS, encoding="utf-8") as handle:
        return next(i for i, text in enumerate(handle, 1) if f"# {marker}" in text and "line_of" not in text)


def read_back(spin_ns: int = 20_000) -> None:
    """What ``.item()`` does, as the runtime calls the callback: a copy, then a stream synchronize."""
    waits.call_back(COPY_ASYNC, 0)  # <- the copy
    waits.call_back(COPY_ASYNC, 1)
    waits.call_back(STREAM_SYNC, 0)  # <- the read-back
    end = time.time_ns() + spin_ns
    while time.time_ns() < end:
        pass
    waits.call_back(STREAM_SYNC, 1)


@needs_c
def test_the_frame_reader_names_the_user_s_line_and_skips_the_given_folders() -> None:
    frames.set_skips([(os.path.dirname(THIS) + os.sep, True)])
    outer = frames.here(3)  # this folder skipped: the first place is pytest's own (not skipped here)
    table = {pid: path for pid, path, *_ in frames.places_after(0)}
    assert outer and all(table[i] != THIS for i in outer)
    frames.set_skips(skipped_prefixes())
    ids = frames.here(3)
    table = {pid: (path, line, name) for pid, path, line, name in frames.places_after(0)}
    path, line, name = table[ids[0]]
    assert (path, name) == (THIS, "test_the_frame_reader_names_the_user_s_line_and_skips_the_given_folders")
    assert all("_pytest" not in table[i][0] and "pluggy" not in table[i][0] for i in ids)


def test_torch_s_the_plugin_s_pytest_s_and_the_standard_library_s_frames_are_not_the_user_s() -> None:
    import _pytest
    import pluggy

    import pytest_gpuutil

    prefixes = [("/env/lib/python3.12/site-packages/torch/", True), *skipped_prefixes()]
    assert not is_users("/env/lib/python3.12/site-packages/torch/nn/modules/module.py", prefixes)
    assert not is_users(os.path.join(os.path.dirname(pytest_gpuutil.__file__), "fixtures.py"), prefixes)
    assert not is_users(os.path.join(os.path.dirname(_pytest.__file__), "python.py"), prefixes)
    assert not is_users(os.path.join(os.path.dirname(pluggy.__file__), "_callers.py"), prefixes)
    assert not is_users(threading.__file__, prefixes) and not is_users("<frozen runpy>", prefixes)
    assert is_users(THIS, prefixes) and is_users("/home/me/project/tests/test_models.py", prefixes)
    # an installed package of the user's (timm from site-packages) is kept though site-packages may lie
    # inside the standard library's folder
    site_packages = next(p for p, skipped in prefixes if not skipped)
    assert is_users(os.path.join(site_packages, "timm", "models", "vit.py"), prefixes)


@needs_c
def test_syncs_and_copies_come_with_the_line_that_made_them() -> None:
    waits.set_clock(0)
    waits.take()
    calls = CallPlaces.open(lambda ticks: ticks.astype("int64"))
    calls.start()
    try:
        calls.take()
        for _ in range(5):
            read_back()
    finally:
        calls.stop()
    found = calls.take()
    waits.take()
    assert found.kinds == ["copy", "sync"] * 5
    assert {s[0][:2] for s in found.sites} == {(THIS, line_of("<- the copy")), (THIS, line_of("<- the read-back"))}
    assert found.sites[1][1][2] == "test_syncs_and_copies_come_with_the_line_that_made_them"  # the caller next
    assert all(e - s >= 15_000 for k, s, e in zip(found.kinds, found.starts_ns, found.ends_ns) if k == "sync")
    read_back()  # the reader is off: waits are recorded, calls are not
    assert len(calls.take()) == 0 and len(host_waits.unpack(waits.take()[0])[0]) == 1


def slow_helper(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end: sum(range(200))  # <- the slow helper (one line: every sample lands there)


def busy_until(sampler: "StackSampler", samples: int, cap: float) -> None:
    while sampler.samples_taken < samples and time.monotonic() < cap: sum(range(200))  # <- busy until (one line)


@pytest.mark.parametrize("wait", ["C", "Python"])
def test_the_sampler_sees_the_test_thread_only_between_begin_and_end(wait: str, monkeypatch: "pytest.MonkeyPatch") -> None:
    """Event-driven (issue 44): the helper runs until the sampler has taken 10 samples, however slowly
    a loaded machine schedules its thread (two busy loops and -n 8 once left 6 in a fixed 0.2 s). The
    same samples whether the thread waits between them in C (without the GIL) or in Python."""
    from pytest_gpuutil.capture.places import sampler as sampling

    if wait == "C" and sampling._c_wait() is None:
        pytest.skip("the places' C module was not built")
    if wait == "Python":
        monkeypatch.setattr(sampling, "_c_wait", lambda: None)
    prefixes = skipped_prefixes()
    sampler = StackSampler(time.time_ns, lambda path: is_users(path, prefixes), interval_s=0.002)
    try:
        slow_helper(0.05)
        assert len(sampler.take()) == 0  # never begun
        began = time.time_ns()
        sampler.begin()
        busy_until(sampler, 10, time.monotonic() + 60)
        sampler.end()
        sampled_ns = time.time_ns() - began
        taken = sampler.samples_taken
        time.sleep(0.02)
        slow_helper(0.05)
        samples = sampler.take()
    finally:
        sampler.close()
    assert taken >= 10 and len(samples) >= 10
    assert sum(samples.weights_ns) <= sampled_ns + 0.01e9  # the weights cover the sampled time, no more
    assert {sites[0] for sites in samples.sites} == {(THIS, line_of("<- busy until"), "busy_until")}
    assert not any(samples.in_cuda_init)


def site(name: str, line: int) -> tuple[str, int, str]:
    return (f"/src/{name}.py", line, name)


def test_places_of_each_rule_from_a_synthetic_capture() -> None:
    loop, final, copy, helper = site("loop", 12), site("report", 40), site("loader", 7), site("helper", 3)
    calls = HostCalls(["sync"] * 300 + ["sync", "copy", "copy"], list(range(0, 3030, 10)), list(range(5, 3035, 10)),
                      [(loop, final)] * 300 + [(final,), (copy,), (helper,)])
    calls = HostCalls(calls.kinds, calls.starts_ns, [s + (900 if k == "copy" and i == 301 else 5) for i, (k, s) in
                                                     enumerate(zip(calls.kinds, calls.starts_ns))], calls.sites)
    samples = HostSamples(1_000, [100, 200, 300, 400, 500], [(helper,), (helper,), (loop,), (helper,), ()],
                          [False] * 5)
    host = HostActivity(calls, samples)
    sync = places_of(Finding("host-sync", "high", "m", "f"), host)
    assert [p.where for p in sync] == ["/src/loop.py:12", "/src/report.py:40"]
    assert (sync[0].count, sync[0].function) == (300, "loop") and sync[0].what.startswith("300 syncs")
    copies = places_of(Finding("pageable-memcpy", "high", "m", "f"), host)
    assert [p.where for p in copies] == ["/src/loader.py:7", "/src/helper.py:3"]  # most host time first
    sampled = places_of(Finding("launch-bound", "high", "m", "f"), host)
    assert [(p.where, p.ms) for p in sampled] == [("/src/helper.py:3", 0.003), ("/src/loop.py:12", 0.001)]
    # gpu-idle: only the samples taken while the GPU was idle (busy 150-350: the helper at 200, the loop at 300)
    idle = places_of(Finding("gpu-idle", "high", "m", "f"), host, ([150], [350]))
    assert [(p.where, p.ms) for p in idle] == [("/src/helper.py:3", 0.002)]
    found = with_places([Finding("host-sync", "high", "m", "f")], host)
    assert found[0].places[0]["file"] == "/src/loop.py" and Finding.from_dict(found[0].to_dict()) == found[0]
    assert found[0].first_place == "/src/loop.py:12"


class RealClockSource:
    """GPU events placed by the test on the wall clock, with the host's waits from the C callback."""

    name = "real-clock"

    def __init__(self) -> None:
        self.events: list[GpuEvent] = []

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def now(self) -> int:
        return time.time_ns()

    def pending_bytes(self) -> int:
        return 0

    def drain(self) -> tuple[GpuColumns, int]:
        events, self.events = self.events, []
        return GpuColumns.from_events(events), 0

    def drain_syncs(self) -> SyncColumns:
        types, starts, ends = host_waits.unpack(waits.take()[0])
        return SyncColumns(["cudaStreamSynchronize"] * len(types), starts.tolist(), (ends - starts).tolist())

    def gpu_work(self, dur_ns: int) -> None:
        self.events.append(GpuEvent("nvjet_sm90_tst", "kernel", "0", "7", time.time_ns(), dur_ns))


@needs_c
def test_a_capture_s_findings_name_the_planted_lines() -> None:
    waits.set_clock(0)
    waits.take()
    source = RealClockSource()
    places = HostPlaces(source.now, interval_s=0.002)
    cap = ContinuousCapture(source, KernelClassifier(), synchronize=lambda: None, findings=True, places=places)
    cap.ensure_started()
    try:
        cap.begin("tests/test_planted.py::test_item_in_a_loop")
        for _ in range(40):
            source.gpu_work(20_000)
            read_back(spin_ns=15_000)
            end = time.time_ns() + 200_000  # the host's work before the next launch: the GPU idles
            while time.time_ns() < end:
                pass
        cap.end()
        cap.begin("tests/test_planted.py::test_slow_helper")
        source.gpu_work(100_000)
        slow_helper(0.15)
        source.gpu_work(100_000)
        cap.end()
        results = {r.key.rsplit("::", 1)[1]: r for r in cap.close()}
    finally:
        places.close()
        waits.take()
    sync = next(f for f in results["test_item_in_a_loop"].findings if f.rule == "host-sync")
    assert sync.first_place == f"{os.path.relpath(THIS)}:{line_of('<- the read-back')}"
    assert sync.places[0]["text"] == "waits.call_back(STREAM_SYNC, 0)  # <- the read-back"
    assert sync.places[0]["count"] == 40 and sync.to_dict()["places"][0]["function"] == "read_back"
    idle = next(f for f in results["test_slow_helper"].findings if f.rule == "gpu-idle")
    assert idle.first_place == f"{os.path.relpath(THIS)}:{line_of('<- the slow helper')}"
    assert "ms of host time" in idle.places[0]["what"]


def test_the_first_test_s_note_splits_its_time_before_cuda_into_host_work_and_cuda_s_start_up() -> None:
    build = site("test_models", 45)
    ms = 1_000_000
    times = list(range(10 * ms, 110 * ms, 5 * ms))  # 20 samples, 5 ms each
    samples = HostSamples(5 * ms, times, [(build,)] * 16 + [(site("test_models", 46),)] * 4, [False] * 16 + [True] * 4,
                          [5 * ms] * 20)
    remark = "CUDA came up during this call: its first 100.0 ms (creating the CUDA context) are not in the window"
    note = HostPlaces.before_cuda_note(remark, HostActivity(samples=samples), 10 * ms, 110 * ms)
    assert note.startswith("CUDA came up during this call: its first 100.0 ms are not in the window: about 80.0 ms "
                           "the test's own host work at /src/test_models.py:45 (test_models: ")
    assert note.endswith("20.0 ms CUDA's start-up (from 20 stack samples)")
    assert HostPlaces.before_cuda_note(remark, HostActivity(), 10 * ms, 110 * ms) == remark  # no samples: as it was
    assert HostPlaces.before_cuda_note("", HostActivity(samples=samples), 10 * ms, 110 * ms) == ""  # CUDA was up already


def test_a_sampler_asleep_after_its_linger_wakes_at_the_next_call(monkeypatch: "pytest.MonkeyPatch") -> None:
    """Calls set a plain flag (no lock a call); the thread, asleep after LINGER_S without one, is woken
    by the next call's begin() and samples it."""
    from pytest_gpuutil.capture.places import sampler as sampling

    monkeypatch.setattr(sampling, "LINGER_S", 0.01)
    monkeypatch.setattr(sampling, "_c_wait", lambda: None)  # the Python wait (without the C module)
    prefixes = skipped_prefixes()
    sampler = StackSampler(time.time_ns, lambda path: is_users(path, prefixes), interval_s=0.002)
    try:
        sampler.begin()
        sampler.end()
        cap = time.monotonic() + 60
        while not sampler._sleeping and time.monotonic() < cap:
            time.sleep(0.005)
        assert sampler._sleeping
        taken = sampler.samples_taken
        sampler.begin()
        busy_until(sampler, taken + 5, time.monotonic() + 60)
        sampler.end()
    finally:
        sampler.close()
    assert sampler.samples_taken >= taken + 5


@pytest.mark.skipif(frames is None or not hasattr(frames, "sleep_until_on"), reason="the places' C module was not built")
def test_between_calls_the_sampler_waits_in_c_without_the_gil_and_wakes_for_the_next_call() -> None:
    """Between calls the thread sits in the C wait (it asks for no GIL turn, and nothing wakes it at a
    call's start); it samples the next call, costs next to nothing while idle, and ends when closed."""
    prefixes = skipped_prefixes()
    sampler = StackSampler(time.time_ns, lambda path: is_users(path, prefixes), interval_s=0.002)
    try:
        sampler.begin()
        busy_until(sampler, 2, time.monotonic() + 60)
        sampler.end()
        gate_line = line_of_code(sampling_source(), "gate(self._flags")
        cap = time.monotonic() + 60  # the thread's last period and sample end (however slowly it is scheduled)
        while waiting_at(sampler) != ("_run", gate_line) and time.monotonic() < cap:
            time.sleep(0.002)
        taken = sampler.samples_taken
        where = set()
        cpu_before = time.process_time()
        for _ in range(50):  # 0.25 s between calls: the thread is in the C wait each time it is looked at
            time.sleep(0.005)
            where.add(waiting_at(sampler))
        idle_cpu_s = time.process_time() - cpu_before
        assert sampler.samples_taken == taken
        sampler.begin()
        busy_until(sampler, taken + 5, time.monotonic() + 60)
        sampler.end()
    finally:
        sampler.close()
    assert where == {("_run", gate_line)}
    assert idle_cpu_s < 0.05  # this process (the 50 looks included) for 0.25 s between calls: ~0 here
    assert sampler.samples_taken >= taken + 5
    sampler._thread.join(timeout=5)
    assert not sampler._thread.is_alive()  # closed: the C wait returned within a period


def waiting_at(sampler: StackSampler) -> tuple[str, int]:
    """The function and line the sampler's thread is at now."""
    frame = sys._current_frames().get(sampler._thread.ident)
    return (frame.f_code.co_name, frame.f_lineno) if frame is not None else ("", 0)


def sampling_source() -> str:
    from pytest_gpuutil.capture.places import sampler as sampling

    return sampling.__file__


def line_of_code(path: str, text: str) -> int:
    with open(path, encoding="utf-8") as handle:
        return next(i for i, line in enumerate(handle, 1) if text in line)
