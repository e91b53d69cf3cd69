"""The binary chunks a measured child hands to the parent through the spool (not JSON).

A child appends chunks to its own file; the parent reads whatever complete chunks are there at
each flush, so a child killed in the middle of a write loses only its last, partial chunk. Every
chunk is ``magic (4) | type (u8) | version (u8) | reserved (u16) | payload length (u32)`` and the
payload; all numbers little-endian.

- ``HEADER`` (first): pid, ppid, the process's start time in clock ticks (``/proc/<pid>/stat``,
  so a reused pid is told apart), when the capture began and what starting it cost, the clock
  its times are on, how it is measured (Python bootstrap or injection library), and texts:
  program, command line, ``RANK``, ``LOCAL_RANK``, ``CUDA_VISIBLE_DEVICES``, the libcupti used.
- ``EVENTS``: the work up to ``covered_ns`` (everything that completed before it is in this or an
  earlier chunk), as columns: a table of (kind, name) pairs, then start/end ns, device, stream and
  a code into the table per event. Each chunk carries its own table, so chunks stand alone.
- ``MEMORY``: the allocator's peaks per device (a torch child reports them at exit).
- ``NOTE``: something the parent should say (the capture could not start, stepped aside).
- ``END`` (last): the process ended normally, handed its measuring on (a nested pytest run), or
  was ended by SIGTERM after handing over (its handler re-raises the signal after this chunk).

The C injection library (``inject.c``) writes the same layout.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence, Union

import numpy as np

from pytest_gpuutil.traces.model import CodedColumn, GpuColumns

MAGIC = b"GPUc"
VERSION = 1
HEADER, EVENTS, MEMORY, NOTE, END = 1, 2, 3, 4, 5
_CHUNK = struct.Struct("<4sBBHI")
CHUNK_HEAD = _CHUNK.size

#: clocks a child's times can be on (CUPTI's default is the wall clock)
REALTIME, MONOTONIC = 0, 1
CLOCK_NAMES = {REALTIME: "realtime", MONOTONIC: "monotonic"}
#: how a child is measured
PYTHON, INJECTION, SYNTHETIC = 0, 1, 2
CAPTURE_NAMES = {PYTHON: "python", INJECTION: "injection", SYNTHETIC: "synthetic"}
#: header flags
FORKED = 1
#: why a process's last chunk was written
EXITED, NESTED, STOPPED, TERMINATED = 0, 1, 2, 3
END_NAMES = {EXITED: "exited", NESTED: "measured by its own pytest --gpu-util run", STOPPED: "stopped measuring",
             TERMINATED: "ended by SIGTERM after handing over"}

KINDS = ("kernel", "gpu_memcpy", "gpu_memset")
_KIND_CODE = {kind: i for i, kind in enumerate(KINDS)}

_HEADER = struct.Struct("<IIQqqBBH")
_EVENTS = struct.Struct("<qIIQ")
_DEVICE_MEMORY = struct.Struct("<IQQ")
_END = struct.Struct("<qB")
_NOTE = struct.Struct("<q")
_TEXT = struct.Struct("<H")
_NAME = struct.Struct("<BH")
TEXT_LIMIT = 4000


class SpoolFormatError(ValueError):
    """A chunk that is not in this format (the message says where and what)."""


@dataclass(frozen=True)
class Header:
    pid: int
    ppid: int
    #: the process's start in clock ticks since boot (``/proc/<pid>/stat`` field 22), 0 if unknown
    proc_start: int
    created_ns: int
    startup_ns: int
    clock: int = REALTIME
    capture: int = PYTHON
    flags: int = 0
    program: str = ""
    command: str = ""
    rank: str = ""
    local_rank: str = ""
    #: CUDA_VISIBLE_DEVICES as the child saw it (None: not set)
    visible_devices: Optional[str] = None
    library: str = ""


@dataclass(frozen=True)
class Events:
    covered_ns: int
    dropped: int
    #: the (kind, name) table; ``codes`` index it
    kinds: tuple[str, ...]
    names: tuple[str, ...]
    starts: np.ndarray
    ends: np.ndarray
    devices: np.ndarray
    streams: np.ndarray
    codes: np.ndarray

    def __len__(self) -> int:
        return int(self.starts.size)

    def columns(self) -> GpuColumns:
        codes = self.codes.astype(np.int64)
        return GpuColumns(CodedColumn(codes, list(self.names)), CodedColumn(codes, list(self.kinds)),
                          self.devices.astype(np.int64), self.streams.astype(np.int64),
                          self.starts.astype(np.int64), (self.ends - self.starts).astype(np.int64))


@dataclass(frozen=True)
class Memory:
    #: (device, peak allocated bytes, peak reserved bytes)
    devices: tuple[tuple[int, int, int], ...]


@dataclass(frozen=True)
class Note:
    at_ns: int
    text: str


@dataclass(frozen=True)
class End:
    at_ns: int
    reason: int = EXITED
    note: str = ""


Chunk = Union[Header, Events, Memory, Note, End]


def _text(value: str) -> bytes:
    data = value.encode("utf-8", errors="replace")[:TEXT_LIMIT]
    return _TEXT.pack(len(data)) + data


def _chunk(kind: int, payload: bytes) -> bytes:
    return _CHUNK.pack(MAGIC, kind, VERSION, 0, len(payload)) + payload


def encode_header(header: Header) -> bytes:
    flags = header.flags | (2 if header.visible_devices is not None else 0)
    fixed = _HEADER.pack(header.pid, header.ppid, header.proc_start, header.created_ns, header.startup_ns,
                         header.clock, header.capture, flags)
    texts = (header.program, header.command, header.rank, header.local_rank, header.visible_devices or "",
             header.library)
    return _chunk(HEADER, fixed + b"".join(_text(t) for t in texts))


def encode_events(columns: GpuColumns, covered_ns: int, dropped: int = 0) -> bytes:
    """One EVENTS chunk from columns whose times are ns on the child's clock."""
    n = len(columns)
    if isinstance(columns.names, CodedColumn) and isinstance(columns.kinds, CodedColumn) \
            and columns.names.codes is columns.kinds.codes:
        codes = np.asarray(columns.names.codes, dtype=np.int64)
        table = list(zip(columns.kinds.values, columns.names.values))
    else:
        index: dict[tuple[str, str], int] = {}
        codes = np.asarray([index.setdefault((k, nm), len(index)) for k, nm in zip(columns.kinds, columns.names)],
                           dtype=np.int64)
        table = list(index)
    used, codes = np.unique(codes, return_inverse=True) if n else (np.zeros(0, np.int64), codes)
    names = b"".join(_NAME.pack(_KIND_CODE.get(table[i][0], 0), len(nm)) + nm
                     for i in used.tolist() for nm in (str(table[i][1]).encode("utf-8", errors="replace")[:65535],))
    starts = np.asarray(columns.starts_ns, dtype="<i8")
    ends = starts + np.asarray(columns.durs_ns, dtype="<i8")
    payload = b"".join((
        _EVENTS.pack(covered_ns, n, int(used.size), dropped), names,
        starts.tobytes(), ends.tobytes(),
        np.asarray(_ints(columns.devices), dtype="<u4").tobytes(),
        np.asarray(_ints(columns.streams), dtype="<u4").tobytes(),
        np.asarray(codes, dtype="<u4").reshape(-1).tobytes(),
    ))
    return _chunk(EVENTS, payload)


