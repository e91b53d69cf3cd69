"""The plugin loads in every pytest run of an environment: it must not import torch."""
from __future__ import annotations

import subprocess
import sys


def run_python(code: str) -> str:
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return res.stdout.strip()


def test_importing_the_plugin_and_analyzer_does_not_import_torch():
    code = (
        "import sys, pytest_gpuutil.plugin, pytest_gpuutil, pytest_gpuutil.cli, pytest_gpuutil.analysis; "
        "print('torch' in sys.modules)"
    )
    assert run_python(code) == "False"


def test_the_check_itself_can_fail():
    assert run_python("import sys, torch; print('torch' in sys.modules)") == "True"
