"""pytest wiring for pytest-gpuutil: options, hooks and fixtures. The machinery lives elsewhere.

This module is loaded in every pytest run of an environment that has the package installed, so
it imports nothing heavy: torch is imported only when a test is profiled or a fixture is used.
"""
from __future__ import annotations

import inspect
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generator, Optional

import pytest

from pytest_gpuutil.options import MARKER, OptionError, add_options, keep_test_paths, read_settings
from pytest_gpuutil.per_test import TestResults  # light (dataclasses only): made for every test under --gpu-util

if TYPE_CHECKING:
    from pytest_gpuutil.fixtures import GpuTraceFixture, KernelBenchFixture, MetricTableFixture
    from pytest_gpuutil.session.state import GpuUtilSession


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
    hooks = GpuUtilHooks(state, config, reports_carry_records=pytest_html and settings.enabled)
    config.pluginmanager.register(hooks, "gpuutil-session")
    if settings.enabled:
        hooks.per_test()  # without --gpu-util, only when a fixture is first used (see _fixture_results)
    if pytest_html:
        # pytest-html writes a report: its rows get the GPU figures
        from pytest_gpuutil.report.html_report import PytestHtmlInterop, pytest_html_too_old

        too_old = pytest_html_too_old()
        if too_old:
            state.unavailable.append(too_old)
        else:
            interop = PytestHtmlInterop()
            if not settings.enabled:
                # the columns stay (empty); no per-test hook without --gpu-util (pluggy skips a non-routine)
                interop.pytest_runtest_logreport = None  # type: ignore[assignment,method-assign]
            config.pluginmanager.register(interop, "gpuutil-pytest-html")


if TYPE_CHECKING:
    STATE_KEY: pytest.StashKey[GpuUtilSession]
    RESULTS_KEY: pytest.StashKey[TestResults]
STATE_KEY = pytest.StashKey()
RESULTS_KEY = pytest.StashKey()
#: pluggy's new-style hook wrapper where it has one (1.1+): 7.8k instructions a call more than none, 14.6k old style
_WRAPPER = {"wrapper": True} if "wrapper" in inspect.signature(pytest.hookimpl).parameters else {"hookwrapper": True}
#: the clock the plugin's own time is read with (Measuring.own_s: the summary's "measurement cost")
_clock = time.perf_counter
#: the JUnit file's writer (pytest's LogXML), when there is one
_NO_JUNIT = object()


def _results(item: pytest.Item) -> TestResults:
    """The item's TestResults, made the first time (asked with ``in``: Stash.get raises and catches a
    KeyError inside for a key not there yet, ~1 µs at every test's call)."""
    stash = item.stash
    if RESULTS_KEY in stash:
        return stash[RESULTS_KEY]
    results = stash[RESULTS_KEY] = TestResults(item.nodeid)
    return results


def _fixture_results(request: pytest.FixtureRequest) -> TestResults:
    """A fixture's test's results; the first fixture used in a run without --gpu-util registers the
    per-test hooks that carry them to the run's files (a run that uses none registers none)."""
    hooks = request.config.pluginmanager.get_plugin("gpuutil-session")
    if hooks is not None:
        hooks.per_test()
    return _results(request.node)


