"""Size and speed of the HTML report on a synthetic run of 1,000 tests.

    python benchmarks/bench_html.py [--tests 1000] [--repeats 5] [--out DIR] [--screenshot PNG]
    python benchmarks/bench_html.py --timelines [--sizes 100,1000,10000] [--repeats 5] [--out DIR]

Builds a synthetic run document (``tests/helpers/synthetic_run.py``: realistic kernel names and category
mixes, some kernel_bench / gpu_trace results, memory figures on part of the tests, two GPUs and
four xdist workers) and a baseline for it with a few regressions, then measures, with and
without the baseline: the page's size in bytes, ``render_report``'s time (best of ``--repeats``),
and, when Chromium is installed, the page-load time in headless Chromium (navigation start to
the end of the load event with layout forced, so parsing, the page's script and layout are all
in it; best of ``--repeats`` fresh browsers). Goals: at most 2 MB and 1 s. Writes
``DIR/html_report.json`` and ``DIR/html_report.md``. ``--screenshot PNG`` also saves a
screenshot of a small synthetic report (14 tests, with a baseline).

``--timelines`` measures the page with timelines instead, as a run writes it by default: every
test with GPU work gets a synthetic timeline (``tests/helpers/timelines.py``), the 30 worst keep
theirs (``report/timelines.py``) and the page fits them into its budget; for each of ``--sizes``
it writes the page's bytes and its time to first paint (Chromium: navigation start to the end of
the load event with layout forced, the first rows and the timelines' data parsed; best of
``--repeats``) to ``DIR/timeline.json`` (``{"sizes": [{"tests", "bytes", "first_paint_ms"}]}``).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.report import host_info, markdown_table, text_table, write_results  # noqa: E402
from pytest_gpuutil.gates.regression import DEFAULT_FAIL_EXPRS, parse_fail_exprs  # noqa: E402
from pytest_gpuutil.records import TestRecord  # noqa: E402
from pytest_gpuutil.report.html_report import baseline_view, render_report  # noqa: E402
from tests.helpers.headless_chromium import find_chromium, run_page, screenshot  # noqa: E402
from tests.helpers.synthetic_run import synthetic_baseline, synthetic_document  # noqa: E402
from tests.helpers.timelines import synthetic_timelines  # noqa: E402

SIZE_GOAL_BYTES = 2_000_000
LOAD_GOAL_MS = 1000.0


def _baseline(doc: dict[str, Any]):
    exprs = parse_fail_exprs(DEFAULT_FAIL_EXPRS)
    current = [TestRecord.from_dict(t) for t in doc["tests"]]
    return baseline_view(".gpu_util/baselines/NVIDIA_H200-x2/main.json", synthetic_baseline(doc), current, exprs,
                         machine_id="NVIDIA_H200-x2", created="2026-11-21T18:02:11+00:00")


#: Injected into the page in Chromium: at the end of the load event, layout forced, the time the page
#: opened with its first rows; then, rows all added at once (the page itself does that after its first
#: paint), layout forced again, the time the whole table was laid out.
LOAD_SCRIPT = r"""
window.addEventListener("load", function () {
  void document.body.offsetHeight;
  var opened = performance.now(), first = document.querySelectorAll("#tests tbody tr").length;
  window.guReport.showAll();
  void document.body.offsetHeight;
  guHarness.done({
    dom_content_loaded_ms: performance.getEntriesByType("navigation")[0].domContentLoadedEventEnd,
    opened_ms: opened,
    rows_at_open: first,
    all_rows_ms: performance.now(),
    rows: document.querySelectorAll("#tests tbody tr").length
  });
});
"""
#: For the screenshot: open the detail view of the first test.
SHOW_DETAIL = 'window.addEventListener("load", function () { document.querySelector("#tests tbody tr").click(); });'


def measure(doc: dict[str, Any], baseline: Any, repeats: int, chromium: Optional[str], workdir: Path) -> dict[str, Any]:
    """Size, render time and (with Chromium) page-load time of one report."""
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        page = render_report(doc, baseline)
        times.append(time.perf_counter() - began)
    out: dict[str, Any] = {"bytes": len(page.encode("utf-8")), "render_ms": [t * 1000 for t in times],
                           "best_render_ms": min(times) * 1000}
    if chromium:
        loads = [run_page(chromium, page, LOAD_SCRIPT, workdir, virtual_time=False) for _ in range(repeats)]
        out["chromium"] = loads
        for key in ("opened_ms", "all_rows_ms"):
            values = sorted(r[key] for r in loads)
            out[f"best_{key}"], out[f"median_{key}"] = values[0], values[len(values) // 2]
        out["script_errors"] = sorted({e for r in loads for e in r["errors"]})
        out["rows_in_browser"] = loads[0]["rows"]
    return out


def timeline_page(tests: int) -> str:
    """The page of ``tests`` synthetic tests with timelines, as a run writes it by default."""
    from pytest_gpuutil.report.timelines import DEFAULT_COUNT, PAGE_BUDGET_BYTES, worst_first

    doc = synthetic_document(tests)
    kept = set(worst_first(doc["tests"], DEFAULT_COUNT))
    drawn = synthetic_timelines({"tests": [t for t in doc["tests"] if t["test"] in kept]})
    return render_report(doc, None, timelines=drawn, timeline_budget=PAGE_BUDGET_BYTES)


def measure_timelines(sizes: list[int], repeats: int, chromium: Optional[str], out: Optional[str]) -> int:
    """Bytes and time to first paint of the page with timelines, per number of tests."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for tests in sizes:
            page = timeline_page(tests)
            row: dict[str, Any] = {"tests": tests, "bytes": len(page.encode("utf-8")), "first_paint_ms": None,
                                   "timelines": page.count('"v":1,"w":')}
            if chromium:
                loads = [run_page(chromium, page, LOAD_SCRIPT, Path(tmp), virtual_time=False) for _ in range(repeats)]
                row["first_paint_ms"] = round(min(r["opened_ms"] for r in loads), 1)
                row["script_errors"] = sorted({e for r in loads for e in r["errors"]})
            rows.append(row)
    results = {"sizes": rows, "goals": {"bytes": SIZE_GOAL_BYTES, "first_paint_ms": LOAD_GOAL_MS, "at_tests": 1000},
               "host": host_info(), "chromium": chromium, "repeats": repeats,
               "first_paint": "navigation start to the end of the load event, layout forced (best of repeats)"}
    headers = ["tests", "bytes", "timelines", "first paint ms"]
    table = [[r["tests"], r["bytes"], r["timelines"], r["first_paint_ms"]] for r in rows]
    markdown = "\n".join([f"### HTML report with timelines (goals at 1,000 tests: <= {SIZE_GOAL_BYTES:,} bytes, "
                          f"first paint <= {LOAD_GOAL_MS:.0f} ms)", "", markdown_table(headers, table, digits=1)])
    if out:
        write_results(out, "timeline", results, markdown)
    print(text_table(headers, table, digits=1))
    return 0


