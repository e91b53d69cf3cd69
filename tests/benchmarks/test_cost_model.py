"""The cost model's fit, suites and deadline, on the CPU (synthetic timings; no timing is asserted)."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmarks import cost_model

TRUTH = {"plain": (0.0, 1200e-6, 7.0e-6), "default": (0.08, 40e-6, 1.2e-6), "lean": (0.05, 25e-6, 0.9e-6),
         "counters": (0.2, 65e-6, 1.3e-6)}


def suites(tmp_path: Path) -> list[cost_model.Suite]:
    return cost_model.write_suites(tmp_path / "suites", launch_tests=10)


def synthetic(found: list[cost_model.Suite], start: float, per_test: float, per_kernel: float, rounds: int,
              noise_s: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    clean = np.array([start + s.tests * per_test + s.kernels * per_kernel for s in found])
    return clean + rng.normal(0.0, noise_s, size=(rounds, len(found)))


def test_noiseless_timings_give_back_their_start_up_and_slopes_exactly(tmp_path: Path):
    found = suites(tmp_path)
    fitted = cost_model.fit_rounds(found, synthetic(found, 0.08, 40e-6, 1.2e-6, 4, 0.0, 0))
    assert fitted["startup_s"] == pytest.approx(0.08, abs=1e-9)
    assert fitted["per_test_us"] == pytest.approx(40.0, abs=1e-6)
    assert fitted["per_kernel_us"] == pytest.approx(1.2, abs=1e-6)
    for key, (lo, hi) in fitted["ci95"].items():
        assert lo == pytest.approx(hi, abs=1e-6), key  # nothing to resample


@pytest.mark.parametrize("seed", range(5))
def test_noisy_rounds_are_recovered_and_the_intervals_cover_the_truth(tmp_path: Path, seed: int):
    found = suites(tmp_path)
    values = synthetic(found, 0.08, 40e-6, 1.2e-6, rounds=12, noise_s=0.01, seed=seed)
    fitted = cost_model.fit_rounds(found, values, bootstrap=2000, seed=seed)
    ci = fitted["ci95"]
    assert ci["startup_s"][0] <= 0.08 <= ci["startup_s"][1] or abs(fitted["startup_s"] - 0.08) < 0.01
    assert ci["per_test_us"][0] <= 40 <= ci["per_test_us"][1] or abs(fitted["per_test_us"] - 40) < 10
    assert ci["per_kernel_us"][0] <= 1.2 <= ci["per_kernel_us"][1] or abs(fitted["per_kernel_us"] - 1.2) < 0.1
    # the intervals are about the noise's size, not degenerate and not absurd
    assert 0 < ci["per_test_us"][1] - ci["per_test_us"][0] < 60
    assert 0 < ci["per_kernel_us"][1] - ci["per_kernel_us"][0] < 0.5


def test_interval_coverage_over_many_synthetic_runs_is_near_95_percent(tmp_path: Path):
    found = suites(tmp_path)
    covered = 0
    trials = 100
    for seed in range(trials):
        values = synthetic(found, 0.08, 40e-6, 1.2e-6, rounds=10, noise_s=0.02, seed=100 + seed)
        lo, hi = cost_model.fit_rounds(found, values, bootstrap=400, seed=seed)["ci95"]["per_test_us"]
        covered += lo <= 40 <= hi
    # a bootstrap over 10 rounds is a little narrow; far below 80% would be a wrong interval
    assert covered >= 80


def test_one_round_has_a_fit_and_no_interval(tmp_path: Path):
    found = suites(tmp_path)
    fitted = cost_model.fit_rounds(found, synthetic(found, 0.1, 50e-6, 1e-6, 1, 0.0, 0))
    assert fitted["ci95"] is None and fitted["per_test_us"] == pytest.approx(50)


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def fake_runner(clock: FakeClock, seconds: dict[str, float], noise: float = 0.0, seed: int = 0, fail_at: int = -1):
    """Runs that take span = the config's model, and advance the clock by 2 s + that."""
    rng = np.random.default_rng(seed)
    calls = []

    def run(suite: cost_model.Suite, config: str, left: float) -> dict:
        calls.append((suite.name, config))
        if len(calls) == fail_at:
            raise RuntimeError(f"{suite.name} {config} exited 1: boom")
        plain = TRUTH["plain"]
        base = plain[0] + suite.tests * plain[1] + suite.kernels * plain[2]
        extra = 0.0
        if config != "plain":
            start, per_test, per_kernel = TRUTH[config]
            extra = start + suite.tests * per_test + suite.kernels * per_kernel
        span = base + extra + rng.normal(0.0, noise)
        clock.t += 2.0 + span + seconds.get(config, 0.0)
        collection = 0.2e-3 * suite.tests  # pytest's collection: left out of the model's basis (run_s)
        return {"run_s": span, "cpu_s": span * 0.9, "tests_s": span - 0.3, "collection_s": collection,
                "span_s": span + collection,
                "wall_s": span + collection + 1.5, "session_s": round(span, 2),
                "startup_s": TRUTH[config][0] if config != "plain" else None, "measure_s": 0.01,
                "counters_thread_cpu_pct": 3.0 if config == "counters" else None}

    run.calls = calls  # type: ignore[attr-defined]
    return run


