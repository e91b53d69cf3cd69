"""What measuring costs inside the tests where no timer of the plugin's sees it: an estimate per process.

The summary's "measurement cost" adds up the plugin's own timers (its hooks, flushes, the session's
end). Two costs are paid inside the tests, on the plugin's behalf, where those timers cannot be:

- **CUPTI's activity records.** While the capture runs, CUPTI makes every kernel launch, copy and
  memset of the process dearer on the host (on an H200 +1.2 µs a tiny launch in a loop, about
  +3 µs a record in a small test's body: benchmarks/results/2026-11-27_h200_late). It is
  calibrated once per process (:func:`calibrate_records`, at the first flush that comes after
  :data:`CALIBRATE_AFTER_RECORDS` records, outside every window): blocks of tiny launches and a
  synchronize, timed alternately with the kernels' records on and off (about 10 ms); the difference
  over the launches is the cost of one record, which is charged for every record the windows counted.
- **The findings' stack sampler**, a thread that reads the test thread's stack while a call runs
  (capture/places/sampler.py): it holds Python's lock while it samples, so its CPU time (the
  thread's own clock) is charged as it is.

The calibration itself is the plugin's own time (its flush's timer counts it). Not estimated: the
host-wait callbacks at synchronizing calls and copies, Python's collections the plugin's objects
bring due inside a test, and caches the plugin's code leaves colder for the test's.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Optional


#: the records after which a flush calibrates (a calibration costs a few ms: below this many records
#: their cost would be smaller than the calibration's own)
CALIBRATE_AFTER_RECORDS = 2_000
#: the calibration's shape: rounds of one block with the kinds on and one with them off (order
#: alternating), each block this many bodies of LAUNCHES tiny launches and a synchronize
ROUNDS = 3
BODIES = 24
LAUNCHES = 4


@dataclass(frozen=True)
class RecordCost:
    """CUPTI's calibrated cost: host µs added per record, and the medians it came from."""

    us_per_record: float
    #: a body's median µs with the activity kinds on and off
    on_us: float
    off_us: float
    launches: int
    calibration_s: float


def calibrate_records(launch: Callable[[], Any], synchronize: Callable[[], Any], records_off: Callable[[], Any],
                      records_on: Callable[[], Any], rounds: int = ROUNDS, bodies: int = BODIES,
                      launches: int = LAUNCHES, clock: Callable[[], float] = time.perf_counter) -> RecordCost:
    """The host cost of one activity record: bodies of ``launches`` launches and a synchronize, timed
    in blocks with the records on and off (``records_off``/``records_on`` toggle them), alternating."""
    began = clock()

    def block() -> float:
        synchronize()
        start = clock()
        for _ in range(bodies):
            for _ in range(launches):
                launch()
            synchronize()
        return (clock() - start) / bodies

    block()  # warm: the first launches after a pause are dearer either way
    on: list[float] = []
    off: list[float] = []
    for index in range(rounds):
        for records in ((True, False) if index % 2 == 0 else (False, True)):
            if records:
                on.append(block())
                continue
            records_off()
            try:
                off.append(block())
            finally:
                records_on()
    on_s, off_s = statistics.median(on), statistics.median(off)
    return RecordCost(max(0.0, (on_s - off_s) / launches * 1e6), on_s * 1e6, off_s * 1e6, launches,
                      clock() - began)


class UnseenCost:
    """This process's estimate (see the module): records counted, their calibrated cost, the sampler."""

    def __init__(self) -> None:
        self.records = 0
        self.record_cost: Optional[RecordCost] = None
        #: why CUPTI's records are not estimated ("" when they are, or not yet)
        self.note = ""
        self._tried = False

    def count(self, profiles: dict[str, Any]) -> None:
        """The records the windows of a flush counted (kernels, copies, memsets)."""
        # a comprehension: attribute reads it specialises (a map of attrgetters costs twice as much)
        self.records += sum([p.stats.event_count for p in profiles.values() if p.stats is not None])

    def calibrate_if_due(self, torch: Any, source: Any, synchronize: Optional[Callable[[], Any]] = None) -> None:
        """Once, at a flush, when enough records were counted and CUPTI runs with CUDA up in this process
        (``synchronize``: the capture's own, which the host-wait callbacks do not record)."""
        if self._tried or self.records < CALIBRATE_AFTER_RECORDS:
            return
        self._tried = True
        records_off, records_on = getattr(source, "records_off", None), getattr(source, "records_on", None)
        launch = getattr(torch._C, "_cuda_sleep", None)
        synchronize = synchronize or getattr(torch._C, "_cuda_synchronize", None)
        if records_off is None or records_on is None or launch is None or synchronize is None:
            self.note = "CUPTI's cost per record not estimated: no CUPTI source, or no torch call to calibrate with"
            return
        if not (getattr(source, "running", False) and torch.cuda.is_initialized()):
            self._tried = False  # later, when it runs
            return
        try:
            # spin kernels of no cycles: no memory of the allocator's is touched
            self.record_cost = calibrate_records(lambda: launch(0), synchronize, records_off, records_on)
        except Exception as exc:  # noqa: BLE001 - an estimate less, never a failed session
            self.note = f"CUPTI's cost per record not estimated: {exc}"

    def seconds(self, sampler_cpu_s: float = 0.0) -> float:
        """The estimate so far, in seconds: the records at their calibrated cost, and the sampler's CPU."""
        per_record = self.record_cost.us_per_record if self.record_cost is not None else 0.0
        return self.records * per_record / 1e6 + sampler_cpu_s

    def info(self, sampler_cpu_s: float = 0.0) -> dict[str, Any]:
        """What the run's files say of it (JSON-able)."""
        return {"unseen_s": self.seconds(sampler_cpu_s),
                "unseen": {"records": self.records, "sampler_cpu_s": sampler_cpu_s, "note": self.note,
                           "record_cost": asdict(self.record_cost) if self.record_cost is not None else None}}
