"""The host's waits from CUPTI's callback API (capture/_waits.c, host_waits.py), on a fake libcupti.

The fake is tests/children/fake_cupti.c (the activity API) compiled together with a callback API
below: ``fake_sync(cbid)`` calls the subscriber on entry and exit as CUPTI does around a runtime
call, with the callback site first in the data, and ``fake_busy(1)`` makes cuptiSubscribe answer
as it does when another subscriber (Kineto) holds the process.
"""
from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from pytest_gpuutil.capture import host_waits
from pytest_gpuutil.capture.cupti import KIND_SYNCHRONIZATION, CuptiSource

ROOT = Path(__file__).resolve().parents[2]
waits = host_waits.load_module()
needs_module = pytest.mark.skipif(waits is None, reason="the package was installed without its C callback")

CALLBACK_API = r"""
#include <stdint.h>
#include <string.h>
#include <time.h>
typedef void (*Callback)(void *, int, uint32_t, const void *);
static Callback subscriber;
static int busy;
static int enabled[1024];
struct Data { uint32_t site; const char *name; };
void fake_busy(int value) { busy = value; }
int cuptiSubscribe(void **handle, Callback cb, void *user) {
    (void)user;
    if (busy || subscriber) return 39; /* CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED */
    subscriber = cb; *handle = (void *)&subscriber; return 0;
}
int cuptiEnableCallback(uint32_t on, void *handle, int domain, uint32_t cbid) {
    (void)handle; if (domain != 2 || cbid >= 1024) return 1; enabled[cbid] = (int)on; return 0;
}
int cuptiUnsubscribe(void *handle) { (void)handle; subscriber = 0; memset(enabled, 0, sizeof enabled); return 0; }
void fake_sync(uint32_t cbid, uint64_t wait_ns) {
    struct Data data = {0, "sync"};
    if (subscriber && enabled[cbid]) subscriber(0, 2, cbid, &data);
    struct timespec t; clock_gettime(CLOCK_REALTIME, &t);
    uint64_t start = (uint64_t)t.tv_sec * 1000000000ULL + (uint64_t)t.tv_nsec, now = start;
    while (now < start + wait_ns) { clock_gettime(CLOCK_REALTIME, &t); now = (uint64_t)t.tv_sec * 1000000000ULL + (uint64_t)t.tv_nsec; }
    data.site = 1;
    if (subscriber && enabled[cbid]) subscriber(0, 2, cbid, &data);
}
"""


@pytest.fixture(scope="module")
def fake_lib(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler for the fake libcupti")
    folder = tmp_path_factory.mktemp("fake_cupti_callbacks")
    (folder / "callbacks.c").write_text(CALLBACK_API)
    target = folder / "libcupti.so.callbacks"
    subprocess.run([compiler, "-shared", "-fPIC", "-O1", "-o", str(target), str(ROOT / "tests/children/fake_cupti.c"),
                    str(folder / "callbacks.c"), "-lpthread"], check=True, capture_output=True)
    return ctypes.CDLL(str(target), mode=os.RTLD_GLOBAL)


@needs_module
def test_the_c_callback_keeps_only_the_synchronizing_calls_with_their_entry_and_exit():
    waits.take()  # anything an earlier test left
    call = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p)(waits.callback_address())
    waits.set_clock(0)  # CLOCK_REALTIME, as CUPTI's default clock
    site = ctypes.c_uint32()
    before = time.time_ns()
    for domain, cbid in ((2, 131), (2, 137), (2, 165), (2, 211), (1, 131), (2, 239)):
        site.value = 0
        call(None, domain, cbid, ctypes.addressof(site))
        site.value = 1
        call(None, domain, cbid, ctypes.addressof(site))
    raw, dropped = waits.take()
    types, starts, ends = host_waits.unpack(raw)
    # a launch (211) and the driver domain are not waits; stream, event, device, per-thread stream are
    assert types.tolist() == [3, 1, 4, 3] and dropped == 0
    assert (starts <= ends).all() and before <= int(starts[0]) and int(ends[-1]) <= time.time_ns()
    assert waits.take()[0] == b""  # taken once


