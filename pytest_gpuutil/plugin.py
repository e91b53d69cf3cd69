"""pytest wiring for pytest-gpuutil: options, hooks and fixtures. The machinery lives elsewhere.

This module is loaded in every pytest run of an environment that has the package installed, so
it imports nothing heavy: torch is imported only when a test is profiled or a fixture is used.
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generator, Optional

import pytest

from pytest_gpuutil.options import (
    OptionError,
    add_options,
    keep_test_paths,
    read_settings,
)

if TYPE_CHECKING:
    from pytest_gpuutil.fixtures import (
        GpuTraceFixture,
        KernelBenchFixture,
        MetricTableFixture,
    )
    from pytest_gpuutil.per_test import TestResults
    from pytest_gpuutil.session.state import GpuUtilSession

MARKER = (
    "gpu_util(min_busy_pct=None, min_mm_conv_pct=None, max_gpu_ms=None, max_kernel_count=None, max_memory=None, "
    "max_leak=None, min_sm_pct=None, min_tensor_pct=None, max_energy_j=None): fail the test when --gpu-util measures "
    "it below/above these limits (sizes like '2 GiB'; SM/tensor % and energy from the hardware counters)"
)


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, args: list[str]) -> None:
    """A test path after an option with an optional value stays a test path (see keep_test_paths)."""
    try:
        fixed, kept = keep_test_paths(args, Path(early_config.invocation_params.dir))
    except OptionError as exc:
        raise pytest.UsageError(str(exc)) from None
    if kept:
        args[:] = fixed  # pytest parses this same list next
        early = early_config.known_args_namespace  # parsed already: initial conftests come from its paths
        early.file_or_dir = [*(early.file_or_dir or []), *kept]
    from pytest_gpuutil.session.rootdir import corrected_rootdir

    corrected_rootdir(early_config, args)  # a path option's value written as a word of its own is no test path


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from pytest_gpuutil import hookspecs

    pluginmanager.add_hookspecs(hookspecs)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER)
    try:
        settings = read_settings(config.getoption, config.getini)
    except OptionError as exc:
        raise pytest.UsageError(str(exc)) from None
    from pytest_gpuutil.session import SetupError
    from pytest_gpuutil.session.state import GpuUtilSession, worker_gpu_assignment

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
    pytest_html = not worker_id and config.pluginmanager.hasplugin("html") and bool(config.getoption("htmlpath", None))
    config.pluginmanager.register(GpuUtilHooks(state, reports_carry_records=pytest_html), "gpuutil-session")
    if pytest_html:
        # pytest-html writes a report: its rows get the GPU figures
        from pytest_gpuutil.report.html_report import PytestHtmlInterop, pytest_html_too_old

        too_old = pytest_html_too_old()
        if too_old:
            state.unavailable.append(too_old)
        else:
            config.pluginmanager.register(PytestHtmlInterop(), "gpuutil-pytest-html")


if TYPE_CHECKING:
    STATE_KEY: pytest.StashKey[GpuUtilSession]
    RESULTS_KEY: pytest.StashKey[TestResults]
STATE_KEY = pytest.StashKey()
RESULTS_KEY = pytest.StashKey()
PHASES_KEY: pytest.StashKey[dict] = pytest.StashKey()
THRESHOLD_KEY: pytest.StashKey[str] = pytest.StashKey()
LAST_KEY: pytest.StashKey[bool] = pytest.StashKey()


def _results(item: pytest.Item) -> TestResults:
    results = item.stash.get(RESULTS_KEY, None)
    if results is None:
        from pytest_gpuutil.per_test import TestResults

        results = TestResults(item.nodeid)
        item.stash[RESULTS_KEY] = results
    return results


class GpuUtilHooks:
    """Hooks that need the run's state; registered in pytest_configure."""

    def __init__(self, state: GpuUtilSession, reports_carry_records: bool = False):
        from pytest_gpuutil.session.record_timing import RecordTiming

        self.state = state
        #: when each test's record is needed, and the record hook
        self.timing = RecordTiming(state.settings.enabled, state.default_thresholds)
        #: records also travel on this process's own teardown reports (pytest-html's rows read them there)
        self._reports_carry_records = reports_carry_records

    # -- xdist ---------------------------------------------------------------------------------
    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        """Controller: tell each worker which GPUs there are (counted without initialising CUDA)."""
        if self.state.settings.pin:
            from pytest_gpuutil.machine.identity import visible_gpu_ids

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
        state = self.state
        controller = session.config.pluginmanager.has_plugin("dsession")  # xdist's: it runs no test itself
        if state.settings.enabled and not session.config.option.collectonly and not controller:
            source = (session.config.hook.pytest_gpuutil_event_source(config=session.config)
                      if state.settings.source == "cupti" else None)
            counter_source = (session.config.hook.pytest_gpuutil_counter_source(config=session.config)
                              if state.settings.counters != "off" else None)
            state.prepare_measurement(source, counter_source)  # the profiler's one-time start-up, before any test
        yield
        if state.is_worker:
            return
        state.check_tables()
        state.compare()
        if state.explanations:
            from pytest_gpuutil.report.junit_why import add_why_properties

            add_why_properties(session.config, state.explanations)
        if state.gate_failed:
            session.testsfailed += 1  # exit status 1, pytest's own summary line still printed

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        state = self.state
        began = time.perf_counter()
        leftovers = state.measuring.close(self.timing.finalize)
        if state.is_worker:
            # what no report could carry (the run stopped early): the controller reads it when this worker ends
            session.config.workeroutput["gpu_util"] = {"payloads": [state.measuring.payload(t) for t in leftovers],
                                                       "process": state.measuring.process_info()}
            return
        self._take(leftovers)
        state.receiver.note_process(state.measuring.process_info())
        try:
            state.finish()
        except Exception as exc:  # noqa: BLE001 - a disk, a missing module: one line, never a traceback
            from pytest_gpuutil.report.terminal import display_path

            what = str(exc) if isinstance(exc, OSError) else f"{type(exc).__name__}: {exc}"
            state.usage_errors.append(f"could not write results to {display_path(state.output_dir)}: {what}")
        state.finish_s = time.perf_counter() - began
        if state.usage_errors:
            session.exitstatus = pytest.ExitCode.USAGE_ERROR

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        """Controller: records a worker sent at its end (tests still pending when its run stopped)."""
        batch = getattr(node, "workeroutput", {}).get("gpu_util")
        if batch:
            self.state.receiver.receive_batch(batch)

    # -- per test ------------------------------------------------------------------------------
    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: Optional[pytest.Item]) -> Generator[None, None, None]:
        item.stash[LAST_KEY] = nextitem is None
        yield

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, None, None]:
        state = self.state
        results = _results(item)
        if state.settings.enabled:
            state.measuring.begin_test(item.nodeid, results)
        try:
            yield
        finally:
            if state.settings.enabled:
                state.measuring.end_test(item.nodeid, results)
                if self.timing.needs_profile_at_call(item):
                    # its limits are checked, and pytest-benchmark told, right after the call
                    state.measuring.flush(wait=self.timing.needs_counters_at_call(item))

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo) -> Generator[None, Any, None]:
        outcome = yield
        report = outcome.get_result()
        phases = item.stash.setdefault(PHASES_KEY, {})
        phases[report.when] = report
        state = self.state
        if report.when == "call":
            if self.timing.thresholds_apply(item):
                from pytest_gpuutil.session.call_limits import check_call_limits

                checked = check_call_limits(state, item, report, _results(item))
                if checked:
                    item.stash[THRESHOLD_KEY] = checked
            self._benchmark_extra_info(item)
            if report.failed:
                from pytest_gpuutil.session.call_limits import add_memory_section, ran_out_of_memory

                if ran_out_of_memory(state, item.nodeid):
                    add_memory_section(state, item.nodeid, report)
        elif report.when == "teardown":
            results = _results(item)
            if not (state.settings.enabled or results.kernel_bench or results.gpu_trace or results.metric_rows
                    or results.tables):
                return
            from pytest_gpuutil.session.measuring import PendingTest, outcome_of

            state.measuring.test_finished(PendingTest(item, item.nodeid, outcome_of(phases), results,
                                            item.stash.get(THRESHOLD_KEY, "")))
            now = self.timing.needs_record_now(item, item.stash.get(LAST_KEY, False))
            if now or state.measuring.flush_due():
                state.measuring.flush(wait=now)
            finished = state.measuring.ready(self.timing.finalize)
            if finished:
                if state.is_worker or self._reports_carry_records:
                    report.gpu_util = {"payloads": [state.measuring.payload(t) for t in finished],
                                       "process": state.measuring.process_info()}
                if not state.is_worker:
                    self._take(finished)
                    if self._reports_carry_records:
                        report.gpu_util["taken"] = True  # for pytest-html's rows; the run has them already
                own = next((t.record for t in finished if t.record.test == item.nodeid), None)
                if own is not None and state.settings.enabled:
                    from pytest_gpuutil.report.ci import junit_properties

                    report.user_properties.extend(junit_properties(own))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if self.state.is_worker:
            return
        self.state.test_seconds += getattr(report, "duration", 0.0) or 0.0
        batch = getattr(report, "gpu_util", None)
        if batch is not None and report.when == "teardown" and not batch.get("taken"):
            self.state.receiver.receive_batch(batch)  # from an xdist worker (this process took its own already)

    def _take(self, finished: list[Any]) -> None:
        """This process's own finished tests, to the receiver as they are (no JSON round trip)."""
        receiver = self.state.receiver
        for test in finished:
            receiver.take(test.record, test.results.metric_rows, test.results.tables, test.thresholds, test.timeline)

    def _benchmark_extra_info(self, item: pytest.Item) -> None:
        """pytest-benchmark interop: GPU metrics of this test into benchmark.extra_info."""
        benchmark = getattr(item, "funcargs", {}).get("benchmark")
        profile = self.state.measuring.profiles.get(item.nodeid)
        extra = getattr(benchmark, "extra_info", None)
        if extra is None or profile is None or profile.stats is None or not self.state.cuda():
            return  # without CUDA (--gpu-util-cpu) the figures' zeros mean "not measured", not "idle"
        from pytest_gpuutil.report.benchmark_interop import gpu_extra_info

        extra["gpu_util"] = gpu_extra_info(profile.stats)

    # -- reporting -----------------------------------------------------------------------------
    def pytest_report_header(self, config: pytest.Config) -> Optional[str]:
        """One line when measuring is on, saying what turned it on."""
        by = self.state.settings.enabled_by
        if not by:
            return None
        from pytest_gpuutil.options import TURNS_ON

        return f"gpu-util: on (turned on by {by})" if by in TURNS_ON else f"gpu-util: on ({by})"

    @pytest.hookimpl(optionalhook=True)
    def pytest_benchmark_update_machine_info(self, config: pytest.Config, machine_info: dict) -> None:
        import sys

        from pytest_gpuutil.report.benchmark_interop import machine_extra_info

        torch = self.state.torch() if self.state.settings.enabled else sys.modules.get("torch")
        machine_info["gpu_util"] = machine_extra_info(self.state.machine_info(), torch)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.state.is_worker:
            return
        from pytest_gpuutil.report.terminal import write_summary

        write_summary(self.state, terminalreporter)


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
    bytes=None, flops=None, flops_dtype="bf16")`` returns a record with median, mean, std, min,
    max, p20, p80, reps, GB/s / TFLOP/s and their share of the device's peak, and under
    --gpu-util the hardware counters (SM, tensor, DRAM %) over the timed reps;
    ``kernel_bench.fwd_bwd(forward, backward)`` times both separately.
    Falls back to time.perf_counter without CUDA (the record says so). Results go to gpu_util.json.
    """
    from pytest_gpuutil.fixtures import KernelBenchFixture

    return KernelBenchFixture(_results(request.node), counters=_state(request).measuring.measurement.counters)


@pytest.fixture
def metric_table(request: pytest.FixtureRequest) -> MetricTableFixture:
    """Named CSV tables: ``metric_table(name, columns).add_row({...})``.

    Rows are checked against the declared columns and written to
    ``<--gpu-util-dir>/metric_table_<name>.csv`` with the test id first, floats at 6 decimals
    and None as empty; old table files are purged when the session starts.
    """
    from pytest_gpuutil.fixtures import MetricTableFixture

    return MetricTableFixture(_results(request.node), _state(request).registry)
