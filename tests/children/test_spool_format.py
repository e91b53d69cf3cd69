"""The spool's binary chunks: what a child writes is what the parent reads, and only whole chunks."""
from __future__ import annotations

import numpy as np
import pytest

from pytest_gpuutil.children.spool_format import (
    INJECTION,
    MONOTONIC,
    NESTED,
    ChunkReader,
    End,
    Events,
    Header,
    Memory,
    Note,
    decode_chunks,
    encode_end,
    encode_events,
    encode_header,
    encode_memory,
    encode_note,
)
from pytest_gpuutil.traces.model import CodedColumn, GpuColumns, GpuEvent

HEADER = Header(pid=4242, ppid=17, proc_start=123456, created_ns=1_700_000_000_000_000_000, startup_ns=41_000_000,
                clock=MONOTONIC, capture=INJECTION, flags=1, program="python train.py", command="python train.py --lr 1",
                rank="1", local_rank="0", visible_devices="2,3", library="/x/libcupti.so.13")


def test_every_chunk_type_round_trips() -> None:
    events = GpuColumns.from_events([
        GpuEvent("nvjet_sm90_tst", "kernel", "0", "7", 1_000, 500),
        GpuEvent("Memcpy HtoD (Pageable -> Device)", "gpu_memcpy", "1", "9", 2_000, 300),
        GpuEvent("nvjet_sm90_tst", "kernel", "0", "7", 3_000, 250),
        GpuEvent("Memset (Device)", "gpu_memset", "0", "8", 4_000, 10),
    ])
    data = (encode_header(HEADER) + encode_events(events, covered_ns=5_000, dropped=3)
            + encode_memory(Memory(((0, 1 << 30, 2 << 30), (1, 5, 6)))) + encode_note(Note(4_500, "stepped aside"))
            + encode_end(End(6_000, NESTED, "bye")))
    chunks, used, error = decode_chunks(data)
    assert error == "" and used == len(data)
    header, got, memory, note, end = chunks
    assert header == HEADER
    assert isinstance(got, Events) and len(got) == 4 and got.covered_ns == 5_000 and got.dropped == 3
    columns = got.columns()
    assert list(columns.names) == list(events.names)
    assert list(columns.kinds) == list(events.kinds)
    assert columns.devices.tolist() == [0, 1, 0, 0] and columns.streams.tolist() == [7, 9, 7, 8]
    assert columns.starts_ns.tolist() == [1_000, 2_000, 3_000, 4_000]
    assert columns.durs_ns.tolist() == [500, 300, 250, 10]
    assert len(got.names) == 3  # the table holds each (kind, name) once
    assert memory == Memory(((0, 1 << 30, 2 << 30), (1, 5, 6)))
    assert note == Note(4_500, "stepped aside")
    assert end == End(6_000, NESTED, "bye")


def test_coded_columns_keep_their_table_and_unset_visible_devices_stay_unset() -> None:
    codes = np.asarray([1, 1, 0], dtype=np.int64)
    columns = GpuColumns(CodedColumn(codes, ["a", "b", "unused"]), CodedColumn(codes, ["kernel", "gpu_memset", "kernel"]),
                         np.asarray([0, 0, 0]), np.asarray([7, 7, 7]), np.asarray([10, 20, 30]), np.asarray([1, 2, 3]))
    header = Header(1, 0, 0, 0, 0, visible_devices=None)
    chunks, _, _ = decode_chunks(encode_header(header) + encode_events(columns, 40))
    assert chunks[0].visible_devices is None
    assert list(chunks[1].columns().names) == ["b", "b", "a"]
    assert list(chunks[1].columns().kinds) == ["gpu_memset", "gpu_memset", "kernel"]
    assert chunks[1].names == ("a", "b")  # only the names this chunk uses


def test_an_empty_events_chunk_says_how_far_the_child_got() -> None:
    chunks, _, error = decode_chunks(encode_events(GpuColumns(), covered_ns=99))
    assert error == "" and chunks[0].covered_ns == 99 and len(chunks[0]) == 0


@pytest.mark.parametrize("cut", [1, 11, 12, 40])
def test_a_chunk_cut_short_is_left_for_later(cut: int) -> None:
    whole = encode_header(HEADER)
    partial = encode_note(Note(1, "a note long enough to be cut"))
    chunks, used, error = decode_chunks(whole + partial[:cut])
    assert chunks == [HEADER] and used == len(whole) and error == ""


def test_a_reader_takes_complete_chunks_as_the_file_grows(tmp_path) -> None:
    path = tmp_path / "child.gpuc"
    note = encode_note(Note(5, "x" * 100))
    path.write_bytes(encode_header(HEADER) + note[:30])
    reader = ChunkReader(str(path))
    assert reader.read_new() == [HEADER]
    with open(path, "ab") as handle:
        handle.write(note[30:] + encode_end(End(9)))
    assert reader.read_new() == [Note(5, "x" * 100), End(9)]
    assert reader.read_new() == [] and reader.error == ""


def test_damage_is_reported_once_and_reading_stops(tmp_path) -> None:
    path = tmp_path / "child.gpuc"
    path.write_bytes(encode_header(HEADER) + b"JUNKJUNKJUNKJUNK" + encode_end(End(9)))
    reader = ChunkReader(str(path))
    assert reader.read_new() == [HEADER]
    assert "not a pytest-gpuutil spool chunk" in reader.error and str(path) in reader.error
    assert reader.read_new() == []


def test_an_event_code_outside_the_table_is_an_error() -> None:
    data = bytearray(encode_events(GpuColumns.from_events([GpuEvent("k", "kernel", "0", "7", 1, 1)]), 5))
    data[-4:] = (7).to_bytes(4, "little")  # the one event's code: 7, with one name in the table
    chunks, used, error = decode_chunks(bytes(data))
    assert chunks == [] and used == 0 and "outside the chunk's table" in error
