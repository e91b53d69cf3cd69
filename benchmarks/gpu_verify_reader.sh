#!/usr/bin/env bash
# A shorter GPU verification for reader/analysis changes, in one device call:
#   bash benchmarks/gpu_verify_reader.sh OUTDIR
# The test suite (GPU tests included), the main job, and the analysis-speed benchmark.
set -u
OUT=${1:?usage: gpu_verify_reader.sh OUTDIR}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
step() { echo; echo "=== $* ($(date +%T))"; }

if ! python3 -c "import msgspec" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/msgspec-*.whl && export PYTHONPATH=/tmp/site
fi
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . >"$OUT/install.log" 2>&1 || { echo "editable install failed"; cat "$OUT/install.log"; }
nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1
python3 -c "import torch, numpy, msgspec, platform; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0), 'python', platform.python_version(), 'numpy', numpy.__version__, 'msgspec', msgspec.__version__)" | tee "$OUT/env.txt"
git log -1 --format='commit %H %s' 2>/dev/null | tee -a "$OUT/env.txt"

step "project test suite, GPU tests included"
python3 -m pytest tests -q -p no:cacheprovider -rs -n 8 >"$OUT/tests.log" 2>&1; echo "tests rc=$?" | tee -a "$OUT/tests.log"
tail -n 3 "$OUT/tests.log"
python3 -m pytest tests/test_gpu.py tests/test_reader_paths.py -q -p no:cacheprovider -rs >"$OUT/tests_gpu.log" 2>&1; echo "gpu + reader tests rc=$?" | tee -a "$OUT/tests_gpu.log"
tail -n 2 "$OUT/tests_gpu.log"

step "main job: pytest --gpu-util examples/"
rm -rf .gpu_util
python3 -m pytest --gpu-util examples/ -p no:cacheprovider >"$OUT/examples.log" 2>&1; echo "examples rc=$?" | tee -a "$OUT/examples.log"
tail -n 25 "$OUT/examples.log"

step "analysis speed on the recorded 40k-kernel trace"
gunzip -c benchmarks/data/h200_40k_kernels.json.gz >/tmp/big_trace.json
timeout 300 python3 benchmarks/bench_analyze_speed.py /tmp/big_trace.json --out "$OUT" --repeats 9 --label real >"$OUT/speed.log" 2>&1; echo "speed rc=$?" | tee -a "$OUT/speed.log"
tail -n 12 "$OUT/speed.log"
