"""``gpuutil report RUN.json [--baseline BASELINE.json] [--fail EXPR ...] [--history DB] [-o report.html]``.

Renders a saved run (``gpu_util.json``, e.g. a CI artifact, or a merge of CI shards) as the
self-contained HTML report, optionally against a baseline run, and with ``--history`` a trend line
per test from a run history, and the timelines stored beside the run (``timelines.json.gz``, written
with ``--gpu-util-html``) in the tests' detail views. Exit status: 0 written, 2 bad input (a missing or corrupt
JSON file or history, a bad ``--fail`` expression, an output that cannot be written), reported as one
``error: ...`` line on stderr. Regressions are shown, not gated: ``gpuutil compare`` gates.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Sequence, TextIO

from pytest_gpuutil.cli.arguments import EXIT_OK, EXIT_USAGE, Parser, parse_or_exit_code
from pytest_gpuutil.gates.regression import DEFAULT_FAIL_EXPRS, FailExpr, parse_fail_exprs
from pytest_gpuutil.history.merge import read_shard
from pytest_gpuutil.history.series import TREND_RUNS, Trend, earlier_records, trends
from pytest_gpuutil.history.store import HistoryError, open_history
from pytest_gpuutil.report.html_report import (
    DEFAULT_NAME,
    baseline_view_of,
    write_html_report,
)
from pytest_gpuutil.report.timelines import PAGE_BUDGET_BYTES, read_sidecar
from pytest_gpuutil.rundoc.document import RunDoc, RunDocError, machine_id, safe_name
from pytest_gpuutil.rundoc.reading import RUN_NAME, SPOOL_NAME, load_run_doc, load_spool, unfinished_spool

PROG = "gpuutil report"


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog=PROG, description="Render a gpu_util.json run as a self-contained HTML report.",
                    epilog="Exit status: 0 written, 2 bad input.")
    parser.add_argument("run", metavar="RUN.json", help="a gpu_util.json run file, or a run folder (a run killed "
                                                        "before its end: the tests in its spool)")
    parser.add_argument("--baseline", metavar="BASELINE.json", help="a run or baseline file to compare with")
    parser.add_argument("--fail", metavar="EXPR", action="append", default=None,
                        help=f"what counts as a regression, as for gpuutil compare (default: "
                             f"{' '.join(DEFAULT_FAIL_EXPRS).replace('%', '%%')})")
    parser.add_argument("--history", metavar="DB", help="a run history (--gpu-util-history): a trend line per test "
                                                         "over its last runs there and this one")
    parser.add_argument("--timelines", choices=("fit", "all"), default="fit",
                        help="the timelines stored beside the run (timelines.json.gz): fit them into the page's "
                             "budget (the default) or put all of them in as they are")
    parser.add_argument("-o", "--output", metavar="report.html",
                        help=f"where to write the page (default: {DEFAULT_NAME} beside RUN.json)")
    return parser


def _document(run: RunDoc) -> dict[str, Any]:
    """The whole document (totals, per-GPU table, thresholds), read again now that it is known to be valid."""
    try:
        doc = json.loads(run.path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:  # changed since load_run_doc read it
        raise RunDocError(run.path, f"cannot read: {exc}") from None
    if not isinstance(doc, dict):
        raise RunDocError(run.path, "expected a JSON object")
    return doc


def _run_of(path: Path) -> tuple[RunDoc, dict[str, Any]]:
    """The run to render: a gpu_util.json, or a run folder (its gpu_util.json; its spool, when the run
    was killed before writing it: the page says the run did not finish)."""
    if path.is_dir():
        spool = unfinished_spool(path)
        if spool is not None:
            return load_spool(spool)
        path = path / RUN_NAME
    elif path.name == SPOOL_NAME:
        return load_spool(path)
    run = load_run_doc(path)
    return run, _document(run)


def _trends(db: str, run: RunDoc, exprs: Sequence[FailExpr]) -> dict[str, Trend]:
    """Each test's trend over its last runs in the history (on the machine that ran it) and this run."""
    shard = read_shard(run.path)
    with open_history(db) as history:
        earlier = earlier_records(history, run.records.values(), lambda r: machine_id(shard.machine_of(r)),
                                  TREND_RUNS - 1, run.created)
    return trends(run.records.values(), earlier, [e.metric for e in exprs])


def main(argv: Sequence[str] | None = None, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    """Run ``gpuutil report``; returns the exit status (0 or 2)."""
    out = stdout if stdout is not None else sys.stdout
    err = stderr if stderr is not None else sys.stderr
    args = parse_or_exit_code(build_parser().parse_args, sys.argv[1:] if argv is None else argv, err)
    if isinstance(args, int):
        return args
    try:
        exprs = parse_fail_exprs(args.fail if args.fail else DEFAULT_FAIL_EXPRS)
    except ValueError as exc:
        print(f"error: --fail: {exc}", file=err)
        return EXIT_USAGE
    try:
        run, doc = _run_of(Path(args.run))
        base = load_run_doc(args.baseline) if args.baseline else None
    except RunDocError as exc:
        print(f"error: {exc}", file=err)
        return EXIT_USAGE
    trends = None
    if args.history is not None:
        try:
            trends = _trends(args.history, run, exprs)
        except (RunDocError, HistoryError) as exc:
            print(f"error: {exc}", file=err)
            return EXIT_USAGE
    view = None
    if base is not None:
        if base.machine_id != machine_id(run.machine_info):
            print(f"warning: machine ids differ (baseline {base.machine_id}, run {machine_id(run.machine_info)}); "
                  "comparing anyway", file=err)
        view = baseline_view_of(base, run.records.values(), exprs, label=args.baseline)
    timelines, problem = read_sidecar(run.path)
    if problem:
        print(f"warning: {problem}", file=err)
    target = Path(args.output) if args.output else run.path.parent / DEFAULT_NAME
    try:
        written = write_html_report(target, doc, baseline=view, traces_dir=run.path.parent / "traces", trace_name=safe_name,
                                    trends=trends, timelines=timelines,
                                    timeline_budget=None if args.timelines == "all" else PAGE_BUDGET_BYTES)
    except OSError as exc:
        print(f"error: {target}: cannot write: {exc.strerror or exc}", file=err)
        return EXIT_USAGE
    summary = f"wrote {written} ({len(run.records)} tests" + (f", {len(timelines)} with a timeline" if timelines else "")
    if view is not None:
        summary += f"; {len(view.regressions)} regression(s) against {args.baseline}"
    print(summary + ")", file=out)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
