"""(GPU) The findings rules against workloads that have, or lack, each problem by construction.

    python validation/findings_truth.py OUT [--only NAME,NAME] [--parts record,live,cost,plugin,savings]

Each part runs in a fresh process under its own time limit, so one failing leaves the others:

1. ``record``: each workload (``WORKLOADS``: a problem and a healthy control per rule) is warmed up,
   then run under torch.profiler (CUDA activity only) and exported gzip'd to
   OUT/traces/<name>.json.gz (the item-in-loop workload once more with ``enable_cuda_sync_events``,
   for Kineto's ``cuda_sync`` events); the traces kept in ``tests/data/findings/`` come from here;
2. ``live``: the same workloads under the plugin's own CUPTI source (GPU work and the host's waits,
   activity kind 38), one window each, as the continuous capture opens and closes them; each
   window's events and waits, relative to its start, to OUT/live/<name>.json.gz (``{"window_ns",
   "cutoff_ns", "events": [[name, kind, device, stream, start, dur]], "syncs": [[name, start,
   dur]]}``; ``cutoff_ns``: when the closing synchronize began);
3. ``cost``: what kind 38 costs: a launch loop (20k ``add_``, 200 ``.item()``) and a sync loop
   (3,000 ``add_`` + ``.item()``) with no capture, GPU work only, and GPU work and waits,
   interleaved rounds in one process;
4. ``plugin``: the workloads as a pytest suite (built and warmed up in a fixture, the call runs
   the workload) under ``pytest --gpu-util`` (CUPTI) and ``--gpu-util-source torch`` (a
   torch.profiler session per test), each writing gpu_util.json and the HTML report to
   OUT/plugin_<source>/.

5. ``savings`` (only when named in ``--parts``): each saving estimate against the time its fix
   saves (``SAVINGS``: pinned copies, TF32, one sync instead of N, a CUDA graph): the plugin's
   ``saving_ms`` on live CUPTI windows of the problem (median of 3) against the median wall time of
   problem minus fix (7 interleaved rounds); OUT/savings.json ``{"estimates": [{"rule",
   "estimated_ms", "measured_ms", "ratio", "within_2x", ...}]}``, about 30 s; the target is the
   estimate within a factor of 2 of the measured saving (a FAIL line otherwise).

Every trace, live window and plugin record is checked against ``EXPECT`` (the rules each workload
must show and must not show); OUT/summary.json holds the findings, the checks and errors, and a
short summary is printed last (``FAIL`` lines first). Exit 1 when a check failed. Needs this
checkout's package (installed, as ``scripts/device.sh`` does, for the plugin part). About two
minutes on one H100.
"""
from __future__ import annotations

import argparse
import collections
import gzip
import json
import os
import subprocess
import sys
import textwrap
import time
import traceback
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
FIVE = ("pageable-memcpy", "host-sync", "launch-bound", "fp32-matmul", "gpu-idle")

