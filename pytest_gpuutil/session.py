"""The one object that holds a pytest run's GPU-utilization state (created in pytest_configure).

On an xdist worker it profiles tests and packs each test's results into a JSON-able payload that
travels on the test's teardown report; on the controller (or a plain run) it receives payloads,
writes metric-table rows as they arrive, and at the end writes gpu_util.csv/json, compares with a
baseline, saves one, and prints the summary. Nothing here imports torch until a test is profiled
or a fixture is used.
"""
from __future__ import annotations

import dataclasses
import datetime as _dt
import os
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

from pytest_gpuutil.analysis.classify import (
    ATTENTION,
    COMMUNICATION,
    MEMCPY,
    KernelClassifier,
    parse_rules,
)
from pytest_gpuutil.capture.memory import MIB, format_size
from pytest_gpuutil.gates.baseline import (
    BaselineError,
    RunDoc,
    free_autosave_name,
    load_run_doc,
    machine_id,
    resolve_baseline,
    save_baseline,
)
from pytest_gpuutil.gates.regression import (
    DEFAULT_FAIL_EXPRS,
    Comparison,
    compare_records,
    parse_fail_exprs,
)
from pytest_gpuutil.gates.thresholds import Thresholds, parse_ini
from pytest_gpuutil.machine import machine_info, visible_gpu_ids
from pytest_gpuutil.measurement import CONTINUOUS, Measurement, TestMemory, TestProfile
from pytest_gpuutil.options import COMPARE_LATEST, Settings
from pytest_gpuutil.records import TestRecord
from pytest_gpuutil.report.files import run_document, write_run_files
from pytest_gpuutil.report.metric_tables import (
    MetricRow,
    MetricTableError,
    MetricTableRegistry,
)

if TYPE_CHECKING:
    from pytest_gpuutil.per_test import TestResults

NO_CUDA_NOTE = "no CUDA device"


class SetupError(Exception):
    """A bad option, ini value or baseline; the plugin turns it into pytest.UsageError."""


@dataclass
class PendingTest:
    """A finished test whose record waits for its profile (a continuous capture not yet flushed)."""

    __test__ = False

    item: Any
    nodeid: str
    outcome: str
    results: TestResults
    thresholds: str


