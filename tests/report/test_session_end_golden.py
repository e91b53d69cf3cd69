"""The session's end writes the same bytes for the same run: gpu_util.csv, gpu_util.json, the terminal's
summary and the job summary, for fixed runs, compared with the files in tests/data/session_end/.

The runs are synthetic and seeded (tests/helpers/synthetic_run.py, hardware counters from
tests/helpers/counters.py, findings and odd values added here), put into a GpuUtilSession as the
run's records and processes, and ended as the plugin ends a session (GpuUtilSession.finish, then the
summary). When a change to what is written is intended, write the files again and commit them::

    python -m tests.report.test_session_end_golden --update
"""
from __future__ import annotations

import argparse
import gzip
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_gpuutil.options import Settings
from pytest_gpuutil.records import TestRecord
from pytest_gpuutil.report.terminal import write_summary
from pytest_gpuutil.session import state as state_module
from pytest_gpuutil.session.state import GpuUtilSession
from tests.helpers.counters import with_counters
from tests.helpers.synthetic_run import synthetic_document

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "session_end"
UPDATE_COMMAND = "python -m tests.report.test_session_end_golden --update"
CREATED = "2026-11-27T12:00:00+00:00"
#: what each case writes, compared byte for byte
FILES = ("gpu_util.csv", "gpu_util.json", "summary_120.txt", "summary_80_verbose.txt", "step_summary.md")


def _finding(rule: str, saving_ms: float, place: str = "") -> dict[str, Any]:
    found = {"rule": rule, "severity": "medium", "message": f"{rule}, {saving_ms} ms", "fix": f"fix {rule}",
             "impact_pct": saving_ms, "saving_ms": saving_ms, "saving_pct": 12.5, "saving_basis": f"basis {rule}",
             "evidence": {"n": saving_ms}}
    if place:
        found["places"] = [{"path": place, "line": 7, "function": "f", "count": 3}]
    return found


def _process(worker: str, n: int) -> dict[str, Any]:
    return {"worker": worker, "mode": "continuous", "source": "cupti", "startup_s": 0.25 + n / 100,
            "startup_gc_s": 1e-5, "fallback": "", "broken": "", "own_s": 0.5 + n / 10, "counters": "",
            "counters_fallback": "",
            "children": {"processes": n, "measured": n, "by": {"python": n, "injection": 0},
                         "startup_ms": [100.0 + 10 * i for i in range(n)], "unmeasured_gpu_processes": 0,
                         "injection": "", "notes": []},
            "unseen_s": 0.01 * n, "unseen": {"records": 1000, "sampler_cpu_s": 0.0, "note": "", "record_cost": None},
            "torch_calls_s": 0.1 + n / 40}


