"""``gpuutil trace RUN_DIR TEST [-o OUT.json]``: one test's window as a Chrome trace that Perfetto opens.

The window comes from the run's timelines (``timelines.json.gz`` beside ``gpu_util.json``: the worst
tests' by default, every test's with ``--gpu-util-timelines=all``): its kernels, copies and memsets
on one track per device and stream, the host's waits, the host's sampled places (a slice per sample,
named ``path:line function``) and the test's findings with their places (instant events at the
window's start). Times are µs from the window's start. TEST is a test id or a part of one that
names one test.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence, TextIO

from pytest_gpuutil.cli.arguments import EXIT_OK, EXIT_USAGE, Parser, parse_or_exit_code

EXIT_NOT_FOUND = 1
#: a sampled place's slice lasts until the next sample, at most this long (ns)
LONGEST_SAMPLE_NS = 20_000_000


def parser() -> Parser:
    p = Parser(prog="gpuutil trace", description="Write one test's window as a Chrome trace (Perfetto, chrome://tracing).")
    p.add_argument("run", metavar="RUN_DIR", help="the run's directory (or its gpu_util.json)")
    p.add_argument("test", metavar="TEST", help="the test's id, or a part of it that names one test")
    p.add_argument("-o", "--output", metavar="OUT.json", help="where to write it (default: RUN_DIR/trace_<test>.json)")
    return p


def _run_file(path: Path) -> Path:
    return path / "gpu_util.json" if path.is_dir() else path


def pick_test(wanted: str, tests: Sequence[str]) -> tuple[Optional[str], str]:
    """(the test ``wanted`` names, "") or (None, why not)."""
    if wanted in tests:
        return wanted, ""
    found = [t for t in tests if wanted in t]
    if len(found) == 1:
        return found[0], ""
    if not found:
        return None, f"no timeline of a test matching {wanted!r}"
    return None, f"{wanted!r} matches {len(found)} tests: {', '.join(found[:3])}{', ...' if len(found) > 3 else ''}"


def chrome_trace(test: str, timeline: Mapping[str, Any], findings: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """The Chrome-trace document of one test's compact timeline (see the module)."""
    from pytest_gpuutil.analysis.timeline import decode

    t = decode(timeline)
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": "host", "args": {"name": "host"}},
        {"ph": "X", "cat": "Trace", "name": test, "pid": "host", "tid": "window", "ts": 0, "dur": t.window_ns / 1000},
    ]
    for lane, key, start, dur in zip(t.lane.tolist(), t.key.tolist(), t.start.tolist(), t.dur.tolist()):
        where = t.lanes[int(lane)]
        name, kind, category = t.keys[int(key)]
        pid = f"GPU {where.device}" + (f" ({where.process})" if where.process else "")
        events.append({"ph": "X", "cat": kind, "name": name, "pid": pid, "tid": f"stream {where.stream}",
                       "ts": start / 1000, "dur": dur / 1000, "args": {"category": category}})
    for start, end, name in t.waits:
        events.append({"ph": "X", "cat": "cuda_sync", "name": name, "pid": "host", "tid": "waits",
                       "ts": start / 1000, "dur": (end - start) / 1000})
    samples = [s for s in timeline.get("hs") or () if isinstance(s, (list, tuple)) and len(s) == 2]
    for i, (at, label) in enumerate(samples):
        following = samples[i + 1][0] if i + 1 < len(samples) else t.window_ns
        length = max(1, min(int(following) - int(at), LONGEST_SAMPLE_NS))
        events.append({"ph": "X", "cat": "host_sample", "name": str(label).split(": ", 1)[0], "pid": "host",
                       "tid": "sampled places", "ts": int(at) / 1000, "dur": length / 1000,
                       "args": {"source": str(label)}})
    for finding in findings:
        events.append({"ph": "i", "s": "p", "cat": "finding", "name": str(finding.get("rule", "")), "pid": "host",
                       "tid": "findings", "ts": 0,
                       "args": {"message": finding.get("message", ""), "saving_ms": finding.get("saving_ms"),
                                "places": list(finding.get("places") or ())}})
    return {"displayTimeUnit": "ms", "traceEvents": events,
            "otherData": {"test": test, "source": "pytest-gpuutil", "window_us": t.window_ns / 1000}}


def main(argv: Sequence[str], out: Optional[TextIO] = None, err: Optional[TextIO] = None) -> int:
    out, err = out or sys.stdout, err or sys.stderr
    args = parse_or_exit_code(parser().parse_args, argv, err)
    if isinstance(args, int):
        return args
    from pytest_gpuutil.report.timelines import SIDECAR, read_sidecar

    run = _run_file(Path(args.run))
    timelines, problem = read_sidecar(run, "no test's window can be written")
    if problem:
        print(f"error: {problem}", file=err)
        return EXIT_USAGE
    if not timelines:
        print(f"error: {run.parent / SIDECAR}: no timelines in this run (--gpu-util-timelines keeps them)", file=err)
        return EXIT_NOT_FOUND
    test, why = pick_test(args.test, sorted(timelines))
    if test is None:
        print(f"error: {run.parent / SIDECAR}: {why} (timelines are kept for the worst tests; "
              "--gpu-util-timelines=all keeps every test's)", file=err)
        return EXIT_NOT_FOUND
    findings: Sequence[Mapping[str, Any]] = ()
    if run.is_file():
        from pytest_gpuutil.rundoc.reading import RunDocError, load_run_doc

        try:
            record = load_run_doc(run).records.get(test)
            findings = [f for f in (record.findings or ()) if isinstance(f, Mapping)] if record is not None else ()
        except RunDocError as exc:
            print(f"warning: {exc}; the trace has no findings", file=err)
    try:
        doc = chrome_trace(test, timelines[test], findings)
    except (ValueError, KeyError, TypeError) as exc:
        print(f"error: {run.parent / SIDECAR}: the timeline of {test} is malformed ({exc})", file=err)
        return EXIT_USAGE
    target = Path(args.output) if args.output else run.parent / f"trace_{re.sub(r'[^A-Za-z0-9_.-]+', '_', test)[:120]}.json"
    target.write_text(json.dumps(doc, separators=(",", ":")) + "\n", encoding="utf-8")
    print(f"wrote {target} ({len(doc['traceEvents'])} events; open it in https://ui.perfetto.dev)", file=out)
    return EXIT_OK
