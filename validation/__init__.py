"""Checks of pytest-gpuutil's figures against known truth on a GPU (not part of the installed package).

See README.md. The pure helpers (``seed_reference``, ground_truth's duty-cycle maths, examples_truth's checks)
import neither torch nor pytest at load, so they are tested on the CPU (``tests/validation/``).
"""
