"""Per-test records: what the plugin measures for one test, and how it is written to JSON/CSV."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from itertools import chain, compress
from operator import attrgetter, mul
from typing import Any, Callable, Mapping, Optional, Sequence

#: The hardware-counter fields (percent of the hardware's peak; the call's energy and mean power).
HARDWARE_FIELDS = ("sm_pct", "tensor_pct", "dram_bw_pct", "occupancy_pct", "fp16_pct", "fp32_pct", "fp64_pct",
                   "energy_j", "avg_power_w")
#: The TestRecord fields that hold a measured number (None when nothing was measured).
NUMERIC_FIELDS = (
    "wall_ms",
    "gpu_busy_ms",
    "busy_pct",
    "mm_conv_pct",
    "attention_pct",
    "communication_pct",
    "memcpy_pct",
    "kernel_count",
    "measure_ms",
    "peak_alloc_mb",
    "peak_reserved_mb",
    "leaked_mb",
    "alloc_retries",
    "ooms",
    *HARDWARE_FIELDS,
)
#: The TestRecord fields that hold a mapping.
MAPPING_FIELDS = ("gpu_busy_us_by_device", "categories", "kernel_bench", "gpu_trace", "memory_by_device",
                  "counter_sums")
#: The TestRecord fields that hold a sequence of mappings (not in the CSV).
LIST_FIELDS = ("top_kernels", "idle_gaps", "processes", "below_floor")
#: Columns of gpu_util.csv, in order. Every TestRecord field that is a scalar (``findings``: the rule
#: ids, space-separated; the hardware counters come last, so the older columns keep their places).
CSV_COLUMNS = ("test", "outcome", *(f for f in NUMERIC_FIELDS if f not in HARDWARE_FIELDS), "top_kernel", "devices",
               "worker", "findings", *HARDWARE_FIELDS, "counters_source", "counters_note")


@dataclass(frozen=True)
class TestRecord:
    """What --gpu-util measured for one test (GPU fields are None when nothing was measured)."""

    __test__ = False  # not a pytest test class

    test: str
    outcome: str
    wall_ms: float | None = None
    gpu_busy_ms: float | None = None
    busy_pct: float | None = None
    mm_conv_pct: float | None = None
    attention_pct: float | None = None
    communication_pct: float | None = None
    memcpy_pct: float | None = None
    kernel_count: int | None = None
    #: what measuring this test cost the run (window bookkeeping, its share of a flush, its record)
    measure_ms: float | None = None
    #: GPU memory of the call phase in MiB (2**20 bytes), the largest over devices; None: not measured
    peak_alloc_mb: float | None = None
    peak_reserved_mb: float | None = None
    #: allocated at the end of the call minus at its start, summed over devices
    leaked_mb: float | None = None
    #: the caching allocator's retries (a full cache freed and tried again) and out-of-memory errors
    alloc_retries: int | None = None
    ooms: int | None = None
    top_kernel: str | None = None
    #: the kernels with the most GPU time in the call, most first (at most 5): {"name", "category",
    #: "count", "total_us", "pct_of_window"}
    top_kernels: tuple[Mapping[str, Any], ...] = ()
    #: the longest stretches with no GPU work, longest first (at most 3): {"device", "start_us"
    #: (from the call's start), "dur_us"}
    idle_gaps: tuple[Mapping[str, Any], ...] = ()
    #: device ids that did GPU work, as they appear in the trace (``"0"``, ``"1"``)
    devices: tuple[str, ...] = ()
    #: xdist worker id ("gw0") or "" in a single-process run
    worker: str = ""
    #: in a run merged from shards on different machines (``gpuutil merge``): the label of the machine that ran
    #: this test, a key of the run document's ``machines``; "" when the run's ``machine_info`` describes it
    machine: str = ""
    #: busy microseconds per physical GPU (key: physical GPU id as a string)
    gpu_busy_us_by_device: Mapping[str, float] = field(default_factory=dict)
    #: window-relative category shares, e.g. {"gemm": 42.1}
    categories: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    #: results of the kernel_bench fixture in this test: label -> TimingResult.to_dict()
    kernel_bench: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    #: results of the gpu_trace fixture in this test: label -> summary dict
    gpu_trace: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    #: the same per physical GPU: {"0": {"peak_alloc_mb": ..., "peak_reserved_mb": ..., "leaked_mb": ...,
    #: "alloc_retries": ..., "ooms": ..., "allocated_end_mb": ..., "reserved_end_mb": ...}}
    memory_by_device: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    #: why GPU fields are empty ("no CUDA device", "profiler already active", ...), else ""
    note: str = ""
    #: what to fix, one per rule that fired: {"rule", "severity", "message", "fix", "impact_pct",
    #: "evidence"} (see pytest_gpuutil.analysis.finding_records.Finding); None: findings were not looked for
    #: (turned off, not measured, or a file written before findings existed)
    findings: Optional[tuple[Mapping[str, Any], ...]] = None
    #: the findings whose saving is below the run's floor (--gpu-util-findings-floor): not reported,
    #: kept here with their figures (the same shape as ``findings``)
    below_floor: tuple[Mapping[str, Any], ...] = ()

    @property
    def finding_rules(self) -> tuple[str, ...]:
        """The ids of the rules that fired (empty when none did or findings were not looked for)."""
        return tuple(str(f.get("rule", "")) for f in self.findings or ())

    #: hardware counters over the call (None: not measured, ``counters_note`` says why): percent of
    #: the hardware's peak of SM cycles active, tensor pipes active, DRAM bandwidth, warps resident
    #: (occupancy) and the FP16/FP32/FP64 pipes, where the source has them
    sm_pct: float | None = None
    tensor_pct: float | None = None
    dram_bw_pct: float | None = None
    occupancy_pct: float | None = None
    fp16_pct: float | None = None
    fp32_pct: float | None = None
    fp64_pct: float | None = None
    #: the GPU's energy over the call (NVML's energy counter, spread over time) and its mean power
    energy_j: float | None = None
    avg_power_w: float | None = None
    #: where they came from: "cupti_pm_sampling", "nvml_gpm", "nvml_utilization" (energy only), "" (none)
    counters_source: str = ""
    #: why they are empty ("too short for the hardware counters", ...) or a remark ("another process ..."), else ""
    counters_note: str = ""
    #: additive sums for per-file and session figures, short tests included: {metric: [ms covered,
    #: sum of ms x value]}, {"energy_j": [ms covered, joules]} (see analysis/counters.py)
    counter_sums: Mapping[str, Any] = field(default_factory=dict)
    #: when the test's child processes took part (GPU work, or something to say): one entry per
    #: process, this one first: {"pid", "program", "rank", "devices" (physical GPU ids), "gpu_ms",
    #: "peak_mb", "memory_source" ("allocator" | "nvml" | ""), "note", "parent" (True for the pytest
    #: process), "measured_by" ("python" | "injection" | ""), "startup_ms", "overlap" ("overlapped on
    #: GPU 0 with pid 12 (...)": its GPU ms include slices the GPU gave the others, so rows are never
    #: added; the test's gpu_busy_ms is their union), "share_ms" (its share of gpu_busy_ms: time k
    #: processes shared counts 1/k to each, so the shares add up to it)}; empty otherwise
    processes: tuple[Mapping[str, Any], ...] = ()
    #: the call's kernels, copies and memsets with their count and total µs, most time first (short
    #: names; those that make 99 % of the time, at most 16, then one "(other kernels)" row: see
    #: gates/kernel_families.compact_kernels); in the files one line each, ``"COUNT TOTAL_US NAME"``
    #: (what a gate's explanation compares: gates/explain.py)
    kernels: tuple[tuple[str, int, float], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict (shallow copies: records are never changed after they are made)."""
        data = dict(self.__dict__)  # the fields in their order (a frozen dataclass without slots holds only them)
        data["devices"] = list(self.devices)
        data["kernels"] = [kernel_text(k) for k in self.kernels]
        for name in MAPPING_FIELDS:
            data[name] = {k: _copy(v) for k, v in data[name].items()}
        for name in LIST_FIELDS:
            data[name] = [dict(item) for item in data[name]]
        if self.findings is not None:
            data["findings"] = findings_json(self.findings)
        return data

    def json_dict(self) -> dict[str, Any]:
        """What :meth:`to_dict` gives, for encoding to JSON at once (the run's spool): the record's own
        dicts and tuples shared, not copied; copied only where JSON would tell them apart (a mapping
        that is not a dict)."""
        data = dict(self.__dict__)
        data["kernels"] = list(map(kernel_text, self.kernels))
        for name in MAPPING_FIELDS:
            mapping = data[name]
            if type(mapping) is dict:  # loops, not all(generator): most of these are empty or small
                for value in mapping.values():
                    if type(value) not in _JSON_AS_IS and isinstance(value, Mapping):
                        break
                else:
                    continue
            data[name] = {k: _copy(v) for k, v in mapping.items()}
        for name in LIST_FIELDS:
            for item in data[name]:
                if type(item) is not dict:
                    data[name] = [dict(item) for item in data[name]]
                    break
        if self.findings is not None:
            data["findings"] = findings_json(self.findings)
        return data

    def findings_part(self) -> dict[str, Any]:
        """The part of :meth:`to_dict` that ``findings_summary`` reads (test, findings, below_floor),
        without copying the rest of the record (the session's end reads it for every test)."""
        return {"test": self.test, "findings": self.findings, "below_floor": self.below_floor}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "TestRecord":
        names = _DEFAULTS if cls is TestRecord else {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in names}
        if "devices" in kwargs:
            kwargs["devices"] = tuple(str(d) for d in kwargs["devices"] or ())
        for name in LIST_FIELDS:
            if name in kwargs:
                kwargs[name] = tuple(dict(item) for item in kwargs[name] or () if isinstance(item, Mapping))
        if "kernels" in kwargs:
            kwargs["kernels"] = tuple(filter(None, (kernel_row(k) for k in kwargs["kernels"] or ())))
        if "findings" in kwargs:
            found = kwargs["findings"]
            kwargs["findings"] = (tuple(dict(item) for item in found if isinstance(item, Mapping))
                                  if isinstance(found, (list, tuple)) else None)
        if cls is not TestRecord or "test" not in kwargs or "outcome" not in kwargs:
            return cls(**kwargs)  # (without a test or an outcome: its TypeError)
        data = record_fields(kwargs.pop("test"), kwargs.pop("outcome"))
        data.update(kwargs)
        return record_from(data)

    def csv_row(self) -> dict[str, Any]:
        row = {name: getattr(self, name) for name in CSV_COLUMNS if name != "findings"}
        row["devices"] = " ".join(self.devices)
        row["findings"] = " ".join(self.finding_rules)
        return row


