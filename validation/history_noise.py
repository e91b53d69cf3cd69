"""How many false alarms does the history gate avoid? Real series from a GPU, unchanged code, then a slowdown.

    python3 validation/history_noise.py OUT_DIR [--runs 8] [--slow 5]

1. Writes a small suite (kernel_bench tests and plain GPU tests) under OUT_DIR/suite and runs it
   ``--runs`` times, each a separate pytest process with ``--gpu-util --gpu-util-history``, into one
   history (OUT_DIR/history.sqlite); each run's gpu_util.json is kept (OUT_DIR/runs/NN/).
2. Gates, as CI would run them: the unchanged suite against the history (``--gpu-util-compare
   history --gpu-util-fail kernel_bench.median:50%``: expected exit 0) and with two kernel_bench tests
   made ``--slow`` times slower (expected exit 1, pytest's summary line, no traceback); and the
   unchanged suite against the previous run alone with a tight limit, then the history with the same.
3. Counts, on the recorded series, for several ``--gpu-util-fail`` limits: the (test, metric) pairs
   a single-baseline comparison (each run against the run before) flags, against those the history
   rule (the last 5 runs' median, outside 3 scaled MADs) flags, and the median alone (without the
   noise condition), over the same unchanged runs (the 4th onwards, which have 3 earlier runs); and
   for the slowed run, what each catches of the slowed
   tests and what else each flags.

Writes OUT_DIR/history_noise.json (everything) and prints a short summary last. Every case runs in
try/except with its own timeout, so the JSON is written whatever fails.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

SUITE = r'''
import os
import time

import pytest

torch = pytest.importorskip("torch")
DEV = "cuda" if torch.cuda.is_available() else "cpu"
SLOW = int(os.environ.get("HISTORY_NOISE_SLOW", "1"))
SIZE = 2048 if DEV == "cuda" else 256


def sync():
    if DEV == "cuda":
        torch.cuda.synchronize()


# -- kernel_bench: CUDA-event timings ---------------------------------------------------------
def test_kb_matmul(kernel_bench):
    a = torch.randn(SIZE, SIZE, device=DEV, dtype=torch.bfloat16 if DEV == "cuda" else torch.float32)
    b = torch.randn_like(a)

    def run():
        for _ in range(SLOW):
            a @ b

    kernel_bench(run, warmup_ms=10, rep_ms=50, label="mm")


def test_kb_small(kernel_bench):
    x = torch.ones(1024, device=DEV)

    def run():
        for _ in range(SLOW):
            x.add_(1)

    kernel_bench(run, warmup_ms=5, rep_ms=30, label="add_1k")


def test_kb_big_add(kernel_bench):
    x = torch.ones(16 * 1024 * 1024 if DEV == "cuda" else 1024 * 1024, device=DEV)
    kernel_bench(lambda: x.add_(1), warmup_ms=10, rep_ms=50, label="add_64MiB")


def test_kb_softmax(kernel_bench):
    x = torch.randn(4 * SIZE, SIZE, device=DEV)
    kernel_bench(lambda: torch.softmax(x, dim=-1), warmup_ms=10, rep_ms=50, label="softmax")


def test_kb_layernorm(kernel_bench):
    x = torch.randn(4 * SIZE, 1024, device=DEV)
    kernel_bench(lambda: torch.nn.functional.layer_norm(x, (1024,)), warmup_ms=10, rep_ms=50, label="layernorm")


# -- plain tests, measured by --gpu-util ------------------------------------------------------
def test_matmul_loop():
    a = torch.randn(SIZE, SIZE, device=DEV)
    for _ in range(20):
        a = torch.tanh(a @ a)
    sync()


def test_launch_bound():
    x = torch.ones(1024, device=DEV)
    for _ in range(2000):
        x.add_(1)
    sync()


def test_mixed_host_work():
    x = torch.randn(SIZE, SIZE, device=DEV)
    for _ in range(10):
        y = torch.relu(x @ x).sum().item()
        time.sleep(0.001)
    assert y == y


def test_copies():
    host = torch.ones(16 * 1024 * 1024)
    for _ in range(4):
        back = host.to(DEV, copy=True).mul_(2).cpu()
    assert back[0] == 2


def test_conv():
    conv = torch.nn.Conv2d(64, 64, 3, padding=1).to(DEV)
    x = torch.randn(16, 64, 64, 64, device=DEV)
    with torch.no_grad():
        for _ in range(5):
            x = conv(x)
    sync()
'''

#: the tests made slower by HISTORY_NOISE_SLOW (node ids end so)
SLOWED = ("test_suite.py::test_kb_matmul", "test_suite.py::test_kb_small")


def slowed(test: str) -> bool:
    return test.endswith(SLOWED)
#: the limits counted offline, one at a time
LIMITS = (
    "kernel_bench.median:2%", "kernel_bench.median:5%", "kernel_bench.median:10%", "kernel_bench.median:20%",
    "kernel_bench.median:50%", "gpu_busy_ms:2%", "gpu_busy_ms:5%", "gpu_busy_ms:10%", "busy_pct:1", "busy_pct:2",
    "busy_pct:5", "wall_ms:5%", "wall_ms:10%", "wall_ms:20%", "kernel_count:0",
)
HISTORY_RUNS = 5


def pytest_run(out: Path, name: str, args: list[str], env_extra: dict[str, str] | None = None,
               timeout: float = 90.0) -> dict[str, Any]:
    """One pytest process on the suite; its output kept in OUT/logs/NAME.log."""
    env = {**os.environ, **(env_extra or {})}
    env.pop("PYTEST_ADDOPTS", None)
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(out / "suite"), *args]
    began = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env, cwd=out)
        rc, text = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:
        rc, text = "timeout", f"{exc.stdout or ''}{exc.stderr or ''}"
        text = text.decode() if isinstance(text, bytes) else text
    seconds = time.perf_counter() - began
    (out / "logs").mkdir(exist_ok=True)
    (out / "logs" / f"{name}.log").write_text(f"$ {' '.join(command)}\n{text}")
    lines = [line for line in text.splitlines() if line.strip()]
    verdict = next((line for line in lines if line.startswith(("FAILED: ", "no GPU regressions against"))), "")
    return {"name": name, "rc": rc, "seconds": round(seconds, 2), "args": args, "env": env_extra or {},
            "last_line": lines[-1] if lines else "", "traceback": "Traceback" in text, "gate": verdict,
            "failed_tests": [line for line in lines if line.startswith("FAILED suite")],
            "regression_lines": [line for line in lines if "kernel_bench[" in line or line.startswith("FAILED:")][:12]}


def count(records_by_run: list[dict[str, Any]], slowed_run: dict[str, Any] | None) -> dict[str, Any]:
    """Flagged (test, metric) pairs per limit: single baseline (previous run) against the history rule."""
    from pytest_gpuutil.gates.regression import compare_records, metric_pairs, parse_fail_exprs
    from pytest_gpuutil.history.noise import MIN_RUNS, compare_with_history

    eligible = range(MIN_RUNS, len(records_by_run))  # runs with at least MIN_RUNS earlier ones
    out: dict[str, Any] = {"runs": len(records_by_run), "runs_judged": len(eligible), "limits": {}}
    for limit in LIMITS:
        exprs = parse_fail_exprs(limit)
        single = history = pairs = median_only = 0
        single_all = pairs_all = 0
        flagged_single: dict[str, int] = {}
        flagged_history: dict[str, int] = {}
        for i in range(1, len(records_by_run)):
            before, now = records_by_run[i - 1], records_by_run[i]
            found = compare_records(before, now, exprs).regressions
            compared = sum(len(metric_pairs(before[t], now[t], e.metric)) for t in now if t in before for e in exprs)
            single_all += len(found)
            pairs_all += compared
            if i not in eligible:
                continue
            single += len(found)
            pairs += compared
            for r in found:
                flagged_single[f"{r.test} {r.metric}"] = flagged_single.get(f"{r.test} {r.metric}", 0) + 1
            earlier = {t: [run[t] for run in records_by_run[max(0, i - HISTORY_RUNS):i] if t in run] for t in now}
            judged = compare_with_history(earlier, now.values(), exprs)
            history += len(judged.comparison.regressions)
            median_only += len(compare_with_history(earlier, now.values(), exprs, k=0.0).comparison.regressions)
            for r in judged.comparison.regressions:
                flagged_history[f"{r.test} {r.metric}"] = flagged_history.get(f"{r.test} {r.metric}", 0) + 1
        entry: dict[str, Any] = {
            "pairs_compared": pairs, "single_baseline_flags": single, "history_flags": history,
            "median_only_flags": median_only,  # against the median, without the noise condition (k=0)
            "false_alarms_avoided": single - history, "single_baseline_flags_all_runs": single_all,
            "pairs_compared_all_runs": pairs_all, "flagged_single": flagged_single, "flagged_history": flagged_history,
        }
        if slowed_run is not None:
            last = records_by_run[-1]
            earlier = {t: [run[t] for run in records_by_run[-HISTORY_RUNS:] if t in run] for t in slowed_run}
            single_found = compare_records(last, slowed_run, exprs).regressions
            history_found = compare_with_history(earlier, slowed_run.values(), exprs).comparison.regressions
            entry["slowed"] = {
                "single_caught": sorted({r.test for r in single_found if slowed(r.test)}),
                "single_other": sorted(f"{r.test} {r.metric}" for r in single_found if not slowed(r.test)),
                "history_caught": sorted({r.test for r in history_found if slowed(r.test)}),
                "history_other": sorted(f"{r.test} {r.metric}" for r in history_found if not slowed(r.test)),
            }
        out["limits"][limit] = entry
    return out


def spread(records_by_run: list[dict[str, Any]]) -> dict[str, Any]:
    """Per (test, metric) over the unchanged runs: min, median, max and the relative spread."""
    import statistics

    from pytest_gpuutil.rundoc.metrics import METRICS, metric_values

    series: dict[str, list[float]] = {}
    for run in records_by_run:
        for test, record in run.items():
            for metric in METRICS:
                for name, (value, _unit) in metric_values(record, metric).items():
                    if value is not None:
                        series.setdefault(f"{test} {name}", []).append(value)
    out = {}
    for key, values in sorted(series.items()):
        middle = statistics.median(values)
        out[key] = {"n": len(values), "min": min(values), "median": middle, "max": max(values),
                    "range_pct_of_median": 100 * (max(values) - min(values)) / abs(middle) if middle else None}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", help="output folder")
    parser.add_argument("--out", dest="out_opt", help="output folder (as the other validation scripts take it)")
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--slow", type=int, default=5)
    args = parser.parse_args()
    out = Path(args.out_opt or args.out or "history_noise_out").resolve()
    out.mkdir(parents=True, exist_ok=True)
    (out / "suite").mkdir(exist_ok=True)
    (out / "suite" / "test_suite.py").write_text(SUITE)
    db = out / "history.sqlite"
    for stale in out.glob("history.sqlite*"):
        stale.unlink()
    result: dict[str, Any] = {"runs": [], "gates": [], "errors": []}
    began = time.perf_counter()

    def save() -> None:
        result["seconds"] = round(time.perf_counter() - began, 1)
        (out / "history_noise.json").write_text(json.dumps(result, indent=1, default=str))

    try:
        import torch

        result["env"] = {"torch": torch.__version__, "cuda": torch.version.cuda,
                         "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
                         "python": sys.version.split()[0]}
    except Exception as exc:  # noqa: BLE001
        result["errors"].append(f"env: {exc}")
    for i in range(1, args.runs + 1):
        try:
            result["runs"].append(pytest_run(out, f"run{i:02d}", ["--gpu-util", "--gpu-util-dir", f"runs/{i:02d}",
                                                                   f"--gpu-util-history={db}"]))
        except Exception:  # noqa: BLE001
            result["errors"].append(f"run {i}: {traceback.format_exc(limit=3)}")
        save()
    slow_env = {"HISTORY_NOISE_SLOW": str(args.slow)}
    gates = (
        ("history_unchanged_50pct", ["--gpu-util-compare", str(db), "--gpu-util-fail", "kernel_bench.median:50%"], {}),
        ("history_slowed_50pct", ["--gpu-util-compare", str(db), "--gpu-util-fail", "kernel_bench.median:50%"],
         slow_env),
        ("single_unchanged_5pct", ["--gpu-util-compare", f"runs/{args.runs:02d}/gpu_util.json", "--gpu-util-fail",
                                   "kernel_bench.median:5%", "--gpu-util-fail", "gpu_busy_ms:5%"], {}),
        ("history_unchanged_5pct", ["--gpu-util-compare", str(db), "--gpu-util-fail", "kernel_bench.median:5%",
                                    "--gpu-util-fail", "gpu_busy_ms:5%"], {}),
    )
    for name, gate_args, env in gates:
        try:
            directory = "runs/slowed" if env else f"runs/{name}"
            result["gates"].append(pytest_run(out, name, ["--gpu-util", "--gpu-util-dir", directory, *gate_args], env))
        except Exception:  # noqa: BLE001
            result["errors"].append(f"gate {name}: {traceback.format_exc(limit=3)}")
        save()
    try:
        from pytest_gpuutil.rundoc.reading import load_run_doc

        records_by_run = []
        for i in range(1, args.runs + 1):
            path = out / "runs" / f"{i:02d}" / "gpu_util.json"
            if path.exists():
                records_by_run.append(dict(load_run_doc(path).records))
        slowed_path = out / "runs" / "slowed" / "gpu_util.json"
        slowed = dict(load_run_doc(slowed_path).records) if slowed_path.exists() else None
        result["counts"] = count(records_by_run, slowed)
        result["spread"] = spread(records_by_run)
    except Exception:  # noqa: BLE001
        result["errors"].append(f"counts: {traceback.format_exc(limit=5)}")
    try:
        listed = subprocess.run([sys.executable, "-m", "pytest_gpuutil", "history", "--db", str(db), "--format", "json"],
                                capture_output=True, text=True, timeout=60)
        result["history_cli"] = {"rc": listed.returncode, "runs": len(json.loads(listed.stdout)["runs"])
                                 if listed.returncode == 0 else None, "stderr": listed.stderr[-500:]}
    except Exception:  # noqa: BLE001
        result["errors"].append(f"history cli: {traceback.format_exc(limit=3)}")
    save()

    # -- summary, last ------------------------------------------------------------------------
    print(f"history_noise: {len(result['runs'])} runs ({', '.join(str(r['seconds']) for r in result['runs'])} s), "
          f"rc {[r['rc'] for r in result['runs']]}")
    for gate in result["gates"]:
        print(f"gate {gate['name']}: rc {gate['rc']} traceback={gate['traceback']} | {gate['last_line']} | "
              f"{gate['gate'][:110]}")
    counts = result.get("counts", {})
    if counts:
        print(f"flagged (test, metric) pairs over {counts['runs_judged']} unchanged runs (each with >= 3 earlier): "
              "single baseline, median of the last 5 alone, history rule; slowed run: slowed tests caught / others")
        for limit, entry in counts["limits"].items():
            slowed = entry.get("slowed", {})
            print(f"  {limit:26} pairs {entry['pairs_compared']:4}  single {entry['single_baseline_flags']:3}  "
                  f"median {entry['median_only_flags']:3}  history {entry['history_flags']:3}  | slowed: single {len(slowed.get('single_caught', []))}/"
                  f"{len(SLOWED)} +{len(slowed.get('single_other', []))}  history "
                  f"{len(slowed.get('history_caught', []))}/{len(SLOWED)} +{len(slowed.get('history_other', []))}")
    for error in result["errors"]:
        print("ERROR:", error.strip().splitlines()[-1])
    print(f"wrote {out / 'history_noise.json'} in {result['seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
