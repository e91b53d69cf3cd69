"""What listing every kernel costs the run document: gpu_util.json per test with and without ``kernels``.

    python3 validation/gates/why_budget.py [TRACE.json.gz ...] [--out FILE.json]

Each trace (default: tests/data/*.json.gz, tests/data/zoo/*.json.gz and /work/shared/traces/h200/)
is one test's call: its record is built as the plugin builds it (window_stats over the trace's span,
record_builder's fields) and written as gpu_util.json writes records (indented JSON), with its
kernel list and without. Prints the growth per trace and over all of them; the budget is 30 %.
The history keeps records as compact JSON (history/store.py) without top kernels and idle gaps; its
``kernels`` go in as ``[name, count, µs]`` rows like the file's.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from pytest_gpuutil.analysis.classify import KernelClassifier  # noqa: E402
from pytest_gpuutil.analysis.windows import window_stats  # noqa: E402
from pytest_gpuutil.gates.kernel_families import compact_kernels  # noqa: E402
from pytest_gpuutil.history.store import _record_json  # noqa: E402
from pytest_gpuutil.records import TestRecord  # noqa: E402
from pytest_gpuutil.rundoc.document import json_bytes, run_document  # noqa: E402
from pytest_gpuutil.traces.model import Window  # noqa: E402
from pytest_gpuutil.traces.reader import read_trace  # noqa: E402

BUDGET_PCT = 30.0


def record_of(path: Path, classifier: KernelClassifier) -> TestRecord:
    trace = read_trace(str(path))
    start, end = trace.profiler_span
    (stats,) = window_stats(trace.columns, [Window(start, end, "test_call")], classifier)
    return TestRecord(
        test=f"tests/test_{path.name.split('.')[0]}.py::test_it", outcome="passed", wall_ms=(end - start) / 1e6,
        gpu_busy_ms=stats.busy_us / 1000, busy_pct=stats.busy_pct, mm_conv_pct=stats.mm_conv_pct,
        kernel_count=stats.kernel_count, top_kernel=stats.top_kernel,
        top_kernels=tuple({"name": n, "category": c, "count": k, "total_us": t, "pct_of_window": p}
                          for n, c, k, t, _, p in stats.kernel_rows),
        idle_gaps=tuple({"device": d, "start_us": s, "dur_us": u} for d, s, u in stats.gap_rows),
        devices=tuple(d for d, _ in stats.devices),
        categories={n: {"time_us": t, "share_of_busy": s, "pct_of_window": p, "count": c}
                    for n, t, s, p, c in stats.category_rows},
        findings=(),
        kernels=compact_kernels(stats.kernel_totals),
    )


def size(records: list[TestRecord]) -> int:
    return len(json_bytes(run_document(records, {"gpu_model": "NVIDIA H200"}, "2026-11-27T00:00:00")))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="*", type=Path)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    traces = args.traces or sorted([*(ROOT / "tests/data").glob("*.json.gz"), *(ROOT / "tests/data/zoo").glob("*.json.gz"),
                                    *Path("/work/shared/traces/h200").glob("*.json.gz")])
    classifier = KernelClassifier()
    rows, with_all, without_all = [], [], []
    for path in traces:
        try:
            record = record_of(path, classifier)
        except Exception as exc:  # noqa: BLE001 - a trace this reader cannot take: skipped, said
            print(f"{path.name}: skipped ({type(exc).__name__}: {exc})")
            continue
        bare = dataclasses.replace(record, kernels=())
        with_all.append(record)
        without_all.append(bare)
        a, b = size([record]), size([bare])
        rows.append({"trace": str(path), "kernels": len(record.kernels), "bytes_without": b, "bytes_with": a,
                     "growth_pct": round(100.0 * (a - b) / b, 1)})
        print(f"{path.name:45s} {len(record.kernels):4d} kernels  {b:7d} -> {a:7d} bytes  {rows[-1]['growth_pct']:+6.1f}%")
    total_with, total_without = size(with_all), size(without_all)
    growth = 100.0 * (total_with - total_without) / total_without
    history_with = sum(len(_record_json(r)) for r in with_all)
    history_without = sum(len(_record_json(r)) for r in without_all)
    history_growth = 100.0 * (history_with - history_without) / max(1, history_without)
    print(f"the history's records (compact JSON): {history_without} -> {history_with} bytes, {history_growth:+.1f}%")
    print(f"all {len(rows)} as one run: {total_without} -> {total_with} bytes, {growth:+.1f}% (budget {BUDGET_PCT:g}%)")
    if args.out:
        args.out.write_text(json.dumps({"traces": rows, "bytes_without": total_without, "bytes_with": total_with,
                                        "growth_pct": round(growth, 1), "budget_pct": BUDGET_PCT,
                                        "history_bytes_without": history_without, "history_bytes_with": history_with,
                                        "history_growth_pct": round(history_growth, 1)}, indent=1) + "\n")
    return 0 if growth <= BUDGET_PCT else 1


if __name__ == "__main__":
    sys.exit(main())
