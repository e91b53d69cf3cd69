"""The per-test timeline in a real browser: a planted window (tests/helpers/timelines.py) drawn in
headless Chromium, its lanes, gap labels, pixels and hover text read back against the planted events."""
from __future__ import annotations

from pathlib import Path

import pytest

from pytest_gpuutil.report.html_report import render_report
from pytest_gpuutil.report.html_report.svg import CATEGORY_COLORS
from tests.helpers.headless_chromium import find_chromium, run_page
from tests.helpers.timelines import CHILD, GAPS, LANES, MS, PLANTED, TEST, WAIT, planted_document

CHROMIUM = find_chromium()
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (.ci/run installs it with apt-get)")

#: Opens the one row, waits for its timeline, then probes it: the planted events' pixels and hover
#: text (positions from the view's own time-to-pixel mapping), the gap labels, a wheel zoom, a finding's click.
PROBE = r"""
window.addEventListener("load", function () {
  var row = document.querySelector("#tests tbody tr");
  document.addEventListener("gu-timeline", function (e) {
    var out = { detail: e.detail };
    try {
      var box = document.querySelector(".tl"), v = box.guView, canvas = v.canvas, ctx = canvas.getContext("2d");
      var rect = canvas.getBoundingClientRect(), dpr = window.devicePixelRatio || 1;
      function pixel(x, y) {
        var d = ctx.getImageData(Math.round(x * dpr), Math.round(y * dpr), 1, 1).data;
        return "#" + [d[0], d[1], d[2]].map(function (c) { return ("0" + c.toString(16)).slice(-2); }).join("");
      }
      function hover(x, y) {
        v.plot.dispatchEvent(new MouseEvent("mousemove", { clientX: rect.left + x, clientY: rect.top + y, bubbles: true }));
        return v.tip.hidden ? null : v.tip.textContent;
      }
      out.lanes = Array.prototype.map.call(box.querySelectorAll(".tl-lane"), function (l) { return l.textContent; });
      out.has_host_row = !!box.querySelector(".tl-host");
      out.strip = Array.prototype.map.call(box.querySelectorAll(".tl-strip"), function (l) { return l.textContent; });
      out.gaps = Array.prototype.map.call(box.querySelectorAll(".tl-gap"), function (g) {
        return { device: g.getAttribute("data-device"), start: +g.getAttribute("data-start"), dur: +g.getAttribute("data-dur"),
                 text: g.textContent, left: parseFloat(g.style.left), width: parseFloat(g.style.width),
                 shown: getComputedStyle(g).color !== "rgba(0, 0, 0, 0)" };
      });
      out.events = guPlanted.map(function (p) {
        var lane = p.lane, x = v.x((p.start + p.end) / 2), y = v.laneY(lane) + 9;
        return { pixel: pixel(x, y), tip: hover(x, y) };
      });
      out.background = pixel(v.x(4.5e6), v.laneY(1) + 9);
      out.wait_tip = hover(v.x((guWait[0] + guWait[1]) / 2), 20 + 7);
      out.gap_tip = hover(v.x(4.5e6), v.laneY(0) + 9);
      out.x_of_ms = [v.x(0), v.x(1e6), v.x(1e7)];
      out.width = v.width;
      var before = [v.v0, v.v1];
      v.plot.dispatchEvent(new WheelEvent("wheel", { deltaY: -100, clientX: rect.left + v.x(1.5e6), clientY: rect.top + 40, bubbles: true, cancelable: true }));
      out.zoomed = [before, [v.v0, v.v1]];
      v.plot.dispatchEvent(new MouseEvent("mousedown", { clientX: rect.left + 300, clientY: rect.top + 40, bubbles: true }));
      v.plot.dispatchEvent(new MouseEvent("mousemove", { clientX: rect.left + 200, clientY: rect.top + 40, bubbles: true }));
      window.dispatchEvent(new MouseEvent("mouseup", {}));
      out.panned = [v.v0, v.v1];
      v.plot.dispatchEvent(new MouseEvent("dblclick", { bubbles: true }));
      out.reset = [v.v0, v.v1];
      var findings = box.parentNode.querySelectorAll(".finding");
      var waitPixel = function () { return pixel(v.x((guWait[0] + guWait[1]) / 2), 20 + 7); };
      out.wait_before = waitPixel();
      findings[0].click();
      out.highlight = box.getAttribute("data-highlight");
      out.wait_after = waitPixel();
      out.finding_on = findings[0].classList.contains("tl-on");
      findings[1].click();
      out.highlight2 = box.getAttribute("data-highlight");
      out.gap_labels_lit = box.querySelectorAll(".tl-gap.tl-lit").length;
      findings[2].click();
      out.highlight3 = box.getAttribute("data-highlight");
      out.lit_events = guPlanted.map(function (p) { return pixel(v.x((p.start + p.end) / 2), v.laneY(p.lane) + 9); });
      findings[2].click();
      out.cleared = [box.getAttribute("data-highlight"), pixel(v.x((guPlanted[0].start + guPlanted[0].end) / 2), v.laneY(0) + 9)];
      out.row_marked = row.classList.contains("tl-has");
      out.test_cell = row.cells[0].textContent;
    } catch (err) { guHarness.errors.push("harness: " + err + " " + err.stack); }
    guHarness.done(out);
  });
  row.click();
});
"""


