"""The one object that holds a pytest run's GPU-utilization state (created in pytest_configure).

On an xdist worker it measures tests and packs each test's results into a payload that travels on
the test's teardown report (:mod:`~pytest_gpuutil.session.measuring`); on the controller (or a
plain run) it receives payloads (:mod:`~pytest_gpuutil.session.receiving`), compares with a
baseline (:mod:`~pytest_gpuutil.session.comparison`) and at the end writes the run's files
(:mod:`~pytest_gpuutil.session.run_files`); the plugin prints the summary from it. Nothing here
imports torch until a test is profiled or a fixture is used.
"""
from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

from pytest_gpuutil.analysis.classify import KernelClassifier, parse_rules
from pytest_gpuutil.gates.regression import DEFAULT_FAIL_EXPRS, Comparison, parse_fail_exprs
from pytest_gpuutil.gates.thresholds import Thresholds, parse_ini
from pytest_gpuutil.machine.identity import machine_info, visible_gpu_ids
from pytest_gpuutil.measurement import Measurement, TestMemory, TestProfile
from pytest_gpuutil.options import Settings
from pytest_gpuutil.records import TestRecord, measured_records
from pytest_gpuutil.report.metric_tables import MetricTableError, MetricTableRegistry
from pytest_gpuutil.report.terminal import display_path
from pytest_gpuutil.rundoc import totals as run_totals
from pytest_gpuutil.rundoc.document import RunDoc, now_utc
from pytest_gpuutil.session import SetupError, run_files
from pytest_gpuutil.session.comparison import choose_baseline, compare_with_baseline, explanations_for
from pytest_gpuutil.session.history_link import HistoryLink
from pytest_gpuutil.session.measuring import Measuring
from pytest_gpuutil.session.memory_report import memory_report
from pytest_gpuutil.session.receiving import Receiver
from pytest_gpuutil.session.record_builder import NO_CUDA_NOTE, RecordInputs, build_record, build_records

if TYPE_CHECKING:
    from pytest_gpuutil.per_test import TestResults