#: name -> (what it does, rules it must show, rules it must not show); "gpu-idle:before" also
#: asks that most of the idle time is before the first kernel
WORKLOADS: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
    "bf16_matmul_loop": ("20 x 8192^3 bf16 matmul, no host syncs", (), FIVE),
    "fp32_matmul": ("20 x 4096^3 fp32 matmul, TF32 off", ("fp32-matmul",), ()),
    "tf32_matmul": ("40 x 4096^3 fp32 matmul, TF32 on", (), ("fp32-matmul",)),
    "fp32_conv": ("20 x Conv2d fp32 forward (128x64x56x56), cuDNN TF32 off", ("fp32-matmul",), ()),
    "tf32_conv": ("40 x Conv2d fp32 forward (128x64x56x56), cuDNN TF32 on", (), ("fp32-matmul",)),
    "pageable_copies": ("8 x (8 MB pageable host->device, 4 x 4096^3 bf16 matmul), 2 x 8 MB device->host",
                        ("pageable-memcpy",), ()),
    "pinned_copies": ("the same with pinned memory and non_blocking copies", (),
                      ("pageable-memcpy", "memcpy-dominant")),
    "small_kernels": ("1000 x add_ on 1024 floats, launched one by one", ("launch-bound",), ()),
    "small_kernels_graph": ("the same 1000 add_ in a CUDA graph, replayed 10 times", (), ("launch-bound",)),
    "large_kernels": ("200 x add_ on 16M floats", (), ("launch-bound",)),
    "item_in_loop": ("100 x (2048^3 bf16 matmul, .sum().item())", ("host-sync",), ()),
    "sync_in_loop": ("100 x (2048^3 bf16 matmul, torch.cuda.synchronize())", ("host-sync",), ()),
    "no_sync_loop": ("100 x 2048^3 bf16 matmul, results kept on the GPU, one .item() at the end", (), FIVE),
    "idle_between": ("10 x (4 x 2048^3 bf16 matmul, host sleeps 2 ms)", ("gpu-idle:between",), ()),
    "idle_before": ("host sleeps 20 ms, then 4 x 2048^3 bf16 matmul", ("gpu-idle:before",), ()),
    "idle_after": ("4 x 2048^3 bf16 matmul, then the host sleeps 20 ms", ("gpu-idle:after",), ()),
}


def workloads(torch: Any) -> dict[str, Callable[[], Callable[[], Any]]]:
    """name -> build() returning the step that is measured (TF32 flags are set by the step itself)."""
    cuda = "cuda"

    def tf32(matmul: bool, conv: bool) -> None:
        torch.backends.cuda.matmul.allow_tf32 = matmul
        torch.backends.cudnn.allow_tf32 = conv

    def matmul_loop(n: int, size: int, dtype: Any, allow: bool = False) -> Callable[[], Callable[[], Any]]:
        def build() -> Callable[[], Any]:
            a = torch.randn(size, size, device=cuda, dtype=dtype)

            def step() -> Any:
                tf32(allow, True)
                for _ in range(n):
                    c = a @ a
                return c
            return step
        return build

    def conv(n: int, allow: bool) -> Callable[[], Callable[[], Any]]:
        def build() -> Callable[[], Any]:
            layer = torch.nn.Conv2d(64, 64, 3, padding=1).to(cuda)
            x = torch.randn(128, 64, 56, 56, device=cuda)

            def step() -> Any:
                tf32(False, allow)
                with torch.no_grad():
                    for _ in range(n):
                        y = layer(x)
                return y
            return step
        return build

    def copies(pinned: bool) -> Callable[[], Callable[[], Any]]:
        def build() -> Callable[[], Any]:
            host = torch.randn(2 << 20)  # 8 MB
            out = torch.empty(2 << 20)
            if pinned:
                host, out = host.pin_memory(), out.pin_memory()
            a = torch.randn(4096, 4096, device=cuda, dtype=torch.bfloat16)
            dev = torch.randn(2 << 20, device=cuda)

            def step() -> None:
                for _ in range(8):
                    moved = host.to(cuda, non_blocking=pinned)
                    for _ in range(4):
                        a @ a
                    moved.mul_(2)
                for _ in range(2):
                    out.copy_(dev, non_blocking=pinned)
                torch.cuda.synchronize()
            return step
        return build

    def small(n: int, elements: int) -> Callable[[], Callable[[], Any]]:
        def build() -> Callable[[], Any]:
            x = torch.zeros(elements, device=cuda)

            def step() -> None:
                for _ in range(n):
                    x.add_(1)
            return step
        return build

    def graphed() -> Callable[[], Any]:
        x = torch.zeros(1024, device=cuda)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                x.add_(1)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(1000):
                x.add_(1)

        def step() -> None:
            for _ in range(10):
                graph.replay()
        return step

    def host_sync(kind: str) -> Callable[[], Callable[[], Any]]:
        def build() -> Callable[[], Any]:
            a = torch.randn(2048, 2048, device=cuda, dtype=torch.bfloat16)

            def step() -> Any:
                values = []
                for _ in range(100):
                    c = a @ a
                    if kind == "item":
                        values.append(c.sum().item())
                    elif kind == "sync":
                        torch.cuda.synchronize()
                return c.sum().item() if kind == "none" else values
            return step
        return build

    def idle(where: str) -> Callable[[], Callable[[], Any]]:
        def build() -> Callable[[], Any]:
            a = torch.randn(2048, 2048, device=cuda, dtype=torch.bfloat16)

            def burst() -> None:
                for _ in range(4):
                    a @ a

            def step() -> None:
                if where == "between":
                    for _ in range(10):
                        burst()
                        time.sleep(0.002)
                elif where == "before":
                    time.sleep(0.02)
                    burst()
                else:
                    burst()
                    torch.cuda.synchronize()
                    time.sleep(0.02)
            return step
        return build

    return {
        "bf16_matmul_loop": matmul_loop(20, 8192, torch.bfloat16),
        "fp32_matmul": matmul_loop(20, 4096, torch.float32, allow=False),
        "tf32_matmul": matmul_loop(40, 4096, torch.float32, allow=True),
        "fp32_conv": conv(20, False),
        "tf32_conv": conv(40, True),
        "pageable_copies": copies(False),
        "pinned_copies": copies(True),
        "small_kernels": small(1000, 1024),
        "small_kernels_graph": graphed,
        "large_kernels": small(200, 16 << 20),
        "item_in_loop": host_sync("item"),
        "sync_in_loop": host_sync("sync"),
        "no_sync_loop": host_sync("none"),
        "idle_between": idle("between"),
        "idle_before": idle("before"),
        "idle_after": idle("after"),
    }


