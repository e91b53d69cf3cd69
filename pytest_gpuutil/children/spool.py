"""The per-run spool: a private directory the measuring process creates, named in the environment.

Every process a test starts inherits the spool's environment variables; a measured child appends
its chunks (:mod:`~pytest_gpuutil.children.spool_format`) to a file of its own there, and the
parent reads the files at each flush. An xdist worker has a spool of its own, so the children of
its tests report to it. The parent asks children that are still running to hand over what they
have by touching the ``poke`` file (a child looks at its time every few tens of milliseconds).

Nothing here imports numpy: a child loads this module before it knows whether it will measure.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, MutableMapping, Optional

#: the spool directory; its presence is what turns a child's bootstrap on
SPOOL_ENV = "PYTEST_GPUUTIL_SPOOL"
#: the libcupti the parent's torch loaded (the injection library opens the same one)
CUPTI_ENV = "PYTEST_GPUUTIL_CUPTI"
#: the pid of the process that measures itself from Python (the injection library leaves it alone)
SELF_ENV = "PYTEST_GPUUTIL_SELF"
#: set by the injection library in a process it measures (a Python bootstrap then stays out)
INJECTED_ENV = "PYTEST_GPUUTIL_INJECTED"
#: seconds between a running child's hand-overs (what a SIGKILL can lose at most)
PERIOD_ENV = "PYTEST_GPUUTIL_PERIOD"
#: CUDA's injection hook: the driver loads this library into every process that initialises CUDA
INJECTION_ENV = "CUDA_INJECTION64_PATH"
CHILD_ENV_NAMES = (SPOOL_ENV, CUPTI_ENV, SELF_ENV, INJECTED_ENV, PERIOD_ENV, INJECTION_ENV)

PREFIX = "pytest-gpuutil-children-"
POKE = "poke"
SUFFIX = ".gpuc"
#: a child hands over at least this often (seconds): a SIGKILLed child loses at most its last period
DEFAULT_PERIOD_S = 0.5


def period_from(environ: Mapping[str, str]) -> float:
    """The hand-over period a child uses (bad values fall back to the default)."""
    try:
        value = float(environ.get(PERIOD_ENV, ""))
    except ValueError:
        return DEFAULT_PERIOD_S
    return value if 0.01 <= value <= 3600 else DEFAULT_PERIOD_S


def child_file(directory: str, pid: int, created_ns: int) -> str:
    """Where a child with this pid, starting now, writes (a reused pid gets another name)."""
    return os.path.join(directory, f"{pid}-{created_ns}{SUFFIX}")


def poke_time(directory: str) -> int:
    """When the parent last asked for a hand-over (ns), 0 if it never did."""
    try:
        return os.stat(os.path.join(directory, POKE)).st_mtime_ns
    except OSError:
        return 0


def append(fd: int, data: bytes) -> None:
    """Write all of ``data`` (a chunk) at the end of the file."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def open_for_append(path: str) -> int:
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0), 0o600)


@dataclass
class Spool:
    """The measuring process's spool directory and the environment that points children to it."""

    directory: Path
    #: what the environment held before this spool replaced it (restored by ``close``)
    _saved: dict[str, Optional[str]] = field(default_factory=dict)
    _pokes: int = 0

    @classmethod
    def create(cls, base: Optional[str] = None) -> "Spool":
        """A new spool, named after this process; spools left by processes that died are swept first."""
        sweep_stale(base)
        return cls(Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=base)))

    def export(self, environ: MutableMapping[str, str], values: Mapping[str, Optional[str]]) -> None:
        """Set the children's variables (None removes one), remembering the old values once."""
        for name, value in values.items():
            if name not in self._saved:
                self._saved[name] = environ.get(name)
            if value is None:
                environ.pop(name, None)
            else:
                environ[name] = value

    def restore(self, environ: MutableMapping[str, str]) -> None:
        for name, value in self._saved.items():
            if value is None:
                environ.pop(name, None)
            else:
                environ[name] = value
        self._saved.clear()

    def files(self) -> list[str]:
        try:
            with os.scandir(self.directory) as entries:
                return sorted(e.path for e in entries if e.name.endswith(SUFFIX))
        except OSError:
            return []

    def poke(self) -> None:
        """Ask running children to hand over now (the file's time changes every call)."""
        self._pokes += 1
        path = self.directory / POKE
        tmp = self.directory / f".{POKE}.{os.getpid()}"
        try:
            tmp.write_text(str(self._pokes))
            now = time.time_ns() + self._pokes  # distinct even where the file system's clock is coarse
            os.utime(tmp, ns=(now, now))
            os.replace(tmp, path)
        except OSError:
            pass

    def remove(self) -> Optional[str]:
        """Delete the directory and everything in it; an error message, or None."""
        try:
            shutil.rmtree(self.directory)
        except FileNotFoundError:
            return None
        except OSError as exc:
            return f"could not remove the child-process spool {self.directory}: {exc}"
        return None


def injection_library() -> Optional[str]:
    """The injection library built with the package (``children/_inject*.so``), or None."""
    import importlib.machinery

    here = os.path.dirname(os.path.abspath(__file__))
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = os.path.join(here, "_inject" + suffix)
        if os.path.exists(path):
            return path
    return None


def sweep_stale(base: Optional[str] = None, older_than_s: float = 60.0) -> None:
    """Remove spools whose measuring process no longer runs (a crashed xdist worker leaves its own)."""
    directory = base or tempfile.gettempdir()
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return
    now = time.time()
    for entry in entries:
        if not entry.name.startswith(PREFIX):
            continue
        pid_text = entry.name[len(PREFIX):].split("-", 1)[0]
        try:
            pid = int(pid_text)
            old = now - entry.stat(follow_symlinks=False).st_mtime > older_than_s
        except (ValueError, OSError):
            continue
        if old and not _alive(pid):
            shutil.rmtree(entry.path, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # someone else's process
    return True
