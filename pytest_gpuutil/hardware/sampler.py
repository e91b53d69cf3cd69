"""The background thread that reads the hardware counters while tests run.

It owns the device-side state: it polls the counter source (for CUPTI PM sampling: decode the
hardware buffer and evaluate the completed samples) every ``poll_interval_s`` of the source (0.1 s
for PM sampling; GPM's period) and checks which processes are on the GPU every ``tick_s`` (0.1 s).
NVML's energy counter costs 4-12 ms of CPU a read (H100), more than everything else the thread
does at 5 ms samples, so it is read where a window needs it: at a window's edges (asked by
:meth:`CounterSampler.energy_edge`, at most every ``energy_gap_s`` for the starts of short tests),
at a flush that needs it, and otherwise every ``energy_every_s`` (1 s) for the session's sums.
Those calls release the GIL (ctypes), so the tests' own threads run on. The test side only reads
the clock (:meth:`CounterSampler.now`) at window edges and, at a flush, asks for everything up to a
time (:meth:`CounterSampler.sync`) and takes the samples (:meth:`CounterSampler.collected`).

The thread's CPU time is kept, whole and by part (``time.thread_time`` inside the thread), and
given with its share of one core over the thread's life by :meth:`CounterSampler.cost`.
"""
from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from typing import Callable, Optional, Protocol

import numpy as np

from pytest_gpuutil.analysis.counters import ENERGY, CounterSamples, ProcessChecks
from pytest_gpuutil.machine.processes import descends_from

#: samples stamped further than this from the wall clock are on some other clock (a bug, not data)
_CLOCK_SANITY_NS = 60_000_000_000
#: checks of the GPU's processes that may list others before this process must show up among them
_SELF_UNSEEN_CHECKS = 20
#: the energy counter is read at least this often (s) when no window edge asks (the session's sums)
ENERGY_EVERY_S = 1.0
#: a window's start asks for an energy reading only when the last one asked is older (s): the
#: starts of many short tests share one (a window needs 1 s of call for energy of its own)
ENERGY_GAP_S = 0.25


class CounterSource(Protocol):
    """What the sampler reads: CUPTI PM sampling, NVML GPM, or a synthetic source in tests."""

    name: str
    #: the sampling period in ns (None: not known yet)
    period_ns: Optional[int]
    #: the record fields it measures
    fields: tuple[str, ...]

    def start(self) -> None: ...  # device-side set-up; raises with a one-line reason
    def poll(self) -> CounterSamples: ...  # samples completed since the last poll
    def stop(self) -> CounterSamples: ...  # the rest; releases the device-side state


@dataclass(frozen=True)
class SamplerCost:
    """What reading the counters cost this process."""

    startup_s: float
    #: CPU time of the sampler's thread (its polls, energy reads and process checks)
    thread_cpu_s: float
    polls: int
    poll_s: float
    energy_reads: int
    energy_s: float
    process_checks: int
    process_s: float
    samples: int
    #: how long the sampler ran
    wall_s: float
    #: the thread's CPU time by part: polls (decode and evaluation), energy reads, process checks
    poll_cpu_s: float = 0.0
    energy_cpu_s: float = 0.0
    process_cpu_s: float = 0.0
    #: the thread's CPU time as a share of one core over ``wall_s`` (%)
    thread_pct: float = 0.0
    #: seconds the source took to start on the thread (None: it started before the thread), left
    #: out of the figures above
    thread_startup_s: Optional[float] = None


