"""Root conftest: the project's own tests use pytester to run pytest in subprocess-free sandboxes.

It also keeps the list of tests a run skipped (or xfailed), with the reason, in pytest's cache
(``.pytest_cache/v/gpuutil/skipped``): the lowest-versions session (noxfile.py) compares its own list
with the one the newest run left, and fails on a test skipped only at the floors.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

class _SkipLog:
    """Collects each skipped or xfailed test's reason; the controller (not an xdist worker) writes them."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.skipped: dict[str, str] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if not report.skipped:
            return
        if hasattr(report, "wasxfail"):
            self.skipped[report.nodeid] = f"xfail: {report.wasxfail}"
        else:
            longrepr = report.longrepr
            self.skipped[report.nodeid] = str(longrepr[2] if isinstance(longrepr, tuple) else longrepr)

    def pytest_sessionfinish(self) -> None:
        if getattr(self.config, "cache", None) is not None and not hasattr(self.config, "workerinput"):
            self.config.cache.set("gpuutil/skipped", dict(sorted(self.skipped.items())))


def _temp_root_inside(rootpath: Path) -> Path | None:
    """The temporary root pytest will use, where it lies inside ``rootpath`` (else None)."""
    temproot = Path(os.environ.get("PYTEST_DEBUG_TEMPROOT") or tempfile.gettempdir()).resolve()
    return temproot if temproot == rootpath or rootpath in temproot.parents else None


def pytest_configure(config: pytest.Config) -> None:
    inside = None if config.option.basetemp else _temp_root_inside(config.rootpath.resolve())
    if inside is not None:
        # pytester's sandboxes would lie under the project and take its pyproject.toml as their ini file
        raise pytest.UsageError(f"the temporary directory {inside} (TMPDIR) is inside the project {config.rootpath}: "
                                "the pytester runs would take the project's pyproject.toml as theirs; set TMPDIR elsewhere")
    config.pluginmanager.register(_SkipLog(config), "gpuutil-skip-log")
