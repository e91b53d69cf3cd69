"""The optional C reader of trace JSON (pytest_gpuutil/traces/_scan.c); everything else is in pyproject.toml.

``optional=True``: where no C compiler or Python headers are found, the package installs without
it and reads traces with its pure-Python readers (the same numbers, slower).
"""
from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "pytest_gpuutil.traces._scan",
            sources=["pytest_gpuutil/traces/_scan.c"],
            optional=True,
            extra_compile_args=["-O2"],
        )
    ]
)
