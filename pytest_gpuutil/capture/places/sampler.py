"""A low-rate sampler of the test thread's Python stack, only while a test's call runs.

Launch loops and idle gaps have no call of their own to read a place at: there the findings'
places come from samples. A daemon thread wakes every ``interval_s`` (10 ms on average: 100 Hz) while a call
runs, reads the test thread's frame (``sys._current_frames()``), walks it outward and keeps up to
three places outside torch, the plugin, pytest, pluggy and the standard library, with the clock
(the GPU events' clock) and whether the thread was inside torch.cuda's lazy initialisation (the
first test's note splits its time before CUDA came up by it). Between calls the thread sleeps in C
without the GIL (``_frames.sleep_until_on``: it looks at a flag each period and takes the GIL only
once a call runs), so it takes no turn from the test thread between calls and nothing wakes it at a
call's start. Without the C module it keeps its period for a second after a call
(:data:`LINGER_S`), then waits on an event.

Cost: one sample is a dictionary of the threads' frames and a walk of a few dozen frames, about
10-30 µs of the sampler's time, plus the GIL handed over once: at 100 Hz about 1.2 % of one core
(the ``where`` device step measures it; the design allows 2 %).
"""
from __future__ import annotations

import random
import sys
import threading
import time
from typing import Any, Callable, Optional

from pytest_gpuutil.analysis.places import HostSamples, Site

#: 100 Hz on average (each period drawn between 0.5 and 1.5 times this). At 5 ms with Python's 5 ms
#: switch interval a pure-Python stretch was sampled at ~97 Hz for 1.2 % of a core (H100 host, the
#: where step); with the switch interval at 0.5 ms the same 5 ms would sample it twice as often
INTERVAL_S = 0.01
#: samples kept between two takes at most (about 160 minutes of calls at 100 Hz)
MAX_SAMPLES = 1_000_000
#: frames walked outward from the innermost at most
MAX_DEPTH = 200
#: how long the thread keeps its period after a call ends before it waits for the next one (s).
#: A thread woken at a call's start takes the GIL from the test thread inside the call, once a test
#: in a suite of short tests, where no timer of the plugin's own sees it (on an H200 a small test's
#: function took 60-80 µs longer in default runs than in lean ones, places off; the effect of this
#: change was not separable from that host's noise: benchmarks/results/2026-11-27_h200_late, issue
#: 41). Ticking on between calls costs a GIL hand-over per period instead (100 Hz), and a tick that
#: came between calls waited for the GIL into the next call, where it took a sample (of weight a whole
#: period) and the test thread's turn. Only the Python wait lingers: the C wait takes no GIL between
#: calls (3,000 small synthetic tests: 28 GIL turns against 419, issue 41i).
LINGER_S = 1.0
#: Python's switch interval while a call is sampled (s). The sampler needs the GIL to read the
#: frames; at Python's default (5 ms) a thread running pure Python hands it over only after 5 ms, or
#: sooner wherever it releases it itself (a torch op). Each sample then landed on the next torch op
#: after a stretch of pure Python, never in it: on an H100 a 5 ms helper between matmuls was sampled
#: only at the matmul's line (issue 42). At 0.5 ms a sample is at most that late. It matters only
#: while another thread waits for the GIL: the sampler, once a sample (and a test's own threads).
SAMPLING_SWITCH_INTERVAL_S = 0.0005