class GpuUtilHooks:
    """The run's hooks (once a session, not per test); registered in pytest_configure."""

    def __init__(self, state: GpuUtilSession, config: Optional[pytest.Config] = None, reports_carry_records: bool = False):
        from pytest_gpuutil.session.record_timing import RecordTiming

        self.state = state
        self._config = config
        #: when each test's record is needed, and the record hook
        self.timing = RecordTiming(state.settings.enabled, state.default_thresholds)
        #: records also travel on this process's own teardown reports (pytest-html's rows read them there)
        self._reports_carry_records = reports_carry_records
        #: the per-test hooks, once registered (under --gpu-util from the start, else at a fixture's first use)
        self.test_hooks: Optional[TestHooks] = None

    def per_test(self) -> TestHooks:
        """The per-test hooks, registered the first time this is asked."""
        if self.test_hooks is None:
            self.test_hooks = TestHooks(self.state, self.timing, self._reports_carry_records, self._config)
            if self._config is not None:
                self._config.pluginmanager.register(self.test_hooks, "gpuutil-tests")
        return self.test_hooks

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

        note_marked = self.timing.note_marked
        any_marked = False
        for item in items:
            marked = False
            for marker in item.iter_markers("gpu_util"):
                marked = True
                if marker.args:
                    raise pytest.UsageError(f"@pytest.mark.gpu_util on {item.nodeid}: takes keyword arguments only")
                try:
                    Thresholds.from_kwargs(marker.kwargs, f"@pytest.mark.gpu_util on {item.nodeid}")
                except ValueError as exc:
                    raise pytest.UsageError(str(exc)) from None
            note_marked(item, marked)
            any_marked = any_marked or marked
        if self.test_hooks is not None and self.state.settings.enabled and (self.state.default_thresholds or any_marked):
            self.test_hooks.check_limits()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtestloop(self, session: pytest.Session) -> Generator[None, None, None]:
        state = self.state
        controller = session.config.pluginmanager.has_plugin("dsession")  # xdist's: it runs no test itself
        if controller and self.test_hooks is not None:
            self.test_hooks.controller = True  # the reports it logs are the workers' (their tests are theirs)
        if state.settings.enabled and not session.config.option.collectonly and not controller:
            source = (session.config.hook.pytest_gpuutil_event_source(config=session.config)
                      if state.settings.source == "cupti" else None)
            counter_source = (session.config.hook.pytest_gpuutil_counter_source(config=session.config)
                              if state.settings.counters != "off" else None)
            state.prepare_measurement(source, counter_source)  # the profiler's one-time start-up, before any test
        yield
        if state.is_worker:
            return
        began = _clock()
        state.check_tables()
        state.compare()
        if state.explanations:
            from pytest_gpuutil.report.junit_why import add_why_properties

            add_why_properties(session.config, state.explanations)
        state.measuring.own_s += _clock() - began
        if state.gate_failed:
            session.testsfailed += 1  # exit status 1, pytest's own summary line still printed

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> Generator[None, None, None]:
        """Before every other plugin's (pytest-benchmark writes its JSON, pytest its JUnit file, in theirs)."""
        measuring = self.state.measuring
        measuring.own_open = _clock()  # the run's files count this part too (see Measuring.own_now)
        try:
            self._finish(session)
        finally:
            measuring.own_s += _clock() - measuring.own_open
            measuring.own_open = None
        yield

    def _finish(self, session: pytest.Session) -> None:
        state = self.state
        began = time.perf_counter()
        tests = self.test_hooks
        leftovers = state.measuring.close(self.timing.finalize)
        if state.is_worker:
            # what no report carried (the run stopped early, or no --gpu-util): the controller reads it
            # when this worker ends
            held = tests.held if tests is not None else []
            session.config.workeroutput["gpu_util"] = {
                "payloads": [state.measuring.payload(t) for t in [*held, *leftovers]],
                "process": state.measuring.process_info()}
            return
        state.receiver.take_finished(leftovers)
        if tests is not None:
            tests.late.fill(state.records, state.settings.enabled and state.cuda())
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
        measuring = self.state.measuring
        measuring.own_open = _clock()  # the cost line counts the summary up to where it is written
        try:
            from pytest_gpuutil.report.terminal import write_summary

            write_summary(self.state, terminalreporter)
        finally:
            measuring.own_s += _clock() - measuring.own_open
            measuring.own_open = None


def _taken_results(item: pytest.Item) -> TestResults:
    """At its teardown the item's TestResults, which it lets go of (the session keeps every item: kept,
    they brought Python's full collections, ~0.1 s each with torch loaded, due among the tests)."""
    stash = item.stash
    if RESULTS_KEY not in stash:
        return TestResults(item.nodeid)
    results = stash[RESULTS_KEY]
    del stash[RESULTS_KEY]
    return results