#: every TestRecord field after ``test`` and ``outcome`` with its default, in the fields' order (the
#: fields made by a factory: a new dict each record)
_DEFAULTS = {f.name: (f.default if f.default is not dataclasses.MISSING else None)
             for f in dataclasses.fields(TestRecord)}
_NEW_DICTS = tuple(f.name for f in dataclasses.fields(TestRecord) if f.default_factory is dict)


def new_record(test: str, outcome: str, **fields: Any) -> TestRecord:
    """``TestRecord(test, outcome, **fields)``, the same record (its fields in their order, each factory's
    dict new), without the frozen dataclass's ``__init__`` (one ``object.__setattr__`` per field, ~45
    of them: more than the rest of building a record, and records are built for every test)."""
    data = record_fields(test, outcome)
    data.update(fields)
    return record_from(data)


def record_fields(test: str, outcome: str) -> dict[str, Any]:
    """A new record's fields, each at its default (a factory's dict new), for :func:`record_from`;
    filled in one by one, they need no keyword arguments (a call with ~40 of them costs as much as the
    record's __init__)."""
    data = _DEFAULTS.copy()
    for name in _NEW_DICTS:
        data[name] = {}
    data["test"], data["outcome"] = test, outcome
    return data


def unfilled_fields() -> dict[str, Any]:
    """A record's fields at their defaults but the six made by a factory, None here: for records that
    fill those with new dicts of their own (a flush's records share the rest; see record_builder)."""
    return _DEFAULTS.copy()


