"""The baseline a run is compared with (``--gpu-util-compare``): chosen at the start, compared at the end.

Chosen before any test runs, so that a missing or unreadable baseline stops the run at once; the
comparison (``--gpu-util-fail`` expressions over the records) runs after the last test, and a
regression fails the run.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from pytest_gpuutil.gates.baseline import BaselineError, BaselineNotSaved, describe_saved, resolve_baseline
from pytest_gpuutil.gates.regression import Comparison, FailExpr, compare_records
from pytest_gpuutil.options import COMPARE_LATEST
from pytest_gpuutil.records import TestRecord
from pytest_gpuutil.report.terminal import display_path
from pytest_gpuutil.rundoc.document import RunDoc, RunDocError, machine_id
from pytest_gpuutil.rundoc.reading import load_run_doc
from pytest_gpuutil.session import SetupError


def choose_baseline(spec: str, output_dir: Path, info: dict[str, Any],
                    any_machine: bool) -> tuple[Optional[RunDoc], str]:
    """The baseline ``spec`` names (or the latest), or None and why there is none to compare with.

    No baseline saved (yet) under the name asked for, or none at all for the latest, is a reason
    (a warning; a failure with --gpu-util-compare-strict). SetupError when a baseline PATH names
    no file, or a baseline cannot be read.
    """
    try:
        path = resolve_baseline(None if spec == COMPARE_LATEST else spec, output_dir, info)
    except BaselineNotSaved as exc:
        return None, not_saved(repr(exc.name), output_dir, info)
    except BaselineError as exc:
        raise SetupError(f"--gpu-util-compare: {exc}") from None
    if path is None:
        return None, not_saved("yet", output_dir, info)
    try:
        doc = load_run_doc(path)
    except RunDocError as exc:
        raise SetupError(f"--gpu-util-compare: corrupt baseline {display_path(exc.path)}: {exc.problem}") from None
    if doc.machine_id != machine_id(info) and not any_machine:
        return None, (
            f"baseline {display_path(path)} is from machine {doc.machine_id}, this is {machine_id(info)}: not compared "
            "(--gpu-util-compare-any-machine compares anyway)"
        )
    return doc, ""


def not_saved(what: str, output_dir: Path, info: dict[str, Any]) -> str:
    """The warning for a baseline not saved: where it was looked for, and which baselines there are."""
    return (f"no baseline {what} for machine {machine_id(info)} under {display_path(output_dir / 'baselines')} "
            f"({describe_saved(output_dir, info)}): not compared")


def compare_with_baseline(baseline: Optional[RunDoc], records: Sequence[TestRecord], fail_exprs: Sequence[FailExpr],
                          strict: bool) -> tuple[Optional[Comparison], bool]:
    """The comparison (None without a baseline), and whether it fails the run: a regression, or
    ``--gpu-util-compare-strict`` with no baseline."""
    if baseline is None:
        return None, strict
    comparison = compare_records(baseline.records, records, fail_exprs)
    return comparison, comparison.failed


def explanations_for(baseline: Mapping[str, TestRecord], records: Sequence[TestRecord], comparison: Comparison,
                     classifier: Any = None) -> dict[str, Any]:
    """Why each flagged test regressed (gates.explain); an explanation that fails is left out, never the gate."""
    if not comparison.regressions:
        return {}
    from pytest_gpuutil.gates.explain import explain_comparison

    try:
        return explain_comparison(baseline, records, comparison, classifier)
    except Exception:  # noqa: BLE001 - the verdict stands without its explanation
        return {}
