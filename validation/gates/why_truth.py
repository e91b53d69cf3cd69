"""Does a red gate name what changed? A suite run twice, the second time with one planted change per test.

    python3 validation/gates/why_truth.py OUT_DIR [--runs 5] [--synthetic]

1. Writes a suite under OUT_DIR/suite: five tests each with a change planted when ``WHY_PLANT=1``
   (bf16 matmul -> fp32 with TF32 off; a fused op -> two ops; a ``.item()`` in the loop; a pinned
   copy -> pageable; a matmul size doubled) and two unchanged tests.
2. Runs it once unchanged and saves the baseline ``base``, then ``--runs`` times planted, each gated
   against ``base`` (``--gpu-util-fail gpu_busy_ms:10% --gpu-util-fail busy_pct:5``, the issue's
   gates), each a separate pytest process.
3. Writes OUT_DIR/why.json: ``{"cases": [{"case", "planted", "first_line", "explained_pct",
   "names_planted", "flagged_runs"}], "unchanged_flagged": N, "runs": R, ...}`` where a case's
   first line and share are from the first gated run and ``explained_pct`` is its lowest over the
   runs; ``unchanged_flagged`` counts the unchanged tests flagged over all gated runs (expected 0).

``--synthetic``: the same plumbing on the test suite's synthetic GPU (no CUDA: kernels named as on an
H100, planted changes as name and time changes), to debug the script here. Expected time on a GPU:
7 pytest processes, about 60 s (``WHY_TIMEOUT_S`` each, 60 s).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

GPU_SUITE = r'''
import os

import pytest

torch = pytest.importorskip("torch")
PLANT = os.environ.get("WHY_PLANT") == "1"
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.fixture(scope="session", autouse=True)
def warm():
    """cuBLAS, the allocator and each op's first launch, before any measured call."""
    if not torch.cuda.is_available():
        return
    for dtype in (torch.bfloat16, torch.float32):
        for n in (1024, 2048, 4096):
            a = torch.randn(n, n, device="cuda", dtype=dtype)
            a @ a
    x = torch.randn(1 << 24, device="cuda")
    torch.addcmul(x, x, x); x + x * x; x.sum().item()
    host = torch.randn(1 << 23).pin_memory(); host.cuda(non_blocking=True); torch.randn(1 << 23).cuda()
    torch.cuda.synchronize()


def test_matmul_dtype():
    torch.backends.cuda.matmul.allow_tf32 = False
    dtype = torch.float32 if PLANT else torch.bfloat16
    a = torch.randn(4096, 4096, device="cuda", dtype=dtype)
    for _ in range(10):
        a @ a
    torch.cuda.synchronize()


def test_fused_op():
    x, y, z = (torch.randn(1 << 24, device="cuda") for _ in range(3))
    for _ in range(100):
        out = x + y * z if PLANT else torch.addcmul(x, y, z)
    torch.cuda.synchronize()


def test_item_in_loop():
    a = torch.randn(512, 512, device="cuda")
    total = 0.0
    for _ in range(200):
        b = a @ a
        if PLANT:
            total += b[0, 0].item()
    torch.cuda.synchronize()


def test_copy_pinned():
    host = torch.randn(1 << 23)
    host = host if PLANT else host.pin_memory()
    for _ in range(10):
        host.to("cuda", non_blocking=True)
    torch.cuda.synchronize()


def test_matmul_size():
    n = 4096 if PLANT else 2048
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(20):
        a @ a
    torch.cuda.synchronize()


def test_unchanged_small():
    a = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)
    for _ in range(5):
        a = torch.relu(a @ a)
    torch.cuda.synchronize()


def test_unchanged_elementwise():
    x = torch.randn(1 << 20, device="cuda")
    for _ in range(20):
        x = x * 0.5 + 1.0
    torch.cuda.synchronize()
'''

SYNTHETIC_SUITE = r'''
import os

