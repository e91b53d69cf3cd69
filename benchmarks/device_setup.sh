# Sourced by the gpu_verify scripts: what a bare device machine lacks for this project.
#   source benchmarks/device_setup.sh LOGDIR
# msgspec comes from a wheel in .whl/ when it is not installed; the project is installed editable.
# Writes LOGDIR/env.txt (torch, CUDA, GPU, Python, CPUs; gpu_verify.sh writes a longer one).
export PYTHONUNBUFFERED=1
step() { echo; echo "=== $* ($(date +%T))"; }
if ! python3 -c "import msgspec" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/msgspec-*.whl && export PYTHONPATH=/tmp/site
fi
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . >"$1/install.log" 2>&1 || { echo "editable install failed"; cat "$1/install.log"; }
# the C reader: built by the install where the image has a compiler and Python's headers; else the
# copy built on the development machine for this Python (.whl/so312, carried), said so in c_reader.txt
if python3 -c "from pytest_gpuutil.traces.reader import c_reader_available as a; raise SystemExit(not a())"; then
  echo "C reader: built by the install" >"$1/c_reader.txt"
elif cp .whl/so312/_scan.cpython-312-x86_64-linux-gnu.so pytest_gpuutil/traces/ 2>/dev/null &&
     python3 -c "from pytest_gpuutil.traces.reader import c_reader_available as a; raise SystemExit(not a())"; then
  echo "C reader: the install built none; using the copy built on the development machine" >"$1/c_reader.txt"
else
  echo "C reader: not available (pure-Python readers)" >"$1/c_reader.txt"
fi
cat "$1/c_reader.txt"
nvidia-smi >"$1/nvidia-smi.txt" 2>&1
python3 -c "import torch, platform, os; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0), 'x', torch.cuda.device_count(), 'python', platform.python_version(), 'cpus', len(os.sched_getaffinity(0)))" | tee "$1/env.txt"
