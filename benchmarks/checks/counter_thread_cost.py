"""(GPU) What the counters' thread costs on GPU-busy tests, and where: poll (CUPTI calls) / decode / evaluate.

    python benchmarks/checks/counter_thread_cost.py --out DIR [--budget-s 88] [--seconds 2] [--tests 5]

Issue 41's counters line: the thread <= 5 % of one core on 2-s bf16 matmul tests, their start-up
<= 0.15 s more than the default's. Three stages, each written to DIR/counter_thread_cost.json as
it ends (a stage cut by the budget leaves the others' figures):

1. ``plugin``: the busy suite of benchmarks/cost_model.py (``--tests`` tests of ``--seconds`` s of
   bf16 matmuls) in a fresh pytest process, ``--gpu-util --gpu-util-counters=auto`` (GPM where the
   GPU has it), then ``=cupti`` (PM sampling: its cost and per-test figures beside auto's): the thread's
   % of one core and its CPU by part, the counters' start-up as the summary reports it (the tests'
   thread) and on the thread, each test's SM / tensor figures and note; at the very end, if the
   budget allows, plain ``--gpu-util`` on the same suite (its wall time beside the counters' run).
2. ``startup``: in this process (activity capture on, as under --gpu-util), the plugin's way of
   opening PM sampling (choose.open_counters: started on the sampler's thread): the tests' thread's
   share, the thread's, and CUPTI's steps.
3. ``variants``: one PM sampling source at a time, started on the calling thread (CUPTI's steps
   timed), the sampler's thread polling it alone (no NVML) while this thread runs bf16 matmuls
   (``idle``: sleeps) for ``--variant-seconds``: the thread's % of one core split into DecodeData,
   the per-sample evaluation (GetSampleInfo + EvaluateToGpuValues and the columns), the Python
   around them and the rest of the thread; per poll the decode's wall and CPU; errors (CUPTI's
   out-of-memory when polls come too seldom), overflows; the mean of each figure over the samples
   (the variants must agree on a steady matmul), and a fit of each decode's CPU against the
   samples already in the image (``/100img``: ms more per 100 samples held; if large, a smaller
   image is the cure). Variants: the default (5 ms, 64 MB hardware buffer, 0.1 s polls, a 2-s
   image: 400 samples), the old 2,000-sample image, a 100-sample one, one initialised after every
   poll (``reset%``: the initialisations' CPU, ``reset_ms_each`` in the JSON), the default on an idle GPU,
   0.2 / 0.05 s polls, 16 MB, 256 MB (0.25 s polls) and 512 MB (0.5 s polls) hardware buffers,
   10 ms samples (the last may be left out when the budget runs short: ``skipped``).

Prints a table; the JSON has everything. Needs CUDA, libcupti (torch's) and profiling permission.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

#: (name, PmSamplingSource arguments, busy GPU), the most telling first (the budget may cut the last)
VARIANTS: tuple[tuple[str, dict[str, Any], bool], ...] = (
    ("default", {}, True),
    ("image_2000", {"max_samples": 2000}, True),  # the image before this change: is decode's CPU its fill?
    ("image_100", {"max_samples": 100}, True),
    ("reset_each_poll", {"reset_fill": 0.0}, True),  # an empty image for every decode: what an init costs
    ("idle", {}, False),
    ("poll_0.2s", {"max_poll_s": 0.2}, True),
    ("poll_0.05s", {"max_poll_s": 0.05}, True),
    ("hw_16mb", {"hardware_buffer_bytes": 16 << 20}, True),
    ("hw_256mb_poll_0.25s", {"hardware_buffer_bytes": 256 << 20, "max_poll_s": 0.25}, True),
    ("hw_512mb_poll_0.5s", {"hardware_buffer_bytes": 512 << 20, "max_poll_s": 0.5}, True),  # cupti-python's default buffer
    ("interval_10ms", {"interval_ms": 10.0}, True),
)


def decode_fit(log: list[tuple]) -> dict[str, Optional[float]]:
    """Decode CPU (ms) against the samples already in the image: does each decode walk what it holds?"""
    points = [(float(entry[5]), 1e3 * entry[1]) for entry in log if len(entry) > 5]
    if len(points) < 4 or len({x for x, _ in points}) < 2:
        return {"ms_at_empty": None, "ms_per_100_in_image": None}
    n = len(points)
    mx, my = sum(x for x, _ in points) / n, sum(y for _, y in points) / n
    slope = sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)
    return {"ms_at_empty": my - slope * mx, "ms_per_100_in_image": 100 * slope}


def _median(values: list[float]) -> Optional[float]:
    return statistics.median(values) if values else None


def _p90(values: list[float]) -> Optional[float]:
    return sorted(values)[int(0.9 * (len(values) - 1))] if values else None


# -- stage 1: the plugin on the busy suite ---------------------------------------------------------

PLUGIN_CONFIGS = {"counters": ["--gpu-util-counters=auto"], "default": [], "gpm": ["--gpu-util-counters=gpm"],
                  "cupti": ["--gpu-util-counters=cupti"]}


def plugin_stage(work: Path, tests: int, seconds: float, budget_end: float, device: str = "cuda",
                 configs: tuple[str, ...] = ("counters", "default"), got: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    from benchmarks.cost_model import write_busy_suite

    (work / "suites").mkdir(parents=True, exist_ok=True)
    suite = write_busy_suite(work / "suites", tests, seconds, device)
    got = got if got is not None else {"tests": tests, "seconds": seconds}
    for config in configs:
        extra = PLUGIN_CONFIGS[config]
        out = work / f"out_{config}"
        cmd = [sys.executable, "-m", "pytest", str(suite.path), "-q", "-p", "no:cacheprovider", "--rootdir",
               str(suite.path.parent), "--gpu-util", f"--gpu-util-dir={out}", *extra]
        left = budget_end - time.monotonic()
        if left < tests * seconds + 5:
            got[config] = {"error": f"skipped: {left:.0f} s of the budget left"}
            continue
        began = time.perf_counter()
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, cwd=work, timeout=left)
        except subprocess.TimeoutExpired:
            got[config] = {"error": f"timed out after {left:.0f} s"}
            continue
        run: dict[str, Any] = {"wall_s": time.perf_counter() - began, "rc": res.returncode,
                               "tail": (res.stdout + res.stderr).strip().splitlines()[-12:]}
        try:
            doc = json.loads((out / "gpu_util.json").read_text())
        except (OSError, ValueError) as exc:
            run["error"] = f"no gpu_util.json: {exc}"
            got[config] = run
            continue
        totals = doc.get("totals") or {}
        for key in ("counters", "counters_fallback", "counters_startup_s", "counters_thread_startup_s",
                    "counters_thread_pct", "counters_thread_cpu_s",
                    "counters_thread_wall_s", "counters_thread_parts_cpu_s", "counters_samples", "startup_s",
                    "measure_ms", "test_s", "span_s", "session_s"):
            if key in totals:
                run[key] = totals[key]
        run["per_test"] = [{k: t.get(k) for k in ("test", "sm_pct", "tensor_pct", "dram_bw_pct", "counters_note")}
                           for t in (doc.get("tests") or []) if isinstance(t, dict)]
        got[config] = run
    return got


# -- stages 2 and 3: in this process ---------------------------------------------------------------

def matmuls(torch: Any, seconds: float) -> None:
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    b = torch.randn_like(a)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(10):
            c = a @ b
        float(c[0, 0])


def startup_stage(torch: Any) -> dict[str, Any]:
    from pytest_gpuutil.hardware.choose import cuda_device, open_counters

    began = time.perf_counter()
    opened = open_counters("auto", 5.0, cuda_device(torch))
    returned = time.perf_counter() - began
    got: dict[str, Any] = {"tests_thread_s": returned, "reported_startup_s": opened.startup_s,
                           "fallback": opened.fallback}
    if opened.capture is None:
        return got
    sampler = opened.capture.sampler
    deadline = time.monotonic() + 30
    while getattr(sampler.source, "starting", False) and time.monotonic() < deadline:
        time.sleep(0.01)
    got["until_sampling_s"] = time.perf_counter() - began
    source = sampler.source
    got["thread_startup_s"] = getattr(source, "startup_s", None)
    got["thread_startup_cpu_s"] = getattr(source, "startup_cpu_s", None)
    got["reasons"] = list(getattr(source, "reasons", []))
    got["steps_s"] = dict(getattr(source, "startup_steps", {}) or {})
    got["description"] = opened.describe()[0] if opened.describe else opened.description
    sampler.stop()
    return got


def variant(torch: Any, library: str, options: dict[str, Any], busy: bool, seconds: float) -> dict[str, Any]:
    import numpy as np

    from pytest_gpuutil.hardware.cupti_pm import PmSamplingSource
    from pytest_gpuutil.hardware.sampler import CounterSampler

    options = dict(options)
    interval_ms = options.pop("interval_ms", 5.0)
    pm = PmSamplingSource(library, device_index=torch.cuda.current_device(), interval_ns=int(interval_ms * 1e6), **options)
    pm.poll_log = []
    sampler = CounterSampler(pm)
    began = time.perf_counter()
    sampler.start()
    got: dict[str, Any] = {"start_s": time.perf_counter() - began, "steps_s": dict(pm.startup_steps),
                           "max_samples": pm.max_samples, "hardware_buffer_mb": pm.hardware_buffer_bytes >> 20,
                           "poll_interval_s": pm.poll_interval_s, "interval_ms": interval_ms, "busy": busy}
    if busy:
        matmuls(torch, seconds)
    else:
        time.sleep(seconds)
    decode_cpu, evaluate_cpu, poll_cpu, log = pm.decode_cpu_s, pm.evaluate_cpu_s, pm.poll_cpu_s, list(pm.poll_log)
    reset_cpu, resets = pm.reset_cpu_s, pm.image_resets
    samples_seen = pm.samples
    sampler.stop()
    cost = sampler.cost()
    wall = cost.wall_s or 1e-9
    samples, _, _ = sampler.collected()
    got.update({
        "thread_pct": cost.thread_pct, "wall_s": cost.wall_s, "thread_cpu_s": cost.thread_cpu_s,
        "decode_pct": 100 * decode_cpu / wall, "evaluate_pct": 100 * evaluate_cpu / wall,
        "reset_pct": 100 * reset_cpu / wall, "reset_ms_each": 1e3 * reset_cpu / max(1, resets - 1),
        "python_in_poll_pct": 100 * (poll_cpu - decode_cpu - evaluate_cpu - reset_cpu) / wall,
        "rest_of_thread_pct": 100 * (cost.thread_cpu_s - poll_cpu) / wall,
        "polls": len(log), "decodes": pm.decodes, "samples": samples_seen,
        "evaluate_us_per_sample": 1e6 * evaluate_cpu / max(1, samples_seen),
        "decode_wall_ms_median": 1e3 * (_median([p[0] for p in log]) or 0),
        "decode_wall_ms_p90": 1e3 * (_p90([p[0] for p in log]) or 0),
        "decode_cpu_ms_median": 1e3 * (_median([p[1] for p in log]) or 0),
        "samples_per_poll_median": _median([float(p[4]) for p in log]),
        "in_image_median": _median([float(p[5]) for p in log]),
        "decode_fit": decode_fit(log),
        "overflows": pm.overflows, "image_resets": pm.image_resets, "error": sampler.error,
        "means": {name: (float(np.nanmean(values)) if len(values) and np.isfinite(values).any() else None)
                  for name, values in samples.values.items()},
        "period_ns": pm.period_ns,
    })
    return got


def in_process(budget_end: float, seconds: float, only: Optional[list[str]], write: Any, doc: dict[str, Any]) -> None:
    import torch

    from pytest_gpuutil.capture.cupti import CuptiSource
    from pytest_gpuutil.machine.loaded_libraries import find_loaded_library

    torch.ones(1, device="cuda").sum().item()
    activity = CuptiSource(demangle=torch._C._demangle)
    activity.start()  # as under --gpu-util (and it loads libcupti)
    doc["gpu"], doc["torch"] = torch.cuda.get_device_name(0), torch.__version__
    matmuls(torch, 0.3)  # warm-up: cuBLAS's handles and kernels
    activity.drain()
    try:
        doc["startup"] = startup_stage(torch)
    except Exception as exc:  # noqa: BLE001 - a diagnostic: say it and go on
        doc["startup"] = {"error": repr(exc)}
    write()
    library = find_loaded_library()
    doc["library"] = library
    for name, options, busy in VARIANTS:
        if only and name not in only:
            continue
        if time.monotonic() + seconds + 3 > budget_end:
            doc.setdefault("skipped", []).append(name)
            continue
        try:
            doc["variants"][name] = variant(torch, library, options, busy, seconds)
        except Exception as exc:  # noqa: BLE001
            doc["variants"][name] = {"error": repr(exc)}
        activity.drain()
        write()
    activity.stop()


def _f(value: Any, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def table(doc: dict[str, Any]) -> str:
    lines = [f"{doc.get('gpu')}, torch {doc.get('torch')}, {doc.get('date')}"]
    plugin = doc.get("plugin") or {}
    c, d = plugin.get("counters") or {}, plugin.get("default") or {}
    if c:
        lines.append(f"plugin, busy suite ({plugin.get('tests')} x {plugin.get('seconds')} s bf16 matmuls): thread "
                     f"{_f(c.get('counters_thread_pct'))} % of one core (bar 5), parts CPU s {c.get('counters_thread_parts_cpu_s')}; "
                     f"start-up {_f(c.get('counters_startup_s'), 3)} s on the tests' thread (bar 0.15); wall {_f(c.get('wall_s'), 2)} s "
                     f"against the default's {_f(d.get('wall_s'), 2)} s; {c.get('counters')}")
        lines.append(f"  the thread's own start-up {_f(c.get('counters_thread_startup_s'), 3)} s; per test: " + "; ".join(
            f"sm {_f(t.get('sm_pct'))} tensor {_f(t.get('tensor_pct'))}{' [' + t['counters_note'] + ']' if t.get('counters_note') else ''}"
            for t in c.get("per_test", [])))
    p = plugin.get("cupti") or {}
    if p:
        lines.append(f"  --gpu-util-counters=cupti on the same suite: thread {_f(p.get('counters_thread_pct'))} % of one core; "
                     f"{p.get('counters')}; per test: " + "; ".join(
                         f"sm {_f(t.get('sm_pct'))} tensor {_f(t.get('tensor_pct'))} dram {_f(t.get('dram_bw_pct'))}"
                         for t in p.get("per_test", [])))
    s = doc.get("startup") or {}
    if s:
        lines.append(f"open_counters: tests' thread {_f(s.get('tests_thread_s'), 3)} s, sampling after {_f(s.get('until_sampling_s'), 3)} s "
                     f"(thread {_f(s.get('thread_startup_s'), 3)} s, CPU {_f(s.get('thread_startup_cpu_s'), 3)} s); steps "
                     + ", ".join(f"{k} {v:.3f}" for k, v in (s.get("steps_s") or {}).items()) + (f"; error {s['error']}" if s.get("error") else ""))
    lines.append(f"{'variant':22} {'start s':>7} {'thread%':>7} {'decode%':>7} {'eval%':>6} {'reset%':>6} {'py%':>5} {'rest%':>5} "
                 f"{'polls':>5} {'smp/poll':>8} {'dec ms':>6} {'dec cpu':>7} {'/100img':>7} {'eval us':>7}  means / errors")
    for name, v in (doc.get("variants") or {}).items():
        if "thread_pct" not in v:
            lines.append(f"{name:22} {v.get('error')}")
            continue
        means = " ".join(f"{k.replace('_pct', '')} {_f(m)}" for k, m in (v.get("means") or {}).items())
        lines.append(f"{name:22} {v['start_s']:7.3f} {v['thread_pct']:7.1f} {v['decode_pct']:7.1f} {v['evaluate_pct']:6.1f} "
                     f"{_f(v.get('reset_pct')):>6} "
                     f"{v['python_in_poll_pct']:5.1f} {v['rest_of_thread_pct']:5.1f} {v['polls']:5d} {_f(v['samples_per_poll_median'], 0):>8} "
                     f"{v['decode_wall_ms_median']:6.1f} {v['decode_cpu_ms_median']:7.1f} "
                     f"{_f((v.get('decode_fit') or {}).get('ms_per_100_in_image'), 2):>7} {v['evaluate_us_per_sample']:7.1f}  {means}"
                     + (f"  overflows {v['overflows']}" if v.get("overflows") else "") + (f"  ERROR {v['error']}" if v.get("error") else ""))
    if doc.get("skipped"):
        lines.append(f"skipped (budget): {', '.join(doc['skipped'])}")
    if doc.get("error"):
        lines.append(f"error: {doc['error']}")
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    import datetime as dt

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--budget-s", type=float, default=88.0, help="seconds from the start by which stages end")
    parser.add_argument("--tests", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--variant-seconds", type=float, default=3.0)
    parser.add_argument("--variant", action="append", choices=[v[0] for v in VARIANTS], help="only these (repeatable)")
    parser.add_argument("--no-plugin", action="store_true", help="skip the pytest runs")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    budget_end = time.monotonic() + args.budget_s
    doc: dict[str, Any] = {"date": dt.date.today().isoformat(), "budget_s": args.budget_s, "variants": {}}

    def write() -> None:
        (args.out / "counter_thread_cost.json").write_text(json.dumps(doc, indent=1, default=str) + "\n")
        (args.out / "counter_thread_cost.txt").write_text(table(doc) + "\n")

    def plugin(configs: tuple[str, ...], until: float) -> None:
        if args.no_plugin:
            return
        with tempfile.TemporaryDirectory(prefix="counter_thread_") as work:
            try:
                doc["plugin"] = plugin_stage(Path(work), args.tests, args.seconds, until, configs=configs,
                                             got=doc.get("plugin"))
            except Exception as exc:  # noqa: BLE001
                doc.setdefault("plugin", {})[f"error_{configs[0]}"] = repr(exc)
        write()

    # the acceptance's run first (auto: GPM where the GPU has it), then PM sampling's on the same suite
    # (its cost and its per-test figures beside GPM's); the default's (a span to compare with) last
    plugin(("counters", "cupti"), budget_end - 30)
    try:
        in_process(budget_end - (0 if args.no_plugin else args.tests * args.seconds + 12), args.variant_seconds,
                   args.variant, write, doc)
    except Exception as exc:  # noqa: BLE001 - the figures so far are kept
        doc["error"] = repr(exc)
    plugin(("default",), budget_end)
    write()
    print(table(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
