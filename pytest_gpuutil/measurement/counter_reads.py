"""The hardware counters over each call (--gpu-util-counters): SM, tensor and DRAM use, energy.

They open once CUDA is up in this process: the plugin never initialises CUDA itself (a test's
forked child could then not use it), so where the session starts without it they open as torch
brings CUDA up, in the call that does so (said in its note), or failing that before the next
window. Their samples are read at a flush; a profile whose samples are not in yet is given out
marked ``counters_pending`` and again, complete, by a later flush.
"""
from __future__ import annotations

import dataclasses
import os
import time
from typing import TYPE_CHECKING, Any, Callable, Optional

from pytest_gpuutil.measurement.part import MeasurementPart

if TYPE_CHECKING:
    from pytest_gpuutil.hardware.capture import CounterCapture
    from pytest_gpuutil.measurement.part import Setup
    from pytest_gpuutil.measurement.call_profile import TestProfile
    from pytest_gpuutil.measurement.windows import CallWindows

NOT_UP_YET = "no hardware counters: CUDA was not up in this process when the call began (they start once it is)"


class CounterReads(MeasurementPart):
    """The counters' capture once open, and what to say about it; see the module docstring."""

    starts_late = True  # their start-up is reported on its own line, not in the profiler's

    def __init__(self, mode: str, interval_ms: float, strips: bool):
        self.mode = mode
        self.interval_ms = interval_ms
        #: sample strips under the timelines drawn (when timelines are on)
        self._strips = strips
        self.capture: Optional[CounterCapture] = None
        self.description = ""
        self.fallback = ""
        self.startup_s: Optional[float] = None
        self._describe: Optional[Callable[[], tuple[str, str]]] = None
        #: the pids that are this run's own on the GPU (the counters' "another process" note skips them)
        self.own_pids: Callable[[], set[int]] = lambda: {os.getpid()}
        self._windows: Optional[CallWindows] = None
        #: profiles given out without their counters, until a flush has them
        self._awaiting: dict[str, TestProfile] = {}
        #: (torch, cuda, source) while the counters wait for torch to bring CUDA up (see start)
        self._later: Optional[tuple[Any, bool, Any]] = None
        #: the test whose call is open (node id, perf_counter at its start), for counters that start in it
        self._in_call: Optional[tuple[str, float]] = None
        #: tests whose call ran while the counters waited for CUDA: why they have no counter figures
        self._missing: dict[str, str] = {}
        self._pid = os.getpid()

    # -- opening --------------------------------------------------------------------------------
    def start(self, setup: Setup) -> None:
        self._windows = setup.windows
        torch, cuda, source = setup.torch, setup.cuda, setup.counter_source
        if cuda and not torch.cuda.is_initialized():
            # never initialise CUDA here (see the module docstring): the counters open as torch
            # brings CUDA up (after the activity capture's start, which is queued first)
            if self.mode == "off" or setup.windows.mode == "off":
                return
            self._later = (torch, cuda, source)
            lazy = getattr(torch.cuda, "_lazy_call", None)
            if lazy is not None:
                lazy(self._at_cuda_start)
            return
        self._open(torch, cuda, source)

    def _at_cuda_start(self) -> None:
        """torch's CUDA initialisation calls this: open the counters now. Never raises."""
        if self._later is None or os.getpid() != self._pid:
            return  # opened already, or a forked child that inherited torch's queued calls
        torch, cuda, source = self._later
        self._later = None
        try:
            self._open(torch, cuda, source)
            if self.capture is None or self._in_call is None:
                return
            nodeid, began = self._in_call
            after_ms = (time.perf_counter() - began) * 1000
            if getattr(self.capture.sampler.source, "starts_on_thread", False):
                # they start on their thread (by now, or later: a loaded machine may run that thread
                # first): the window is the whole call, cut where their samples begin, and its note
                # says when that was
                self.capture.begin(nodeid, remark=f"this test brought CUDA up {after_ms:,.0f} ms into its call",
                                   since_ns=self.capture.sampler.now() - int(after_ms * 1e6))
            else:
                self.capture.begin(nodeid, remark=f"this test brought CUDA up: the hardware counters started "
                                                  f"{after_ms:,.0f} ms into its call (CUDA's start-up, then theirs) "
                                                  "and cover the rest of it")
            self._missing.pop(nodeid, None)
            if self._windows is not None and self._windows.capture is not None:
                self._windows.capture.counters_started()
        except Exception as exc:  # noqa: BLE001 - inside torch's CUDA initialisation: never raise there
            self.fallback = self.fallback or f"hardware counters off: they did not start: {exc}"

    def _open_once_cuda_is_up(self) -> None:
        """Open the counters put off by :meth:`start`, once torch has initialised CUDA here."""
        if self._later is None:
            return
        torch, cuda, source = self._later
        if not torch.cuda.is_initialized():
            return
        self._later = None
        self._open(torch, cuda, source)

    def _open(self, torch: Any, cuda: bool, source: Any) -> None:
        """The hardware counters, when asked for and there is a GPU (or a source from the hook)."""
        windows_off = self._windows is None or self._windows.mode == "off"
        if self.mode == "off" or windows_off or not (cuda or source is not None):
            return
        from pytest_gpuutil.hardware.choose import cuda_device, open_counters

        try:
            device = cuda_device(torch) if cuda else None
        except Exception as exc:  # noqa: BLE001 - counters are extra: the tests are measured without them
            self.fallback = f"hardware counters off: the CUDA device could not be read: {exc}"
            return
        opened = open_counters(self.mode, self.interval_ms, device, own_pids=lambda: self.own_pids(), source=source)
        self.capture = opened.capture
        if self.capture is not None and self._strips:
            self.capture.strips = True
        self.description = opened.description
        self.fallback = opened.fallback
        self.startup_s = opened.startup_s
        self._describe = opened.describe

    # -- per test ---------------------------------------------------------------------------------
    @property
    def per_test(self) -> bool:
        """Counters open, or to open when CUDA comes up: else nothing to do per test."""
        return self.capture is not None or self._later is not None

    def begin(self, nodeid: str) -> None:
        if self._later is None and self.capture is None:
            return  # no counters in this run (nor any to come when CUDA comes up)
        if self._later is not None:
            self._open_once_cuda_is_up()
        self._in_call = (nodeid, time.perf_counter())
        if self.capture is None and self._later is not None:
            self._missing[nodeid] = NOT_UP_YET

    def opened(self, nodeid: str) -> None:
        if self.capture is not None:  # open only where the calls are measured (see _open)
            self.capture.begin(nodeid)

    def end(self, nodeid: str) -> None:
        self._in_call = None
        if self.capture is not None:
            self.capture.end()

    # -- at a flush -------------------------------------------------------------------------------
    def waiting(self) -> int:
        """Tests waiting only for their counters count once the samples cover the first of them:
        before that a flush could give none of them, and counting them made every test's teardown
        flush while the sampler had not polled (tests=N and N tests waiting)."""
        if self._awaiting and self.capture is not None and self.capture.first_waiting_covered():
            return len(self._awaiting)
        return 0

    def complete(self, profiles: dict[str, TestProfile], wait: bool) -> dict[str, TestProfile]:
        """The profiles with their hardware counters where known; the others marked pending and kept
        until a flush has them (they come out again then, with the profiles awaited before)."""
        profiles = self._with_missing(profiles)
        if self.capture is None:
            return profiles
        try:
            got = self.capture.flush(wait)
        except Exception as exc:  # noqa: BLE001 - the records go out without counters, never stuck
            self.fallback = self.fallback or f"the hardware counters could not be read: {exc}"
            got, wait = {}, True
        waiting = self.capture.waiting() if not wait else set()
        out = {}
        for key, profile in profiles.items():
            if key in got:
                out[key] = dataclasses.replace(profile, counters=got[key])
            elif key in waiting:
                self._awaiting[key] = profile
                out[key] = dataclasses.replace(profile, counters_pending=True)
            else:
                out[key] = profile
        for key in [k for k in self._awaiting if k in got or k not in waiting]:
            out[key] = dataclasses.replace(self._awaiting.pop(key), counters=got.get(key))
        return out

    def _with_missing(self, profiles: dict[str, TestProfile]) -> dict[str, TestProfile]:
        """Tests that ran while the counters waited for CUDA: empty figures, with the reason."""
        if not self._missing:
            return profiles
        from pytest_gpuutil.hardware.capture import TestCounters

        missing = {k: self._missing.pop(k) for k in list(profiles) if k in self._missing}
        return {k: dataclasses.replace(p, counters=TestCounters("", {}, None, None, missing[k])) if k in missing else p
                for k, p in profiles.items()}

    def close(self) -> None:
        """The sampler stops in the background (the device is released while the session ends)."""
        if self.capture is None:
            return
        try:
            self.capture.sampler.stop(background=True)
        except Exception as exc:  # noqa: BLE001 - the records are out; the summary says so
            self.fallback = self.fallback or f"the hardware counters failed to stop: {exc}"

    def info(self) -> dict[str, Any]:
        """What the summary says about the counters of this process (JSON-able)."""
        if self.capture is None:
            return {"counters": "", "counters_fallback": self.fallback}
        if self._describe is not None:  # a source started on the sampler's thread: what it came to
            self.description, fallback = self._describe()
            if fallback and fallback not in self.fallback:
                self.fallback = f"{self.fallback}; {fallback}" if self.fallback else fallback
        cost = self.capture.sampler.cost()
        return {"counters": self.description, "counters_fallback": self.fallback,
                "counters_startup_s": self.startup_s,
                "counters_cost": {**dataclasses.asdict(cost), "flush_s": self.capture.flush_s,
                                  "error": "" if getattr(self.capture.sampler.source, "failed", False)  # said by the fallback
                                  else self.capture.sampler.error,
                                  "later": [e for e in (self.capture.sampler.energy_error,
                                                        self.capture.sampler.process_error)
                                            if e and e not in self.fallback]}}
