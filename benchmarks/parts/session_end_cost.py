"""(CPU, deterministic) Instructions the session's end costs: the files, then the terminal's summary.

    python benchmarks/parts/session_end_cost.py capture END.pkl [--tests 1000] [-- EXTRA PYTEST ARGS]
    valgrind --tool=callgrind --collect-atstart=no --toggle-collect=_PyEval_CallTracing \\
        --dump-after=_PyEval_CallTracing --callgrind-out-file=OUT.%p \\
        python benchmarks/parts/session_end_cost.py replay ROOT END.pkl [--no-gc]

``capture`` runs cost_line_check.py's synthetic suite (the tests' synthetic GPU) in this process with
this checkout's plugin and pickles, once the run is over, what its end read: the settings, the
records, the processes' figures, the machine's description. ``replay`` loads them with ROOT's
``pytest_gpuutil`` (a checkout: ``git archive COMMIT | tar -x -C DIR``), puts them into a new
GpuUtilSession (the records spooled a flush at a time, as the run did), and does the end's parts,
each inside ``sys.call_tracing`` (so that callgrind, told as above, counts only these and
writes one file each): ``loop`` (pytest_runtestloop's part after the tests: the metric tables'
check, the comparison), ``finish`` (pytest_sessionfinish's GpuUtilSession.finish: gpu_util.csv/json,
the history, the page) and ``summary`` (pytest_terminal_summary, into a terminal reporter that
keeps the lines), then the summary again (its modules imported by then). It prints the files' and the summary's SHA-256, so that two roots can be checked
to write the same bytes for the same records. Captures of two suite sizes give the fixed and the
per-test parts: a count, not a time, so runs on a loaded machine compare.
"""
from __future__ import annotations

import argparse
import dataclasses
import gc
import hashlib
import os
import pickle
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
#: records spooled at a time in the replay (the run's flushes: about this many tests each)
FLUSH_TESTS = 100
#: what the summary is fitted to
WIDTH = 120


class _Grab:
    """pytest_unconfigure: keep what the end of the run read."""

    def __init__(self) -> None:
        self.got: dict[str, Any] = {}

    def pytest_unconfigure(self, config: Any) -> None:
        from pytest_gpuutil.plugin import STATE_KEY

        state = config.stash[STATE_KEY]
        self.got = {"settings": state.settings, "records": list(state.records), "processes": state.processes,
                    "test_seconds": state.test_seconds, "finish_s": state.finish_s, "machine": state.machine,
                    "cuda": state._cuda, "own_s": state.measuring.own_s,
                    "thresholds_not_checked": list(state.receiver.thresholds_not_checked),
                    "threshold_failures": list(state.receiver.threshold_failures),
                    "metric_rows_written": state.receiver.metric_rows_written}


def capture(out: Path, tests: int, extra: list[str]) -> None:
    sys.path[:0] = [str(ROOT), str(HERE), str(ROOT / "benchmarks" / "checks")]  # cost_line_check's folder
    import pytest
    from cost_line_check import SYNTHETIC_TESTS

    from tests.helpers import SYNTHETIC_CONFTEST

    grab = _Grab()
    with tempfile.TemporaryDirectory(prefix="session_end_") as tmp:
        folder = Path(tmp)
        (folder / "conftest.py").write_text("import torch  # noqa: F401\n" + SYNTHETIC_CONFTEST)
        (folder / "test_small.py").write_text(SYNTHETIC_TESTS.replace("{tests}", str(tests)))
        os.chdir(folder)
        pytest.main(["-q", "-p", "no:cacheprovider", "test_small.py", "--gpu-util", f"--gpu-util-dir={folder / 'out'}",
                     *extra], plugins=[grab])
    out.write_bytes(pickle.dumps(grab.got))
    print(f"captured the end of {len(grab.got['records'])} tests in {out}")


class _Writer:
    fullwidth = WIDTH


class _Config:
    class option:  # noqa: N801 - what Terminal.of reads
        verbose = 0

    def get_terminal_writer(self) -> _Writer:
        return _Writer()


