#!/usr/bin/env bash
# The package as a user gets it (run by .ci/run after the tests; also on a GPU machine):
#   bash scripts/check_package.sh [PYTHON]          (PYTHON: the checkout's venv, default .venv/bin/python)
# 1. `python -m build` makes the sdist and the wheel (the C parts optional, as setup.py builds them),
#    and `twine check --strict` passes on both;
# 2. a fresh venv outside the checkout (no system site-packages) gets torch the way .ci/run does
#    (`torch==2.13.0`, from the machine's local index) and the wheel, without the benchmark extra;
# 3. `pytest --gpu-util` on a two-test project: without CUDA the summary says
#    "2 tests skipped: no CUDA device found, nothing measured"; with CUDA it has the GPU table; in
#    both, nothing of pytest-benchmark is installed, loaded or printed.
# About a minute on a CPU machine (most of it installing torch into the fresh venv).
set -euo pipefail
cd "$(dirname "$0")/.."
python="${1:-.venv/bin/python}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

"$python" -m pip install --quiet --disable-pip-version-check "build>=1.2" "twine>=6.1"
"$python" -m build --outdir "$work/dist" . >"$work/build.log" 2>&1 || { tail -n 40 "$work/build.log"; exit 1; }
"$python" -m twine check --strict "$work"/dist/*
wheel=$(ls "$work"/dist/pytest_gpuutil-*.whl)

python3 -m venv "$work/venv"
user="$work/venv/bin/python"
"$user" -c "import sys; assert sys.prefix != sys.base_prefix and not any('site-packages' in p and not p.startswith(sys.prefix) for p in sys.path), sys.path"
# --no-compile: no bytecode for torch's thousands of modules (most of the install's time)
"$user" -m pip install --quiet --disable-pip-version-check --no-compile "torch==2.13.0" "$wheel"
if "$user" -m pip show --quiet pytest-benchmark >/dev/null 2>&1; then
  echo "error: pytest-benchmark was installed without the [benchmark] extra" >&2
  exit 1
fi

project="$work/project"
mkdir -p "$project"
cat >"$project/test_two.py" <<'EOF'
import pytest
import torch

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@cuda
def test_matmul():
    a = torch.randn(512, 512, device="cuda")
    assert (a @ a).shape == (512, 512)


@cuda
def test_add():
    assert (torch.ones(8, device="cuda") + 1).sum().item() == 16
EOF
status=0
(cd "$project" && COLUMNS=80 "$work/venv/bin/pytest" --gpu-util -p no:cacheprovider >"$work/pytest.log" 2>&1) || status=$?
cat "$work/pytest.log"
if [ "$status" -ne 0 ]; then
  echo "error: pytest --gpu-util exited $status in the fresh venv" >&2
  exit 1
fi
if grep -qi "benchmark" "$work/pytest.log"; then
  echo "error: pytest-benchmark appears in the output without the [benchmark] extra" >&2
  exit 1
fi
if "$user" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  grep -q "session GPU busy" "$work/pytest.log" || { echo "error: no GPU summary on a CUDA machine" >&2; exit 1; }
else
  grep -qx "2 tests skipped: no CUDA device found, nothing measured" "$work/pytest.log" \
    || { echo "error: no 'no CUDA device' line saying the 2 tests were skipped" >&2; exit 1; }
fi
echo "check_package: the wheel ($(basename "$wheel")) installs and runs pytest --gpu-util in a fresh venv"