class GpuUtilSession:
    """State of one pytest run for pytest-gpuutil."""

    def __init__(self, settings: Settings, invocation_dir: Path, worker_id: str = "", worker_gpus: Optional[list] = None):
        self.settings = settings
        self.worker_id = worker_id
        self.is_worker = bool(worker_id)
        directory = Path(settings.output_dir)
        self.output_dir = directory if directory.is_absolute() else invocation_dir / directory
        self.invocation_dir = invocation_dir
        try:
            self.classifier = KernelClassifier(parse_rules("\n".join(settings.kernel_rules), "gpu_util_kernel_rules"))
            self.default_thresholds: Optional[Thresholds] = (
                parse_ini(settings.thresholds, "gpu_util_thresholds") if settings.thresholds else None
            )
            self.fail_exprs = parse_fail_exprs(settings.fail or DEFAULT_FAIL_EXPRS)
            self.registry = MetricTableRegistry(self.output_dir, enabled=settings.tables)
        except (ValueError, MetricTableError) as exc:
            raise SetupError(str(exc)) from None
        #: problems that end the run with a usage error, and trace files that could not be written
        self.usage_errors: list[str] = []
        self.trace_errors: list[str] = []
        #: features that this environment's versions do not give, one line each (the summary shows them)
        self.unavailable: list[str] = []
        measurement = Measurement(self.classifier, keep_events=settings.traces != "none",
                                  cpu_activity=settings.cpu_activity, policy=settings.flush,
                                  use_cupti=settings.source == "cupti", memory=settings.memory,
                                  memory_history=settings.memory_history,
                                  findings=settings.findings, findings_ignore=settings.findings_ignore,
                                  counters=settings.counters, counters_interval_ms=settings.counters_interval_ms,
                                  children=settings.children,
                                  timelines=settings.timelines if settings.html is not None else 0,
                                  timeline_gap_ms=settings.timeline_gap_ms)
        #: this process's tests (a plain run or a worker): measured, then sent on as payloads
        self.measuring = Measuring(measurement, self.make_records, worker_id=worker_id, traces=settings.traces,
                                   output_dir=self.output_dir, trace_errors=self.trace_errors)
        #: the payloads received (controller or plain run)
        self.receiver = Receiver(self.registry, self.output_dir, self.usage_errors,
                                 timelines=settings.timelines if settings.html is not None else 0)
        if settings.enabled and not self.is_worker:
            self.receiver.spool = run_files.RunSpool(self.output_dir, lambda: self.machine)
        self.test_seconds = 0.0
        #: seconds the session's end took here: the last flush, writing gpu_util.csv/json
        self.finish_s = 0.0
        #: the measurement cost (ms) as gpu_util.json and the page give it: written before the summary's own time
        self.written_measure_ms: Optional[float] = None
        #: gpu_util.json's findings_summary once the run's files are written (None: no findings looked
        #: for), for the terminal's summary; ``...`` until then (the summary then makes its own)
        self.findings_summary: Any = ...
        #: what is read of every record (the totals' per-record part, the per-GPU table, the measured
        #: records), by name, with the records' list and length it was read from (see _of_records)
        self._read_of_records: dict[str, tuple[list[TestRecord], int, Any]] = {}
        self.machine: Optional[dict[str, Any]] = None
        self.baseline: Optional[RunDoc] = None
        self.baseline_messages: list[str] = []
        self.comparison: Optional[Comparison] = None
        #: why each flagged test regressed (test -> gates.explain.Explanation)
        self.explanations: dict[str, Any] = {}
        self.gate_failed = False
        #: the run history (--gpu-util-history, --gpu-util-compare history)
        self.history = HistoryLink(settings, self.output_dir, invocation_dir)
        #: what the summary calls the baseline when it is not a file ("" for a baseline file)
        self.compare_label = ""
        #: lines the summary prints after the gate's verdict
        self.gate_notes: list[str] = []
        self.written: list[Path] = []
        self._cuda: Optional[bool] = None
        self._torch: Any = None
        self._machine_saw_torch = False
        self._machine_reader: Optional[threading.Thread] = None
        #: physical GPU ids visible to this process (CUDA_VISIBLE_DEVICES order)
        self.physical_gpus: Optional[list[str]] = worker_gpus

    # -- what the summary reads of the received payloads (report.terminal.RunState) ------------------
    @property
    def records(self) -> list[TestRecord]:
        return self.receiver.records

    @property
    def processes(self) -> dict[str, dict[str, Any]]:
        return self.receiver.processes

    @property
    def metric_rows_written(self) -> int:
        return self.receiver.metric_rows_written

    @property
    def thresholds_not_checked(self) -> list[str]:
        return self.receiver.thresholds_not_checked

    # -- environment -------------------------------------------------------------------------
    def torch(self) -> Any:
        if self._torch is None:
            import torch

            self._torch = torch
        return self._torch

    def cuda(self) -> bool:
        """Whether CUDA is usable here (imports torch the first time).

        Asked without initialising CUDA in this process (``torch.cuda.device_count`` asks NVML;
        ``is_available`` would call ``cuInit``), so that a test's forked child can still use CUDA.
        """
        if self._cuda is None:
            cuda = self.torch().cuda
            self._cuda = bool(cuda.is_initialized() or cuda.device_count() > 0)
        return self._cuda

    def physical_id(self, device: str) -> str:
        """The physical GPU behind a device index of this process (CUDA_VISIBLE_DEVICES maps them)."""
        if self.physical_gpus is None:
            if "CUDA_VISIBLE_DEVICES" not in os.environ:
                return device  # device i is GPU i: no need to count GPUs with nvidia-smi
            self.physical_gpus = visible_gpu_ids()
        if device.isdigit() and int(device) < len(self.physical_gpus):
            return self.physical_gpus[int(device)]
        return device

    def machine_info(self) -> dict[str, Any]:
        """Read once, and again once torch is loaded here (then CUDA can be asked directly)."""
        if self._machine_reader is not None:
            self._machine_reader.join()
            self._machine_reader = None
        if self.machine is None or (self._torch is not None and not self._machine_saw_torch):
            self.machine = machine_info(cwd=str(self.invocation_dir), torch_module=self._torch)
            self._machine_saw_torch = self._torch is not None
        return self.machine

    # -- session start (controller) ------------------------------------------------------------
    def start(self) -> None:
        """Purge old metric tables (and an earlier run's spool) and load the baseline to compare with,
        before any test runs."""
        if self.receiver.spool is not None:
            self.receiver.spool.start()
        try:
            self.registry.purge()
        except OSError as exc:  # an undeletable old table must not crash every pytest run
            self.usage_errors.append(f"could not delete old metric tables in {display_path(self.output_dir)}: {exc}")
        if self.settings.compare is None or self.history.compares:  # the history is read at the end
            return
        self.baseline, why_not = choose_baseline(self.settings.compare, self.output_dir, self.machine_info(),
                                                 self.settings.compare_any_machine)
        if why_not:
            self.baseline_messages.append(why_not)

    # -- measuring (worker or plain run) -------------------------------------------------------
    def prepare_measurement(self, source: Any, counter_source: Any = None) -> None:
        """Before the first test: choose how tests are measured and start the capture (and the counters)."""
        if self.settings.enabled:
            self.measuring.measurement.prepare(self.torch(), self.cuda(), source, counter_source)
            _import_per_test_modules()
            self._read_machine_in_background()

    def _read_machine_in_background(self) -> None:
        """What the end of the session needs (nvidia-smi, git, the JSON encoder), read while tests run."""
        torch = self._torch

        def read() -> None:
            try:
                import msgspec  # noqa: F401 - imported here so the files are written without waiting for it

                self.machine = machine_info(cwd=str(self.invocation_dir), torch_module=torch)
                self._machine_saw_torch = True
            except Exception:  # noqa: BLE001 - machine_info() reads again at the end
                pass

        self._machine_reader = threading.Thread(target=read, name="pytest-gpuutil machine info", daemon=True)
        self._machine_reader.start()

    def make_record(self, nodeid: str, outcome: str, profile: Optional[TestProfile], results: TestResults,
                    memory: Optional[TestMemory] = None) -> TestRecord:
        """The test's record (see :func:`~pytest_gpuutil.session.record_builder.build_record`)."""
        unmeasured = NO_CUDA_NOTE if self.settings.enabled and self._cuda is False else ""
        return build_record(nodeid, outcome, profile, results, memory, worker=self.worker_id,
                            findings_ignore=self.settings.findings_ignore,
                            findings_floor=self.settings.findings_floor,
                            physical_id=self.physical_id, unmeasured_note=unmeasured)

    def make_records(self, tests: Sequence[RecordInputs]) -> list[TestRecord]:
        """The records of a flush's tests (see :func:`~pytest_gpuutil.session.record_builder.build_records`)."""
        unmeasured = NO_CUDA_NOTE if self.settings.enabled and self._cuda is False else ""
        return build_records(tests, worker=self.worker_id, findings_ignore=self.settings.findings_ignore,
                             findings_floor=self.settings.findings_floor, physical_id=self.physical_id,
                             unmeasured_note=unmeasured)

    def memory_report(self, nodeid: str) -> str:
        """For a test over a memory limit or out of memory: the largest allocations live at its peak,
        with their stacks, and where its snapshot was saved (needs --gpu-util-memory-history)."""
        measurement = self.measuring.measurement
        return memory_report(nodeid, measurement.memory.get(nodeid), measurement.meter, self.output_dir)

    # -- the end (controller or plain run) ----------------------------------------------------
    def has_output(self) -> bool:
        return self.settings.enabled or any(r.kernel_bench or r.gpu_trace for r in self.records)

    def compare(self) -> None:
        """Compare with the baseline; sets gate_failed on a regression (or strict with none)."""
        if self.settings.compare is None:
            return
        if self.history.compares:
            self._compare_with_history()
            return
        self.comparison, self.gate_failed = compare_with_baseline(self.baseline, self.records, self.fail_exprs,
                                                                  self.settings.compare_strict)
        if self.baseline is not None and self.comparison is not None:
            self.explanations = explanations_for(self.baseline.records, self.records, self.comparison,
                                                 self.classifier)

    def _compare_with_history(self) -> None:
        """Each test against its last runs in the history (see history.noise); errors become usage errors."""
        info = self.machine_info()
        self.baseline, self.comparison, warnings, self.gate_notes = self.history.compare(self.records, info,
                                                                                         self.fail_exprs)
        self.baseline_messages.extend(warnings)
        self.compare_label = self.history.label(info)
        self.gate_failed = self.comparison.failed if self.comparison is not None else self.settings.compare_strict
        if self.comparison is not None and self.history.result is not None:
            self.explanations = explanations_for(self.history.result.latest, self.records, self.comparison,
                                                 self.classifier)
        self._history_errors()

    def _history_errors(self) -> None:
        self.usage_errors.extend(e for e in self.history.errors if e not in self.usage_errors)

    def check_tables(self) -> None:
        try:
            self.registry.validate_enabled()
        except MetricTableError as exc:
            self.usage_errors.append(f"--gpu-util-tables: {exc}")

    def finish(self) -> None:
        """Write gpu_util.csv/json, save a baseline if asked, write the HTML report if asked (after comparing)."""
        if not self.has_output():
            return
        created, info = now_utc(), self.machine_info()
        trends = (self.history.trends(self.records, info, self.fail_exprs, self.comparison)
                  if self.settings.html is not None and self.history.used else None)
        totals = self.totals()
        self.written_measure_ms = totals.get("measure_ms")
        try:
            self.findings_summary = run_files.write_run(
                self.records, info, gpus=self.gpu_table(), totals=totals, thresholds=self.receiver.threshold_states(),
                settings=self.settings, output_dir=self.output_dir, invocation_dir=self.invocation_dir,
                baseline=self.baseline, fail_exprs=self.fail_exprs, comparison=self.comparison, written=self.written,
                usage_errors=self.usage_errors, created=created, baseline_label=self.compare_label or None,
                trends=trends, timelines=self.receiver.timelines.timelines, explanations=self.explanations,
                as_dict=self.receiver.spool.as_dict if self.receiver.spool is not None else None,
                as_json=self.receiver.spool.as_json if self.receiver.spool is not None else None)
            if self.receiver.spool is not None:
                self.receiver.spool.remove()  # the whole run is in gpu_util.json now
        finally:  # the run joins the history even when its files could not be written
            if self.history.appends:
                path = self.history.append(self.records, info, created, cwd=str(self.invocation_dir))
                if path is not None:
                    self.written.append(path)
            self._history_errors()

    # -- aggregates ------------------------------------------------------------------------------
    def no_cuda(self) -> bool:
        """True when tests ran but none could be measured for lack of CUDA (here or on workers)."""
        return not self.measured() and bool(self.records) and (
            self._cuda is False
            or any(r.note == NO_CUDA_NOTE for r in self.records)
            or not self.machine_info().get("gpu_count")  # e.g. every test skipped before its call
        )

    def measured(self) -> list[TestRecord]:
        """The records with GPU figures (read once for the summary, while the records stay the same)."""
        return self._of_records("measured", measured_records)

    def totals(self) -> dict[str, Any]:
        figures = self._of_records("record_figures", run_totals.record_figures)
        processes = self.processes
        if not self.is_worker and "main" in processes:  # this process's own time up to now
            processes = {**processes, "main": {**processes["main"], "own_s": self.measuring.own_now()}}
        return run_totals.totals(self.records, processes, self.test_seconds, self.finish_s, figures)

    def gpu_table(self) -> list[dict[str, Any]]:
        """Busy time per physical GPU and which workers used it (read once for the files and the summary)."""
        return self._of_records("gpu_table", run_totals.gpu_table)

    def _of_records(self, name: str, read: Callable[[list[TestRecord]], Any]) -> Any:
        """``read(self.records)``, kept while the records stay the same list of the same length (the
        run's records no longer change once the summary asks, and it asks several times)."""
        records = self.records
        kept = self._read_of_records.get(name)
        if kept is None or kept[0] is not records or kept[1] != len(records):
            kept = self._read_of_records[name] = (records, len(records), read(records))
        return kept[2]


def worker_gpu_assignment(worker_id: str, gpus: list[str]) -> Optional[str]:
    """The GPU for xdist worker ``gwN``: ``gpus[N mod len(gpus)]``."""
    if not gpus or not worker_id.startswith("gw") or not worker_id[2:].isdigit():
        return None
    return gpus[int(worker_id[2:]) % len(gpus)]


def _import_per_test_modules() -> None:
    """The modules every test's hooks import, imported before the machine-info thread starts: the
    first test's first import waited for that thread's imports and subprocesses (the import lock;
    py-spy on an H200: 49 samples at 400 Hz in one run of 300 small tests)."""
    import pytest_gpuutil.gates.thresholds  # noqa: F401
    import pytest_gpuutil.per_test  # noqa: F401
    import pytest_gpuutil.report.ci  # noqa: F401
    import pytest_gpuutil.session.measuring  # noqa: F401
