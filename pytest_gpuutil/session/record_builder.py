"""One test's record, built from what measured it: its profile, its GPU memory and its fixtures' results.

The same on an xdist worker and in a plain run; the record then travels in a payload (see
:mod:`pytest_gpuutil.session.measuring`). ``physical_id`` maps a device index of this process
to the physical GPU (CUDA_VISIBLE_DEVICES), so records of different workers add up per GPU.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

from pytest_gpuutil.analysis.classify import ATTENTION, COMMUNICATION, MEMCPY
from pytest_gpuutil.analysis.finding_records import DEFAULT_FLOOR, split_by_floor
from pytest_gpuutil.capture.memory import MIB, format_size
from pytest_gpuutil.gates.kernel_families import compact_kernels
from pytest_gpuutil.records import TestRecord, record_fields, record_from, unfilled_fields

if TYPE_CHECKING:
    from pytest_gpuutil.measurement import TestMemory, TestProfile
    from pytest_gpuutil.per_test import TestResults

NO_CUDA_NOTE = "no CUDA device"


def _join(*notes: str) -> str:
    return "; ".join(n for n in notes if n)


#: what one test's record is built from: (nodeid, outcome, profile, results, memory)
RecordInputs = tuple[str, str, Optional["TestProfile"], "TestResults", Optional["TestMemory"]]


def build_records(tests: Sequence[RecordInputs], *, worker: str, physical_id: Callable[[str], str],
                  unmeasured_note: str, findings_ignore: frozenset[str] = frozenset(),
                  findings_floor: Any = None) -> list[TestRecord]:
    """The records of a flush's tests, in their order (see :func:`build_record`), in one loop: what
    holds for all of them is done once (the fields they share, each device's physical id, the floor)."""
    shared = unfilled_fields()  # a measured record's fields start here (its dicts made new: see _measured)
    shared["worker"] = worker
    ids = _Known(physical_id).__getitem__
    floor = findings_floor or DEFAULT_FLOOR
    made = []
    for nodeid, outcome, profile, results, memory in tests:
        stats = None if profile is None else profile.stats
        if stats is not None:
            made.append(_measured(shared, nodeid, outcome, profile, stats, results, memory, ids, findings_ignore,
                                  floor))
        else:
            made.append(_unmeasured(nodeid, outcome, profile, results, memory, worker, ids, unmeasured_note))
    return made


def build_record(nodeid: str, outcome: str, profile: Optional[TestProfile], results: TestResults,
                 memory: Optional[TestMemory], *, worker: str, physical_id: Callable[[str], str],
                 unmeasured_note: str, findings_ignore: frozenset[str] = frozenset(),
                 findings_floor: Any = None) -> TestRecord:
    """The test's record; ``unmeasured_note`` is its note when it has no profile at all. Findings
    that read the hardware counters (``low-sm-activity``) join the window's own findings here, where
    both the busy % and the counters are known; those whose saving is under ``findings_floor``
    (default: the rules' DEFAULT_FLOOR) go to ``below_floor``."""
    return build_records([(nodeid, outcome, profile, results, memory)], worker=worker, physical_id=physical_id,
                         unmeasured_note=unmeasured_note, findings_ignore=findings_ignore,
                         findings_floor=findings_floor)[0]


class _Known(dict):
    """A function's answers, kept (a flush's records ask the same few devices)."""

    def __init__(self, function: Callable[[str], str]):
        super().__init__()
        self._function = function

    def __missing__(self, key: str) -> str:
        value = self[key] = self._function(key)
        return value


def _unmeasured(nodeid: str, outcome: str, profile: Optional[TestProfile], results: TestResults,
                memory: Optional[TestMemory], worker: str, physical_id: Callable[[str], str],
                unmeasured_note: str) -> TestRecord:
    """The record of a test without window statistics (no profile, or one that says why)."""
    data = record_fields(nodeid, outcome)  # filled in here (no ~40 keyword arguments: see record_fields)
    data["worker"] = worker
    data["kernel_bench"] = dict(results.kernel_bench)
    data["gpu_trace"] = dict(results.gpu_trace)
    data.update(memory_fields(memory, physical_id))
    oom_note = memory_note(memory)
    if profile is None:
        data["note"] = _join(unmeasured_note, oom_note)
        return record_from(data)
    if profile.counters is not None:  # the hardware counters ran on, even where the activity capture stepped aside
        data.update(profile.counters.record_fields())
    data["wall_ms"] = profile.wall_ms
    data["measure_ms"] = None if profile.measure_ms is None else profile.measure_ms + (memory.cost_ms if memory else 0.0)
    data["note"] = _join(profile.note or NO_CUDA_NOTE, oom_note)
    return record_from(data)


def _measured(shared: dict[str, Any], nodeid: str, outcome: str, profile: TestProfile, stats: Any,
              results: TestResults, memory: Optional[TestMemory], physical_id: Callable[[str], str],
              findings_ignore: frozenset[str], floor: Any) -> TestRecord:
    """The record of a test with window statistics: the flush's shared fields copied, then its own
    filled in (each of its six dict fields a new dict, as a record's factory makes them)."""
    data = shared.copy()
    data["test"] = nodeid
    data["outcome"] = outcome
    data["kernel_bench"] = dict(results.kernel_bench)
    data["gpu_trace"] = dict(results.gpu_trace)
    if memory is not None and memory.devices:
        data.update(memory_fields(memory, physical_id))
        oom_note = memory_note(memory)
    else:
        data["memory_by_device"] = {}
        oom_note = ""
    counters = profile.counters
    if counters is not None:  # the hardware counters' fields, counter_sums among them
        data.update(counters.record_fields())
    else:
        data["counter_sums"] = {}
    data["wall_ms"] = profile.wall_ms
    data["measure_ms"] = None if profile.measure_ms is None else profile.measure_ms + (memory.cost_ms if memory else 0.0)
    if profile.findings is not None:
        found = profile.findings
        sm_pct = data["sm_pct"]
        if sm_pct is not None:  # counter_findings finds nothing without it (not even imported then)
            from pytest_gpuutil.analysis.findings import counter_findings

            found = (*found, *counter_findings(stats.busy_pct, sm_pct, findings_ignore, profile.wall_ms))
        if found:
            reported, under = split_by_floor(found, floor)
            data["findings"] = tuple([f.to_dict() for f in reported])
            data["below_floor"] = tuple([f.to_dict() for f in under])
        else:
            data["findings"] = ()
    category_rows = stats.category_rows
    categories = (_keyed(_CATEGORY_KEYS, _CATEGORY_PLACES, 5, category_rows) if _keyed is not None else None)
    if categories is None:  # (without the C part, or rows of another shape: the comprehension's own error)
        categories = {name: {"time_us": time_us, "share_of_busy": share, "pct_of_window": pct_of_window, "count": count}
                      for name, time_us, share, pct_of_window, count in category_rows}
    data["categories"] = categories
    data["gpu_busy_ms"] = stats.busy_us / 1000
    data["busy_pct"] = stats.busy_pct
    data["mm_conv_pct"] = stats.mm_conv_pct
    if categories:  # each category's % of the window (the last row of a name, as the dict keeps it)
        attention, communication, memcpy = (categories.get(ATTENTION), categories.get(COMMUNICATION),
                                            categories.get(MEMCPY))
        data["attention_pct"] = attention["pct_of_window"] if attention is not None else 0.0
        data["communication_pct"] = communication["pct_of_window"] if communication is not None else 0.0
        data["memcpy_pct"] = memcpy["pct_of_window"] if memcpy is not None else 0.0
    else:
        data["attention_pct"] = data["communication_pct"] = data["memcpy_pct"] = 0.0
    data["kernel_count"] = stats.kernel_count
    kernel_rows = stats.kernel_rows
    data["top_kernel"] = kernel_rows[0][0] if kernel_rows else None  # WindowStats.top_kernel
    # from the statistics' rows of plain values (see WindowStats), not their objects; in C where built
    top_kernels = _dicts(_KERNEL_KEYS, _KERNEL_PLACES, 6, kernel_rows) if _dicts is not None else None
    if top_kernels is None:
        top_kernels = tuple([{"name": name, "category": category, "count": count, "total_us": total_us,
                              "pct_of_window": pct_of_window}
                             for name, category, count, total_us, _, pct_of_window in kernel_rows])
    data["top_kernels"] = top_kernels
    gap_rows = stats.gap_rows
    idle_gaps = _dicts(_GAP_KEYS, _GAP_PLACES, 3, gap_rows) if _dicts is not None else None
    if idle_gaps is None:
        idle_gaps = tuple([{"device": device, "start_us": start_us, "dur_us": dur_us}
                           for device, start_us, dur_us in gap_rows])
    data["idle_gaps"] = idle_gaps
    devices = stats.devices
    data["devices"] = tuple([device for device, _ in devices])
    data["gpu_busy_us_by_device"] = {physical_id(device): busy_us for device, busy_us in devices}
    data["note"] = _join(profile.note, oom_note) if oom_note else (profile.note or "")
    if profile.processes:
        data["processes"] = process_entries(profile.processes, memory, physical_id)
    data["kernels"] = compact_kernels(stats.kernel_totals)
    return record_from(data)


#: a record's rows of dicts from the statistics' rows: the keys, and which item of a row each one's value is
_CATEGORY_KEYS, _CATEGORY_PLACES = ("time_us", "share_of_busy", "pct_of_window", "count"), (1, 2, 3, 4)
_KERNEL_KEYS, _KERNEL_PLACES = ("name", "category", "count", "total_us", "pct_of_window"), (0, 1, 2, 3, 5)
_GAP_KEYS, _GAP_PLACES = ("device", "start_us", "dur_us"), (0, 1, 2)
try:  # the rows as dicts in C (gates/_record_parts.c, built at install where a C compiler is found)
    from pytest_gpuutil.gates._record_parts import dicts as _dicts, keyed as _keyed
except ImportError:  # pragma: no cover - without a compiler: the comprehensions
    _dicts = _keyed = None


def process_entries(shares: tuple[Any, ...], memory: Optional[TestMemory],
                    physical_id: Callable[[str], str]) -> tuple[dict[str, Any], ...]:
    """The record's ``processes``: each process's part, on physical GPU ids; this process's peak
    is the test's own (the allocator's, from the memory meter)."""
    entries = []
    for share in shares:
        entry = share.to_dict()
        entry["devices"] = [physical_id(str(d)) for d in entry["devices"]]
        if share.parent and memory is not None and memory.devices:
            entry["peak_mb"] = max(d.peak_alloc for d in memory.devices) / MIB
            entry["memory_source"] = "allocator"
        entries.append(entry)
    entries.sort(key=lambda e: (not e["parent"], e["pid"]))
    return tuple(entries)


def memory_fields(memory: Optional[TestMemory], physical_id: Callable[[str], str]) -> dict[str, Any]:
    """The record's memory fields: the largest peaks over devices, leaks and errors summed."""
    if memory is None or not memory.devices:
        return {}
    # one pass over the devices (most runs have one): the peaks' largest, as max() keeps the first of
    # equals; the sums from 0 in the devices' order, as sum() adds
    first = memory.devices[0]
    peak_alloc, peak_reserved = first.peak_alloc, first.peak_reserved
    leaked = alloc_retries = ooms = 0
    by_device = {}
    for d in memory.devices:
        if d.peak_alloc > peak_alloc:
            peak_alloc = d.peak_alloc
        if d.peak_reserved > peak_reserved:
            peak_reserved = d.peak_reserved
        leaked += d.leaked
        alloc_retries += d.alloc_retries
        ooms += d.ooms
        by_device[physical_id(d.device)] = _device_figures(d)
    return {"peak_alloc_mb": peak_alloc / MIB, "peak_reserved_mb": peak_reserved / MIB, "leaked_mb": leaked / MIB,
            "alloc_retries": alloc_retries, "ooms": ooms, "memory_by_device": by_device}


def _device_figures(d: Any) -> dict[str, Any]:
    """One device's entry of ``memory_by_device`` (MiB and counts)."""
    return {"peak_alloc_mb": d.peak_alloc / MIB, "peak_reserved_mb": d.peak_reserved / MIB,
            "leaked_mb": d.leaked / MIB, "alloc_retries": d.alloc_retries, "ooms": d.ooms,
            "allocated_end_mb": d.allocated_end / MIB, "reserved_end_mb": d.reserved_end / MIB}


def memory_note(memory: Optional[TestMemory]) -> str:
    """What was live when a call that ran out of GPU memory ended."""
    if memory is None:
        return ""
    for d in memory.devices:  # (a loop, not any() over a generator: this runs for every record)
        if d.ooms:
            break
    else:
        return ""
    return "; ".join(
        f"out of GPU memory on device {d.device}: {format_size(d.allocated_end)} allocated, "
        f"{format_size(d.reserved_end)} reserved when the call ended (peak {format_size(d.peak_alloc)})"
        for d in memory.devices if d.ooms
    )
