"""Write a big, Kineto-shaped synthetic Chrome trace for speed and memory benchmarks on the CPU.

    python benchmarks/data/make_synthetic_trace.py --out /tmp/synthetic_trace.json [--steps 45000] [--gzip]

The shape copies real torch 2.11 / Kineto traces: metadata (``process_labels`` "CPU" and
"GPU 0".."GPU 7", ``process_name``, ``thread_name``), the ``cat: "Trace"`` profiler span on pid
"Spans", an ``overhead`` event on pid -1, and per launched kernel a ``cpu_op``, a
``cuda_runtime`` launch, an ``ac2g`` flow start/finish pair and a ``kernel`` with Kineto's full
``args``; every 50th step adds a matmul (``nvjet_*`` and an ``xmma_gemm`` split-K pair on a second
stream), every 100th a ``user_annotation``/``gpu_user_annotation`` pair, every 500th a memcpy and a
memset. Figures from this file are *synthetic*: label them so. Default: ~235k events, ~60 MB.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import sys
from dataclasses import dataclass
from typing import IO, Any, Iterator

CPU_PID = 2187
GPU_STREAM = 7
SIDE_STREAM = 13
DEFAULT_STEPS = 45_000
TINY_KERNEL = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctorOnSelf_add<float>, "
    "std::array<char*, 2ul> >(int, at::native::CUDAFunctorOnSelf_add<float>, std::array<char*, 2ul>)"
)
MATMUL_KERNEL = "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"
GEMM_KERNEL = "sm90_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"
SPLITK_KERNEL = "void cublasLt::splitKreduce_kernel<32, 16, int, float, float, float, float, false, false, false>"


@dataclass(frozen=True)
class SyntheticStats:
    """What was written: counts by kind, so tests can check the reader against them."""

    path: str
    steps: int
    events: int
    kernels: int
    memcpy: int
    memset: int
    gpu_user_annotations: int
    bytes: int

    @property
    def gpu_work_events(self) -> int:
        return self.kernels + self.memcpy + self.memset


def _us(value: float) -> float:
    """Microseconds with Kineto's three decimals."""
    return round(value, 3)


def _kernel_args(ext: int, corr: int, stream: int, rng: random.Random) -> dict[str, Any]:
    return {
        "External id": ext,
        "queued": 0,
        "device": 0,
        "context": 1,
        "stream": stream,
        "correlation": corr,
        "registers per thread": rng.choice((16, 32, 40, 168)),
        "shared memory": rng.choice((0, 0, 1024, 213188)),
        "blocks per SM": 0.007576,
        "warps per SM": 0.030303,
        "grid": [1, 1, 1],
        "block": [128, 1, 1],
        "est. achieved occupancy %": 0,
    }