def _probe_script() -> str:
    lanes = {owner: i for i, owner in enumerate(sorted({p[4] for p in PLANTED}))}
    planted = ",".join(f'{{"lane": {lanes[p[4]]}, "start": {p[5] * MS}, "end": {p[6] * MS}}}' for p in PLANTED)
    return f"var guPlanted = [{planted}]; var guWait = [{WAIT[1] * MS}, {WAIT[2] * MS}];\n{PROBE}"


#: the host's sampled places (ns from the window's start, "path:line function: text"): two in the
#: 3-6 ms gap at one line, one at another, one outside the gap (not in its hover text)
HOST_SAMPLES = [[1 * MS, "tests/test_planted.py:8 test_window: x = launch()"],
                [4 * MS, "tests/test_planted.py:9 test_window: helper()"],
                [4.5 * MS, "tests/test_planted.py:10 test_window: time.sleep(0.001)"],
                [5 * MS, "tests/test_planted.py:9 test_window: helper()"]]


@pytest.fixture(scope="module")
def seen(tmp_path_factory: pytest.TempPathFactory) -> dict:
    doc, timelines = planted_document()
    timelines = {test: {**t, "hs": HOST_SAMPLES} for test, t in timelines.items()}
    page = render_report(doc, None, timelines=timelines)
    return run_page(CHROMIUM, page, _probe_script(), tmp_path_factory.mktemp("timeline"))


def test_the_timeline_draws_without_errors(seen: dict) -> None:
    assert seen["errors"] == [] and seen["detail"] == {"index": 0}
    assert seen["row_marked"] and seen["test_cell"] == TEST  # the mark is style, not text


def test_one_lane_per_device_stream_and_process(seen: dict) -> None:
    assert seen["lanes"] == list(LANES)
    assert CHILD in seen["lanes"][1]  # the child process's lane names its program and rank
    assert seen["has_host_row"] and seen["strip"] == ["SM %"]


def test_gap_labels_are_the_planted_gaps(seen: dict) -> None:
    got = [(g["device"], g["start"], g["dur"], g["text"]) for g in seen["gaps"]]
    want = [(d, round(s * MS), round(n * MS), f"idle {n:g} ms" if n >= 1 else f"idle {n * 1000:g} µs") for d, s, n in GAPS]
    assert got == want
    width = seen["width"]
    for gap, (_, start, length) in zip(seen["gaps"], GAPS):
        assert gap["left"] == pytest.approx(width * start / 10, abs=1)  # placed where the gap starts
        assert gap["width"] == pytest.approx(width * length / 10, abs=1)
        assert gap["shown"]  # every planted gap is wide enough to carry its label


def test_each_planted_event_is_drawn_in_its_category_colour(seen: dict) -> None:
    for planted, event in zip(PLANTED, seen["events"]):
        assert event["pixel"] == CATEGORY_COLORS[planted[7]], planted[0]
    assert seen["background"] not in {CATEGORY_COLORS[p[7]] for p in PLANTED}  # idle: no event drawn there


def test_hover_names_the_event_its_duration_and_category(seen: dict) -> None:
    for planted, event in zip(PLANTED, seen["events"]):
        tip = event["tip"]
        length_ms = planted[6] - planted[5]
        duration = f"{length_ms:g} ms" if length_ms >= 1 else f"{length_ms * 1000:g} µs"
        assert tip.startswith(planted[0] + "\n"), tip
        assert f"duration: {duration}" in tip and f"category: {planted[7]}" in tip, tip
    assert seen["events"][4]["tip"].endswith(f"lane: {LANES[1]}")
    assert seen["wait_tip"].startswith(f"host wait: {WAIT[0]}\nduration: 2.5 ms")
    # an idle gap's hover says what the host was doing then (issue 42): its sampled places, most often first
    assert seen["gap_tip"] == ("GPU 0 idle 3 ms\nfrom 3 ms\nthe host was at:"
                               "\n  tests/test_planted.py:9 test_window: helper() (2 samples)"
                               "\n  tests/test_planted.py:10 test_window: time.sleep(0.001) (1 sample)")


