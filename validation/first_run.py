"""(GPU) What a new user meets first: the summary at three terminal widths, baselines not saved yet.

    python validation/first_run.py DIR          (or --out DIR)

Runs the main job as the README writes it, ``pytest --gpu-util-html examples/`` (the option alone
turns measuring on; files under the repository's .gpu_util/), in a fresh process at COLUMNS=80,
200 and 100, and checks: the header's ``gpu-util: on (turned on by
--gpu-util-html)`` line, every line of the GPU section at most that wide, the page written, more
columns at 200 than at 80. Then, on one quick example test: ``--gpu-util-compare`` of a baseline
name never saved (exit 0, one warning), the same with ``--gpu-util-compare-strict`` (exit 1), and a
baseline path that does not exist (exit 4, one error line). Writes DIR/first_run.json, each run's
output (DIR/examples_COLUMNS.log: the README's sample is the 100-column one) and page
(DIR/report_COLUMNS.html), and prints a short
table last. Each run is in a try block with its own time limit, so a failing case still leaves
the others' results.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SECTION = "GPU utilization (pytest-gpuutil)"
QUICK_TEST = "examples/test_gpu_workloads.py::test_matmul_bf16"


def gpu_section(lines: list[str]) -> list[str]:
    """The lines of the summary's GPU section (after its title line, before pytest's last line)."""
    start = next((i for i, line in enumerate(lines) if SECTION in line), None)
    if start is None:
        return []
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("=")), len(lines))
    return lines[start + 1:end]


def table_header(section: list[str]) -> list[str]:
    """The column names of the top-tests table ([] when there is none)."""
    line = next((line for line in section if line.startswith("test ")), "")
    return [name.strip() for name in line.split("  ") if name.strip()]


def pytest_run(args: list[str], columns: int, cwd: Path, timeout: float = 180) -> dict[str, Any]:
    """One pytest process; its exit code, output lines and seconds."""
    env = {**os.environ, "COLUMNS": str(columns),
           "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    env.pop("PYTEST_ADDOPTS", None)
    began = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)
    return {"rc": done.returncode, "stdout": done.stdout, "stderr": done.stderr,
            "seconds": round(time.perf_counter() - began, 2)}


def width_case(columns: int, out: Path) -> dict[str, Any]:
    """The README's main job, as it is written there (in the repository root, files under .gpu_util/)."""
    page = ROOT / ".gpu_util" / "report.html"
    if page.exists():
        page.unlink()
    run = pytest_run(["--gpu-util-html", "examples/"], columns, ROOT)
    (out / f"examples_{columns}.log").write_text(run["stdout"] + run["stderr"], encoding="utf-8")
    if page.is_file():
        shutil.copy(page, out / f"report_{columns}.html")
    lines = run["stdout"].splitlines()
    section = gpu_section(lines)
    too_wide = [line for line in section if len(line) > columns]
    return {
        "case": f"examples at COLUMNS={columns}", "rc": run["rc"], "seconds": run["seconds"],
        "header_line": next((line for line in lines if line.startswith("gpu-util:")), None),
        "section_lines": len(section), "widest": max(map(len, section), default=0), "too_wide": too_wide,
        "columns": table_header(section), "page_written": page.is_file(),
        "holds": run["rc"] == 0 and bool(section) and not too_wide and page.is_file()
        and any(line == "gpu-util: on (turned on by --gpu-util-html)" for line in lines),
    }


def baseline_cases() -> list[dict[str, Any]]:
    cases = []
    for name, args, expected in (
        ("a baseline name never saved: one warning, exit 0", ["--gpu-util-compare", "never_saved"], 0),
        ("the same with --gpu-util-compare-strict: exit 1", ["--gpu-util-compare", "never_saved",
                                                              "--gpu-util-compare-strict"], 1),
        ("a baseline path that does not exist: exit 4, one line", ["--gpu-util-compare", "nowhere/base.json"], 4),
    ):
        try:
            run = pytest_run([*args, "--gpu-util-dir", ".gpu_util/first_run_baselines", QUICK_TEST], 100, ROOT)
            warnings = [line for line in run["stdout"].splitlines() if line.startswith("WARNING:")]
            errors = [line for line in run["stderr"].splitlines() if line.strip()]
            shape = len(warnings) == 1 if expected in (0, 1) else len(errors) == 1
            cases.append({"case": name, "rc": run["rc"], "seconds": run["seconds"], "warnings": warnings,
                          "errors": errors, "holds": run["rc"] == expected and shape})
        except Exception as exc:  # noqa: BLE001 - the other cases still run
            cases.append({"case": name, "error": repr(exc), "holds": False})
    return cases


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outdir", nargs="?")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    out = Path(args.out or args.outdir or "first_run_results")
    out.mkdir(parents=True, exist_ok=True)
    results: list[dict[str, Any]] = []
    for columns in (80, 200, 100):  # 100 last: .gpu_util/ then holds the README's sample run
        try:
            results.append(width_case(columns, out))
        except Exception as exc:  # noqa: BLE001
            results.append({"case": f"examples at COLUMNS={columns}", "error": repr(exc), "holds": False})
    widths = {r["case"]: len(r.get("columns", ())) for r in results}
    results.append({"case": "more columns at 200 than at 80", "columns_by_width": widths,
                    "holds": widths.get("examples at COLUMNS=200", 0) > widths.get("examples at COLUMNS=80", 0)})
    results += baseline_cases()
    (out / "first_run.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(f"{'holds':6} {'rc':>3}  case")
    for r in results:
        print(f"{str(r['holds']):6} {str(r.get('rc', '')):>3}  {r['case']}" + (f"  ({r['error']})" if "error" in r else ""))
    return 0 if all(r["holds"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