def test_measure_and_document_give_each_configs_model_beyond_plain(tmp_path: Path):
    found = suites(tmp_path)
    clock = FakeClock()
    rounds = cost_model.measure(found, list(cost_model.CONFIGS), fake_runner(clock, {}), deadline_s=1e9,
                                clock=clock, max_rounds=3)
    assert len(rounds.runs) == 3 and rounds.stopped == "3 rounds"
    doc = cost_model.document(rounds, found, list(cost_model.CONFIGS), bootstrap=200, meta={"gpu": "fake"})
    json.dumps(doc)  # JSON-able
    assert set(doc["configs"]) == {"default", "lean", "counters"} and doc["rounds"] == 3 and doc["gpu"] == "fake"
    for name in ("default", "lean", "counters"):
        start, per_test, per_kernel = TRUTH[name]
        got = doc["configs"][name]
        assert got["startup_s"] == pytest.approx(start, abs=1e-9)
        assert got["per_test_us"] == pytest.approx(per_test * 1e6, abs=1e-6)
        assert got["per_kernel_us"] == pytest.approx(per_kernel * 1e6, abs=1e-6)
        assert set(got["ci95"]) == {"startup_s", "per_test_us", "per_kernel_us"}
    assert doc["plain_per_test_us"] == pytest.approx(1200, abs=1e-6)
    assert doc["plain_per_kernel_us"] == pytest.approx(7.0, abs=1e-6)
    assert doc["counters_thread_cpu_pct"] == 3.0
    assert doc["configs"]["lean"]["args"] == ["--gpu-util", "--gpu-util-findings=off", "--gpu-util-memory=off"]
    assert doc["basis"] == "run_s"
    assert set(doc["bases"]) == {"run_s", "cpu_s", "tests_s", "span_s", "wall_s", "session_s"}
    # the whole span holds the collection's 0.2 ms a test, plain or not: beyond plain it cancels
    assert doc["bases"]["span_s"]["default"]["per_test_us"] == pytest.approx(TRUTH["default"][1] * 1e6, abs=1e-6)
    assert doc["bases"]["span_s"]["plain"]["per_test_us"] == pytest.approx(1200 + 200, abs=1e-6)
    text = cost_model.table(doc)
    assert "default" in text and "µs per kernel" in text and "3.0% of one core" in text


def test_rounds_stop_before_one_would_pass_the_deadline(tmp_path: Path):
    found = suites(tmp_path)
    clock = FakeClock()
    run = fake_runner(clock, {})
    one_round = 0.0
    probe = FakeClock()
    cost_model.measure(found, list(cost_model.CONFIGS), fake_runner(probe, {}), deadline_s=1e9, clock=probe, max_rounds=1)
    one_round = probe.t
    written = []
    rounds = cost_model.measure(found, list(cost_model.CONFIGS), run, deadline_s=3.5 * one_round, clock=clock,
                                after_round=lambda r: written.append(len(r.runs)))
    assert len(rounds.runs) == 3 and written == [1, 2, 3]  # a fourth would end after 4 x one round
    assert rounds.stopped.startswith("deadline") and clock.t <= 3.5 * one_round