def iter_events(steps: int, seed: int = 0) -> Iterator[dict[str, Any]]:
    """Yield the trace events (unsorted groups, as Kineto writes them)."""
    rng = random.Random(seed)
    base = 4444766755591.18
    yield {"ph": "M", "name": "process_labels", "ts": base, "pid": CPU_PID, "tid": 0, "args": {"labels": "CPU"}}
    yield {"ph": "M", "name": "process_name", "ts": base, "pid": CPU_PID, "tid": 0, "args": {"name": "python3"}}
    yield {"ph": "M", "name": "thread_name", "ts": base, "pid": CPU_PID, "tid": CPU_PID, "args": {"name": "thread 2187 (python3)"}}
    for gpu in range(8):
        yield {"ph": "M", "name": "process_labels", "ts": base, "pid": gpu, "tid": 0, "args": {"labels": f"GPU {gpu}"}}
        yield {"ph": "M", "name": "process_name", "ts": base, "pid": gpu, "tid": 0, "args": {"name": "python3"}}
        yield {"ph": "M", "name": "process_sort_index", "ts": base, "pid": gpu, "tid": 0, "args": {"sort_index": 16 + gpu}}
    for stream in (GPU_STREAM, SIDE_STREAM):
        yield {"ph": "M", "name": "thread_name", "ts": base, "pid": 0, "tid": stream, "args": {"name": f"stream {stream} "}}

    cpu_t = base + 120.0
    gpu_free = {GPU_STREAM: 0.0, SIDE_STREAM: 0.0}
    ext = 4000
    corr = 6900
    annotation_ext, annotation_gpu_start = 0, None
    for step in range(steps):
        ext += 1
        corr += 1
        op_dur = rng.uniform(7.0, 12.0)
        if step % 100 == 0:
            annotation_ext, annotation_gpu_start = ext, None
            yield {"ph": "X", "cat": "user_annotation", "name": f"## step {step // 100} ##", "pid": CPU_PID,
                   "tid": CPU_PID, "ts": _us(cpu_t), "dur": 0.0, "args": {"External id": ext, "Record function id": 0, "Ev Idx": 0}}
        yield {"ph": "X", "cat": "cpu_op", "name": "aten::add_", "pid": CPU_PID, "tid": CPU_PID, "ts": _us(cpu_t),
               "dur": _us(op_dur), "args": {"External id": ext, "Record function id": 0, "Sequence number": step,
                                             "Fwd thread id": 0, "Ev Idx": step % 7 + 1}}
        launch = cpu_t + 2.0
        yield {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": CPU_PID, "tid": CPU_PID,
               "ts": _us(launch), "dur": _us(op_dur - 3.0), "args": {"External id": ext, "cbid": 211, "correlation": corr}}
        yield {"ph": "s", "id": corr, "pid": CPU_PID, "tid": CPU_PID, "ts": _us(launch), "cat": "ac2g", "name": "ac2g"}
        start = max(launch + 5.0, gpu_free[GPU_STREAM])
        dur = rng.uniform(1.05, 1.6)
        gpu_free[GPU_STREAM] = start + dur
        if annotation_gpu_start is None:
            annotation_gpu_start = start
        yield {"ph": "X", "cat": "kernel", "name": TINY_KERNEL, "pid": 0, "tid": GPU_STREAM, "ts": _us(start),
               "dur": _us(dur), "args": _kernel_args(ext, corr, GPU_STREAM, rng)}
        yield {"ph": "f", "id": corr, "pid": 0, "tid": GPU_STREAM, "ts": _us(start), "cat": "ac2g", "name": "ac2g", "bp": "e"}
        cpu_t += op_dur + rng.uniform(0.5, 2.0)

        if step % 50 == 25:
            for name, stream, kdur in ((MATMUL_KERNEL, GPU_STREAM, 28.0), (GEMM_KERNEL, SIDE_STREAM, 35.0),
                                       (SPLITK_KERNEL, SIDE_STREAM, 3.5)):
                ext += 1
                corr += 1
                yield {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": CPU_PID, "tid": CPU_PID,
                       "ts": _us(cpu_t), "dur": 14.0, "args": {"External id": ext, "Record function id": 0,
                                                              "Sequence number": step, "Fwd thread id": 0, "Ev Idx": 1}}
                yield {"ph": "X", "cat": "cuda_driver", "name": "cuLaunchKernelEx", "pid": CPU_PID, "tid": CPU_PID,
                       "ts": _us(cpu_t + 3.0), "dur": 9.0, "args": {"External id": ext, "cbid": 652, "correlation": corr}}
                yield {"ph": "s", "id": corr, "pid": CPU_PID, "tid": CPU_PID, "ts": _us(cpu_t + 3.0), "cat": "ac2g", "name": "ac2g"}
                start = max(cpu_t + 8.0, gpu_free[stream])
                gpu_free[stream] = start + kdur
                yield {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": _us(start),
                       "dur": _us(kdur), "args": _kernel_args(ext, corr, stream, rng)}
                yield {"ph": "f", "id": corr, "pid": 0, "tid": stream, "ts": _us(start), "cat": "ac2g", "name": "ac2g", "bp": "e"}
                cpu_t += 15.0

        if step % 500 == 499:
            for cat, name, kdur in (("gpu_memcpy", "Memcpy DtoH (Device -> Pinned)", 40.0),
                                    ("gpu_memset", "Memset (Device)", 1.2)):
                ext += 1
                corr += 1
                api = "cudaMemcpyAsync" if cat == "gpu_memcpy" else "cudaMemsetAsync"
                yield {"ph": "X", "cat": "cuda_runtime", "name": api, "pid": CPU_PID, "tid": CPU_PID, "ts": _us(cpu_t),
                       "dur": 6.0, "args": {"External id": ext, "cbid": 51, "correlation": corr}}
                start = max(cpu_t + 4.0, gpu_free[GPU_STREAM])
                gpu_free[GPU_STREAM] = start + kdur
                yield {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": GPU_STREAM, "ts": _us(start),
                       "dur": _us(kdur), "args": {"External id": ext, "device": 0, "context": 1, "stream": GPU_STREAM,
                                                  "correlation": corr, "bytes": 4096, "memory bandwidth (GB/s)": 12.5}}
                cpu_t += 8.0

        if step % 100 == 99 and annotation_gpu_start is not None:
            # On the GPU timeline an annotation spans its first to its last kernel, idle gaps included.
            yield {"ph": "X", "cat": "gpu_user_annotation", "name": f"## step {step // 100} ##", "pid": 0,
                   "tid": GPU_STREAM, "ts": _us(annotation_gpu_start),
                   "dur": _us(gpu_free[GPU_STREAM] - annotation_gpu_start), "args": {"External id": annotation_ext}}

    end = max(cpu_t, *gpu_free.values()) + 50.0
    yield {"ph": "X", "cat": "overhead", "name": "Activity Buffer Request", "pid": -1, "tid": 0,
           "ts": _us(base + 130.0), "dur": 2024.372}
    yield {"ph": "X", "cat": "Trace", "ts": base, "dur": _us(end - base), "pid": "Spans",
           "tid": "PyTorch Profiler", "name": "PyTorch Profiler (0)", "args": {"Op count": 0}}
    yield {"name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": "", "ts": _us(end)}


