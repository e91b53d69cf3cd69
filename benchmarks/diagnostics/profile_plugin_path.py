"""(GPU) Where --gpu-util's own time goes, per test: cProfile over one in-process pytest run.

    python benchmarks/diagnostics/profile_plugin_path.py --out DIR [--suite small] [-- extra pytest args]

Runs ``pytest --gpu-util`` on one of benchmarks/overhead_suites/ under cProfile and reports the
time spent in pytest-gpuutil's own hooks (cumulative, per test) and the top functions of the
plugin's code. Writes DIR/plugin_path_<suite>.txt.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]  # benchmarks/
SUITES = {"small": "test_small_ops.py", "launch_bound": "test_launch_bound.py", "gpu_bound": "test_gpu_bound.py"}
HOOKS = ("pytest_runtest_call", "pytest_runtest_makereport", "pytest_runtest_logreport", "pytest_runtest_protocol",
         "pytest_runtestloop", "pytest_sessionfinish", "pytest_terminal_summary")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--suite", default="small", choices=sorted(SUITES))
    args, extra = parser.parse_known_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    import pytest

    suite = HERE / "overhead_suites" / SUITES[args.suite]
    profiler = cProfile.Profile()
    profiler.enable()
    code = pytest.main([str(suite), "-q", "-p", "no:cacheprovider", "--gpu-util",
                        f"--gpu-util-dir={tempfile.mkdtemp(prefix='plugin_path_')}", *[e for e in extra if e != "--"]])
    profiler.disable()
    stats = pstats.Stats(profiler)
    tests = {"small": 300, "launch_bound": 20, "gpu_bound": 20}[args.suite]
    lines = [f"suite {args.suite}: {tests} tests, pytest exit {int(code)}"]
    for (filename, _, name), row in sorted(stats.stats.items(), key=lambda kv: -kv[1][3]):  # type: ignore[attr-defined]
        if "pytest_gpuutil" in filename and name in HOOKS:
            calls, cumulative = row[1], row[3]
            lines.append(f"  {name:28} {calls:6d} calls  {cumulative * 1000:9.1f} ms  {cumulative * 1000 / tests:7.3f} ms/test")
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats("pytest_gpuutil", 50)
    text.write("\nown time, every module (the plugin's calls into torch and CUPTI show here):\n")
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(40)
    lines.append(text.getvalue())
    (args.out / f"plugin_path_{args.suite}.txt").write_text("\n".join(lines))
    print("\n".join(lines[: 1 + len(HOOKS)]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
