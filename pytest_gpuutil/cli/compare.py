"""``gpuutil compare BASELINE.json CURRENT.json [--fail EXPR]...``: gate a run against a baseline.

``gpuutil compare --history DB CURRENT.json [--runs N]`` gates it against each test's last N runs in a
run history instead (``history.noise``: past the limit and outside the runs' noise; a test of a run
merged from several machines against its own machine's runs).
Exit status: 0 no regression, 1 at least one regression, 2 bad input (missing or corrupt file,
bad ``--fail`` expression); bad input is reported as one ``error: ...`` line on stderr.
Without ``--fail``, the defaults are ``busy_pct:5 mm_conv_pct:5 gpu_busy_ms:10%``.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Mapping, Optional, Sequence, TextIO

from pytest_gpuutil.cli.arguments import EXIT_OK, EXIT_USAGE, Parser, parse_or_exit_code
from pytest_gpuutil.gates.regression import (
    DEFAULT_FAIL_EXPRS,
    Comparison,
    FailExpr,
    compare_records,
    parse_fail_exprs,
    regression_table,
)
from pytest_gpuutil.gates.coverage import coverage_lines
from pytest_gpuutil.gates.explain import Explanation, explain_comparison
from pytest_gpuutil.history.merge import read_shard
from pytest_gpuutil.history.noise import (
    DEFAULT_RUNS,
    compare_with_history,
    not_gated_text,
    too_few_text,
    within_noise_text,
)
from pytest_gpuutil.history.series import earlier_records
from pytest_gpuutil.history.store import HistoryError, open_history
from pytest_gpuutil.options import misplaced_expression
from pytest_gpuutil.rundoc.document import RunDocError, machine_id
from pytest_gpuutil.rundoc.metrics import METRICS
from pytest_gpuutil.rundoc.reading import load_run_doc

PROG = "gpuutil compare"

EXIT_REGRESSION = 1

FAIL_HELP = (
    "fail when METRIC gets worse by more than N (absolute: points for *_pct, ms for *_ms) or "
    "N%% (relative), e.g. busy_pct:5 or gpu_busy_ms:10%%; one expression per use, repeatable (a value may "
    "also hold several, comma-separated). "
    f"Default: {' '.join(DEFAULT_FAIL_EXPRS).replace('%', '%%')}. Metrics: {', '.join(METRICS)}"
)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``gpuutil compare``."""
    parser = Parser(
        prog=PROG,
        usage=f"{PROG} BASELINE.json CURRENT.json [--fail EXPR]...\n"
              f"       {PROG} --history DB CURRENT.json [--runs N] [--fail EXPR]...",
        description="Compare two gpu_util.json runs (or a run with its last runs in a run history) and fail on "
                    "GPU-utilization regressions.",
        epilog="Exit status: 0 no regression, 1 regression, 2 bad input.",
    )
    parser.add_argument("runs", nargs="*", metavar="BASELINE.json CURRENT.json",
                        help="baseline run file and current run file (with --history: the current run file only)")
    parser.add_argument("--history", metavar="DB", help="compare with the run history DB (a --gpu-util-history file)")
    parser.add_argument("--runs", dest="last", type=int, default=DEFAULT_RUNS, metavar="N",
                        help=f"with --history: each test's last N runs (default {DEFAULT_RUNS})")
    parser.add_argument(
        "--fail", metavar="EXPR", action="append", default=None, help=FAIL_HELP
    )
    return parser


def _error(stderr: TextIO, message: str) -> int:
    """Print one ``error:`` line and return the usage exit status."""
    print(f"error: {message}", file=stderr)
    return EXIT_USAGE


