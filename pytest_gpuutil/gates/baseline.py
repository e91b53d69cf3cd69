"""Saved runs ("baselines"): where they live, how they are named, and how they are read back.

Layout: ``<root>/baselines/<machine id>/<name>.json``, one file per saved run, each a copy of a
``gpu_util.json`` run document. Baselines are kept per machine id (GPU model and count) because
GPU numbers from different hardware do not compare.
"""
from __future__ import annotations

import datetime as _dt
import json
import math
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping, Union

from pytest_gpuutil.records import MAPPING_FIELDS, NUMERIC_FIELDS, TestRecord

#: value of the ``format`` key of a run document
RUN_FORMAT = "pytest-gpuutil"
#: newest run-document version this module reads
RUN_VERSION = 1
#: id used when the run saw no GPU
NO_GPU_ID = "no-gpu"
#: autosave names start with a sortable UTC timestamp: ``20261121_230501[_abc1234]``
AUTOSAVE_RE = re.compile(r"^\d{8}_\d{6}(?:_[0-9a-zA-Z]+)?$")

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_STR_FIELDS = ("top_kernel",)
_DEFAULT_STR_FIELDS = ("outcome", "worker", "note", "machine", "counters_source", "counters_note")

PathLike = Union[str, "os.PathLike[str]"]


class BaselineError(Exception):
    """A run or baseline file that cannot be used; ``str()`` is one line ``<path>: <problem>``."""

    def __init__(self, path: PathLike, problem: str) -> None:
        self.path = Path(path)
        self.problem = problem
        super().__init__(f"{path}: {problem}")


@dataclass(frozen=True)
class RunDoc:
    """A run document read back from disk: machine description and records keyed by nodeid."""

    path: Path
    machine_info: Mapping[str, Any]
    records: Mapping[str, TestRecord]
    created: str | None = None

    @property
    def machine_id(self) -> str:
        """Baseline directory name of the machine this run was measured on."""
        return machine_id(self.machine_info)


def _slug(text: str) -> str:
    """Replace runs of characters unsafe in file names by ``_``."""
    return _UNSAFE.sub("_", text).strip("._-")


def machine_id(machine_info: Mapping[str, Any] | None) -> str:
    """Filesystem-safe id of the GPU setup, e.g. ``NVIDIA_H100_80GB_HBM3-x1`` or ``no-gpu``.

    Only the GPU model and count: the host name changes between CI runners, and driver, CUDA and
    torch upgrades are exactly what a baseline comparison should catch, not hide.
    """
    info = machine_info or {}
    model = info.get("gpu_model")
    if not isinstance(model, str) or not _slug(model):
        return NO_GPU_ID
    ident = _slug(model)[:80]
    count = info.get("gpu_count")
    if isinstance(count, int) and not isinstance(count, bool) and count > 0:
        ident += f"-x{count}"
    return ident


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


def _is_number(value: Any) -> bool:
    """True for a finite int/float that is not a bool."""
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
    )


def _record(path: PathLike, index: int, raw: Any) -> TestRecord:
    """Check one entry of ``tests`` and build its TestRecord."""
    where = f"tests[{index}]"
    if not isinstance(raw, Mapping):
        raise BaselineError(path, f"{where}: expected an object, got {type(raw).__name__}")
    data = dict(raw)
    test = data.get("test")
    if not isinstance(test, str) or not test:
        raise BaselineError(path, f"{where}.test: expected a non-empty string")
    for key in NUMERIC_FIELDS:
        value = data.get(key)
        if value is not None and not _is_number(value):
            raise BaselineError(
                path, f"{where}.{key} ({test}): expected a finite number or null, got {value!r}"
            )
    for key in _STR_FIELDS:
        value = data.get(key)
        if value is not None and not isinstance(value, str):
            raise BaselineError(path, f"{where}.{key} ({test}): expected a string or null")
    for key in _DEFAULT_STR_FIELDS:
        value = data.get(key)
        if value is None:
            data[key] = ""
        elif not isinstance(value, str):
            raise BaselineError(path, f"{where}.{key} ({test}): expected a string")
    for key in MAPPING_FIELDS:
        value = data.get(key)
        if value is None:
            data[key] = {}
        elif not isinstance(value, Mapping):
            raise BaselineError(path, f"{where}.{key} ({test}): expected an object or null")
    for label, stats in data["kernel_bench"].items():
        if not isinstance(stats, Mapping):
            raise BaselineError(
                path, f"{where}.kernel_bench[{label!r}] ({test}): expected an object"
            )
    devices = data.get("devices")
    if devices is None:
        data["devices"] = []
    elif not isinstance(devices, list) or not all(
        isinstance(d, (str, int)) and not isinstance(d, bool) for d in devices
    ):
        raise BaselineError(path, f"{where}.devices ({test}): expected a list of device ids")
    return TestRecord.from_dict(data)


def load_run_doc(path: PathLike) -> RunDoc:
    """Read a run or baseline file; BaselineError (one line) if it is unreadable or malformed."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BaselineError(path, "no such file") from None
    except IsADirectoryError:
        raise BaselineError(path, "is a directory, not a run file") from None
    except UnicodeDecodeError:
        raise BaselineError(path, "not UTF-8 text (not a gpu_util.json run file)") from None
    except OSError as exc:
        raise BaselineError(path, f"cannot read: {exc.strerror or exc}") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BaselineError(
            path, f"not valid JSON (line {exc.lineno} column {exc.colno}: {exc.msg})"
        ) from None
    if not isinstance(doc, dict):
        raise BaselineError(path, f"expected a JSON object, got {type(doc).__name__}")
    if doc.get("format") != RUN_FORMAT:
        raise BaselineError(
            path, f"not a {RUN_FORMAT} run file (format is {doc.get('format')!r})"
        )
    version = doc.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise BaselineError(path, f"bad version {version!r} (expected {RUN_VERSION})")
    if version > RUN_VERSION:
        raise BaselineError(
            path,
            f"written by a newer pytest-gpuutil (version {version}; this one reads {RUN_VERSION})",
        )
    machine_info = doc.get("machine_info")
    if machine_info is None:
        machine_info = {}
    if not isinstance(machine_info, dict):
        raise BaselineError(path, "machine_info: expected an object")
    tests = doc.get("tests")
    if not isinstance(tests, list):
        raise BaselineError(path, "tests: expected a list of test records")
    records: dict[str, TestRecord] = {}
    for index, raw in enumerate(tests):
        record = _record(path, index, raw)
        records[record.test] = record
    created = doc.get("created")
    return RunDoc(
        path=Path(path),
        machine_info=MappingProxyType(dict(machine_info)),
        records=MappingProxyType(records),
        created=created if isinstance(created, str) else None,
    )