def check(name: str, findings: list[dict[str, Any]]) -> list[str]:
    """What is wrong with a workload's findings against EXPECT ([] when nothing is)."""
    _, must, must_not = WORKLOADS[name.replace("_sync_events", "")]
    by_rule = {f["rule"]: f for f in findings}
    problems = []
    for want in must:
        rule, _, mostly = want.partition(":")
        if rule not in by_rule:
            problems.append(f"no {rule}")
        elif mostly and by_rule[rule].get("evidence", {}).get("mostly") != mostly:
            problems.append(f"{rule} mostly {by_rule[rule].get('evidence', {}).get('mostly')}, not {mostly}")
    problems += [f"false {rule}" for rule in must_not if rule in by_rule]
    return problems


def _selected(torch: Any, only: str) -> dict[str, Callable[[], Callable[[], Any]]]:
    built = workloads(torch)
    names = [n for n in only.split(",") if n] or list(built)
    return {n: built[n] for n in names if n in built}


def trace_facts(path: Path) -> dict[str, Any]:
    """What a recorded trace holds: events per category, the host-side sync-like calls by name, size."""
    doc = json.loads(gzip.decompress(path.read_bytes()))
    events = doc.get("traceEvents", [])
    runtime = collections.Counter(e.get("name") for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver"))
    return {"bytes": path.stat().st_size, "categories": dict(collections.Counter(e.get("cat") for e in events)),
            "runtime_calls": {k: v for k, v in runtime.items() if "ync" in str(k) or "emcpy" in str(k)},
            "cuda_sync": dict(collections.Counter(e.get("name") for e in events if e.get("cat") == "cuda_sync"))}


def _findings_of_trace(path: Path) -> list[dict[str, Any]]:
    sys.path.insert(0, str(REPO))
    from pytest_gpuutil.analysis.findings import find_in_trace
    from pytest_gpuutil.traces.reader import read_trace

    return [f.to_dict() for f in find_in_trace(read_trace(path))]


def record(out: Path, only: str) -> dict[str, Any]:
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.zeros(1, device="cuda")
    folder = out / "traces"
    folder.mkdir(parents=True, exist_ok=True)
    found: dict[str, Any] = {}
    runs = list(_selected(torch, only).items())
    if not only or "item_in_loop" in only:
        runs.append(("item_in_loop_sync_events", workloads(torch)["item_in_loop"]))
    for name, build in runs:
        try:
            step = build()
            step()  # warm-up: libraries, autotuning, the graph's first replay
            torch.cuda.synchronize()
            kwargs: dict[str, Any] = {}
            if name.endswith("_sync_events"):
                kwargs["experimental_config"] = torch._C._profiler._ExperimentalConfig(enable_cuda_sync_events=True)
            with profile(activities=[ProfilerActivity.CUDA], **kwargs) as prof:
                step()
                torch.cuda.synchronize()
            raw = folder / f"{name}.json"
            prof.export_chrome_trace(str(raw))
            path = folder / f"{name}.json.gz"
            path.write_bytes(gzip.compress(raw.read_bytes(), 9))
            raw.unlink()
            findings = _findings_of_trace(path)
            found[name] = {**trace_facts(path), "findings": findings, "problems": check(name, findings)}
        except Exception:  # noqa: BLE001 - the others still record
            found[name] = {"error": traceback.format_exc(limit=4)}
    return found


def live(out: Path, only: str) -> dict[str, Any]:
    import numpy as np
    import torch

    sys.path.insert(0, str(REPO))
    from pytest_gpuutil.analysis.findings import find
    from pytest_gpuutil.capture.cupti import CuptiSource
    from pytest_gpuutil.traces.model import GpuColumns, GpuEvent, SyncColumns, Window

    torch.zeros(1, device="cuda")
    source = CuptiSource(demangle=getattr(torch._C, "_demangle", None), host_syncs=True)
    folder = out / "live"
    folder.mkdir(parents=True, exist_ok=True)
    found: dict[str, Any] = {"cupti_version": source.version, "kinds": list(source.kinds)}
    steps = {}
    for name, build in _selected(torch, only).items():  # built and warmed up before the capture, as fixtures are
        try:
            steps[name] = build()
            steps[name]()
            torch.cuda.synchronize()
        except Exception:  # noqa: BLE001
            found[name] = {"error": traceback.format_exc(limit=4)}
    source.start()
    windows = {}
    for name, step in steps.items():
        try:
            torch.cuda.synchronize()
            start = source.now()
            step()
            cutoff = source.now()
            torch.cuda.synchronize()
            windows[name] = (start, cutoff, source.now())
        except Exception:  # noqa: BLE001
            found[name] = {"error": traceback.format_exc(limit=4)}
    columns, dropped = source.drain()
    syncs = source.drain_syncs()
    source.stop()
    found["dropped"] = dropped
    starts = np.asarray(columns.starts_ns, dtype=np.int64)
    ends = starts + np.asarray(columns.durs_ns, dtype=np.int64)
    sync_starts = np.asarray(syncs.starts_ns, dtype=np.int64)
    sync_ends = sync_starts + np.asarray(syncs.durs_ns, dtype=np.int64)
    for name, (start, cutoff, end) in windows.items():
        try:
            inside = np.flatnonzero((ends > start) & (starts <= end))
            waits = np.flatnonzero((sync_ends > start) & (sync_starts <= end))
            events = [[columns.names[i], columns.kinds[i], int(columns.devices[i]), int(columns.streams[i]),
                       int(starts[i] - start), int(ends[i] - starts[i])] for i in inside.tolist()]
            wait_rows = [[syncs.names[i], int(sync_starts[i] - start), int(sync_ends[i] - sync_starts[i])]
                         for i in waits.tolist()]
            doc = {"name": name, "window_ns": int(end - start), "cutoff_ns": int(cutoff - start),
                   "events": events, "syncs": wait_rows}
            path = folder / f"{name}.json.gz"
            path.write_bytes(gzip.compress(json.dumps(doc).encode(), 9))
            cols = GpuColumns.from_events(GpuEvent(*e) for e in events)
            waits_cols = SyncColumns([w[0] for w in wait_rows], [w[1] for w in wait_rows], [w[2] for w in wait_rows])
            findings = [f.to_dict() for f in find(cols, Window(0, doc["window_ns"], "test_call"), syncs=waits_cols,
                                                   sync_end_ns=doc["cutoff_ns"])]
            found[name] = {"bytes": path.stat().st_size, "window_ms": (end - start) / 1e6, "events": len(events),
                           "syncs": dict(collections.Counter(w[0] for w in wait_rows)), "findings": findings,
                           "problems": check(name, findings)}
        except Exception:  # noqa: BLE001
            found[name] = {"error": traceback.format_exc(limit=4)}
    return found


def cost(out: Path, rounds: int = 7) -> dict[str, Any]:
    import statistics

    import torch

    sys.path.insert(0, str(REPO))
    from pytest_gpuutil.capture.cupti import ENABLED_KINDS, KIND_SYNCHRONIZATION, CuptiSource

    x = torch.zeros(1024, device="cuda")

    def launch_loop() -> None:
        for i in range(20_000):
            x.add_(1)
            if i % 100 == 0:
                x[0].item()

    def sync_loop() -> None:
        for _ in range(3_000):
            x.add_(1)
            x[0].item()

    source = CuptiSource(demangle=getattr(torch._C, "_demangle", None), host_syncs=True)
    variants = {"none": None, "gpu": ENABLED_KINDS, "gpu+sync": ENABLED_KINDS + (KIND_SYNCHRONIZATION,)}
    times: dict[str, dict[str, list[float]]] = {loop: {v: [] for v in variants} for loop in ("launch", "sync")}
    for loop_name, loop in (("launch", launch_loop), ("sync", sync_loop)):
        for _ in range(2):  # warm-up rounds, not kept
            loop()
        torch.cuda.synchronize()
        for _ in range(rounds):
            for variant, kinds in variants.items():
                if kinds is not None:
                    source.kinds = kinds
                    source.start()
                began = time.perf_counter()
                loop()
                torch.cuda.synchronize()
                times[loop_name][variant].append(time.perf_counter() - began)
                if kinds is not None:
                    source.stop()
                    source.drain()
                    source.drain_syncs()
    return {"rounds": rounds,
            "median_ms": {loop: {v: statistics.median(t) * 1000 for v, t in per.items()} for loop, per in times.items()},
            "all_ms": {loop: {v: [round(s * 1000, 2) for s in t] for v, t in per.items()} for loop, per in times.items()}}


SUITE = '''
import sys

import pytest
import torch

sys.path.insert(0, {repo!r})
from validation.findings_truth import WORKLOADS, workloads  # noqa: E402

BUILT = workloads(torch)


@pytest.fixture
def step(request):
    built = BUILT[request.param]()
    built()  # warm-up, outside the measured call
    torch.cuda.synchronize()
    return built


@pytest.mark.parametrize("step", {names!r}, indirect=True)
def test_workload(step):
    step()
'''


def plugin(out: Path, only: str) -> dict[str, Any]:
    suite = out / "suite"
    suite.mkdir(parents=True, exist_ok=True)
    names = [n for n in only.split(",") if n] or list(WORKLOADS)
    (suite / "test_findings_workloads.py").write_text(textwrap.dedent(SUITE).format(repo=str(REPO), names=names))
    found: dict[str, Any] = {}
    for source in ("cupti", "torch"):
        folder = out / f"plugin_{source}"
        cmd = [sys.executable, "-m", "pytest", str(suite), "-q", "-p", "no:cacheprovider", "--rootdir", str(suite),
               "--gpu-util", f"--gpu-util-dir={folder}", f"--gpu-util-source={source}", "--gpu-util-html", "-rA"]
        began = time.perf_counter()
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=100, cwd=suite)
            (out / f"plugin_{source}.log").write_text(done.stdout + done.stderr)
            doc = json.loads((folder / "gpu_util.json").read_text())
            tests = {}
            for record in doc["tests"]:
                name = record["test"].split("[")[-1].rstrip("]")
                findings = record.get("findings")
                tests[name] = {"findings": findings, "busy_pct": record.get("busy_pct"), "note": record.get("note"),
                               "problems": ["findings not looked for"] if findings is None else check(name, findings)}
            found[source] = {"rc": done.returncode, "seconds": round(time.perf_counter() - began, 1), "tests": tests,
                             "findings_section": [line for line in done.stdout.splitlines() if "findings" in line][:3]}
        except Exception:  # noqa: BLE001 - the other source still runs
            found[source] = {"error": traceback.format_exc(limit=4)}
    return found



