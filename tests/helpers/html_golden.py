"""Golden HTML pages: the report rendered for fixed run documents, kept gzip'd in tests/data/html_golden/.

``tests/report/test_html_golden.py`` renders every case again and compares the page byte for byte
with its golden file. When a change to the page is intended, write the golden files again and
commit them with the change::

    python -m tests.helpers.html_golden --update

(run from the repository root; without ``--update`` it only says which pages differ). The inputs
are stored beside the pages (``*_run.json.gz``, ``*_baseline.json.gz``), so the pages depend on
nothing else: README.md in that folder says where each input came from.
"""
from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from pytest_gpuutil.gates.regression import DEFAULT_FAIL_EXPRS, parse_fail_exprs
from pytest_gpuutil.records import TestRecord
from pytest_gpuutil.report.html_report import baseline_view_of, write_html_report
from pytest_gpuutil.rundoc.document import RunDoc, machine_id

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "html_golden"
UPDATE_COMMAND = "python -m tests.helpers.html_golden --update"


@dataclass(frozen=True)
class Case:
    """One golden page: a run document, optionally a baseline, and the tests whose trace files exist."""

    name: str
    run: str
    baseline: Optional[str] = None
    traced: tuple[str, ...] = ()
    #: the tests' timelines (a timelines.json.gz as a run writes it beside gpu_util.json)
    timelines: Optional[str] = None

    @property
    def page(self) -> Path:
        return GOLDEN / f"{self.name}.html.gz"


CASES = (
    Case("synthetic", "synthetic_run.json.gz", traced=(
        "tests/compile/test_inductor.py::test_layernorm[bf16-19]", "tests/compile/test_inductor.py::test_mlp[fp16-67]")),
    Case("synthetic_vs_baseline", "synthetic_run.json.gz", "synthetic_baseline.json.gz"),
    Case("h100", "h100_run.json.gz", traced=(
        "examples/test_gpu_workloads.py::test_conv2d_forward_backward", "examples/test_gpu_workloads.py::test_scaled_dot_product_attention")),
    Case("h200_vs_baseline", "h200_run.json.gz", "h200_baseline.json.gz"),
    Case("h200_two_gpus", "h200_two_gpus_run.json.gz"),
    Case("synthetic_counters", "synthetic_counters_run.json.gz"),
    Case("planted_timeline", "planted_timeline_run.json.gz", timelines="planted_timelines.json.gz"),
)


def read_json_gz(name: str) -> Any:
    return json.loads(gzip.decompress((GOLDEN / name).read_bytes()).decode("utf-8"))


def trace_name(test: str) -> str:
    """A trace file's name for a test (fixed here, so the golden pages do not follow the plugin's naming)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", test)


def render(case: Case) -> bytes:
    """The page ``write_html_report`` writes for the case (in a temporary folder, links relative to it)."""
    doc = read_json_gz(case.run)
    unknown = set(case.traced) - {t["test"] for t in doc["tests"]}
    if unknown:
        raise ValueError(f"{case.name}: traced tests not in {case.run}: {sorted(unknown)}")
    view = None
    if case.baseline is not None:
        base = read_json_gz(case.baseline)
        run = RunDoc(Path(case.baseline), base.get("machine_info") or {},
                     {t["test"]: TestRecord.from_dict(t) for t in base["tests"]}, base.get("created"))
        current = [TestRecord.from_dict(t) for t in doc["tests"]]
        view = baseline_view_of(run, current, parse_fail_exprs(DEFAULT_FAIL_EXPRS),
                                label=f".gpu_util/baselines/{machine_id(run.machine_info)}/main.json")
    with tempfile.TemporaryDirectory() as tmp:
        traces = Path(tmp) / "traces"
        traces.mkdir()
        for test in case.traced:
            (traces / f"{trace_name(test)}.json.gz").write_bytes(b"")
        timelines = read_json_gz(case.timelines)["tests"] if case.timelines else None
        path = write_html_report(Path(tmp) / "report.html", doc, baseline=view, traces_dir=traces, trace_name=trace_name,
                                 timelines=timelines)
        return path.read_bytes()


def golden(case: Case) -> bytes:
    return gzip.decompress(case.page.read_bytes())


def first_difference(got: bytes, want: bytes) -> str:
    """Where two pages part, with a little context of each."""
    at = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
    return (f"{len(got)} bytes against {len(want)} in the golden page; first difference at byte {at}: "
            f"now {got[max(at - 40, 0):at + 60]!r}, golden {want[max(at - 40, 0):at + 60]!r}")


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.helpers.html_golden", description=__doc__.split("\n")[0])
    parser.add_argument("--update", action="store_true", help="write the golden pages again from the current code")
    args = parser.parse_args(argv)
    differ = 0
    for case in CASES:
        page = render(case)
        same = case.page.exists() and golden(case) == page
        if args.update and not same:
            case.page.write_bytes(gzip.compress(page, compresslevel=9, mtime=0))
        print(f"{case.page.name}: {'same' if same else 'written' if args.update else 'differs'} ({len(page)} bytes)")
        differ += not same
    return 0 if args.update or not differ else 1


if __name__ == "__main__":
    sys.exit(main())
