"""benchmarks/diagnostics/hook_timer.py (every part it times exists, a real run prints them) and flush_cost.py."""
from __future__ import annotations

import importlib
import json
import os
import re
from pathlib import Path

import pytest

from tests.helpers import SYNTHETIC_CONFTEST

DIAGNOSTICS = Path(__file__).resolve().parents[2] / "benchmarks" / "diagnostics"


@pytest.fixture
def hook_timer(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(DIAGNOSTICS))
    return importlib.import_module("hook_timer")


def test_every_method_it_times_is_still_there(hook_timer) -> None:
    """A renamed method would drop out of the figures without a word: name them all here."""
    for module, cls, names in hook_timer.METHODS:
        owner = getattr(importlib.import_module(module), cls)
        assert [n for n in names if n not in vars(owner)] == [], f"{module}.{cls}"


def test_a_run_prints_each_part_with_its_calls(pytester: pytest.Pytester, hook_timer,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makeconftest(SYNTHETIC_CONFTEST)
    pytester.makepyfile(test_three="""
import pytest

@pytest.mark.parametrize("i", range(3))
def test_t(gpu, i):
    gpu.run("nvjet_sm90_tst", 100_000)
""")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(DIAGNOSTICS), os.environ.get("PYTHONPATH")])))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "hook_timer", "--gpu-util", "-s")
    result.assert_outcomes(passed=3)
    line = re.search(r"^HOOKTIME (\{.*\})$", result.stdout.str(), re.M)
    times = json.loads(line.group(1))
    for name in ("test function", "whole test protocol", "hook pytest_runtest_call", "Measurement.begin",
                 "Measurement.end", "Measuring.ready"):
        calls, seconds, median = times[name]
        assert calls >= 3 and seconds >= median >= 0, name


def test_flush_cost_times_both_shapes(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """benchmarks/diagnostics/flush_cost.py runs the flush's two analysis steps on both shapes."""
    monkeypatch.syspath_prepend(str(DIAGNOSTICS))
    flush_cost = importlib.import_module("flush_cost")
    assert flush_cost.main(["--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"small +attribution +[0-9.]+ ms +findings +[0-9.]+ ms", out)
    assert re.search(r"launch_bound +attribution", out)