class _Reporter:
    """The part of pytest's terminal reporter the summary writes through; keeps the lines."""

    def __init__(self) -> None:
        self.config = _Config()
        self.lines: list[str] = []

    def write_line(self, line: str, **markup: bool) -> None:
        self.lines.append(line)

    def write_sep(self, sep: str, title: str = "", **markup: bool) -> None:
        self.lines.append(f"{sep * 3} {title} {sep * 3}")


def restored_session(got: dict[str, Any], folder: Path) -> Any:
    """A GpuUtilSession as the captured run's was at its end (its files written under
    ``folder/out``), not started, no record taken yet; pytest_gpuutil imported from sys.path."""
    from pytest_gpuutil.session.state import GpuUtilSession

    settings = dataclasses.replace(got["settings"], output_dir=str(folder / "out"))
    state = GpuUtilSession(settings, folder)
    state.machine, state._cuda, state._machine_saw_torch = got["machine"], got["cuda"], True
    state.test_seconds = got["test_seconds"]
    state.measuring.own_s = got["own_s"]
    state.receiver.processes.update(got["processes"])
    return state


def replay(root: Path, end_path: Path, collect: bool = True) -> None:
    sys.path.insert(0, str(root))
    os.environ.pop("GITHUB_STEP_SUMMARY", None)
    got = pickle.loads(end_path.read_bytes())
    from pytest_gpuutil.report.terminal import write_summary

    with tempfile.TemporaryDirectory(prefix="session_end_replay_") as tmp:
        folder = Path(tmp)
        os.chdir(folder)  # the summary names the files it wrote from here
        state = restored_session(got, folder)
        settings = state.settings
        receiver = state.receiver
        receiver.thresholds_not_checked.extend(got["thresholds_not_checked"])
        receiver.threshold_failures.extend(got["threshold_failures"])
        receiver.metric_rows_written = got["metric_rows_written"]
        state.start()
        records = got["records"]
        for start in range(0, len(records), FLUSH_TESTS):
            receiver.records.extend(records[start:start + FLUSH_TESTS])
            if receiver.spool is not None:
                receiver.spool.append(records[start:start + FLUSH_TESTS])
        tr = _Reporter()

        def loop() -> None:
            state.check_tables()
            state.compare()

        def finish() -> None:
            state.finish()
            state.finish_s = got["finish_s"]

        if not collect:  # the parts' own work only (Python's collections come when allocations say)
            gc.collect()
            gc.disable()
        sys.call_tracing(loop, ())
        sys.call_tracing(finish, ())
        sys.call_tracing(write_summary, (state, tr))
        sys.call_tracing(write_summary, (state, _Reporter()))  # again: its imports done, what it reads kept
        out = Path(settings.output_dir)
        for name in ("gpu_util.csv", "gpu_util.json"):
            data = (out / name).read_bytes()
            # the run's time and what measuring cost (own_now reads a clock) differ from run to run
            data = re.sub(rb'^( *"(?:created|measure_ms|measure_hooks_ms|measure_share_pct)": ).*$',
                          rb"\1...", data, flags=re.M)
            print(f"{name} {len(records)} tests sha256 {hashlib.sha256(data).hexdigest()[:16]}")
        lines = [line for line in tr.lines if "measurement cost" not in line and "written before" not in line]
        print(f"summary {len(tr.lines)} lines sha256 {hashlib.sha256(chr(10).join(lines).encode()).hexdigest()[:16]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    one = sub.add_parser("capture")
    one.add_argument("end", type=Path)
    one.add_argument("--tests", type=int, default=1000)
    one.add_argument("extra", nargs="*", help="more pytest arguments (after --)")
    two = sub.add_parser("replay")
    two.add_argument("root", type=Path)
    two.add_argument("end", type=Path)
    two.add_argument("--no-gc", action="store_true", help="collect once before the parts, none during them")
    args = parser.parse_args(argv)
    if args.command == "capture":
        capture(args.end.resolve(), args.tests, args.extra)
    else:
        replay(args.root.resolve(), args.end.resolve(), collect=not args.no_gc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
