"""(GPU, diagnostics) What the CUPTI callbacks record for the read-back loops of issue 42, outside pytest.

    python validation/where/waits_probe.py OUT.json

For each loop (100 x 2048 and 300 x 4096 bf16 matmuls with ``.sum().item()``, ``c[0, 0].item()`` or
``torch.cuda.synchronize()`` each step): the raw waits the C callback recorded (by CUPTI callback
id), the GPU records, and what WindowFacts makes of them (waits, idle after them, the gaps), so that
a lost wait and a lost idle can be told apart. ~10 s.
"""
from __future__ import annotations

import json
import sys
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
try:
    import pytest_gpuutil  # noqa: F401 - installed (device.sh's set-up), with its C parts
except ImportError:
    sys.path.insert(0, str(HERE.parents[1]))


def main(out: Path) -> int:
    import numpy as np
    import torch

    from pytest_gpuutil.analysis.classify import KernelClassifier
    from pytest_gpuutil.analysis.window_facts import WindowFacts
    from pytest_gpuutil.capture.cupti import CuptiSource
    from pytest_gpuutil.capture.host_waits import WAIT_DTYPE
    from pytest_gpuutil.traces.model import Window

    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    (a @ a).sum().item()
    source = CuptiSource(demangle=getattr(torch._C, "_demangle", None), host_syncs=True, waits_from_callbacks=True)
    source.start()
    found = {"host_waits": source.host_waits}

    def loops():
        for size, steps in ((2048, 100), (4096, 300)):
            x, y = (torch.randn(size, size, device="cuda", dtype=torch.bfloat16) for _ in range(2))
            torch.cuda.synchronize()

            def sum_item(x=x, y=y, steps=steps):
                for _ in range(steps):
                    (x @ y).sum().item()

            def index_item(x=x, y=y, steps=steps):
                for _ in range(steps):
                    c = x @ y
                    c[0, 0].item()

            def synchronize(x=x, y=y, steps=steps):
                for _ in range(steps):
                    x @ y
                    torch.cuda.synchronize()
            yield f"{size}_sum_item", sum_item
            if size == 4096:
                yield f"{size}_index_item", index_item
                yield f"{size}_synchronize", synchronize

    from pytest_gpuutil.capture.places.calls import CallPlaces

    places = CallPlaces.open(source._to_ns)
    runs = [(f"{name}{'_places' if on else ''}", body, on) for on in (False, True) for name, body in loops()]
    for name, body, on in runs:
        try:
            if places is not None:
                (places.start if on else places.stop)()
                places.take()
            source.drain()
            source.drain_syncs()
            module = source._callbacks._module if source._callbacks is not None else None
            start = source.now()
            began = time.perf_counter()
            body()
            wall = time.perf_counter() - began
            end = source.now()
            raw = module.take()[0] if module is not None else b""
            waits = np.frombuffer(raw, dtype=WAIT_DTYPE)
            by_cbid = Counter(waits["cbid"].tolist())
            # put them back where the source would have found them
            from pytest_gpuutil.capture.cupti_records import SyncRecords

            if len(waits):
                source._sync_parsed.append(SyncRecords(waits["type"].copy(), source._to_ns(waits["start"].copy()),
                                                       source._to_ns(waits["end"].copy())))
            torch.cuda.synchronize()
            columns, dropped = source.drain()
            syncs = source.drain_syncs()
            window = Window(start, end, "explicit")
            facts = WindowFacts(columns, window, KernelClassifier(), syncs, None)
            w = facts.waits
            t = facts.timeline
            gaps = sorted(int(g) for g in t.gaps_ns)
            rows = facts.sync_rows
            ends = np.asarray(columns.starts_ns) + np.asarray(columns.durs_ns)
            # per wait: the host's wait end against the last GPU record ending before the next wait's start
            lags = []
            starts_sorted = sorted(r[1] for r in rows)
            for i, (_, s, e) in enumerate(sorted(rows, key=lambda r: r[1])[:50]):
                before = ends[ends <= e + 1_000_000]
                lags.append(int(before.max() - e) if before.size else None)
            found[name] = {
                "wall_ms": round(wall * 1e3, 3), "window_ms": round((end - start) / 1e6, 3), "dropped": dropped,
                "raw_waits_by_cbid": dict(by_cbid), "raw_waits": int(len(waits)), "sync_rows": len(rows),
                "sync_names": dict(Counter(r[0] for r in rows)), "events": len(columns),
                "kinds": dict(Counter(columns.kinds)), "busy_pct": round(facts.busy_pct, 2),
                "waits_count": w.count, "idle_after_ms": round(w.idle_after_ns / 1e6, 3),
                "idle_after_pct": round(facts.pct_of_window(w.idle_after_ns), 2),
                "idle_between_ms": round(t.idle_between_ns / 1e6, 3), "gaps": len(gaps),
                "gaps_us_quantiles": [round(gaps[int(q * (len(gaps) - 1))] / 1e3, 2) for q in (0, .1, .25, .5, .75, .9, 1)] if gaps else [],
                "wait_us_quantiles": sorted(round((e - s) / 1e3, 1) for _, s, e in rows)[::max(1, len(rows) // 8)],
                "last_gpu_end_minus_wait_end_us": [None if x is None else round(x / 1e3, 2) for x in lags[:30]],
                "first_waits": [(round((s - start) / 1e3, 1), round((e - start) / 1e3, 1)) for s, e in
                                [(r[1], r[2]) for r in sorted(rows, key=lambda r: r[1])[:6]]],
                "first_events": sorted([(round((int(s) - start) / 1e3, 1), round((int(s) + int(d) - start) / 1e3, 1), k[:6])
                                        for s, d, k in zip(columns.starts_ns, columns.durs_ns, columns.kinds)])[:12],
                "worst": [list(x) for x in w.worst],
            }
            del starts_sorted
            if places is not None and on:
                calls = places.take()
                found[name]["calls_with_places"] = dict(Counter(calls.kinds))
                found[name]["call_sites"] = dict(Counter(str(s[0]) if s else "" for s in calls.sites).most_common(4))
        except Exception as exc:  # noqa: BLE001 - the other loops still tell
            found[name] = {"error": repr(exc)}
    if places is not None:
        places.stop()
    source.stop()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(found, indent=1) + "\n")
    print(json.dumps({k: {kk: v.get(kk) for kk in ("raw_waits", "sync_rows", "waits_count", "idle_after_pct", "busy_pct")}
                      for k, v in found.items() if isinstance(v, dict)}, indent=0))
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