def _ints(column: Sequence[Any]) -> Sequence[int]:
    if isinstance(column, CodedColumn):
        values = [int(v) for v in column.values]
        return [values[c] for c in column.codes]
    return column if hasattr(column, "dtype") else [int(v) for v in column]


def encode_memory(memory: Memory) -> bytes:
    return _chunk(MEMORY, struct.pack("<I", len(memory.devices))
                  + b"".join(_DEVICE_MEMORY.pack(*d) for d in memory.devices))


def encode_note(note: Note) -> bytes:
    return _chunk(NOTE, _NOTE.pack(note.at_ns) + _text(note.text))


def encode_end(end: End) -> bytes:
    return _chunk(END, _END.pack(end.at_ns, end.reason) + _text(end.note))


# -- reading --------------------------------------------------------------------------------------
@dataclass
class _Cursor:
    data: memoryview
    at: int
    where: str

    def take(self, size: int) -> memoryview:
        if self.at + size > len(self.data):
            raise SpoolFormatError(f"{self.where}: chunk ends early (needs {size} bytes at {self.at})")
        part = self.data[self.at:self.at + size]
        self.at += size
        return part

    def unpack(self, layout: struct.Struct) -> tuple[Any, ...]:
        return layout.unpack(self.take(layout.size))

    def text(self) -> str:
        (size,) = self.unpack(_TEXT)
        return bytes(self.take(size)).decode("utf-8", errors="replace")

    def array(self, dtype: str, count: int) -> np.ndarray:
        size = np.dtype(dtype).itemsize * count
        return np.frombuffer(self.take(size), dtype=dtype).copy()