class CounterSampler:
    """Reads a counter source, the energy counter and the GPU's processes in a background thread."""

    def __init__(self, source: Optional[CounterSource], energy_mj: Optional[Callable[[], int]] = None,
                 process_pids: Optional[Callable[[], set[int]]] = None,
                 own_pids: Callable[[], set[int]] = lambda: {os.getpid()},
                 tick_s: float = 0.1, clock: Callable[[], int] = time.time_ns,
                 energy_every_s: float = ENERGY_EVERY_S, energy_gap_s: float = ENERGY_GAP_S):
        self.source = source
        self._energy_mj = energy_mj
        self._process_pids = process_pids
        self.own_pids = own_pids
        self.tick_s = tick_s
        self.energy_every_s = energy_every_s
        self.energy_gap_s = energy_gap_s
        self.now = clock
        #: why the source stopped delivering (then windows after it get no figures), else ""
        self.error = ""
        #: why energy or the process check stopped, else ""
        self.energy_error = ""
        self.process_error = ""
        self._cond = threading.Condition()
        self._thread: Optional[threading.Thread] = None
        self._stopping = False
        self._wanted = self._done = 0
        self._want_energy = False
        self._samples: list[CounterSamples] = []
        self._energy: list[CounterSamples] = []
        self._last_energy: Optional[tuple[int, int]] = None
        self._check_times: list[int] = []
        self._check_foreign: list[frozenset[int]] = []
        self._seen_self = False
        self._unseen = 0
        self.covered_until = 0
        self.energy_until = 0
        self._source_alive = source is not None
        self._startup_s = 0.0
        self._began = 0.0
        self._ended: Optional[float] = None
        self._thread_cpu = 0.0
        self._polls = self._energy_reads = self._checks = self._samples_seen = 0
        self._poll_s = self._energy_s = self._process_s = 0.0
        self._poll_cpu = self._energy_cpu = self._process_cpu = 0.0
        #: when an edge last asked for an energy reading (time.monotonic; the sampler's clock, 0: never)
        self._energy_asked, self.energy_asked_ns, self._energy_at = float("-inf"), 0, 0.0

    # -- life cycle -------------------------------------------------------------------------------
    @property
    def period_ns(self) -> Optional[int]:
        """The source's sampling period (None: no source, energy only)."""
        return self.source.period_ns if self.source is not None else None

    @property
    def source_name(self) -> str:
        return self.source.name if self.source is not None else ""

    def start(self) -> None:
        """Start the source (its one-time set-up, timed) and the thread. Raises if the source cannot start."""
        began = time.perf_counter()
        if self.source is not None:
            self.source.start()
        if getattr(self.source, "starting", False):  # a source that starts on the thread: all of it there
            self._want_energy = True
        else:
            self._work(energy=True)
        self._startup_s = time.perf_counter() - began
        self._began = time.perf_counter()
        self._thread = threading.Thread(target=self._run, name="pytest-gpuutil counters", daemon=True)
        self._thread.start()

    def stop(self, background: bool = False) -> None:
        """Stop the thread, take the source's last samples and release it.

        ``background=True`` (the session's end, after its last flush) releases the device in a
        thread of its own (PM sampling's disable takes ~80 ms): the session ends without waiting,
        and the interpreter waits for that thread before it exits.
        """
        thread = self._thread
        if thread is None:
            return
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._thread = None
        if background:
            threading.Thread(target=self._release, args=(thread, False), name="pytest-gpuutil counters release").start()
            return
        self._release(thread, True)

    def _release(self, thread: threading.Thread, keep_last: bool) -> None:
        thread.join()
        if self.source is not None:  # stopped even after a failed poll: the device must be released
            alive, self._source_alive = self._source_alive, False
            try:
                samples = self.source.stop()
                if alive and keep_last:
                    self._add_samples(samples)
            except Exception as exc:  # noqa: BLE001 - the session goes on without the last samples
                self.error = self.error or f"{self.source.name} failed to stop: {exc}"
        if keep_last:
            self._read_energy()
        self._ended = time.perf_counter()

    @property
    def running(self) -> bool:
        return self._thread is not None

    # -- the thread -------------------------------------------------------------------------------
    @property
    def poll_interval_s(self) -> float:
        return float(getattr(self.source, "poll_interval_s", self.tick_s) or self.tick_s)

    def _run(self) -> None:
        cpu_began = time.thread_time()
        next_tick = time.monotonic() + self.tick_s
        next_poll = time.monotonic() + self.poll_interval_s
        try:
            while True:
                with self._cond:
                    while (not self._stopping and self._wanted <= self._done and not self._want_energy
                           and time.monotonic() < min(next_tick, next_poll)):
                        self._cond.wait(timeout=max(0.0, min(next_tick, next_poll) - time.monotonic()))
                    if self._stopping:
                        return
                    wanted, want_energy = self._wanted, self._want_energy
                    self._want_energy = False
                now = time.monotonic()
                tick, poll = now >= next_tick, now >= next_poll or wanted > self._done
                energy = want_energy or (tick and now - self._energy_at >= self.energy_every_s)
                self._work(energy=energy, processes=tick, poll=poll)
                if tick:
                    next_tick = max(next_tick + self.tick_s, time.monotonic())
                if poll:
                    next_poll = time.monotonic() + self.poll_interval_s
                with self._cond:
                    self._done = max(self._done, wanted)
                    self._cond.notify_all()
                self._thread_cpu = time.thread_time() - cpu_began
        finally:
            self._thread_cpu = time.thread_time() - cpu_began

    def _work(self, energy: bool, processes: bool = True, poll: bool = True) -> None:
        if poll and self.source is not None and self._source_alive:
            began, cpu = time.perf_counter(), time.thread_time()
            try:
                self._add_samples(self.source.poll())
            except Exception as exc:  # noqa: BLE001 - counters stop, tests go on
                self.error = f"{self.source.name} stopped: {exc}"
                self._source_alive = False
            self._polls += 1
            self._poll_s += time.perf_counter() - began
            self._poll_cpu += time.thread_time() - cpu
        if energy:
            cpu = time.thread_time()
            self._read_energy()
            self._energy_cpu += time.thread_time() - cpu
        if processes:
            cpu = time.thread_time()
            self._check_processes()
            self._process_cpu += time.thread_time() - cpu

    def _add_samples(self, samples: CounterSamples) -> None:
        if not len(samples):
            return
        if abs(int(samples.end_ns[-1]) - self.now()) > _CLOCK_SANITY_NS:
            raise ValueError(f"its samples are not on the wall clock (a sample ends at {int(samples.end_ns[-1])} ns)")
        with self._cond:
            self._samples.append(samples)
            self._samples_seen += len(samples)
            self.covered_until = max(self.covered_until, int(samples.end_ns.max()))

    def _read_energy(self) -> None:
        if self._energy_mj is None or self.energy_error:
            return
        began = time.perf_counter()
        self._energy_at = time.monotonic()
        before = self.now()
        try:
            millijoules = self._energy_mj()
        except Exception as exc:  # noqa: BLE001
            self.energy_error = f"the energy counter could not be read: {exc}"
            return
        at = (before + self.now()) // 2
        self._energy_reads += 1
        self._energy_s += time.perf_counter() - began
        last, self._last_energy = self._last_energy, (at, millijoules)
        if last is None or at <= last[0] or millijoules < last[1]:  # first reading, or the counter was reset
            return
        reading = CounterSamples(np.asarray([last[0]], dtype=np.int64), np.asarray([at], dtype=np.int64),
                                 {ENERGY: np.asarray([(millijoules - last[1]) / 1000.0])})
        with self._cond:
            self._energy.append(reading)
            self.energy_until = at

    def _check_processes(self) -> None:
        if self._process_pids is None or self.process_error:
            return
        began = time.perf_counter()
        try:
            listed = self._process_pids()
            own = self.own_pids()
        except Exception as exc:  # noqa: BLE001
            self.process_error = f"the GPU's processes could not be listed: {exc}"
            return
        # NVML lists pids as the host sees them: until this process shows among them, the list
        # may be of another pid namespace (a container), where every pid would look foreign
        self._seen_self = self._seen_self or bool(listed & own)
        if not self._seen_self and listed:
            self._unseen += 1
            if self._unseen >= _SELF_UNSEEN_CHECKS:
                self.process_error = ("this process is not in NVML's list of the GPU's processes (another pid "
                                      "namespace, e.g. a container): other processes on the GPU are not detected")
        # a test's own child processes are not "another process" (pids NVML lists rarely are, so
        # walking their parents in /proc costs nothing in the common case)
        foreign = frozenset(p for p in listed - own if not descends_from(p, os.getpid())) if self._seen_self else frozenset()
        self._checks += 1
        self._process_s += time.perf_counter() - began
        with self._cond:
            self._check_times.append(self.now())
            self._check_foreign.append(foreign)

    # -- the test side ----------------------------------------------------------------------------
    def energy_edge(self, always: bool = False) -> None:
        """A window's edge: have the thread read the energy counter now; a start (not ``always``) only
        if the last ask is ``energy_gap_s`` old."""
        if self._energy_mj is None or self.energy_error or self._thread is None:
            return
        now = time.monotonic()
        if not always and now - self._energy_asked < self.energy_gap_s:
            return
        self._energy_asked = now
        self.energy_asked_ns = self.now()
        with self._cond:
            self._want_energy = True
            self._cond.notify_all()

    def sync(self, until_ns: int, energy: bool = False, timeout_s: float = 1.0) -> bool:
        """Have the thread poll until the samples (and, if asked, energy readings) reach ``until_ns``.

        Returns False when they do not within ``timeout_s`` (the source stopped, samples lost).
        """
        covered = self._covers(until_ns, energy)
        if covered or self._thread is None:
            return covered  # nothing to wait for: no poll forced on the thread
        deadline = time.monotonic() + timeout_s
        pause = min(0.005, (self.period_ns or 1_000_000) / 2e9)
        # a source whose samples end on a fixed period (PM sampling) has none over ``until_ns`` before
        # that period has passed it: a poll before then decodes in vain
        latency = int(getattr(self.source, "sample_latency_ns", 0) or 0)
        time.sleep(max(0.0, min(0.05, (until_ns + latency - self.now()) / 1e9)))
        while True:
            with self._cond:
                self._wanted += 1
                target = self._wanted
                self._want_energy = self._want_energy or (energy and self.energy_until < until_ns)
                self._cond.notify_all()
                while self._done < target and self._thread is not None:
                    if not self._cond.wait(timeout=max(0.0, deadline - time.monotonic())):
                        break
            if self._covers(until_ns, energy) or time.monotonic() >= deadline:
                return self._covers(until_ns, energy)
            time.sleep(pause)

    def covers(self, until_ns: int, energy: bool = False) -> bool:
        """Whether the samples (and, if asked, energy readings) already reach ``until_ns`` (or never will)."""
        return self._covers(until_ns, energy)

    def _covers(self, until_ns: int, energy: bool) -> bool:
        counters = not self._source_alive or self.covered_until >= until_ns
        return counters and (not energy or self._energy_mj is None or bool(self.energy_error)
                             or self.energy_until >= until_ns)

    def collected(self) -> tuple[CounterSamples, CounterSamples, ProcessChecks]:
        """Every sample, energy reading and process check kept so far."""
        with self._cond:
            samples = CounterSamples.concat(self._samples)
            energy = CounterSamples.concat(self._energy)
            self._samples = [samples] if len(samples) else []
            self._energy = [energy] if len(energy) else []
            checks = ProcessChecks(tuple(self._check_times), tuple(self._check_foreign),
                                   period_ns=int(self.tick_s * 1e9))
        return samples.tidy(), energy.tidy(), checks

    def forget_before(self, t_ns: int) -> None:
        """Drop what no window from ``t_ns`` on can need."""
        with self._cond:
            self._samples = [p for p in (s.ending_after(t_ns) for s in self._samples) if len(p)]
            self._energy = [p for p in (s.ending_after(t_ns) for s in self._energy) if len(p)]
            kept = ProcessChecks(tuple(self._check_times), tuple(self._check_foreign)).after(t_ns)
            self._check_times, self._check_foreign = list(kept.times_ns), list(kept.foreign)

    def cost(self) -> SamplerCost:
        return sampler_cost(self)


