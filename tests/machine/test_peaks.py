"""Datasheet peaks by GPU name, and kernel_bench's share of them."""
from __future__ import annotations

import pytest

from pytest_gpuutil.capture.timing import peak_fields
from pytest_gpuutil.machine.peaks import check_dtype, device_peaks


@pytest.mark.parametrize("name, model, bf16, gbps", [
    ("NVIDIA H100 80GB HBM3", "H100 SXM5", 989.4, 3350),
    ("NVIDIA H100 PCIe", "H100 PCIe", 756, 2000),
    ("NVIDIA H100 NVL", "H100 NVL", 835.5, 3900),
    ("NVIDIA H200", "H200 SXM", 989.4, 4800),
    ("NVIDIA H200 NVL", "H200 NVL", 835.5, 4800),
    ("NVIDIA A100-SXM4-80GB", "A100 80GB SXM4", 312, 2039),
    ("NVIDIA A100 80GB PCIe", "A100 80GB PCIe", 312, 1935),
    ("NVIDIA A100-PCIE-40GB", "A100 40GB", 312, 1555),
    ("NVIDIA L40S", "L40S", 366.5, 864),
    ("NVIDIA L4", "L4", 121, 300),
    ("NVIDIA A10", "A10", 125, 600),
])
def test_names_as_torch_gives_them_find_their_model(name: str, model: str, bf16: float, gbps: float) -> None:
    peaks = device_peaks(name)
    assert peaks is not None and peaks.model == model
    assert peaks.tflops["bf16"] == bf16 and peaks.memory_gbps == gbps


def test_unknown_gpus_and_missing_dtypes() -> None:
    assert device_peaks("NVIDIA GeForce RTX 4090") is None
    assert "bf16" not in device_peaks("Tesla T4").tflops and device_peaks("Tesla T4").tflops["fp16"] == 65


def test_share_of_the_peak() -> None:
    fields = peak_fields("NVIDIA H100 80GB HBM3", gbps=2680.0, tflops=742.05, flops_dtype="bf16")
    assert fields["tflops_pct_of_peak"] == pytest.approx(75.0)
    assert fields["gbps_pct_of_peak"] == pytest.approx(80.0)
    assert fields["peak_source"] == "datasheet of the H100 SXM5" and fields["flops_dtype"] == "bf16"
    assert peak_fields("NVIDIA H100 80GB HBM3", None, None, "bf16") == {}


def test_an_unknown_gpu_measures_its_copy_ceiling_for_bandwidth() -> None:
    fields = peak_fields("Some GPU", gbps=500.0, tflops=10.0, flops_dtype="fp32", copy_ceiling=lambda: 1000.0)
    assert fields == {"flops_dtype": "fp32", "peak_gbps": 1000.0, "gbps_pct_of_peak": 50.0,
                      "peak_source": "measured device-to-device copy"}

    def broken() -> float:
        raise RuntimeError("out of memory")

    assert "gbps_pct_of_peak" not in peak_fields("Some GPU", 500.0, None, "bf16", copy_ceiling=broken)


@pytest.mark.parametrize("given, name", [("bf16", "bf16"), ("torch.bfloat16", "bf16"), ("float16", "fp16"),
                                         ("FP32", "fp32"), ("torch.float8_e4m3fn", "fp8"), ("tf32", "tf32")])
def test_dtype_names(given: str, name: str) -> None:
    assert check_dtype(given) == name


def test_a_wrong_dtype_is_named() -> None:
    with pytest.raises(ValueError, match="flops_dtype must be one of fp64, fp32, tf32, bf16, fp16, fp8"):
        check_dtype("int4")
