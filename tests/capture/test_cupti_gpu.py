"""The CUPTI event source on a real GPU: skipped without CUDA, run on the H100/H200 before any claim."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

#: set in the fresh process that runs one case of this module on its own
FRESH_PROCESS = "PYTEST_GPUUTIL_FRESH_PROCESS"


def _source():
    from pytest_gpuutil.capture.cupti import CuptiSource

    return CuptiSource(demangle=torch._C._demangle)


@pytest.fixture
def capture():
    """A continuous capture over CUPTI, handing CUPTI over to torch.profiler as the plugin does."""
    from pytest_gpuutil import KernelClassifier
    from pytest_gpuutil.capture.continuous import ContinuousCapture
    from pytest_gpuutil.capture.profiler import guard_profiler_starts

    capture = ContinuousCapture(_source(), KernelClassifier(), synchronize=torch.cuda.synchronize,
                                profiler_active=lambda: bool(torch.autograd._profiler_enabled()), keep_events=True)
    restore = guard_profiler_starts(torch, capture.before_foreign_profiler)
    assert capture.ensure_started(), capture.broken
    yield capture
    capture.close()
    restore()


def _workload():
    a = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
    for _ in range(5):
        b = torch.relu(a @ a) + 1
    a.to("cpu")
    q = torch.randn(4, 8, 512, 64, device="cuda", dtype=torch.float16)
    torch.nn.functional.scaled_dot_product_attention(q, q, q)
    return b


def _kineto_names():
    """Kernel names and counts of the workload as torch.profiler records them."""
    from collections import Counter

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        _workload()
        torch.cuda.synchronize()
    from pytest_gpuutil.capture.live_events import trace_from_profiler

    trace = trace_from_profiler(prof)
    return Counter(zip(trace.columns.names, trace.columns.kinds))


def test_cupti_sees_the_same_kernels_as_torch_profiler(capture):
    from collections import Counter

    _workload()
    torch.cuda.synchronize()
    expected = _kineto_names()  # the capture steps aside for it, and resumes at the next window
    capture.begin("w")
    _workload()
    capture.end()
    (result,) = capture.flush()
    got = Counter(zip(result.events.names, result.events.kinds))
    assert got == expected
    assert result.stats.kernel_count >= 10 and result.stats.busy_us > 0
    assert {c.name for c in result.stats.categories} >= {"gemm", "attention", "memcpy"}


def test_spin_lengths_agree_with_cuda_events_before_and_after_a_torch_profiler_session(capture):
    """Spins of about 5 and 20 ms timed by CUPTI and by CUDA event pairs, on both of CUPTI's clocks.

    After a torch.profiler session CUPTI stamps records with Kineto's raw TSC ticks, which the
    source maps onto the wall clock. An event pair also holds its spin's launch gap (the first
    launch after CUPTI is re-enabled can take hundreds of µs, and a busy host adds its own), so
    each length's shortest of three spins is compared, to 2 %; the clock's scale is then checked
    without the gaps, by the difference of the two lengths (CUPTI's against the events'), to 0.5 %
    in each round.
    """
    lengths = (10_000_000, 40_000_000)  # cycles: about 5 and 20 ms
    torch.cuda._sleep(lengths[0])
    torch.cuda.synchronize()
    for round_ in ("first", "after torch.profiler"):
        pairs = {cycles: [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                          for _ in range(3)] for cycles in lengths}
        capture.begin(round_)
        for cycles in lengths:
            for start, end in pairs[cycles]:
                start.record()
                torch.cuda._sleep(cycles)
                end.record()
                torch.cuda.synchronize()
        time.sleep(0.002)
        capture.end()
        (result,) = capture.flush()
        assert result.stats.kernel_count == 6
        durs_us = sorted(int(d) / 1000 for d in result.events.durs_ns)  # three short spins, then three long
        cupti = {lengths[0]: durs_us[0], lengths[1]: durs_us[3]}
        truth = {cycles: min(start.elapsed_time(end) for start, end in pairs[cycles]) * 1000 for cycles in lengths}
        for cycles in lengths:
            assert cupti[cycles] == pytest.approx(truth[cycles], rel=0.02), (round_, cycles)
        scale = (cupti[lengths[1]] - cupti[lengths[0]]) / (truth[lengths[1]] - truth[lengths[0]])
        assert scale == pytest.approx(1.0, rel=0.005), (round_, cupti, truth)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]):
            torch.ones(8, device="cuda").sum()


def test_many_tiny_kernels_are_all_counted_and_cheap_to_read(capture):
    x = torch.zeros(256, device="cuda")
    capture.begin("launch_bound")
    for _ in range(20_000):
        x.add_(1)
    capture.end()
    began = time.perf_counter()
    (result,) = capture.flush()
    flush_s = time.perf_counter() - began
    assert result.stats.kernel_count == 20_000 and result.note == ""
    assert flush_s < 1.0, flush_s  # generous bound: about 20 ms on an H100


def test_the_plugin_measures_with_cupti_and_says_so(pytester, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # the measurement-cost line whole, not wrapped
    pytester.makepyfile(
        """
        import torch
        def test_matmul():
            a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
            for _ in range(10):
                a @ a
        """
    )
    result = pytester.runpytest_subprocess("--gpu-util", "--gpu-util-traces=all", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["profiler start-up * s (CUPTI), not charged to any test",
                                 "measurement cost * s (* s with the tests, the rest at the end), *% of the * s the tests took (1 test measured)"])
    assert "Fatal Python error" not in result.stderr.str() and result.ret == 0


@pytest.mark.parametrize("callbacks", [False, True], ids=["kind38", "callbacks"])
def test_the_hosts_waits_come_with_the_gpu_work_and_make_findings(callbacks):
    """Activity kind 38, or CUPTI's callbacks at the synchronizing calls (the plugin's default):
    each .item() is a "Stream Sync" wait; the capture's own closing synchronize is left out;
    host-sync fires on an .item() loop and not on the same loop without."""
    from pytest_gpuutil import KernelClassifier
    from pytest_gpuutil.capture.continuous import ContinuousCapture
    from pytest_gpuutil.capture.cupti import CuptiSource
    from pytest_gpuutil.capture.host_waits import load_module

    if callbacks and load_module() is None:
        pytest.skip("the package was installed without capture/_waits.c")
    if callbacks and os.environ.get(FRESH_PROCESS) != "1":
        # The callbacks take the process's one CUPTI subscriber, which torch.profiler (Kineto) keeps
        # once it has run in a process (as earlier tests of this module do): this case in a fresh one.
        node = f"{__file__}::test_the_hosts_waits_come_with_the_gpu_work_and_make_findings[callbacks]"
        done = subprocess.run([sys.executable, "-m", "pytest", node, "-q", "-p", "no:cacheprovider"],
                              env=dict(os.environ, **{FRESH_PROCESS: "1"}), capture_output=True, text=True, timeout=300)
        assert done.returncode == 0 and " passed" in done.stdout, done.stdout[-4000:] + done.stderr[-2000:]
        return
    source = CuptiSource(demangle=torch._C._demangle, waits_from_callbacks=callbacks)
    assert (38 in source.kinds) is not callbacks
    capture = ContinuousCapture(source, KernelClassifier(), synchronize=torch.cuda.synchronize, findings=True)
    assert capture.ensure_started(), capture.broken
    a = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
    (a @ a).sum().item()
    try:
        for name, item in (("with_item", True), ("without", False)):
            capture.begin(name)
            for _ in range(100):
                c = a @ a
                if item:
                    c.sum().item()
            capture.end()
        results = {r.key: r for r in capture.flush()}
    finally:
        capture.close()
    found = {f.rule: f for f in results["with_item"].findings}
    waits = found["host-sync"].evidence
    assert waits["waits"] == 100 and waits["by_name"] == {"Stream Sync": 100}  # not the capture's Context Sync
    assert results["without"].findings == ()
    if callbacks:
        assert source.host_waits == "callbacks", source.host_waits_note


def test_after_a_torch_profiler_session_the_waits_are_still_recorded():
    """The callbacks' subscription is handed over with CUPTI before torch.profiler starts; after it
    (Kineto keeps its own subscriber) the source subscribes again or falls back to kind 38, saying
    why; either way an .item() afterwards is a Stream Sync wait."""
    from pytest_gpuutil.capture.cupti import CuptiSource
    from pytest_gpuutil.capture.host_waits import load_module
    from pytest_gpuutil.capture.profiler import guard_profiler_starts

    if load_module() is None:
        pytest.skip("the package was installed without capture/_waits.c")
    source = CuptiSource(demangle=torch._C._demangle, waits_from_callbacks=True)
    restore = guard_profiler_starts(torch, source.stop)
    try:
        source.start()
        x = torch.ones(16, device="cuda")
        x.sum().item()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]):
            (x * 2).sum().item()
        source.start()
        x.sum().item()
        source.drain()
        names = [name for name, _, _ in source.drain_syncs().rows()]
    finally:
        source.stop()
        if restore is not None:
            restore()
    assert names.count("Stream Sync") >= 2, (names, source.host_waits, source.host_waits_note)
    assert source.host_waits == "callbacks" or source.host_waits_note


def test_the_c_pass_reads_cuptis_buffers_as_the_numpy_reader_does(monkeypatch):
    """Every buffer CUPTI hands over (kernels in long runs and mixed with copies and kind 38's waits)
    read both ways: capture/_waits.c's parse and codes against the numpy reader, column by column."""
    import numpy as np

    from pytest_gpuutil.capture import cupti_records
    from pytest_gpuutil.capture.cupti import CuptiSource

    c_part = cupti_records._C_RECORDS
    if c_part is None:
        pytest.skip("capture/_waits.c is not built here")
    compared = []

    class BothWays:
        codes = staticmethod(c_part.codes)

        @staticmethod
        def parse(buffer, valid, size_of):
            got = c_part.parse(buffer, valid, size_of)
            with monkeypatch.context() as patched:
                patched.setattr(cupti_records, "_C_RECORDS", None)
                numpy_gpu, numpy_syncs = cupti_records.parse_all(buffer, valid, size_of)
            if got is not None:
                c_gpu, c_syncs = cupti_records._columns_of(got)
                for name in ("kinds", "starts", "ends", "devices", "streams", "labels"):
                    a, b = getattr(c_gpu, name), getattr(numpy_gpu, name)
                    assert a.dtype == b.dtype and np.array_equal(a, b), name
                for name in ("types", "starts", "ends"):
                    assert np.array_equal(getattr(c_syncs, name), getattr(numpy_syncs, name)), name
                compared.append((len(numpy_gpu), len(numpy_syncs)))
            return got

    source = CuptiSource(demangle=torch._C._demangle, host_syncs=True)  # the host's waits from kind 38: in the buffers
    monkeypatch.setattr(cupti_records, "_C_RECORDS", BothWays)
    x = torch.zeros(256, device="cuda")
    source.start()
    try:
        for _ in range(300):  # a launch loop: one kernel after another
            x.add_(1)
        for _ in range(50):  # small tests: kernels, a copy and a synchronize mixed
            t = torch.zeros(1024, device="cuda")
            (t * 3 + 1).sum().item()
        _workload()
        torch.cuda.synchronize()
        columns, _ = source.drain()
        syncs = source.drain_syncs()
    finally:
        source.stop()
    assert compared and sum(gpu for gpu, _ in compared) >= 300 + 50 * 4 and sum(n for _, n in compared) >= 1
    assert len(columns) >= 550 and len(syncs) >= 1
    assert any(name.startswith("Memcpy DtoH") for name in set(columns.names))
