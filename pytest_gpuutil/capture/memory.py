"""GPU memory of one test's call phase, from PyTorch's caching-allocator counters.

Per device: the peak of allocated and of reserved bytes during the call (the peaks are reset when
it starts), allocated bytes at its end minus at its start (what the test left behind), and the
allocator's retries and out-of-memory errors during the call. One read of the counters per device
and call, at its end (``torch._C._cuda_memoryStats``, which builds the whole statistics dict: the
dear part; torch.cuda.memory_stats() also flattens it). At the start the peaks and the accumulated
counts are reset (``_cuda_resetPeakMemoryStats``, ``_cuda_resetAccumulatedMemoryStats``: no dict),
so the end's read alone gives the call's figures: what it left behind is the bytes allocated minus
the bytes freed since the start, its retries and out-of-memory errors are the counts since then.
A torch without the accumulated reset (or an allocator that refuses it) gets a read at each end.
Tests then see ``torch.cuda.memory_stats()``'s accumulated counts (allocations, frees, retries,
out-of-memory errors) from their call's start, as they already saw the peaks.

With ``history=True`` the allocator also records every allocation with its Python stack
(``torch.cuda.memory._record_memory_history``, opt-in: it costs), so a test that misses a memory
limit or runs out of memory can say which live allocations made its peak, and leave a snapshot
that https://pytorch.org/memory_viz opens.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Optional

MIB = 1 << 20
#: allocations kept per device in the history ring buffer
HISTORY_ENTRIES = 100_000


@dataclass(frozen=True)
class DeviceMemory:
    """One device's figures for one call, in bytes."""

    device: str
    peak_alloc: int
    peak_reserved: int
    leaked: int
    alloc_retries: int
    ooms: int
    #: allocated at the end of the call (what was live when it ended, e.g. after an OOM)
    allocated_end: int
    reserved_end: int


@dataclass(frozen=True)
class LiveAllocation:
    """An allocation live at a test's peak: its size and where it was made (innermost frame first)."""

    size: int
    frames: tuple[str, ...]


@dataclass(frozen=True)
class _Start:
    """What the start of a call left for its end: the counters read then, or (``counted``) only the
    devices whose accumulated counts were reset, which then count from zero."""

    allocated: dict[int, int]
    retries: dict[int, int]
    ooms: dict[int, int]
    time_us: float
    counted: frozenset[int] = frozenset()


def _figures(stats: dict[str, Any]) -> tuple[int, int, int, int, int, int, int]:
    """(allocated, peak allocated, reserved, peak reserved, retries, ooms, allocated less freed) from
    the nested stats, each level looked up once (the end of every call reads them)."""
    try:  # torch's stats have every key: indexed straight
        allocated, reserved = stats["allocated_bytes"]["all"], stats["reserved_bytes"]["all"]
        return (allocated["current"], allocated["peak"], reserved["current"], reserved["peak"],
                stats["num_alloc_retries"], stats["num_ooms"], allocated["allocated"] - allocated["freed"])
    except KeyError:
        pass
    allocated = stats.get("allocated_bytes", {}).get("all", {})
    reserved = stats.get("reserved_bytes", {}).get("all", {})
    get = allocated.get
    return (int(get("current", 0)), int(get("peak", 0)), int(reserved.get("current", 0)),
            int(reserved.get("peak", 0)), int(stats.get("num_alloc_retries", 0)), int(stats.get("num_ooms", 0)),
            int(get("allocated", 0)) - int(get("freed", 0)))


#: one read of a call's end: per device, (allocated, peak allocated, reserved, peak reserved, retries,
#: ooms, allocated less freed) as :func:`_figures` gives them
Reads = tuple[tuple[int, tuple[int, int, int, int, int, int, int]], ...]


def figures_of(start: _Start, reads: Reads) -> tuple[DeviceMemory, ...]:
    """Each device's figures for a call, from its start and its end's read (a device CUDA started
    during the call counts from 0; a device never used is left out)."""
    found = []
    for device, (current, peak, reserved, peak_reserved, retries, ooms, net) in reads:
        counted = device in start.counted
        if not counted and device not in start.allocated and peak == 0 and reserved == 0:
            continue  # never used
        made = _new_object(DeviceMemory)  # DeviceMemory(...) without its __init__ (see below)
        _set_attribute(made, "__dict__", {
            "device": str(device), "peak_alloc": peak, "peak_reserved": peak_reserved,
            "leaked": net if counted else current - start.allocated.get(device, 0),
            "alloc_retries": retries - start.retries.get(device, 0), "ooms": ooms - start.ooms.get(device, 0),
            "allocated_end": current, "reserved_end": reserved})
        found.append(made)
    return tuple(found)


