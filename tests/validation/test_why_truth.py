"""validation/gates/why_truth.py's plumbing on the synthetic GPU: every planted change named, unchanged tests unflagged."""
from __future__ import annotations

import json

import pytest


def test_why_truth_on_the_synthetic_gpu(tmp_path):
    pytest.importorskip("torch")
    from validation.gates import why_truth

    why_truth.main([str(tmp_path), "--synthetic", "--runs", "1"])
    result = json.loads((tmp_path / "why.json").read_text())
    assert result["runs"] == 1 and len(result["cases"]) == 5
    for case in result["cases"]:
        assert case["flagged_runs"] == 1, case
        assert case["names_planted"], case
        assert case["explained_pct"] >= 80, case
