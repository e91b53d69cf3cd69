"""(CPU, deterministic) Instructions the receiver's spool and the session's end files cost a test.

    python benchmarks/parts/session_end_cost.py capture END.pkl --tests 3000
    valgrind --tool=callgrind --collect-atstart=no --toggle-collect=_PyEval_CallTracing \\
        --dump-after=_PyEval_CallTracing --callgrind-out-file=OUT.%p \\
        python benchmarks/parts/spool_cost.py ROOT END.pkl [--flush 100] [--no-gc]

Replays a captured run's records (session_end_cost.py's capture: the synthetic suite's records as the
run made them) with ROOT's ``pytest_gpuutil`` (a checkout: ``git archive COMMIT | tar -x -C DIR``, its
compiled .so files copied in) into a new GpuUtilSession, in two parts, each inside ``sys.call_tracing``
(so that callgrind, told as above, counts only these and writes one file each): ``take`` (every
flush's ``Receiver.take_finished``: the records kept, their metric rows (none here) and the spool's
append of the flush's records, ``--flush`` tests a flush, as the plugin's teardown hands them on) and
``finish`` (GpuUtilSession.finish: gpu_util.csv/json, the spool removed). It prints the SHA-256 of
the spool as the last flush left it and of the files (their clock's fields masked), so that two roots
can be checked to write the same bytes. Two capture sizes give the fixed part and the part a test.
"""
from __future__ import annotations

import argparse
import gc
import hashlib
import os
import pickle
import re
import sys
import tempfile
from pathlib import Path
from typing import Any, NamedTuple, Optional

from session_end_cost import restored_session  # noqa: E402 - this folder is the script's own


class _Results(NamedTuple):
    """What take_finished reads of a test's TestResults: no metric rows, no tables."""

    metric_rows: tuple = ()
    tables: dict = {}


class _Finished(NamedTuple):
    """measuring.FinishedTest's shape (record, results, thresholds, timeline)."""

    record: Any
    results: _Results
    thresholds: str
    timeline: Optional[dict] = None


def _masked(data: bytes) -> bytes:
    """A file's bytes with what differs from run to run (the clock's fields) masked."""
    return re.sub(rb'("(?:created|measure_ms|measure_hooks_ms|measure_share_pct)": ?)[^,\n}]*', rb"\1...", data)


def replay(root: Path, end_path: Path, flush: int, collect: bool = True) -> None:
    sys.path.insert(0, str(root))
    os.environ.pop("GITHUB_STEP_SUMMARY", None)
    got = pickle.loads(end_path.read_bytes())
    with tempfile.TemporaryDirectory(prefix="spool_cost_") as tmp:
        folder = Path(tmp)
        os.chdir(folder)
        state = restored_session(got, folder)
        settings, receiver = state.settings, state.receiver
        state.start()
        records = got["records"]
        results = _Results()
        flushes = [[_Finished(r, results, "") for r in records[start:start + flush]]
                   for start in range(0, len(records), flush)]
        spool = receiver.spool.path if receiver.spool is not None else None
        kept: dict[str, bytes] = {}

        def take() -> None:
            for finished in flushes:
                receiver.take_finished(finished)

        def finish() -> None:
            state.finish()

        if not collect:
            gc.collect()
            gc.disable()
        sys.call_tracing(take, ())
        if spool is not None and spool.exists():
            kept["spool"] = spool.read_bytes()
        sys.call_tracing(finish, ())
        out = Path(settings.output_dir)
        for name in ("gpu_util.csv", "gpu_util.json"):
            kept[name] = (out / name).read_bytes()
        for name, data in kept.items():
            print(f"{name} {len(records)} tests {len(data)} bytes sha256 {hashlib.sha256(_masked(data)).hexdigest()[:16]}")
        print(f"spool left after the end: {spool is not None and spool.exists()}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("end", type=Path)
    parser.add_argument("--flush", type=int, default=100, help="tests a flush (the default flush policy's)")
    parser.add_argument("--no-gc", action="store_true", help="collect once before the parts, none during them")
    args = parser.parse_args(argv)
    replay(args.root.resolve(), args.end.resolve(), args.flush, collect=not args.no_gc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