@needs_module
def test_a_subscription_records_the_waits_on_the_records_clock(fake_lib: ctypes.CDLL):
    callbacks = host_waits.SyncCallbacks.open(fake_lib)
    assert callbacks is not None and callbacks.start() is None
    fake_lib.fake_sync(131, 200_000)
    fake_lib.fake_sync(211, 0)  # not enabled: never called back
    fake_lib.fake_sync(165, 100_000)
    types, starts, ends = callbacks.take()
    assert types.tolist() == [3, 4]
    assert ends[0] - starts[0] >= 200_000 and ends[1] - starts[1] >= 100_000
    callbacks.stop()
    fake_lib.fake_sync(131, 0)
    assert callbacks.take()[0].size == 0  # unsubscribed: nothing more


@needs_module
def test_the_source_takes_its_waits_from_the_callbacks_and_not_from_kind_38(fake_lib: ctypes.CDLL):
    fake_lib.fake_busy(0)
    source = CuptiSource(library_path=fake_lib._name, host_syncs=True, waits_from_callbacks=True)
    assert source.host_waits == "callbacks" and KIND_SYNCHRONIZATION not in source.kinds
    source.start()
    began = source.now()
    fake_lib.fake_sync(137, 300_000)
    source.drain()
    syncs = source.drain_syncs()
    rows = list(syncs.rows())
    assert [name for name, _, _ in rows] == ["Event Sync"]
    assert rows[0][1] >= began and rows[0][2] >= 300_000
    source.stop()
    fake_lib.fake_sync(137, 0)
    assert len(source.drain()[0]) == 0 and not list(source.drain_syncs().rows())


@needs_module
def test_another_subscriber_sends_the_source_back_to_kind_38_and_says_why(fake_lib: ctypes.CDLL):
    fake_lib.fake_busy(1)
    try:
        source = CuptiSource(library_path=fake_lib._name, host_syncs=True, waits_from_callbacks=True)
        source.start()
        assert source.host_waits == "kind 38" and KIND_SYNCHRONIZATION in source.kinds
        assert "another CUPTI subscriber" in source.host_waits_note
        source.stop()
    finally:
        fake_lib.fake_busy(0)


def test_without_callbacks_asked_the_waits_come_from_kind_38(fake_lib: ctypes.CDLL):
    source = CuptiSource(library_path=fake_lib._name, host_syncs=True)
    assert source.host_waits == "kind 38" and KIND_SYNCHRONIZATION in source.kinds
    quiet = CuptiSource(library_path=fake_lib._name, host_syncs=False, waits_from_callbacks=True)
    assert quiet.host_waits == "" and KIND_SYNCHRONIZATION not in quiet.kinds


def test_unpack_reads_the_c_layout():
    raw = np.array([(3, 131, 10, 20), (1, 137, 30, 45)], dtype=host_waits.WAIT_DTYPE).tobytes()
    types, starts, ends = host_waits.unpack(raw)
    assert types.tolist() == [3, 1] and starts.tolist() == [10, 30] and ends.tolist() == [20, 45]
    assert host_waits.WAIT_DTYPE.itemsize == 24


@needs_module
def test_the_captures_own_synchronize_is_not_recorded(fake_lib: ctypes.CDLL):
    """A window's edges synchronize quietly (capture/continuous.py synchronize_if_used): the callback
    records nothing of them, and the test's own waits as before."""
    from types import SimpleNamespace

    from pytest_gpuutil.capture.continuous import synchronize_if_used

    fake_lib.fake_busy(0)
    source = CuptiSource(library_path=fake_lib._name, host_syncs=True, waits_from_callbacks=True)
    assert source.quiet_waits is waits.set_quiet
    torch = SimpleNamespace(cuda=SimpleNamespace(is_initialized=lambda: True),
                            _C=SimpleNamespace(_cuda_synchronize=lambda: fake_lib.fake_sync(165, 50_000)))
    edge = synchronize_if_used(torch, source.quiet_waits)
    source.start()
    try:
        source.drain()
        source.drain_syncs()
        edge()
        fake_lib.fake_sync(131, 50_000)  # the test's own
        edge()
        source.drain()
        rows = list(source.drain_syncs().rows())
    finally:
        source.stop()
    assert [name for name, _, _ in rows] == ["Stream Sync"]
