"""The kernel zoo: one real H100 trace per op family (validation/record_zoo.py, tests/data/zoo/ZOO.md).

Each family must land in the category a user would look for, no trace may leave more than 5 % of
its busy time in ``other``, and busy time must equal the independent decimal reference exactly.
"""
from __future__ import annotations

import gzip
import json
from decimal import Decimal

import pytest

from pytest_gpuutil import analyze, read_trace
from tests.helpers.reference import DATA, exact_union_us, us_to_ns

ZOO = DATA / "zoo"

#: family: (busy µs, exact decimal union from the JSON text; the category it must land in; the
#: least share of busy time that category must hold)
FAMILIES = {
    "matmul_fp32": ("676.764", "gemm", 99.9),
    "matmul_tf32": ("94.850", "gemm", 99.9),
    "matmul_bf16": ("47.840", "gemm", 99.9),
    "matmul_fp8": ("29.920", "gemm", 99.9),
    "matmul_int8": ("280.900", "gemm", 99.9),
    "grouped_gemm": ("37.760", "gemm", 99.9),
    "conv2d_fwd_bwd": ("291.908", "conv", 60.0),
    "conv_transpose2d_fwd_bwd": ("280.164", "conv", 60.0),
    "sdpa_flash_fwd_bwd": ("513.001", "attention", 75.0),
    "sdpa_efficient_fwd_bwd": ("998.541", "attention", 80.0),
    "sdpa_cudnn_fwd_bwd": ("371.653", "attention", 75.0),
    "flex_attention_fwd_bwd": ("540.198", "attention", 80.0),
    "fft": ("382.180", "fft", 80.0),
    "sort_scan_topk": ("2656.809", "sort_scan", 95.0),
    "linalg": ("72942.415", "linalg", 97.0),
    "embedding_cross_entropy_bwd": ("20223.160", "gemm", 80.0),
    "norms_fwd_bwd": ("3621.918", "normalization", 60.0),
    "cuda_graph_replay": ("316.551", "gemm", 97.0),
    "train_step_adamw_foreach": ("1833.135", "gemm", 55.0),
    "train_step_adamw_fused": ("1461.895", "gemm", 70.0),
    "compile_pointwise_reduction": ("378.885", "gemm", 90.0),
    "compile_max_autotune": ("432.526", "gemm", 90.0),
}

#: kernels the issue named as "other" on main at 17565fb, and where they belong
NAMED_IN_THE_ISSUE = {
    "regular_fft_factor": "fft",
    "postprocess_kernel<float, unsigned int, (loadstore_modifier_t)2>": "fft",
    "getrf_pivot": "linalg",
    "trsm_ln_kernel": "linalg",
    "ipiv_lower_small": "linalg",
    "xxtrf4_set_info_ker": "linalg",
    "DeviceRadixSortOnesweepKernel": "sort_scan",
    "DeviceScanKernel": "sort_scan",
    "mbtopk::gatherTopK": "sort_scan",
    "radixSortKVInPlace": "sort_scan",
    "cudnn::fusion::compute_dot_do_o_specialized": "attention",
    "cudnn::fusion::convert_dq_to_16bits": "attention",
}


def zoo_summary(family: str):
    return analyze(read_trace(ZOO / f"{family}.json.gz"))


def test_the_zoo_holds_every_family_and_its_manifest():
    manifest = json.loads((ZOO / "manifest.json").read_text())
    assert set(manifest["families"]) == set(FAMILIES)
    assert "H100" in manifest["gpu"] and manifest["torch"].startswith("2.")
    assert len(FAMILIES) >= 15


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_busy_time_equals_the_exact_reference(family):
    busy_us, _, _ = FAMILIES[family]
    with gzip.open(ZOO / f"{family}.json.gz", "rt") as handle:
        events = json.load(handle, parse_float=Decimal)["traceEvents"]
    assert exact_union_us(events) == Decimal(busy_us)  # the table above is the independent reference
    assert round(zoo_summary(family).busy_us * 1000) == us_to_ns(busy_us)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_family_lands_in_its_category(family):
    _, category, least_share = FAMILIES[family]
    s = zoo_summary(family)
    found = s.category(category)
    assert found is not None, [c.name for c in s.categories]
    assert found.share_of_busy >= least_share
    assert found.time_us == max(c.time_us for c in s.categories)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_no_trace_leaves_more_than_five_percent_in_other(family):
    other = zoo_summary(family).category("other")
    assert other is None or other.share_of_busy <= 5.0, zoo_summary(family).top_other


def test_the_kernels_named_in_the_issue_are_classified():
    from pytest_gpuutil import KernelClassifier

    names = set()
    for path in sorted(ZOO.glob("*.json.gz")):
        names |= {e.name for e in read_trace(path).events}
    classifier = KernelClassifier()
    for fragment, category in NAMED_IN_THE_ISSUE.items():
        matching = [n for n in names if fragment in n]
        assert matching, fragment
        assert {classifier.classify(n) for n in matching} == {category}, fragment


@pytest.mark.parametrize("family, least_share", [("train_step_adamw_foreach", 30.0), ("train_step_adamw_fused", 15.0)])
def test_optimizer_steps_are_elementwise(family, least_share):
    # AdamW runs as ATen multi_tensor_apply_kernel launches (foreach or fused)
    s = zoo_summary(family)
    assert s.category("elementwise").share_of_busy >= least_share
    assert any("multi_tensor_apply_kernel" in k.name and k.category == "elementwise" for k in s.top_kernels)


def test_inductor_kernels_keep_their_triton_categories():
    s = zoo_summary("compile_pointwise_reduction")
    assert s.category("triton_reduction") is not None and s.category("triton_persistent_reduction") is not None
    tuned = zoo_summary("compile_max_autotune")  # triton_tem_fused_mm_0 is a matmul template: gemm
    assert any(k.name.startswith("triton_tem_fused_mm") and k.category == "gemm" for k in tuned.top_kernels)