#: the savings cases: (rule, what the problem does, what the fix does)
SAVINGS = {
    "pageable-memcpy": ("8 x (32 MB pageable host->device copy, 2 x 4096^3 bf16 matmul)",
                        "the same from pinned memory, non_blocking"),
    "fp32-matmul": ("10 x 4096^3 fp32 matmul, TF32 off", "the same with TF32 on"),
    "host-sync": ("200 x (2048^3 bf16 matmul, .sum().item())", "the sums kept on the GPU, one .item() at the end"),
    "launch-bound": ("2000 x add_ on 1024 floats, launched one by one", "the same 2000 add_ replayed from a CUDA graph"),
}


def saving_cases(torch: Any) -> dict[str, tuple[Callable[[], Any], Callable[[], Any]]]:
    """rule -> (problem step, fixed step), both built (the savings part warms them up)."""
    cuda = "cuda"
    cases: dict[str, tuple[Callable[[], Any], Callable[[], Any]]] = {}

    def tf32(on: bool) -> None:
        torch.backends.cuda.matmul.allow_tf32 = on
        torch.backends.cudnn.allow_tf32 = on

    a = torch.randn(4096, 4096, device=cuda, dtype=torch.bfloat16)
    pageable = [torch.randn(8 * 1024 * 1024) for _ in range(8)]  # 32 MB each
    pinned = [t.pin_memory() for t in pageable]

    def copies(host: list, blocking: bool) -> Callable[[], Any]:
        def step() -> Any:
            out = None
            for t in host:
                out = t.to(cuda, non_blocking=not blocking)
                a @ a
                a @ a
            return out
        return step

    cases["pageable-memcpy"] = (copies(pageable, True), copies(pinned, False))
    x = torch.randn(4096, 4096, device=cuda)

    def matmuls(allow: bool) -> Callable[[], Any]:
        def step() -> Any:
            tf32(allow)
            for _ in range(10):
                x @ x
            tf32(False)
        return step

    cases["fp32-matmul"] = (matmuls(False), matmuls(True))
    b = torch.randn(2048, 2048, device=cuda, dtype=torch.bfloat16)

    def syncs(each: bool) -> Callable[[], Any]:
        def step() -> Any:
            total = torch.zeros((), device=cuda)
            for _ in range(200):
                s = (b @ b).sum()
                if each:
                    s.item()
                total += s
            return total.item()
        return step

    cases["host-sync"] = (syncs(True), syncs(False))
    small = torch.zeros(1024, device=cuda)

    def eager() -> None:
        for _ in range(2000):
            small.add_(1)

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        eager()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        eager()
    cases["launch-bound"] = (eager, graph.replay)
    return cases