class TestHooks:
    """The per-test hooks: registered under --gpu-util, or when a fixture is first used (a run
    without either runs none of the plugin's code per test). A test's teardown work is done as its
    teardown report is logged; no wrapper around each report's making but the limits' (CallLimits)."""

    __test__ = False

    def __init__(self, state: GpuUtilSession, timing: Any, reports_carry_records: bool,
                 config: Optional[pytest.Config] = None):
        from pytest_gpuutil.report.ci import PROPERTY_PREFIX, LateProperties, junit_properties
        from pytest_gpuutil.session.measuring import outcome_of

        #: what each test's teardown uses, imported once here (not at every test)
        self._outcome_of, self._junit_properties = outcome_of, junit_properties
        self._property_prefix = PROPERTY_PREFIX
        self.state = state
        self._config = config
        self.timing = timing
        self._reports_carry_records = reports_carry_records
        #: an xdist worker without --gpu-util: the fixtures' finished tests, sent at its end (not per test)
        self.held: list[Any] = []
        #: JUnit testcases and pytest-benchmark extra info waiting for their tests' records
        self.late = LateProperties()
        self._junit: Any = _NO_JUNIT
        #: xdist's controller: the reports it logs are its workers' (set when its test loop starts)
        self.controller = False
        #: the test run here: from its teardown hook, the item, its id and whether it is last; its setup and call reports
        self._item, self._nodeid, self._last, self._setup, self._call = None, "", False, None, None
        #: the limits' wrapper of the call's report, once registered (see check_limits)
        self._limits: Any = None

    def check_limits(self) -> None:
        """Limits may apply to a test of this run: each call's report is checked as it is made."""
        if self._limits is None:
            from pytest_gpuutil.session.call_limits import CallLimits

            self._limits = CallLimits(self.state, self.timing, _results)
            if self._config is not None:
                self._config.pluginmanager.register(self._limits, "gpuutil-limits")

    # -- per test ------------------------------------------------------------------------------
    def pytest_runtest_teardown(self, item: pytest.Item, nextitem: Optional[pytest.Item]) -> None:
        """The item whose teardown report comes next, whether it is the last test, and its benchmark's
        extra info while its fixtures are still set up: a plain implementation, not a wrapper (pluggy's
        old-style wrapper: ~1.5 µs a call more)."""
        began = _clock()
        self._item, self._nodeid, self._last = item, item.nodeid, nextitem is None
        if self.state.settings.enabled:  # pytest-benchmark: the test's GPU figures go into its extra_info
            extra = getattr((getattr(item, "funcargs", None) or {}).get("benchmark"), "extra_info", None)
            if extra is not None:
                self.late.wait_benchmark(self._nodeid, extra)
        self.state.measuring.own_s += _clock() - began

    @pytest.hookimpl(**_WRAPPER)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, Any, Any]:
        state = self.state
        measuring = state.measuring
        began = _clock()
        results = _results(item)
        # the measuring hands back its last clock reading: the plugin's own time ends there
        measuring.own_s += (measuring.begin_test(item.nodeid, results, began) if state.settings.enabled
                            else _clock()) - began
        try:
            got = yield  # new style: the call's result, or its exception raised here; old style: pluggy's Result
        finally:
            began = _clock()
            ended = measuring.end_test(item.nodeid, results, began) if state.settings.enabled else _clock()
            # limits are checked right after the call (no limit in this run: no test's is asked)
            if state.settings.enabled and self._limits is not None and self.timing.needs_profile_at_call(item):
                measuring.flush(wait=self.timing.needs_counters_at_call(item))
                ended = _clock()
            measuring.own_s += ended - began
        return got  # a new-style wrapper hands the result on (an old-style one's is ignored)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """First of the plugins (before pytest's JUnit writer, xdist's sending, pytest-html's row)."""
        state = self.state
        began = _clock()
        when = report.when
        if not self.controller:
            if when == "teardown":
                self._teardown(report)
            elif when == "setup":
                self._setup = report
            else:
                self._call = report
                if report.outcome == "failed":
                    from pytest_gpuutil.session.call_limits import add_memory_section, ran_out_of_memory

                    if ran_out_of_memory(state, report.nodeid):
                        add_memory_section(state, report.nodeid, report)
        if not state.is_worker:
            state.test_seconds += getattr(report, "duration", 0.0) or 0.0
            if when == "teardown":
                batch = getattr(report, "gpu_util", None)
                if batch is not None and not batch.get("taken"):
                    state.receiver.receive_batch(batch)  # from an xdist worker (this process took its own already)
                if state.settings.enabled and self._junit is not None:  # None: no JUnit file (known after a test)
                    self._junit_waits(report)
        state.measuring.own_s += _clock() - began

    def _teardown(self, report: pytest.TestReport) -> None:
        """The test is over: it waits for its profile among the finished tests; the records that are
        ready go on (to the receiver, or on this report to xdist's controller or pytest-html)."""
        item, nodeid, setup, call = self._item, self._nodeid, self._setup, self._call
        self._item = self._setup = self._call = None
        if item is None or nodeid != report.nodeid:
            return  # no teardown hook of this test ran here
        state = self.state
        results = _taken_results(item)
        thresholds, call_record = self._limits.taken(item) if self._limits is not None else ("", None)
        if not (state.settings.enabled or results.kernel_bench or results.gpu_trace or results.metric_rows
                or results.tables):
            return
        measuring = state.measuring
        measuring.test_finished(item, nodeid, self._outcome_of(setup, call, report), results, thresholds, call_record)
        now = self.timing.needs_record_now(item, self._last)
        if now or measuring.measurement.flush_due():  # (Measuring.flush_due's own call left out)
            measuring.flush(wait=now)
        finished = measuring.ready(self.timing.finalize)
        if finished:
            if state.is_worker and not state.settings.enabled:
                self.held.extend(finished)  # sent at the worker's end
                return
            if state.is_worker or self._reports_carry_records:
                report.gpu_util = {"payloads": [measuring.payload(t) for t in finished],  # type: ignore[attr-defined]
                                   "process": measuring.process_info()}
            if not state.is_worker:
                state.receiver.take_finished(finished)
                if self._reports_carry_records:
                    report.gpu_util["taken"] = True  # type: ignore[attr-defined]  # pytest-html's rows: taken already
            own = next((t.record for t in finished if t.record.test == nodeid), None)
            if own is not None and state.settings.enabled:
                report.user_properties.extend(self._junit_properties(own))

    def _junit_waits(self, report: pytest.TestReport) -> None:
        """A JUnit testcase whose report has no figures yet gets them when its record comes (LateProperties)."""
        junit = self._junit
        if junit is _NO_JUNIT:
            from _pytest.junitxml import xml_key

            junit = self._junit = self._config.stash.get(xml_key, None) if self._config is not None else None
        if junit is None:
            return
        prefix = self._property_prefix
        if not any(str(name).startswith(prefix) for name, _ in report.user_properties):
            self.late.wait_junit(report.nodeid, junit.node_reporter(report))


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
    return GpuTraceFixture(_fixture_results(request), state.classifier, state.cuda)


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

    return KernelBenchFixture(_fixture_results(request), counters=_state(request).measuring.measurement.counters)


@pytest.fixture
def metric_table(request: pytest.FixtureRequest) -> MetricTableFixture:
    """Named CSV tables: ``metric_table(name, columns).add_row({...})``.

    Rows are checked against the declared columns and written to
    ``<--gpu-util-dir>/metric_table_<name>.csv`` with the test id first, floats at 6 decimals
    and None as empty; old table files are purged when the session starts.
    """
    from pytest_gpuutil.fixtures import MetricTableFixture

    return MetricTableFixture(_fixture_results(request), _state(request).registry)
