#!/usr/bin/env bash
# Issue 20 development probe (one H100):  bash gpucheck/run_probe.sh OUTDIR
set -u
OUT=${1:?usage: run_probe.sh OUTDIR}
mkdir -p "$OUT/setup"
source benchmarks/device_setup.sh "$OUT/setup"
python3 -c "import site, os; print('pth:', [p for s in site.getsitepackages() for p in [os.path.join(s, 'pytest_gpuutil_children.pth')] if os.path.exists(p)])" | tee "$OUT/setup/pth.txt"
ls pytest_gpuutil/children/ | tee "$OUT/setup/children_dir.txt"
timeout 290 python3 gpucheck/children_probe.py "$OUT" > "$OUT/probe.log" 2>&1; echo "rc=$?" >> "$OUT/probe.log"
rm -rf "$OUT/work"
tail -n 70 "$OUT/probe.log"
