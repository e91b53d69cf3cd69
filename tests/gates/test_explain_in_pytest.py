"""A red gate explains itself: terminal lines under the table, gpu_util.json and the JUnit property
(real pytest runs; the records' kernels planted as in test_gates_in_pytest.py)."""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

torch = pytest.importorskip("torch")
from tests.helpers import PLANT_CONFTEST, TWO_TESTS, output, plant, run  # noqa: E402

pytestmark = pytest.mark.usefixtures("warm_torch")

BF16 = "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"
FP32 = "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas"


def test_flagged_test_gets_at_most_4_lines_and_the_files_say_why(pytester):
    pytester.makeconftest(PLANT_CONFTEST)
    pytester.makepyfile(test_a=TWO_TESTS)
    same = {"gpu_busy_ms": 1.36, "wall_ms": 2.4, "busy_pct": 56.7, "kernels": [[BF16, 4, 1360.0]]}
    plant(pytester, test_fast={"gpu_busy_ms": 5.2, "wall_ms": 6.0, "busy_pct": 86.7, "kernels": [[BF16, 10, 5200.0]]},
          test_slow=same)
    assert run(pytester, "--gpu-util", "--gpu-util-save", "base").ret == 0
    noisy = {**same, "wall_ms": 3.0, "busy_pct": 45.3}  # the unchanged test: -11 pts, 0.6 ms more idle
    plant(pytester, test_fast={"gpu_busy_ms": 81.0, "wall_ms": 82.0, "busy_pct": 98.8, "kernels": [[FP32, 10, 80800.0]]},
          test_slow=noisy)
    result = run(pytester, "--gpu-util", "--gpu-util-compare", "base", "--junitxml=junit.xml")
    text = output(result)
    assert result.ret == 1, text
    lines = result.stdout.lines
    start = next(i for i, line in enumerate(lines) if line.startswith("why test_fast"))
    assert lines[start + 1].strip().startswith("+75.6 ms: gemm bf16/fp16 -> fp32 (no TF32)")
    assert not any(line.startswith("why test_slow") for line in lines)
    assert "test_slow" not in "\n".join(line for line in lines if "busy_pct" in line)
    assert len([line for line in lines[start:] if line.startswith("  +") or line.startswith("  -")]) <= 3
    doc = json.loads((pytester.path / ".gpu_util" / "gpu_util.json").read_text())
    assert list(doc["explanations"]) == ["test_a.py::test_fast"]
    why = doc["explanations"]["test_a.py::test_fast"]
    assert why["explained_pct"] >= 80 and why["first_line"].startswith("+75.6 ms: gemm bf16/fp16 -> fp32")
    props = {(p.get("name"), p.get("value")) for p in ET.parse(pytester.path / "junit.xml").iter("property")}
    values = [v for n, v in props if n == "gpu_util.why"]
    assert len(values) == 1 and "gemm bf16/fp16 -> fp32 (no TF32)" in values[0]
