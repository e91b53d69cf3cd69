#!/usr/bin/env bash
# Everything this session checks on a GPU, in one device call of under 10 minutes:
#   bash benchmarks/gpu_verify_session.sh OUTDIR
# overhead (first, on a quiet GPU), GPU memory truth, the main job with the HTML report, duty-cycle
# ground truth, the whole test suite, the kernel zoo. Each step has its own time limit so the
# results of the others come back; everything lands in OUTDIR/results.tgz.
set -u
OUT=${1:?usage: gpu_verify_session.sh OUTDIR}
W="$OUT/work"
mkdir -p "$W"
source benchmarks/device_setup.sh "$W"

step "overhead: three suite shapes, plain vs --gpu-util, 4 interleaved rounds"
timeout 190 python3 benchmarks/bench_overhead.py --out "$W" --repeats 4 >"$W/overhead.log" 2>&1; echo "overhead rc=$?"
tail -n 11 "$W/overhead.log"

step "GPU memory truth"
timeout 40 python3 benchmarks/memory_truth.py --out "$W" 2>&1 | tail -n 10

step "main job with the HTML report"
rm -rf .gpu_util
timeout 40 python3 -m pytest --gpu-util --gpu-util-html examples/ -p no:cacheprovider >"$W/examples.log" 2>&1; echo "examples rc=$?"
cp .gpu_util/gpu_util.json "$W/examples_gpu_util.json" 2>/dev/null; cp .gpu_util/report.html "$W/examples_report.html" 2>/dev/null
tail -n 25 "$W/examples.log"

step "duty-cycle ground truth"
timeout 90 python3 benchmarks/ground_truth.py --out "$W" --sections duty >"$W/ground_truth.log" 2>&1; echo "ground truth rc=$?"
grep -A8 "Duty cycle" "$W/ground_truth.md" | tail -n 5 | cut -d'|' -f1-3,13-18

step "the project's test suite, GPU tests included"
timeout 110 python3 -m pytest tests -q -p no:cacheprovider -rs -n 8 >"$W/tests.log" 2>&1; echo "tests rc=$?"
grep -E "passed|failed" "$W/tests.log" | tail -n 3; grep -E "^FAILED|^ERROR" "$W/tests.log" | head -n 10

step "kernel zoo"
timeout 100 python3 benchmarks/record_zoo.py --out "$W" >"$W/zoo.log" 2>&1; echo "zoo rc=$?"
tail -n 22 "$W/zoo.log"

tar czf "$OUT/results.tgz" -C "$W" --exclude zoo --exclude zoo.tgz .
tar czf "$OUT/zoo.tgz" -C "$W" zoo 2>/dev/null
ls -la "$OUT"
