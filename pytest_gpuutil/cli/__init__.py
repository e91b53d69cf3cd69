"""``gpuutil`` / ``python -m pytest_gpuutil``: analyze traces, compare runs.

The subcommands are imported only when run, so ``gpuutil --help`` starts fast.
"""
from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing's, without importing typing at run time (gpuutil analyze's start-up)
if TYPE_CHECKING:
    from typing import Optional, Sequence

EXIT_USAGE = 2

USAGE = """usage: gpuutil COMMAND ...

commands:
  analyze TRACE [TRACE ...] [--format table|json|csv]   analyse torch.profiler traces
  compare BASELINE.json CURRENT.json [--fail EXPR]...   compare two --gpu-util runs (exit 1 on regression)
  compare --history DB CURRENT.json [--fail EXPR]...    compare a run with its last runs in a run history
  report RUN.json [--baseline BASELINE.json] [-o OUT]   render a run as a self-contained HTML report
  merge RUN.json [RUN.json ...] -o OUT.json             merge CI shards into one run
  history [--db PATH] [--format table|json] [TEST ...]  the run history: runs and per-test series
  trace RUN_DIR TEST [-o OUT.json]                      one test's window as a Chrome trace (Perfetto)
"""


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        sys.stdout.write(USAGE)
        return 0 if argv else EXIT_USAGE
    command, rest = argv[0], argv[1:]
    if command == "analyze":
        from pytest_gpuutil.cli.analyze import analyze_main

        return analyze_main(rest)
    if command == "compare":
        from pytest_gpuutil.cli.compare import main as compare_main

        return compare_main(rest)
    if command == "report":
        from pytest_gpuutil.cli.report import main as report_main

        return report_main(rest)
    if command == "merge":
        from pytest_gpuutil.cli.merge import main as merge_main

        return merge_main(rest)
    if command == "history":
        from pytest_gpuutil.cli.history import main as history_main

        return history_main(rest)
    if command == "trace":
        from pytest_gpuutil.cli.window_trace import main as trace_main

        return trace_main(rest)
    print(f"error: unknown command {command!r} (expected analyze, compare, report, merge, history or trace)",
          file=sys.stderr)
    return EXIT_USAGE

