"""Run commands as fresh processes, alternating, and measure each run: wall time and peak RSS.

Standard library only, and meant to run as ``python -I -S benchmarks/process_timer.py`` with a
JSON request on stdin (``{"commands": {name: argv}, "repeats": N, "env": {...}, "cwd": DIR}``);
it prints ``{name: [[wall_s, maxrss_mb, returncode], ...]}``. It runs as a process of its own
because Linux counts a child's peak RSS from the moment it is forked: a child of a big parent
starts with the parent's resident size, a child of this small timer with a few MB.
"""
from __future__ import annotations

import json
import os
import sys
import time
from typing import Any, Mapping, Optional, Sequence


def run_process(argv: Sequence[str], env: Optional[Mapping[str, str]] = None) -> tuple[float, float, int]:
    """Start ``argv`` with its output discarded, wait for it: (wall seconds, peak RSS MB, exit code)."""
    quiet = [(os.POSIX_SPAWN_OPEN, fd, os.devnull, os.O_WRONLY, 0) for fd in (1, 2)]
    start = time.perf_counter()
    pid = os.posix_spawn(argv[0], list(argv), dict(os.environ if env is None else env), file_actions=quiet)
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - start
    return wall, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status)


def run_alternating(commands: Mapping[str, Sequence[str]], repeats: int,
                    env: Optional[Mapping[str, str]] = None) -> dict[str, list[tuple[float, float, int]]]:
    """``repeats`` runs of every command, the commands taking turns (a slow spell hits them all)."""
    runs: dict[str, list[tuple[float, float, int]]] = {name: [] for name in commands}
    for _ in range(repeats):
        for name, argv in commands.items():
            runs[name].append(run_process(argv, env))
    return runs


def main() -> int:
    request: dict[str, Any] = json.load(sys.stdin)
    os.chdir(request.get("cwd") or os.getcwd())
    runs = run_alternating(request["commands"], int(request["repeats"]), request.get("env"))
    json.dump(runs, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
