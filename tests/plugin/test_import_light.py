"""The plugin loads in every pytest run of an environment: it must not import torch."""
from __future__ import annotations

import subprocess
import sys


def run_python(code: str) -> str:
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return res.stdout.strip()


def test_importing_the_plugin_and_analyzer_does_not_import_torch():
    code = (
        "import sys, pytest_gpuutil.plugin, pytest_gpuutil, pytest_gpuutil.cli.analyze, pytest_gpuutil.analysis.summary; "
        "print('torch' in sys.modules)"
    )
    assert run_python(code) == "False"


def test_the_check_itself_can_fail():
    assert run_python("import sys, torch; print('torch' in sys.modules)") == "True"


def test_the_plugin_and_session_state_do_not_import_numpy_or_msgspec():
    """Plain pytest runs (no --gpu-util, no fixture) pay for neither."""
    code = (
        "import sys, pytest_gpuutil.plugin, pytest_gpuutil.session.state; "
        "print(sorted(m for m in ('torch', 'numpy', 'msgspec') if m in sys.modules))"
    )
    assert run_python(code) == "[]"


def test_the_package_exports_load_on_first_use():
    assert run_python("import pytest_gpuutil as g; print(g.analyze.__module__, g.read_trace.__module__)") == (
        "pytest_gpuutil.analysis.summary pytest_gpuutil.traces.reader"
    )