def test_the_first_round_always_runs_and_a_run_past_the_deadline_ends_the_rounds(tmp_path: Path):
    found = suites(tmp_path)
    clock = FakeClock()
    rounds = cost_model.measure(found, ["plain", "default"], fake_runner(clock, {}), deadline_s=5.0, clock=clock)
    assert rounds.runs == [] and "incomplete" in rounds.stopped  # the deadline came inside the first round


def test_a_failing_run_drops_its_round_and_keeps_the_earlier_ones(tmp_path: Path):
    found = suites(tmp_path)
    clock = FakeClock()
    per_round = len(found) * len(cost_model.CONFIGS)
    rounds = cost_model.measure(found, list(cost_model.CONFIGS), fake_runner(clock, {}, fail_at=per_round + 3),
                                deadline_s=1e9, clock=clock)
    assert len(rounds.runs) == 1 and "boom" in rounds.stopped and rounds.errors
    doc = cost_model.document(rounds, found, list(cost_model.CONFIGS), bootstrap=10)
    assert doc["configs"]["default"]["ci95"] is None  # one round: a fit, no interval


def test_each_round_shuffles_the_order_and_runs_every_suite_in_every_config(tmp_path: Path):
    found = suites(tmp_path)
    clock = FakeClock()
    run = fake_runner(clock, {})
    cost_model.measure(found, list(cost_model.CONFIGS), run, deadline_s=1e9, clock=clock, max_rounds=2)
    per_round = len(found) * len(cost_model.CONFIGS)
    first, second = run.calls[:per_round], run.calls[per_round:]
    assert sorted(first) == sorted(second) == sorted((s.name, c) for s in found for c in cost_model.CONFIGS)
    assert first != second


def test_the_suites_hold_the_tests_and_kernels_they_say(tmp_path: Path):
    found = suites(tmp_path)
    assert [(s.name, s.tests, s.kernels) for s in found] == [
        ("small_100", 100, 500), ("small_300", 300, 1500), ("small_1000", 1000, 5000),
        ("launch_200", 10, 2020), ("launch_2000", 10, 20020), ("launch_20000", 10, 200020)]
    for suite in (found[0], found[4]):
        out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                              str(suite.path), "--rootdir", str(suite.path.parent)],
                             capture_output=True, text=True, cwd=tmp_path, timeout=120)
        assert f"{suite.tests} tests collected" in out.stdout, out.stdout[-2000:]
        assert "COSTSPAN" in out.stdout  # the conftest stamps the span, and the collection within it
        collection = float(re.search(r"^COSTCOLLECTION ([0-9.]+)$", out.stdout, re.M).group(1))
        span = float(re.search(r"^COSTSPAN ([0-9.]+)$", out.stdout, re.M).group(1))
        assert 0 < collection < span
        assert 0 < float(re.search(r"^COSTCPU ([0-9.]+)$", out.stdout, re.M).group(1))
        assert float(re.search(r"^COSTTESTS ([0-9.]+)$", out.stdout, re.M).group(1)) == 0.0  # no test ran
    assert "range(20000)" in found[5].path.read_text()


def test_the_conftest_counts_the_garbage_collectors_work_among_the_tests_only(tmp_path: Path):
    cost_model.write_suites(tmp_path, small=(), launch=(), device="cpu")
    (tmp_path / "test_gc.py").write_text("import gc\n\ngc.disable()\n\n\ndef test_collects():\n    gc.collect()\n"
                                         "    gc.collect(0)\n")
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_gc.py", "--rootdir",
                          str(tmp_path)], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    got = cost_model.parse_run(out.stdout, 1.0)
    # automatic collections are off from the import on: the test's own two, one of them full
    assert (got["gc_collections"], got["gc_full"]) == (2, 1), out.stdout[-2000:]
    assert got["gc_s"] > 0


