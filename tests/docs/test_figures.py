"""Measured figures on the pages and in the README come from the newest committed results file.

docs/hooks.py renders the cost model, the trust table, the platforms table and the main job's
sample from ``benchmarks/results/`` at build time; README.md's sample is rendered by the same
function (scripts/render_sample.py). These tests fail when a figure shown differs from its results
file, when a page names a commit or a date by hand, and when an answer page grows past one screen
of prose.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.test_hooks import load_hooks
from tests.helpers.docs_site import DOCS, ROOT, article_text, page_path

hooks = load_hooks()

#: a commit id (7 to 40 hex digits, a letter and a digit among them) or a date
COMMIT = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b")
DATE = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b")
#: a measured-looking figure: a decimal with a unit
FIGURE = re.compile(r"\b\d+\.\d+\s?(?:%|µs|us|ms|s|MiB|GiB|GB/s|points)(?![\w-])")
#: the pages that answer users' questions: no figure typed into them
ANSWER_PAGES = ("index.md", "getting-started.md", "cost.md", "trust.md", "platforms.md", "troubleshooting.md")
MAX_ANSWER_LINES = 80


def as_written(md: str) -> str:
    """A page's Markdown without its generated parts (markers are replaced at build time)."""
    text = (DOCS / md).read_text(encoding="utf-8")
    return re.sub(r"<!-- sample:start -->.*?<!-- sample:end -->", "", text, flags=re.S)


# -- what the pages say as written ---------------------------------------------------------------

@pytest.mark.parametrize("md", sorted(p.name for p in DOCS.glob("*.md") if p.name != "changelog.md"))
def test_no_page_names_a_commit_or_a_date_by_hand(md):
    text = as_written(md)
    assert COMMIT.findall(text) == [] and DATE.findall(text) == [], md


@pytest.mark.parametrize("md", ANSWER_PAGES)
def test_the_answer_pages_type_no_measured_figure(md):
    assert FIGURE.findall(as_written(md)) == [], md


def test_the_readme_types_no_figure_outside_its_rendered_sample():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    outside = re.sub(r"<!-- sample:start -->.*?<!-- sample:end -->", "", readme, flags=re.S)
    assert FIGURE.findall(outside) == [] and COMMIT.findall(outside) == [] and DATE.findall(outside) == []


@pytest.mark.parametrize("md", ["cost.md", "trust.md"])
def test_cost_and_trust_are_one_screen_of_prose_around_their_table(md):
    text = as_written(md)
    assert len(text.splitlines()) <= MAX_ANSWER_LINES
    assert text.count("<!-- gpuutil:") == 1  # one current table


# -- the README's sample ----------------------------------------------------------------------

def test_the_readme_sample_is_the_newest_sample_log_as_rendered():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    log = hooks.newest_sample()
    assert hooks.sample_block(readme, log) == readme, (
        f"README.md's sample differs from {log}: run python scripts/render_sample.py {log}")
    shown = readme.split("<!-- sample:start -->")[1].split("<!-- sample:end -->")[0]
    assert log.relative_to(ROOT).as_posix() in shown
    assert "GPU utilization (pytest-gpuutil)" in shown


def test_a_figure_changed_in_the_readme_is_caught():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    shown = readme.split("<!-- sample:start -->")[1].split("<!-- sample:end -->")[0]
    figure = FIGURE.search(shown) or re.search(r"\d+\.\d+", shown)
    assert figure is not None
    changed = readme.replace(figure.group(0), "9" + figure.group(0), 1)
    assert hooks.sample_block(changed, hooks.newest_sample()) != changed


def test_render_sample_check_agrees_with_the_test():
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "render_sample.py"), "--check"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr


# -- the built pages against their results files ------------------------------------------------

