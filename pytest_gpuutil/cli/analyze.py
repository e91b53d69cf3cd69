"""``gpuutil analyze TRACE ...``: busy %, categories and top kernels of trace files."""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Sequence

from pytest_gpuutil.analysis.classify import KernelClassifier, parse_rules
from pytest_gpuutil.analysis.summary import TraceSummary, analyze
from pytest_gpuutil.traces.reader import TraceError, read_trace

CSV_FIELDS = (
    "path",
    "window_us",
    "window_source",
    "busy_us",
    "busy_pct",
    "mm_conv_pct",
    "kernel_count",
    "top_kernel",
)
EXIT_BAD_INPUT = 2


def _analyze_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpuutil analyze",
        description="GPU busy %, kernel categories and top kernels of torch.profiler traces "
        "(Chrome/Kineto JSON, .json or .json.gz).",
    )
    parser.add_argument("traces", nargs="+", metavar="TRACE")
    parser.add_argument("--format", choices=("table", "json", "csv"), default="table")
    parser.add_argument("--top", type=int, default=10, help="kernels listed per trace (default 10)")
    parser.add_argument(
        "--rule",
        action="append",
        default=[],
        metavar="CATEGORY=REGEX",
        help="a kernel rule tried before the built-in ones (repeatable; first match wins)",
    )
    return parser


def analyze_main(argv: Sequence[str]) -> int:
    args = _analyze_parser().parse_args(argv)
    try:
        classifier = KernelClassifier(parse_rules("\n".join(args.rule), source="--rule"))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    summaries: list[TraceSummary] = []
    failed = False
    for path in args.traces:
        try:
            summaries.append(analyze(read_trace(path), classifier=classifier, top=args.top))
        except TraceError as exc:
            print(f"error: {exc}", file=sys.stderr)
            failed = True
    sys.stdout.write(render(summaries, args.format, several=len(args.traces) > 1))
    sys.stdout.flush()
    return EXIT_BAD_INPUT if failed else 0


def render(summaries: Sequence[TraceSummary], fmt: str, several: bool) -> str:
    """The CLI's output for the analysed traces in one format."""
    if fmt == "json":
        docs = [s.to_dict() for s in summaries]
        if not docs and not several:
            return ""
        return json.dumps(docs if several else docs[0], indent=2) + "\n"
    if fmt == "csv":
        import csv
        import io

        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(CSV_FIELDS)
        for s in summaries:
            top = s.top_kernels[0].name if s.top_kernels else ""
            writer.writerow(
                [s.path, f"{s.window_us:.3f}", s.window_source, f"{s.busy_us:.3f}", f"{s.busy_pct:.6f}",
                 f"{s.mm_conv_pct:.6f}", s.kernel_count, top]
            )
        return out.getvalue()
    from pytest_gpuutil.report.tables import trace_report

    return "".join(trace_report(s, _label(s.path)) + "\n\n" for s in summaries)


def _label(path: str) -> str:
    base = os.path.basename(path)
    for suffix in (".gz", ".json"):
        if base.endswith(suffix):
            base = base[: -len(suffix)]
    return base
