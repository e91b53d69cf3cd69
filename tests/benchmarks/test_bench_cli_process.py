"""The whole-process benchmark's helpers (no timing is asserted: timings flake)."""
from __future__ import annotations

import gzip
import sys

import pytest

from benchmarks import bench_cli_process, process_timer
from tests.helpers import DATA

GROW = "x = bytearray(64 << 20); x[::4096] = b'1' * len(x[::4096])"  # touches 64 MiB


def test_run_process_measures_wall_time_peak_memory_and_exit_code():
    wall, rss_mb, code = process_timer.run_process([sys.executable, "-c", GROW])
    assert code == 0 and wall > 0 and rss_mb >= 64
    assert process_timer.run_process([sys.executable, "-c", "raise SystemExit(3)"])[2] == 3


def test_the_timer_process_counts_each_child_from_a_small_start(tmp_path):
    """A child's peak RSS counts from its fork: from this big test process it would start here."""
    commands = {"small": [sys.executable, "-c", "pass"], "grow": [sys.executable, "-c", GROW]}
    runs = bench_cli_process.measure(commands, 2, env={"PATH": "/usr/bin:/bin"})
    assert runs["small"]["peak_rss_mb"] < 40 <= 64 <= runs["grow"]["peak_rss_mb"]


def test_run_alternating_gives_every_command_its_runs():
    commands = {"a": [sys.executable, "-c", "pass"], "b": [sys.executable, "-c", "raise SystemExit(1)"]}
    runs = process_timer.run_alternating(commands, 2)
    assert {name: [code for _, _, code in found] for name, found in runs.items()} == {"a": [0, 0], "b": [1, 1]}


def test_stats_best_and_median():
    found = bench_cli_process.stats([(0.3, 100.0, 0), (0.1, 120.0, 0), (0.2, 90.0, 0)])
    assert (found["best_s"], found["median_s"], found["peak_rss_mb"]) == (0.1, 0.2, 100.0)


def test_commands_time_the_console_script_the_seed_and_an_older_checkout(tmp_path):
    cmds = bench_cli_process.commands("big.json", "tiny.json.gz", before=str(tmp_path))
    assert cmds["ours"][-4:] == ["analyze", "big.json", "--format", "json"]
    assert cmds["seed"][-1] == "big.json" and "seed_compute_utilization" in cmds["seed"][2]
    assert cmds["before"][3:] == [str(tmp_path), "analyze", "big.json", "--format", "json"]
    assert "before" not in bench_cli_process.commands("big.json", "tiny.json.gz")


def test_plain_copy_decompresses_a_gzipd_trace(tmp_path):
    copy = bench_cli_process.plain_copy(str(DATA / "bmm_bf16.json.gz"), str(tmp_path))
    assert copy.endswith("bmm_bf16.json")
    assert open(copy, "rb").read() == gzip.decompress((DATA / "bmm_bf16.json.gz").read_bytes())
    assert bench_cli_process.plain_copy(copy, str(tmp_path)) == copy


def side(best: float, rss: float) -> dict:
    return {"best_s": best, "median_s": best * 1.1, "wall_s": [best], "peak_rss_mb": rss, "maxrss_mb": [rss]}


@pytest.mark.parametrize("ours, met", [(0.14, (True, True, True, True)), (0.3, (False, False, False, False))])
def test_build_report_says_which_goals_are_met(tmp_path, ours, met):
    trace = tmp_path / "big.json"
    trace.write_text("{}")
    sides = {"ours": side(ours, 100 if ours < 0.2 else 150), "seed": side(1.0, 220.0),
             "startup_tiny": side(0.06 if ours < 0.2 else 0.09, 15.0), "startup_tiny_table": side(0.09, 19.0),
             "python_floor": side(0.02, 10.0), "before": side(0.3, 106.0), "before_startup_tiny": side(0.13, 30.0)}
    data, markdown, table = bench_cli_process.build_report(str(trace), sides, {"bytecode_cache": "on"})
    verdict = data["verdict"]
    assert (verdict["time_ratio_here_ok"], verdict["time_ratio_gpu_host_ok"], verdict["peak_rss_ok"],
            verdict["startup_ok"]) == met
    assert data["time_ratio_best"] == pytest.approx(ours)
    assert "before (--before checkout)" in markdown and "0.300" in table
