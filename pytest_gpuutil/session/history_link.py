"""The run history from the session's side: ``--gpu-util-compare history`` and ``--gpu-util-history``.

At the session's end (on the controller or a plain run: xdist workers write nothing, so an xdist
session is one run): each test compared with its last runs on this machine id (``history.noise``),
the trend lines for the HTML report, then the run appended. A history file that cannot be read or
written is one line in ``errors`` (the plugin makes it a usage error): the run's own files are
written all the same.
"""
from __future__ import annotations

from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping, Optional, Sequence

from pytest_gpuutil.gates.regression import Comparison, FailExpr
from pytest_gpuutil.history.noise import (
    HistoryComparison,
    compare_with_history,
    not_gated_text,
    too_few_text,
    within_noise_text,
)
from pytest_gpuutil.history.provenance import commit_and_branch
from pytest_gpuutil.history.series import TREND_RUNS, Trend, earlier_records, trends
from pytest_gpuutil.history.store import HistoryError, open_history
from pytest_gpuutil.options import Settings
from pytest_gpuutil.records import TestRecord
from pytest_gpuutil.report.terminal import display_path
from pytest_gpuutil.rundoc.document import RunDoc, machine_id

#: ``--gpu-util-compare history``: the run history (else a file with one of HISTORY_SUFFIXES)
COMPARE_HISTORY = "history"
HISTORY_SUFFIXES = (".sqlite", ".sqlite3", ".db")
DEFAULT_NAME = "history.sqlite"


def names_history(spec: Optional[str]) -> bool:
    """True when a ``--gpu-util-compare`` value means the run history rather than a baseline."""
    return spec is not None and (spec == COMPARE_HISTORY or spec.lower().endswith(HISTORY_SUFFIXES))


class HistoryLink:
    """What the session does with the run history; ``errors`` holds what could not be done."""

    def __init__(self, settings: Settings, output_dir: Path, invocation_dir: Path):
        self.compares = names_history(settings.compare)
        self.appends = settings.history is not None
        self.last = settings.history_runs
        self.write_path = invocation_dir / settings.history if settings.history else output_dir / DEFAULT_NAME
        spec = settings.compare or ""
        self.read_path = invocation_dir / spec if self.compares and spec != COMPARE_HISTORY else self.write_path
        self.errors: list[str] = []
        self._failed: set[Path] = set()
        #: what the comparison found (None until compared, or without earlier runs)
        self.result: Optional[HistoryComparison] = None

    @property
    def used(self) -> bool:
        return self.compares or self.appends

    def _error(self, option: str, exc: HistoryError) -> None:
        """One line per history file that failed (the first option to meet it names it)."""
        if exc.path not in self._failed:
            self._failed.add(exc.path)
            self.errors.append(f"{option}: {exc}")

    def compare(self, records: Sequence[TestRecord], info: Mapping[str, Any], exprs: Sequence[FailExpr]
                ) -> tuple[Optional[RunDoc], Optional[Comparison], list[str], list[str]]:
        """(the baseline of medians, the comparison, warnings, notes); no baseline when no test has
        ``MIN_RUNS`` earlier runs on this machine id (or the history is missing or unreadable)."""
        machine = machine_id(info)
        if not self.read_path.exists():
            return None, None, [f"no run history yet at {display_path(self.read_path)}: not compared"], []
        try:
            with open_history(self.read_path) as history:
                earlier = earlier_records(history, records, lambda r: machine, self.last)
        except HistoryError as exc:
            self._error("--gpu-util-compare", exc)
            return None, None, [], []
        result = compare_with_history(earlier, records, exprs)
        self.result = result
        if not result.medians:
            return None, None, [not_gated_text(display_path(self.read_path), earlier, machine)], []
        warnings = [text for text in (too_few_text(result, machine),) if text]
        notes = [text for text in (within_noise_text(result),) if text]
        baseline = RunDoc(path=self.read_path, machine_info=MappingProxyType(dict(info)), records=result.medians)
        return baseline, result.comparison, warnings, notes

    def label(self, info: Mapping[str, Any]) -> str:
        """What the summary and the page call the comparison's baseline."""
        return (f"history {display_path(self.read_path)} (median of each test's last {self.last} runs on "
                f"{machine_id(info)})")

    def trends(self, records: Sequence[TestRecord], info: Mapping[str, Any], exprs: Sequence[FailExpr],
               comparison: Optional[Comparison] = None) -> Optional[dict[str, Trend]]:
        """Each test's trend line over its last runs and this one, of the metric that regressed if one did
        (None: no history to draw from)."""
        path = self.read_path if self.compares else self.write_path
        if path in self._failed:
            return None
        if not path.exists():
            return {} if self.appends else None
        machine = machine_id(info)
        try:
            with open_history(path) as history:
                earlier = earlier_records(history, records, lambda r: machine, TREND_RUNS - 1)
        except HistoryError as exc:
            self._error("--gpu-util-compare" if self.compares else "--gpu-util-history", exc)
            return None
        regressed = {r.test: r.metric for r in reversed(comparison.regressions)} if comparison else {}
        return trends(records, earlier, [e.metric for e in exprs], regressed)

    def append(self, records: Sequence[TestRecord], info: Mapping[str, Any], created: str,
               cwd: Optional[str] = None) -> Optional[Path]:
        """Add the run to the history (made when missing); its path, or None when it could not be."""
        if self.write_path in self._failed:
            return None  # said already
        commit, branch = commit_and_branch(info, cwd=cwd)
        try:
            with open_history(self.write_path, create=True) as history:
                history.append(info, records, created, commit, branch)
        except HistoryError as exc:
            self._error("--gpu-util-history", exc)
            return None
        return self.write_path
