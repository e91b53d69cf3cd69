"""Time ``gpuutil analyze`` as a whole process against the seed's analysis, and its start-up.

    python benchmarks/bench_cli_process.py [--trace BIG] [--tiny TINY] [--repeats 9] [--out DIR]

What a user waits for: every run is a fresh process, timed from before it is started to after it
has exited (interpreter start-up, imports, reading, analysis and printing all included). Peak
memory is the child's own ``ru_maxrss`` (``os.wait4`` in benchmarks/process_timer.py, a small
process of its own, so that a child's count does not start at this script's size). The sides:

- ours: ``gpuutil analyze TRACE --format json`` (the console script next to this Python, else
  ``python -m pytest_gpuutil``), output to /dev/null;
- seed: ``python -c`` running ``validation/seed_reference.py``'s ``seed_compute_utilization`` on
  the same file (its ``json.load`` analysis; torch, which the seed module imports, is not);
- start-up: ours on a tiny trace from ``tests/data``, and ``python -c pass`` for the floor.

The big trace defaults to ``benchmarks/data/h200_40k_kernels.json.gz`` decompressed to a plain
``.json`` in a temporary folder, as the seed reads JSON (``--keep-gzip`` times the ``.gz``). One
untimed run of each command comes first (page cache, bytecode cache), then the sides alternate
``--repeats`` times; best and median are reported. Python's bytecode cache goes to a temporary
``PYTHONPYCACHEPREFIX`` (users run with cached bytecode; nothing is written into the checkout)
unless ``--no-bytecode-cache``. Writes ``DIR/cli_process.json`` and ``DIR/cli_process.md``.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Any, Optional, Sequence

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.report import (  # noqa: E402
    host_info,
    markdown_table,
    median,
    ratio,
    text_table,
    write_results,
)

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIG_TRACE = os.path.join(REPO_ROOT, "benchmarks", "data", "h200_40k_kernels.json.gz")
TINY_TRACE = os.path.join(REPO_ROOT, "tests", "data", "bmm_bf16.json.gz")
SEED_SNIPPET = (
    "import sys; from validation.seed_reference import seed_compute_utilization; "
    "print(seed_compute_utilization(sys.argv[1]))"
)
#: goals of the issue: whole process ours/seed, peak RSS ours/seed, tiny-trace start-up
TIME_GOAL_HERE, TIME_GOAL_GPU_HOST, RSS_GOAL, STARTUP_GOAL_S = 0.15, 0.2, 0.5, 0.080


def stats(runs: Sequence[Sequence[float]]) -> dict[str, Any]:
    """Best and median wall time and median peak RSS of repeated runs ``(wall_s, maxrss_mb, rc)``."""
    walls = [r[0] for r in runs]
    rss = [r[1] for r in runs]
    return {"best_s": min(walls), "median_s": median(walls), "wall_s": walls,
            "peak_rss_mb": median(rss), "maxrss_mb": rss}


def gpuutil_command() -> list[str]:
    """The ``gpuutil`` console script next to this Python, else ``python -m pytest_gpuutil``."""
    script = os.path.join(os.path.dirname(sys.executable), "gpuutil")
    return [script] if os.access(script, os.X_OK) else [sys.executable, "-m", "pytest_gpuutil"]


def commands(big: str, tiny: str, before: Optional[str] = None) -> dict[str, list[str]]:
    """Every command timed, by name; with ``before``, that checkout's ``gpuutil analyze`` too."""
    ours = gpuutil_command()
    cmds = {
        "ours": [*ours, "analyze", big, "--format", "json"],
        "seed": [sys.executable, "-c", SEED_SNIPPET, big],
        "startup_tiny": [*ours, "analyze", tiny, "--format", "json"],
        "startup_tiny_table": [*ours, "analyze", tiny],
        "python_floor": [sys.executable, "-c", "pass"],
    }
    if before:
        run_before = ("import sys; sys.path.insert(0, sys.argv[1]); from pytest_gpuutil.cli import main; "
                      "sys.exit(main(sys.argv[2:]))")
        cmds["before"] = [sys.executable, "-c", run_before, before, "analyze", big, "--format", "json"]
        cmds["before_startup_tiny"] = [sys.executable, "-c", run_before, before, "analyze", tiny, "--format", "json"]
    return cmds


