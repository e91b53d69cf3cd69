"""Which tests keep a timeline (report/timelines.py), what a run holds of them, the page's budget and
the timelines file beside a run; and pages without timelines stay as they were."""
from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import pytest

from pytest_gpuutil.analysis.timeline import decode
from pytest_gpuutil.report import timelines as tl
from pytest_gpuutil.report.html_report import render_report
from tests.helpers.synthetic_run import synthetic_document
from tests.helpers.timelines import planted_window, synthetic_timeline, synthetic_timelines


def scores(wall: float, busy: float, impact: float | None = None, work: bool = True) -> tuple:
    return tl.TimelineChoice.scores(wall, busy, work, impact)


def test_the_worst_are_the_slowest_the_least_busy_and_the_costliest_findings() -> None:
    choice = tl.TimelineChoice(3)
    kept: set[str] = set()
    tests = {"fast_busy": scores(1, 90), "slow": scores(50, 60), "idle": scores(2, 3), "finding": scores(1, 80, 40.0),
             "slower": scores(80, 70), "no_gpu": scores(500, 0, work=False)}
    for name, s in tests.items():
        ok, dropped = choice.offer(name, s)
        kept = (kept - set(dropped)) | ({name} if ok else set())
    assert kept == {"slower", "idle", "finding"}  # a test without GPU work is never the slowest or least busy
    assert not choice.would_keep(scores(3, 50)) and choice.would_keep(scores(100, 50))


def test_n_is_a_bound_and_all_keeps_all() -> None:
    rng = random.Random(4)
    for count in (0, 1, 2, 5, 30):
        choice = tl.TimelineChoice(count)
        kept: set[str] = set()
        for i in range(300):
            ok, dropped = choice.offer(f"t{i}", scores(rng.uniform(0, 100), rng.uniform(0, 100),
                                                      rng.choice((None, rng.uniform(0, 50)))))
            kept = (kept - set(dropped)) | ({f"t{i}"} if ok else set())
            assert len(kept) <= count
    assert tl.TimelineChoice(None).offer("x", scores(1, 1)) == (True, [])


def test_the_store_holds_only_the_kept_ones() -> None:
    store = tl.TimelineStore(2)
    data = planted_window()
    for i in range(50):
        store.offer(f"t{i}", scores(float(i), 100.0 - i), data)  # each slower and less busy than the last
    assert set(store.timelines) == {"t49"}  # the slowest and the least busy are one test
    store.offer("none", scores(1000, 0), None)
    assert "none" not in store.timelines


def test_with_all_kept_past_the_held_bytes_each_new_one_is_coarse(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tl, "HELD_BYTES", 10_000)
    big = synthetic_timeline(random.Random(1), 500.0, 60.0, 5_000)
    store = tl.TimelineStore(None)
    for i in range(6):
        store.offer(f"t{i}", scores(1, 1), big)
    sizes = [decode(store.timelines[f"t{i}"]).start.size for i in range(6)]
    assert sizes[0] == decode(big).start.size and sizes[-1] <= tl.COARSE_ROWS


def test_fit_puts_the_small_ones_in_whole_and_reduces_the_big_one() -> None:
    rng = random.Random(2)
    small = {f"s{i}": synthetic_timeline(rng, 5.0, 50.0, 20) for i in range(5)}
    big = synthetic_timeline(rng, 2_000.0, 70.0, 30_000)
    whole = {**small, "big": big}
    budget = sum(tl.size_of(t) for t in small.values()) + tl.size_of(big) // 4
    fitted = tl.fit(whole, budget)
    assert set(fitted) == set(whole) and all(fitted[k] == small[k] for k in small)
    assert sum(tl.size_of(t) for t in fitted.values()) <= budget
    assert decode(fitted["big"]).count is not None and int(decode(fitted["big"]).count.sum()) == decode(big).start.size
    assert tl.fit(whole, None) == whole


def test_the_sidecar_round_trips_and_a_bad_one_says_so(tmp_path: Path) -> None:
    run = tmp_path / "gpu_util.json"
    run.write_text("{}")
    assert tl.read_sidecar(run) == ({}, "")  # an older run: no file, no complaint
    path = tl.write_sidecar(tmp_path, {"b": planted_window(), "a": planted_window()})
    assert path == tmp_path / tl.SIDECAR
    assert list(json.loads(gzip.decompress(path.read_bytes()))["tests"]) == ["a", "b"]
    found, problem = tl.read_sidecar(run)
    assert problem == "" and found == {"a": planted_window(), "b": planted_window()}
    path.write_bytes(gzip.compress(b'{"format": "something else", "tests": {}}'))
    assert tl.read_sidecar(run)[1].endswith("not a timelines file (no format 'pytest-gpuutil-timelines'); the page has no timelines")
    assert tl.write_sidecar(tmp_path, {}) is None and not path.exists()  # a run without timelines leaves none behind


def test_a_page_without_timelines_is_the_page_it_was() -> None:
    doc = synthetic_document(30, seed=4)
    assert render_report(doc) == render_report(doc, timelines={}) == render_report(doc, timelines={"not a test": planted_window()})
    assert 'id="gu-timelines"' not in render_report(doc) and "guTimeline" not in render_report(doc)


def test_the_page_keys_timelines_by_the_rows_detail_data() -> None:
    doc = synthetic_document(40, seed=4)
    drawn = synthetic_timelines(doc)
    page = render_report(doc, timelines=drawn)
    data = json.loads(page.split('id="gu-timelines">')[1].split("</script>")[0])
    order = sorted(doc["tests"], key=lambda t: (-(t.get("gpu_busy_ms") or -1.0), t["test"]))
    assert {order[int(k)]["test"] for k in data["tests"]} == set(drawn)
    assert data["colors"]["gemm"] == "#4e79a7"  # the page's own category colours
    with_budget = render_report(doc, timelines=drawn, timeline_budget=20_000)
    assert len(with_budget) < len(page)