PLANT = os.environ.get("WHY_PLANT") == "1"
BF16 = "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"
FP32 = "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas"
MUL = ("void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, float, "
       "at::native::binary_internal::MulFunctor<float> >, std::array<char*, 3ul> >(int)")
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul> >(int)"
ADDCMUL = "void at::native::vectorized_elementwise_kernel<4, at::native::addcmul_cuda_kernel(at::TensorIteratorBase&, c10::Scalar const&)::{lambda()#1}>(int)"
US = 1000


def test_matmul_dtype(gpu):
    for _ in range(10):
        gpu.run(FP32 if PLANT else BF16, (800 if PLANT else 50) * US)


def test_fused_op(gpu):
    for _ in range(100):
        if PLANT:
            gpu.run(MUL, 60 * US)
            gpu.run(ADD, 60 * US)
        else:
            gpu.run(ADDCMUL, 80 * US)


def test_item_in_loop(gpu):
    events, waits, t = [], [], 0
    for _ in range(200):
        events.append((BF16, "kernel", t, 10 * US))
        t += 10 * US
        if PLANT:
            events.append(("Memcpy DtoH (Device -> Pageable)", "gpu_memcpy", t, 2 * US))
            waits.append(("cudaStreamSynchronize", t, 3 * US))
            t += 40 * US
    gpu.replay(events, waits)


def test_copy_pinned(gpu):
    for _ in range(10):
        gpu.run("Memcpy HtoD (Pageable -> Device)" if PLANT else "Memcpy HtoD (Pinned -> Device)",
                (900 if PLANT else 350) * US, kind="gpu_memcpy")


def test_matmul_size(gpu):
    for _ in range(20):
        gpu.run(BF16, (400 if PLANT else 60) * US)


def test_unchanged_small(gpu):
    for _ in range(5):
        gpu.run(BF16, 100 * US)


def test_unchanged_elementwise(gpu):
    for _ in range(20):
        gpu.run(MUL, 20 * US)
