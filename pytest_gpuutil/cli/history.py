"""``gpuutil history [--db PATH] [--format table|json] [--add RUN.json] [TEST ...]``: the run history.

Lists the runs (id, date, commit, branch, machine id, tests) and, per test, the series of each
metric, oldest run first; ``--format json`` prints ``{"db", "runs": [...], "tests": {test: {"runs",
"machine_ids", "outcomes", "metrics": {metric: [values]}}}}``. ``--add RUN.json`` appends a run file
(a merged one too) first. A TEST is a node id or a part of one. Exit status: 0, or 2 for bad input (a
missing, corrupt, foreign or newer-schema history, a bad run file, a TEST that matches nothing),
reported as one ``error: <file>: <problem>`` line on stderr.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Optional, Sequence, TextIO

from tabulate import tabulate

from pytest_gpuutil.cli.arguments import EXIT_OK, EXIT_USAGE, Parser, parse_or_exit_code
from pytest_gpuutil.history.merge import read_shard
from pytest_gpuutil.history.provenance import commit_and_branch
from pytest_gpuutil.history.series import history_document
from pytest_gpuutil.history.store import DEFAULT_PATH, HistoryError, open_history
from pytest_gpuutil.rundoc.document import RunDocError
from pytest_gpuutil.rundoc.number_format import format_value

PROG = "gpuutil history"
#: values shown per series in the table (the newest)
TABLE_VALUES = 10
#: runs listed in the table (the newest)
TABLE_RUNS = 20


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog=PROG, description="Show the run history that --gpu-util-history keeps: its runs and "
                                           "each test's metrics over them.",
                    epilog="Exit status: 0, 2 bad input.")
    parser.add_argument("tests", nargs="*", metavar="TEST", help="node ids (or parts of them) to show; default all")
    parser.add_argument("--db", default=DEFAULT_PATH, metavar="PATH", help=f"the history file (default {DEFAULT_PATH})")
    parser.add_argument("--format", choices=("table", "json"), default="table")
    parser.add_argument("--add", metavar="RUN.json", help="append this run file (e.g. a merged one) to the history "
                                                          "first (the file is made when missing)")
    parser.add_argument("--commit", help="with --add: the run's commit (default: the run's git commit, the CI's, git's)")
    parser.add_argument("--branch", help="with --add: the run's branch (default: the CI's or git's)")
    return parser


def _select(names: Sequence[str], wanted: Sequence[str]) -> tuple[list[str], list[str]]:
    """Node ids matching ``wanted`` (exactly, else as a part) and the patterns that matched none."""
    chosen: dict[str, None] = {}
    unmatched = []
    for pattern in wanted:
        found = [n for n in names if n == pattern] or [n for n in names if pattern in n]
        if not found:
            unmatched.append(pattern)
        chosen.update(dict.fromkeys(found))
    return list(chosen), unmatched


def render_table(doc: dict[str, Any]) -> str:
    """The runs, then one row per test and metric with its newest values."""
    runs = doc["runs"]
    lines = [f"history {doc['db']}: {len(runs)} run{'' if len(runs) == 1 else 's'}"]
    if len(runs) > TABLE_RUNS:
        lines.append(f"(the newest {TABLE_RUNS}; --format json lists all)")
    if runs:
        lines.append(tabulate(
            [[r["id"], r["date"], (r["commit"] or "")[:10], r["branch"] or "", r["machine_id"], r["tests"]]
             for r in runs[-TABLE_RUNS:]],
            headers=["run", "date", "commit", "branch", "machine", "tests"], tablefmt="simple", disable_numparse=True,
            colalign=("right", "left", "left", "left", "left", "right")))
    rows = []
    for test, series in doc["tests"].items():
        machines = sorted(set(series["machine_ids"]))
        for index, (metric, values) in enumerate(series["metrics"].items()):
            shown = values[-TABLE_VALUES:]
            text = " ".join("-" if v is None else format_value(v) for v in shown)
            more = "... " if len(values) > TABLE_VALUES else ""
            rows.append([test if index == 0 else "", metric, len(values), more + text,
                         ", ".join(machines) if index == 0 else ""])
    if rows:
        lines.append("")
        lines.append(tabulate(rows, headers=["test", "metric", "runs", "values, oldest first", "machine"],
                              tablefmt="simple", disable_numparse=True))
    elif runs:
        lines.append("(no test has a comparable metric)")
    return "\n".join(lines) + "\n"


def main(argv: Optional[Sequence[str]] = None, stdout: Optional[TextIO] = None, stderr: Optional[TextIO] = None) -> int:
    """Run ``gpuutil history``; returns the exit status (0 or 2)."""
    out = stdout if stdout is not None else sys.stdout
    err = stderr if stderr is not None else sys.stderr
    args = parse_or_exit_code(build_parser().parse_args, sys.argv[1:] if argv is None else argv, err)
    if isinstance(args, int):
        return args
    if (args.commit or args.branch) and not args.add:
        print("error: --commit and --branch go with --add RUN.json", file=err)
        return EXIT_USAGE
    try:
        if args.add:
            shard = read_shard(args.add)
            commit, branch = commit_and_branch(shard.run.machine_info)
            with open_history(args.db, create=True) as history:
                run_id = history.append(shard.run.machine_info, shard.run.records.values(),
                                        shard.run.created or "", args.commit or commit, args.branch or branch,
                                        shard.machines)
            print(f"added {args.add} to {args.db} as run {run_id} ({len(shard.run.records)} tests)", file=err)
        with open_history(args.db) as history:
            wanted = None
            if args.tests:
                names = list(history.test_names())
                wanted, unmatched = _select(names, args.tests)
                if unmatched:
                    print(f"error: {args.db}: no test matches {', '.join(map(repr, unmatched))}", file=err)
                    return EXIT_USAGE
            doc = history_document(history, wanted)
    except (HistoryError, RunDocError) as exc:
        print(f"error: {exc}", file=err)
        return EXIT_USAGE
    if args.format == "json":
        out.write(json.dumps(doc, indent=1) + "\n")
    else:
        out.write(render_table(doc))
        if len(doc["runs"]) < 3:
            print(f"note: {len(doc['runs'])} run(s): --gpu-util-compare history gates a test once it has 3 earlier runs",
                  file=err)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
