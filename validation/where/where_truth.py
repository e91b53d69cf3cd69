"""(GPU) Where the findings point (issue 42): planted causes, the main job's pairs, and what places cost.

    python validation/where/where_truth.py OUT [--skip-pairs] [--skip-cost]

1. ``pytest --gpu-util`` on ``validation/where/test_planted.py`` (one planted cause per test, the
   line marked ``# planted: RULE``): each case's finding of that rule (reported or under the floor)
   and its first place, against the marked line;
2. the main job's problem/fix pairs (``examples/conftest.py`` PAIRS) under ``pytest --gpu-util``:
   the problem's finding of its rule's saving against the difference of the two tests' windows;
3. the cost of the places: a synchronize and a small copy with the frame reader on and off
   (µs a call, 5 interleaved rounds of 2,000 calls), and the stack sampler's CPU share of a core
   over 2 s of a busy Python loop.

Writes OUT/where.json ``{"device", "cases": [{"case", "rule", "expected", "first_place", "ok",
"reported"}], "pairs": [{"pair", "rule", "estimated_ms", "measured_ms", "ratio", "within_2x"}],
"cost": {...}}``, OUT/where.md, and the runs' files under OUT/planted/ and OUT/pairs/. Expected:
about 60 s on an H100 or H200; exit 1 when a case or a pair misses. With ``WHERE_DUMP=1`` each run
also keeps its findings' inputs under OUT/planted/dump/ and OUT/pairs/dump/ (dump_windows.py).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Optional

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SUITE = HERE / "test_planted.py"
MARK = re.compile(r"#\s*planted:\s*([a-z0-9-]+)")


def planted_lines() -> dict[str, tuple[str, str]]:
    """test function -> (rule, "path:line" of its planted line, the path relative to the repository)."""
    found: dict[str, tuple[str, str]] = {}
    helpers: dict[str, tuple[str, str]] = {}
    current = ""
    rel = SUITE.relative_to(REPO).as_posix()
    for number, line in enumerate(SUITE.read_text(encoding="utf-8").splitlines(), 1):
        head = re.match(r"def (\w+)\(", line)
        if head:
            current = head.group(1)
        mark = MARK.search(line)
        if mark:
            (found if current.startswith("test_") else helpers)[current] = (mark.group(1), f"{rel}:{number}")
    if "slow_helper" in helpers:  # the helper's line is the planted one of the test that calls it
        found["test_slow_host_helper_between_steps"] = helpers["slow_helper"]
    return found


def run_pytest(out: Path, args: list[str], timeout: int) -> dict[str, Any]:
    """``pytest --gpu-util`` from the repository root into ``out``; its gpu_util.json (or {})."""
    out.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pytest", "--gpu-util", f"--gpu-util-dir={out}", "-p", "no:cacheprovider",
               "-q", *args]
    env = {**os.environ, "COLUMNS": "120"}
    if os.environ.get("WHERE_DUMP"):  # diagnostics: each flush's inputs and findings under out/dump (dump_windows.py)
        command[3:3] = ["-p", "dump_windows"]
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH", "")]))
        env["WHERE_DUMP_DIR"] = str(out / "dump")
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=timeout, env=env)
    (out / "pytest.log").write_text(done.stdout + done.stderr)
    path = out / "gpu_util.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def finding_of(record: dict[str, Any], rule: str) -> tuple[Optional[dict[str, Any]], bool]:
    """(the record's finding of ``rule``, reported or under the floor; whether it was reported)."""
    for key, reported in (("findings", True), ("below_floor", False)):
        for f in record.get(key) or ():
            if f.get("rule") == rule:
                return f, reported
    return None, False


def first_place(finding: Optional[dict[str, Any]]) -> str:
    places = (finding or {}).get("places") or ()
    return f"{places[0]['file']}:{places[0]['line']}" if places else ""


def cases(out: Path) -> list[dict[str, Any]]:
    doc = run_pytest(out / "planted", [str(SUITE.relative_to(REPO))], timeout=150)
    records = {t["test"].rsplit("::", 1)[-1]: t for t in doc.get("tests", ())}
    found = []
    for test, (rule, expected) in planted_lines().items():
        record = records.get(test, {})
        finding, reported = finding_of(record, rule)
        place = first_place(finding)
        found.append({"case": test, "rule": rule, "expected": expected, "first_place": place,
                      "ok": place == expected, "reported": reported,
                      "saving_ms": (finding or {}).get("saving_ms"), "busy_pct": record.get("busy_pct"),
                      "wall_ms": record.get("wall_ms"), "places": (finding or {}).get("places") or [],
                      "note": record.get("note") or ""})
    return found


def pairs(out: Path) -> list[dict[str, Any]]:
    sys.path.insert(0, str(REPO))
    from examples.conftest import PAIRS

    names = [n for p in PAIRS for n in (p.problem, p.fix)]
    doc = run_pytest(out / "pairs", ["examples/", "-k", " or ".join(names)], timeout=150)
    records = {t["test"].rsplit("::", 1)[-1]: t for t in doc.get("tests", ())}
    found = []
    for pair in PAIRS:
        problem, fix = records.get(pair.problem, {}), records.get(pair.fix, {})
        finding, _ = finding_of(problem, pair.rule)
        estimated = float((finding or {}).get("saving_ms") or 0.0)
        measured = float(problem.get("wall_ms") or 0.0) - float(fix.get("wall_ms") or 0.0)
        ratio = estimated / measured if measured > 0 else None
        found.append({"pair": f"{pair.problem} / {pair.fix}", "rule": pair.rule, "estimated_ms": round(estimated, 3),
                      "measured_ms": round(measured, 3), "ratio": None if ratio is None else round(ratio, 3),
                      "within_2x": ratio is not None and 0.5 <= ratio <= 2.0, "first_place": first_place(finding)})
    return found


def cost(rounds: int = 5, calls: int = 2_000) -> dict[str, Any]:
    """µs a synchronize and a small pinned copy take with the frame reader on and off; the sampler's share."""
    import torch

    sys.path.insert(0, str(REPO))
    from pytest_gpuutil.capture.cupti import CuptiSource
    from pytest_gpuutil.capture.places.calls import CallPlaces
    from pytest_gpuutil.capture.places.sampler import StackSampler

    torch.zeros(1, device="cuda")
    source = CuptiSource(demangle=getattr(torch._C, "_demangle", None), host_syncs=True, waits_from_callbacks=True)
    source.start()
    places = CallPlaces.open(source._to_ns)
    small = torch.ones(1).pin_memory()
    times: dict[str, list[float]] = {k: [] for k in ("sync_off", "sync_on", "copy_off", "copy_on")}

    def timed(what: str) -> float:
        began = time.perf_counter()
        if what == "sync":
            for _ in range(calls):
                torch.cuda.synchronize()
        else:
            for _ in range(calls):
                small.to("cuda", non_blocking=True)
            torch.cuda.synchronize()
        return (time.perf_counter() - began) / calls * 1e6

    try:
        for _ in range(rounds):
            for on in (False, True):
                if places is not None:
                    (places.start if on else places.stop)()
                for what in ("sync", "copy"):
                    times[f"{what}_{'on' if on else 'off'}"].append(timed(what))
    finally:
        if places is not None:
            places.stop()
            places.take()
        source.stop()
        source.drain()
    import statistics

    med = {k: round(statistics.median(v), 3) for k, v in times.items()}
    sampler = StackSampler(time.time_ns, lambda path: not path.startswith(str(REPO / "pytest_gpuutil")))
    sampler.begin()
    began, cpu0 = time.perf_counter(), sampler.cpu_s
    end = began + 2.0
    while time.perf_counter() < end:
        sum(range(100))
    sampler.end()
    wall = time.perf_counter() - began
    share = (sampler.cpu_s - cpu0) / wall * 100
    taken = len(sampler.take())
    sampler.close()
    return {**{f"{k}_us": v for k, v in med.items()},
            "sync_extra_us": round(med["sync_on"] - med["sync_off"], 3),
            "copy_extra_us": round(med["copy_on"] - med["copy_off"], 3),
            "frame_reader": places is not None, "sampler_core_pct": round(share, 3),
            "sampler_hz": round(taken / wall, 1), "rounds": rounds, "calls": calls,
            "limits": {"extra_us_per_call": 5.0, "sampler_core_pct": 2.0}}


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--skip-pairs", action="store_true")
    parser.add_argument("--skip-cost", action="store_true")
    parser.add_argument("--cost-only", action="store_true",
                        help="only the places' parts (sync/copy µs, the sampler's share) into OUT/cost.json")
    parser.add_argument("--dry-run", action="store_true", help="list the planted cases and exit (no GPU needed)")
    args = parser.parse_args(argv)
    if args.dry_run:
        for test, (rule, expected) in planted_lines().items():
            print(f"{test}: {rule} at {expected}")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    if args.cost_only:  # the cost model's per-part figures (benchmarks/cost_model.py --places-parts)
        (args.out / "cost.json").write_text(json.dumps(cost(), indent=1) + "\n")
        return 0
    began = time.perf_counter()
    result: dict[str, Any] = {"cases": cases(args.out)}
    if not args.skip_pairs:
        result["pairs"] = pairs(args.out)
    if not args.skip_cost:
        try:
            result["cost"] = cost()
        except Exception as exc:  # noqa: BLE001 - the cases and pairs stand
            result["cost"] = {"error": repr(exc)}
    try:
        import torch

        result["device"] = torch.cuda.get_device_name(0)
        result["torch"] = torch.__version__
    except Exception:  # noqa: BLE001
        pass
    result["python"] = sys.version.split()[0]
    result["seconds"] = round(time.perf_counter() - began, 1)
    (args.out / "where.json").write_text(json.dumps(result, indent=1) + "\n")
    lines = ["| case | rule | expected | first place | ok |", "|---|---|---|---|---|"]
    lines += [f"| {c['case']} | {c['rule']}{'' if c['reported'] else ' (under the floor)'} | {c['expected']} | "
              f"{c['first_place'] or '–'} | {'yes' if c['ok'] else 'NO'} |" for c in result["cases"]]
    lines += ["", "| pair | rule | estimated ms | measured ms | within 2x |", "|---|---|---|---|---|"]
    lines += [f"| {p['pair']} | {p['rule']} | {p['estimated_ms']} | {p['measured_ms']} | {p['within_2x']} |"
              for p in result.get("pairs", ())]
    lines += ["", f"cost: {json.dumps(result.get('cost', {}))}"]
    (args.out / "where.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    missed = [c["case"] for c in result["cases"] if not c["ok"]] + [p["pair"] for p in result.get("pairs", ())
                                                                    if not p["within_2x"]]
    print(f"wrote {args.out / 'where.json'} in {result['seconds']} s; " + (f"missed: {missed}" if missed else "all met"))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
