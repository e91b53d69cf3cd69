"""Optional C parts and the child-process ``.pth`` file; everything else is in pyproject.toml.

- ``pytest_gpuutil.traces._scan``: the C reader of trace JSON. ``optional=True``: where no C
  compiler or Python headers are found, the package installs without it and reads traces with its
  pure-Python readers (the same numbers, slower).
- ``pytest_gpuutil.analysis.intervals._unions``: unions of time intervals for the plain-Python analysis of a
  trace (``gpuutil analyze`` without numpy); without it the same integers come from C-level
  iterators in several passes.
- ``pytest_gpuutil.analysis.intervals._figures``: that analysis's per-event work (clipping, counts,
  totals, per-device sorts, unions, idle gaps) in one C call; without it the Python passes above.
- ``pytest_gpuutil.rundoc._indent``: gpu_util.json's tests array indented from each test's compact
  JSON (the spool's); without it msgspec formats the whole document (the same bytes, slower).
- ``pytest_gpuutil.report._csv_rows``: gpu_util.csv's rows in one call; without it a column at a
  time in Python (the same bytes, slower).
- ``pytest_gpuutil.gates._record_parts``: parts of each measured test's record in one call each (its
  ``kernels`` compacted, its rows of plain values as dicts) and the spool's check of a flush's records'
  list fields; without it the same tuples, dicts and answers in Python.
- ``pytest_gpuutil.capture._waits``: the CUPTI callback that records the host's waits at the
  synchronizing calls only (see pytest_gpuutil/capture/host_waits.py); without it the waits come
  from CUPTI's activity kind 38, which makes every kernel launch dearer. The same module reads CUPTI's
  activity buffers into columns in one C pass, and codes the drain's names (see
  pytest_gpuutil/capture/cupti_records.py); without it the same columns come from the numpy reader.
- ``pytest_gpuutil.capture.places._frames``: reads the calling thread's Python source places at those
  calls and at copies (see pytest_gpuutil/capture/places/calls.py); without it (or on a Python
  other than 3.11-3.13) findings name places from the stack sampler only. It also holds the stack
  sampler's wait between samples without the GIL (``sleep_until_on``); without it the sampler waits
  in Python.
- ``pytest_gpuutil.children._inject``: the CUDA injection library that measures non-Python child
  processes (``CUDA_INJECTION64_PATH``). A plain shared library (no Python API; never imported),
  built the same optional way; without it such children are reported as not measured.
- ``pytest_gpuutil_children.pth``: copied into site-packages (a wheel's root, or the editable
  wheel's), the way pytest-cov shipped its ``.pth``; it starts a child's measurement only when
  ``PYTEST_GPUUTIL_SPOOL`` is set (see pytest_gpuutil/children/bootstrap.py).
"""
import os

from setuptools import Extension, setup
from setuptools.command.build_py import build_py
from setuptools.command.develop import develop

PTH = os.path.join("pytest_gpuutil", "children", "pytest_gpuutil_children.pth")


class BuildPyWithPth(build_py):
    """build_py that also puts the ``.pth`` file at the root of what gets installed."""

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            # an editable wheel installs what lies in the install command's lib directory (the
            # unpacked wheel), not build_lib
            target = self.get_finalized_command("install").install_lib
        else:
            target = self.build_lib
        self.mkpath(target)
        self.copy_file(PTH, os.path.join(target, os.path.basename(PTH)), preserve_mode=False)

    def get_outputs(self, include_bytecode=True):
        outputs = list(super().get_outputs(include_bytecode))
        if not getattr(self, "editable_mode", False):
            outputs.append(os.path.join(self.build_lib, os.path.basename(PTH)))
        return outputs


class DevelopWithPth(develop):
    """``setup.py develop`` (editable installs with setuptools older than 64): the ``.pth`` too."""

    def run(self):
        super().run()
        target = getattr(self, "install_dir", None)
        if target:
            self.copy_file(PTH, os.path.join(target, os.path.basename(PTH)), preserve_mode=False)


setup(
    cmdclass={"build_py": BuildPyWithPth, "develop": DevelopWithPth},
    ext_modules=[
        Extension(
            "pytest_gpuutil.traces._scan",
            sources=["pytest_gpuutil/traces/_scan.c"],
            optional=True,
            extra_compile_args=["-O2"],
        ),
        Extension(
            "pytest_gpuutil.analysis.intervals._unions",
            sources=["pytest_gpuutil/analysis/intervals/_unions.c"],
            depends=["pytest_gpuutil/analysis/intervals/_int64s.h"],
            optional=True,
            extra_compile_args=["-O2"],
        ),
        Extension(
            "pytest_gpuutil.analysis.intervals._figures",
            sources=["pytest_gpuutil/analysis/intervals/_figures.c"],
            depends=["pytest_gpuutil/analysis/intervals/_int64s.h"],
            optional=True,
            extra_compile_args=["-O2"],
        ),
        Extension(
            "pytest_gpuutil.rundoc._indent",
            sources=["pytest_gpuutil/rundoc/_indent.c"],
            depends=["pytest_gpuutil/rundoc/_out_bytes.h"],
            optional=True,
            extra_compile_args=["-O2"],
        ),
        Extension(
            "pytest_gpuutil.report._csv_rows",
            sources=["pytest_gpuutil/report/_csv_rows.c"],
            depends=["pytest_gpuutil/rundoc/_out_bytes.h"],
            optional=True,
            extra_compile_args=["-O2"],
        ),
        Extension(
            "pytest_gpuutil.gates._record_parts",
            sources=["pytest_gpuutil/gates/_record_parts.c"],
            optional=True,
            extra_compile_args=["-O2"],
        ),
        Extension(
            "pytest_gpuutil.capture._waits",
            sources=["pytest_gpuutil/capture/_waits.c"],
            optional=True,
            extra_compile_args=["-O2"],
            libraries=["pthread"],
        ),
        Extension(
            "pytest_gpuutil.capture.places._frames",
            sources=["pytest_gpuutil/capture/places/_frames.c"],
            optional=True,
            extra_compile_args=["-O2"],
            libraries=["pthread"],
        ),
        Extension(
            "pytest_gpuutil.children._inject",
            sources=["pytest_gpuutil/children/inject.c"],
            optional=True,
            extra_compile_args=["-O2", "-fvisibility=hidden"],
            libraries=["dl", "pthread", "m"],
        ),
    ],
)
