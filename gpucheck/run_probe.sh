#!/usr/bin/env bash
# Issue 20 development probe (one H100):  bash gpucheck/run_probe.sh OUTDIR
# Set-up as every device run (scripts/device.sh setup: the branch installed editable, which builds
# the injection library and puts pytest_gpuutil_children.pth into site-packages), then the probe.
set -u
OUT=${1:?usage: run_probe.sh OUTDIR}
mkdir -p "$OUT"
bash scripts/device.sh "$OUT/setup" setup > "$OUT/setup.log" 2>&1
python3 -c "import site, os; print('pth:', [p for s in site.getsitepackages() for p in [os.path.join(s, 'pytest_gpuutil_children.pth')] if os.path.exists(p)])" | tee -a "$OUT/setup.log"
ls pytest_gpuutil/children/ | tee -a "$OUT/setup.log"
timeout 290 python3 gpucheck/children_probe.py "$OUT" > "$OUT/probe.log" 2>&1; echo "rc=$?" >> "$OUT/probe.log"
rm -rf "$OUT/work"
tail -n 70 "$OUT/probe.log"
