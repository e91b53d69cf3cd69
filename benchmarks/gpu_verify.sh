#!/usr/bin/env bash
# The whole GPU verification in one device call:  bash benchmarks/gpu_verify.sh OUTDIR [quick]
# Needs: torch with CUDA, pytest, tabulate; msgspec as a wheel in .whl/ if not installed.
# Everything lands in OUTDIR/work/, packed into OUTDIR/results.tgz; the big trace stays beside it.
# "quick" (for reader and analysis changes) runs only the test suite, the main job and the
# analysis speed. The device gets a copy of the working tree without a usable git history:
# note the commit yourself.
set -u
OUT=${1:?usage: gpu_verify.sh OUTDIR [quick]}
QUICK=${2:-}
W="$OUT/work"
mkdir -p "$W"
source benchmarks/device_setup.sh "$W"
python3 -c "import torch, triton, pytest, numpy, msgspec, platform; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0), 'x', torch.cuda.device_count(), 'triton', triton.__version__, 'pytest', pytest.__version__, 'python', platform.python_version(), 'numpy', numpy.__version__, 'msgspec', msgspec.__version__)" | tee "$W/env.txt"

step "project test suite, GPU tests included"
python3 -m pytest tests -q -p no:cacheprovider -rs -n 8 >"$W/tests.log" 2>&1; echo "tests rc=$?" | tee -a "$W/tests.log"
tail -n 5 "$W/tests.log"
python3 -m pytest tests/capture/test_profiler_gpu.py tests/capture/test_timing.py tests/traces/test_reader_paths.py -q -p no:cacheprovider -rs >"$W/tests_gpu.log" 2>&1; echo "gpu tests rc=$?" | tee -a "$W/tests_gpu.log"
tail -n 3 "$W/tests_gpu.log"

step "main job: pytest --gpu-util examples/"
rm -rf .gpu_util
python3 -m pytest --gpu-util examples/ -p no:cacheprovider >"$W/examples.log" 2>&1; echo "examples rc=$?" | tee -a "$W/examples.log"
tail -n 30 "$W/examples.log"
cp .gpu_util/gpu_util.csv .gpu_util/gpu_util.json "$W/" 2>/dev/null
cp .gpu_util/metric_table_*.csv "$W/" 2>/dev/null

if [ -z "$QUICK" ]; then
step "gates: save a baseline, then a deliberately slower matmul test"
python3 -m pytest examples -q -p no:cacheprovider --gpu-util --gpu-util-save main >"$W/gate_save.log" 2>&1; echo "save rc=$?" | tee -a "$W/gate_save.log"
GPUUTIL_EXAMPLE_SLOW=1 python3 -m pytest examples -q -p no:cacheprovider --gpu-util --gpu-util-compare main \
  --gpu-util-fail gpu_busy_ms:25% >"$W/gate_compare.log" 2>&1; echo "compare rc=$?" | tee -a "$W/gate_compare.log"
tail -n 25 "$W/gate_compare.log"
python3 -m pytest examples -q -p no:cacheprovider --gpu-util --gpu-util-compare main \
  --gpu-util-fail gpu_busy_ms:25% >"$W/gate_compare_clean.log" 2>&1; echo "compare (unchanged code) rc=$?" | tee -a "$W/gate_compare_clean.log"
tail -n 4 "$W/gate_compare_clean.log"

step "plugin overhead"
timeout 300 python3 benchmarks/bench_overhead.py --out "$W" --repeats 5 >"$W/overhead.log" 2>&1; echo "overhead rc=$?" | tee -a "$W/overhead.log"
tail -n 9 "$W/overhead.log"
fi

step "analysis speed on the recorded 40k-kernel trace (CPU work, on this quiet host)"
if [ ! -f benchmarks/data/h200_40k_kernels.json.gz ]; then
  timeout 180 python3 benchmarks/record_big_trace.py --out "$W" >"$W/record.log" 2>&1; echo "record rc=$?" | tee -a "$W/record.log"
  mv "$W/big_trace.json.gz" "$OUT/" 2>/dev/null
  gunzip -c "$OUT/big_trace.json.gz" >/tmp/big_trace.json
else
  gunzip -c benchmarks/data/h200_40k_kernels.json.gz >/tmp/big_trace.json
fi
timeout 240 python3 benchmarks/bench_analyze_speed.py /tmp/big_trace.json --out "$W" --repeats 9 --label real >"$W/speed.log" 2>&1; echo "speed rc=$?" | tee -a "$W/speed.log"
tail -n 10 "$W/speed.log"

if [ -z "$QUICK" ]; then
step "ground truth"
timeout 300 python3 benchmarks/ground_truth.py --out "$W" >"$W/ground_truth.log" 2>&1; echo "ground truth rc=$?" | tee -a "$W/ground_truth.log"
tail -n 40 "$W/ground_truth.log"
fi

tar czf "$OUT/results.tgz" -C "$W" .
rm -rf "$W"
ls -la "$OUT"