#: a frozen dataclass made as its __init__ makes it (its fields in order in its __dict__), without the
#: __init__'s object.__setattr__ per field: DeviceMemory(...) ~13k instructions, this ~2k, and every
#: measured test's record makes one per device
_new_object, _set_attribute = object.__new__, object.__setattr__


class MemoryMeter:
    """Reads the counters of every visible CUDA device around each call phase."""

    def __init__(self, torch: Any, history: bool = False):
        self._torch = torch
        self._stats = getattr(torch._C, "_cuda_memoryStats", None)
        self._reset = getattr(torch._C, "_cuda_resetPeakMemoryStats", None)
        #: reset the accumulated counts at the start instead of reading them (None: read at both ends)
        self._reset_counts = (getattr(torch._C, "_cuda_resetAccumulatedMemoryStats", None)
                              if self._stats is not None and self._reset is not None else None)
        #: the devices once CUDA is up (their number does not change in a process), else None
        self._known: Optional[range] = None
        #: the start every call shares while the accumulated counts are reset and no history is kept
        #: (no read, nothing of the call's own to keep: one object for all of them)
        self._counted_start: Optional[_Start] = None
        self._counted_for: Optional[range] = None
        self.history = False
        if history:
            try:
                torch.cuda.memory._record_memory_history(max_entries=HISTORY_ENTRIES, stacks="python")
                self.history = True
            except Exception:  # noqa: BLE001 - a torch without it: limits still work, without stacks
                self.history = False

    def _devices(self) -> range:
        known = self._known
        if known is not None:
            return known
        cuda = self._torch.cuda
        if not cuda.is_initialized():
            return range(0)
        known = self._known = range(cuda.device_count())
        return known

    def _read(self, device: int) -> dict[str, Any]:
        if self._stats is not None:
            return self._stats(device)
        flat = self._torch.cuda.memory_stats(device)  # older torch: rebuild the two levels used
        nested: dict[str, Any] = {"num_alloc_retries": flat.get("num_alloc_retries", 0), "num_ooms": flat.get("num_ooms", 0)}
        for key in ("allocated_bytes", "reserved_bytes"):
            nested[key] = {"all": {"current": flat.get(f"{key}.all.current", 0), "peak": flat.get(f"{key}.all.peak", 0)}}
        return nested

    def begin(self) -> _Start:
        """At the call's start: reset the peaks and the accumulated counts (or, where that cannot be
        done, note what is allocated); nothing if CUDA is not up yet."""
        reset, reset_counts = self._reset, self._reset_counts
        if reset is not None and reset_counts is not None and not self.history:
            devices = self._known if self._known is not None else self._devices()
            try:
                for device in devices:
                    reset(device)
                    reset_counts(device)
            except Exception:  # noqa: BLE001 - an allocator that refuses a reset: the general way below
                pass
            else:
                start = self._counted_start
                if start is None or self._counted_for != devices:
                    start = self._counted_start = _Start({}, {}, {}, 0.0, frozenset(devices))
                    self._counted_for = devices
                return start
        return self._begin()

    def _begin(self) -> _Start:
        allocated, retries, ooms = {}, {}, {}
        counted = []
        for device in self._devices():
            if self._reset is not None:
                self._reset(device)
            else:
                self._torch.cuda.reset_peak_memory_stats(device)
            if self._reset_counts is not None:
                try:
                    self._reset_counts(device)
                except Exception:  # noqa: BLE001 - an allocator without it (a pluggable one): read instead
                    self._reset_counts = None
                else:
                    counted.append(device)
                    continue
            current, _, _, _, retries[device], ooms[device], _ = _figures(self._read(device))
            allocated[device] = current
        if self.history and (allocated or counted):
            _mark_history(self._torch)
        return _Start(allocated, retries, ooms, time.time_ns() / 1000, frozenset(counted))

    def end(self, start: _Start) -> tuple[DeviceMemory, ...]:
        """At the call's end: each device's figures (a device CUDA started during the call counts from 0)."""
        return figures_of(start, self.read())

    def read(self) -> Reads:
        """At the call's end: one read of each device's counters, as ``(device, counters)`` pairs; what
        they come to (:func:`figures_of`) is worked out later, outside the test, when a record asks."""
        devices = self._known if self._known is not None else self._devices()
        read = self._stats if self._stats is not None else self._read
        reads = []
        for device in devices:
            reads.append((device, _figures(read(device))))
        return tuple(reads)

    def where_memory_went(self, start: _Start, device: int = 0, top: int = 5, with_failed: bool = True
                          ) -> tuple[tuple[LiveAllocation, ...], tuple[LiveAllocation, ...]]:
        """From one read of the history: the ``top`` largest allocations live at the call's peak on
        ``device`` and (``with_failed``) the call's allocations that ran out of memory; empty without it."""
        if not self.history:
            return (), ()
        traces = self._torch.cuda.memory._snapshot().get("device_traces", [])
        events = traces[device] if device < len(traces) else []
        return largest_at_peak(events, start.time_us, top), failed_allocations(events, start.time_us) if with_failed else ()

    def dump_snapshot(self, path: str) -> None:
        """The allocator's history as PyTorch's memory viz reads it (a pickle)."""
        self._torch.cuda.memory._dump_snapshot(path)