def test_the_cost_page_shows_the_newest_cost_json(site):
    path = hooks.newest("cost.json")
    doc = json.loads(path.read_text(encoding="utf-8"))
    text = " ".join(article_text(page_path(site, "cost.md")).split())
    assert path.relative_to(ROOT).as_posix() in text and doc["gpu"] in text and doc["date"] in text
    for name, config in doc["configs"].items():
        row = text.split(f"{name}: pytest", 1)[1][:400]
        for key, digits in (("startup_s", 3), ("per_test_us", 0), ("per_kernel_us", 2)):
            # a config measured on one suite size has no fit: the page shows a dash
            assert hooks._fmt(config[key], digits) in row, (name, key)


def test_the_trust_and_platform_pages_show_their_results_files(site):
    trust = " ".join(article_text(page_path(site, "trust.md")).split())
    duty = hooks.newest(hooks.DUTY_FILES, accept=hooks._has_duty_rows)
    rows = json.loads(duty.read_text(encoding="utf-8"))["duty"]["rows"]
    errors = [r["ours_truth_window_pct"] - r["truth_pct"] for r in rows]
    assert f"{min(errors):+.2f} to {max(errors):+.2f} points" in trust
    results = ROOT / "benchmarks" / "results"
    assert duty.relative_to(results).as_posix() in trust
    for name in ("children.json", "memory_truth.json", "hardware.json"):
        assert f"/{name}" in trust, name
    savings = hooks.newest(("findings_savings.json", "savings.json"), accept=lambda d: isinstance(d, dict) and d.get("estimates"))
    assert savings.relative_to(results).as_posix() in trust
    platforms = " ".join(article_text(page_path(site, "platforms.md")).split())
    assert "NVIDIA H100 80GB HBM3" in platforms and "NVIDIA H200" in platforms and "Linux" in platforms


def test_getting_started_shows_the_same_sample_as_the_readme(site):
    text = article_text(page_path(site, "getting-started.md"))
    shown = hooks.newest_sample().read_text(encoding="utf-8").splitlines()
    section = next(i for i, line in enumerate(shown) if hooks.SAMPLE_SECTION in line)
    for line in shown[section:section + 12]:
        assert " ".join(line.split()) in " ".join(text.split()), line


# -- "newest", and what a new cost.json adds ---------------------------------------------------

