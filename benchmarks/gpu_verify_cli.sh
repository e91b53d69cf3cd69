#!/usr/bin/env bash
# The C reader on a GPU host, in one device call: whole-process CLI speed against the seed (plain
# and gzip'd), the reader alone by thread count, and the whole test suite (GPU tests included).
#   bash benchmarks/gpu_verify_cli.sh OUTDIR        (SKIP_TESTS=1: the timings only)
set -u
OUT=${1:?usage: gpu_verify_cli.sh OUTDIR}
W="$OUT/work"
mkdir -p "$W"
source benchmarks/device_setup.sh "$W"
lscpu | grep -E "Model name|^CPU\(s\)" | tee -a "$W/env.txt"

step "gpuutil analyze as a whole process against the seed: plain JSON"
timeout 120 python3 benchmarks/bench_cli_process.py --repeats 11 --out "$W/cli_plain" >"$W/cli.log" 2>&1; echo "rc=$?"
tail -n 8 "$W/cli.log"
step "the same, gzip'd"
timeout 90 python3 benchmarks/bench_cli_process.py --repeats 7 --keep-gzip --out "$W/cli_gz" >>"$W/cli.log" 2>&1; echo "rc=$?"
tail -n 8 "$W/cli.log"

step "the C reader alone on the 55.7 MB trace, by thread count (best of 7)"
timeout 60 python3 benchmarks/bench_c_reader.py --out "$W" 2>&1 | tee "$W/c_reader_threads.txt"

if [ -z "${SKIP_TESTS:-}" ]; then
step "the project's test suite, GPU tests included"
timeout 230 python3 -m pytest tests -q -p no:cacheprovider -rs -n 8 >"$W/tests.log" 2>&1; echo "tests rc=$?"
grep -E "passed|failed" "$W/tests.log" | tail -n 3; grep -E "^FAILED|^ERROR" "$W/tests.log" | head -n 10
fi

tar czf "$OUT/results.tgz" -C "$W" .
ls -la "$OUT"
