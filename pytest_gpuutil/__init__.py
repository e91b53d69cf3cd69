"""pytest-gpuutil: per-test GPU utilization for PyTorch test suites.

The analysis API is importable without torch::

    from pytest_gpuutil import read_trace, analyze
    summary = analyze(read_trace("trace.json.gz"))

Names are loaded on first use, so that the pytest plugin (loaded in every pytest run of an
environment) does not pay for numpy and msgspec unless it analyses something.
"""
from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing's, without importing typing at run time (gpuutil analyze's start-up)
if TYPE_CHECKING:
    from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "TraceSummary": "analysis.summary",
    "analyze": "analysis.summary",
    "DEFAULT_RULES": "analysis.classify",
    "KernelClassifier": "analysis.classify",
    "Rule": "analysis.classify",
    "parse_rules": "analysis.classify",
    "rule": "analysis.classify",
    "GpuColumns": "traces.model",
    "GpuEvent": "traces.model",
    "Trace": "traces.model",
    "Window": "traces.model",
    "TraceError": "traces.reader",
    "read_trace": "traces.reader",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'pytest_gpuutil' has no attribute {name!r}")
    __import__(f"{__name__}.{module}")  # importlib.import_module, without importing importlib (and warnings)
    value = getattr(sys.modules[f"{__name__}.{module}"], name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