def write(path: Path, doc: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def test_newest_goes_by_the_run_folder_date_then_the_files_own_date(tmp_path):
    write(tmp_path / "2026-11-26_h100" / "late" / "cost.json", {"date": "2026-11-26"})
    write(tmp_path / "2026-11-26_h100" / "cost.json", {"date": "2026-11-25"})
    assert hooks.newest("cost.json", tmp_path) == tmp_path / "2026-11-26_h100" / "late" / "cost.json"
    newer = write(tmp_path / "2026-11-27_h200" / "cost" / "cost.json", {"date": "2026-11-27"})
    write(tmp_path / "notes" / "cost.json", {"date": "2027-01-01"})  # no dated run folder: never newest
    assert hooks.newest("cost.json", tmp_path) == newer
    assert hooks.newest("cost.json", tmp_path, accept=lambda d: d["date"] < "2026-11-27").parts[-3] == "2026-11-26_h100"


COST = {"gpu": "NVIDIA H200", "torch": "2.11.0+cu130", "python": "3.12.3", "date": "2026-11-27", "rounds": 5,
        "plain_per_test_us": 1200.0, "plain_per_kernel_us": 9.0,
        "configs": {"default": {"startup_s": 0.2, "per_test_us": 250.0, "per_kernel_us": 3.0, "args": ["--gpu-util"],
                                "ci95": {"startup_s": [0.1, 0.3], "per_test_us": [100.0, 400.0], "per_kernel_us": [2.0, 4.0]},
                                "self_per_test_us": {"median": 180.0, "range": [170.0, 195.0]},
                                "slope_per_test_us": {"median": 240.0, "range": [90.0, 410.0]}}},
        "counters_thread_pct_busy": {"median": 7.7, "range": [6.1, 7.8]}}


def test_the_cost_model_renders_self_timed_and_slope_figures_and_the_counters_thread_when_present(tmp_path):
    text = hooks.cost_markdown(write(tmp_path / "2026-11-27_h200" / "cost.json", COST))
    row = next(line for line in text.splitlines() if line.startswith("| default"))
    assert "180 (170 to 195)" in row and "240 (90 to 410)" in row and "250 (100 to 400)" in row
    assert "7.7 (6.1 to 7.8) % of one CPU core" in text
    # the worked example is the model's own: 0.2 s + 2,000 x 250 us + 500,000 x 3 us = 2.2 s
    assert "**2.2 s**" in text
    old = dict(COST, configs={"default": {k: v for k, v in COST["configs"]["default"].items()
                                          if not k.endswith("per_test_us") or k == "per_test_us"}})
    old.pop("counters_thread_pct_busy")
    assert "self-timed" not in hooks.cost_markdown(write(tmp_path / "old" / "cost.json", old))


FLOOR = {"gpu": "NVIDIA H200", "torch": "2.11.0+cu130", "date": "2026-11-27T21:11:10+00:00", "rounds": 5,
         "summary": {"floor_default": {"self_per_test_us": {"median": 47.5, "range": [43.4, 53.1]}},
                     "floor_lean": {"self_per_test_us": {"median": 19.3, "range": [17.0, 22.6]}},
                     "default": {"self_per_test_us": {"median": 258.1, "range": [207.8, 289.4]}},
                     "columnar_default": {"self_per_test_us": {"median": 103.9, "range": [93.0, 143.0]}},
                     "columnar_lean": {"self_per_test_us": {"median": 75.4, "range": [63.0, 86.6]}},
                     "lean": {"self_per_test_us": {"median": 157.0, "range": [129.3, 168.4]}}}}


def test_the_cost_model_says_the_floor_from_the_floor_probe_beside_ours(tmp_path):
    cost = write(tmp_path / "2026-11-27_h200" / "cost.json", COST)
    text = hooks.cost_markdown(cost, floor=write(tmp_path / "2026-11-27_h200" / "floor_probe.json", FLOOR))
    floor = text.splitlines()[-1]
    assert "**47.5 (43.4 to 53.1) µs a test** self-timed, 19.3 (17.0 to 22.6) without memory" in floor
    assert "costs **103.9 (93.0 to 143.0) µs**, 75.4 (63.0 to 86.6) without memory and findings" in floor
    assert "default and lean configurations: 258.1 (207.8 to 289.4) and 157.0 (129.3 to 168.4), in the same" in floor
    assert "NVIDIA H200, torch 2.11.0+cu130, 2026-11-27, 5 interleaved rounds" in floor
    assert "floor" not in hooks.cost_markdown(cost)  # a file named: no floor unless one is named too


def test_the_page_takes_the_newest_floor_probe_that_ran_ours_beside_the_floor(tmp_path):
    """A later run of the floors alone (no default of ours), or of ours alone, is not what the page
    compares: the newest with both is; what a run lacks is left out of the sentence, not a blank."""
    with_ours = write(tmp_path / "2026-11-27_h100_s7" / "floor_probe" / "floor_probe.json", FLOOR)
    floors_only = dict(FLOOR, date="2026-11-27T23:43:27+00:00",
                       summary={k: v for k, v in FLOOR["summary"].items() if k.startswith(("floor_default", "columnar"))})
    later = write(tmp_path / "2026-11-27_h200_s7" / "floor_probe" / "floor_probe.json", floors_only)
    ours_only = dict(FLOOR, date="2026-11-28T00:09:08+00:00", summary={"default": FLOOR["summary"]["default"]})
    write(tmp_path / "2026-11-28_h100" / "floor_probe" / "floor_probe.json", ours_only)  # no floor: not either
    assert hooks.newest("floor_probe.json", results=tmp_path, accept=hooks._with_ours) == with_ours
    assert hooks.newest("floor_probe.json", results=tmp_path).parent.parent.name == "2026-11-28_h100"
    alone = hooks.floor_markdown(later)
    assert "without memory," not in alone and "This plugin's" not in alone and "—" not in alone
    assert "**47.5 (43.4 to 53.1) µs a test** self-timed. The least columnar plugin" in alone


def test_the_cost_page_says_what_the_flush_policy_does_from_the_run_that_compared_them(tmp_path):
    policies = {"gpu": "NVIDIA H100 80GB HBM3", "torch": "2.11.0+cu130", "date": "2026-11-28T00:09:08+00:00",
                "rounds": 5, "summary": {
                    "default": {"self_per_test_us": {"median": 174.3, "range": [148.8, 200.4]}},
                    "default_f1000": {"self_per_test_us": {"median": 124.4, "range": [115.6, 171.9]}},
                    "lean": {"self_per_test_us": {"median": 116.8, "range": [94.5, 139.5]}},
                    "lean_f1000": {"self_per_test_us": {"median": 87.4, "range": [79.2, 109.7]}}}}
    path = write(tmp_path / "2026-11-28_h100" / "floor_probe" / "floor_probe.json", policies)
    write(tmp_path / "2026-11-29_h100" / "floor_probe" / "floor_probe.json", FLOOR)  # newer, no policies: not it
    assert hooks.newest("floor_probe.json", results=tmp_path, accept=hooks._flush_policies) == path
    text = hooks.cost_markdown(write(tmp_path / "2026-11-27_h200" / "cost.json", COST), flush=path).splitlines()[-1]
    assert ("174.3 (148.8 to 200.4) µs a test with a flush every 100 tests and **124.4 (115.6 to 171.9)** with one "
            "every 1,000; lean 116.8 (94.5 to 139.5) against 87.4 (79.2 to 109.7)") in text
    from pytest_gpuutil.capture.flush_policy import FlushPolicy

    assert f"defaults to `tests={FlushPolicy().tests} seconds=10 megabytes=64`" in text  # from the code
    without_lean = dict(policies, summary={k: v for k, v in policies["summary"].items() if k.startswith("default")})
    assert "lean" not in hooks.flush_markdown(write(tmp_path / "x" / "floor_probe.json", without_lean))


def test_env_lines_of_device_runs_are_read():
    assert hooks.parse_env("torch 2.11.0+cu130 cuda 13.0 NVIDIA H100 80GB HBM3 x 2 python 3.12.3 cpus 32") == {
        "torch": "2.11.0+cu130", "cuda": "13.0", "gpu": "NVIDIA H100 80GB HBM3", "count": "2"}
    assert hooks.parse_env("torch 2.11.0+cu130 cuda 13.0 NVIDIA H200 python 3.12.3")["gpu"] == "NVIDIA H200"
    assert hooks.parse_env("Mon Nov 23 10:39:22 2026") is None


def test_every_run_folder_is_indexed_in_the_results_readme():
    results = ROOT / "benchmarks" / "results"
    index = (results / "README.md").read_text(encoding="utf-8")
    missing = [p.name for p in sorted(results.iterdir()) if p.is_dir() and f"`{p.name}`" not in index]
    assert missing == [], "add a row to benchmarks/results/README.md for each new run folder"


def test_the_cli_page_shows_analyze_as_it_runs_now(site):
    proc = subprocess.run([sys.executable, "-m", "pytest_gpuutil", *hooks.ANALYZE_EXAMPLE], capture_output=True,
                          text=True, cwd=ROOT, env={"COLUMNS": "100", "PATH": ""}, timeout=120, check=True)
    text = " ".join(article_text(page_path(site, "cli.md")).split())
    for line in proc.stdout.splitlines()[:12]:
        assert " ".join(line.split()) in text, line


def test_newest_finds_a_file_as_device_sh_writes_it_or_as_it_was_committed(tmp_path):
    write(tmp_path / "2026-11-26_h100" / "findings_savings.json", {"estimates": [1]})
    newer = write(tmp_path / "2026-11-27_h100" / "findings_savings" / "savings.json", {"estimates": [1]})
    assert hooks.newest(("findings_savings.json", "savings.json"), tmp_path) == newer
