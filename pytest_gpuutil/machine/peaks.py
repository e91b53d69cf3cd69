"""Datasheet peaks of common data-centre GPUs, so a kernel_bench result can say what share of the
device it reached (``flops=`` / ``bytes=``).

Dense peaks (no 2:4 sparsity), per GPU, at boost clock, from NVIDIA's datasheets:

- H100 SXM5 and PCIe, H100 NVL: "NVIDIA H100 Tensor Core GPU" datasheet (2023; tensor figures
  there are "with sparsity": halved here); H200 SXM and NVL: "NVIDIA H200 Tensor Core GPU"
  datasheet (2024);
- A100 40/80 GB, SXM4 and PCIe: "NVIDIA A100 Tensor Core GPU" datasheet (2021);
- L4, L40S, A10: their product datasheets (2023, 2023, 2021; sparse figures halved);
- T4 (2019) and V100 SXM2 (2020) datasheets (FP16 tensor; neither has BF16).

Real kernels rarely pass ~80 % of a tensor peak or ~90 % of the memory bandwidth; a GPU that runs
below its boost clock (power or thermal limits) lowers both. Unknown GPUs get no TFLOP/s peak and
a measured device-to-device copy ceiling for bandwidth.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Mapping, Optional

#: the names kernel_bench's ``flops_dtype=`` accepts
DTYPES = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8")


@dataclass(frozen=True)
class DevicePeaks:
    """One GPU model's peaks: TFLOP/s by data type (tensor cores where they apply), memory GB/s."""

    model: str
    tflops: Mapping[str, float] = field(default_factory=dict)
    memory_gbps: Optional[float] = None

    @property
    def source(self) -> str:
        return f"datasheet of the {self.model}"


def _p(model: str, fp64: Optional[float], fp32: float, tf32: Optional[float], bf16: Optional[float], fp8: Optional[float],
       gbps: float, fp16: Optional[float] = None) -> DevicePeaks:
    values = {"fp64": fp64, "fp32": fp32, "tf32": tf32, "bf16": bf16, "fp16": fp16 if fp16 is not None else bf16,
              "fp8": fp8}
    return DevicePeaks(model, {k: v for k, v in values.items() if v is not None}, gbps)


#: (regex on the CUDA device name, peaks), first match wins: the more specific names come first
PEAKS: tuple[tuple[str, DevicePeaks], ...] = (
    (r"H200.*NVL", _p("H200 NVL", 30, 60, 417.5, 835.5, 1670.5, 4800)),
    (r"H200", _p("H200 SXM", 34, 67, 494.7, 989.4, 1978.9, 4800)),
    (r"H100.*NVL", _p("H100 NVL", 30, 60, 417.5, 835.5, 1670.5, 3900)),
    (r"H100.*PCIe", _p("H100 PCIe", 26, 51, 378, 756, 1513, 2000)),
    (r"H100", _p("H100 SXM5", 34, 67, 494.7, 989.4, 1978.9, 3350)),
    (r"A100.*(PCIE|PCIe).*80|A100.*80GB PCIe", _p("A100 80GB PCIe", 9.7, 19.5, 156, 312, None, 1935)),
    (r"A100.*80", _p("A100 80GB SXM4", 9.7, 19.5, 156, 312, None, 2039)),
    (r"A100", _p("A100 40GB", 9.7, 19.5, 156, 312, None, 1555)),
    (r"L40S", _p("L40S", None, 91.6, 183, 366.5, 733, 864)),
    (r"\bL4\b", _p("L4", None, 30.3, 60, 121, 242.5, 300)),
    (r"\bA10\b", _p("A10", None, 31.2, 62.5, 125, None, 600)),
    (r"\bT4\b", _p("T4", None, 8.1, None, None, None, 320, fp16=65)),
    (r"V100", _p("V100 SXM2", 7.8, 15.7, None, None, None, 900, fp16=125)),
)


def device_peaks(name: str) -> Optional[DevicePeaks]:
    """The peaks of the GPU named ``name`` (``torch.cuda.get_device_name``), or None if not in the table."""
    for pattern, peaks in PEAKS:
        if re.search(pattern, name):
            return peaks
    return None


def check_dtype(value: object) -> str:
    """A data type name for the TFLOP/s peak: one of :data:`DTYPES`, or a torch dtype such as torch.bfloat16."""
    text = str(value).replace("torch.", "").lower()
    aliases = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32", "float": "fp32",
               "float64": "fp64", "double": "fp64", "float8_e4m3fn": "fp8", "float8_e5m2": "fp8"}
    text = aliases.get(text, text)
    if text not in DTYPES:
        raise ValueError(f"flops_dtype must be one of {', '.join(DTYPES)} (or a torch dtype), got {value!r}")
    return text


def findings_figures(name: Optional[str]) -> dict[str, float]:
    """The findings' estimates for the GPU named ``name`` where the table knows it (``gemm_speedup``:
    its TF32 over its fp32 peak, what fp32-matmul's saving uses); empty for an unknown GPU."""
    peaks = device_peaks(name) if name else None
    if peaks is None or not peaks.tflops.get("tf32") or not peaks.tflops.get("fp32"):
        return {}
    return {"gemm_speedup": peaks.tflops["tf32"] / peaks.tflops["fp32"]}
