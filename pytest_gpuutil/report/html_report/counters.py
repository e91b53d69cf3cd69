"""The hardware counters on the page: busy % against SM % per test, and the per-file figures.

Busy % says a kernel was running; SM % says how much of the GPU's SMs it kept busy. A test high on
the first and low on the second sits in the "busy but barely working" corner: tiny kernels,
launch-bound loops, a single-block kernel. Empty for runs without counters (older files included).
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from pytest_gpuutil.rundoc.metrics import finite_number as _finite
from pytest_gpuutil.report.html_report.fields import as_map, as_text, fixed
from pytest_gpuutil.report.html_report.svg import esc, num

#: The corner: busy at least this, SM below that
CORNER_BUSY_PCT, CORNER_SM_PCT = 50.0, 10.0
#: The record fields the page shows, with their labels (detail view, per-file table)
FIGURES = (("sm_pct", "SM %"), ("tensor_pct", "tensor %"), ("dram_bw_pct", "DRAM %"), ("occupancy_pct", "occupancy %"),
           ("fp16_pct", "FP16 %"), ("fp32_pct", "FP32 %"), ("fp64_pct", "FP64 %"))


def has_counters(tests: Sequence[Mapping[str, Any]]) -> bool:
    """Whether any test has SM or tensor figures (the table then shows their columns)."""
    return any(_finite(t.get("sm_pct")) is not None or _finite(t.get("tensor_pct")) is not None for t in tests)


def counters_of(record: Mapping[str, Any]) -> dict[str, Any]:
    """The detail view's hardware figures of one record (empty: none)."""
    found: dict[str, Any] = {key: record[key] for key, _ in FIGURES if _finite(record.get(key)) is not None}
    for key in ("energy_j", "avg_power_w"):
        if _finite(record.get(key)) is not None:
            found[key] = record[key]
    if found or as_text(record.get("counters_note")):
        found.update(src=as_text(record.get("counters_source")), note=as_text(record.get("counters_note")))
    return found


def in_corner(busy: float, sm: float) -> bool:
    return busy >= CORNER_BUSY_PCT and sm < CORNER_SM_PCT


def busy_vs_sm(points: Sequence[tuple[float, float, str]], width: int = 560, height: int = 300) -> str:
    """A scatter of (busy %, SM %, test), both axes 0-100, with the "busy but barely working" corner shaded."""
    left, right, top, bottom = 44, 12, 10, 34
    w, h = width - left - right, height - top - bottom

    def x(v: float) -> float:
        return left + w * min(max(v, 0.0), 100.0) / 100

    def y(v: float) -> float:
        return top + h * (1 - min(max(v, 0.0), 100.0) / 100)

    corner_x, corner_y = x(CORNER_BUSY_PCT), y(CORNER_SM_PCT)
    parts = [f'<svg class="chart" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
             f'aria-label="busy % against SM % per test">',
             f'<rect class="corner" x="{num(corner_x)}" y="{num(corner_y)}" width="{num(x(100) - corner_x)}" '
             f'height="{num(y(0) - corner_y)}"><title>busy but barely working: busy ≥ {CORNER_BUSY_PCT:g}%, '
             f"SM &lt; {CORNER_SM_PCT:g}%</title></rect>",
             f'<text x="{num(x(100) - 4)}" y="{num(corner_y - 4)}" text-anchor="end" class="v">busy but barely working</text>']
    for tick in (0, 25, 50, 75, 100):
        parts.append(f'<line class="grid" x1="{num(x(tick))}" x2="{num(x(tick))}" y1="{top}" y2="{num(y(0))}"/>'
                     f'<line class="grid" x1="{left}" x2="{num(x(100))}" y1="{num(y(tick))}" y2="{num(y(tick))}"/>'
                     f'<text x="{num(x(tick))}" y="{num(y(0) + 14)}" text-anchor="middle">{tick}</text>'
                     f'<text x="{left - 6}" y="{num(y(tick) + 4)}" text-anchor="end">{tick}</text>')
    parts.append(f'<text x="{num(left + w / 2)}" y="{height - 4}" text-anchor="middle">busy % (a kernel was running)</text>'
                 f'<text x="12" y="{num(top + h / 2)}" text-anchor="middle" transform="rotate(-90 12 {num(top + h / 2)})">'
                 f"SM % (SMs active)</text>")
    for busy, sm, test in points:
        css = "pt bad" if in_corner(busy, sm) else "pt"
        parts.append(f'<circle class="{css}" cx="{num(x(busy))}" cy="{num(y(sm))}" r="3.5">'
                     f"<title>{esc(test)}: busy {busy:.1f}%, SM {sm:.1f}%</title></circle>")
    parts.append("</svg>")
    return "".join(parts)


