"""pytest-gpuutil: per-test GPU utilization for PyTorch test suites.

The analysis API is importable without torch::

    from pytest_gpuutil import read_trace, analyze
    summary = analyze(read_trace("trace.json.gz"))
"""
from __future__ import annotations

from .analysis import TraceSummary, analyze
from .classify import DEFAULT_RULES, KernelClassifier, Rule, parse_rules, rule
from .trace_model import GpuEvent, Trace, Window
from .trace_reader import TraceError, read_trace

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_RULES",
    "GpuEvent",
    "KernelClassifier",
    "Rule",
    "Trace",
    "TraceError",
    "TraceSummary",
    "Window",
    "analyze",
    "parse_rules",
    "read_trace",
    "rule",
    "__version__",
]
