"""The documentation site, built once per session (per xdist worker) with ``mkdocs build --strict``.

The docs' tests need the ``docs`` extra (``pip install -e ".[docs]"``; ``.ci/run`` installs it);
where mkdocs is absent they skip, saying so.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.docs_site import ROOT

#: what the site needs besides mkdocs: the theme and the API pages' handler
NEEDS = ("mkdocs", "material", "mkdocstrings_handlers.python")


@pytest.fixture(scope="session")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site built from this checkout into a temporary folder, with warnings as errors."""
    for module in NEEDS:
        pytest.importorskip(module, reason=f"{module} is not installed: the docs' tests need pip install -e '.[docs]'")
    out = tmp_path_factory.mktemp("docs") / "site"
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--config-file",
                           str(ROOT / "mkdocs.yml"), "--site-dir", str(out)],
                          cwd=ROOT, capture_output=True, text=True, env=env, timeout=600, check=False)
    if proc.returncode != 0:
        pytest.fail(f"mkdocs build --strict failed (exit {proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-4000:]}")
    return out
