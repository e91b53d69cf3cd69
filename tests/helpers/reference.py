"""An independent reference for busy time: stdlib json with Decimal timestamps, a plain sweep.

Deliberately shares no code with pytest_gpuutil, so tests compare two implementations.
"""
from __future__ import annotations

import gzip
import json
from decimal import Decimal
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "data"
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")

#: Busy and span µs published in tests/data/TRACES.md: exact decimal arithmetic on the numbers as
#: written in the JSON, so the analyzer must give them to the nanosecond.
PUBLISHED_US = {  # name: (busy µs, span µs)
    "bmm_bf16": ("172.063", "216.543"),
    "linear_fp16": ("755.522", "811.299"),
    "conv3d_fp32_fwd_bwd": ("3320.794", "3821.880"),
    "sdpa_flash": ("2937.007", "2939.503"),
    "sdpa_efficient": ("6632.919", "6635.350"),
    "sdpa_math": ("126641.059", "126818.025"),
    "layernorm_softmax": ("605.920", "617.406"),
    "memcpy_h2d_d2h": ("7278.632", "7305.383"),
    "two_streams_overlap": ("3895.439", "4160.846"),
    "user_annotations": ("979.937", "3595.647"),
    "duty_cycle_25": ("5055.748", "20667.218"),
    "duty_cycle_75": ("5055.795", "7384.940"),
    "inductor_pointwise_reduction": ("19.105", "416.478"),
    "nccl_allreduce_rank0": ("3802.223", "88416.116"),
    "nccl_allreduce_rank1": ("31338.948", "114749.572"),
    "idle_no_gpu_work": ("0", "0"),
}


def us_to_ns(us: Decimal | str) -> int:
    """Microseconds written with at most three decimals, as whole nanoseconds (exactly)."""
    ns = Decimal(us) * 1000
    if ns != ns.to_integral_value():
        raise ValueError(f"{us} µs is not a whole number of nanoseconds")
    return int(ns)


#: the published busy and span times in whole nanoseconds
PUBLISHED_BUSY_NS = {name: us_to_ns(busy) for name, (busy, _) in PUBLISHED_US.items()}
PUBLISHED_SPAN_NS = {name: us_to_ns(span) for name, (_, span) in PUBLISHED_US.items()}


def load_events(name: str) -> list:
    with gzip.open(DATA / f"{name}.json.gz", "rt") as handle:
        return json.load(handle, parse_float=Decimal)["traceEvents"]


def exact_union_us(events, cats=GPU_CATS, name_filter=None) -> Decimal:
    spans = sorted(
        (Decimal(e["ts"]), Decimal(e["ts"]) + Decimal(e["dur"]))
        for e in events
        if e.get("cat") in cats and (name_filter is None or name_filter(e["name"]))
    )
    total = Decimal(0)
    end = None
    start = None
    for s, e in spans:
        if end is None or s > end:
            if end is not None:
                total += end - start
            start, end = s, e
        else:
            end = max(end, e)
    if end is not None:
        total += end - start
    return total


def plain_sum_us(events, cats=("kernel",)) -> Decimal:
    return sum((Decimal(e["dur"]) for e in events if e.get("cat") in cats), Decimal(0))
