"""The hardware counters on the HTML page: the busy-vs-SM scatter, per-file figures, table columns, details."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pytest_gpuutil.report.html_report import render_report
from pytest_gpuutil.report.html_report.counters import busy_vs_sm, counters_of, in_corner
from tests.helpers.counters import with_counters
from tests.helpers.headless_chromium import find_chromium, run_page
from tests.helpers.synthetic_run import synthetic_document


@pytest.fixture(scope="module")
def plain() -> dict:
    return synthetic_document(40, seed=5)


@pytest.fixture(scope="module")
def counted(plain: dict) -> dict:
    return with_counters(plain, seed=1, period_ms=5.0)  # tests under 10 ms: too short


def data_of(page: str) -> dict:
    return json.loads(re.search(r'<script type="application/json" id="gu-data">(.*?)</script>', page).group(1))


def test_a_run_without_counters_has_no_counter_section_or_columns(plain: dict) -> None:
    page = render_report(plain)
    assert 'id="counters"' not in page and ">SM %<" not in page
    assert all("hw" not in d for d in data_of(page)["tests"])


def test_the_scatter_has_a_point_per_test_with_both_figures_and_names_the_corner(counted: dict) -> None:
    page = render_report(counted)
    section = page[page.index('<section id="counters">'):page.index("</section>", page.index('<section id="counters">'))]
    both = [t for t in counted["tests"] if t.get("busy_pct") is not None and t.get("sm_pct") is not None]
    assert section.count("<circle") == len(both) > 10
    corner = sum(1 for t in both if in_corner(t["busy_pct"], t["sm_pct"]))
    assert section.count('class="pt bad"') == corner
    assert f"{corner} test{'s' if corner != 1 else ''} in the busy-but-barely-working corner" in section
    assert "busy but barely working</text>" in section
    files = counted["counters"]["files"]
    assert all(f"<td>{name}</td>" in section for name in files)
    assert "SM % <b>" in section and "source cupti_pm_sampling" in section


def test_the_table_gets_sm_and_tensor_columns_last(counted: dict) -> None:
    page = render_report(counted)
    heads = re.findall(r"<th[^>]*>([^<]*)</th>", page[page.index('<table id="tests">'):])
    assert heads[-2:] == ["SM %", "tensor %"] and heads[:5] == ["test", "outcome", "wall ms", "GPU ms", "busy %"]
    short = next(t for t in counted["tests"] if t.get("counters_note"))
    row = re.search(rf'<tr[^>]*><td>{re.escape(short["test"])}</td>.*?</tr>', page).group(0)
    assert row.endswith("<td>–</td><td>–</td></tr>")  # too short: no figures, not 0


def test_the_detail_data_carries_the_figures_and_the_note(counted: dict) -> None:
    details = data_of(render_report(counted))["tests"]
    with_hw = [d["hw"] for d in details if "hw" in d]
    assert len(with_hw) == sum(1 for t in counted["tests"] if t.get("counters_source"))
    assert any(hw.get("note") == "too short for the hardware counters" and "sm_pct" not in hw for hw in with_hw)
    assert counters_of({"sm_pct": 12.5, "counters_source": "nvml_gpm"}) == {"sm_pct": 12.5, "src": "nvml_gpm", "note": ""}
    assert counters_of({"busy_pct": 3.0}) == {}


def test_points_outside_0_100_stay_on_the_chart() -> None:
    svg = busy_vs_sm([(120.0, -5.0, "t")])
    cx, cy = map(float, re.search(r'cx="([\d.]+)" cy="([\d.]+)"', svg).groups())
    assert 44 <= cx <= 548 and 10 <= cy <= 266


@pytest.mark.skipif(find_chromium() is None, reason="chromium is not installed")
def test_the_detail_view_shows_the_counters_in_a_browser(counted: dict, tmp_path: Path) -> None:
    harness = r"""
window.addEventListener("load", function () {
  var out = {};
  try {
    window.guReport.showAll();
    var row = Array.prototype.slice.call(document.querySelectorAll("#tests tbody tr"))
      .filter(function (r) { return r.cells[r.cells.length - 2].textContent !== "–"; })[0];
    row.click();
    out.text = row.nextSibling.textContent;
  } catch (e) { guHarness.errors.push("harness: " + e); }
  guHarness.done(out);
});
"""
    seen = run_page(find_chromium(), render_report(counted), harness, tmp_path)
    assert seen["errors"] == []
    assert "Hardware counters" in seen["text"] and "SM %:" in seen["text"] and "source: cupti_pm_sampling" in seen["text"]
