"""The in-memory form of a trace: GPU work intervals and the window they are measured over.

Times are integer nanoseconds on the trace's own clock, so fractional microseconds survive
exactly (Kineto writes µs with three decimals) and interval arithmetic has no rounding.
"""
from __future__ import annotations

import functools
import sys
from collections.abc import Sequence

from pytest_gpuutil.frozen import frozen, tuple_record

TYPE_CHECKING = False  # typing's, without importing typing at run time (gpuutil analyze's start-up)
if TYPE_CHECKING:
    from typing import Any, Iterable, Iterator, Optional

#: Trace categories that are GPU work. ``gpu_user_annotation`` is not: it is a label.
GPU_WORK_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})

#: Trace categories that may hold a host wait for the GPU: the CUDA runtime's and driver's calls
#: (torch.profiler records them with CUDA activity) and Kineto's ``cuda_sync`` events (CUPTI's
#: synchronization records, with ``enable_cuda_sync_events``).
SYNC_CATEGORIES = frozenset({"cuda_runtime", "cuda_driver", "cuda_sync"})

#: The calls and records in which the host waits for the GPU, by the name each source gives them,
#: and what the host waited for. Asynchronous calls (``cudaMemcpyAsync``, ``cudaStreamWaitEvent``,
#: Kineto's "Stream Wait Event": the GPU waits, not the host) are not here; ``.item()`` and
#: ``.cpu()`` show as a ``cudaMemcpyAsync`` followed by the ``cudaStreamSynchronize`` that is.
#: The live capture names CUPTI's records as Kineto does ("Stream Sync", ...). The C reader
#: (``_scan.c``) holds the same names; a test checks the two lists agree.
HOST_SYNC_NAMES = {
    "cudaDeviceSynchronize": "device",
    "cudaStreamSynchronize": "stream",
    "cudaEventSynchronize": "event",
    "cudaMemcpy": "memcpy",
    "cudaMemcpy2D": "memcpy",
    "cudaMemcpy3D": "memcpy",
    "cudaMemcpyToSymbol": "memcpy",
    "cudaMemcpyFromSymbol": "memcpy",
    "cuCtxSynchronize": "device",
    "cuStreamSynchronize": "stream",
    "cuEventSynchronize": "event",
    "cuMemcpy": "memcpy",
    "cuMemcpyDtoH": "memcpy",
    "cuMemcpyDtoH_v2": "memcpy",
    "cuMemcpyHtoD": "memcpy",
    "cuMemcpyHtoD_v2": "memcpy",
    "Context Sync": "device",
    "Stream Sync": "stream",
    "Event Sync": "event",
}

#: Up to this many GPU events, a process that has not loaded numpy reads and analyses a trace in
#: plain Python lists: importing numpy (about 70 ms) costs more than numpy saves below it (plain
#: Python takes about 1 µs per event, numpy about 0.3; measured on the 40,100-event trace of
#: benchmarks/data, where plain Python is 25 ms faster as a whole process and 5 MB smaller).
PLAIN_PYTHON_EVENTS = 75_000


def use_plain_python(count: int) -> bool:
    """True when ``count`` events are best kept in plain lists (numpy not loaded, few events)."""
    return count <= PLAIN_PYTHON_EVENTS and "numpy" not in sys.modules


@tuple_record
class GpuEvent:
    """One piece of GPU work: a kernel, a memcpy or a memset (a tuple: traces hold 100k+ of them)."""

    name: str
    kind: str  # "kernel" | "gpu_memcpy" | "gpu_memset"
    device: str
    stream: str
    start_ns: int
    dur_ns: int

    @property
    def end_ns(self) -> int:
        return self.start_ns + self.dur_ns


@frozen
class Window:
    """The span busy time is divided by, with where it came from."""

    start_ns: int
    end_ns: int
    #: "profiler" (the trace's own "PyTorch Profiler" span), "gpu_span" (first GPU start to
    #: last GPU end), "test_call" (the test's call phase), "explicit" (given by the caller),
    #: or "none" (no GPU work and no profiler span)
    source: str

    @property
    def duration_ns(self) -> int:
        return max(0, self.end_ns - self.start_ns)


class CodedColumn(Sequence):
    """A column kept as codes into a table of values: row ``i`` is ``values[codes[i]]``.

    A big trace has 100k events but a handful of kernel names, devices and streams; the reader
    builds these, and the analysis reads the codes instead of hashing every row again. Columns
    that share one ``codes`` list describe the same key (for example kind and name together).
    """

    __slots__ = ("codes", "values")

    def __init__(self, codes: Sequence[int], values: Sequence[Any]):
        self.codes = codes
        self.values = values

    def __len__(self) -> int:
        return len(self.codes)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self.values[code] for code in self.codes[index]]
        return self.values[self.codes[index]]

    def __iter__(self) -> Iterator[Any]:
        return map(self.values.__getitem__, self.codes)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"CodedColumn({len(self.codes)} rows, {len(self.values)} values)"