def test_wheel_zooms_drag_pans_double_click_shows_all(seen: dict) -> None:
    (b0, b1), (z0, z1) = seen["zoomed"]
    assert (b0, b1) == (0, 10 * MS)
    assert z1 - z0 == pytest.approx(0.8 * 10 * MS) and z0 <= 1.5 * MS <= z1  # around the mouse
    p0, p1 = seen["panned"]
    assert p1 - p0 == pytest.approx(z1 - z0) and p0 > z0  # dragged left: later times come in
    assert seen["reset"] == [0, 10 * MS]


def test_a_finding_highlights_its_evidence(seen: dict) -> None:
    assert seen["highlight"] == "host-sync" and seen["finding_on"]
    assert seen["wait_before"] != seen["wait_after"] and seen["wait_after"] == "#cf222e"
    assert seen["highlight2"] == "gpu-idle" and seen["gap_labels_lit"] == len(GAPS)
    # pageable-memcpy names its copy: that copy keeps its colour, the other events fade
    assert seen["highlight3"] == "pageable-memcpy"
    for planted, pixel in zip(PLANTED, seen["lit_events"]):
        assert (pixel == CATEGORY_COLORS[planted[7]]) == (planted[1] == "gpu_memcpy"), planted[0]
    assert seen["cleared"] == ["", CATEGORY_COLORS[PLANTED[0][7]]]  # a second click clears it


#: 100,000 kernels in one lane: drawn at once (merged per pixel), and each one hovered when zoomed in.
MANY = r"""
window.addEventListener("load", function () {
  var row = document.querySelector("#tests tbody tr");
  document.addEventListener("gu-timeline", function () {
    var out = {};
    try {
      var v = document.querySelector(".tl").guView, rect = v.canvas.getBoundingClientRect();
      var calls = 0, fill = v.ctx.fillRect;
      v.ctx.fillRect = function () { calls++; return fill.apply(this, arguments); };
      var began = performance.now(); v.draw(); out.draw_ms = performance.now() - began;
      out.rects = calls; out.width = v.width; out.events = v.ev.start.length;
      function tip(x) {
        v.plot.dispatchEvent(new MouseEvent("mousemove", { clientX: rect.left + x, clientY: rect.top + v.laneY(0) + 9, bubbles: true }));
        return v.tip.textContent;
      }
      out.far = tip(v.width / 2);
      v.show(5e6, 5e6 + 20000);  // 20 µs: a few kernels, each its own rectangle
      calls = 0; v.draw(); out.near_rects = calls;
      out.near = tip(v.x(5e6 + 10000));
    } catch (err) { guHarness.errors.push("harness: " + err + " " + err.stack); }
    guHarness.done(out);
  });
  row.click();
});
"""


def test_100000_kernels_draw_at_once_and_in_full_when_zoomed_in(tmp_path: Path) -> None:
    import numpy as np

    from pytest_gpuutil.analysis import timeline
    from pytest_gpuutil.analysis.classify import KernelClassifier
    from pytest_gpuutil.traces.model import GpuColumns, Window

    n = 100_000
    starts = np.arange(n, dtype=np.int64) * 2_000  # a 1 µs kernel every 2 µs: 200 ms
    cols = GpuColumns(["triton_poi_fused_%d" % (i % 7) for i in range(n)], ["kernel"] * n, [0] * n, [7] * n,
                      starts, np.full(n, 1_000, dtype=np.int64))
    built = timeline.build(cols, Window(0, n * 2_000, "test_call"), KernelClassifier())
    doc, _ = planted_document()
    seen = run_page(CHROMIUM, render_report(doc, None, timelines={TEST: timeline.encode(built)}), MANY, tmp_path)
    assert seen["errors"] == [] and seen["events"] == n
    assert seen["rects"] < 3 * seen["width"]  # merged per pixel: about one span a pixel, not 100,000 rectangles
    assert "events here; the longest" in seen["far"] or "triton_poi_fused_" in seen["far"]
    assert 10 <= seen["near_rects"] <= 60  # ~10 kernels in view, each drawn
    assert seen["near"].startswith("triton_poi_fused_") and "duration: 1 µs" in seen["near"]
