"""What the parent and a child can say about a process from ``/proc`` (Linux; empty elsewhere)."""
from __future__ import annotations

import os
import time
from typing import Optional, Sequence

COMMAND_LIMIT = 300


def proc_start(pid: int) -> int:
    """The process's start time in clock ticks since boot (``/proc/<pid>/stat`` field 22), 0 if unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            text = handle.read().decode("ascii", errors="replace")
    except OSError:
        return 0
    fields = text[text.rfind(")") + 2:].split()  # the name may hold spaces and parentheses
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return 0


def started_realtime_ns(ticks: int) -> Optional[int]:
    """When a process with this ``proc_start`` began, on the wall clock (ns; ~10 ms resolution), or None.

    The ticks count from boot on the boot-time clock (CLOCK_BOOTTIME, as the kernel keeps it), so
    this reads that clock rather than ``/proc/uptime`` (which some containers rewrite).
    """
    clock = getattr(time, "CLOCK_BOOTTIME", None)
    if not ticks or clock is None:
        return None
    try:
        hz = os.sysconf("SC_CLK_TCK")
        since_boot_ns = time.clock_gettime_ns(clock)
    except (OSError, ValueError):
        return None
    return time.time_ns() - since_boot_ns + ticks * 1_000_000_000 // hz


def state_and_parent(pid: int) -> tuple[str, int]:
    """(state letter, parent pid) of a process, ("", 0) if there is none."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            text = handle.read().decode("ascii", errors="replace")
    except OSError:
        return "", 0
    fields = text[text.rfind(")") + 2:].split()
    try:
        return fields[0], int(fields[1])
    except (IndexError, ValueError):
        return "", 0


def environment_value(pid: int, name: str) -> Optional[str]:
    """``name``'s value in the environment the process started with (``/proc/<pid>/environ``, readable
    for this user's processes); None where it is not set or cannot be read."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            raw = handle.read()
    except OSError:
        return None
    key = name.encode() + b"="
    for entry in raw.split(b"\0"):
        if entry.startswith(key):
            return entry[len(key):].decode("utf-8", errors="replace")
    return None


def is_running(pid: int, started: int) -> bool:
    """Whether the process that wrote a header still runs (the same start time, not a zombie)."""
    if started and proc_start(pid) != started:
        return False
    state, _ = state_and_parent(pid)
    return state not in ("", "Z", "X")


def has_children(pid: int) -> bool:
    """Whether ``pid`` has a child process now (any of its threads' ``/proc/PID/task/TID/children``).

    True when that cannot be read (a kernel without those lists): the caller then acts as if it had.
    Reading them costs microseconds and never touches the GPU driver.
    """
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return True
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as handle:
                if handle.read(1):
                    return True
        except FileNotFoundError:
            if tid == str(pid):
                return True  # the main thread has no list: this kernel keeps none
        except OSError:
            return True
    return False


def descends_from(pid: int, ancestor: int, limit: int = 64) -> bool:
    """Whether ``ancestor`` is ``pid``'s parent, grandparent, ... (False once the chain is lost)."""
    for _ in range(limit):
        if pid <= 1:
            return False
        _, parent = state_and_parent(pid)
        if parent == ancestor:
            return True
        pid = parent
    return False


def command_line(pid: int = 0) -> list[str]:
    """The process's arguments (its own when ``pid`` is 0)."""
    try:
        with open(f"/proc/{pid or 'self'}/cmdline", "rb") as handle:
            raw = handle.read()
    except OSError:
        return []
    return [part.decode("utf-8", errors="replace") for part in raw.split(b"\0") if part]


def program_name(pid: int) -> str:
    """The process's short name (``/proc/<pid>/comm``)."""
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def describe(argv: Sequence[str], forked: bool = False) -> str:
    """A short name for a program from its arguments: ``python train.py``, ``python -m mod``,
    ``python (multiprocessing spawn)``, ``torchrun``, ``cuda_prog``."""
    if not argv:
        return "?"
    first = os.path.basename(argv[0])
    if forked:
        return f"{first} (forked)"
    if not first.startswith("python") and not first.startswith("pypy"):
        return first
    text = " ".join(argv)
    if "--multiprocessing-fork" in argv or "spawn_main" in text:
        return f"{first} (multiprocessing spawn)"
    if "forkserver" in text:
        return f"{first} (multiprocessing forkserver)"
    rest = [a for a in argv[1:] if not (a.startswith("-") and a not in ("-m", "-c"))]
    if rest[:1] == ["-m"] and len(rest) > 1:
        return f"{first} -m {rest[1]}"
    if rest[:1] == ["-c"]:
        return f"{first} -c"
    return f"{first} {os.path.basename(rest[0])}" if rest else first


def short_command(argv: Sequence[str]) -> str:
    text = " ".join(argv)
    return text if len(text) <= COMMAND_LIMIT else text[:COMMAND_LIMIT - 3] + "..."


def find_rank(environ: dict[str, str]) -> tuple[str, str]:
    """(RANK, LOCAL_RANK) as the launcher set them, "" where unset."""
    return environ.get("RANK", ""), environ.get("LOCAL_RANK", "")