def child_env(pycache: Optional[str]) -> dict[str, str]:
    """The children's environment: the checkout importable, bytecode cached in ``pycache``."""
    env = dict(os.environ, PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if pycache is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = pycache
    return env


def check_outputs(cmds: dict[str, list[str]], env: dict[str, str]) -> dict[str, str]:
    """Run each command once (the untimed warm-up) and keep what it printed; a failure stops here."""
    outputs = {}
    for name, cmd in cmds.items():
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO_ROOT, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"{name} failed (rc={proc.returncode}): {proc.stderr.strip()[-1500:]}")
        outputs[name] = proc.stdout[-400:]
    return outputs


def measure(cmds: dict[str, list[str]], repeats: int, env: dict[str, str]) -> dict[str, Any]:
    """``repeats`` runs of every command, alternating, timed by benchmarks/process_timer.py.

    The timer is a small process of its own (``python -I -S``): a child's peak RSS counts from
    its fork, so children of this process would start at this process's size.
    """
    timer = [sys.executable, "-I", "-S", os.path.join(REPO_ROOT, "benchmarks", "process_timer.py")]
    request = {"commands": cmds, "repeats": repeats, "env": env, "cwd": REPO_ROOT}
    proc = subprocess.run(timer, input=json.dumps(request), capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"process_timer failed: {proc.stderr.strip()[-1500:]}")
    runs = json.loads(proc.stdout)
    for name, found in runs.items():
        failed = [r[2] for r in found if r[2] != 0]
        if failed:
            raise RuntimeError(f"{name} exited with {failed[0]}")
    return {name: stats(found) for name, found in runs.items()}


def build_report(trace: str, sides: dict[str, Any], notes: dict[str, Any]) -> tuple[dict[str, Any], str, str]:
    """The JSON record, the Markdown fragment and the terminal table."""
    ours, seed, tiny = sides["ours"], sides["seed"], sides["startup_tiny"]
    best_ratio = ratio(ours["best_s"], seed["best_s"])
    median_ratio = ratio(ours["median_s"], seed["median_s"])
    rss_ratio = ratio(ours["peak_rss_mb"], seed["peak_rss_mb"])
    verdict = {
        "time_ratio_here_ok": best_ratio is not None and best_ratio <= TIME_GOAL_HERE,
        "time_ratio_gpu_host_ok": best_ratio is not None and best_ratio <= TIME_GOAL_GPU_HOST,
        "peak_rss_ok": rss_ratio is not None and rss_ratio <= RSS_GOAL,
        "startup_ok": tiny["best_s"] <= STARTUP_GOAL_S,
    }
    headers = ["", "best s", "median s", "peak RSS MB", "ours/seed (best, median, RSS)", "goal"]
    rows = [
        ["ours: gpuutil analyze --format json", ours["best_s"], ours["median_s"], ours["peak_rss_mb"],
         f"{best_ratio:.3f}, {median_ratio:.3f}, {rss_ratio:.3f}",
         f"time <= {TIME_GOAL_HERE} (dev) / {TIME_GOAL_GPU_HOST} (H100/H200), RSS <= {RSS_GOAL}"],
        ["seed: json.load analysis", seed["best_s"], seed["median_s"], seed["peak_rss_mb"], "", ""],
        ["start-up: tiny trace, --format json", tiny["best_s"], tiny["median_s"], tiny["peak_rss_mb"], "",
         f"<= {STARTUP_GOAL_S}"],
        ["start-up: tiny trace, table", sides["startup_tiny_table"]["best_s"], sides["startup_tiny_table"]["median_s"],
         sides["startup_tiny_table"]["peak_rss_mb"], "", ""],
        ["python -c pass", sides["python_floor"]["best_s"], sides["python_floor"]["median_s"],
         sides["python_floor"]["peak_rss_mb"], "", ""],
    ]
    if "before" in sides:
        old_ratio = ratio(sides["before"]["best_s"], seed["best_s"])
        old_rss = ratio(sides["before"]["peak_rss_mb"], seed["peak_rss_mb"])
        rows.insert(2, ["before (--before checkout)", sides["before"]["best_s"], sides["before"]["median_s"],
                        sides["before"]["peak_rss_mb"], f"{old_ratio:.3f}, -, {old_rss:.3f}", ""])
        rows.insert(5, ["before: start-up, tiny trace, --format json", sides["before_startup_tiny"]["best_s"],
                        sides["before_startup_tiny"]["median_s"], sides["before_startup_tiny"]["peak_rss_mb"], "", ""])
    size_mb = os.path.getsize(trace) / 1e6
    title = f"Whole processes: {os.path.basename(trace)} ({size_mb:.1f} MB)"
    markdown = "\n".join([
        f"#### {title}", "",
        f"{len(ours['wall_s'])} runs of each command after one untimed run, the commands alternating; wall time from "
        f"start to exit; RSS = the child's ru_maxrss (median). Bytecode cache: {notes['bytecode_cache']}.", "",
        markdown_table(headers, rows, digits=3), "",
        f"Verdict: whole-process time ratio {best_ratio:.3f} (best) / {median_ratio:.3f} (median): "
        f"{'meets' if verdict['time_ratio_here_ok'] else 'misses'} <= {TIME_GOAL_HERE}, "
        f"{'meets' if verdict['time_ratio_gpu_host_ok'] else 'misses'} <= {TIME_GOAL_GPU_HOST}; peak RSS "
        f"{'meets' if verdict['peak_rss_ok'] else 'misses'} <= {RSS_GOAL}x; start-up "
        f"{'meets' if verdict['startup_ok'] else 'misses'} <= {STARTUP_GOAL_S * 1000:.0f} ms.",
    ])
    data = {"trace": os.path.abspath(trace), "size_mb": size_mb, "host": host_info(), "sides": sides,
            "time_ratio_best": best_ratio, "time_ratio_median": median_ratio, "rss_ratio": rss_ratio,
            "goals": {"time_ratio_here": TIME_GOAL_HERE, "time_ratio_gpu_host": TIME_GOAL_GPU_HOST,
                      "rss_ratio": RSS_GOAL, "startup_s": STARTUP_GOAL_S},
            "verdict": verdict, **notes}
    return data, markdown, f"{title}\n{text_table(headers, rows, digits=3)}"


