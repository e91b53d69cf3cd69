"""(CPU) The plugin's per-test cost without a GPU: 300 small tests on the synthetic GPU of the tests.

    python benchmarks/diagnostics/cpu_per_test_cost.py [--rounds 5] [--tests 300] [-- EXTRA --gpu-util ARGS]

Writes a throwaway suite (the CPU tests' synthetic event source from ``tests/helpers``, torch
imported by its conftest as in a GPU suite, each test laying out four kernels and a host wait),
runs it plain and with ``--gpu-util``, alternating, in fresh processes, with
``phase_timer.py`` stamping the phases, and prints per configuration the median seconds from the
first test's set-up to the last one's teardown, the session's end, and the full garbage
collections that fell among the tests. The figures are this machine's, not a GPU host's: use them
to compare changes of the plugin's own Python path, side by side in one run.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

TEST_FILE = '''
import pytest

KERNELS = [("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>", "kernel", 0, 1500),
           ("void at::native::vectorized_elementwise_kernel<4, at::native::MulFunctor<float>>", "kernel", 4000, 1500),
           ("void at::native::reduce_kernel<512, 1>", "kernel", 8000, 2500),
           ("Memcpy DtoH (Device -> Pageable)", "memcpy", 12000, 1000)]


@pytest.mark.parametrize("i", range({tests}))
def test_small(i, gpu):
    gpu.replay(KERNELS, waits=[("cudaStreamSynchronize", 11000, 3000)])
'''


def run_once(folder: Path, extra: list[str] | None) -> dict:
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "phase_timer", "test_small.py"]
    if extra is not None:
        cmd += ["--gpu-util", f"--gpu-util-dir={folder / 'out'}", *extra]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), str(ROOT), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run(cmd, cwd=folder, capture_output=True, text=True, env=env, timeout=300).stdout
    phases = json.loads(re.search(r"^PHASES (\{.*\})$", out, re.M).group(1))
    collections = json.loads(re.search(r"^GC (\{.*\})$", out, re.M).group(1))
    return {"tests_s": phases["last_teardown"] - phases["first_setup"],
            "end_s": phases["summary_end"] - phases["last_teardown"],
            "full_gcs": collections["gen2"]["n"], "full_gc_s": collections["gen2"]["s"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tests", type=int, default=300)
    parser.add_argument("extra", nargs="*", help="more --gpu-util options (after --)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from tests.helpers import SYNTHETIC_CONFTEST

    with tempfile.TemporaryDirectory(prefix="per_test_cost_") as tmp:
        folder = Path(tmp)
        (folder / "conftest.py").write_text("import torch  # noqa: F401 - a GPU suite has it loaded\n" + SYNTHETIC_CONFTEST)
        (folder / "test_small.py").write_text(TEST_FILE.replace("{tests}", str(args.tests)))
        configs = {"plain": None, "gpu_util": list(args.extra)}
        runs: dict[str, list[dict]] = {name: [] for name in configs}
        for _ in range(args.rounds):
            for name, extra in configs.items():
                runs[name].append(run_once(folder, extra))
    print(f"{args.tests} tests, {args.rounds} rounds (median s; full GCs among the tests per run)")
    for name, got in runs.items():
        print(f"  {name:9} tests {statistics.median(r['tests_s'] for r in got):.3f}  "
              f"end {statistics.median(r['end_s'] for r in got):.3f}  "
              f"full GCs {[r['full_gcs'] for r in got]} ({statistics.median(r['full_gc_s'] for r in got):.3f} s median)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
