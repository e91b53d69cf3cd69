"""(GPU) The findings' ranking on a real third-party suite: timm's model tests under ``pytest --gpu-util``.

    python benchmarks/thirdparty/timm_findings.py --out DIR [--timm .timm] [--every 40] [--limit N]
                                       [--device cuda] [--estimates SAVINGS.json]

Runs ``.timm/tests/test_models.py`` (timm's own tests, ``PYTHONPATH=.timm``, ``TORCH_DEVICE=cuda``)
under ``pytest --gpu-util`` with ``COLUMNS=80``, restricted to a deterministic subset: every 40th
test of ``test_model_forward`` and ``test_model_backward`` in collection order (about 65 tests).
This module is also the pytest plugin that makes the selection (``-p benchmarks.thirdparty.timm_findings``;
``GPUUTIL_TIMM_EVERY`` and ``GPUUTIL_TIMM_LIMIT`` set it). Then it checks the run:

- the terminal's findings part (the lines after its ``findings: what to fix`` rule) is at most 12
  lines, none wider than 80 columns;
- every reported finding's ``saving_ms`` is at or over the floor (and its share of the test's time);
- the ranking's top entry is the largest summed saving;

and writes DIR/findings_rank.json ``{"suite", "tests", "tests_with_findings", "findings",
"below_floor", "terminal_lines", "top": [{"rule", "scope", "tests", "saving_ms"}], "checks",
"estimates"}`` (``estimates`` from ``--estimates``: the ``savings`` part of
``validation/findings_truth.py``), beside the run's gpu_util.json, report.html and pytest.log. Exit
1 when a check failed. On a CPU machine (``--device cpu --limit 3``) it runs and writes the file
with the checks it could make (no CUDA: no findings). About 2-3 minutes on one H100.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
FUNCTIONS = ("test_model_forward", "test_model_backward")
SECTION = "findings: what to fix (pytest-gpuutil)"
MOST_LINES = 12
WIDTH = 80


# -- the pytest plugin: the subset --------------------------------------------------------------

def pytest_collection_modifyitems(config: Any, items: list) -> None:
    """Keep every Nth test of each of FUNCTIONS, in collection order (N: GPUUTIL_TIMM_EVERY, default
    40), at most GPUUTIL_TIMM_LIMIT of them (default all); the rest are deselected."""
    every = int(os.environ.get("GPUUTIL_TIMM_EVERY", "40"))
    limit = int(os.environ.get("GPUUTIL_TIMM_LIMIT", "0")) or None
    keep, dropped, seen = [], [], {}
    for item in items:
        function = getattr(item, "originalname", None) or item.name.split("[")[0]
        index = seen.get(function, 0)
        seen[function] = index + 1
        if function in FUNCTIONS and index % every == 0 and (limit is None or len(keep) < limit):
            keep.append(item)
        else:
            dropped.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    items[:] = keep


# -- the run and its checks ---------------------------------------------------------------------

def findings_part(stdout: str) -> list[str]:
    """The lines of the terminal's findings part: after its rule, up to the next rule, the plugin's
    "wrote FILES" line (printed after the part, whatever it holds) or the end."""
    lines = stdout.splitlines()
    at = next((i for i, line in enumerate(lines) if SECTION in line), None)
    if at is None:
        return []
    part = []
    for line in lines[at + 1:]:
        if line.startswith(("---", "===", "wrote ")) or (line.startswith("-") and line.strip("- ") and line.endswith("-")):
            break
        part.append(line)
    return part


def check_run(doc: dict[str, Any], part: list[str]) -> tuple[dict[str, Any], list[str]]:
    """(findings_rank.json's figures, the checks that failed) for one run's gpu_util.json and terminal part."""
    summary = doc.get("findings_summary") or {}
    floor = summary.get("floor") or {"ms": 1.0, "pct": 2.0}
    failures = []
    if len(part) > MOST_LINES:
        failures.append(f"the findings part has {len(part)} lines (at most {MOST_LINES})")
    wide = [line for line in part if len(line) > WIDTH]
    if wide:
        failures.append(f"{len(wide)} findings lines wider than {WIDTH} columns: {wide[0]!r}")
    under = [(t["test"], f["rule"], f.get("saving_ms")) for t in doc.get("tests", ()) for f in t.get("findings") or ()
             if float(f.get("saving_ms", 0.0)) < floor["ms"] or float(f.get("saving_pct", 0.0)) < floor["pct"]]
    if under:
        failures.append(f"{len(under)} reported findings under the floor: {under[:3]}")
    top = summary.get("top") or []
    if top and top[0]["saving_ms"] < max(t["saving_ms"] for t in top):
        failures.append(f"the top entry {top[0]} is not the largest summed saving")
    if summary and not part:
        failures.append("no findings part in the terminal output")
    figures = {
        "tests": len(doc.get("tests", ())),
        "tests_with_findings": summary.get("tests_with_findings", 0),
        "findings": summary.get("findings", 0),
        "below_floor": summary.get("below_floor", 0),
        "terminal_lines": len(part),
        "floor": floor,
        "saving_ms": summary.get("saving_ms", 0.0),
        "top": [{**{k: t[k] for k in ("rule", "scope", "tests", "saving_ms")}, "first_place": t.get("first_place", "")}
                for t in top],
        # issue 42: the top fixes name where (the first place of each fix's largest finding)
        "top_with_places": sum(1 for t in top[:5] if t.get("first_place")),
        "by_rule": _by_rule(doc),
    }
    return figures, failures


def _by_rule(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per rule: tests reported and under the floor, and their summed savings."""
    out: dict[str, dict[str, Any]] = {}
    for test in doc.get("tests", ()):
        for key in ("findings", "below_floor"):
            for f in test.get(key) or ():
                entry = out.setdefault(f["rule"], {"findings": 0, "below_floor": 0, "saving_ms": 0.0,
                                                   "below_floor_saving_ms": 0.0})
                entry[key] += 1
                entry["saving_ms" if key == "findings" else "below_floor_saving_ms"] += float(f.get("saving_ms", 0.0))
    return {rule: {k: round(v, 3) if isinstance(v, float) else v for k, v in e.items()} for rule, e in out.items()}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--timm", default=".timm", help="timm's checkout (its tests/test_models.py)")
    parser.add_argument("--every", type=int, default=40)
    parser.add_argument("--limit", type=int, default=0, help="at most this many tests (0: all selected)")
    parser.add_argument("--device", default="cuda", help="TORCH_DEVICE for timm's tests (cpu: a dry run)")
    parser.add_argument("--estimates", default="", help="savings.json of validation/findings_truth.py --parts savings")
    parser.add_argument("--timeout", type=float, default=400)
    args = parser.parse_args(argv)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    timm = Path(args.timm).resolve()
    tests = timm / "tests" / "test_models.py"
    env = dict(os.environ, COLUMNS=str(WIDTH), PYTHONPATH=os.pathsep.join([str(timm), str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]),
               TORCH_DEVICE=args.device, GPUUTIL_TIMM_EVERY=str(args.every), GPUUTIL_TIMM_LIMIT=str(args.limit))
    cmd = [sys.executable, "-m", "pytest", str(tests), "-p", "benchmarks.thirdparty.timm_findings", "-p", "no:cacheprovider",
           "-q", "--rootdir", str(timm), "--gpu-util", f"--gpu-util-dir={out / 'gpu_util'}",
           f"--gpu-util-html={out / 'report.html'}"]
    result: dict[str, Any] = {"suite": f"timm {tests.relative_to(timm.parent)}: every {args.every}th test of "
                                       f"{' and '.join(FUNCTIONS)} in collection order"
                                       + (f", at most {args.limit}" if args.limit else "") + f", TORCH_DEVICE={args.device}",
                              "command": " ".join(cmd)}
    began = time.perf_counter()
    failures: list[str] = []
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=args.timeout)
        stdout, rc = done.stdout, done.returncode
        (out / "pytest.log").write_text(done.stdout + done.stderr)
    except subprocess.TimeoutExpired as exc:
        stdout, rc = str(exc.stdout or ""), None
        failures.append(f"pytest timed out after {args.timeout} s")
    result.update(rc=rc, seconds=round(time.perf_counter() - began, 1))
    json_path = out / "gpu_util" / "gpu_util.json"
    doc = json.loads(json_path.read_text()) if json_path.exists() else {}
    if not doc:
        failures.append(f"no {json_path} (pytest rc {rc}; see pytest.log)")
    if doc and not doc.get("tests"):
        failures.append(f"no test ran (pytest rc {rc}; see pytest.log: timm and torchvision must import)")
    result["device"] = (doc.get("machine_info") or {}).get("gpu_model")
    part = findings_part(stdout)
    figures, problems = check_run(doc, part)
    result.update(figures)
    result["terminal"] = part
    if not doc.get("findings_summary"):
        result["note"] = "no findings looked for (no CUDA device, or findings off): the checks say little"
    if args.estimates:
        try:
            result["estimates"] = [{k: e[k] for k in ("rule", "estimated_ms", "measured_ms", "ratio", "within_2x")}
                                   for e in json.loads(Path(args.estimates).read_text())["estimates"]]
            problems += [f"estimate of {e['rule']} not within 2x of the measured saving: {e}"
                         for e in result["estimates"] if not e["within_2x"]]
        except (OSError, ValueError, KeyError) as exc:
            failures.append(f"--estimates {args.estimates}: {exc}")
    result["checks"] = {"failed": failures + problems, "passed": not (failures + problems)}
    (out / "findings_rank.json").write_text(json.dumps(result, indent=1) + "\n")
    print("\n".join(part))
    print(f"{result['tests']} tests, {result['tests_with_findings']} with findings, {result['findings']} reported, "
          f"{result['below_floor']} under the floor; findings part {len(part)} lines; {result['seconds']} s")
    for line in failures + problems:
        print(f"FAIL {line}")
    print(f"wrote {out / 'findings_rank.json'}")
    return 1 if failures + problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
