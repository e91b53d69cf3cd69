"""(GPU, diagnostics) A pytest plugin that keeps what each flush's findings were computed from.

    WHERE_DUMP_DIR=DIR python -m pytest -p dump_windows --gpu-util ...   (validation/where on sys.path)

Wraps the continuous capture's ``findings_of`` and pickles, per flush, its inputs as plain values
(the events' columns, the host's waits, the windows with their spans and closing synchronize, the
host's calls and samples, the contexts) and the findings it returned, as DIR/flush-N.pkl: a CPU
replay (:func:`load`) then runs the same analysis on exactly what the GPU gave (issue 42: which of
the waits, their idle or the rule lost the read-back loops' host-sync findings).
"""
from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any


def _plain(seq: Any) -> Any:
    tolist = getattr(seq, "tolist", None)
    return tolist() if tolist is not None else list(seq)


def _host(host: Any) -> Any:
    if host is None:
        return None
    calls, samples = host.calls, host.samples
    return {"calls": {"kinds": _plain(calls.kinds), "starts_ns": _plain(calls.starts_ns),
                      "ends_ns": _plain(calls.ends_ns), "sites": [tuple(map(tuple, s)) for s in calls.sites]},
            "samples": {"interval_ns": samples.interval_ns, "times_ns": _plain(samples.times_ns),
                        "sites": [tuple(map(tuple, s)) for s in samples.sites],
                        "in_cuda_init": _plain(samples.in_cuda_init), "weights_ns": _plain(samples.weights_ns)}}


def snapshot(columns: Any, syncs: Any, windows: Any, spans: Any, host: Any, contexts: Any, found: Any) -> dict:
    """The plain-value picture of one ``findings_of`` call."""
    return {
        "columns": {k: _plain(getattr(columns, k)) for k in ("names", "kinds", "devices", "streams", "starts_ns", "durs_ns")},
        "syncs": None if syncs is None else {k: _plain(getattr(syncs, k)) for k in ("names", "starts_ns", "durs_ns")},
        "windows": [{"key": getattr(w, "key", ""), "sync_end_ns": getattr(w, "sync_end_ns", None),
                     "wall_ms": getattr(w, "wall_ms", None), "cuda_came_up": getattr(w, "cuda_came_up", None),
                     "start_ns": s.start_ns, "end_ns": s.end_ns, "source": s.source} for w, s in zip(windows, spans)],
        "host": _host(host),
        "contexts": {i: dict(v) for i, v in enumerate((contexts or {}).get(id(w), {}) for w in windows)},
        "found": {getattr(w, "key", str(i)): [f.to_dict() for f in found.get(id(w), ())] for i, w in enumerate(windows)},
    }


def load(path: str | os.PathLike) -> dict:
    """A dump back as the analysis's inputs: GpuColumns, SyncColumns, windows, HostActivity."""
    from pytest_gpuutil.analysis.places.attribution import HostActivity, HostCalls, HostSamples
    from pytest_gpuutil.traces.model import GpuColumns, SyncColumns, Window

    raw = pickle.loads(Path(path).read_bytes())
    import numpy as np

    c = raw["columns"]
    columns = GpuColumns(c["names"], c["kinds"], c["devices"], c["streams"], np.asarray(c["starts_ns"], dtype=np.int64),
                         np.asarray(c["durs_ns"], dtype=np.int64))
    s = raw["syncs"]
    syncs = None if s is None else SyncColumns(s["names"], np.asarray(s["starts_ns"], dtype=np.int64),
                                               np.asarray(s["durs_ns"], dtype=np.int64))
    h = raw["host"]
    host = None if h is None else HostActivity(HostCalls(**h["calls"]), HostSamples(**h["samples"]))
    spans = [Window(w["start_ns"], w["end_ns"], w["source"]) for w in raw["windows"]]
    return {**raw, "columns": columns, "syncs": syncs, "host": host, "spans": spans}


def pytest_configure(config: Any) -> None:
    out = os.environ.get("WHERE_DUMP_DIR")
    if not out:
        return
    from pytest_gpuutil.capture import continuous
    from pytest_gpuutil.capture.window_split import spans_of

    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    original = continuous.findings_of
    count = [0]

    def findings_of(columns, syncs, windows, stats, classifier, ignore, contexts=None, host=None, **more):
        found = original(columns, syncs, windows, stats, classifier, ignore, contexts, host=host, **more)
        try:
            picture = snapshot(columns, syncs, windows, spans_of(windows), host, contexts, found)
            count[0] += 1
            (folder / f"flush-{count[0]}.pkl").write_bytes(pickle.dumps(picture))
        except Exception as exc:  # noqa: BLE001 - a diagnostic never changes the run
            (folder / "errors.txt").open("a").write(f"{exc!r}\n")
        return found

    continuous.findings_of = findings_of
