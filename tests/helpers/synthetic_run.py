"""Synthetic run documents for the HTML report's tests and benchmark: 1,000 tests look like a real run.

``synthetic_document`` gives a document shaped like ``gpu_util.json`` of an xdist run (realistic
kernel names and category mixes, some kernel_bench / gpu_trace results, memory figures on part of
the tests, several GPUs and workers); ``synthetic_baseline`` the same tests a little different,
a few of them clearly worse now. Seeded, so every call with the same arguments gives the same run.
Used by ``tests/report/`` and ``benchmarks/bench_html.py``.
"""
from __future__ import annotations

import random
from typing import Any

from pytest_gpuutil.records import TestRecord

#: Category mixes (share of busy time) with a typical top kernel and test names, for synthetic tests.
PROFILES = (
    ({"gemm": 0.93, "elementwise": 0.05, "memset": 0.02}, "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT",
     "ops/test_matmul", ("matmul_bf16", "linear", "bmm", "addmm")),
    ({"attention": 0.71, "gemm": 0.22, "elementwise": 0.07}, "void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 64, 64, 4, false, false, cutlass::bfloat16_t>, true, false, false, false, true, true, false, false>(flash::Flash_fwd_params)",
     "models/test_transformer", ("sdpa", "attention_block", "decoder_layer")),
    ({"conv": 0.62, "elementwise": 0.18, "normalization": 0.12, "memcpy": 0.08}, "sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cudnn",
     "models/test_resnet", ("conv2d", "bottleneck", "stem")),
    ({"communication": 0.58, "gemm": 0.37, "memset": 0.05}, "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
     "distributed/test_ddp", ("allreduce", "ddp_step", "bucketed_allreduce")),
    ({"elementwise": 0.81, "reduction": 0.19}, "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)",
     "ops/test_pointwise", ("gelu", "add", "fused_adam", "softmax")),
    ({"triton_pointwise": 0.55, "triton_reduction": 0.3, "triton_template": 0.15}, "triton_poi_fused_add_mul_native_layer_norm_0",
     "compile/test_inductor", ("layernorm", "mlp", "training_step")),
    ({"memcpy": 0.87, "elementwise": 0.13}, "Memcpy DtoH (Device -> Pageable)",
     "data/test_loader", ("pin_memory", "to_device", "prefetch")),
)

#: a kernel of each category, for the top kernels after a profile's own top one
KERNEL_OF = {
    "gemm": PROFILES[0][1], "attention": PROFILES[1][1], "conv": PROFILES[2][1], "communication": PROFILES[3][1],
    "elementwise": PROFILES[4][1], "triton_pointwise": PROFILES[5][1], "memcpy": PROFILES[6][1],
    "memset": "Memset (Device)",
    "normalization": "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>(int, float, "
                     "float const*, float const*, float const*, float*, float*, float*)",
    "reduction": "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float, "
                 "float, float>, unsigned int, float, 4, 4> >(at::native::ReduceOp<float, at::native::MeanOps<float, "
                 "float, float, float>, unsigned int, float, 4, 4>)",
    "triton_reduction": "triton_red_fused__softmax_1",
    "triton_template": "triton_tem_fused_mm_0",
}


def _record(rng: random.Random, test: str, profile: int, worker: str, gpu: str) -> dict[str, Any]:
    """One synthetic test record, the shape ``TestRecord.to_dict`` writes (plus memory figures on some)."""
    outcome = rng.choices(("passed", "failed", "skipped", "xfailed"), weights=(90, 4, 5, 1))[0]
    record: dict[str, Any] = TestRecord(test=test, outcome=outcome, worker=worker).to_dict()
    if outcome == "skipped":
        record["note"] = ""
        return record
    wall_ms = rng.lognormvariate(3.5, 1.2)
    busy_pct = min(99.0, rng.betavariate(1.2, 3.0) * 100)
    busy_ms = wall_ms * busy_pct / 100
    mix, top = PROFILES[profile][:2]
    categories = {}
    for name, share in mix.items():
        share_of_busy = share * 100 * rng.uniform(0.85, 1.0)
        categories[name] = {"time_us": busy_ms * 1000 * share_of_busy / 100, "share_of_busy": share_of_busy,
                            "pct_of_window": busy_pct * share_of_busy / 100, "count": rng.randint(1, 400)}
    pct = {name: c["pct_of_window"] for name, c in categories.items()}
    record.update(
        wall_ms=wall_ms, gpu_busy_ms=busy_ms, busy_pct=busy_pct,
        mm_conv_pct=pct.get("gemm", 0.0) + pct.get("conv", 0.0), attention_pct=pct.get("attention", 0.0),
        communication_pct=pct.get("communication", 0.0), memcpy_pct=pct.get("memcpy", 0.0),
        kernel_count=sum(c["count"] for c in categories.values()), measure_ms=rng.uniform(0.05, 0.4),
        top_kernel=top, devices=["0"], gpu_busy_us_by_device={gpu: busy_ms * 1000}, categories=categories,
        top_kernels=[{"name": top if i == 0 else KERNEL_OF[name], "category": name, "count": c["count"],
                      "total_us": c["time_us"], "pct_of_window": c["pct_of_window"]}
                     for i, (name, c) in enumerate(categories.items())][:5],
        idle_gaps=[{"device": "0", "start_us": rng.uniform(0, wall_ms * 1000), "dur_us": (wall_ms - busy_ms) * 1000 * share}
                   for share in sorted((rng.uniform(0.05, 0.5) for _ in range(rng.randint(1, 3))), reverse=True)],
    )
    if rng.random() < 0.6:  # the memory fields being added to TestRecord
        peak = rng.uniform(10, 40_000)
        record.update(peak_alloc_mb=peak, peak_reserved_mb=peak * rng.uniform(1.0, 1.3),
                      leaked_mb=0.0 if rng.random() < 0.9 else rng.uniform(1, 50), alloc_retries=0, ooms=0)
    if rng.random() < 0.03:
        median = rng.uniform(0.01, 5.0)
        record["kernel_bench"] = {"mm": {"label": "mm", "median": median, "mean": median * 1.01, "std": median * 0.02,
                                         "min": median * 0.98, "max": median * 1.08, "p20": median * 0.99,
                                         "p80": median * 1.02, "reps": rng.randint(20, 500), "warmup_reps": 25,
                                         "timer": "cuda_event", "device": "NVIDIA H200", "unit": "ms",
                                         "gbps": None, "tflops": rng.uniform(100, 800), "note": ""}}
    if rng.random() < 0.03:
        record["gpu_trace"] = {"block": {"window_us": wall_ms * 1000, "busy_us": busy_ms * 1000, "busy_pct": busy_pct,
                                         "mm_conv_pct": record["mm_conv_pct"], "kernel_count": record["kernel_count"],
                                         "categories": {k: c["share_of_busy"] for k, c in categories.items()},
                                         "top_kernel": top}}
    return record