def test_one_runs_output_is_read(tmp_path: Path):
    output = ("....\n300 passed in 1.23s\n--- gpu-util ---\nprofiler start-up 0.052 s (CUPTI), not charged to any test\n"
              "measurement cost 0.041 s (0.030 s with the tests, the rest at the end)\n"
              "hardware counters start-up 0.300 s, not charged\n\nCOSTSPAN 2.345678\nCOSTCOLLECTION 0.345678\n"
              "COSTCPU 1.5\nCOSTTESTS 1.25\n")
    doc = {"totals": {"counters_thread_cpu_s": 0.05, "test_s": 1.0}, "machine_info": {"gpu_model": "H", "torch": "2.x"}}
    got = cost_model.parse_run(output, 4.5, doc)
    assert got["span_s"] == 2.345678 and got["session_s"] == 1.23 and got["startup_s"] == 0.052
    assert got["collection_s"] == 0.345678 and got["run_s"] == pytest.approx(2.0)  # the model's basis: less collection
    assert got["cpu_s"] == 1.5 and got["tests_s"] == 1.25
    assert got["measure_s"] == 0.041 and got["counters_startup_s"] == 0.3 and got["wall_s"] == 4.5
    assert got["counters_thread_cpu_pct"] == pytest.approx(5.0) and got["gpu"] == "H" and got["torch"] == "2.x"


def test_dry_run_writes_the_suites_and_runs_nothing(tmp_path: Path, capsys):
    assert cost_model.main(["--out", str(tmp_path / "out"), "--dry-run", "--launch-tests", "4"]) == 0
    text = capsys.readouterr().out
    assert "launch_20000" in text and "80008 kernels" in text and not (tmp_path / "out" / "cost.json").exists()


SELF_US = {"default": 35.0, "lean": 20.0, "counters": 45.0}


def acceptance_runner(clock: FakeClock):
    """fake_runner's runs, with the plugin's self-timed work (measure_s) of SELF_US a test."""
    inner = fake_runner(clock, {})

    def run(suite: cost_model.Suite, config: str, left: float) -> dict:
        got = inner(suite, config, left)
        got["measure_s"] = None if config == "plain" else 0.004 + suite.tests * SELF_US[config] * 1e-6
        if config == "default":  # of it torch's calls at the edges, 20 µs a test (what parse_run reads of the document)
            got["torch_calls_s"] = 0.001 + suite.tests * 20e-6
            got["own_beyond_torch_s"] = got["measure_s"] - got["torch_calls_s"]
        return got

    run.calls = inner.calls  # type: ignore[attr-defined]
    return run