def _decode(kind: int, payload: memoryview, where: str) -> Chunk:
    c = _Cursor(payload, 0, where)
    if kind == HEADER:
        pid, ppid, proc_start, created, startup, clock, capture, flags = c.unpack(_HEADER)
        program, command, rank, local_rank, visible, library = (c.text() for _ in range(6))
        return Header(pid, ppid, proc_start, created, startup, clock, capture, flags & ~2, program, command, rank,
                      local_rank, visible if flags & 2 else None, library)
    if kind == EVENTS:
        covered, n, n_names, dropped = c.unpack(_EVENTS)
        kinds, names = [], []
        for _ in range(n_names):
            code, size = c.unpack(_NAME)
            kinds.append(KINDS[code] if code < len(KINDS) else "kernel")
            names.append(bytes(c.take(size)).decode("utf-8", errors="replace"))
        starts, ends = c.array("<i8", n), c.array("<i8", n)
        devices, streams, codes = c.array("<u4", n), c.array("<u4", n), c.array("<u4", n)
        if n and int(codes.max()) >= n_names:
            raise SpoolFormatError(f"{where}: an event's name code is outside the chunk's table of {n_names}")
        return Events(covered, dropped, tuple(kinds), tuple(names), starts, ends, devices, streams, codes)
    if kind == MEMORY:
        (count,) = c.unpack(struct.Struct("<I"))
        return Memory(tuple(c.unpack(_DEVICE_MEMORY) for _ in range(count)))
    if kind == NOTE:
        (at,) = c.unpack(_NOTE)
        return Note(at, c.text())
    if kind == END:
        at, reason = c.unpack(_END)
        return End(at, reason, c.text())
    raise SpoolFormatError(f"{where}: unknown chunk type {kind}")


@dataclass
class ChunkReader:
    """Complete chunks of one growing file, read from where the last read stopped."""

    path: str
    offset: int = 0
    #: why the rest of the file cannot be read (a damaged chunk); nothing more is read then
    error: str = ""
    chunks_read: int = field(default=0)

    def read_new(self) -> list[Chunk]:
        if self.error:
            return []
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self.offset)
                data = handle.read()
        except OSError as exc:
            self.error = f"cannot read {self.path}: {exc}"
            return []
        chunks, used, self.error = decode_chunks(data, f"{self.path} at byte {self.offset}")
        self.offset += used
        self.chunks_read += len(chunks)
        return chunks


def decode_chunks(data: bytes, where: str = "spool file") -> tuple[list[Chunk], int, str]:
    """The complete chunks at the start of ``data``, the bytes they took, and an error (or "")."""
    view = memoryview(data)
    chunks: list[Chunk] = []
    at = 0
    while at + CHUNK_HEAD <= len(view):
        magic, kind, version, _, size = _CHUNK.unpack(view[at:at + CHUNK_HEAD])
        if magic != MAGIC or version != VERSION:
            return chunks, at, f"{where}: not a pytest-gpuutil spool chunk at byte {at} (magic {bytes(magic)!r}, version {version})"
        if at + CHUNK_HEAD + size > len(view):
            break  # still being written, or cut short by a killed process
        try:
            chunks.append(_decode(kind, view[at + CHUNK_HEAD:at + CHUNK_HEAD + size], f"{where}+{at}"))
        except (SpoolFormatError, struct.error, ValueError) as exc:
            return chunks, at, str(exc)
        at += CHUNK_HEAD + size
    return chunks, at, ""
