"""The baseline a run is compared with (``--gpu-util-compare``): chosen at the start, compared at the end.

Chosen before any test runs, so that a missing or unreadable baseline stops the run at once; the
comparison (``--gpu-util-fail`` expressions over the records) runs after the last test, and a
regression fails the run.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Sequence

from pytest_gpuutil.gates.baseline import (
    BaselineError,
    RunDoc,
    load_run_doc,
    machine_id,
    resolve_baseline,
)
from pytest_gpuutil.gates.regression import Comparison, FailExpr, compare_records
from pytest_gpuutil.options import COMPARE_LATEST
from pytest_gpuutil.records import TestRecord
from pytest_gpuutil.session import SetupError


def choose_baseline(spec: str, output_dir: Path, info: dict[str, Any],
                    any_machine: bool) -> tuple[Optional[RunDoc], str]:
    """The baseline ``spec`` names (or the latest), or None and why there is none to compare with.

    SetupError when the baseline named cannot be found or read.
    """
    try:
        path = resolve_baseline(None if spec == COMPARE_LATEST else spec, output_dir, info)
    except BaselineError as exc:
        raise SetupError(f"--gpu-util-compare: {exc}") from None
    if path is None:
        return None, f"no baseline yet for machine {machine_id(info)} under {output_dir / 'baselines'}"
    try:
        doc = load_run_doc(path)
    except BaselineError as exc:
        raise SetupError(f"--gpu-util-compare: corrupt baseline {exc}") from None
    if doc.machine_id != machine_id(info) and not any_machine:
        return None, (
            f"baseline {path} is from machine {doc.machine_id}, this is {machine_id(info)}: not compared "
            "(--gpu-util-compare-any-machine compares anyway)"
        )
    return doc, ""


def compare_with_baseline(baseline: Optional[RunDoc], records: Sequence[TestRecord], fail_exprs: Sequence[FailExpr],
                          strict: bool) -> tuple[Optional[Comparison], bool]:
    """The comparison (None without a baseline), and whether it fails the run: a regression, or
    ``--gpu-util-compare-strict`` with no baseline."""
    if baseline is None:
        return None, strict
    comparison = compare_records(baseline.records, records, fail_exprs)
    return comparison, comparison.failed