def savings(out: Path, only: str, rounds: int = 7) -> dict[str, Any]:
    """Each estimate against the time its fix saves: the plugin's saving_ms on a live CUPTI window of
    the problem (the median of ``rounds``), and the median wall time of problem and fix (interleaved)."""
    import statistics

    import numpy as np
    import torch

    sys.path.insert(0, str(REPO))
    from pytest_gpuutil.analysis.finding_records import Floor, split_by_floor
    from pytest_gpuutil.analysis.findings import find
    from pytest_gpuutil.capture.cupti import CuptiSource
    from pytest_gpuutil.machine.peaks import findings_figures as device_figures
    from pytest_gpuutil.traces.model import Window

    torch.zeros(1, device="cuda")
    name = torch.cuda.get_device_name(0)
    cases = {rule: steps for rule, steps in saving_cases(torch).items() if not only or rule in only.split(",")}
    for problem, fix in cases.values():  # warm-up: libraries, allocator, pinned buffers
        for step in (problem, fix, problem, fix):
            step()
        torch.cuda.synchronize()
    walls: dict[str, tuple[list[float], list[float]]] = {rule: ([], []) for rule in cases}
    for _ in range(rounds):
        for rule, (problem, fix) in cases.items():
            for step, into in ((problem, walls[rule][0]), (fix, walls[rule][1])):
                torch.cuda.synchronize()
                began = time.perf_counter()
                step()
                torch.cuda.synchronize()
                into.append((time.perf_counter() - began) * 1000)
    source = CuptiSource(demangle=getattr(torch._C, "_demangle", None), host_syncs=True)
    source.start()
    windows: dict[str, list[tuple[int, int, int]]] = {rule: [] for rule in cases}
    for _ in range(3):
        for rule, (problem, _) in cases.items():
            torch.cuda.synchronize()
            start = source.now()
            problem()
            cutoff = source.now()
            torch.cuda.synchronize()
            windows[rule].append((start, cutoff, source.now()))
    columns, dropped = source.drain()
    waits = source.drain_syncs()
    source.stop()
    starts = np.asarray(columns.starts_ns, dtype=np.int64)
    ends = starts + np.asarray(columns.durs_ns, dtype=np.int64)
    wait_starts = np.asarray(waits.starts_ns, dtype=np.int64)
    wait_ends = wait_starts + np.asarray(waits.durs_ns, dtype=np.int64)
    context = device_figures(name)
    estimates = []
    for rule, spans in windows.items():
        found_ms, others = [], []
        for start, cutoff, end in spans:
            inside = np.flatnonzero((ends > start) & (starts <= end)).tolist()
            inside_waits = np.flatnonzero((wait_ends > start) & (wait_starts <= end)).tolist()
            findings = find(columns.take(inside), Window(start, end, "test_call"), syncs=waits.take(inside_waits),
                            sync_end_ns=cutoff, context=context)
            reported, _ = split_by_floor(findings, Floor(0.0, 0.0))
            found_ms.append(next((f.saving_ms for f in reported if f.rule == rule), 0.0))
            others.append({f.rule: f.saving_ms for f in reported if f.rule != rule})
        problem_ms, fix_ms = statistics.median(walls[rule][0]), statistics.median(walls[rule][1])
        estimated, measured = statistics.median(found_ms), problem_ms - fix_ms
        ratio = estimated / measured if measured > 0 else None
        estimates.append({"rule": rule, "problem": SAVINGS[rule][0], "fix": SAVINGS[rule][1],
                          "estimated_ms": round(estimated, 3), "measured_ms": round(measured, 3),
                          "problem_ms": round(problem_ms, 3), "fix_ms": round(fix_ms, 3),
                          "ratio": None if ratio is None else round(ratio, 3),
                          "within_2x": ratio is not None and 0.5 <= ratio <= 2.0,
                          "estimates_ms": found_ms, "other_findings_ms": others[0] if others else {}})
    return {"device": name, "device_figures": context, "dropped": dropped, "rounds": rounds, "estimates": estimates}