def _mark_history(torch: Any) -> None:
    """A tiny allocation made here: the start of a call in histories whose entries carry no time."""
    marker = torch.empty(1, device="cuda")
    del marker


def _is_mark(event: dict[str, Any]) -> bool:
    return event.get("action") == "alloc" and any(
        str(f.get("filename", "")).endswith(("capture/memory.py", "capture\\memory.py")) and f.get("name") == "_mark_history"
        for f in event.get("frames", ()))


def _since(events: list[dict[str, Any]], since_us: float) -> list[dict[str, Any]]:
    """The history entries of the call: from ``since_us`` where entries carry ``time_us``, else
    after the last allocation made by ``_mark_history``."""
    if events and "time_us" not in events[-1]:
        marks = [i for i, event in enumerate(events) if _is_mark(event)]
        return events[marks[-1] + 1:] if marks else events
    return [event for event in events if event.get("time_us", since_us) >= since_us]


def _frames(event: dict[str, Any]) -> tuple[str, ...]:
    return tuple(f"{f.get('filename')}:{f.get('line')} ({f.get('name')})" for f in event.get("frames", ()))


def failed_allocations(events: list[dict[str, Any]], since_us: float) -> tuple[LiveAllocation, ...]:
    """The allocations of the call that ran out of memory (``oom`` entries): size asked and where."""
    return tuple(LiveAllocation(int(e.get("size", 0)), _frames(e)) for e in _since(events, since_us)
                 if e.get("action") == "oom")


def largest_at_peak(events: list[dict[str, Any]], since_us: float, top: int = 5) -> tuple[LiveAllocation, ...]:
    """Replay alloc/free events from the call's start: the ``top`` largest allocations live at the peak.

    The start is ``since_us`` where entries carry ``time_us``, else the last allocation made by
    ``_mark_history``. Allocations made before it and still live are not known to the replay; the
    peak is the highest total of what the call itself allocated.
    """
    live: dict[int, tuple[int, tuple[str, ...]]] = {}
    total = best_total = 0
    best: dict[int, tuple[int, tuple[str, ...]]] = {}
    for event in _since(events, since_us):
        action, addr, size = event.get("action"), event.get("addr"), int(event.get("size", 0))
        if action == "alloc":
            live[addr] = (size, _frames(event))
            total += size
            if total > best_total:
                best_total, best = total, dict(live)
        elif action in ("free_requested", "free_completed") and addr in live:  # whichever comes first
            total -= live.pop(addr)[0]
    ranked = sorted(best.values(), key=lambda item: -item[0])[:top]
    return tuple(LiveAllocation(size, frames) for size, frames in ranked)


def format_size(n_bytes: float) -> str:
    """``1.0 GiB``, ``256.0 MiB``, ``512 B``."""
    value = float(n_bytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"  # pragma: no cover


_UNITS = {"b": 1, "kb": 1 << 10, "kib": 1 << 10, "mb": 1 << 20, "mib": 1 << 20, "gb": 1 << 30, "gib": 1 << 30,
          "tb": 1 << 40, "tib": 1 << 40}


def parse_size(text: Any) -> int:
    """Bytes from ``"2 GiB"``, ``"256MB"``, ``"0 B"`` or a number of bytes; ValueError otherwise.

    As in pytest-memray, KB/MB/GB are powers of 1024, the same as KiB/MiB/GiB.
    """
    if isinstance(text, bool):
        raise ValueError(f"expected a size such as '2 GiB', got {text!r}")
    if isinstance(text, (int, float)):
        number, unit = float(text), "b"
    else:
        raw = str(text).strip().replace(" ", "")
        split = len(raw) - len(raw.lstrip("+-0123456789.eE"))
        number_text, unit = raw[:split], raw[split:].lower() or "b"
        try:
            number = float(number_text)
        except ValueError:
            raise ValueError(f"expected a size such as '2 GiB', got {text!r}") from None
    if unit not in _UNITS:
        raise ValueError(f"unknown unit in {text!r} (B, KB, MB, GB, KiB, MiB, GiB)")
    if not number >= 0 or number == float("inf"):
        raise ValueError(f"a size must be a non-negative number, got {text!r}")
    return int(round(number * _UNITS[unit]))