@frozen
class GpuColumns:
    """GPU events column by column (what the analysis reads; cheap to build from a big trace)."""

    #: plain sequences or :class:`CodedColumn`
    names: Sequence[str] = ()
    kinds: Sequence[str] = ()
    #: device and stream ids as the source gives them (ints or text); shown as text
    devices: Sequence[Any] = ()
    streams: Sequence[Any] = ()
    #: integer nanoseconds: lists of ints, or int64 arrays (what the file reader gives)
    starts_ns: Sequence[int] = ()
    durs_ns: Sequence[int] = ()

    def __len__(self) -> int:
        return len(self.starts_ns)

    def take(self, indices: Sequence[int]) -> "GpuColumns":
        """The events at ``indices`` (coded columns stay coded and keep sharing their codes)."""
        array = indices if hasattr(indices, "dtype") else None  # numpy indices: numpy columns take them as they are
        plain: list[list[int]] = []  # the indices as a list, made only for a column that is one

        def rows() -> list[int]:
            if not plain:
                plain.append(list(indices.tolist() if array is not None else indices))
            return plain[0]

        shared: dict[int, Any] = {}

        def pick(column: Sequence[Any]) -> Sequence[Any]:
            if isinstance(column, CodedColumn):
                codes = shared.get(id(column.codes))
                if codes is None:
                    source = column.codes
                    codes = shared[id(source)] = (source.take(rows() if array is None else array) if hasattr(source, "take")
                                                  else [source[i] for i in rows()])
                return CodedColumn(codes, column.values)
            if hasattr(column, "take"):  # numpy arrays
                return column.take(rows() if array is None else array)
            return [column[i] for i in rows()]

        return GpuColumns(pick(self.names), pick(self.kinds), pick(self.devices), pick(self.streams),
                          pick(self.starts_ns), pick(self.durs_ns))

    @classmethod
    def coded(cls, key_codes: Sequence[int], names: Sequence[str], kinds: Sequence[str], place_codes: Sequence[int],
              devices: Sequence[Any], streams: Sequence[Any], starts_ns: Sequence[int],
              durs_ns: Sequence[int]) -> "GpuColumns":
        """Columns from a code per event into the distinct (name, kind) keys and (device, stream)
        places, as the file readers find them (the columns of one key share their codes)."""
        return cls(CodedColumn(key_codes, names), CodedColumn(key_codes, kinds), CodedColumn(place_codes, devices),
                   CodedColumn(place_codes, streams), starts_ns, durs_ns)

    @classmethod
    def from_events(cls, events: Iterable[GpuEvent]) -> "GpuColumns":
        rows = list(events)
        if not rows:
            return cls()
        names, kinds, devices, streams, starts, durs = (list(col) for col in zip(*rows))
        return cls(names, kinds, devices, streams, starts, durs)


@frozen
class SyncColumns:
    """Host waits for the GPU (calls or records named in :data:`HOST_SYNC_NAMES`), column by column.

    Times are the host's: when the wait began and how long it took, in ns on the clock of the GPU
    events they come with.
    """

    names: Sequence[str] = ()
    starts_ns: Sequence[int] = ()
    durs_ns: Sequence[int] = ()

    def __len__(self) -> int:
        return len(self.starts_ns)

    def take(self, indices: Sequence[int]) -> "SyncColumns":
        """The waits at ``indices``."""
        rows = list(indices.tolist() if hasattr(indices, "tolist") else indices)
        return SyncColumns([self.names[i] for i in rows], [int(self.starts_ns[i]) for i in rows],
                           [int(self.durs_ns[i]) for i in rows])

    def rows(self) -> list[tuple[str, int, int]]:
        """(name, start ns, duration ns) per wait, as plain Python values."""
        return list(zip(self.names, _python_ints(self.starts_ns), _python_ints(self.durs_ns)))


@frozen
class Trace:
    """GPU events of one trace plus what the window needs."""

    path: str
    columns: GpuColumns = GpuColumns()
    #: the profiler's own span (cat "Trace"), if the trace has one
    profiler_span: Optional[tuple[int, int]] = None
    #: the trace's ``baseTimeNanoseconds`` (0 when absent); event times are relative to it
    base_time_ns: int = 0
    #: the host's waits for the GPU that the trace recorded (see :data:`HOST_SYNC_NAMES`)
    syncs: SyncColumns = SyncColumns()

    @classmethod
    def from_events(cls, path: str, events: Iterable[GpuEvent], profiler_span: Optional[tuple[int, int]] = None,
                    base_time_ns: int = 0, syncs: SyncColumns = SyncColumns()) -> "Trace":
        return cls(path, GpuColumns.from_events(events), profiler_span, base_time_ns, syncs)

    @functools.cached_property
    def events(self) -> tuple[GpuEvent, ...]:
        """The events as tuples (built on first use)."""
        c = self.columns
        starts, durs = _python_ints(c.starts_ns), _python_ints(c.durs_ns)
        return tuple(map(GpuEvent, c.names, c.kinds, map(str, c.devices), map(str, c.streams), starts, durs))


def _python_ints(values: Sequence[int]) -> Sequence[int]:
    """Plain ints from a list or an int64 array (whose items would be numpy scalars)."""
    to_list = getattr(values, "tolist", None)
    return to_list() if to_list is not None else values