def record_from(data: dict[str, Any]) -> TestRecord:
    """The TestRecord of the fields :func:`record_fields` gave (and filled in); it keeps ``data``."""
    if len(data) != len(_DEFAULTS):
        unknown = sorted(set(data) - set(_DEFAULTS))
        raise TypeError(f"TestRecord has no field {unknown[0]!r}")
    record = object.__new__(TestRecord)
    object.__setattr__(record, "__dict__", data)
    return record


def kernel_text(row: Sequence[Any]) -> str:
    """A ``kernels`` row as the files keep it, one short line: ``"COUNT TOTAL_US NAME"``."""
    name, count, total_us = row
    return f"{int(count)} {float(total_us):g} {name}"


def kernel_row(value: Any) -> Optional[tuple[str, int, float]]:
    """A ``kernels`` row from its text (or a ``[name, count, total_us]`` list); None when it is neither."""
    try:
        if isinstance(value, str):
            count, total_us, name = value.split(" ", 2)
            return name, int(count), float(total_us)
        if isinstance(value, (list, tuple)) and len(value) == 3:
            return str(value[0]), int(value[1]), float(value[2])
    except (TypeError, ValueError):
        pass
    return None


#: value types that :meth:`TestRecord.json_dict` shares as they are (JSON says them as to_dict's copies)
_JSON_AS_IS = frozenset({dict, float, int, str, bool, type(None), list, tuple})