def main(
    argv: Sequence[str] | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """Run ``gpuutil compare``; returns the exit status (0, 1 or 2)."""
    out = stdout if stdout is not None else sys.stdout
    err = stderr if stderr is not None else sys.stderr
    parser = build_parser()
    words = list(sys.argv[1:] if argv is None else argv)
    problem = misplaced_expression(words, "--fail", Path.cwd())
    if problem:
        return _error(err, problem)
    args = parse_or_exit_code(parser.parse_intermixed_args, words, err)
    if isinstance(args, int):
        return args
    try:
        exprs = parse_fail_exprs(args.fail if args.fail else DEFAULT_FAIL_EXPRS)
    except ValueError as exc:
        return _error(err, f"--fail: {exc}")
    if not exprs:
        return _error(err, "--fail: no expression given")
    if args.history is not None:
        if len(args.runs) != 1:
            return _error(err, "with --history give one run file: CURRENT.json")
        if args.last < 1:
            return _error(err, f"--runs: expected a whole number >= 1, got {args.last}")
        return _compare_with_history(args.history, args.runs[0], args.last, exprs, out, err)
    if len(args.runs) != 2:
        return _error(err, "expected BASELINE.json CURRENT.json (or --history DB CURRENT.json)")
    try:
        baseline = load_run_doc(args.runs[0])
        current = load_run_doc(args.runs[1])
    except RunDocError as exc:
        return _error(err, str(exc))

    base_id, current_id = machine_id(baseline.machine_info), machine_id(current.machine_info)
    if base_id != current_id:
        print(
            f"warning: machine ids differ (baseline {base_id}, current {current_id}); "
            "comparing anyway",
            file=err,
        )
    result = compare_records(baseline.records, current.records, exprs)
    why = explain_comparison(baseline.records, list(current.records.values()), result)
    return _verdict(result, exprs, out, err, explanations=why)


def _compare_with_history(db: str, current_path: str, last: int, exprs: Sequence[FailExpr], out: TextIO,
                          err: TextIO) -> int:
    """``--history``: each test against its last runs on the machine id that ran it."""
    try:
        current = read_shard(current_path)
        with open_history(db) as history:
            earlier = earlier_records(history, current.run.records.values(),
                                      lambda r: machine_id(current.machine_of(r)), last, current.run.created)
    except (RunDocError, HistoryError) as exc:
        return _error(err, str(exc))
    result = compare_with_history(earlier, current.run.records.values(), exprs)
    machines = ", ".join(sorted({machine_id(current.machine_of(r)) for r in current.run.records.values()}))
    if not result.medians:
        print(f"warning: {not_gated_text(db, earlier, machines)}", file=err)
        print(f"no regressions: 0 tests compared against the history [{' '.join(e.text for e in exprs)}]", file=out)
        return EXIT_OK
    if result.too_few:
        print(f"warning: {too_few_text(result, machines)}", file=err)
    code = _verdict(result.comparison, exprs, out, err,
                    f" against the history {db} (median of each test's last {last} runs on {machines})",
                    explain_comparison(result.latest, list(current.run.records.values()), result.comparison))
    note = within_noise_text(result)
    if note:
        print(note, file=out)
    return code


def _verdict(result: Comparison, exprs: Sequence[FailExpr], out: TextIO, err: TextIO, against: str = "",
             explanations: Optional[Mapping[str, Explanation]] = None) -> int:
    """The regression table, at most 4 lines per flagged test saying why (gates/explain.py), how the tests
    matched, and the summary line; the exit status (1 also when no test matched a non-empty baseline)."""
    gates = " ".join(e.text for e in exprs)
    extra = []
    if result.new_tests:
        extra.append(f"{len(result.new_tests)} without baseline record")
    if result.missing_tests:
        extra.append(f"{len(result.missing_tests)} only in baseline")
    suffix = f" ({'; '.join(extra)})" if extra else ""
    compared = len(result.compared)
    for line in coverage_lines(result):
        print(line.text, file=out)
    if result.matched_none:
        return EXIT_REGRESSION
    if not result.regressions:
        print(f"no regressions: {compared} tests compared{against}{suffix} [{gates}]", file=out)
        if compared == 0:
            print("warning: the two runs have no test in common", file=err)
        return EXIT_OK
    print(regression_table(result.regressions), file=out)
    for explanation in (explanations or {}).values():
        for line in explanation.terminal_lines():
            print(line, file=out)
    tests = len({r.test for r in result.regressions})
    print(
        f"{len(result.regressions)} regressions in {tests} of {compared} tests compared"
        f"{against}{suffix} [{gates}]",
        file=out,
    )
    return EXIT_REGRESSION


if __name__ == "__main__":
    sys.exit(main())
