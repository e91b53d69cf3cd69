"""(GPU) Record a zoo of real traces, one per common op family, to check the kernel classifier.

    python validation/record_zoo.py --out DIR [--only NAME,NAME]

Each family runs a few warm-up iterations (compilation, autotuning and library loading stay out
of the trace), then two iterations under torch.profiler (CUDA activity only), exported as
DIR/zoo/<family>.json.gz; DIR/zoo/manifest.json says what each holds and which failed to
record (a family this torch or GPU cannot run is skipped, with the reason). Everything is then
packed into DIR/zoo.tgz. NCCL needs two GPUs: its traces come from the shared 2-GPU recording.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tarfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Optional

os.environ.setdefault("TORCHINDUCTOR_MAX_AUTOTUNE_GEMM_BACKENDS", "TRITON")


def families(torch: Any) -> dict[str, tuple[str, Callable[[], Callable[[], Any]]]]:
    """name -> (what it holds, build() returning one step)."""
    F = torch.nn.functional
    cuda = "cuda"

    def mm(dtype: Any, allow_tf32: bool = False) -> Callable[[], Callable[[], Any]]:
        def build() -> Callable[[], Any]:
            torch.backends.cuda.matmul.allow_tf32 = allow_tf32
            a = torch.randn(2048, 2048, device=cuda, dtype=dtype)
            return lambda: a @ a
        return build

    def fp8() -> Callable[[], Any]:
        a = torch.randn(2048, 2048, device=cuda).to(torch.float8_e4m3fn)
        b = torch.randn(2048, 2048, device=cuda).to(torch.float8_e4m3fn).t()
        one = torch.ones((), device=cuda)
        return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

    def int8() -> Callable[[], Any]:
        a = torch.randint(-8, 8, (2048, 2048), device=cuda, dtype=torch.int8)
        b = torch.randint(-8, 8, (2048, 2048), device=cuda, dtype=torch.int8)
        return lambda: torch._int_mm(a, b)

    def grouped() -> Callable[[], Any]:
        groups, m, k, n = 8, 256, 1024, 1024
        a = torch.randn(groups * m, k, device=cuda, dtype=torch.bfloat16)
        b = torch.randn(groups, n, k, device=cuda, dtype=torch.bfloat16).transpose(-2, -1)
        offs = torch.arange(m, groups * m + 1, m, device=cuda, dtype=torch.int32)
        return lambda: torch._grouped_mm(a, b, offs=offs, out_dtype=torch.bfloat16)

    def conv(transpose: bool) -> Callable[[], Callable[[], Any]]:
        def build() -> Callable[[], Any]:
            layer = (torch.nn.ConvTranspose2d if transpose else torch.nn.Conv2d)(64, 64, 3, padding=1).to(cuda, torch.bfloat16)
            x = torch.randn(16, 64, 56, 56, device=cuda, dtype=torch.bfloat16, requires_grad=True)

            def step() -> None:
                layer(x).sum().backward()
            return step
        return build

    def sdpa(backend: str) -> Callable[[], Callable[[], Any]]:
        def build() -> Callable[[], Any]:
            from torch.nn.attention import SDPBackend, sdpa_kernel

            q, k, v = (torch.randn(4, 16, 1024, 64, device=cuda, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
            chosen = getattr(SDPBackend, backend)

            def step() -> None:
                with sdpa_kernel(chosen):
                    F.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()
            return step
        return build

    def flex() -> Callable[[], Any]:
        from torch.nn.attention.flex_attention import flex_attention

        q, k, v = (torch.randn(4, 16, 1024, 64, device=cuda, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
        compiled = torch.compile(flex_attention)

        def step() -> None:
            compiled(q, k, v).sum().backward()
        return step

    def compiled(mode: Optional[str]) -> Callable[[], Callable[[], Any]]:
        def build() -> Callable[[], Any]:
            x = torch.randn(4096, 1024, device=cuda)
            w = torch.randn(1024, 1024, device=cuda)

            def f(x: Any, w: Any) -> Any:
                return (torch.relu(x @ w) * 2 + 1).softmax(-1).sum(0)
            fn = torch.compile(f, mode=mode)
            return lambda: fn(x, w)
        return build

    def fft() -> Callable[[], Any]:
        x = torch.randn(64, 65536, device=cuda)
        return lambda: (torch.fft.rfft(x), torch.fft.fft(x.to(torch.complex64)), torch.fft.irfft(torch.fft.rfft(x)))

    def sort_scan() -> Callable[[], Any]:
        x = torch.randn(64, 65536, device=cuda)
        flat = torch.randn(1 << 22, device=cuda)
        return lambda: (torch.sort(x, dim=-1), torch.topk(x, 16, dim=-1), torch.cumsum(x, dim=-1), torch.sort(flat),
                        torch.topk(flat, 1000), torch.argsort(flat))

    def linalg() -> Callable[[], Any]:
        a = torch.randn(512, 512, device=cuda, dtype=torch.float64)
        b = torch.randn(512, 16, device=cuda, dtype=torch.float64)
        return lambda: (torch.linalg.solve(a, b), torch.linalg.qr(a), torch.linalg.svd(a), torch.linalg.cholesky(a @ a.T),
                        torch.linalg.eigh(a @ a.T), torch.linalg.inv(a))

    def embedding_ce() -> Callable[[], Any]:
        emb = torch.nn.Embedding(32000, 512).to(cuda)
        head = torch.nn.Linear(512, 32000).to(cuda)
        tokens = torch.randint(0, 32000, (8, 512), device=cuda)

        def step() -> None:
            logits = head(emb(tokens))
            F.cross_entropy(logits.view(-1, 32000), tokens.view(-1)).backward()
        return step

    def norms() -> Callable[[], Any]:
        x = torch.randn(64, 512, 1024, device=cuda, requires_grad=True)
        img = torch.randn(32, 64, 56, 56, device=cuda, requires_grad=True)
        ln, rms = torch.nn.LayerNorm(1024).to(cuda), torch.nn.RMSNorm(1024).to(cuda)
        bn, gn = torch.nn.BatchNorm2d(64).to(cuda), torch.nn.GroupNorm(8, 64).to(cuda)

        def step() -> None:
            (ln(x).sum() + rms(x).sum() + bn(img).sum() + gn(img).sum()).backward()
        return step

    def optimizer(fused: bool) -> Callable[[], Callable[[], Any]]:
        def build() -> Callable[[], Any]:
            model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024)).to(cuda)
            adam = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=fused, foreach=None if fused else True)
            x = torch.randn(512, 1024, device=cuda)

            def step() -> None:
                adam.zero_grad(set_to_none=True)
                F.mse_loss(model(x), x).backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                adam.step()
            return step
        return build

    def graph() -> Callable[[], Any]:
        model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)).to(cuda)
        x = torch.randn(256, 1024, device=cuda)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                model(x)
        torch.cuda.current_stream().wait_stream(stream)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            model(x)
        return g.replay

    return {
        "matmul_fp32": ("fp32 matmul (no TF32)", mm(torch.float32)),
        "matmul_tf32": ("fp32 matmul with TF32", mm(torch.float32, True)),
        "matmul_bf16": ("bf16 matmul", mm(torch.bfloat16)),
        "matmul_fp8": ("torch._scaled_mm, float8_e4m3fn", fp8),
        "matmul_int8": ("torch._int_mm", int8),
        "grouped_gemm": ("torch._grouped_mm, bf16, 8 groups", grouped),
        "conv2d_fwd_bwd": ("Conv2d bf16 forward + backward", conv(False)),
        "conv_transpose2d_fwd_bwd": ("ConvTranspose2d bf16 forward + backward", conv(True)),
        "sdpa_flash_fwd_bwd": ("SDPA flash, causal, fwd + bwd", sdpa("FLASH_ATTENTION")),
        "sdpa_efficient_fwd_bwd": ("SDPA memory-efficient, fwd + bwd", sdpa("EFFICIENT_ATTENTION")),
        "sdpa_cudnn_fwd_bwd": ("SDPA cuDNN, fwd + bwd", sdpa("CUDNN_ATTENTION")),
        "fft": ("rfft, fft (complex64), irfft", fft),
        "sort_scan_topk": ("sort, topk, cumsum, argsort (segmented and flat)", sort_scan),
        "linalg": ("solve, QR, SVD, Cholesky, eigh, inv (fp64)", linalg),
        "embedding_cross_entropy_bwd": ("Embedding + Linear + cross_entropy, backward", embedding_ce),
        "norms_fwd_bwd": ("LayerNorm, RMSNorm, BatchNorm2d, GroupNorm, fwd + bwd", norms),
        "cuda_graph_replay": ("an MLP captured in a CUDA graph, replayed", graph),
        "train_step_adamw_foreach": ("MLP training step: MSE loss, backward, clip_grad_norm_, AdamW (foreach)", optimizer(False)),
        "train_step_adamw_fused": ("MLP training step: MSE loss, backward, clip_grad_norm_, AdamW (fused)", optimizer(True)),
        "compile_pointwise_reduction": ("torch.compile (default): matmul, relu, softmax, sum", compiled(None)),
        "flex_attention_fwd_bwd": ("torch.compile'd flex_attention, fwd + bwd", flex),
        "compile_max_autotune": ("torch.compile max-autotune: Triton matmul templates", compiled("max-autotune-no-cudagraphs")),
    }


def record(torch: Any, name: str, build: Callable[[], Callable[[], Any]], folder: Path) -> dict[str, Any]:
    began = time.perf_counter()
    step = build()
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(2):
            step()
        torch.cuda.synchronize()
    path = folder / f"{name}.json.gz"
    prof.export_chrome_trace(str(path))
    return {"file": path.name, "bytes": path.stat().st_size, "seconds": round(time.perf_counter() - began, 2)}


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--only", default="")
    args = parser.parse_args(argv)
    import torch

    folder = args.out / "zoo"
    folder.mkdir(parents=True, exist_ok=True)
    wanted = {n for n in args.only.split(",") if n}
    manifest: dict[str, Any] = {"torch": torch.__version__, "cuda": torch.version.cuda,
                                "gpu": torch.cuda.get_device_name(0), "families": {}}
    for name, (what, build) in families(torch).items():
        if wanted and name not in wanted:
            continue
        try:
            entry = {"what": what, **record(torch, name, build, folder)}
        except Exception as exc:  # noqa: BLE001 - one family this torch/GPU cannot run must not stop the others
            entry = {"what": what, "error": f"{type(exc).__name__}: {exc}"[:500], "trace": traceback.format_exc()[-1500:]}
        manifest["families"][name] = entry
        print(f"{name:30} {entry.get('error') or entry['file']}", flush=True)
        (folder / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")  # kept if a later family hangs
    with tarfile.open(args.out / "zoo.tgz", "w:gz") as tar:
        tar.add(folder, arcname="zoo")
    return 0


if __name__ == "__main__":
    sys.exit(main())
