"""What the controller (or a plain run) does with a payload: keep the record, write the metric rows.

Payloads come on each test's teardown report from an xdist worker, or at a worker's end for the
tests its run left pending; in a plain run the records come straight from
:mod:`pytest_gpuutil.session.measuring` (``take``), with no JSON round trip. Each
batch also says how its process measured (shown in the summary, totalled in gpu_util.json).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from pytest_gpuutil.records import TestRecord
from pytest_gpuutil.report.timelines import TimelineStore, record_scores
from pytest_gpuutil.report.metric_tables import MetricRow, MetricTableError, MetricTableRegistry
from pytest_gpuutil.report.terminal import display_path


class Receiver:
    """The records of the run so far, and what came with them."""

    def __init__(self, registry: MetricTableRegistry, output_dir: Path, usage_errors: list[str],
                 timelines: Optional[int] = 0):
        self._registry = registry
        self._output_dir = output_dir
        #: problems that end the run with a usage error (shared with the run's state)
        self._usage_errors = usage_errors
        self.records: list[TestRecord] = []
        #: per process (worker id or "main"): event source, its start-up, how tests were measured
        self.processes: dict[str, dict[str, Any]] = {}
        self.metric_rows_written = 0
        self.thresholds_not_checked: list[str] = []
        self.threshold_failures: list[str] = []
        #: the timelines of the worst tests so far (at most the number asked for, see report/timelines.py)
        self.timelines = TimelineStore(timelines)
        #: where each flush's records are appended as the run goes (run_files.RunSpool), when it is
        self.spool: Optional[Any] = None
        self._unspooled = 0

    def receive_batch(self, batch: dict[str, Any]) -> None:
        """Payloads that came on one report (or at a worker's end), with what measured them."""
        process = batch.get("process")
        if process:
            self.note_process(process)
        for payload in batch.get("payloads", ()):
            self.receive(payload)
        self.spool_pending()

    def spool_pending(self) -> None:
        """Append the records taken since the last call to the run's spool (once a flush, not once a test)."""
        if self._unspooled and self.spool is not None:
            self.spool.append(self.records[len(self.records) - self._unspooled:])
        self._unspooled = 0

    def note_process(self, process: dict[str, Any]) -> None:
        """How one process (a worker, or "main") measured: the latest word from it wins."""
        self.processes[process.get("worker") or "main"] = process

    def receive(self, payload: dict[str, Any]) -> None:
        """Take one test's payload (from an xdist worker): keep its record, write its metric rows now."""
        self.take(TestRecord.from_dict(payload["record"]), [MetricRow.from_dict(r) for r in payload.get("metric_rows", ())],
                  payload.get("tables", {}), payload.get("thresholds", ""), payload.get("timeline"))

    def take_finished(self, finished: Sequence[Any]) -> None:
        """This process's own finished tests (measuring.FinishedTest), as they are (no JSON round trip)."""
        for test in finished:
            self.take(test.record, test.results.metric_rows, test.results.tables, test.thresholds, test.timeline)
        self.spool_pending()

    def take(self, record: TestRecord, rows: Sequence[MetricRow], tables: Mapping[str, Sequence[str]],
             thresholds: str, timeline: Optional[Mapping[str, Any]] = None) -> None:
        """Keep one test's record (built in this process, or read from a payload) and its timeline
        while it is among the worst; write its metric rows now."""
        self.records.append(record)
        self._unspooled += 1
        if timeline is not None and isinstance(timeline, Mapping):  # (an ABC's check: only where there is one)
            self.timelines.offer(record.test, record_scores(record), timeline)
        if tables:
            for name, columns in tables.items():
                try:
                    self._registry.register(name, columns)
                except MetricTableError as exc:
                    self._usage_errors.append(f"{record.test}: {exc}")
        if rows:
            try:
                self._registry.write_rows(rows)
                self.metric_rows_written += len(rows)
            except (OSError, MetricTableError) as exc:  # a table that cannot be written must not crash the run
                message = f"could not write metric table rows to {display_path(self._output_dir)}: {exc}"
                if message not in self._usage_errors:
                    self._usage_errors.append(message)
        if thresholds == "not_checked":
            self.thresholds_not_checked.append(record.test)
        elif thresholds == "failed":
            self.threshold_failures.append(record.test)

    def threshold_states(self) -> dict[str, str]:
        """Tests whose thresholds were not checked or failed, by node id (for gpu_util.json)."""
        return {**dict.fromkeys(self.thresholds_not_checked, "not_checked"),
                **dict.fromkeys(self.threshold_failures, "failed")}