def plain_copy(path: str, folder: str) -> str:
    """``path`` decompressed into ``folder`` when it is gzip'd (the seed reads JSON), else ``path``."""
    if not path.endswith(".gz"):
        return path
    target = os.path.join(folder, os.path.basename(path)[: -len(".gz")])
    with gzip.open(path, "rb") as src, open(target, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    return target


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default=BIG_TRACE, help="the big trace (default %(default)s)")
    parser.add_argument("--tiny", default=TINY_TRACE, help="the start-up trace (default %(default)s)")
    parser.add_argument("--repeats", type=int, default=9, help="timed runs per command (default %(default)s)")
    parser.add_argument("--out", default="bench_out", help="output folder (default %(default)s)")
    parser.add_argument("--keep-gzip", action="store_true", help="time the .gz itself instead of plain JSON")
    parser.add_argument("--no-bytecode-cache", action="store_true", help="compile every module in every run")
    parser.add_argument("--before", metavar="DIR", help="also time the pytest_gpuutil package in DIR (an older "
                        "checkout, e.g. from `git archive`), run as `python -c` with DIR first on sys.path")
    args = parser.parse_args(argv)
    for path in (args.trace, args.tiny):
        if not os.path.isfile(path):
            parser.error(f"no such trace file: {path}")
    if args.repeats < 1:
        parser.error("--repeats must be >= 1")
    with tempfile.TemporaryDirectory(prefix="bench_cli_") as scratch:
        big = args.trace if args.keep_gzip else plain_copy(args.trace, scratch)
        pycache = None if args.no_bytecode_cache else os.path.join(scratch, "pycache")
        env = child_env(pycache)
        cmds = commands(big, args.tiny, args.before)
        outputs = check_outputs(cmds, env)
        print(f"timing {len(cmds)} commands x {args.repeats} on {big}", file=sys.stderr)
        sides = measure(cmds, args.repeats, env)
        notes = {"commands": cmds, "outputs": outputs, "timed_file": os.path.basename(big),
                 "bytecode_cache": "off (every module compiled in every run)" if pycache is None
                 else "on (a temporary PYTHONPYCACHEPREFIX, filled by the untimed run)"}
        data, markdown, table = build_report(big, sides, notes)
    json_path, md_path = write_results(args.out, "cli_process", data, markdown)
    print(f"wrote {json_path} and {md_path}")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
