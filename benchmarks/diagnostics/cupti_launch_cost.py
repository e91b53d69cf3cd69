"""(GPU) What CUPTI's activity tracing adds to each kernel launch, each configuration in a fresh process.

    python benchmarks/diagnostics/cupti_launch_cost.py --out DIR [--rounds 3] [--launches 20000]

The floor under ``--gpu-util``'s cost on a launch-bound suite: the driver's work per traced launch,
which no Python on the plugin's side can remove. Each configuration runs in its own process (so an
earlier configuration cannot leave CUPTI's state behind), configurations interleaved over
``--rounds``; a process times ``x.add_(1)`` on 256 floats, ``--launches`` in a row then a
synchronize, 5 loops, and the small overhead suite's test body (ones, mul, add, sum, item), 1,000
in a row, 5 loops, and prints the medians (and minima) over the processes, in microseconds per
launch / per body:

- ``plain``: CUPTI never touched;
- ``kernels``: the plugin's CUPTI source with concurrent-kernel records only;
- ``kernels_memcpy``, ``kernels_memset``: with memcpy (host/device and peer) or memset records too;
- ``gpu_work``: kernels, memcpy and memset (``--gpu-util-findings=off``);
- ``gpu_work_syncs``: and the host's waits from activity kind 38 (the default before the callbacks);
- ``gpu_work_callbacks``: the host's waits from CUPTI's callbacks at the synchronizing calls only
  (``capture/host_waits.py``: the default with findings on).

Writes DIR/cupti_launch_cost.json and prints a table.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ("plain", "kernels", "kernels_memcpy", "kernels_memset", "gpu_work", "gpu_work_syncs", "gpu_work_callbacks")


def one_process(config: str, launches: int) -> dict[str, float]:
    sys.path.insert(0, str(ROOT))
    import torch

    from gpu_path_costs import loop_us  # this folder (the script's own) is on sys.path

    torch.ones(1, device="cuda").sum().item()
    source = None
    if config != "plain":
        from pytest_gpuutil.capture import cupti

        source = cupti.CuptiSource(demangle=torch._C._demangle, host_syncs=config.startswith("gpu_work_"),
                                   waits_from_callbacks=config == "gpu_work_callbacks")
        only = {"kernels": (), "kernels_memcpy": (cupti.KIND_MEMCPY, cupti.KIND_MEMCPY2),
                "kernels_memset": (cupti.KIND_MEMSET,)}.get(config)
        if only is not None:
            source.kinds = (cupti.KIND_CONCURRENT_KERNEL, *only)
        source.start()
        if config == "gpu_work_callbacks" and source.host_waits != "callbacks":
            raise SystemExit(f"no callbacks: {source.host_waits_note or 'capture/_waits.c not built'}")
    x = torch.zeros(256, device="cuda")

    def body() -> None:
        t = torch.ones(1024, device="cuda")
        (t * 3 + 1).sum().item()

    def per_call_us(function, count: int) -> float:
        return loop_us(function, count, torch, after_round=source.drain if source is not None else (lambda: None))

    per_call_us(lambda: x.add_(1), 2000)  # warm-up
    got = {"launch_us": per_call_us(lambda: x.add_(1), launches), "small_test_us": per_call_us(body, 1000)}
    if source is not None:
        source.stop()
    return got


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--launches", type=int, default=20000)
    parser.add_argument("--one", choices=CONFIGS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(one_process(args.one, args.launches)))
        return 0
    runs: dict[str, list[dict[str, float]]] = {c: [] for c in CONFIGS}
    for _ in range(args.rounds):
        for config in CONFIGS:
            out = subprocess.run([sys.executable, __file__, "--one", config, "--launches", str(args.launches)],
                                 capture_output=True, text=True, timeout=120)
            if out.returncode:
                print(config, "failed:", out.stderr.strip().splitlines()[-1:])
                continue
            runs[config].append(json.loads(out.stdout.strip().splitlines()[-1]))
    table = {c: {**{k: statistics.median(r[k] for r in got) for k in ("launch_us", "small_test_us")},
                 **{f"{k}_min": min(r[k] for r in got) for k in ("launch_us", "small_test_us")}}
             for c, got in runs.items() if got}
    doc = {"rounds": args.rounds, "launches": args.launches, "runs": runs, "median": table}
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "cupti_launch_cost.json").write_text(json.dumps(doc, indent=1))
    plain = table.get("plain")
    print(f"medians (and minima) over {args.rounds} processes per configuration, interleaved")
    print(f"{'config':16} {'launch us':>10} {'x plain':>8} {'min':>6} {'x plain':>8} {'small test us':>14} {'x plain':>8} "
          f"{'min':>6} {'x plain':>8}")
    for config, got in table.items():
        ratio = (lambda k: got[k] / plain[k]) if plain else (lambda k: float("nan"))
        print(f"{config:16} " + " ".join(f"{got[k]:{w}.2f} {ratio(k):8.3f}" for k, w in
                                         (("launch_us", 10), ("launch_us_min", 6), ("small_test_us", 14),
                                          ("small_test_us_min", 6))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
