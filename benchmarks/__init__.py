"""Benchmark and ground-truth scripts for pytest-gpuutil (not part of the installed package).

Each script runs as ``python benchmarks/NAME.py [--out DIR]`` from the repository root and writes
``DIR/NAME.json`` plus a Markdown fragment ``DIR/NAME.md``. The pure helpers (``report``,
``duty_cycle``, ``seed_reference``) import neither torch nor pytest, so they are tested on the CPU.
"""