class StackSampler:
    """Samples one thread's stack while :meth:`begin` ... :meth:`end` (see the module)."""

    def __init__(self, clock: Callable[[], int], is_users: Callable[[str], bool], interval_s: float = INTERVAL_S):
        self._clock = clock
        self._is_users = is_users
        self.interval_s = interval_s
        #: whether a call runs now (a plain flag: set and cleared at every call without a lock)
        self._on = False
        #: the same flag, and whether the sampler is closed, as bytes the C wait reads without the GIL
        self._flags = bytearray(2)
        #: the C wait between samples (None: the Python one, with its linger and event)
        self._sleep_until_on = _c_wait()
        #: what the thread waits on once it has had no call for LINGER_S (set only while it waits)
        self._wake = threading.Event()
        self._sleeping = False
        self._target: Optional[int] = None
        self._thread: Optional[threading.Thread] = None
        self._closed = False
        self._times: list[int] = []
        self._sites: list[tuple[Site, ...]] = []
        self._init: list[bool] = []
        self._weights: list[int] = []
        self._last = 0  # the clock at the last sample of the running call (0: none yet)
        self._lock = threading.Lock()
        #: the sampler's own time (s of its thread's CPU) and samples taken, for the cost figures
        self.samples_taken = 0
        self.cpu_s = 0.0
        self._user_file: dict[str, bool] = {}
        #: Python's switch interval before :meth:`begin` lowered it (None: left as it was)
        self._switch_before: Optional[float] = None

    def begin(self, thread_id: Optional[int] = None) -> None:
        """Sample ``thread_id`` (this thread by default) from now on."""
        if self._closed:
            return
        self._target = thread_id if thread_id is not None else threading.get_ident()
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="pytest-gpuutil-stack-sampler", daemon=True)
            self._thread.start()
        self._last = 0
        before = sys.getswitchinterval()
        if before > SAMPLING_SWITCH_INTERVAL_S and self._switch_before is None:
            self._switch_before = before
            sys.setswitchinterval(SAMPLING_SWITCH_INTERVAL_S)
        self._on = True
        self._flags[0] = 1
        if self._sleeping:
            self._wake.set()

    def end(self) -> None:
        self._on = False
        self._flags[0] = 0
        before, self._switch_before = self._switch_before, None
        if before is not None and abs(sys.getswitchinterval() - SAMPLING_SWITCH_INTERVAL_S) < 1e-6:  # unless the test set its own
            sys.setswitchinterval(before)

    def close(self) -> None:
        self._closed = True
        self._flags[1] = 1  # the C wait returns within a period
        self._wake.set()  # wakes the thread, which then ends

    def take(self) -> HostSamples:
        """The samples since the last take, in time order."""
        with self._lock:
            times, sites, init, weights = self._times, self._sites, self._init, self._weights
            self._times, self._sites, self._init, self._weights = [], [], [], []
        return HostSamples(int(self.interval_s * 1e9), times, sites, init, weights)

    def sample_now(self, thread_id: int) -> tuple[tuple[Site, ...], bool]:
        """One sample of ``thread_id``'s stack: (its places, whether inside CUDA's start-up)."""
        frame = sys._current_frames().get(thread_id)
        return self.places_of(frame)

    def places_of(self, frame: Any) -> tuple[tuple[Site, ...], bool]:
        """Up to three places of the user's code, innermost first, from ``frame`` outward, and whether
        a frame on the way is torch.cuda's lazy initialisation."""
        found: list[Site] = []
        in_init = False
        depth = 0
        users = self._user_file
        while frame is not None and depth < MAX_DEPTH:
            code = frame.f_code
            path = code.co_filename
            mine = users.get(path)
            if mine is None:
                mine = users[path] = self._is_users(path)
            if mine:
                if len(found) < 3:
                    found.append((path, frame.f_lineno, code.co_name))
            elif code.co_name == "_lazy_init" and path.endswith(("cuda/__init__.py", "cuda\\__init__.py")):
                in_init = True
            frame = frame.f_back
            depth += 1
        return tuple(found), in_init

    def _run(self) -> None:
        began = time.thread_time()
        # a period drawn afresh each time (0.5-1.5 x the interval): a fixed one locks onto a loop of the
        # same period, and every sample of it lands on the same line (a 5 ms helper between torch ops)
        jitter = random.Random(0x42)
        idle_since: Optional[float] = None
        gate = self._sleep_until_on
        while not self._closed:
            if gate is not None:
                # a period, then on without the GIL until a call runs (the samples as below)
                gate(self._flags, self.interval_s * (0.5 + jitter.random()))
            elif self._on:
                idle_since = None
            elif idle_since is None:
                idle_since = time.monotonic()
            elif time.monotonic() - idle_since > LINGER_S:
                # no call for a while: sleep until the next one begins. The flag is set before the
                # next call's begin() looks at it, and the call's flag read after: one of the two sees the other
                self._sleeping = True
                self._wake.clear()
                if not self._on and not self._closed:
                    self._wake.wait()
                self._sleeping = False
                idle_since = None
                if self._closed:
                    break
            if gate is None:
                time.sleep(self.interval_s * (0.5 + jitter.random()))
            target = self._target
            if not self._on or target is None:
                continue
            try:
                sites, in_init = self.sample_now(target)
            except Exception:  # noqa: BLE001 - a sample lost, never the test session
                continue
            now = self._clock()
            weight = now - self._last if self._last else int(self.interval_s * 1e9)
            self._last = now
            with self._lock:
                if len(self._times) < MAX_SAMPLES:
                    self._times.append(now)
                    self._sites.append(sites)
                    self._init.append(in_init)
                    self._weights.append(weight)
            self.samples_taken += 1
            self.cpu_s = time.thread_time() - began


def _c_wait() -> Optional[Callable[[bytearray, float], None]]:
    """``_frames.sleep_until_on`` where the places' C module was built, else None."""
    try:
        from pytest_gpuutil.capture.places import _frames  # type: ignore[attr-defined]
    except ImportError:
        return None
    return getattr(_frames, "sleep_until_on", None)
