"""(GPU) ``-p columnar_floor_plugin``: the least a columnar per-test path can do and still give issue 41's
per-test files, self-timed the way the acceptance times ours (``COLUMNAR_MODE=default|lean``).

A lower bound for the design issue 41 asks for, written as lean as this project knows how, and run
by ``floor_probe.py`` beside the bare floor and ours:

- inside each test's call, exactly the bare floor's calls (torch's synchronize and CUPTI's clock
  at both edges; in ``default`` the allocator's peaks and counts reset before and its one read
  after), the window's edges and peak appended to lists;
- at each teardown report, the node id and the call's outcome appended to lists, and a flush every
  100 tests (our default policy's count when it was first measured; 1,000 since);
- a flush: CUPTI's records drained (the plugin's own ``CuptiSource``), each kernel's window by one
  ``searchsorted``, busy time, kernel counts, per-category and per-(window, kernel) sums by
  ``bincount``, then each test's record dict with the run document's 44 keys (its top three
  kernels, categories and memory as the document writes them), one JSON line each appended to the
  spool by msgspec, and its CSV row (the 31 columns) kept;
- the session's end: the last flush, ``gpu_util.json`` (the spooled lines reused as raw JSON) and
  ``gpu_util.csv``, and one summary line of the run's totals.

Left out, so that the figure stays a floor: findings, idle gaps, kernel names' demangling, the memcpy
share, the union of overlapping kernels (busy time is a sum here), children, counters, JUnit
properties, history, the HTML page and every object a hook or a limit would ask for. What it prints: ``FLOOR_OWN_S <s> FLOOR_TESTS <n>``, as
the bare floor plugin does, and ``COLUMNAR_PARTS in_test=<s> reports=<s> flush=<s> end=<s>`` (its
own seconds by part: the calls in the test, the report hook less its flushes, the flushes, the end).
"""
from __future__ import annotations

import csv
import inspect
import os
import time
from pathlib import Path
from typing import Any, Optional

import pytest

_WRAPPER = {"wrapper": True} if "wrapper" in inspect.signature(pytest.hookimpl).parameters else {"hookwrapper": True}
FLUSH_EVERY = 100
MB = 1024.0 * 1024.0
CSV_HEADER = ("test,outcome,wall_ms,gpu_busy_ms,busy_pct,mm_conv_pct,attention_pct,communication_pct,memcpy_pct,"
              "kernel_count,measure_ms,peak_alloc_mb,peak_reserved_mb,leaked_mb,alloc_retries,ooms,top_kernel,"
              "devices,worker,findings,sm_pct,tensor_pct,dram_bw_pct,occupancy_pct,fp16_pct,fp32_pct,fp64_pct,"
              "energy_j,avg_power_w,counters_source,counters_note").split(",")


def required_calls() -> tuple[Any, Any, Any, Any, Any, Any]:
    """What a measured test must call, as both floors call it (this plugin and floor_probe.py's bare one):
    ``(source, now, sync, reset, reset_counts, stats)``: CUPTI started (the plugin's own ``CuptiSource``),
    its clock, torch's synchronize, the allocator's peak and count resets and its statistics read. Without
    CUDA (a CPU run: the tests), stand-ins and ``source`` False."""
    import torch

    if not torch.cuda.is_available():
        stats = {"allocated_bytes": {"all": {"peak": 0}}, "reserved_bytes": {"all": {"peak": 0}}}
        return False, time.perf_counter_ns, (lambda: None), (lambda device: None), (lambda device: None), \
            (lambda device: stats)
    from pytest_gpuutil.capture.cupti import CuptiSource

    torch.cuda.init()
    source = CuptiSource()
    source.start()
    return (source, source.now, torch._C._cuda_synchronize, torch._C._cuda_resetPeakMemoryStats,
            torch._C._cuda_resetAccumulatedMemoryStats, torch._C._cuda_memoryStats)


