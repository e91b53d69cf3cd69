"""A pytest plugin that times pytest-gpuutil's own hooks and per-test parts (``-p hook_timer``).

With this folder on PYTHONPATH, ``pytest -p hook_timer --gpu-util ...`` wraps, once the plugin is
configured, every hook implementation that pytest-gpuutil registered and the methods listed in
``METHODS`` (the per-test path: windows, memory, the clock, flushes, records, payloads) with a
``perf_counter`` pair each, and prints one line at the end, ``HOOKTIME {...}``: per name, the calls,
the seconds spent inside and the median seconds of one call (a hook wrapper's own code before and
after its ``yield``, not what it wraps). It also times each test function and each test's whole
protocol ("test function", "whole test protocol"), every plugin included. A pair of clock reads costs well under a microsecond, so, unlike cProfile, the figures
are the real ones; nested names count their time twice (a method inside a hook). session_phases.py
and ``scripts/device.sh``'s ``per_test_path`` step read the line.
"""
from __future__ import annotations

import functools
import importlib
import inspect
import json
import statistics
import time
from typing import Any, Callable

import pytest

#: (module, class, method) timed besides the hooks; a name that is not there is skipped
METHODS = (
    ("pytest_gpuutil.session.measuring", "Measuring", ("begin_test", "end_test", "flush", "ready", "close",
                                                       "payload")),
    ("pytest_gpuutil.measurement.process", "Measurement", ("begin", "end", "flush", "_completed")),
    ("pytest_gpuutil.measurement.memory_reads", "MemoryReads", ("begin", "end")),
    ("pytest_gpuutil.measurement.windows", "ContinuousWindows", ("begin_at", "end_at")),
    ("pytest_gpuutil.measurement.counter_reads", "CounterReads", ("begin", "opened", "end", "complete")),
    ("pytest_gpuutil.capture.continuous", "ContinuousCapture", ("begin", "end", "flush", "ensure_started")),
    ("pytest_gpuutil.capture.window_split", "FirstUses", ("contexts",)),
    ("pytest_gpuutil.capture.memory", "MemoryMeter", ("begin", "end", "read")),
    ("pytest_gpuutil.measurement.memory_reads", "CallMemories", ("get",)),
    ("pytest_gpuutil.capture.cupti", "CuptiSource", ("now", "drain", "drain_syncs", "_take_waits")),
    ("pytest_gpuutil.hardware.capture", "CounterCapture", ("begin", "end", "flush")),
    ("pytest_gpuutil.session.receiving", "Receiver", ("receive_batch", "receive", "take", "take_finished")),
    ("pytest_gpuutil.session.state", "GpuUtilSession", ("make_record", "finish")),
    ("pytest_gpuutil.records", "TestRecord", ("to_dict", "from_dict")),
)

_TIMES: dict[str, list[float]] = {}


def _count(name: str, seconds: float) -> None:
    _TIMES.setdefault(name, []).append(seconds)


def _timed(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    clock = time.perf_counter
    if inspect.isgeneratorfunction(function):
        @functools.wraps(function)
        def generator(*args: Any, **kwargs: Any) -> Any:
            began = clock()
            gen = function(*args, **kwargs)
            try:
                value = next(gen)
            finally:
                _count(name, clock() - began)
            while True:
                try:
                    sent = yield value
                except BaseException as exc:  # noqa: BLE001 - handed on to the wrapped generator
                    step = functools.partial(gen.throw, exc)
                else:
                    step = functools.partial(gen.send, sent)
                began = clock()
                try:
                    value = step()
                except StopIteration as stop:
                    return stop.value
                finally:
                    _count(name + " (after)", clock() - began)
        return generator

    @functools.wraps(function)
    def plain(*args: Any, **kwargs: Any) -> Any:
        began = clock()
        try:
            return function(*args, **kwargs)
        finally:
            _count(name, clock() - began)
    return plain


def _wrap_methods() -> None:
    for module_name, class_name, names in METHODS:
        try:
            cls = getattr(importlib.import_module(module_name), class_name)
        except (ImportError, AttributeError):
            continue
        for name in names:
            raw = cls.__dict__.get(name)
            if raw is None:
                continue
            if isinstance(raw, (staticmethod, classmethod)):
                setattr(cls, name, type(raw)(_timed(f"{class_name}.{name}", raw.__func__)))
            else:
                setattr(cls, name, _timed(f"{class_name}.{name}", raw))


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    _wrap_methods()
    for caller in vars(config.pluginmanager.hook).values():  # config.hook is a proxy on pytest 7
        get = getattr(caller, "get_hookimpls", None)
        if get is None:
            continue
        for impl in get():
            module = getattr(impl.function, "__module__", "") or ""
            if module.startswith("pytest_gpuutil"):
                impl.function = _timed(f"hook {caller.name}", impl.function)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Item) -> Any:
    """The test function itself (every plugin's wrappers of the call inside it)."""
    began = time.perf_counter()
    yield
    _count("test function", time.perf_counter() - began)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: Any) -> Any:
    """One test's whole protocol: set-up, call, teardown, their reports, every plugin's hooks."""
    began = time.perf_counter()
    yield
    _count("whole test protocol", time.perf_counter() - began)


def pytest_unconfigure(config: pytest.Config) -> None:
    print("HOOKTIME " + json.dumps({k: [len(v), round(sum(v), 6), round(statistics.median(v), 7)]
                                     for k, v in sorted(_TIMES.items())}))
