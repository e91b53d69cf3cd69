#!/usr/bin/env bash
# Several GPUs of one host, one device call:  bash benchmarks/gpu_verify_2gpu.sh OUTDIR
set -u
OUT=${1:?usage: gpu_verify_2gpu.sh OUTDIR}
W="$OUT/work"
mkdir -p "$W"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
source benchmarks/device_setup.sh "$W"
nvidia-smi -L
echo "=== pytest -n 2 --gpu-util --gpu-util-pin examples/"
rm -rf .gpu_util
python3 -m pytest -n 2 --gpu-util --gpu-util-pin examples/ -p no:cacheprovider >"$W/xdist_pin.log" 2>&1; echo "rc=$?" | tee -a "$W/xdist_pin.log"
tail -n 22 "$W/xdist_pin.log"
cp .gpu_util/gpu_util.json .gpu_util/gpu_util.csv "$W/"
python3 - <<'PY' | tee "$W/gpus.txt"
import json
doc = json.load(open(".gpu_util/gpu_util.json"))
print("machine:", doc["machine_info"]["gpu_count"], "x", doc["machine_info"]["gpu_model"])
for g in doc["gpus"]:
    print("GPU", g["gpu"], "busy_ms", round(g["busy_ms"], 3), "tests", g["tests"], "workers", g["workers"])
for t in doc["tests"]:
    print(t["worker"], sorted(t["gpu_busy_us_by_device"]), t["test"].split("::")[-1])
PY
echo "=== per-test analysis time breakdown"
timeout 200 python3 benchmarks/bench_plugin_overhead.py --out "$W" --analysis-only >"$W/analysis_time.log" 2>&1; tail -n 8 "$W/analysis_time.log"
tar czf "$OUT/results2.tgz" -C "$W" .
rm -rf "$W"