def _records(case: str) -> tuple[list[TestRecord], dict[str, dict[str, Any]]]:
    """The case's records (in the order the run took them) and its processes."""
    if case == "xdist":
        doc = with_counters(synthetic_document(240, seed=3, workers=4, gpus=2))
        processes = {f"gw{i}": _process(f"gw{i}", i) for i in range(4)}
    else:
        doc = synthetic_document(150, seed=4, workers=1, gpus=1)
        processes = {"main": _process("main", 0)}
    records = []
    rules = ("gpu-idle", "host-sync", "launch-bound", "pageable-memcpy")
    for i, test in enumerate(doc["tests"]):
        if case == "xdist" and test["gpu_busy_ms"] is not None:
            test["findings"] = [_finding(rules[i % 4], 1.0 + i % 17, f"tests/x{i % 3}.py" if i % 2 else "")
                                for _ in range(i % 3)]
            test["below_floor"] = [_finding("gpu-idle", 0.25)] if i % 5 == 0 else []
        elif case == "plain":
            test["findings"] = None if i % 7 == 0 else []
        records.append(TestRecord.from_dict(test))
    odd = [TestRecord("tests/odd.py::test_a[1,2]", "passed", wall_ms=2.0, gpu_busy_ms=1.0, busy_pct=50.0,
                      kernel_count=2, top_kernel='k<1, "x">', devices=("0", "1"), worker=records[0].worker,
                      gpu_busy_us_by_device={"0": 600.0, "1": 400.0}, peak_alloc_mb=12.5, findings=()),
           TestRecord("tests/odd.py::test_b", "skipped", counters_note="not\rmeasured", findings=None),
           TestRecord("tests/odd.py::test_c", "failed", wall_ms=0.0, gpu_busy_ms=0.0, busy_pct=0.0, kernel_count=0,
                      top_kernel="two\nlines", devices=(), worker=records[-1].worker, findings=())]
    mixed = records[: len(records) // 2] + odd + records[len(records) // 2:]
    return mixed[::-1] if case == "plain" else mixed, processes  # not sorted by test id: the files sort them


class _Reporter:
    """What the summary writes through, keeping the lines."""

    def __init__(self, width: int, verbose: bool) -> None:
        writer = type("Writer", (), {"fullwidth": width})()
        option = type("Option", (), {"verbose": int(verbose)})()
        self.config = type("Config", (), {"option": option, "get_terminal_writer": lambda self: writer})()
        self.lines: list[str] = []

    def write_line(self, line: str, **markup: bool) -> None:
        self.lines.append(line)

    def write_sep(self, sep: str, title: str = "", **markup: bool) -> None:
        self.lines.append(f"{sep * 8} {title} {sep * 8}")


def end_of(case: str, folder: Path, spool: bool = True) -> dict[str, bytes]:
    """What the session's end of ``case`` writes into ``folder`` (its files, the summaries)."""
    records, processes = _records(case)
    settings = Settings(enabled=True, cpu_activity=False, top=10, output_dir="out", traces="none", tables=None,
                        save=None, autosave=False, compare=None, fail=(), compare_strict=False,
                        compare_any_machine=False, thresholds=None, pin=False, kernel_rules=(), enabled_by="--gpu-util",
                        findings=case == "xdist" or case == "plain")
    state = GpuUtilSession(settings, folder)
    state.machine = synthetic_document(1)["machine_info"]
    state._cuda, state._machine_saw_torch = True, True
    state.test_seconds = 12.5
    state.finish_s = 0.125
    state.start()
    receiver = state.receiver
    receiver.processes.update(processes)
    if not spool:
        receiver.spool = None
    for start in range(0, len(records), 64):  # as the run's flushes took them
        for record in records[start:start + 64]:
            receiver.take(record, (), {}, "not_checked" if record.outcome == "failed" else "")
        receiver.spool_pending()
    os.environ["GITHUB_STEP_SUMMARY"] = str(folder / "step_summary.md")
    created = state_module.now_utc
    state_module.now_utc = lambda: CREATED
    try:
        state.finish()
        out: dict[str, bytes] = {name: (folder / "out" / name).read_bytes() for name in FILES[:2]}
        for name, width, verbose in (("summary_120.txt", 120, False), ("summary_80_verbose.txt", 80, True)):
            tr = _Reporter(width, verbose)
            cwd = os.getcwd()
            os.chdir(folder)
            try:
                write_summary(state, tr)
            finally:
                os.chdir(cwd)
            out[name] = "\n".join(tr.lines).encode() + b"\n"
    finally:
        state_module.now_utc = created
        del os.environ["GITHUB_STEP_SUMMARY"]
    out["step_summary.md"] = (folder / "step_summary.md").read_bytes()
    return out


CASES = ("xdist", "plain")


def golden(case: str, name: str) -> bytes:
    return gzip.decompress((GOLDEN / case / f"{name}.gz").read_bytes())


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("spool", [True, False], ids=["spooled", "not_spooled"])
def test_the_end_writes_the_golden_bytes(case: str, spool: bool, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    got = end_of(case, tmp_path, spool)
    for name in FILES:
        assert got[name] == golden(case, name), (
            f"{case}: {name} differs from tests/data/session_end/{case}/{name}.gz. "
            f"If the change is intended, run `{UPDATE_COMMAND}` and commit the golden files.")


def test_the_cases_write_what_they_are_about(tmp_path: Path) -> None:
    """Each case has what it is there for: several GPUs and workers, findings, quoted CSV fields."""
    text = golden("xdist", "gpu_util.csv").decode()
    assert '"tests/odd.py::test_a[1,2]"' in text and '"k<1, ""x"">"' in text and "not\rmeasured" in text
    assert '"two\nlines"' in text
    summary = golden("xdist", "summary_120.txt").decode()
    assert "per GPU: GPU 0:" in summary and "top fixes" in summary and "child processes: 6 measured" in summary
    assert "SM %" in summary
    assert golden("plain", "gpu_util.json") != golden("xdist", "gpu_util.json")


@pytest.mark.parametrize("seed", range(8))
def test_the_top_records_are_the_first_of_all_sorted(seed: int) -> None:
    """top_records sorts only the records that reach the top ones' value: the same records, in the
    same order (ties by test id, then as given), as sorting them all."""
    import random

    from pytest_gpuutil.report.terminal import top_records

    rng = random.Random(seed)
    pool = [0.0, -0.0, 1.5, 2.0, 2.0, 7.25, 1e-9] if seed % 2 else [None, 0, 3, 2.0, float("nan"), 1.5]
    records = [TestRecord(f"t.py::x[{rng.randrange(60)}]", "passed",
                          gpu_busy_ms=rng.choice(pool) if rng.random() < 0.7 else rng.uniform(0, 9),
                          peak_alloc_mb=rng.choice(pool)) for _ in range(rng.choice((5, 40, 300)))]
    for field in ("gpu_busy_ms", "peak_alloc_mb"):
        for top in (0, 1, 3, 10, 500):
            want = sorted(records, key=lambda r: (-(getattr(r, field) or 0.0), r.test))
            want = want[:top] if top else want
            got = top_records(records, field, top)
            assert [id(r) for r in got] == [id(r) for r in want]


def main(argv: list[str] | None = None) -> int:
    import tempfile

    parser = argparse.ArgumentParser(description="Write or check the session's end's golden files.")
    parser.add_argument("--update", action="store_true", help="write the golden files")
    args = parser.parse_args(argv)
    differ = 0
    for case in CASES:
        with tempfile.TemporaryDirectory() as tmp:
            got = end_of(case, Path(tmp))
        for name, data in got.items():
            path = GOLDEN / case / f"{name}.gz"
            if args.update:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(gzip.compress(data, mtime=0))
            elif not path.exists() or gzip.decompress(path.read_bytes()) != data:
                print(f"differs: {case}/{name}")
                differ += 1
    return 1 if differ and not args.update else 0


if __name__ == "__main__":
    sys.exit(main())
