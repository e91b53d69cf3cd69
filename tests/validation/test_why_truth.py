"""validation/gates/why_truth.py's plumbing on the synthetic GPU: each planted change in the GPU work
flagged and named on its first line (the idle times of a synthetic run are the host's, loaded or not:
the ``.item()`` case and the shares are for the GPU run)."""
from __future__ import annotations

import json

import pytest


def test_why_truth_on_the_synthetic_gpu(tmp_path):
    pytest.importorskip("torch")
    from validation.gates import why_truth

    why_truth.main([str(tmp_path), "--synthetic", "--runs", "1"])
    result = json.loads((tmp_path / "why.json").read_text())
    assert result["runs"] == 1 and result["baseline_exit"] == 0
    cases = {c["case"]: c for c in result["cases"]}
    assert set(cases) == set(why_truth.CASES)
    for name in ("test_matmul_dtype", "test_fused_op", "test_copy_pinned", "test_matmul_size"):
        assert cases[name]["flagged_runs"] == 1 and cases[name]["names_planted"], cases[name]
