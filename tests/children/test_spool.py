"""The spool directory: the children's environment put back, pokes, stale spools swept."""
from __future__ import annotations

import os
import subprocess
import sys
import time

from pytest_gpuutil.children.spool import PREFIX, Spool, period_from, poke_time


def test_export_and_restore_put_the_environment_back(tmp_path) -> None:
    spool = Spool.create(str(tmp_path))
    env = {"KEEP": "1", "PYTEST_GPUUTIL_SPOOL": "outer"}
    spool.export(env, {"PYTEST_GPUUTIL_SPOOL": str(spool.directory), "NEW": "x", "KEEP": None})
    assert env == {"PYTEST_GPUUTIL_SPOOL": str(spool.directory), "NEW": "x"}
    spool.restore(env)
    assert env == {"KEEP": "1", "PYTEST_GPUUTIL_SPOOL": "outer"}
    assert spool.remove() is None and not spool.directory.exists() and spool.remove() is None


def test_every_poke_changes_the_time_children_look_at(tmp_path) -> None:
    spool = Spool.create(str(tmp_path))
    assert poke_time(str(spool.directory)) == 0
    spool.poke()
    first = poke_time(str(spool.directory))
    spool.poke()
    assert first and poke_time(str(spool.directory)) != first
    assert spool.files() == []  # the poke file is not a child's


def test_spools_of_dead_processes_are_swept(tmp_path) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = tmp_path / f"{PREFIX}{int(dead.stdout)}-abc"
    live = tmp_path / f"{PREFIX}{os.getpid()}-def"
    young = tmp_path / f"{PREFIX}{int(dead.stdout)}-ghi"
    for folder in (stale, live, young):
        folder.mkdir()
        (folder / "1-2.gpuc").write_bytes(b"")
    old = time.time() - 3600
    for folder in (stale, live):
        os.utime(folder, (old, old))
    Spool.create(str(tmp_path))
    assert not stale.exists() and live.exists() and young.exists()


def test_the_period_comes_from_the_environment_within_bounds() -> None:
    assert period_from({}) == 0.5  # a SIGKILLed child loses at most its last half second
    assert period_from({"PYTEST_GPUUTIL_PERIOD": "0.25"}) == 0.25
    assert period_from({"PYTEST_GPUUTIL_PERIOD": "fast"}) == 0.5 and period_from({"PYTEST_GPUUTIL_PERIOD": "0"}) == 0.5
