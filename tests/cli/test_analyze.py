"""The gpuutil command line, run as a real subprocess."""
from __future__ import annotations

import csv
import io
import json
import subprocess
import sys

import pytest

from tests.helpers.reference import DATA


def gpuutil(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "pytest_gpuutil", *map(str, args)], capture_output=True, text=True, cwd=cwd
    )


def test_table_output_has_summary_categories_kernels_and_tabulate_line():
    res = gpuutil("analyze", DATA / "bmm_bf16.json.gz")
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "GPU busy %" in out and "4.28" in out
    assert "category" in out and "gemm" in out
    assert "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT" in out
    assert "Output for tabulate: bmm_bf16, 4.28%, 4.23%," in out


def test_json_single_and_several():
    one = gpuutil("analyze", DATA / "sdpa_flash.json.gz", "--format", "json")
    doc = json.loads(one.stdout)
    assert isinstance(doc, dict) and doc["categories"]["attention"]["count"] == 3
    assert 0 <= doc["busy_pct"] <= 100 and doc["window_source"] == "profiler"
    several = gpuutil("analyze", DATA / "sdpa_flash.json.gz", DATA / "idle_no_gpu_work.json.gz", "--format", "json")
    docs = json.loads(several.stdout)
    assert [d["path"].rsplit("/", 1)[-1] for d in docs] == ["sdpa_flash.json.gz", "idle_no_gpu_work.json.gz"]
    assert docs[1]["busy_pct"] == 0 and docs[1]["devices"] == {}


def test_csv_output():
    res = gpuutil("analyze", DATA / "conv3d_fp32_fwd_bwd.json.gz", DATA / "memcpy_h2d_d2h.json.gz", "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(res.stdout)))
    assert [r["path"].rsplit("/", 1)[-1] for r in rows] == ["conv3d_fp32_fwd_bwd.json.gz", "memcpy_h2d_d2h.json.gz"]
    assert float(rows[0]["mm_conv_pct"]) > 40 and rows[1]["top_kernel"].startswith("Memcpy")


def test_bad_traces_exit_2_one_line_each_and_good_ones_still_reported(tmp_path):
    broken = tmp_path / "broken.json"
    broken.write_text('{"traceEvents": [')
    res = gpuutil("analyze", DATA / "bmm_bf16.json.gz", tmp_path / "missing.json", broken, "--format", "json")
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert lines == [
        f"error: {tmp_path / 'missing.json'}: no such file",
        f"error: {broken}: not valid JSON (truncated?): Expecting value at line 1 column 18",
    ]
    assert "Traceback" not in res.stderr
    docs = json.loads(res.stdout)
    assert [d["path"] for d in docs] == [str(DATA / "bmm_bf16.json.gz")]


def test_user_rule_option_and_bad_rule():
    res = gpuutil("analyze", DATA / "two_streams_overlap.json.gz", "--format", "json", "--rule", "spin=spin_kernel")
    assert "spin" in json.loads(res.stdout)["categories"]
    bad = gpuutil("analyze", DATA / "bmm_bf16.json.gz", "--rule", "x=(")
    assert bad.returncode == 2 and bad.stderr.startswith("error: --rule: line 1: kernel rule x='(': bad regular expression")


@pytest.mark.parametrize("args, code", [((), 2), (("--help",), 0), (("frobnicate",), 2)])
def test_top_level_usage(args, code):
    res = gpuutil(*args)
    assert res.returncode == code
    assert "analyze" in res.stdout + res.stderr


def test_html_draws_each_traces_timeline(tmp_path):
    import re

    from pytest_gpuutil.analysis.timeline import decode

    page = tmp_path / "out.html"
    traces = [str(DATA / "two_streams_overlap.json.gz"), str(DATA / "memcpy_h2d_d2h.json.gz")]
    result = gpuutil("analyze", *traces, "--html", str(page), "--timeline-gap", "0.05")
    assert result.returncode == 0, result.stderr
    text = page.read_text(encoding="utf-8")
    drawn = json.loads(re.search(r'id="gu-timelines">(.*?)</script>', text, re.S).group(1))["tests"]
    assert len(drawn) == 2 and all(t["gt"] == 50_000 for t in drawn.values())
    rows = re.findall(r'<tr tabindex="0"[^>]*><td>(.*?)</td>', text)
    streams = decode(drawn[str(rows.index(traces[0]))])
    assert [(lane.device, lane.stream) for lane in streams.lanes] == [("0", "47"), ("0", "51")]
    copies = decode(drawn[str(rows.index(traces[1]))])
    assert {k[1] for k in copies.keys} >= {"gpu_memcpy"}
    (tmp_path / "a_file").write_text("")
    bad = gpuutil("analyze", traces[0], "--html", str(tmp_path / "a_file" / "x.html"))  # a folder that is a file
    assert bad.returncode == 2 and bad.stderr.startswith("error: --html: cannot write")