def _file_table(files: Mapping[str, Any]) -> str:
    """One row per file; the figures no file has are left out."""
    columns = [(key, label, 1) for key, label in FIGURES] + [("energy_j", "energy J", 1)]
    columns = [c for c in columns if any(_finite(as_map(f).get(c[0])) is not None for f in files.values())]
    rows = []
    for name, figures in files.items():
        f = as_map(figures)
        cells = [esc(name), str(f.get("tests", "")), *(fixed(f.get(key), digits) or "–" for key, _, digits in columns)]
        rows.append("<tr><td>" + "</td><td>".join(cells) + "</td></tr>")
    heads = "".join(f"<th>{esc(h)}</th>" for h in ("file", "tests", *(label for _, label, _ in columns)))
    return f'<table class="cmp"><thead><tr>{heads}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


def counters_section(doc: Mapping[str, Any], tests: Sequence[Mapping[str, Any]]) -> str:
    """The section: session figures, the busy-vs-SM scatter and the per-file table ("" without counters)."""
    summary = as_map(doc.get("counters"))
    session, files = as_map(summary.get("session")), as_map(summary.get("files"))
    points = [(_finite(t.get("busy_pct")), _finite(t.get("sm_pct")), str(t["test"])) for t in tests]
    points = [(b, s, name) for b, s, name in points if b is not None and s is not None]
    if not points and not session:
        return ""
    facts = [f"{label} <b>{fixed(session.get(key), 1)}</b>" for key, label in FIGURES if _finite(session.get(key)) is not None]
    if _finite(session.get("energy_j")) is not None:
        facts.append(f"energy <b>{fixed(session.get('energy_j'), 1)} J</b> ({fixed(session.get('avg_power_w'), 0)} W)")
    sources = sorted({as_text(t.get("counters_source")) for t in tests} - {""})
    totals = as_map(doc.get("totals"))
    cost = []
    if _finite(totals.get("counters_startup_s")) is not None:
        cost.append(f"start-up {fixed(totals.get('counters_startup_s'), 3)} s (not charged to any test)")
    if _finite(totals.get("counters_thread_cpu_s")) is not None:
        cost.append(f"sampler thread {fixed(totals.get('counters_thread_cpu_s'), 3)} s of CPU")
    about = (f'<p class="sub">Over the test calls, short tests included: {" · ".join(facts)}'
             f'{" · source " + esc(", ".join(sources)) if sources else ""}</p>') if facts else ""
    if cost:
        about += f'<p class="sub">{esc(" · ".join(cost))}</p>'
    for line in totals.get("counters_fallback") or ():
        about += f'<p class="notice">{esc(str(line))}</p>'

    figures = []
    if points:
        corner = sum(1 for b, s, _ in points if in_corner(b, s))
        figures.append(
            f"<figure><figcaption>Busy % against SM % ({len(points)} tests)</figcaption>{busy_vs_sm(points)}"
            f'<p class="note">Busy %: a kernel was running; SM %: how much of the SMs were active. '
            f"{corner} test{'s' if corner != 1 else ''} in the busy-but-barely-working corner (busy ≥ "
            f"{CORNER_BUSY_PCT:g}%, SM &lt; {CORNER_SM_PCT:g}%): tiny kernels or launch-bound loops keep the GPU "
            "occupied without using it.</p></figure>")
    if files:
        figures.append(f"<figure><figcaption>Per file</figcaption>{_file_table(files)}</figure>")
    return (f'<section id="counters"><h2>Hardware counters</h2>{about}'
            f'<div class="charts">{"".join(figures)}</div></section>')
