# Sourced by the gpu_verify scripts: what a bare device machine lacks for this project.
#   source benchmarks/device_setup.sh LOGDIR
# msgspec comes from a wheel in .whl/ when it is not installed; the project is installed editable.
export PYTHONUNBUFFERED=1
step() { echo; echo "=== $* ($(date +%T))"; }
if ! python3 -c "import msgspec" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/msgspec-*.whl && export PYTHONPATH=/tmp/site
fi
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . >"$1/install.log" 2>&1 || { echo "editable install failed"; cat "$1/install.log"; }
nvidia-smi >"$1/nvidia-smi.txt" 2>&1
