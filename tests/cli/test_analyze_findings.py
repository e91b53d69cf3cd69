"""``gpuutil analyze`` says what to fix in each trace: JSON, table and CSV, and its two options."""
from __future__ import annotations

import csv
import io
import json

import pytest

from tests.cli.test_analyze import gpuutil
from tests.helpers.reference import DATA

FINDINGS = DATA / "findings"


def test_json_has_the_findings_of_each_trace():
    res = gpuutil("analyze", FINDINGS / "small_kernels.json.gz", FINDINGS / "bf16_matmul_loop.json.gz", "--format", "json")
    assert res.returncode == 0, res.stderr
    small, healthy = json.loads(res.stdout)
    assert [f["rule"] for f in small["findings"]] == ["launch-bound"] and healthy["findings"] == []
    finding = small["findings"][0]
    assert finding["severity"] == "high" and finding["evidence"]["kernels"] == 1000
    assert finding["message"].startswith("1,000 kernels, median 1.1 µs") and finding["fix"].startswith("launch fewer")
    one = json.loads(gpuutil("analyze", FINDINGS / "sync_in_loop.json.gz", "--format", "json").stdout)
    assert [f["rule"] for f in one["findings"]] == ["host-sync"]
    assert one["findings"][0]["evidence"]["by_name"] == {"cudaDeviceSynchronize": 102}


def test_the_table_ends_each_trace_with_its_findings():
    res = gpuutil("analyze", FINDINGS / "pageable_copies.json.gz", FINDINGS / "tf32_matmul.json.gz")
    pageable, tf32 = res.stdout.split("== ")[1:]
    assert ("findings (what to fix, largest saving first) (1 under the floor of 1 ms and 2 % of the test's time):\n"
            "  pageable-memcpy [medium], saves about 7.3 ms: 10 copies from or to pageable host memory") in pageable
    assert "      fix: pin the host memory" in pageable
    assert ("      saving: 7.5 ms of pageable copies (less 2 µs each) at 11 GB/s, the same bytes at 48 GB/s pinned: 5.8 ms; "
            "the GPU's idle right before and after them, while the host staged them (17 gaps): 1.5 ms; together 7.3 ms") in pageable
    assert "findings: none" in tf32


def test_csv_lists_the_rules():
    res = gpuutil("analyze", FINDINGS / "item_in_loop.json.gz", FINDINGS / "bf16_matmul_loop.json.gz", "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(res.stdout)))
    assert rows[0]["findings"] == "host-sync launch-bound" and rows[1]["findings"] == ""


def test_findings_can_be_turned_off_or_thinned():
    off = json.loads(gpuutil("analyze", FINDINGS / "small_kernels.json.gz", "--format", "json", "--findings", "off").stdout)
    assert "findings" not in off
    res = gpuutil("analyze", FINDINGS / "small_kernels.json.gz", "--format", "json", "--findings-ignore", "launch-bound")
    assert [f["rule"] for f in json.loads(res.stdout)["findings"]] == ["gpu-idle"]  # what launch-bound took the place of
    res = gpuutil("analyze", FINDINGS / "small_kernels.json.gz", "--format", "json", "--findings-ignore",
                  "launch-bound,gpu-idle")
    assert json.loads(res.stdout)["findings"] == []


def test_the_floor_moves_small_findings_to_below_floor():
    args = ("analyze", FINDINGS / "small_kernels.json.gz", "--format", "json")
    default = json.loads(gpuutil(*args).stdout)
    assert default["findings"][0]["saving_ms"] == pytest.approx(14.8, abs=0.1) and default["below_floor"] == []
    high = json.loads(gpuutil(*args, "--findings-floor", "20ms").stdout)
    assert high["findings"] == [] and [f["rule"] for f in high["below_floor"]] == ["launch-bound"]
    table = gpuutil("analyze", FINDINGS / "small_kernels.json.gz", "--findings-floor", "20ms").stdout
    assert "findings: none (1 under the floor of 20 ms and 2 % of the test's time)" in table
    bad = gpuutil(*args, "--findings-floor", "lots")
    assert bad.returncode == 2 and bad.stderr.startswith("error: --findings-floor: expected MSms and/or PCT%")


def test_an_unknown_rule_is_one_line():
    res = gpuutil("analyze", FINDINGS / "small_kernels.json.gz", "--findings-ignore", "launch_bound")
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.strip().splitlines() == [
        "error: --findings-ignore: unknown findings rule launch_bound (rules: pageable-memcpy, host-sync, launch-bound, "
        "fp32-matmul, gpu-idle, memcpy-dominant, low-sm-activity)"]
