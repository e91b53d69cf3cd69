"""(CPU, deterministic) Instructions a record of a flush's build_records costs, alone, under callgrind.

    python benchmarks/parts/records_path_cost.py capture INPUTS.pkl [--tests 2000]   (this checkout)
    python benchmarks/parts/records_build_cost.py ROOT INPUTS.pkl [--memory]

Loads the record inputs ``records_path_cost.py capture`` pickled (nodeid, outcome, profile, results,
memory of each test of the synthetic suite) and runs ``valgrind --tool=callgrind`` on a child that
imports ROOT's ``pytest_gpuutil`` (a checkout: ``git archive COMMIT | tar -x -C DIR``), builds the
records of 20 of them (warm-up), then collects only while ``build_records`` builds all of them in
one call (callgrind's client requests through a small C library; Python's collector off), and
prints the instructions a record. ``--memory``: each test gets one device's GPU memory figures (the
synthetic GPU has none; a GPU run has them by default); ``--reads``: the same figures kept as a call's
read, each test's TestMemory made inside the count by the record's pop (``CallMemories.pop``), as a run
makes it. Needs valgrind, its callgrind.h and a C compiler.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

CLIENT = r"""
#include <valgrind/callgrind.h>
void cg_start(void) { CALLGRIND_START_INSTRUMENTATION; }
void cg_toggle(void) { CALLGRIND_TOGGLE_COLLECT; }
"""

CHILD = r"""
import ctypes, gc, pickle, sys
root, inputs_path, library, memory = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
sys.path.insert(0, root)
from pytest_gpuutil.session import record_builder

inputs = pickle.loads(open(inputs_path, "rb").read())
calls = None
if memory == "reads":  # each call's read kept as the test left it; its TestMemory made by the record's pop
    from pytest_gpuutil.capture.memory import _Start
    from pytest_gpuutil.measurement.memory_reads import CallMemories

    calls, start = CallMemories(), _Start({}, {}, {}, 0.0, frozenset([0]))
    for nodeid, *_ in inputs:
        calls.add(nodeid, start, ((0, (1 << 20, 4 << 20, 20 << 20, 20 << 20, 0, 0, 0)),), 1e-5)
elif memory == "1":
    from pytest_gpuutil.capture.memory import DeviceMemory
    from pytest_gpuutil.measurement.call_profile import TestMemory

    inputs = [(n, o, p, r, TestMemory((DeviceMemory("0", 4 << 20, 20 << 20, 0, 0, 0, 1 << 20, 20 << 20),), None, 0.01))
              for n, o, p, r, _ in inputs]
options = dict(worker="", physical_id=str, unmeasured_note="", findings_ignore=frozenset(), findings_floor=None)
record_builder.build_records(inputs[:20], **options)
lib = ctypes.CDLL(library)
gc.collect()
gc.disable()
lib.cg_start()
lib.cg_toggle()
if calls is not None:  # as Measuring._finished pops each test's memory for its record
    inputs = [(n, o, p, r, calls.pop(n)) for n, o, p, r, _ in inputs]
made = record_builder.build_records(inputs, **options)
lib.cg_toggle()
print(len(made))
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path, help="the checkout whose pytest_gpuutil builds the records")
    parser.add_argument("inputs", type=Path, help="records_path_cost.py capture's pickle")
    parser.add_argument("--memory", action="store_true", help="one device's GPU memory figures on every test")
    parser.add_argument("--reads", action="store_true",
                        help="the same figures as a call's read, each test's TestMemory made by the record's pop")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="records_build_cost_") as tmp:
        base = Path(tmp)
        (base / "client.c").write_text(CLIENT)
        subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(base / "libcg.so"), str(base / "client.c")], check=True)
        (base / "child.py").write_text(CHILD)
        cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--collect-atstart=no",
               "--callgrind-out-file=/dev/null", sys.executable, str(base / "child.py"), str(args.root.resolve()),
               str(args.inputs.resolve()), str(base / "libcg.so"), "reads" if args.reads else "1" if args.memory else "0"]
        env = dict(os.environ, PYTHONHASHSEED="0", OPENBLAS_NUM_THREADS="1")  # numpy's threads spin under callgrind
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    found = re.findall(r"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or not found or not done.stdout.strip().isdigit():
        raise SystemExit(f"{' '.join(cmd)}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    records = int(done.stdout.strip())
    print(f"{int(found[-1]) / records:,.0f} instructions a record ({records} records, "
          f"{'one device (reads)' if args.reads else 'one device' if args.memory else 'no'} memory, {args.root})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
