"""(CPU) window_columns.figures alone over a flush's columns, for instruction counts a GPU record.

    python benchmarks/checks/figures_cost.py [--shape tiny|small] [--size N] [--calls 2] [--package DIR] [--out FILE]

``tiny``: 20 windows of N tiny kernels (flush_cost.py's launch-bound shape); ``small``: N windows of a small
test's four events. Each call runs inside ``operator.call``, so that callgrind counts them alone::

    valgrind --tool=callgrind --callgrind-out-file=/dev/null --collect-atstart=no \\
        --toggle-collect='_operator_call*' python ... --size 2000

(Collected over the calls; two sizes give the part a record). ``--out FILE`` pickles every figure (to compare
two checkouts' files byte for byte); ``--package DIR`` imports pytest_gpuutil from DIR.
"""
from __future__ import annotations

import argparse
import operator
import pickle
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIELDS = ("busy_us", "busy_pct", "mm_conv_pct", "kernel_count", "event_count", "devices", "category_rows",
          "kernel_rows", "gap_rows", "kernel_totals")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=("tiny", "small"), default="tiny")
    parser.add_argument("--size", type=int, default=2000)
    parser.add_argument("--calls", type=int, default=2)
    parser.add_argument("--package", type=Path)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    sys.path[:0] = [str((args.package or ROOT).resolve()), str(ROOT / "benchmarks" / "diagnostics")]
    import numpy as np

    import flush_cost as fc
    from pytest_gpuutil.analysis.classify import KernelClassifier
    from pytest_gpuutil.analysis.intervals.window_columns import figures

    gpu, _, spans = (fc.columns(20, args.size, fc.TINY, "Context Sync") if args.shape == "tiny"
                     else fc.columns(args.size, 4, fc.SMALL, "Stream Sync"))
    starts = np.asarray([a for a, _ in spans], dtype=np.int64)
    ends = np.asarray([b for _, b in spans], dtype=np.int64)
    classifier = KernelClassifier()
    found = figures(gpu, starts, ends, classifier)  # warm: the classifier's cache, first uses
    for _ in range(args.calls):
        operator.call(figures, gpu, starts, ends, classifier)
    if args.out is not None:
        args.out.write_bytes(pickle.dumps([getattr(found, name) for name in FIELDS]))
    print(f"figures() of {len(gpu)} events in {len(spans)} windows, {args.calls} calls")
    return 0


if __name__ == "__main__":
    sys.exit(main())
