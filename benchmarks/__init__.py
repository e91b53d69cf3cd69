"""Speed and cost benchmarks for pytest-gpuutil (not part of the installed package): see README.md.

Each script runs as ``python benchmarks/NAME.py [--out DIR]`` from the repository root and writes
``DIR/NAME.json`` plus a Markdown fragment ``DIR/NAME.md``. The pure helpers (``report``,
``process_timer``, ``data.make_synthetic_trace``) import neither torch nor pytest, so they are
tested on the CPU (``tests/benchmarks/``).
"""
