"""(CPU) Pool the rounds of several bench_overhead.py runs: each configuration against plain.

    python benchmarks/pool_overhead.py overhead.json [overhead.json ...] [--json OUT]

A device host's plain runs of one suite scatter by a quarter from run to run, so a handful of
rounds cannot tell a 5 % cost; runs of the same suites on the same machine and package, taken in
separate device calls, can be pooled. A round pairs each configuration with the plain run of its
own round (configurations were interleaved), so the per-round ratio is (seconds - start-up) /
plain, as bench_overhead.py computes it; per suite and configuration this prints the rounds, the
median of those ratios with the lowest and highest, and the ratio of the medians (over the
rounds the configuration ran in). Start-ups
(the profiler's, the counters', a floor probe's) are subtracted as the bench does.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any


def _configs(suite: dict[str, Any]) -> dict[str, tuple[list[float], list[float]]]:
    """Per configuration of one suite in one file: (seconds, start-ups) by round."""
    found = {"gpu_util": (suite["gpu_util_s"], suite["startup_s"])}
    for name, variant in suite.get("variants", {}).items():
        found[name] = (variant["s"], variant["startup_s"])
    return found


def pool(documents: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per suite, per configuration: rounds, per-round ratios, and their summary."""
    ratios: dict[str, dict[str, list[float]]] = {}
    net: dict[str, dict[str, list[float]]] = {}
    #: per suite and configuration, the plain runs of the rounds it ran in (its ratio of medians)
    paired_plain: dict[str, dict[str, list[float]]] = {}
    plains: dict[str, list[float]] = {}
    for doc in documents:
        for suite_name, suite in doc["suites"].items():
            plain = suite["plain_s"]
            plains.setdefault(suite_name, []).extend(plain)
            for config, (seconds, startups) in _configs(suite).items():
                rounds = min(len(plain), len(seconds))  # a run cut short mid-round
                for i in range(rounds):
                    spent = seconds[i] - (startups[i] or 0.0)
                    ratios.setdefault(suite_name, {}).setdefault(config, []).append(spent / plain[i])
                    net.setdefault(suite_name, {}).setdefault(config, []).append(spent)
                    paired_plain.setdefault(suite_name, {}).setdefault(config, []).append(plain[i])
    table: dict[str, dict[str, dict[str, Any]]] = {}
    for suite_name, by_config in ratios.items():
        plain_median = statistics.median(plains[suite_name])
        table[suite_name] = {"plain": {"rounds": len(plains[suite_name]), "median_s": plain_median,
                                       "min_s": min(plains[suite_name]), "max_s": max(plains[suite_name])}}
        for config, values in by_config.items():
            table[suite_name][config] = {
                "rounds": len(values), "median_ratio": statistics.median(values), "lowest": min(values),
                "highest": max(values),
                "ratio_of_medians": statistics.median(net[suite_name][config]) / statistics.median(paired_plain[suite_name][config]),
            }
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--json", type=Path, help="also write the table here")
    args = parser.parse_args(argv)
    documents = []
    for path in args.files:
        try:
            documents.append(json.loads(path.read_text()))
        except (OSError, ValueError) as exc:
            print(f"pool_overhead: {path}: cannot be read as bench_overhead.py's JSON ({exc})", file=sys.stderr)
            return 2
    table = pool(documents)
    print(f"{len(documents)} run(s); per-round ratio (seconds - start-up) / plain of the same round")
    print(f"{'suite':13} {'config':15} {'rounds':>6} {'median':>7} {'lowest':>7} {'highest':>7} {'med/med':>7}")
    for suite_name, by_config in table.items():
        p = by_config["plain"]
        print(f"{suite_name:13} {'plain':15} {p['rounds']:6d}   {p['median_s']:.2f} s ({p['min_s']:.2f}-{p['max_s']:.2f} s)")
        for config, row in by_config.items():
            if config != "plain":
                print(f"{suite_name:13} {config:15} {row['rounds']:6d} {row['median_ratio']:7.3f} {row['lowest']:7.3f} "
                      f"{row['highest']:7.3f} {row['ratio_of_medians']:7.3f}")
    if args.json:
        args.json.write_text(json.dumps(table, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
