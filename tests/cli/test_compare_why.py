"""``gpuutil compare``: the comparison that cannot pass by matching nothing, and why a test regressed."""
from __future__ import annotations

from pytest_gpuutil.cli import compare as compare_cli
from tests.cli.test_compare import rec, write_run

FP32 = "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas"
BF16 = "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"


def test_matching_nothing_fails(tmp_path, capsys):
    base = write_run(tmp_path / "b.json", [rec("t.py::test_a"), rec("t.py::test_b")])
    cur = write_run(tmp_path / "c.json", [rec("u.py::test_c")])
    assert compare_cli.main([str(base), str(cur)]) == 1
    out, _ = capsys.readouterr()
    assert "FAILED: none of this run's 1 test(s) matched the baseline's 2" in out
    assert "no regressions" not in out


def test_ids_under_a_moved_rootdir_are_compared_and_the_regression_explained(tmp_path, capsys):
    base = write_run(tmp_path / "b.json", [rec("t.py::test_a", gpu_busy_ms=5.2, wall_ms=6.0, busy_pct=86.7,
                                               kernels=((BF16, 10, 5200.0),))])
    cur = write_run(tmp_path / "c.json", [rec("proj/t.py::test_a", gpu_busy_ms=81.0, wall_ms=82.0, busy_pct=98.8,
                                              kernels=((FP32, 10, 80800.0),))])
    assert compare_cli.main([str(base), str(cur)]) == 1
    out, _ = capsys.readouterr()
    lines = out.splitlines()
    assert any(line.startswith("matched 1 test(s) whose ids differ") for line in lines)
    at = next(i for i, line in enumerate(lines) if line.startswith("why test_a"))
    assert lines[at + 1].startswith("  +75.6 ms: gemm bf16/fp16 -> fp32 (no TF32)")
    assert lines[-1].startswith("1 regressions in 1 of 1 tests compared")