def sampler_cost(sampler: CounterSampler) -> SamplerCost:
    """What ``sampler`` cost so far; a source started on its thread (``startup_cpu_s``, ``startup_s``)
    has that start-up left out of the thread's figures (it is a start-up, reported as one)."""
    source = sampler.source
    start_cpu = float(getattr(source, "startup_cpu_s", 0.0) or 0.0)
    start_wall = float(getattr(source, "startup_s", 0.0) or 0.0) if start_cpu else 0.0
    thread_cpu = max(0.0, sampler._thread_cpu - start_cpu)
    end = sampler._ended if sampler._ended is not None else time.perf_counter()
    samples = getattr(source, "samples", sampler._samples_seen) if source is not None else 0
    wall = max(0.0, end - sampler._began - start_wall) if sampler._began else 0.0
    return SamplerCost(
        startup_s=sampler._startup_s, thread_cpu_s=thread_cpu, polls=sampler._polls,
        poll_s=max(0.0, sampler._poll_s - start_wall), energy_reads=sampler._energy_reads, energy_s=sampler._energy_s,
        process_checks=sampler._checks, process_s=sampler._process_s, samples=int(samples), wall_s=wall,
        poll_cpu_s=max(0.0, sampler._poll_cpu - start_cpu), energy_cpu_s=sampler._energy_cpu,
        process_cpu_s=sampler._process_cpu, thread_pct=100.0 * thread_cpu / wall if wall > 0 else 0.0,
        thread_startup_s=start_wall or None,
    )
