"""Reading a spool back in tests."""
from __future__ import annotations

import glob
import os
from dataclasses import dataclass, field

from pytest_gpuutil.children.spool_format import ChunkReader, End, Events, Header, Memory, Note


@dataclass
class ChildFile:
    header: Header
    events: list[Events] = field(default_factory=list)
    memory: list[Memory] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)
    end: list[End] = field(default_factory=list)

    def names(self) -> list[str]:
        return [e.names[c] for e in self.events for c in e.codes.tolist()]

    def durations(self) -> list[int]:
        return [int(d) for e in self.events for d in (e.ends - e.starts).tolist()]


def read_spool(directory: str) -> list[ChildFile]:
    files = []
    for path in sorted(glob.glob(os.path.join(directory, "*.gpuc"))):
        reader = ChunkReader(path)
        chunks = reader.read_new()
        assert reader.error == "", reader.error
        assert isinstance(chunks[0], Header), chunks[:1]
        child = ChildFile(chunks[0])
        for chunk in chunks[1:]:
            {Events: child.events, Memory: child.memory, Note: child.notes, End: child.end}[type(chunk)].append(chunk)
        files.append(child)
    return files
