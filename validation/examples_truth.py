"""(GPU) The main job tells its story: each problem example shows exactly its finding, its fix none, and the fix moves its number.

    python validation/examples_truth.py DIR          (or --out DIR; --columns 80)

Runs the main job, ``pytest --gpu-util --gpu-util-html examples/``, on a copy of ``examples/`` in
a temporary folder (the run's files stay out of the checkout), at ``COLUMNS=80``, and reads the
run's gpu_util.json. What each example should show is declared once, in ``examples/conftest.py``
(``PAIRS``: problem test, fix test, the problem's rule, the figure the fix moves; ``HEALTHY``);
the checks, each with what it found:

- every declared example ran, passed and is in the run's file; every example of the run is declared;
- a problem test's findings are exactly its rule, its fix's and a healthy test's none;
- the fix moves its figure visibly: busy % at least ``BUSY_POINTS`` points higher, or GPU ms at
  most ``GPU_MS_SHARE`` of the problem's (for a GPU-bound pair, where busy % is ~100 % both ways).

Writes DIR/examples.json (``{"tests": [{"test", "busy_pct", "gpu_busy_ms", "wall_ms",
"findings": [rule ids]}], "checks": [...]}``), DIR/examples_80.log (the terminal output),
DIR/examples_report.html and DIR/gpu_util.json; prints a table of the tests and the checks
(``FAIL`` lines first) and exits 1 when a check fails. About 20 s on an H100.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Mapping, NamedTuple, Optional, Sequence

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
#: a fix's busy % must be at least this many points above its problem's ...
BUSY_POINTS = 10.0
#: ... or its GPU time at most this share of the problem's
GPU_MS_SHARE = 0.8
MOVES = {"busy_pct": "busy % up", "gpu_busy_ms": "GPU ms down"}


class Check(NamedTuple):
    name: str
    holds: bool
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {"check": self.name, "holds": self.holds, "detail": self.detail}


def load_story(conftest: Path = EXAMPLES / "conftest.py") -> tuple[Sequence[Any], Sequence[str]]:
    """``PAIRS`` and ``HEALTHY`` from the examples' conftest (it imports pytest, not torch, at load)."""
    spec = importlib.util.spec_from_file_location("examples_story", conftest)
    if spec is None or spec.loader is None:
        raise ImportError(f"{conftest}: cannot be loaded")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return tuple(module.PAIRS), tuple(module.HEALTHY)


def function_name(test: str) -> str:
    """``examples/test_x.py::test_y[1]`` -> ``test_y`` (a parametrization id may hold ``::``)."""
    return test.split("[", 1)[0].rsplit("::", 1)[-1]


