"""The versions pyproject.toml promises: each requirement's floor, and what an environment has.

Used by tests/test_versions.py (the lowest-versions session installs exactly the floors) and
tests/test_build.py (the build requirements).
"""
from __future__ import annotations

import sys
from importlib import metadata
from pathlib import Path
from typing import Any, NamedTuple, Optional

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.9 and 3.10 (tomli is in the test extra there)
    import tomli as tomllib

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def read_pyproject(path: Path = PYPROJECT) -> dict[str, Any]:
    return tomllib.loads(path.read_text(encoding="utf-8"))


class Floor(NamedTuple):
    """One declared requirement: its distribution name, its floor (``>=``), the requirement text."""

    name: str
    floor: Optional[Version]
    requirement: str


def floors(project: dict[str, Any], extras: tuple[str, ...] = ("test",), *, here: bool = True) -> list[Floor]:
    """The floors of the dependencies and the named extras; ``here``: only those whose marker holds here."""
    texts = list(project["project"]["dependencies"])
    for extra in extras:
        texts += project["project"].get("optional-dependencies", {}).get(extra, [])
    found = []
    for text in texts:
        requirement = Requirement(text)
        if here and requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        lower = [Version(s.version) for s in requirement.specifier if s.operator in (">=", "==", "~=")]
        found.append(Floor(canonicalize_name(requirement.name), min(lower) if lower else None, text))
    return found


def installed_version(name: str) -> Optional[Version]:
    """The installed release of ``name`` without its local label (``2.13.0+cpu`` -> ``2.13.0``), or None."""
    try:
        return Version(Version(metadata.version(name)).public)
    except metadata.PackageNotFoundError:
        return None


def off_the_floor(declared: list[Floor], installed: dict[str, Optional[Version]]) -> dict[str, str]:
    """Each declared requirement not installed at its floor: name -> what is wrong."""
    wrong = {}
    for floor in declared:
        have = installed.get(floor.name)
        if floor.floor is None:
            wrong[floor.name] = f"{floor.requirement!r} declares no floor"
        elif have is None:
            wrong[floor.name] = "not installed"
        elif have != floor.floor:
            wrong[floor.name] = f"{have} installed, floor {floor.floor}"
    return wrong
