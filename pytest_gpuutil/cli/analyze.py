"""``gpuutil analyze TRACE ...``: busy %, categories, top kernels and findings of trace files."""
from __future__ import annotations

import os
import sys

from pytest_gpuutil.analysis.classify import KernelClassifier, parse_rules
from pytest_gpuutil.analysis.finding_records import DEFAULT_FLOOR, Floor, split_by_floor
from pytest_gpuutil.analysis.findings import Finding, find_in_trace, parse_rule_ids
from pytest_gpuutil.analysis.summary import TraceSummary, analyze
from pytest_gpuutil.cli.analyze_args import parse_analyze_args
from pytest_gpuutil.traces.reader import TraceError, read_trace

TYPE_CHECKING = False  # typing's, without importing typing at run time (gpuutil analyze's start-up)
if TYPE_CHECKING:
    from typing import Optional, Sequence

CSV_FIELDS = (
    "path",
    "window_us",
    "window_source",
    "busy_us",
    "busy_pct",
    "mm_conv_pct",
    "kernel_count",
    "top_kernel",
    "findings",
)
EXIT_BAD_INPUT = 2


def analyze_main(argv: Sequence[str]) -> int:
    args = parse_analyze_args(argv)
    try:
        classifier = KernelClassifier(parse_rules("\n".join(args.rule), source="--rule"))
        ignore = parse_rule_ids(args.findings_ignore, "--findings-ignore")
        floor = _floor(args.findings_floor)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    summaries: list[TraceSummary] = []
    findings: list[Optional[tuple[Finding, ...]]] = []
    timelines: dict[str, dict] = {}
    failed = False
    for path in args.traces:
        try:
            trace = read_trace(path)
            summaries.append(analyze(trace, classifier=classifier, top=args.top))
            findings.append(find_in_trace(trace, classifier=classifier, ignore=ignore, summary=summaries[-1])
                            if args.findings == "on" else None)
            if args.html:
                from pytest_gpuutil.analysis.timeline import build, encode

                timelines[path] = encode(build(trace.columns, summaries[-1].window, classifier, syncs=trace.syncs,
                                               gap_ns=int(args.timeline_gap * 1e6)))
        except TraceError as exc:
            print(f"error: {exc}", file=sys.stderr)
            failed = True
    sys.stdout.write(render(summaries, args.format, several=len(args.traces) > 1, findings=findings, floor=floor))
    sys.stdout.flush()
    if args.html and summaries:
        try:
            write_trace_page(args.html, summaries, findings, timelines)
        except OSError as exc:
            print(f"error: --html: cannot write {args.html}: {exc.strerror or exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
    return EXIT_BAD_INPUT if failed else 0


def _floor(text: str) -> Optional[Floor]:
    """--findings-floor's value (None: the default), or ValueError naming the option."""
    if not text.strip():
        return None
    from argparse import ArgumentTypeError

    from pytest_gpuutil.option_types import findings_floor

    try:
        return findings_floor(text)
    except ArgumentTypeError as exc:
        raise ValueError(f"--findings-floor: {exc}") from None


def trace_record(summary: TraceSummary, found: Optional[tuple[Finding, ...]]) -> dict:
    """A trace as a row of the HTML report (the shape of a run document's test record)."""
    window_ms = summary.window_us / 1000
    return {
        "test": summary.path, "outcome": "trace", "wall_ms": window_ms, "gpu_busy_ms": summary.busy_us / 1000,
        "busy_pct": summary.busy_pct, "mm_conv_pct": summary.mm_conv_pct,
        "attention_pct": summary.category_pct_of_window("attention"),
        "communication_pct": summary.category_pct_of_window("communication"),
        "memcpy_pct": summary.category_pct_of_window("memcpy"), "kernel_count": summary.kernel_count,
        "top_kernel": summary.top_kernels[0].name if summary.top_kernels else None,
        "top_kernels": [{"name": k.name, "category": k.category, "count": k.count, "total_us": k.total_us,
                         "pct_of_window": k.pct_of_window} for k in summary.top_kernels[:5]],
        "idle_gaps": [{"device": g.device, "start_us": g.start_us, "dur_us": g.dur_us} for g in summary.idle_gaps[:3]],
        "devices": [d.device for d in summary.devices],
        "gpu_busy_us_by_device": {d.device: d.busy_us for d in summary.devices},
        "categories": {c.name: {"time_us": c.time_us, "share_of_busy": c.share_of_busy,
                                "pct_of_window": c.pct_of_window, "count": c.count} for c in summary.categories},
        "findings": None if found is None else [f.to_dict() for f in found],
        "note": f"window: {summary.window_source}",
    }


def write_trace_page(target: str, summaries: Sequence[TraceSummary], findings: Sequence[Optional[tuple[Finding, ...]]],
                     timelines: dict[str, dict]) -> None:
    """The HTML report of the analysed traces, each trace a row with its timeline (all of them, not fitted)."""
    import datetime

    from pytest_gpuutil.report.html_report import write_html_report

    doc = {"format": "pytest-gpuutil", "version": 1,
           "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "machine_info": {}, "tests": [trace_record(s, f) for s, f in zip(summaries, findings)]}
    write_html_report(target, doc, timelines=timelines, timeline_budget=None)


def render(summaries: Sequence[TraceSummary], fmt: str, several: bool,
           findings: Optional[Sequence[Optional[tuple[Finding, ...]]]] = None, floor: Optional[Floor] = None) -> str:
    """The CLI's output for the analysed traces in one format (``findings``: per trace, None when not
    looked for; those with a saving under ``floor`` are left out of the table and CSV, and the JSON
    keeps them under ``below_floor``)."""
    found = list(findings) if findings is not None else [None] * len(summaries)
    if fmt == "json":
        import json  # only for this format

        docs = [s.to_dict() for s in summaries]
        for doc, of_trace in zip(docs, found):
            if of_trace is not None:
                reported, below = split_by_floor(of_trace, floor or DEFAULT_FLOOR)
                doc["findings"] = [f.to_dict() for f in reported]
                doc["below_floor"] = [f.to_dict() for f in below]
        if not docs and not several:
            return ""
        return json.dumps(docs if several else docs[0], indent=2) + "\n"
    if fmt == "csv":
        import csv
        import io

        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(CSV_FIELDS)
        for s, of_trace in zip(summaries, found):
            top = s.top_kernels[0].name if s.top_kernels else ""
            writer.writerow(
                [s.path, f"{s.window_us:.3f}", s.window_source, f"{s.busy_us:.3f}", f"{s.busy_pct:.6f}",
                 f"{s.mm_conv_pct:.6f}", s.kernel_count, top,
                 " ".join(f.rule for f in split_by_floor(of_trace or (), floor or DEFAULT_FLOOR)[0])]
            )
        return out.getvalue()
    from pytest_gpuutil.report.findings_report import trace_findings_text
    from pytest_gpuutil.report.tables import trace_report

    return "".join(trace_report(s, _label(s.path)) + trace_findings_text(of_trace, floor) + "\n\n"
                   for s, of_trace in zip(summaries, found))


def _label(path: str) -> str:
    base = os.path.basename(path)
    for suffix in (".gz", ".json"):
        if base.endswith(suffix):
            base = base[: -len(suffix)]
    return base