def _pair(case: dict[str, Any], key: str) -> Optional[str]:
    return f"{case[f'best_{key}']:.0f} / {case[f'median_{key}']:.0f}" if f"best_{key}" in case else None


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default=None, help="folder for html_report.json/.md")
    parser.add_argument("--screenshot", default=None, metavar="PNG", help="save a screenshot of a small report here")
    parser.add_argument("--keep", default=None, metavar="DIR", help="also write the benchmarked pages here")
    parser.add_argument("--no-browser", action="store_true", help="size and render time only")
    parser.add_argument("--timelines", action="store_true", help="the page with timelines, per --sizes (timeline.json)")
    parser.add_argument("--sizes", default="100,1000,10000", help="with --timelines: numbers of tests, comma-separated")
    args = parser.parse_args(argv)
    chromium = None if args.no_browser else find_chromium()
    if args.timelines:
        return measure_timelines([int(n) for n in args.sizes.split(",")], args.repeats, chromium, args.out)
    doc = synthetic_document(args.tests)
    version = subprocess.run([chromium, "--version"], capture_output=True, text=True).stdout.strip() if chromium else None
    results: dict[str, Any] = {"tests": args.tests, "host": host_info(), "chromium": chromium, "chromium_version": version,
                               "goals": {"bytes": SIZE_GOAL_BYTES, "load_ms": LOAD_GOAL_MS}, "cases": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for case, baseline in (("without baseline", None), ("with baseline", _baseline(doc))):
            results["cases"][case] = measure(doc, baseline, args.repeats, chromium, Path(tmp))
            if args.keep:
                Path(args.keep).mkdir(parents=True, exist_ok=True)
                (Path(args.keep) / f"report_{case.replace(' ', '_')}.html").write_text(render_report(doc, baseline))
        if args.screenshot:
            small = synthetic_document(14, seed=7)
            page = Path(tmp) / "small.html"
            page.write_text(render_report(small, _baseline(small)), encoding="utf-8")
            browser = chromium or find_chromium()
            if browser:
                screenshot(browser, page, Path(args.screenshot), width=1440, height=2700, script=SHOW_DETAIL)
                results["screenshot"] = args.screenshot
    headers = ["case", "bytes", "render ms", "opens ms (best / median)", "all rows laid out ms (best / median)",
               "script errors"]
    rows = [[case, r["bytes"], r["best_render_ms"], _pair(r, "opened_ms"), _pair(r, "all_rows_ms"),
             len(r.get("script_errors", ())) if chromium else None] for case, r in results["cases"].items()]
    title = f"HTML report, {args.tests} synthetic tests (goals: <= {SIZE_GOAL_BYTES:,} bytes, opens in <= {LOAD_GOAL_MS:.0f} ms)"
    markdown = "\n".join([f"### {title}", "", markdown_table(headers, rows, digits=1), "",
                          f"Render: best of {args.repeats} (Python); Chromium: {args.repeats} fresh browsers each, "
                          f"navigation start to the end of the load event (opens) and to all rows laid out; browser: {version or 'not used'}; "
                          f"Python {results['host']['python']}, {results['host']['cpu_count']} CPUs."])
    if args.out:
        write_results(args.out, "html_report", results, markdown)
    print(title)
    print(text_table(headers, rows, digits=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
