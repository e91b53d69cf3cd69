"""Checks of pytest-gpuutil's figures against known truth on a GPU (not part of the installed package).

See README.md. The pure helpers (``duty_cycle``, ``seed_reference``) import neither torch nor
pytest, so they are tested on the CPU (``tests/validation/``).
"""
