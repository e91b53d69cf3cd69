"""pytest wiring for pytest-gpuutil: options, hooks and fixtures. The machinery lives elsewhere.

This module is loaded in every pytest run of an environment that has the package installed, so
it imports nothing heavy: torch is imported only when a test is profiled or a fixture is used.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generator

import pytest

from pytest_gpuutil.options import OptionError, add_options, read_settings

if TYPE_CHECKING:
    from pytest_gpuutil.fixtures import (
        GpuTraceFixture,
        KernelBenchFixture,
        MetricTableFixture,
    )
    from pytest_gpuutil.per_test import TestResults
    from pytest_gpuutil.session import GpuUtilSession

MARKER = (
    "gpu_util(min_busy_pct=None, min_mm_conv_pct=None, max_gpu_ms=None, max_kernel_count=None): "
    "fail the test when --gpu-util measures it below/above these limits"
)


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from pytest_gpuutil import hookspecs

    pluginmanager.add_hookspecs(hookspecs)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER)
    try:
        settings = read_settings(config.getoption, config.getini)
    except OptionError as exc:
        raise pytest.UsageError(str(exc)) from None
    from pytest_gpuutil.session import GpuUtilSession, SetupError, worker_gpu_assignment

    workerinput = getattr(config, "workerinput", None)
    worker_id = workerinput.get("workerid", "") if workerinput else ""
    worker_gpus = None
    if workerinput and settings.pin:
        chosen = worker_gpu_assignment(worker_id, list(workerinput.get("gpu_util_gpus") or ()))
        if chosen is not None:
            os.environ["CUDA_VISIBLE_DEVICES"] = chosen  # before anything initialises CUDA here
            worker_gpus = [chosen]
    try:
        state = GpuUtilSession(settings, Path(config.invocation_params.dir), worker_id, worker_gpus)
    except SetupError as exc:
        raise pytest.UsageError(str(exc)) from None
    config.stash[STATE_KEY] = state
    config.pluginmanager.register(GpuUtilHooks(state), "gpuutil-session")


if TYPE_CHECKING:
    STATE_KEY: pytest.StashKey[GpuUtilSession]
    RESULTS_KEY: pytest.StashKey[TestResults]
STATE_KEY = pytest.StashKey()
RESULTS_KEY = pytest.StashKey()
PHASES_KEY: pytest.StashKey[dict] = pytest.StashKey()
PROFILE_KEY: pytest.StashKey[Any] = pytest.StashKey()
THRESHOLD_KEY: pytest.StashKey[str] = pytest.StashKey()


def _results(item: pytest.Item) -> TestResults:
    results = item.stash.get(RESULTS_KEY, None)
    if results is None:
        from pytest_gpuutil.per_test import TestResults

        results = TestResults(item.nodeid)
        item.stash[RESULTS_KEY] = results
    return results


def _hooked_record(item: pytest.Item, record: Any, when: str) -> Any:
    """The record after the pytest_gpuutil_record hook (see hookspecs.py)."""
    from pytest_gpuutil.records import TestRecord

    replaced = item.ihook.pytest_gpuutil_record(item=item, record=record, when=when)
    if replaced is None:
        return record
    if not isinstance(replaced, TestRecord):
        raise TypeError(
            f"pytest_gpuutil_record for {item.nodeid} returned {type(replaced).__name__}; "
            "return a TestRecord (dataclasses.replace(record, ...)) or None"
        )
    return replaced


def _safe_name(nodeid: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid).strip("_")[:180]


class GpuUtilHooks:
    """Hooks that need the run's state; registered in pytest_configure."""

    def __init__(self, state: GpuUtilSession):
        self.state = state

    # -- xdist ---------------------------------------------------------------------------------
    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        """Controller: tell each worker which GPUs there are (counted without initialising CUDA)."""
        if self.state.settings.pin:
            from pytest_gpuutil.machine import visible_gpu_ids

            node.workerinput["gpu_util_gpus"] = visible_gpu_ids()

    # -- session -------------------------------------------------------------------------------
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        if self.state.is_worker:
            return
        from pytest_gpuutil.session import SetupError

        try:
            self.state.start()
        except SetupError as exc:
            raise pytest.UsageError(str(exc)) from None

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        from pytest_gpuutil.gates.thresholds import Thresholds

        for item in items:
            for marker in item.iter_markers("gpu_util"):
                if marker.args:
                    raise pytest.UsageError(f"@pytest.mark.gpu_util on {item.nodeid}: takes keyword arguments only")
                try:
                    Thresholds.from_kwargs(marker.kwargs, f"@pytest.mark.gpu_util on {item.nodeid}")
                except ValueError as exc:
                    raise pytest.UsageError(str(exc)) from None

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtestloop(self, session: pytest.Session) -> Generator[None, None, None]:
        yield
        if self.state.is_worker:
            return
        self.state.check_tables()
        self.state.compare()
        if self.state.gate_failed:
            session.testsfailed += 1  # exit status 1, pytest's own summary line still printed

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.state.is_worker:
            return
        try:
            self.state.finish()
        except OSError as exc:
            self.state.usage_errors.append(f"could not write results to {self.state.output_dir}: {exc}")
        if self.state.usage_errors:
            session.exitstatus = pytest.ExitCode.USAGE_ERROR

    # -- per test ------------------------------------------------------------------------------
    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, None, None]:
        state = self.state
        results = _results(item)
        profiler = None
        if state.profiles_tests():
            from pytest_gpuutil.capture.profiler import RegionProfiler

            profiler = RegionProfiler(
                state.classifier,
                cuda=state.cuda(),
                cpu_activity=state.settings.cpu_activity,
                keep=state.settings.traces != "none",
            )
            try:
                profiler.start()
                results.test_profiler = profiler
            except Exception as exc:  # noqa: BLE001 - profiling must never fail the test
                item.stash[PROFILE_KEY] = _failed_profile(f"profiler did not start: {exc}")
                profiler = None
        try:
            yield
        finally:
            if profiler is not None:
                results.test_profiler = None
                try:
                    item.stash[PROFILE_KEY] = profiler.stop()
                except Exception as exc:  # noqa: BLE001
                    item.stash[PROFILE_KEY] = _failed_profile(f"profiler error: {exc}")
                item.stash[_PROFILER_KEY] = profiler

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo) -> Generator[None, Any, None]:
        outcome = yield
        report = outcome.get_result()
        phases = item.stash.setdefault(PHASES_KEY, {})
        phases[report.when] = report
        state = self.state
        if report.when == "call":
            self._check_thresholds(item, report)
            self._export_trace(item, report)
            self._benchmark_extra_info(item)
        elif report.when == "teardown":
            results = _results(item)
            profile = item.stash.get(PROFILE_KEY, None)
            if not (state.settings.enabled or results.kernel_bench or results.gpu_trace or results.metric_rows
                    or results.tables):
                return
            from pytest_gpuutil.report.ci import junit_properties
            from pytest_gpuutil.session import outcome_of

            record = _hooked_record(item, state.make_record(item.nodeid, outcome_of(phases), profile, results), "teardown")
            report.gpu_util = state.payload(record, results, item.stash.get(THRESHOLD_KEY, ""))
            if state.settings.enabled:
                report.user_properties.extend(junit_properties(record))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        payload = getattr(report, "gpu_util", None)
        if payload is not None and report.when == "teardown" and not self.state.is_worker:
            self.state.receive(payload)

    def _check_thresholds(self, item: pytest.Item, report: pytest.TestReport) -> None:
        markers = list(item.iter_markers("gpu_util"))
        state = self.state
        if not state.settings.enabled or not (markers or state.default_thresholds):
            return
        from pytest_gpuutil.gates.thresholds import Thresholds, check, merge
        from pytest_gpuutil.session import outcome_of

        thresholds = state.default_thresholds
        for marker in reversed(markers):  # farthest first, so the closest marker wins
            thresholds = merge(thresholds, Thresholds.from_kwargs(marker.kwargs, f"@pytest.mark.gpu_util on {item.nodeid}"))
        if thresholds is None or thresholds.is_empty:
            return
        record = state.make_record(item.nodeid, outcome_of({"call": report}), item.stash.get(PROFILE_KEY, None), _results(item))
        record = _hooked_record(item, record, "call")
        misses = check(thresholds, record)
        if misses is None:
            item.stash[THRESHOLD_KEY] = "not_checked"
            return
        item.stash[THRESHOLD_KEY] = "failed" if misses else "passed"
        if misses and report.passed:
            report.outcome = "failed"
            report.longrepr = "\n".join(m.message for m in misses)

    def _export_trace(self, item: pytest.Item, report: pytest.TestReport) -> None:
        mode = self.state.settings.traces
        profiler = item.stash.get(_PROFILER_KEY, None)
        if profiler is None or profiler.prof is None or mode == "none" or (mode == "failed" and not report.failed):
            return
        path = self.state.output_dir / "traces" / f"{_safe_name(item.nodeid)}.json.gz"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp.json.gz")
            profiler.export(str(tmp))
            os.replace(tmp, path)
        except Exception as exc:  # noqa: BLE001 - a trace that cannot be written must not fail the test
            report.sections.append(("gpu-util", f"could not write trace {path}: {exc}"))
        finally:
            profiler.prof = None

    def _benchmark_extra_info(self, item: pytest.Item) -> None:
        """pytest-benchmark interop: GPU metrics of this test into benchmark.extra_info."""
        benchmark = getattr(item, "funcargs", {}).get("benchmark")
        profile = item.stash.get(PROFILE_KEY, None)
        extra = getattr(benchmark, "extra_info", None)
        if extra is None or profile is None or profile.summary is None or not self.state.cuda():
            return  # without CUDA (--gpu-util-cpu) the summary's zeros mean "not measured", not "idle"
        s = profile.summary
        extra["gpu_util"] = {
            "gpu_busy_ms": s.busy_us / 1000,
            "busy_pct": s.busy_pct,
            "mm_conv_pct": s.mm_conv_pct,
            "kernel_count": s.kernel_count,
            "top_kernel": s.top_kernels[0].name if s.top_kernels else None,
        }

    # -- reporting -----------------------------------------------------------------------------
    @pytest.hookimpl(optionalhook=True)
    def pytest_benchmark_update_machine_info(self, config: pytest.Config, machine_info: dict) -> None:
        import sys

        # the GPUs this run may use (CUDA_VISIBLE_DEVICES), as gpu_util.json and baselines describe them
        info = self.state.machine_info()
        torch = self.state.torch() if self.state.settings.enabled else sys.modules.get("torch")
        machine_info["gpu_util"] = {
            "gpu_model": info.get("gpu_model"),
            "gpu_count": info.get("gpu_count"),
            "driver": info.get("driver"),
            "cuda": getattr(getattr(torch, "version", None), "cuda", None),
        }

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.state.is_worker:
            return
        from pytest_gpuutil.report.terminal import write_summary

        write_summary(self.state, terminalreporter)


