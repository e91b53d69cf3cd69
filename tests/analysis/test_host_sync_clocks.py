"""host-sync on read-back loops whose GPU records end a few µs after the host's waits (issue 42).

On an H200, loops of 300 × 4096² bf16 matmuls with a read-back each step (``.sum().item()``,
``a[0, 0].item()``, ``torch.cuda.synchronize()``) had 300 waits and 21-32 % of their windows idle
after them, yet host-sync saw none: the GPU's records are converted to the host's clock, and the
work a wait waited for (the read-back's copy) ended a few µs *after* the wait in the records. Each
wait then looked as if the GPU were still busy when it ended, and no idle was charged to any. These
windows are drawn with the loops' timings (a 190 µs matmul, the read-back, 80 µs of host work
before the next launch) and the records shifted against the waits.
"""
from __future__ import annotations

import pytest

from pytest_gpuutil.analysis.findings import find
from pytest_gpuutil.analysis.intervals.waits import WAIT_CLOCK_SLACK_NS
from pytest_gpuutil.analysis.window_facts import WindowFacts
from pytest_gpuutil.analysis.classify import KernelClassifier
from pytest_gpuutil.traces.model import GpuColumns, GpuEvent, SyncColumns, Window

US = 1_000
STEPS = 300


def read_back_loop(shift_ns: int, read_back: str = "sum_item", host_us: int = 80) -> tuple[GpuColumns, Window, SyncColumns]:
    """A window of STEPS steps: matmul, (sum,) the read-back, the host's wait, ``host_us`` of host
    work; the GPU's records ``shift_ns`` later than the host's clock."""
    events, waits = [], []
    t = 100 * US
    for _ in range(STEPS):
        events.append(GpuEvent("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "kernel", "0", "7", t + shift_ns, 190 * US))
        done = t + 190 * US
        if read_back == "sum_item":
            events.append(GpuEvent("reduce_kernel", "kernel", "0", "7", done + shift_ns + 1 * US, 10 * US))
            done += 11 * US
        if read_back != "synchronize":
            events.append(GpuEvent("Memcpy DtoH (Device -> Pinned)", "gpu_memcpy", "0", "7", done + shift_ns + 1 * US, 1500))
            done += 2500
        wait_end = done + 3 * US  # the host wakes 3 µs after the GPU's last work (H100 recordings)
        waits.append(("cudaStreamSynchronize" if read_back != "synchronize" else "cudaDeviceSynchronize",
                      t + 30 * US, wait_end - t - 30 * US))
        t = wait_end + host_us * US
    names, starts, durs = map(list, zip(*waits))
    return GpuColumns.from_events(events), Window(0, t + 50 * US, "test_call"), SyncColumns(names, starts, durs)


@pytest.mark.parametrize("read_back", ["sum_item", "index_item", "synchronize"])
@pytest.mark.parametrize("shift_us", [0, 5, 12, 40])
def test_every_wait_is_charged_the_idle_after_it_whatever_the_shift_between_the_clocks(read_back: str, shift_us: int) -> None:
    events, window, syncs = read_back_loop(shift_us * US, read_back)
    facts = WindowFacts(events, window, KernelClassifier(), syncs)
    assert facts.waits.count == STEPS
    # each step's gap (from the read-back's end to the next matmul) is charged once, to its wait
    idle_ms = facts.waits.idle_after_ns / 1e6
    # from the wait's end, or from the read-back's end where the records put it after the wait
    assert idle_ms == pytest.approx((STEPS - 1) * (80 + min(shift_us, 3)) / 1000, rel=0.01)
    found = {f.rule: f for f in find(events, window, syncs=syncs, sync_end_ns=window.end_ns)}
    assert "host-sync" in found, (read_back, shift_us)
    assert found["host-sync"].evidence["waits"] == STEPS


def test_before_the_fix_a_shift_of_5_us_lost_every_wait_s_idle() -> None:
    """What the old rule did, kept as the reproduction: the GPU counted busy at each wait's end."""
    import bisect

    events, window, syncs = read_back_loop(5 * US)
    facts = WindowFacts(events, window, KernelClassifier(), syncs)
    starts, ends = list(facts.timeline.any_busy_starts), list(facts.timeline.any_busy_ends)
    old = 0
    for _, start, dur in syncs.rows():
        end = start + dur
        at = bisect.bisect_right(starts, end)
        covering = at > 0 and ends[at - 1] > end
        old += starts[at] - end if at < len(starts) and not covering else 0
    assert old < 0.05 * facts.waits.idle_after_ns  # almost all of it was lost


def test_work_that_runs_on_past_the_slack_is_another_stream_s_and_charges_nothing() -> None:
    shift = WAIT_CLOCK_SLACK_NS + 20 * US
    events, window, syncs = read_back_loop(shift, "synchronize")
    assert WindowFacts(events, window, KernelClassifier(), syncs).waits.idle_after_ns < 0.3 * STEPS * 80 * US