PARTS = {"record": (record, 120), "live": (live, 60), "cost": (lambda out, only: cost(out), 60), "plugin": (plugin, 220),
         "savings": (savings, 90)}
#: the parts run when --parts is not given (savings: its own device step, findings_savings)
DEFAULT_PARTS = ("record", "live", "cost", "plugin")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--only", default="")
    parser.add_argument("--parts", default=",".join(DEFAULT_PARTS))
    parser.add_argument("--part", choices=tuple(PARTS), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    if args.part:  # a child: one part, its result as JSON
        (out / f"{args.part}.json").write_text(json.dumps(PARTS[args.part][0](out, args.only), indent=1, default=str))
        return 0
    summary: dict[str, Any] = {"argv": argv}
    try:
        import torch

        summary.update(torch=torch.__version__, cuda=torch.version.cuda, gpu=torch.cuda.get_device_name(0))
    except Exception as exc:  # noqa: BLE001
        summary["torch_error"] = repr(exc)
    parts = [p for p in args.parts.split(",") if p in PARTS]
    for part in parts:
        began = time.perf_counter()
        limit = PARTS[part][1]
        try:
            done = subprocess.run([sys.executable, __file__, str(out), "--only", args.only, "--part", part],
                                  capture_output=True, text=True, timeout=limit, env=dict(os.environ, PYTHONUNBUFFERED="1"))
            result_file = out / f"{part}.json"
            summary[part] = json.loads(result_file.read_text()) if result_file.exists() else None
            summary[f"{part}_rc"] = done.returncode
            if done.returncode:
                summary[f"{part}_stderr"] = done.stderr[-3000:]
        except subprocess.TimeoutExpired as exc:
            summary[f"{part}_error"] = f"timed out after {limit} s: {str(exc.stderr or '')[-2000:]}"
        summary[f"{part}_seconds"] = round(time.perf_counter() - began, 1)
        (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    lines, failures = _summary_lines(summary, parts)
    text = "\n".join(failures + lines) + "\n"
    (out / "summary.txt").write_text(text)
    print(text, end="")
    return 1 if failures else 0


def _summary_lines(summary: dict[str, Any], parts: list[str]) -> tuple[list[str], list[str]]:
    lines = [f"{summary.get('gpu')} torch {summary.get('torch')}"]
    failures = []

    def judge(where: str, name: str, facts: Any) -> None:
        if not isinstance(facts, dict) or "problems" not in facts:
            if isinstance(facts, dict) and "error" in facts:
                failures.append(f"FAIL {where} {name}: error {facts['error'].strip().splitlines()[-1]}")
            return
        rules = [f["rule"] for f in facts.get("findings") or ()]
        if facts["problems"]:
            failures.append(f"FAIL {where} {name}: {'; '.join(facts['problems'])} (found {rules})")
        else:
            lines.append(f"ok   {where} {name}: {rules}")

    for name, facts in (summary.get("record") or {}).items():
        judge("trace", name, facts)
    for name, facts in (summary.get("live") or {}).items():
        judge("live", name, facts)
    for source, run in (summary.get("plugin") or {}).items():
        if "error" in run:
            failures.append(f"FAIL plugin {source}: {run['error'].strip().splitlines()[-1]}")
            continue
        lines.append(f"plugin {source}: rc {run['rc']} in {run['seconds']} s; {run['findings_section']}")
        for name, facts in run["tests"].items():
            judge(f"plugin-{source}", name, facts)
    for case in (summary.get("savings") or {}).get("estimates") or ():
        line = (f"saving {case['rule']}: estimated {case['estimated_ms']} ms, measured {case['measured_ms']} ms "
                f"(problem {case['problem_ms']} ms, fix {case['fix_ms']} ms)")
        (lines if case["within_2x"] else failures).append(("ok   " if case["within_2x"] else "FAIL ") + line)
    if summary.get("cost"):
        lines.append(f"kind 38 cost, median ms: {summary['cost']['median_ms']}")
    for part in parts:
        if summary.get(f"{part}_rc") or summary.get(f"{part}_error"):
            failures.append(f"FAIL part {part}: rc {summary.get(f'{part}_rc')} {summary.get(f'{part}_error', '')} "
                            f"{str(summary.get(f'{part}_stderr', ''))[-800:]}")
    return lines, failures


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
