"""Saved runs ("baselines"): where they live, how they are named, and which one a name or path means.

Layout: ``<root>/baselines/<machine id>/<name>.json``, one file per saved run, each a copy of a
``gpu_util.json`` run document. Baselines are kept per machine id (GPU model and count) because
GPU numbers from different hardware do not compare. A baseline is read back as any run file is
(:func:`pytest_gpuutil.rundoc.reading.load_run_doc`).
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any, Mapping

from pytest_gpuutil.rundoc.document import PathLike, RunDocError, machine_id

#: autosave names start with a sortable UTC timestamp: ``20261121_230501[_abc1234]``
AUTOSAVE_RE = re.compile(r"^\d{8}_\d{6}(?:_[0-9a-zA-Z]+)?$")

_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class BaselineError(RunDocError):
    """A baseline that cannot be used (a PATH that is no file, a NAME not saved); ``str()`` is one
    line ``<path>: <problem>``. A RunDocError, so that reading a baseline fails one way."""


def autosave_name(
    machine_info: Mapping[str, Any] | None = None, now: _dt.datetime | None = None
) -> str:
    """Sortable baseline name from the UTC time, plus the short git commit when known."""
    moment = now if now is not None else _dt.datetime.now(_dt.timezone.utc)
    if moment.tzinfo is not None:
        moment = moment.astimezone(_dt.timezone.utc)
    name = moment.strftime("%Y%m%d_%H%M%S")
    commit = (machine_info or {}).get("git_commit")
    if isinstance(commit, str):
        short = re.sub(r"[^0-9a-zA-Z]", "", commit)[:7]
        if short:
            name += f"_{short}"
    return name


def free_autosave_name(
    root: PathLike, machine_info: Mapping[str, Any] | None, now: _dt.datetime | None = None
) -> str:
    """``autosave_name`` moved on by whole seconds while that baseline exists (two runs in a second)."""
    moment = now if now is not None else _dt.datetime.now(_dt.timezone.utc)
    directory = baseline_dir(root, machine_info)
    name = autosave_name(machine_info, moment)
    while (directory / f"{name}.json").exists():
        moment += _dt.timedelta(seconds=1)
        name = autosave_name(machine_info, moment)
    return name


def _check_name(name: str) -> str:
    """Return the baseline name without ``.json``; ValueError if it is not a plain file name."""
    stem = name[:-5] if name.endswith(".json") else name
    if not _SAFE_NAME.match(stem):
        raise ValueError(
            f"baseline name {name!r}: use letters, digits, '.', '_' and '-' only "
            "(no path separators, not starting with '.')"
        )
    return stem


def baseline_dir(root: PathLike, machine_info: Mapping[str, Any] | None) -> Path:
    """Directory holding this machine's baselines under ``root``."""
    return Path(root) / "baselines" / machine_id(machine_info)


def save_baseline(run_doc: Mapping[str, Any], root: PathLike, name: str) -> Path:
    """Write ``run_doc`` to ``root/baselines/<machine id>/<name>.json`` atomically; return it."""
    stem = _check_name(name)
    machine_info = run_doc.get("machine_info")
    directory = baseline_dir(root, machine_info if isinstance(machine_info, Mapping) else None)
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / f"{stem}.json"
    text = json.dumps(run_doc, indent=2, sort_keys=False) + "\n"
    fd, tmp_name = tempfile.mkstemp(dir=directory, prefix=f".{stem}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, target)
    except BaseException:
        try:
            os.unlink(tmp_name)
        except OSError:
            pass
        raise
    return target


def list_baselines(root: PathLike, machine_info: Mapping[str, Any] | None) -> tuple[Path, ...]:
    """This machine's baseline files, oldest first (autosaves by name, then other names)."""
    directory = baseline_dir(root, machine_info)
    if not directory.is_dir():
        return ()
    files = [p for p in directory.glob("*.json") if not p.name.startswith(".") and p.is_file()]
    auto = sorted(p for p in files if AUTOSAVE_RE.match(p.stem))
    named = sorted(p for p in files if not AUTOSAVE_RE.match(p.stem))
    return tuple(named + auto)


def is_baseline_path(spec: str) -> bool:
    """True when a ``--gpu-util-compare`` value is a file PATH (a slash, or ``.json`` at its end), not a NAME."""
    return "/" in spec or os.sep in spec or spec.endswith(".json")


class BaselineNotSaved(BaselineError):
    """A baseline NAME that this machine has not saved (yet): the gate warns, or fails when strict."""

    def __init__(self, name: str, directory: Path) -> None:
        self.name = name
        self.directory = directory
        super().__init__(name, f"no baseline of that name in {directory}")


def saved_baselines(root: PathLike) -> dict[str, tuple[str, ...]]:
    """Every machine id under ``root/baselines`` with its baseline names, oldest first (list_baselines' order)."""
    top = Path(root) / "baselines"
    if not top.is_dir():
        return {}
    found = {}
    for directory in sorted(p for p in top.iterdir() if p.is_dir() and not p.name.startswith(".")):
        files = [p for p in directory.glob("*.json") if not p.name.startswith(".") and p.is_file()]
        auto = sorted(p.stem for p in files if AUTOSAVE_RE.match(p.stem))
        named = sorted(p.stem for p in files if not AUTOSAVE_RE.match(p.stem))
        if files:
            found[directory.name] = tuple(named + auto)
    return found


def describe_saved(root: PathLike, machine_info: Mapping[str, Any] | None, most: int = 5) -> str:
    """What baselines exist under ``root``, for this machine and others, in a few words."""
    saved = saved_baselines(root)
    here = machine_id(machine_info)

    def names(found: tuple[str, ...]) -> str:
        shown = ", ".join(found[-most:])  # the newest autosaves come last
        return f"{shown} and {len(found) - most} more" if len(found) > most else shown

    mine = saved.pop(here, ())
    parts = [f"saved for this machine: {names(mine)}" if mine else "none saved for this machine"]
    if saved:
        parts.append("for other machines: " + "; ".join(f"{machine} ({names(found)})" for machine, found in saved.items()))
    return ", ".join(parts)


def resolve_baseline(
    spec: str | None, root: PathLike, machine_info: Mapping[str, Any] | None
) -> Path | None:
    """Find the baseline file that ``spec`` names; None when ``spec`` is empty and none is saved.

    ``spec`` empty: the latest baseline for this machine (the last autosave by name; when there is
    no autosave, the last file by name). A NAME (with or without ``.json``): that file in this
    machine's baseline directory. Otherwise an existing file path. A NAME not saved raises
    BaselineNotSaved (the gate warns, or fails when strict); a PATH (``is_baseline_path``) that is
    no file raises BaselineError (a usage error: a typo in a path must not pass a gate silently).
    """
    if not spec:
        saved = list_baselines(root, machine_info)
        return saved[-1] if saved else None
    directory = baseline_dir(root, machine_info)
    if "/" not in spec and os.sep not in spec and not spec.startswith("."):
        stem = spec[:-5] if spec.endswith(".json") else spec
        candidate = directory / f"{stem}.json"
        if candidate.is_file():
            return candidate
    as_path = Path(spec)
    if as_path.is_file():
        return as_path
    if is_baseline_path(spec):
        problem = "is a directory, not a run file" if as_path.is_dir() else "no such file"
        raise BaselineError(spec, f"{problem} (a NAME without '/' or '.json' names a saved baseline)")
    raise BaselineNotSaved(spec, directory)