def write_synthetic_trace(path: str, steps: int = DEFAULT_STEPS, seed: int = 0, gzipped: bool = False) -> SyntheticStats:
    """Write the trace (gzip'd when ``gzipped``) and return what it holds."""
    counts = {"events": 0, "kernel": 0, "gpu_memcpy": 0, "gpu_memset": 0, "gpu_user_annotation": 0}
    opener = gzip.open if gzipped else open
    with opener(path, "wt", encoding="utf-8") as handle:  # type: ignore[operator]
        _write(handle, steps, seed, counts)
    return SyntheticStats(
        path=path,
        steps=steps,
        events=counts["events"],
        kernels=counts["kernel"],
        memcpy=counts["gpu_memcpy"],
        memset=counts["gpu_memset"],
        gpu_user_annotations=counts["gpu_user_annotation"],
        bytes=os.path.getsize(path),
    )


def _write(handle: IO[str], steps: int, seed: int, counts: dict[str, int]) -> None:
    header = {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3 (synthetic)", "totalGlobalMem": 85045182464,
                              "computeMajor": 9, "computeMinor": 0, "numSms": 132}],
        "cupti_version": 26,
        "cuda_runtime_version": 13000,
        "cuda_driver_version": 13000,
        "synthetic": True,
        "trace_id": "synthetic",
    }
    handle.write(json.dumps(header)[:-1])
    handle.write(', "traceEvents": [\n')
    first = True
    for event in iter_events(steps, seed):
        if not first:
            handle.write(",\n")
        first = False
        handle.write(json.dumps(event))
        counts["events"] += 1
        cat = event.get("cat")
        if cat in counts:
            counts[cat] += 1
    handle.write('\n], "traceName": "synthetic_trace.json", "displayTimeUnit": "ms", '
                 '"baseTimeNanoseconds": 1759000000000000000}\n')


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="synthetic_trace.json", help="output file (.json, or .json.gz with --gzip)")
    parser.add_argument("--steps", type=int, default=DEFAULT_STEPS, help="launched tiny kernels (default %(default)s)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--gzip", action="store_true", help="gzip the output")
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error("--steps must be >= 1")
    stats = write_synthetic_trace(args.out, args.steps, args.seed, args.gzip)
    print(f"wrote {stats.path}: {stats.events:,} events ({stats.kernels:,} kernels, {stats.memcpy} memcpy, "
          f"{stats.memset} memset, {stats.gpu_user_annotations} gpu_user_annotation), "
          f"{stats.bytes / 1e6:.1f} MB [synthetic]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
