"""(CPU) hook_timer's µs a test per hook for two checkouts of the plugin, interleaved in one run.

    python benchmarks/checks/hooks_before_after.py BEFORE_ROOT AFTER_ROOT [--tests 1000]
        [--rounds 3] [--out FILE.json] [-- EXTRA --gpu-util ARGS]

Each root is a checkout (``git archive COMMIT | tar -x -C DIR`` makes one); its ``pytest_gpuutil``
is put first on PYTHONPATH, so the same interpreter runs either. Per round, one ``--gpu-util`` run
of each (the order alternating), each a fresh process over the same synthetic suite
(cost_line_check.py's: the tests' synthetic GPU, four kernels and a host wait a test) with
``-p hook_timer``. Prints, per hook or method, the median over rounds of its µs a test before and
after; nested names count twice (a method inside a hook).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
#: hook_timer.py
DIAGNOSTICS = ROOT / "benchmarks" / "diagnostics"


def run_once(folder: Path, root: Path, extra: list[str]) -> dict:
    out_dir = folder / "out"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "hook_timer", "test_small.py",
           "--gpu-util", f"--gpu-util-dir={out_dir}", *extra]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), str(DIAGNOSTICS), str(folder)]), COLUMNS="250")
    done = subprocess.run(cmd, cwd=folder, capture_output=True, text=True, env=env, timeout=900)
    found = re.search(r"^HOOKTIME (\{.*\})$", done.stdout, re.M)
    if found is None or done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} (root {root}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return json.loads(found.group(1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--tests", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path)
    parser.add_argument("extra", nargs="*", help="more --gpu-util options (after --)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(HERE))
    from cost_line_check import SYNTHETIC_TESTS
    from tests.helpers import SYNTHETIC_CONFTEST

    roots = {"before": args.before.resolve(), "after": args.after.resolve()}
    timed: dict[str, list[dict]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory(prefix="hooks_ab_") as tmp:
        folder = Path(tmp)
        (folder / "conftest.py").write_text("import torch  # noqa: F401 - a GPU suite has it loaded\n"
                                            + SYNTHETIC_CONFTEST)
        (folder / "test_small.py").write_text(SYNTHETIC_TESTS.replace("{tests}", str(args.tests)))
        for which in ("before", "after"):  # warm the bytecode caches
            run_once(folder, roots[which], list(args.extra))
        for index in range(args.rounds):
            for which in (("before", "after") if index % 2 == 0 else ("after", "before")):
                timed[which].append(run_once(folder, roots[which], list(args.extra)))
    n = args.tests
    names = sorted({k for runs in timed.values() for run in runs for k in run})
    table = {}
    for name in names:
        table[name] = {which: (statistics.median(run[name][1] for run in runs if name in run) / n * 1e6
                               if any(name in run for run in runs) else None) for which, runs in timed.items()}
    print(f"{n} tests (synthetic GPU), {args.rounds} interleaved rounds, hook_timer µs a test "
          f"(median over rounds; nested names count twice)")
    print(f"  {'before':>9} {'after':>9}  name")
    for name, row in sorted(table.items(), key=lambda kv: -max(v or 0.0 for v in kv[1].values())):
        cells = " ".join(f"{row[w]:9.1f}" if row[w] is not None else f"{'-':>9}" for w in ("before", "after"))
        print(f"  {cells}  {name}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"tests": n, "rounds": args.rounds, "extra": args.extra,
                                        "roots": {k: str(v) for k, v in roots.items()},
                                        "us_per_test": table, "runs": timed}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
