#!/usr/bin/env bash
# The session's last check on a GPU, in one device call of under 10 minutes:
#   bash benchmarks/gpu_verify_final.sh OUTDIR
# overhead (first, on a quiet GPU), the main job with the HTML report, the CLI against the seed,
# the C reader by thread count, the whole test suite. Each step has its own time limit so the
# results of the others come back; everything lands in OUTDIR/results.tgz.
set -u
OUT=${1:?usage: gpu_verify_final.sh OUTDIR}
W="$OUT/work"
mkdir -p "$W"
source benchmarks/device_setup.sh "$W"

step "overhead: three suite shapes, plain vs --gpu-util, 4 interleaved rounds"
timeout 200 python3 benchmarks/bench_overhead.py --out "$W" --repeats 4 >"$W/overhead.log" 2>&1; echo "overhead rc=$?"
tail -n 11 "$W/overhead.log"

step "main job with the HTML report"
rm -rf .gpu_util
timeout 40 python3 -m pytest --gpu-util --gpu-util-html examples/ -p no:cacheprovider >"$W/examples.log" 2>&1; echo "examples rc=$?"
cp .gpu_util/gpu_util.json "$W/examples_gpu_util.json" 2>/dev/null; cp .gpu_util/report.html "$W/examples_report.html" 2>/dev/null
tail -n 12 "$W/examples.log"

step "gpuutil analyze as a whole process against the seed: plain JSON"
timeout 100 python3 benchmarks/bench_cli_process.py --repeats 11 --out "$W/cli_plain" >"$W/cli.log" 2>&1; echo "rc=$?"
tail -n 7 "$W/cli.log"
timeout 40 python3 benchmarks/bench_c_reader.py --out "$W" 2>&1 | tee "$W/c_reader_threads.txt"

step "the project's test suite, GPU tests included"
timeout 200 python3 -m pytest tests -q -p no:cacheprovider -rs -n 8 >"$W/tests.log" 2>&1; echo "tests rc=$?"
grep -E "passed|failed" "$W/tests.log" | tail -n 3; grep -E "^FAILED|^ERROR" "$W/tests.log" | head -n 10

tar czf "$OUT/results.tgz" -C "$W" .
ls -la "$OUT"