_PROFILER_KEY: pytest.StashKey[Any] = pytest.StashKey()


def _failed_profile(note: str) -> Any:
    from pytest_gpuutil.capture.profiler import RegionProfile

    return RegionProfile(0.0, None, None, note)


# -- fixtures ----------------------------------------------------------------------------------
def _state(request: pytest.FixtureRequest) -> GpuUtilSession:
    return request.config.stash[STATE_KEY]


@pytest.fixture
def gpu_trace(request: pytest.FixtureRequest) -> GpuTraceFixture:
    """Profile part of a test with torch.profiler and analyse it in memory.

    ``with gpu_trace() as t: ...`` then ``t.summary`` (busy %, mm/conv %, categories, top
    kernels) and ``t.save("trace.json.gz")``; or ``gpu_trace.run(fn, *args, warmup=5, runs=1,
    seed=1337)`` for seeded warm-ups, unprofiled timed runs and profiled runs, returning busy %,
    mm/conv %, categories and the profiler's overhead. Results join the --gpu-util summary.
    """
    from pytest_gpuutil.fixtures import GpuTraceFixture

    state = _state(request)
    return GpuTraceFixture(_results(request.node), state.classifier, state.cuda)


@pytest.fixture
def kernel_bench(request: pytest.FixtureRequest) -> KernelBenchFixture:
    """Time a callable with CUDA events the way triton's do_bench does.

    ``kernel_bench(fn, *args, warmup_ms=25, rep_ms=100, flush_l2=True, cuda_graph=False,
    bytes=None, flops=None)`` returns a record with median, mean, std, min, max, p20, p80, reps
    and GB/s / TFLOP/s; ``kernel_bench.fwd_bwd(forward, backward)`` times both separately.
    Falls back to time.perf_counter without CUDA (the record says so). Results go to gpu_util.json.
    """
    from pytest_gpuutil.fixtures import KernelBenchFixture

    return KernelBenchFixture(_results(request.node))


@pytest.fixture
def metric_table(request: pytest.FixtureRequest) -> MetricTableFixture:
    """Named CSV tables: ``metric_table(name, columns).add_row({...})``.

    Rows are checked against the declared columns and written to
    ``<--gpu-util-dir>/metric_table_<name>.csv`` with the test id first, floats at 6 decimals
    and None as empty; old table files are purged when the session starts.
    """
    from pytest_gpuutil.fixtures import MetricTableFixture

    return MetricTableFixture(_results(request.node), _state(request).registry)