class ColumnarFloor:
    """The columns, the flushes and the files; ``own_s`` is every second spent in its hooks' bodies."""

    def __init__(self, memory: bool, out_dir: Path):
        self.memory = memory
        self.out_dir = out_dir
        self.own_s = 0.0
        #: own_s by part: the test's call (the floor's calls), the reports' hook, the flushes, the session's end
        self.parts = {"in_test": 0.0, "reports": 0.0, "flush": 0.0, "end": 0.0}
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.peaks: list[int] = []
        self.nodeids: list[str] = []
        self.outcomes: list[str] = []
        self.call_outcome = "passed"
        self.flushed = 0  # tests whose records are spooled
        self.raw_lines: list[Any] = []
        self.csv_rows: list[tuple[Any, ...]] = []
        self.totals = [0.0, 0.0, 0]  # wall ms, busy ms, kernels
        self.source: Any = None
        self.spool: Any = None
        self.called = False  # whether this test's call ran (a test skipped at its setup has no window)
        self.summary: Optional[str] = None

    def _start(self) -> None:
        import msgspec
        import numpy as np

        from pytest_gpuutil.analysis.classify import KernelClassifier

        self.np, self.encoder, self.raw = np, msgspec.json.Encoder(), msgspec.Raw
        self.classifier = KernelClassifier()
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.spool = open(self.out_dir / "gpu_util.partial.jsonl", "wb")  # noqa: SIM115 - closed at the end
        self.source, self.now, self.sync, self.reset, self.reset_counts, self.stats = required_calls()

    @pytest.hookimpl(**_WRAPPER)
    def pytest_runtest_call(self, item: pytest.Item) -> Any:
        clock = time.perf_counter
        if self.source is None:
            self._start()  # the start-up: not a test's cost
        began = clock()
        self.sync()
        start = self.now()
        if self.memory:
            self.reset(0)
            self.reset_counts(0)
        self.parts["in_test"] += clock() - began
        try:
            return (yield)
        finally:
            began = clock()
            self.sync()
            self.ends.append(self.now())
            self.starts.append(start)
            self.peaks.append(self.stats(0)["allocated_bytes"]["all"]["peak"] if self.memory else 0)
            self.called = True
            self.parts["in_test"] += clock() - began

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        began = time.perf_counter()
        when = report.when
        if when == "teardown":
            if not self.called:  # no window: an empty one at the last edge keeps the columns in step and sorted
                edge = self.ends[-1] if self.ends else 0
                self.starts.append(edge)
                self.ends.append(edge)
                self.peaks.append(0)
            self.called = False
            self.nodeids.append(report.nodeid)
            self.outcomes.append("error" if report.failed else self.call_outcome)
            self.call_outcome = "passed"
            if len(self.nodeids) - self.flushed >= FLUSH_EVERY:
                flushing = time.perf_counter()
                self.flush()
                self.parts["flush"] += time.perf_counter() - flushing
                began += time.perf_counter() - flushing  # the reports' part without the flush
        elif when == "call" or report.outcome != "passed":  # a setup's skip or error is the test's outcome
            self.call_outcome = report.outcome if when == "call" else ("skipped" if report.skipped else "error")
        ended = time.perf_counter()
        self.parts["reports"] += ended - began

    def flush(self) -> None:
        """The tests since the last flush: their kernels attributed, their records spooled, their rows kept."""
        np = self.np
        first, last = self.flushed, min(len(self.nodeids), len(self.starts))
        if last <= first:
            return
        starts = np.array(self.starts[first:last], dtype=np.int64)
        ends = np.array(self.ends[first:last], dtype=np.int64)
        n = last - first
        busy = np.zeros(n)
        kernels = np.zeros(n, dtype=np.int64)
        per_category: dict[int, Any] = {}
        top: list[list[tuple[float, int, str, str]]] = [[] for _ in range(n)]
        categories_of: list[str] = []
        if self.source:
            columns, _dropped = self.source.drain()
            if len(columns):
                k_start = np.asarray(columns.starts_ns)
                k_dur = np.asarray(columns.durs_ns)
                window = np.searchsorted(starts, k_start, side="right") - 1
                inside = (window >= 0) & (k_start < ends[np.maximum(window, 0)])
                window, k_dur = window[inside], k_dur[inside].astype(np.float64)
                codes = np.asarray(columns.names.codes)[inside]
                names, kinds = columns.names.values, columns.kinds.values
                categories_of = [self.classifier.classify(nm, kd) for nm, kd in zip(names, kinds)]
                busy = np.bincount(window, weights=k_dur, minlength=n)
                kernels = np.bincount(window, minlength=n)
                cat_names = sorted(set(categories_of))
                cat_index = np.array([cat_names.index(c) for c in categories_of], dtype=np.int64)
                cat_of_row = cat_index[codes]
                for c, name in enumerate(cat_names):
                    mine = cat_of_row == c
                    if mine.any():
                        per_category[c] = (name, np.bincount(window[mine], weights=k_dur[mine], minlength=n),
                                           np.bincount(window[mine], minlength=n))
                width = len(names)
                pair = window * width + codes
                sums = np.bincount(pair, weights=k_dur, minlength=n * width)
                counts = np.bincount(pair, minlength=n * width)
                keys = np.flatnonzero(counts)
                order = np.lexsort((-sums[keys], keys // width))
                for key in keys[order].tolist():
                    w, c = divmod(key, width)
                    mine = top[w]
                    if len(mine) < 3:
                        mine.append((float(sums[key]), int(counts[key]), names[c], categories_of[c]))
        wall_ms = (ends - starts) / 1e6
        busy_ms = busy / 1e6
        busy_pct = np.divide(busy_ms * 100.0, wall_ms, out=np.zeros(n), where=wall_ms > 0)
        window_us = wall_ms * 1000.0
        mm = per_category.get(next((c for c, v in per_category.items() if v[0] == "gemm"), -1))
        mm_pct = (np.divide(mm[1] / 1e3 * 100.0, window_us, out=np.zeros(n), where=window_us > 0)
                  if mm is not None else np.zeros(n))
        peaks_mb = np.array(self.peaks[first:last], dtype=np.float64) / MB if self.memory else None
        encode, raw, lines, rows = self.encoder.encode, self.raw, [], self.csv_rows
        wall_l, busy_l, pct_l, mm_l, kern_l = (wall_ms.tolist(), busy_ms.tolist(), busy_pct.tolist(), mm_pct.tolist(),
                                               kernels.tolist())
        peak_l = peaks_mb.tolist() if peaks_mb is not None else [None] * n
        cat_lists = [(name, (t / 1e3).tolist(), cnt.tolist()) for name, t, cnt in per_category.values()]
        for i in range(n):
            test = self.nodeids[first + i]
            busy_us = busy_l[i] * 1000.0
            w_us = wall_l[i] * 1000.0 or 1.0
            tops = [{"name": nm, "category": cat, "count": cnt, "total_us": round(t / 1e3, 3),
                     "pct_of_window": t / 1e3 * 100.0 / w_us} for t, cnt, nm, cat in top[i]]
            categories = {name: {"time_us": t[i], "share_of_busy": t[i] * 100.0 / busy_us if busy_us else 0.0,
                                 "pct_of_window": t[i] * 100.0 / w_us, "count": cnt[i]}
                          for name, t, cnt in cat_lists if cnt[i]}
            peak = peak_l[i]
            memory = ({"0": {"peak_alloc_mb": peak, "peak_reserved_mb": peak, "leaked_mb": 0.0, "alloc_retries": 0,
                             "ooms": 0, "allocated_end_mb": peak, "reserved_end_mb": peak}} if peak is not None else {})
            top_name = tops[0]["name"] if tops else None
            record = {
                "test": test, "outcome": self.outcomes[first + i], "wall_ms": wall_l[i], "gpu_busy_ms": busy_l[i],
                "busy_pct": pct_l[i], "mm_conv_pct": mm_l[i], "attention_pct": 0.0, "communication_pct": 0.0,
                "memcpy_pct": 0.0, "kernel_count": kern_l[i], "measure_ms": None, "peak_alloc_mb": peak,
                "peak_reserved_mb": peak, "leaked_mb": 0.0 if peak is not None else None,
                "alloc_retries": 0 if peak is not None else None, "ooms": 0 if peak is not None else None,
                "top_kernel": top_name, "top_kernels": tops, "idle_gaps": [], "devices": ["0"], "worker": "",
                "machine": "", "gpu_busy_us_by_device": {"0": busy_us}, "categories": categories,
                "kernel_bench": {}, "gpu_trace": {}, "memory_by_device": memory, "note": "",
                "findings": [] if self.memory else None, "below_floor": [], "sm_pct": None, "tensor_pct": None,
                "dram_bw_pct": None, "occupancy_pct": None, "fp16_pct": None, "fp32_pct": None, "fp64_pct": None,
                "energy_j": None, "avg_power_w": None, "counters_source": "", "counters_note": "",
                "counter_sums": {}, "processes": [], "kernels": []}
            line = encode(record)
            lines.append(line)
            self.raw_lines.append(raw(line))
            rows.append((test, record["outcome"], wall_l[i], busy_l[i], pct_l[i], mm_l[i], 0.0, 0.0, 0.0, kern_l[i],
                         "", peak, peak, record["leaked_mb"], record["alloc_retries"], record["ooms"], top_name or "",
                         "0", "", "" if self.memory else "off", "", "", "", "", "", "", "", "", "", "", ""))
        self.spool.write(b"\n".join(lines) + b"\n")
        self.spool.flush()
        totals = self.totals
        totals[0] += float(wall_ms.sum())
        totals[1] += float(busy_ms.sum())
        totals[2] += int(kernels.sum())
        self.flushed = last

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.source is None:
            return
        began = time.perf_counter()
        self.flush()
        document = {"format": "gpu_util", "version": 1, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "machine_info": {}, "tests": self.raw_lines, "gpus": [],
                    "totals": {"tests": self.flushed, "wall_ms": self.totals[0], "gpu_busy_ms": self.totals[1],
                               "kernel_count": self.totals[2]}, "thresholds": {}}
        (self.out_dir / "gpu_util.json").write_bytes(self.encoder.encode(document))
        with open(self.out_dir / "gpu_util.csv", "w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(CSV_HEADER)
            writer.writerows(self.csv_rows)
        self.spool.close()
        os.replace(self.out_dir / "gpu_util.partial.jsonl", self.out_dir / "gpu_util.spooled.jsonl")
        wall, busy = self.totals[0], self.totals[1]
        self.summary = (f"columnar floor: {self.flushed} tests, GPU busy {busy / wall * 100 if wall else 0.0:.1f} % "
                        f"of {wall / 1e3:.2f} s, {self.totals[2]} kernels")
        self.parts["end"] += time.perf_counter() - began

    @pytest.hookimpl(trylast=True)
    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self.own_s = sum(self.parts.values())
        parts = " ".join(f"{name}={seconds:.9f}" for name, seconds in self.parts.items())
        print(f"\n{self.summary or 'columnar floor: no test measured'}\n"
              f"FLOOR_OWN_S {self.own_s:.9f} FLOOR_TESTS {self.flushed}\nCOLUMNAR_PARTS {parts}")
        if self.source:
            self.source.stop()


def pytest_configure(config: pytest.Config) -> None:
    memory = os.environ.get("COLUMNAR_MODE", "default") == "default"
    out_dir = Path(os.environ.get("COLUMNAR_DIR") or Path(str(config.rootpath)) / ".columnar_floor")
    config.pluginmanager.register(ColumnarFloor(memory, out_dir), "columnar_floor")