def synthetic_document(tests: int = 1000, seed: int = 1, workers: int = 4, gpus: int = 2) -> dict[str, Any]:
    """A run document like ``gpu_util.json`` of an xdist run (``workers`` on ``gpus`` GPUs)."""
    rng = random.Random(seed)
    named: dict[str, int] = {}
    while len(named) < tests:
        profile = rng.randrange(len(PROFILES))
        _, _, module, ops = PROFILES[profile]
        named[f"tests/{module}.py::test_{rng.choice(ops)}[{rng.choice(('bf16', 'fp16', 'fp32'))}-{len(named)}]"] = profile
    records = []
    for k, name in enumerate(sorted(named)):
        worker = f"gw{k % workers}" if workers > 1 else ""
        records.append(_record(rng, name, named[name], worker, str(k % workers % gpus)))
    per_gpu: dict[str, dict[str, Any]] = {}
    for r in records:
        for gpu, busy_us in r["gpu_busy_us_by_device"].items():
            entry = per_gpu.setdefault(gpu, {"gpu": gpu, "busy_ms": 0.0, "tests": 0, "workers": set()})
            entry["busy_ms"] += busy_us / 1000
            entry["tests"] += 1
            entry["workers"].add(r["worker"] or "main")
    measured = [r for r in records if r["gpu_busy_ms"] is not None]
    gpu_ms = sum(r["gpu_busy_ms"] for r in measured)
    wall_ms = sum(r["wall_ms"] for r in measured)
    thresholds = {r["test"]: "failed" for r in records if r["outcome"] == "failed" and rng.random() < 0.5}
    return {
        "format": "pytest-gpuutil",
        "version": 1,
        "created": "2026-11-22T09:30:00+00:00",
        "machine_info": {"gpu_model": "NVIDIA H200", "gpu_count": gpus,
                         "gpus": [{"index": str(i), "name": "NVIDIA H200"} for i in range(gpus)],
                         "driver": "580.159.04", "cuda": "13.0", "torch": "2.11.0+cu130", "host": "gpu-runner-7",
                         "python": "3.12.3", "platform": "Linux", "git_commit": "0123456789abcdef0123456789abcdef01234567",
                         "cuda_available": True, "argv": f"-n {workers} --gpu-util --gpu-util-pin tests/"},
        "tests": records,
        "gpus": [{**e, "workers": sorted(e["workers"])} for _, e in sorted(per_gpu.items())],
        "totals": {"tests": len(records), "measure_ms": sum(r["measure_ms"] or 0 for r in records) + 40.0,
                   "measure_in_tests_ms": sum(r["measure_ms"] or 0 for r in records), "test_s": wall_ms / 1000 * 1.3,
                   "measure_share_pct": 1.2, "startup_s": 0.412, "profiled": len(measured),
                   "with_gpu_work": len(measured), "gpu_busy_ms": gpu_ms, "profiled_wall_ms": wall_ms,
                   "busy_pct": 100.0 * gpu_ms / wall_ms if wall_ms else 0.0},
        "thresholds": thresholds,
    }


def synthetic_baseline(doc: dict[str, Any], seed: int = 2, regressions: int = 5) -> list[TestRecord]:
    """The same tests a little different, ``regressions`` of them clearly worse before (i.e. now)."""
    rng = random.Random(seed)
    out = []
    measured = [t for t in doc["tests"] if t["gpu_busy_ms"] is not None]
    worse = {t["test"] for t in rng.sample(measured, min(regressions, len(measured)))}
    for t in doc["tests"]:
        record = TestRecord.from_dict(t)
        if t["gpu_busy_ms"] is not None:
            factor = 0.6 if t["test"] in worse else rng.uniform(0.97, 1.04)
            busy = min(100.0, t["busy_pct"] / factor) if t["test"] in worse else t["busy_pct"] * rng.uniform(0.98, 1.02)
            record = TestRecord.from_dict({**t, "gpu_busy_ms": t["gpu_busy_ms"] * factor, "busy_pct": busy})
        out.append(record)
    return out