'''

#: case -> (what is planted, a pattern its first line must match)
CASES = {
    "test_matmul_dtype": ("bf16 matmul -> fp32 with TF32 off", r"bf16/fp16 -> fp32 \(no TF32\)"),
    "test_fused_op": ("a fused op -> two ops", r"new kernel `.*(Mul|add|Add|mul)"),
    "test_item_in_loop": (".item() added in the loop", r"host waits|Memcpy DtoH|idle"),
    "test_copy_pinned": ("a pinned copy -> pageable", r"pinned/device -> pageable|Pageable"),
    "test_matmul_size": ("a matmul size doubled", r"(slower kernel|gemm bf16/fp16).*x20 -> x20|slower kernel `nvjet"),
}
UNCHANGED = ("test_unchanged_small", "test_unchanged_elementwise")
GATES = ("--gpu-util-fail", "gpu_busy_ms:10%", "--gpu-util-fail", "busy_pct:5")


def run_suite(suite: Path, out: Path, plant: bool, extra: tuple[str, ...], log: Path) -> dict[str, Any]:
    env = {**os.environ, "WHY_PLANT": "1" if plant else "0", "COLUMNS": "120", "PYTHONDONTWRITEBYTECODE": "1"}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "--gpu-util",
               f"--gpu-util-dir={out}", *extra, "test_why.py"]
    began = time.perf_counter()
    try:
        done = subprocess.run(command, cwd=suite, env=env, capture_output=True, text=True,
                              timeout=float(os.environ.get("WHY_TIMEOUT_S", "60")))
        code, text = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:
        code, text = 124, f"timed out: {exc}"
    log.write_text(text)
    doc_path = out / "gpu_util.json"
    doc = json.loads(doc_path.read_text()) if doc_path.exists() else {}
    return {"exit": code, "seconds": round(time.perf_counter() - began, 2), "doc": doc, "text": text}


def flagged_tests(text: str) -> set[str]:
    """The tests in the regression table (the lines under 'GPU regressions')."""
    found = set()
    inside = False
    for line in text.splitlines():
        if "GPU regressions against" in line:
            inside = True
        elif inside and line.startswith("FAILED"):
            break
        elif inside:
            for name in (*CASES, *UNCHANGED):
                if re.search(rf"\b{name}\b", line) and not line.startswith("why "):
                    found.add(name)
    return found


def write(out: Path, result: dict[str, Any], cases: dict[str, dict[str, Any]], unchanged_flagged: int,
          runs: list[dict[str, Any]]) -> None:
    """why.json as it stands: the cases, the unchanged tests flagged, the gated runs done."""
    result.update(cases=list(cases.values()), unchanged_flagged=unchanged_flagged, gated_runs=runs, runs=len(runs))
    result["all_met"] = (len(cases) == len(CASES) and unchanged_flagged == 0 and all(
        c["names_planted"] and (c["explained_pct"] or 0) >= 80 and c["flagged_runs"] == len(runs) for c in cases.values()))
    (out / "why.json").write_text(json.dumps(result, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--synthetic", action="store_true", help="the synthetic GPU of the test suite (no CUDA)")
    parser.add_argument("--deadline-s", type=float, default=0.0,
                        help="start no gated run after this many seconds (0: none); why.json is written after each run")
    args = parser.parse_args(argv)
    began = time.perf_counter()
    out = args.out.resolve()
    suite = out / "suite"
    suite.mkdir(parents=True, exist_ok=True)
    if args.synthetic:
        sys.path.insert(0, str(ROOT))
        from tests.helpers import SYNTHETIC_CONFTEST

        (suite / "conftest.py").write_text(SYNTHETIC_CONFTEST)
        (suite / "test_why.py").write_text(SYNTHETIC_SUITE)
    else:
        (suite / "conftest.py").write_text("")
        (suite / "test_why.py").write_text(GPU_SUITE)
    result: dict[str, Any] = {"synthetic": args.synthetic, "runs_asked": args.runs, "gates": " ".join(GATES[1::2])}
    base = run_suite(suite, out / "gpu_util", False, ("--gpu-util-save", "base"), out / "base.log")
    result["baseline_exit"] = base["exit"]
    cases: dict[str, dict[str, Any]] = {}
    unchanged_flagged = 0
    runs = []
    for number in range(args.runs):
        if args.deadline_s and time.perf_counter() - began > args.deadline_s:
            result["stopped"] = f"deadline: {number} of {args.runs} gated runs in {args.deadline_s:g} s"
            break
        gated = run_suite(suite, out / "gpu_util", True, ("--gpu-util-compare=base", *GATES), out / f"gated_{number}.log")
        why = {t.split("::")[-1]: e for t, e in (gated["doc"].get("explanations") or {}).items()}
        flagged = flagged_tests(gated["text"])
        unchanged_flagged += len((flagged | set(why)) & set(UNCHANGED))
        runs.append({"exit": gated["exit"], "seconds": gated["seconds"], "flagged": sorted(flagged)})
        for case, (planted, pattern) in CASES.items():
            entry = cases.setdefault(case, {"case": case, "planted": planted, "first_line": "", "explained_pct": None,
                                            "names_planted": False, "flagged_runs": 0})
            explanation = why.get(case)
            if explanation is None:
                continue
            entry["flagged_runs"] += 1
            if not entry["first_line"]:
                entry["first_line"] = explanation["first_line"]
                entry["names_planted"] = bool(re.search(pattern, explanation["first_line"]))
                entry["differences"] = [d["text"] for d in explanation["differences"]]
            pct = explanation["explained_pct"]
            entry["explained_pct"] = pct if entry["explained_pct"] is None else min(entry["explained_pct"], pct)
        write(out, result, cases, unchanged_flagged, runs)  # after every run: a step cut short keeps what it had
    write(out, result, cases, unchanged_flagged, runs)
    for case in cases.values():
        print(f"{case['case']}: {case['explained_pct']}% [{case['flagged_runs']}/{len(runs)}] {case['first_line']}")
    print(f"unchanged flagged: {unchanged_flagged} over {len(runs)} runs; all met: {result['all_met']}")
    return 0 if result["all_met"] else 1


if __name__ == "__main__":
    sys.exit(main())
