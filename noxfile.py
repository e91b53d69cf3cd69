"""Test sessions over the versions that pyproject.toml promises (``nox -l`` lists them).

- ``tests``: what ``.ci/run`` runs first, the README's test command: Python 3.11, the newest
  releases, torch 2.13.0's CPU build from this machine's disk (pip finds it there; uv does not look).
- ``tests-lowest``: every dependency at the lowest version pyproject.toml declares (the ``test``
  and ``docs`` extras too), resolved by uv from pyproject.toml itself (``--resolution
  lowest-direct``, wheels only), on the Python of the newest run (3.11), so that the two runs can
  be compared: it then checks that it skipped no test that the newest run did not skip.
- ``lowest-3.X``: the floors of the dependencies and the ``test`` extra on each Python the machine
  has (a floor without a wheel for that Python gives way to the first release with one), by hand.
  The documentation site's tests skip there before 3.11 (the ``docs`` extra needs Python 3.11).

torch at its floor (2.5.0) has no CPU wheel on PyPI for Linux: uv installs the CUDA build (about
5 GB in the venv with its nvidia-* libraries), which runs on a CPU.
"""
from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import nox

if sys.version_info >= (3, 11):
    import tomllib
else:  # nox on Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent
#: Every Python that requires-python admits and that a machine here can have (pyenv's builds).
PYTHONS = ["3.9", "3.10", "3.11", "3.12", "3.13"]
#: Where the newest run (the README's test command) leaves the tests it skipped: pytest's cache,
#: written by the root conftest.py.
SKIP_KEY = Path("v") / "gpuutil" / "skipped"
#: The Python of the newest run (the README's test command), where tests-lowest compares its skips.
NEWEST_RUN_PYTHON = "3.11"


def _pyenv_versions() -> None:
    """Let pyenv's shims (and so nox) find every pyenv-built Python, not only the active one.

    pyenv answers ``python3.9`` only for its active versions: PYENV_VERSION lists them, the one
    already active first, so ``python3`` stays what it was.
    """
    root = os.environ.get("PYENV_ROOT")
    if not root or os.environ.get("PYENV_VERSION") or not (Path(root) / "versions").is_dir():
        return
    builds = sorted(p.name for p in (Path(root) / "versions").iterdir()
                    if re.fullmatch(r"3\.\d+\.\d+", p.name) and (p / "bin" / "python3").exists())
    active = (Path(root) / "version").read_text().split() if (Path(root) / "version").is_file() else []
    ordered = [v for v in active if v in builds] + [v for v in builds if v not in active]
    if ordered:
        os.environ["PYENV_VERSION"] = ":".join(ordered)


_pyenv_versions()
nox.options.default_venv_backend = "uv|venv"
nox.options.download_python = "never"  # only the machine's own interpreters
nox.options.sessions = ["tests"]


def _workers(session: nox.Session) -> list[str]:
    """``-n N`` for pytest-xdist: the session's posargs may say ``-n``; else as many as the cores."""
    if any(arg == "-n" or arg.startswith("-n") and arg[2:].isdigit() for arg in session.posargs):
        return []
    return ["-n", str(max(1, min(os.cpu_count() or 1, 8)))]


@nox.session(python="3.11", venv_backend="venv")
def tests(session: nox.Session) -> None:
    """The newest releases with torch 2.13.0's CPU build, as .ci/run installs them."""
    session.install("torch==2.13.0", "-e", ".[test,docs]")
    session.run("python", "-m", "pytest", *_workers(session), *session.posargs)


def _install_lowest(session: nox.Session, extras: str = "test") -> str:
    """Install the project with every direct dependency (and those of ``extras``) at its floor; return
    the frozen list."""
    if not isinstance(session.virtualenv, nox.virtualenv.VirtualEnv) or session.venv_backend != "uv":
        session.error("the lowest sessions resolve with uv: pip install nox uv")
    session.install("--resolution", "lowest-direct", "--only-binary", ":all:", "-e", f".[{extras}]")
    # what a build without isolation needs (tests/children/test_packaging.py), also at its floors
    session.install("--only-binary", ":all:", "pip", *_floor_pins(_pyproject()["build-system"]["requires"]))
    frozen = session.run("uv", "pip", "freeze", "--python", session.virtualenv.location,
                         silent=True, external=True)
    session.log("installed:\n" + frozen)
    return frozen


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _floor_pins(requirements: list[str]) -> list[str]:
    """``name>=X`` -> ``name==X``."""
    return [re.sub(r"\s*>=\s*", "==", r, count=1) for r in requirements]


def _cache_dir(session: nox.Session) -> Path:
    """The session's own pytest cache, beside its venv (``.nox/<session>/pytest-cache``).

    Not ``session.create_tmp()``: that also points TMPDIR into ``.nox/``, inside the project, where the
    pytester sandboxes would find the project's pyproject.toml and take it as their rootdir and ini file
    (their node ids, conftests and output paths change: the failures and errors of the first CI runs, issue 36).
    """
    return Path(session.virtualenv.location) / "pytest-cache"


def _run_suite(session: nox.Session, cache_dir: Path) -> None:
    session.run("python", "-m", "pytest", *_workers(session), "-o", f"cache_dir={cache_dir}", *session.posargs,
                env={"PYTEST_GPUUTIL_LOWEST": "1", "UV": _uv()})


def _uv() -> str:
    from nox.virtualenv import find_uv

    return find_uv()[1]


def _skipped(cache_dir: Path) -> dict[str, str] | None:
    path = cache_dir / SKIP_KEY
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def _compare_skips(session: nox.Session, lowest_cache: Path) -> None:
    """Fail where the lowest run skipped (or xfailed) a test that the newest run ran."""
    newest = _skipped(ROOT / ".pytest_cache")
    lowest = _skipped(lowest_cache)
    if lowest is None:
        session.error(f"the lowest run left no list of skipped tests in {lowest_cache / SKIP_KEY}")
    if newest is None:
        message = "no list of the newest run's skipped tests (.pytest_cache): run `.venv/bin/python -m pytest` first"
        if os.environ.get("CI"):
            session.error(message)
        session.warn(message + "; skips not compared")
        return
    extra = {nodeid: why for nodeid, why in lowest.items() if nodeid not in newest}
    session.log(f"skipped: {len(lowest)} here, {len(newest)} in the newest run")
    if extra:
        session.error("skipped at the floors but run with the newest releases:\n"
                      + "\n".join(f"  {nodeid}: {why}" for nodeid, why in sorted(extra.items())))


@nox.session(name="tests-lowest", python=NEWEST_RUN_PYTHON)
def tests_lowest(session: nox.Session) -> None:
    """Every dependency and extra at its declared floor, on the newest run's Python; skips compared with it."""
    _install_lowest(session, "test,docs")
    cache = _cache_dir(session)
    _run_suite(session, cache)
    _compare_skips(session, cache)


@nox.session(python=PYTHONS)
def lowest(session: nox.Session) -> None:
    """The floors on one Python (``nox -s lowest-3.12``)."""
    _install_lowest(session)
    _run_suite(session, _cache_dir(session))