def findings_json(findings: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A record's findings as its JSON has them: each a new dict, its evidence a dict of its own."""
    return [{**f, "evidence": dict(f.get("evidence") or {})} for f in findings]


def json_dicts(records: Sequence[TestRecord], check: Optional[Callable[..., Optional[bool]]] = None
               ) -> list[dict[str, Any]]:
    """Each record's :meth:`~TestRecord.json_dict`, a batch at a time (the run's spool: a flush's
    records), for an encoder that refuses every type it does not know (an ``enc_hook`` that raises):
    the mapping fields are shared as they are, not looked into, so a mapping that json_dict would
    copy (one that is not a dict) reaches the hook, and the caller then encodes that record's
    json_dict. Whether a list field holds an item that is not a dict is asked of the batch's columns
    at once (then each record's json_dict); each kernels row's text is made once a batch (a suite's
    tests repeat their kernels; a row that is not hashable: each record's json_dict). ``check``: the
    list fields' check in C, ``check(records, TestRecord, LIST_FIELDS)`` (gates/_record_parts.c: True,
    False, or None where it leaves the answer to the Python)."""
    said = check(records, TestRecord, LIST_FIELDS) if check is not None else None
    try:
        plain = _dict_items_only(records) if said is None else said
    except TypeError:  # a field json_dict cannot read either: its own error
        plain = False
    if plain:
        texts = _KernelTexts()
        text = texts.__getitem__
        out = []
        try:
            for record in records:
                data = record.__dict__.copy()
                data["kernels"] = list(map(text, data["kernels"]))
                found = data["findings"]
                if found:
                    data["findings"] = findings_json(found)
                out.append(data)
            return out
        except TypeError:  # a kernels row that is not hashable (a list): json_dict's own text
            pass
    return [r.json_dict() for r in records]


class _KernelTexts(dict):
    """A kernels row's :func:`kernel_text`, by row (equal rows: the same text), made when first asked."""

    def __missing__(self, row: tuple[str, int, float]) -> str:
        text = self[row] = kernel_text(row)
        return text


_DICT_ONLY = frozenset({dict})


def _dict_items_only(records: Sequence[TestRecord]) -> bool:
    """Whether each record is a TestRecord's own fields and every item of its list fields a dict."""
    if set(map(type, records)) - {TestRecord}:
        return False
    for name in LIST_FIELDS:
        if not set(map(type, chain.from_iterable(map(attrgetter(name), records)))) <= _DICT_ONLY:
            return False
    return True


def _copy(value: Any) -> Any:
    """A mapping value as a new dict (plain dicts take the fast path; an ABC check is slower)."""
    if type(value) is dict or isinstance(value, Mapping):
        return dict(value)
    return value


def gpu_totals(records: Sequence[TestRecord]) -> dict[str, Any]:
    """A run's GPU figures from its records alone: tests, tests profiled and with GPU work, GPU
    time, and busy % over the profiled calls (each call's wall time x the devices it used). Read a
    column at a time; each sum adds the same values in the same order as a loop over the records."""
    measured = measured_records(records)
    busy = list(map(attrgetter("gpu_busy_ms"), measured))
    walls = list(map(attrgetter("wall_ms"), measured))
    gpu_ms = sum_or_zero(busy)
    profiled_wall_ms = sum_or_zero(walls)
    # each call's wall time x the devices it used (at least one), added in the records' order
    counts = list(map(len, map(attrgetter("devices"), measured)))
    if 0 in counts:  # max(1, n)
        counts = [n or 1 for n in counts]
    capacity_ms = sum(map(mul, walls if set(map(type, walls)) <= _FLOATS else [w or 0.0 for w in walls], counts))
    return {
        "tests": len(records),
        "profiled": len(measured),
        "with_gpu_work": sum(1 for count, gpu in zip(map(attrgetter("kernel_count"), measured), busy) if count or gpu),
        "gpu_busy_ms": gpu_ms,
        "profiled_wall_ms": profiled_wall_ms,
        "busy_pct": 100.0 * gpu_ms / capacity_ms if capacity_ms > 0 else 0.0,
        **child_process_counts(measured),
    }


def measured_records(records: Sequence[TestRecord]) -> list[TestRecord]:
    """The records with GPU figures (``gpu_busy_ms`` not None), in their order."""
    busy = list(map(attrgetter("gpu_busy_ms"), records))
    if _NONE not in set(map(type, busy)):
        return list(records)
    return [r for r, value in zip(records, busy) if value is not None]


def sum_or_zero(values: Sequence[Any]) -> Any:
    """``sum(v or 0.0 for v in values)``, summed as they are where all are floats (a zero's sign
    cannot change a sum that starts at 0)."""
    if set(map(type, values)) <= _FLOATS:
        return sum(values)
    return sum(v or 0.0 for v in values)


_NONE, _FLOATS = type(None), frozenset({float})


def child_process_counts(measured: Sequence[TestRecord]) -> dict[str, int]:
    """Where the GPU work of measured tests was when they started processes (the totals' counts).

    ``with_gpu_work_only_in_children``: GPU work, none of it in the pytest process;
    ``child_work_not_measured``: children took part (used the GPU, or could not be measured) but
    no GPU work was measured: such a test is never called GPU-free.
    """
    with_processes = compress(measured, map(attrgetter("processes"), measured))  # most tests start none
    with_children = [r for r in with_processes if any(not p.get("parent") for p in r.processes)]
    return {
        "with_child_processes": len(with_children),
        "with_gpu_work_only_in_children": sum(
            1 for r in with_children
            if (r.kernel_count or r.gpu_busy_ms) and not any(p.get("parent") and p.get("gpu_ms") for p in r.processes)),
        "child_work_not_measured": sum(1 for r in with_children if not (r.kernel_count or r.gpu_busy_ms)),
    }
