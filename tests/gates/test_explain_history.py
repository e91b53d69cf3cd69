"""The history gate and the job summary explain too; the history keeps each record's kernels."""
from __future__ import annotations

from pytest_gpuutil.gates.explain import explain_comparison
from pytest_gpuutil.gates.regression import parse_fail_exprs
from pytest_gpuutil.history.noise import compare_with_history
from pytest_gpuutil.history.store import open_history
from pytest_gpuutil.records import TestRecord
from pytest_gpuutil.report.ci import step_summary_markdown

BF16 = "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"
MUL = "void at::native::vectorized_elementwise_kernel<4, at::native::binary_internal::MulFunctor<float> >(int)"


def rec(gpu_ms: float, kernels, test: str = "t.py::test_a") -> TestRecord:
    return TestRecord(test, "passed", gpu_busy_ms=gpu_ms, wall_ms=gpu_ms + 1.0, busy_pct=100 * gpu_ms / (gpu_ms + 1),
                      kernels=tuple(kernels))


def test_the_history_gate_explains_against_the_latest_earlier_run(tmp_path):
    earlier = [rec(5.0 + 0.01 * i, [(BF16, 10, 5000.0 + 10 * i)]) for i in range(5)]
    with open_history(tmp_path / "h.sqlite", create=True) as history:
        for i, record in enumerate(earlier):
            history.append({"gpu_model": "NVIDIA H200", "gpu_count": 1}, [record], f"2026-11-27T00:0{i}:00")
        runs = history.recent("NVIDIA_H200-x1", 5)
    assert [r.kernels for r in runs.get("t.py::test_a", ())] == [r.kernels for r in earlier]
    now = rec(15.0, [(BF16, 10, 5040.0), (MUL, 200, 9960.0)])
    result = compare_with_history({"t.py::test_a": earlier}, [now], parse_fail_exprs("gpu_busy_ms:10%"))
    assert result.failed and result.latest["t.py::test_a"] is earlier[-1]
    why = explain_comparison(result.latest, [now], result.comparison)["t.py::test_a"]
    assert why.first_line.startswith("+10.0 ms: new kernel `vectorized_elementwise_kernel<...MulFunctor...>` x200")
    summary = step_summary_markdown([now], result.comparison.regressions, explanations={"t.py::test_a": why})
    assert "**Why `t.py::test_a`**" in summary and "- +10.0 ms: new kernel" in summary