def example_rows(run_doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The examples.json rows of a run's gpu_util.json: each test's figures and its findings' rule ids
    (``findings_looked_for``: False where the test's window was not measured, as under gpu_trace)."""
    rows = []
    for record in run_doc.get("tests") or ():
        found = record.get("findings")
        rows.append({
            "test": record.get("test"), "outcome": record.get("outcome"), "busy_pct": record.get("busy_pct"),
            "gpu_busy_ms": record.get("gpu_busy_ms"), "wall_ms": record.get("wall_ms"),
            "findings": [f.get("rule") for f in found or () if isinstance(f, Mapping)],
            "findings_looked_for": isinstance(found, list), "note": record.get("note") or "",
        })
    return rows


def check_story(rows: Sequence[Mapping[str, Any]], pairs: Sequence[Any], healthy: Sequence[str]) -> list[Check]:
    """The story's checks on a run's rows (see the module's docstring)."""
    by_name: dict[str, Mapping[str, Any]] = {}
    for row in rows:
        by_name.setdefault(function_name(str(row["test"])), row)
    declared = [name for p in pairs for name in (p.problem, p.fix)] + list(healthy)
    checks = []
    missing = [name for name in declared if name not in by_name]
    failed = [name for name in declared if name in by_name and by_name[name].get("outcome") != "passed"]
    extra = sorted(set(by_name) - set(declared))
    checks.append(Check("every declared example ran and passed", not missing and not failed,
                        "; ".join(filter(None, (missing and f"missing: {', '.join(missing)}",
                                                failed and f"not passed: {', '.join(failed)}"))) or "all passed"))
    checks.append(Check("every example is declared in examples/conftest.py", not extra,
                        f"undeclared: {', '.join(extra)}" if extra else f"{len(declared)} declared"))
    for pair in pairs:
        problem, fix = by_name.get(pair.problem), by_name.get(pair.fix)
        if problem is None or fix is None:
            continue
        got = list(problem["findings"])
        checks.append(Check(f"{pair.problem}: exactly {pair.rule}", got == [pair.rule], _rules(got)))
        checks.append(Check(f"{pair.fix}: no finding", not fix["findings"], _rules(fix["findings"])))
        checks.append(moved(pair, problem, fix))
    for name in healthy:
        if name in by_name:
            checks.append(Check(f"{name}: no finding", not by_name[name]["findings"], _rules(by_name[name]["findings"])))
    return checks


def moved(pair: Any, problem: Mapping[str, Any], fix: Mapping[str, Any]) -> Check:
    """Whether the fix moved the pair's figure visibly (``pair.moves``: busy_pct up or gpu_busy_ms down)."""
    name = f"{pair.fix}: {MOVES.get(pair.moves, pair.moves)} against {pair.problem}"
    before, after = problem.get(pair.moves), fix.get(pair.moves)
    if not isinstance(before, (int, float)) or not isinstance(after, (int, float)):
        return Check(name, False, f"{pair.moves} not measured ({before!r} -> {after!r})")
    if pair.moves == "busy_pct":
        return Check(name, after - before >= BUSY_POINTS,
                     f"{before:.1f} % -> {after:.1f} % ({after - before:+.1f} points; at least +{BUSY_POINTS:g} wanted)")
    if pair.moves == "gpu_busy_ms":
        share = after / before if before > 0 else float("inf")
        return Check(name, share <= GPU_MS_SHARE,
                     f"{before:.2f} -> {after:.2f} ms ({share:.2f}x; at most {GPU_MS_SHARE:g}x wanted)")
    return Check(name, False, f"unknown figure {pair.moves!r} (busy_pct or gpu_busy_ms)")


def _rules(rules: Sequence[str]) -> str:
    return ", ".join(rules) if rules else "none"


def _number(value: Any, width: int, decimals: int) -> str:
    return (f"{value:.{decimals}f}" if isinstance(value, (int, float)) else "-").rjust(width)


def report(rows: Sequence[Mapping[str, Any]], checks: Sequence[Check]) -> str:
    """The tests' figures and findings, then the checks, failed ones first."""
    width = max([len("test"), *(len(function_name(str(r["test"]))) for r in rows)])
    lines = [f"{'test':{width}}  {'outcome':7}  {'busy %':>6}  {'GPU ms':>8}  {'wall ms':>8}  findings"]
    for r in rows:
        found = _rules(r["findings"]) if r["findings_looked_for"] else f"(window not measured: {r['note'] or '-'})"
        lines.append(f"{function_name(str(r['test'])):{width}}  {str(r['outcome']):7}  {_number(r['busy_pct'], 6, 1)}  "
                     f"{_number(r['gpu_busy_ms'], 8, 2)}  {_number(r['wall_ms'], 8, 2)}  {found}")
    lines.append("")
    for c in sorted(checks, key=lambda c: c.holds):
        lines.append(f"{'ok  ' if c.holds else 'FAIL'}  {c.name}: {c.detail}")
    held = sum(c.holds for c in checks)
    lines.append(f"{held} of {len(checks)} checks hold")
    return "\n".join(lines)


def run_main_job(out: Path, columns: int, timeout: float = 300) -> dict[str, Any]:
    """``pytest --gpu-util --gpu-util-html examples/`` on a copy of examples/ in a temporary folder;
    its output, page and gpu_util.json copied into ``out``."""
    with tempfile.TemporaryDirectory(prefix="examples_truth_") as tmp:
        work = Path(tmp)
        shutil.copytree(EXAMPLES, work / "examples", ignore=shutil.ignore_patterns("__pycache__"))
        env = {**os.environ, "COLUMNS": str(columns)}
        env.pop("PYTEST_ADDOPTS", None)
        env.pop("GPUUTIL_EXAMPLE_SLOW", None)
        began = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--gpu-util", "--gpu-util-html",
                               "examples/"], cwd=work, env=env, capture_output=True, text=True, timeout=timeout)
        seconds = round(time.perf_counter() - began, 2)
        (out / f"examples_{columns}.log").write_text(done.stdout + done.stderr, encoding="utf-8")
        files = work / ".gpu_util"
        for name, target in (("gpu_util.json", "gpu_util.json"), ("report.html", "examples_report.html")):
            if (files / name).is_file():
                shutil.copy(files / name, out / target)
    doc_path = out / "gpu_util.json"
    return {"rc": done.returncode, "seconds": seconds,
            "doc": json.loads(doc_path.read_text(encoding="utf-8")) if doc_path.is_file() else None}


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outdir", nargs="?")
    parser.add_argument("--out")
    parser.add_argument("--columns", type=int, default=80)
    args = parser.parse_args(argv)
    out = Path(args.out or args.outdir or "examples_truth_results")
    out.mkdir(parents=True, exist_ok=True)
    pairs, healthy = load_story()
    run = run_main_job(out, args.columns)
    rows = example_rows(run["doc"] or {})
    checks = [Check("the main job ran and wrote gpu_util.json", run["doc"] is not None and run["rc"] in (0, 1),
                    f"exit {run['rc']} in {run['seconds']} s")]
    checks += check_story(rows, pairs, healthy)
    document = {"tests": rows, "checks": [c.to_dict() for c in checks], "rc": run["rc"], "seconds": run["seconds"],
                "machine": (run["doc"] or {}).get("machine_info", {})}
    (out / "examples.json").write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    print(report(rows, checks))
    return 0 if all(c.holds for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
