"""Where a test's GPU memory went, for the failure report of a test over a memory limit or out of memory.

The largest allocations live at the peak and the allocation that failed, each with its Python
stack, read from the allocator's history (``--gpu-util-memory-history``), and a memory snapshot
saved under ``<--gpu-util-dir>/memory/`` for https://pytorch.org/memory_viz.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional

from pytest_gpuutil.capture.memory import format_size
from pytest_gpuutil.report.terminal import display_path
from pytest_gpuutil.rundoc.document import safe_name

if TYPE_CHECKING:
    from pytest_gpuutil.capture.memory import MemoryMeter
    from pytest_gpuutil.measurement import TestMemory


def memory_report(nodeid: str, memory: Optional[TestMemory], meter: Optional[MemoryMeter], output_dir: Path) -> str:
    """The report's text ("" when the test's memory was not measured)."""
    if memory is None or meter is None:
        return ""
    if not meter.history:
        return "(run with --gpu-util-memory-history for the allocations at the peak and a memory snapshot)"
    lines = []
    for device in memory.devices:
        try:
            allocations, failed = meter.where_memory_went(memory.start, int(device.device),
                                                          with_failed=bool(device.ooms))
        except Exception as exc:  # noqa: BLE001 - the failure report must still come out
            lines.append(f"device {device.device}: could not read the memory history: {exc}")
            continue
        for allocation in failed:
            where = allocation.frames[0] if allocation.frames else "(no Python stack)"
            lines.append(f"out of memory on device {device.device} asking for {format_size(allocation.size)} at {where}")
            lines.extend(f"              {frame}" for frame in allocation.frames[1:4])
        if allocations:
            lines.append(f"largest allocations live at the peak on device {device.device}:")
        for allocation in allocations:
            where = allocation.frames[0] if allocation.frames else "(no Python stack)"
            lines.append(f"  {format_size(allocation.size):>10}  {where}")
            lines.extend(f"              {frame}" for frame in allocation.frames[1:4])
    path = output_dir / "memory" / f"{safe_name(nodeid)}.pickle"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        meter.dump_snapshot(str(path))
        lines.append(f"memory snapshot: {display_path(path)} (open it at https://pytorch.org/memory_viz)")
    except Exception as exc:  # noqa: BLE001
        lines.append(f"could not save the memory snapshot {display_path(path)}: {exc}")
    return "\n".join(lines)
