"""A child process that hands real spool chunks to its parent, without CUDA.

    python synthetic_child.py STEP [STEP ...]

Steps: ``kernel:NAME:MS[:DEVICE]`` spins MS milliseconds of "GPU work" stamped on the wall clock
(as CUPTI stamps it); ``sleep:MS``; ``ready`` prints "ready"; ``kill`` ends the process with
SIGKILL (no hand-over at exit). It measures itself with the same ChildCapture as a torch child,
so the parent reads what a real child writes; without PYTEST_GPUUTIL_SPOOL it measures nothing.
"""
from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
import time

from pytest_gpuutil.children.child_capture import ChildCapture, ChildIdentity
from pytest_gpuutil.children.spool import SPOOL_ENV, period_from
from pytest_gpuutil.children.spool_format import SYNTHETIC, Memory
from pytest_gpuutil.traces.model import GpuColumns, GpuEvent


class SyntheticSource:
    name = "synthetic child"

    def __init__(self) -> None:
        self.events: list[GpuEvent] = []
        self.lock = threading.Lock()

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def now(self) -> int:
        return time.time_ns()

    def pending_bytes(self) -> int:
        return 0

    def drain(self) -> tuple[GpuColumns, int]:
        with self.lock:
            events, self.events = self.events, []
        return GpuColumns.from_events(events), 0

    def run(self, name: str, ms: float, device: int) -> None:
        start = time.time_ns()
        while time.time_ns() < start + ms * 1e6:
            pass
        with self.lock:
            self.events.append(GpuEvent(name, "kernel", str(device), "7", start, int(ms * 1e6)))


def main(steps: list[str]) -> None:
    source = SyntheticSource()
    directory = os.environ.get(SPOOL_ENV)
    capture = None
    if directory:
        capture = ChildCapture(directory, source, ChildIdentity.of_this_process(), period_from(os.environ),
                               memory=lambda: Memory(((0, 64 << 20, 128 << 20),)), capture=SYNTHETIC)
        capture.open(startup_ns=3_000_000)
        capture.run_in_background()
        atexit.register(capture.finish)
    for step in steps:
        kind, *args = step.split(":")
        if kind == "kernel":
            source.run(args[0], float(args[1]), int(args[2]) if len(args) > 2 else 0)
        elif kind == "sleep":
            time.sleep(float(args[0]) / 1000)
        elif kind == "go":
            deadline = time.monotonic() + 120
            while not os.path.exists(args[0]) and time.monotonic() < deadline:
                time.sleep(0.005)
        elif kind == "sync":
            if capture is not None:
                capture.after_synchronize(lambda: True)
        elif kind == "ready":
            print("ready", flush=True)
        elif kind == "kill":
            os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    main(sys.argv[1:])
