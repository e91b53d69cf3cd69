"""Small traces are read and analysed in plain Python (no numpy import); big ones with numpy.

Both ways must give the same figures to the nanosecond: every real trace and a few hundred random
ones go through both, and ``gpuutil analyze`` on a small trace must not import numpy at all.
"""
from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_gpuutil import KernelClassifier, Window, analyze, read_trace, rule
from pytest_gpuutil.analysis import summary
from pytest_gpuutil.traces import kineto_layout, msgspec_reader, reader
from pytest_gpuutil.traces.model import GpuColumns, Trace
from pytest_gpuutil.traces.reader import c_reader_available
from tests.helpers.reference import DATA

REAL_TRACES = sorted(p.name for p in DATA.glob("*.json.gz"))
MODULES_THAT_CHOOSE = (summary, msgspec_reader, kineto_layout, reader)


@pytest.fixture
def plain_python(monkeypatch):
    """``plain_python(True)``: read and analyse in plain lists; ``False``: with numpy."""

    def choose(plain: bool) -> None:
        for module in MODULES_THAT_CHOOSE:
            monkeypatch.setattr(module, "use_plain_python", lambda count: plain)

    return choose


def both_ways(plain_python, trace: Trace, **kwargs) -> tuple[dict, dict]:
    plain_python(True)
    plain = analyze(trace, **kwargs).to_dict()
    plain_python(False)
    with_numpy = analyze(trace, **kwargs).to_dict()
    return plain, with_numpy


@pytest.mark.parametrize("name", REAL_TRACES)
def test_real_traces_read_and_analyse_alike_both_ways(plain_python, name):
    plain_python(True)
    listed = read_trace(DATA / name)
    assert isinstance(listed.columns.starts_ns, list) and isinstance(listed.columns.durs_ns, list)
    plain_python(False)
    arrays = read_trace(DATA / name)
    assert listed.events == arrays.events and listed.profiler_span == arrays.profiler_span
    for kwargs in ({}, {"top": 0, "gap_count": 50}):
        plain, with_numpy = both_ways(plain_python, listed, **kwargs)
        assert plain == with_numpy
    no_span = Trace(listed.path, listed.columns)  # the window is the GPU span
    plain, with_numpy = both_ways(plain_python, no_span)
    assert plain == with_numpy and plain["window_source"] == ("gpu_span" if listed.events else "none")


def random_trace(seed: int) -> Trace:
    rng = random.Random(seed)
    names = ["nvjet_gemm", "ncclDevKernel_AllReduce", "flash_fwd", "elementwise", "spin", "triton_poi_x"]
    kinds = ["kernel"] * 6 + ["gpu_memcpy", "gpu_memset"]
    devices = [0, 1, "0", "gpu 2", -1]
    rows = []
    for _ in range(rng.randint(0, 300)):
        start = rng.randint(0, 10_000)
        rows.append((rng.choice(names), rng.choice(kinds), rng.choice(devices), rng.choice([7, 13, "s"]),
                     start, rng.choice([0, 0, 1, rng.randint(1, 3_000)])))
    columns = GpuColumns(*(list(column) for column in zip(*rows))) if rows else GpuColumns()
    span = rng.choice([None, (rng.randint(-100, 2_000), rng.randint(5_000, 14_000))])
    return Trace(f"random-{seed}", columns, span)


@pytest.mark.parametrize("seed", range(300))
def test_random_traces_analyse_alike_both_ways(plain_python, seed):
    trace = random_trace(seed)
    rng = random.Random(-seed)
    start = rng.randint(0, 6_000)
    window = rng.choice([None, Window(start, start + rng.randint(0, 6_000), "explicit")])
    classifier = KernelClassifier([rule("spin", "spin")])
    plain, with_numpy = both_ways(plain_python, trace, window=window, classifier=classifier,
                                  top=rng.randint(0, 5), gap_count=rng.randint(1, 6))
    assert plain == with_numpy


def test_the_choice_is_plain_python_only_for_few_events_without_numpy(monkeypatch):
    from pytest_gpuutil.traces import model

    monkeypatch.delitem(sys.modules, "numpy", raising=False)
    assert model.use_plain_python(model.PLAIN_PYTHON_EVENTS)
    assert not model.use_plain_python(model.PLAIN_PYTHON_EVENTS + 1)
    monkeypatch.setitem(sys.modules, "numpy", object())
    assert not model.use_plain_python(10)


GPUUTIL = (
    "import sys\n"
    "if sys.argv[1] == 'preload': import numpy, msgspec\n"
    "from pytest_gpuutil.cli import main\n"
    "code = main(['analyze', *sys.argv[2:], '--format', 'json'])\n"
    "print(sorted(m for m in ('numpy', 'msgspec') if m in sys.modules), file=sys.stderr)\n"
    "sys.exit(code)\n"
)


def run_gpuutil(preload: str, path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", GPUUTIL, preload, str(path)], capture_output=True, text=True, check=True)


@pytest.mark.parametrize("name", ["nccl_allreduce_rank0.json.gz", "two_streams_overlap.json.gz"])
def test_gpuutil_analyze_on_a_small_trace_imports_neither_numpy_nor_msgspec_and_prints_the_same(name):
    """The standard library and plain Python on their own, against msgspec and numpy."""
    alone, preloaded = run_gpuutil("none", DATA / name), run_gpuutil("preload", DATA / name)
    assert alone.stderr.strip() == "[]"
    assert preloaded.stderr.strip() == "['msgspec', 'numpy']"
    assert json.loads(alone.stdout) == json.loads(preloaded.stdout)


def test_the_recorded_40k_kernel_trace_prints_the_same_without_numpy():
    """40,100 GPU events: the C reader (else msgspec) checks the JSON, plain Python does the rest, as numpy would."""
    big = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "h200_40k_kernels.json.gz"
    if not big.exists():
        pytest.skip("benchmarks/data/h200_40k_kernels.json.gz is not in this checkout")
    alone, preloaded = run_gpuutil("none", big), run_gpuutil("preload", big)
    assert alone.stderr.strip() == ("[]" if c_reader_available() else "['msgspec']")
    assert json.loads(alone.stdout) == json.loads(preloaded.stdout)
    assert json.loads(alone.stdout)["kernel_count"] == 40_100