def safe_name(nodeid: str) -> str:
    """A file name for a test id."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid).strip("_")[:180]


def _join(*notes: str) -> str:
    return "; ".join(n for n in notes if n)


def outcome_of(phases: dict[str, Any]) -> str:
    """One word for a test from its setup/call/teardown reports."""
    setup, call, teardown = phases.get("setup"), phases.get("call"), phases.get("teardown")
    if setup is not None and setup.failed:
        return "error"
    if setup is not None and setup.skipped:
        return "skipped"
    if call is not None:
        if hasattr(call, "wasxfail"):
            return "xfailed" if call.skipped else "xpassed"
        if call.failed:
            return "failed"
        if call.skipped:
            return "skipped"
    if teardown is not None and teardown.failed:
        return "error"
    return "passed"


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
        self.records: list[TestRecord] = []
        self.measurement = Measurement(self.classifier, keep_events=settings.traces != "none",
                                       cpu_activity=settings.cpu_activity, policy=settings.flush,
                                       use_cupti=settings.source == "cupti", memory_history=settings.memory_history)
        #: profiles known and not yet in a record, by node id
        self.profiles: dict[str, TestProfile] = {}
        #: tests whose call phase had a window in the continuous capture, until their record is built
        self.windowed: set[str] = set()
        self.pending: list[PendingTest] = []
        self._flushed = False
        #: per process (worker id or "main"): event source, its start-up, how tests were measured
        self.processes: dict[str, dict[str, Any]] = {}
        self.test_seconds = 0.0
        #: seconds the session's end took here: the last flush, writing gpu_util.csv/json
        self.finish_s = 0.0
        self.trace_errors: list[str] = []
        self.metric_rows_written = 0
        self.thresholds_not_checked: list[str] = []
        self.threshold_failures: list[str] = []
        self.machine: Optional[dict[str, Any]] = None
        self.baseline: Optional[RunDoc] = None
        self.baseline_messages: list[str] = []
        self.comparison: Optional[Comparison] = None
        self.gate_failed = False
        self.usage_errors: list[str] = []
        self.written: list[Path] = []
        self._cuda: Optional[bool] = None
        self._torch: Any = None
        self._machine_saw_torch = False
        self._machine_reader: Optional[threading.Thread] = None
        #: physical GPU ids visible to this process (CUDA_VISIBLE_DEVICES order)
        self.physical_gpus: Optional[list[str]] = worker_gpus

    # -- environment -------------------------------------------------------------------------
    def torch(self) -> Any:
        if self._torch is None:
            import torch

            self._torch = torch
        return self._torch

    def cuda(self) -> bool:
        """Whether CUDA is usable here (imports torch the first time)."""
        if self._cuda is None:
            self._cuda = bool(self.torch().cuda.is_available())
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
        """Purge old metric tables and load the baseline to compare with, before any test runs."""
        try:
            self.registry.purge()
        except OSError as exc:  # an undeletable old table must not crash every pytest run
            self.usage_errors.append(f"could not delete old metric tables in {self.output_dir}: {exc}")
        spec = self.settings.compare
        if spec is None:
            return
        info = self.machine_info()
        try:
            path = resolve_baseline(None if spec == COMPARE_LATEST else spec, self.output_dir, info)
        except BaselineError as exc:
            raise SetupError(f"--gpu-util-compare: {exc}") from None
        if path is None:
            self.baseline_messages.append(
                f"no baseline yet for machine {machine_id(info)} under {self.output_dir / 'baselines'}"
            )
            return
        try:
            doc = load_run_doc(path)
        except BaselineError as exc:
            raise SetupError(f"--gpu-util-compare: corrupt baseline {exc}") from None
        if doc.machine_id != machine_id(info) and not self.settings.compare_any_machine:
            self.baseline_messages.append(
                f"baseline {path} is from machine {doc.machine_id}, this is {machine_id(info)}: not compared "
                "(--gpu-util-compare-any-machine compares anyway)"
            )
            return
        self.baseline = doc

    # -- per test (worker or plain run) --------------------------------------------------------
    def make_record(self, nodeid: str, outcome: str, profile: Optional[TestProfile], results: TestResults,
                    memory: Optional[TestMemory] = None) -> TestRecord:
        common = dict(
            test=nodeid,
            outcome=outcome,
            worker=self.worker_id,
            kernel_bench=dict(results.kernel_bench),
            gpu_trace=dict(results.gpu_trace),
            **self._memory_fields(memory),
        )
        memory_note = self._memory_note(memory)
        if profile is None:
            note = NO_CUDA_NOTE if self.settings.enabled and self._cuda is False else ""
            return TestRecord(**common, note=_join(note, memory_note))
        stats = profile.stats
        measure_ms = None if profile.measure_ms is None else profile.measure_ms + (memory.cost_ms if memory else 0.0)
        if stats is None:
            return TestRecord(**common, wall_ms=profile.wall_ms, measure_ms=measure_ms,
                              note=_join(profile.note or NO_CUDA_NOTE, memory_note))
        return TestRecord(
            **common,
            wall_ms=profile.wall_ms,
            gpu_busy_ms=stats.busy_us / 1000,
            busy_pct=stats.busy_pct,
            mm_conv_pct=stats.mm_conv_pct,
            attention_pct=stats.category_pct_of_window(ATTENTION),
            communication_pct=stats.category_pct_of_window(COMMUNICATION),
            memcpy_pct=stats.category_pct_of_window(MEMCPY),
            kernel_count=stats.kernel_count,
            measure_ms=measure_ms,
            top_kernel=stats.top_kernel,
            top_kernels=tuple(
                {"name": k.name, "category": k.category, "count": k.count, "total_us": k.total_us,
                 "pct_of_window": k.pct_of_window}
                for k in stats.top_kernels
            ),
            idle_gaps=tuple({"device": g.device, "start_us": g.start_us, "dur_us": g.dur_us} for g in stats.idle_gaps),
            devices=tuple(device for device, _ in stats.devices),
            gpu_busy_us_by_device={self.physical_id(device): busy_us for device, busy_us in stats.devices},
            categories={
                c.name: {"time_us": c.time_us, "share_of_busy": c.share_of_busy, "pct_of_window": c.pct_of_window,
                         "count": c.count}
                for c in stats.categories
            },
            note=_join(profile.note, memory_note),
        )

    def _memory_fields(self, memory: Optional[TestMemory]) -> dict[str, Any]:
        """The record's memory fields: the largest peaks over devices, leaks and errors summed."""
        if memory is None or not memory.devices:
            return {}
        devices = memory.devices
        return {
            "peak_alloc_mb": max(d.peak_alloc for d in devices) / MIB,
            "peak_reserved_mb": max(d.peak_reserved for d in devices) / MIB,
            "leaked_mb": sum(d.leaked for d in devices) / MIB,
            "alloc_retries": sum(d.alloc_retries for d in devices),
            "ooms": sum(d.ooms for d in devices),
            "memory_by_device": {
                self.physical_id(d.device): {
                    "peak_alloc_mb": d.peak_alloc / MIB, "peak_reserved_mb": d.peak_reserved / MIB,
                    "leaked_mb": d.leaked / MIB, "alloc_retries": d.alloc_retries, "ooms": d.ooms,
                    "allocated_end_mb": d.allocated_end / MIB, "reserved_end_mb": d.reserved_end / MIB,
                }
                for d in devices
            },
        }

    @staticmethod
    def _memory_note(memory: Optional[TestMemory]) -> str:
        """What was live when a call that ran out of GPU memory ended."""
        if memory is None or not any(d.ooms for d in memory.devices):
            return ""
        return "; ".join(
            f"out of GPU memory on device {d.device}: {format_size(d.allocated_end)} allocated, "
            f"{format_size(d.reserved_end)} reserved when the call ended (peak {format_size(d.peak_alloc)})"
            for d in memory.devices if d.ooms
        )

    def memory_report(self, nodeid: str) -> str:
        """For a test over a memory limit or out of memory: the largest allocations live at its peak,
        with their stacks, and where its snapshot was saved (needs --gpu-util-memory-history)."""
        memory = self.measurement.memory.get(nodeid)
        meter = self.measurement.meter
        if memory is None or meter is None:
            return ""
        if not meter.history:
            return "(run with --gpu-util-memory-history for the allocations at the peak and a memory snapshot)"
        lines = []
        for device in memory.devices:
            try:
                allocations, failed = meter.where_memory_went(memory.start, int(device.device),
                                                              with_failed=bool(device.ooms))
            except Exception as exc:  # noqa: BLE001 - the failure report must still come out
                lines.append(f"device {device.device}: could not read the memory history: {exc}")
                continue
            for allocation in failed:
                where = allocation.frames[0] if allocation.frames else "(no Python stack)"
                lines.append(f"out of memory on device {device.device} asking for {format_size(allocation.size)} at {where}")
                lines.extend(f"              {frame}" for frame in allocation.frames[1:4])
            if allocations:
                lines.append(f"largest allocations live at the peak on device {device.device}:")
            for allocation in allocations:
                where = allocation.frames[0] if allocation.frames else "(no Python stack)"
                lines.append(f"  {format_size(allocation.size):>10}  {where}")
                lines.extend(f"              {frame}" for frame in allocation.frames[1:4])
        path = self.output_dir / "memory" / f"{safe_name(nodeid)}.pickle"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            meter.dump_snapshot(str(path))
            lines.append(f"memory snapshot: {path} (open it at https://pytorch.org/memory_viz)")
        except Exception as exc:  # noqa: BLE001
            lines.append(f"could not save the memory snapshot {path}: {exc}")
        return "\n".join(lines)

    # -- measuring (worker or plain run) -----------------------------------------------------------
    def prepare_measurement(self, source: Any) -> None:
        """Before the first test: choose how tests are measured and start the capture."""
        if self.settings.enabled:
            self.measurement.prepare(self.torch(), self.cuda(), source)
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

    def begin_test(self, nodeid: str, results: TestResults) -> None:
        if self.measurement.mode == CONTINUOUS:
            self.windowed.add(nodeid)
        profile = self.measurement.begin(nodeid, results)
        if profile is not None:
            self.windowed.discard(nodeid)
            self.profiles[nodeid] = profile

    def end_test(self, nodeid: str, results: TestResults) -> None:
        profile = self.measurement.end(nodeid, results)
        if profile is not None:
            self.profiles[nodeid] = profile

    def flush(self) -> None:
        """Turn the capture so far into profiles."""
        self.profiles.update(self.measurement.flush())
        self._flushed = True

    def flush_due(self) -> Optional[str]:
        return self.measurement.flush_due()

    def test_finished(self, pending: PendingTest) -> None:
        self.pending.append(pending)

    def _ready(self, test: PendingTest) -> bool:
        return test.nodeid not in self.windowed or test.nodeid in self.profiles

    def ready_payloads(self, finalize: Callable[[Any, TestRecord], TestRecord]) -> list[dict[str, Any]]:
        """Payloads of the finished tests whose profiles are known, in the order they finished.

        ``finalize(item, record)`` applies the pytest_gpuutil_record hook. Each test leaves the
        pending list once, so each record travels once. Between flushes only the newest test can
        have become ready, so only it is looked at.
        """
        if self._flushed:
            self._flushed = False
            ready = [t for t in self.pending if self._ready(t)]
            self.pending = [t for t in self.pending if not self._ready(t)]
        elif self.pending and self._ready(self.pending[-1]):
            ready = [self.pending.pop()]
        else:
            return []
        payloads = []
        for test in ready:
            began = time.perf_counter()
            self.windowed.discard(test.nodeid)
            profile = self.profiles.pop(test.nodeid, None)
            memory = self.measurement.memory.pop(test.nodeid, None)
            record = finalize(test.item, self.make_record(test.nodeid, test.outcome, profile, test.results, memory))
            self._write_trace(record, profile)
            if record.measure_ms is not None:
                record = dataclasses.replace(record, measure_ms=record.measure_ms + (time.perf_counter() - began) * 1000)
            payloads.append(self.payload(record, test.results, test.thresholds))
        return payloads

    def close_measurement(self, finalize: Callable[[Any, TestRecord], TestRecord]) -> list[dict[str, Any]]:
        """The session's end: the last profiles, and the payloads of every test still pending."""
        self.profiles.update(self.measurement.close())
        self.windowed.intersection_update(self.profiles)  # a window never closed has no profile: build without
        self._flushed = True
        return self.ready_payloads(finalize)

    def process_info(self) -> dict[str, Any]:
        m = self.measurement
        return {"worker": self.worker_id or "main", "mode": m.mode, "source": m.source_name,
                "startup_s": m.startup_s, "fallback": m.fallback_reason,
                "broken": m.capture.broken if m.capture is not None else ""}

    def _write_trace(self, record: TestRecord, profile: Optional[TestProfile]) -> None:
        mode = self.settings.traces
        if profile is None or mode == "none" or (mode == "failed" and record.outcome not in ("failed", "error")):
            return
        if profile.profiler is None and (profile.events is None or profile.window is None):
            return
        path = self.output_dir / "traces" / f"{safe_name(record.test)}.json.gz"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            if profile.profiler is not None:
                tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp.json.gz")
                profile.profiler.export(str(tmp))
                os.replace(tmp, path)
            else:
                from pytest_gpuutil.traces.writer import write_chrome_trace

                write_chrome_trace(str(path), profile.events, profile.window, label=record.test)
        except Exception as exc:  # noqa: BLE001 - a trace that cannot be written must not fail the test
            self.trace_errors.append(f"could not write trace {path}: {exc}")

    @staticmethod
    def payload(record: TestRecord, results: TestResults, thresholds: str) -> dict[str, Any]:
        """What travels on the teardown report (JSON-able, so xdist can carry it)."""
        return {
            "record": record.to_dict(),
            "metric_rows": [r.to_dict() for r in results.metric_rows],
            "tables": {name: list(cols) for name, cols in results.tables.items()},
            "thresholds": thresholds,
        }

    # -- receiving (controller or plain run) ---------------------------------------------------
    def receive_batch(self, batch: dict[str, Any]) -> None:
        """Payloads that came on one report (or at a worker's end), with what measured them."""
        process = batch.get("process")
        if process:
            self.processes[process.get("worker") or "main"] = process
        for payload in batch.get("payloads", ()):
            self.receive(payload)

    def receive(self, payload: dict[str, Any]) -> None:
        """Take one test's payload: keep its record, write its metric rows now."""
        record = TestRecord.from_dict(payload["record"])
        self.records.append(record)
        for name, columns in payload.get("tables", {}).items():
            try:
                self.registry.register(name, columns)
            except MetricTableError as exc:
                self.usage_errors.append(f"{record.test}: {exc}")
        rows = [MetricRow.from_dict(r) for r in payload.get("metric_rows", ())]
        if rows:
            try:
                self.registry.write_rows(rows)
                self.metric_rows_written += len(rows)
            except (OSError, MetricTableError) as exc:  # a table that cannot be written must not crash the run
                message = f"could not write metric table rows to {self.output_dir}: {exc}"
                if message not in self.usage_errors:
                    self.usage_errors.append(message)
        state = payload.get("thresholds", "")
        if state == "not_checked":
            self.thresholds_not_checked.append(record.test)
        elif state == "failed":
            self.threshold_failures.append(record.test)

    # -- the end (controller or plain run) ----------------------------------------------------
    def has_output(self) -> bool:
        return self.settings.enabled or any(r.kernel_bench or r.gpu_trace for r in self.records)

    def compare(self) -> None:
        """Compare with the baseline; sets gate_failed on a regression (or strict with none)."""
        if self.settings.compare is None:
            return
        if self.baseline is None:
            if self.settings.compare_strict:
                self.gate_failed = True
            return
        self.comparison = compare_records(self.baseline.records, self.records, self.fail_exprs)
        self.gate_failed = self.comparison.failed

    def check_tables(self) -> None:
        try:
            self.registry.validate_enabled()
        except MetricTableError as exc:
            self.usage_errors.append(f"--gpu-util-tables: {exc}")

    def finish(self) -> None:
        """Write gpu_util.csv/json and save a baseline if asked (after comparing)."""
        if not self.has_output():
            return
        records = sorted(self.records, key=lambda r: r.test)
        created = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        thresholds = {**dict.fromkeys(self.thresholds_not_checked, "not_checked"), **dict.fromkeys(self.threshold_failures, "failed")}
        doc = run_document(records, self.machine_info(), created, gpus=self.gpu_table(), totals=self.totals(),
                           thresholds=thresholds)
        self.written.extend(write_run_files(self.output_dir, records, doc))
        for name in filter(None, (self.settings.save, free_autosave_name(self.output_dir, self.machine_info()) if self.settings.autosave else None)):
            self.written.append(save_baseline(doc, self.output_dir, name))
        if self.settings.html is not None:
            from pytest_gpuutil.report.html_report import (
                DEFAULT_NAME,
                baseline_view_of,
                write_html_report,
            )

            target = self.invocation_dir / self.settings.html if self.settings.html else self.output_dir / DEFAULT_NAME
            view = baseline_view_of(self.baseline, records, self.fail_exprs, self.comparison) if self.baseline else None
            try:
                self.written.append(write_html_report(target, doc, baseline=view, traces_dir=self.output_dir / "traces",
                                                      trace_name=safe_name))
            except OSError as exc:
                self.usage_errors.append(f"--gpu-util-html: could not write {target}: {exc}")

    # -- aggregates ------------------------------------------------------------------------------
    def no_cuda(self) -> bool:
        """True when tests ran but none could be measured for lack of CUDA (here or on workers)."""
        return not self.measured() and bool(self.records) and (
            self._cuda is False
            or any(r.note == NO_CUDA_NOTE for r in self.records)
            or not self.machine_info().get("gpu_count")  # e.g. every test skipped before its call
        )

    def measured(self) -> list[TestRecord]:
        return [r for r in self.records if r.gpu_busy_ms is not None]

    def totals(self) -> dict[str, Any]:
        measured = self.measured()
        gpu_ms = sum(r.gpu_busy_ms or 0.0 for r in measured)
        capacity_ms = sum((r.wall_ms or 0.0) * max(1, len(r.devices)) for r in measured)
        in_tests_ms = sum(r.measure_ms or 0.0 for r in self.records)
        measure_ms = in_tests_ms + (self.finish_s * 1000 if in_tests_ms else 0.0)
        startups = [p["startup_s"] for p in self.processes.values() if p.get("startup_s") is not None]
        return {
            "tests": len(self.records),
            "measure_ms": measure_ms,
            "measure_in_tests_ms": in_tests_ms,
            "test_s": self.test_seconds,
            "measure_share_pct": 100.0 * measure_ms / 1000 / self.test_seconds if self.test_seconds > 0 else 0.0,
            "startup_s": max(startups) if startups else None,
            "profiled": len(measured),
            "with_gpu_work": sum(1 for r in measured if r.kernel_count or r.gpu_busy_ms),
            "gpu_busy_ms": gpu_ms,
            "profiled_wall_ms": sum(r.wall_ms or 0.0 for r in measured),
            "busy_pct": 100.0 * gpu_ms / capacity_ms if capacity_ms > 0 else 0.0,
        }

    def gpu_table(self) -> list[dict[str, Any]]:
        """Busy time per physical GPU and which workers used it."""
        per_gpu: dict[str, dict[str, Any]] = {}
        for record in self.records:
            for gpu, busy_us in record.gpu_busy_us_by_device.items():
                entry = per_gpu.setdefault(gpu, {"gpu": gpu, "busy_ms": 0.0, "tests": 0, "workers": set()})
                entry["busy_ms"] += busy_us / 1000
                entry["tests"] += 1
                entry["workers"].add(record.worker or "main")
        return [
            {**e, "workers": sorted(e["workers"])}
            for _, e in sorted(per_gpu.items(), key=lambda kv: (not kv[0].isdigit(), int(kv[0]) if kv[0].isdigit() else 0, kv[0]))
        ]


def worker_gpu_assignment(worker_id: str, gpus: list[str]) -> Optional[str]:
    """The GPU for xdist worker ``gwN``: ``gpus[N mod len(gpus)]``."""
    if not gpus or not worker_id.startswith("gw") or not worker_id[2:].isdigit():
        return None
    return gpus[int(worker_id[2:]) % len(gpus)]