def test_the_acceptance_shape_gives_each_configs_self_and_slope_per_test_with_their_range(tmp_path: Path):
    found = cost_model.write_suites(tmp_path / "s", small=(500, 5000), launch=(200, 10000), launch_tests=10)
    plan = cost_model._plan(["lean=small", "counters=small_min"], found, None)  # type: ignore[arg-type]
    assert plan == {"lean": ["small_500", "small_5000"], "counters": ["small_500"]}
    clock = FakeClock()
    run = acceptance_runner(clock)
    rounds = cost_model.measure(found, list(cost_model.CONFIGS), run, deadline_s=1e9, clock=clock, max_rounds=5, plan=plan)
    assert len(rounds.runs) == 5
    assert {(s, c) for s, c in run.calls if c == "lean"} == {("small_500", "lean"), ("small_5000", "lean")}
    assert {s for s, c in run.calls if c == "counters"} == {"small_500"}
    busy = [{"counters_thread_pct": 4.0, "counters_startup_s": 0.12, "counters": ["cupti_pm_sampling"],
             "counters_thread_parts_cpu_s": {"poll": 0.2, "energy": 0.1, "process": 0.01}},
            {"counters_thread_pct": 6.0, "counters_startup_s": 0.14}]
    doc = cost_model.document(rounds, found, list(cost_model.CONFIGS), bootstrap=50, busy=busy)
    json.dumps(doc)
    default, lean, counters = (doc["configs"][c] for c in ("default", "lean", "counters"))
    assert default["self_per_test_us"]["median"] == pytest.approx(35.0) and default["self_per_test_us"]["rounds"] == 5
    assert default["self_per_test_us"]["range"] == [pytest.approx(35.0), pytest.approx(35.0)]
    assert default["slope_per_test_us"]["median"] == pytest.approx(TRUTH["default"][1] * 1e6 + 5 * TRUTH["default"][2] * 1e6)
    assert lean["self_per_test_us"]["median"] == pytest.approx(20.0)
    assert default["torch_calls_per_test_us"]["median"] == pytest.approx(20.0)
    assert default["own_beyond_torch_per_test_us"]["median"] == pytest.approx(15.0)
    assert lean["torch_calls_per_test_us"] is None  # its runs' documents without the figure: none
    assert default["per_kernel_us"] == pytest.approx(1.2) and default["startup_s"] == pytest.approx(0.08)
    # lean ran the small suites only: its kernels follow its tests, so no µs a kernel
    assert lean["per_kernel_us"] is None and lean["suites"] == ["small_500", "small_5000"]
    assert counters["self_per_test_us"] is None and counters["startup_s"] is None  # one size: no slope, no fit
    assert doc["counters_thread_pct_busy"] == 5.0 and doc["counters_busy"]["thread_pct_range"] == [4.0, 6.0]
    assert len(doc["acceptance"]) == 7
    met = {row["what"]: row["met"] for row in doc["acceptance"]}
    assert met["default: the plugin's self-timed work per test (median)"] is True
    assert met["counters: sampling thread on the busy suite (% of one core)"] is True  # 5.0 <= 5
    assert met["lean: the plugin's self-timed work per test (median)"] is True
    assert met["counters: their start-up, more than the default's"] is True  # 0.13 s, the busy runs' median
    text = cost_model.acceptance_table(doc)
    assert "<= 50 µs" in text and "self_per_test_us" in text and "range" in text
    assert "torch_calls_per_test_us median     20.0" in text and "own_beyond_torch_per_test_us median     15.0" in text
    assert "(one suite: no fit)" in cost_model.table(doc)


def test_a_run_documents_measurement_cost_and_counters_thread_are_read():
    doc = {"totals": {"measure_ms": 123.0, "counters_thread_cpu_s": 0.5, "test_s": 10.0, "counters_thread_pct": 4.5,
                      "counters_thread_parts_cpu_s": {"poll": 0.3}, "counters": ["cupti_pm_sampling"],
                      "measure_unseen_ms": 3.0, "torch_calls_ms": 20.0}}
    got = cost_model.parse_run("measurement cost 0.100 s\n", 1.0, doc)
    assert got["measure_s"] == pytest.approx(0.120)  # the document's field, not the summary's rounded line
    assert got["torch_calls_s"] == pytest.approx(0.020) and got["own_beyond_torch_s"] == pytest.approx(0.100)
    assert got["counters_thread_pct"] == 4.5 and got["counters_thread_cpu_pct"] == pytest.approx(5.0)
    assert got["counters_thread_parts_cpu_s"] == {"poll": 0.3} and got["counters"] == ["cupti_pm_sampling"]


def test_the_acceptance_preset_plans_its_suites_and_options_after_it_win(tmp_path: Path, capsys):
    assert cost_model.main(["--out", str(tmp_path), "--acceptance", "--dry-run", "--rounds", "3"]) == 0
    text = capsys.readouterr().out
    assert "small_5000" in text and "launch_10000" in text and "busy_matmul" in text and "3 rounds" in text
    line = next(l for l in text.splitlines() if l.startswith("small_5000"))
    assert "lean" in line and "counters" not in line
    with pytest.raises(SystemExit):
        cost_model.main(["--out", str(tmp_path), "--dry-run", "--suites-of", "lean=small_7"])
    with pytest.raises(SystemExit):
        cost_model.main(["--out", str(tmp_path), "--dry-run", "--sizes", "0,5"])
