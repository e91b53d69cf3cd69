"""The page's comparison view in a real browser: each flagged test's differences and its before/after bars."""
from __future__ import annotations

from pathlib import Path

import pytest

from pytest_gpuutil.gates.explain import explain
from pytest_gpuutil.records import TestRecord
from pytest_gpuutil.report.html_report import render_report
from pytest_gpuutil.report.html_report.why_view import why_section
from tests.helpers.headless_chromium import find_chromium, run_page
from tests.helpers.synthetic_run import synthetic_document

CHROMIUM = find_chromium()

BF16 = "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"
FP32 = "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas"

READ_WHY = r"""
window.addEventListener("load", function () {
  var out = {};
  try {
    var tests = Array.prototype.slice.call(document.querySelectorAll("#why section.why-test"));
    out.tests = tests.map(function (s) { return s.getAttribute("data-test"); });
    out.items = tests.map(function (s) {
      return Array.prototype.slice.call(s.querySelectorAll("li")).map(function (li) { return li.textContent; }); });
    out.bars = tests.map(function (s) {
      return Array.prototype.slice.call(s.querySelectorAll("table.why-bars")).map(function (t) {
        return [t.getAttribute("data-kind"), Array.prototype.slice.call(t.querySelectorAll("tr.why-row")).map(function (r) {
          var b = r.querySelectorAll(".why-bar");
          return [r.cells[0].textContent, b[0].getBoundingClientRect().width, b[1].getBoundingClientRect().width]; })]; }); });
  } catch (e) {
    guHarness.errors.push("harness: " + e);
  }
  guHarness.done(out);
});
"""


def document_with_why() -> dict:
    document = synthetic_document(3, seed=7)
    test = document["tests"][0]["test"]
    before = TestRecord(test, "passed", gpu_busy_ms=5.2, wall_ms=6.0, kernels=((BF16, 10, 5200.0),))
    after = TestRecord(test, "passed", gpu_busy_ms=81.0, wall_ms=82.0, kernels=((FP32, 10, 80800.0),))
    document["explanations"] = {test: explain(before, after, ["gpu_busy_ms"]).to_dict()}
    return document


def test_no_flagged_test_no_view():
    assert why_section(synthetic_document(2, seed=1)) == ""


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (.ci/run installs it with apt-get)")
def test_the_comparison_view_shows_each_flagged_tests_differences_and_bars(tmp_path: Path):
    document = document_with_why()
    test = next(iter(document["explanations"]))
    seen = run_page(CHROMIUM, render_report(document, None), READ_WHY, tmp_path)
    assert seen["errors"] == []
    assert seen["tests"] == [test]
    assert seen["items"][0][0].startswith("+75.6 ms: gemm bf16/fp16 -> fp32 (no TF32)")
    (kernel_kind, kernel_rows), (category_kind, category_rows) = seen["bars"][0]
    assert kernel_kind == "kernel" and category_kind == "category"
    name, before, after = kernel_rows[0]
    assert name == "gemm bf16/fp16 -> fp32 (no TF32)" and after == pytest.approx(240, abs=1)
    assert before == pytest.approx(240 * 5.2 / 80.8, abs=1)
    assert [row[0] for row in category_rows] == ["gemm fp32 (no TF32)", "gemm bf16/fp16"]
    assert category_rows[0][1] <= 1 and category_rows[1][2] <= 1  # absent on one side: no bar to speak of
