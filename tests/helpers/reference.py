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

#: Busy µs published in tests/data/TRACES.md (computed with float64 absolute timestamps).
PUBLISHED_BUSY_US = {
    "bmm_bf16": 172.062,
    "linear_fp16": 755.521,
    "conv3d_fp32_fwd_bwd": 3320.794,
    "sdpa_flash": 2937.007,
    "sdpa_efficient": 6632.920,
    "sdpa_math": 126641.060,
    "layernorm_softmax": 605.920,
    "memcpy_h2d_d2h": 7278.632,
    "two_streams_overlap": 3895.438,
    "user_annotations": 979.938,
    "duty_cycle_25": 5055.750,
    "duty_cycle_75": 5055.796,
    "inductor_pointwise_reduction": 19.105,
    "nccl_allreduce_rank0": 3802.222,
    "nccl_allreduce_rank1": 31338.948,
    "idle_no_gpu_work": 0.0,
}


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
