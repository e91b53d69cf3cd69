"""(CPU, callgrind) Instructions of the in-test path per test: N tests' begin and end at one level, as on a
CUDA machine (a namespace dressed as CUDA torch: the allocator's calls answer at once, the stats dict has the
shape torch._C._cuda_memoryStats returns; a synthetic event source; children off), GC off in the loop.

    valgrind --tool=callgrind --callgrind-out-file=OUT python benchmarks/parts/in_test_path_cost.py \
        nofindings|findings N memory|nomemory LEVEL

LEVEL: none (only the items), hook (TestHooks.pytest_runtest_call before and after, pluggy apart),
measuring (Measuring.begin_test+end_test), measurement, capture (ContinuousCapture.begin+end: with memory, the
meter's reset and read at its edges since 41n), memreads (MemoryReads.begin+end: per test only without a continuous
capture since 41n), memreads_pop (and the record's pop of its memory), meterbegin, meterread, clock.
A level's instructions a test: (N=5000 less N=1000) / 4000, less the same of ``none`` (issue 41b:
benchmarks/results/2026-11-27_dev/in_test_41b.txt). Set OPENBLAS_NUM_THREADS=1 (numpy's threads spin).
"""
import sys, time, gc
from types import SimpleNamespace as NS

def _stats(device):
    # the shape torch._C._cuda_memoryStats returns (9 stat arrays of 3 pools of 4 values, 2 stats, 6 ints)
    def stat():
        return {"current": 5, "peak": 9, "allocated": 11, "freed": 6}
    out = {"num_alloc_retries": 0, "num_ooms": 0, "num_sync_all_streams": 0, "num_device_alloc": 1,
           "num_device_free": 0, "max_split_size": -1}
    for name in ("allocation", "segment", "active", "inactive_split", "allocated_bytes", "reserved_bytes",
                 "active_bytes", "inactive_split_bytes", "requested_bytes"):
        out[name] = {"all": stat(), "small_pool": stat(), "large_pool": stat()}
    out["oversize_allocations"] = stat()
    out["oversize_segments"] = stat()
    return out
STATS = _stats(0)
_initialized = True
def _is_in_bad_fork(): return False
def is_initialized(): return _initialized and not _is_in_bad_fork()
torch = NS(_C=NS(_cuda_memoryStats={0: STATS}.__getitem__, _cuda_resetPeakMemoryStats={0: None}.__getitem__,
                 _cuda_resetAccumulatedMemoryStats={0: None}.__getitem__, _cuda_synchronize=int),
           cuda=NS(is_initialized=is_initialized, device_count=lambda: 1),
           autograd=NS(_profiler_enabled=bool, profiler=NS()))
from pytest_gpuutil.analysis.classify import KernelClassifier
from pytest_gpuutil.capture.flush_policy import FlushPolicy
from pytest_gpuutil.measurement import Measurement
from pytest_gpuutil.session.measuring import Measuring
from pytest_gpuutil.per_test import TestResults

class Source:
    name = "synthetic"
    wants_places = True
    def start(self): pass
    def stop(self): pass
    now = staticmethod(time.perf_counter_ns)
    def pending_bytes(self): return 0

findings = sys.argv[1] == "findings"
N = int(sys.argv[2])
memory = (sys.argv[3] if len(sys.argv) > 3 else "memory") == "memory"
m = Measurement(KernelClassifier(), keep_events=False, cpu_activity=False, policy=FlushPolicy(), findings=findings,
                children=False, memory=memory)
m.prepare(torch, True, Source())
meas = Measuring(m, lambda *a: None, worker_id="", traces="none", output_dir=None, trace_errors=[])
ids = [f"test_{i}" for i in range(N)]
res = [TestResults(i) for i in ids]
import pytest
from pytest_gpuutil.session.record_timing import RecordTiming
items = [NS(nodeid=i, stash=pytest.Stash()) for i in ids]
for it in items:
    RecordTiming.note_marked(it, False)  # as the collection does
gc.disable()
level = sys.argv[4] if len(sys.argv) > 4 else "measuring"
if level == "hook":
    from pytest_gpuutil.plugin import TestHooks
    state = NS(measuring=meas, settings=NS(enabled=True), is_worker=False)
    hooks = TestHooks(state, RecordTiming(True, None), False)
    call = hooks.pytest_runtest_call
    for it in items:
        g = call(it)
        next(g)
        try:
            g.send(None)
        except StopIteration:
            pass
elif level == "measuring":
    for i, rr in zip(ids, res):
        meas.begin_test(i, rr)
        meas.end_test(i, rr)
elif level == "measurement":
    for i, rr in zip(ids, res):
        m.begin(i, rr)
        m.end(i, rr)
elif level == "capture":
    cap = m.windows.capture
    for i in ids:
        cap.begin(i)
        cap.end()
elif level == "meterbegin":
    mt = m.meter
    for i in ids:
        mt.begin()
elif level == "meterread":
    mt = m.meter
    for i in ids:
        mt.read()
elif level == "clock":
    for i in ids:
        time.perf_counter()
elif level == "memreads_pop":
    mr = m.memory_reads
    for i in ids:
        mr.begin(i)
        mr.end(i)
        mr.memory.pop(i, None)
elif level == "memreads":
    mr = m.memory_reads
    for i in ids:
        mr.begin(i)
        mr.end(i)
places = m.windows.capture.places
if places is not None:
    places.close()
print("done", N, len(m.memory))
