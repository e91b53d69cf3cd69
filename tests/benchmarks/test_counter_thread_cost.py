"""benchmarks/checks/counter_thread_cost.py runs once, on a GPU: what can go wrong is checked here first."""
from __future__ import annotations

import importlib
import inspect
from types import SimpleNamespace
from pathlib import Path

import pytest

from pytest_gpuutil.hardware.cupti_pm import PmSamplingSource
from tests.hardware.test_pm_source import fake_cupti  # noqa: F401 - the stand-in libcupti, built once

CHECKS = Path(__file__).resolve().parents[2] / "benchmarks" / "checks"


@pytest.fixture
def check(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(CHECKS))
    return importlib.import_module("counter_thread_cost")


def test_every_variant_asks_for_options_the_source_has(check) -> None:
    """A misspelt option would only fail on the GPU, in the one call that runs it."""
    known = set(inspect.signature(PmSamplingSource).parameters) | {"interval_ms"}
    names = [name for name, _, _ in check.VARIANTS]
    assert len(names) == len(set(names)) and names[0] == "default"
    for name, options, _ in check.VARIANTS:
        assert set(options) <= known, name


def test_the_table_shows_each_stage_and_a_failed_variant(check) -> None:
    doc = {
        "gpu": "NVIDIA H200", "torch": "2.13.0", "date": "2026-11-27",
        "plugin": {"tests": 5, "seconds": 2.0,
                   "counters": {"counters_thread_pct": 3.2, "counters_startup_s": 0.02, "wall_s": 16.0,
                                "counters_thread_startup_s": 0.41, "counters_thread_parts_cpu_s": {"poll": 0.3},
                                "per_test": [{"test": "t0", "sm_pct": 97.0, "tensor_pct": 60.0,
                                              "counters_note": "the hardware counters started 400 ms into it and "
                                                               "cover the rest of it"}]},
                   "default": {"wall_s": 15.9}},
        "startup": {"tests_thread_s": 0.01, "until_sampling_s": 0.42, "thread_startup_s": 0.41,
                    "thread_startup_cpu_s": 0.2, "steps_s": {"initialize": 0.07, "set config": 0.09}},
        "variants": {
            "default": {"start_s": 0.4, "thread_pct": 3.0, "decode_pct": 2.0, "evaluate_pct": 0.5,
                        "python_in_poll_pct": 0.2, "rest_of_thread_pct": 0.3, "polls": 30, "samples_per_poll_median": 20,
                        "decode_wall_ms_median": 6.0, "decode_cpu_ms_median": 5.5, "decode_fit": {"ms_per_100_in_image": 1.25}, "evaluate_us_per_sample": 30.0,
                        "means": {"sm_pct": 97.0, "tensor_pct": 60.0}, "overflows": 0, "error": ""},
            "poll_0.2s": {"error": "PmSamplingError('cuptiPmSamplingDecodeData failed: out of memory')"},
        },
        "skipped": ["idle"],
    }
    text = check.table(doc)
    assert "thread 3.2 % of one core (bar 5)" in text and "start-up 0.020 s on the tests' thread (bar 0.15)" in text
    assert "the thread's own start-up 0.410 s" in text and "sm 97.0 tensor 60.0 [the hardware counters started" in text
    assert "initialize 0.070, set config 0.090" in text
    assert any(line.startswith("default ") and " 3.0 " in line and " 1.25 " in line and "sm 97.0" in line
               for line in text.splitlines())
    assert "poll_0.2s" in text and "out of memory" in text and "skipped (budget): idle" in text


def test_the_decode_fit_finds_a_cost_that_grows_with_the_image(check) -> None:
    log = [(0.0, (2.0 + 0.03 * n) / 1e3, 0.0, 0.0, 20, n) for n in (0, 20, 40, 60, 180)]
    fit = check.decode_fit(log)
    assert fit["ms_at_empty"] == pytest.approx(2.0) and fit["ms_per_100_in_image"] == pytest.approx(3.0)
    assert check.decode_fit(log[:2]) == {"ms_at_empty": None, "ms_per_100_in_image": None}


def test_a_variant_runs_through_on_the_stand_in_libcupti(check, fake_cupti) -> None:  # noqa: F811
    """The variant's own code (the source's options, its poll log, the figures) on a CPU: idle, no torch."""
    torch = SimpleNamespace(cuda=SimpleNamespace(current_device=lambda: 0))
    fake_cupti[1].fake_reset()
    got = check.variant(torch, fake_cupti[0], {"max_samples": 100, "interval_ms": 10.0}, False, 0.35)
    assert got["error"] == "" and got["max_samples"] == 100 and got["interval_ms"] == 10.0
    assert got["polls"] >= 2 and got["samples"] == 0 and got["thread_pct"] >= 0
    assert set(got["decode_fit"]) == {"ms_at_empty", "ms_per_100_in_image"}
    assert "1.25" not in check.table({"variants": {"default": got}})  # renders
