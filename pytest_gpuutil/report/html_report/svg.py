"""The page's SVG, written as plain strings (no library): category colours, stacked bars, bar charts, a histogram.

A bar is a few ``<rect>``s, so 1,000 rows of them stay small.
"""
from __future__ import annotations

from dataclasses import dataclass
from html import escape
from typing import Iterable, Mapping, Optional, Sequence

from pytest_gpuutil.analysis.classify import CATEGORIES

#: A colour per built-in category (Tableau 10 and its light tints), then spares for categories of your own.
CATEGORY_COLORS: Mapping[str, str] = {
    "gemm": "#4e79a7",
    "conv": "#a0cbe8",
    "attention": "#f28e2b",
    "communication": "#e15759",
    "triton_pointwise": "#499894",
    "triton_reduction": "#86bcb6",
    "triton_persistent_reduction": "#b6992d",
    "triton_template": "#f1ce63",
    "fft": "#d37295",
    "linalg": "#ff9d9a",
    "sort_scan": "#d4a6c8",
    "normalization": "#8cd17d",
    "reduction": "#59a14f",
    "elementwise": "#b07aa1",
    "memcpy": "#76b7b2",
    "memset": "#9d7660",
    "other": "#bab0ac",
}
SPARE_COLORS = ("#fabfd2", "#d7b5a6", "#79706e", "#ffbe7d", "#8c564b", "#17becf", "#bcbd22", "#7f7f7f")
IDLE_COLOR = "#eaeef2"


def esc(text: object) -> str:
    """Text for HTML/SVG content or a quoted attribute."""
    return escape(str(text), quote=True)


def num(value: float, digits: int = 1) -> str:
    """A coordinate or width: fixed decimals without trailing zeros."""
    text = f"{value:.{digits}f}".rstrip("0").rstrip(".")
    return text if text not in ("", "-0") else "0"


@dataclass(frozen=True)
class Palette:
    """Category name -> CSS class and colour, in display order (built-ins first, then the rest by name)."""

    order: tuple[str, ...]

    @classmethod
    def of(cls, names: Iterable[str]) -> "Palette":
        present = set(names)
        known = [c for c in CATEGORIES if c in present]
        return cls(tuple(known + sorted(present - set(known))))

    def css_class(self, name: str) -> str:
        return f"k{self.order.index(name)}" if name in self.order else "kx"

    def color(self, name: str) -> str:
        if name in CATEGORY_COLORS:
            return CATEGORY_COLORS[name]
        extra = [n for n in self.order if n not in CATEGORY_COLORS]
        return SPARE_COLORS[extra.index(name) % len(SPARE_COLORS)] if name in extra else CATEGORY_COLORS["other"]


def palette_css(palette: Palette) -> str:
    """CSS rules giving each category class its colour (fill for SVG, background for legend swatches)."""
    rules = [f".{palette.css_class(n)}{{fill:{palette.color(n)};background:{palette.color(n)}}}" for n in palette.order]
    return "\n".join(rules + [f".kx{{fill:{CATEGORY_COLORS['other']};background:{CATEGORY_COLORS['other']}}}"])


def legend(palette: Palette) -> str:
    """Swatches naming each category, as HTML."""
    return "".join(f'<span><i class="{palette.css_class(n)}"></i>{esc(n)}</span>' for n in palette.order)


def _segments(parts: Sequence[tuple[str, float]]) -> list[tuple[str, float, float, float]]:
    """(name, x, width, pct) in a 0..100 box for shares given in percent, clipped to the box."""
    out, x = [], 0.0
    for name, pct in parts:
        width = min(max(pct, 0.0), 100.0 - x)
        if width >= 0.05:
            out.append((name, x, width, pct))
            x += width
    return out


def stacked_bar(parts: Sequence[tuple[str, float]], palette: Palette, css_class: str = "bar") -> str:
    """A 0-100 % stacked bar (e.g. categories as % of the test's window), sized by CSS; one tooltip."""
    segments = _segments(parts)
    rects = "".join(
        f'<rect class="{palette.css_class(name)}" x="{num(x, 2)}" width="{num(w, 2)}" height="1"/>'
        for name, x, w, _ in segments
    )
    tip = " · ".join(f"{name} {pct:.1f}%" for name, _, _, pct in segments)
    return (f'<svg class="{css_class}" viewBox="0 0 100 1" preserveAspectRatio="none">'
            f"{f'<title>{esc(tip)}</title>' if tip else ''}{rects}</svg>")


def inline_bar(parts: Sequence[tuple[str, float]], palette: Palette, width: int = 240, height: int = 14) -> str:
    """The same bar with inline colours and a fixed size (for pages without this report's CSS)."""
    rects = "".join(
        f'<rect fill="{palette.color(name)}" x="{num(x, 2)}" width="{num(w, 2)}" height="1">'
        f"<title>{esc(name)} {pct:.1f}%</title></rect>"
        for name, x, w, pct in _segments(parts)
    )
    return (f'<svg width="{width}" height="{height}" viewBox="0 0 100 1" preserveAspectRatio="none" '
            f'style="background:{IDLE_COLOR};vertical-align:middle">{rects}</svg>')


@dataclass(frozen=True)
class BarItem:
    """One bar of a horizontal bar chart."""

    label: str
    value: float
    text: str  # printed after the bar
    css_class: str = "kbar"
    tooltip: str = ""


def hbar_chart(items: Sequence[BarItem], title: str, width: int = 560, label_width: int = 200, row: int = 20) -> str:
    """Horizontal bars, one per item, longest = the largest value; labels shortened to fit."""
    if not items:
        return ""
    height = row * len(items) + 4
    largest = max((i.value for i in items), default=0.0) or 1.0
    room = max(width - label_width - max(6.2 * len(i.text) + 12 for i in items), 40.0)
    chars = max(8, label_width // 7)
    parts = [f'<svg class="chart" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
             f'aria-label="{esc(title)}">']
    for k, item in enumerate(items):
        y = k * row + 2
        w = max(room * max(item.value, 0.0) / largest, 0.0)
        label = item.label if len(item.label) <= chars else "…" + item.label[-(chars - 1):]
        tip = f"<title>{esc(item.tooltip or item.label)}</title>"
        parts.append(
            f'<g><text x="{label_width - 6}" y="{y + row * 0.68:.1f}" text-anchor="end">{esc(label)}</text>'
            f'<rect class="{item.css_class}" x="{label_width}" y="{y + 3}" width="{num(w)}" height="{row - 7}"/>'
            f'<text x="{label_width + w + 5:.1f}" y="{y + row * 0.68:.1f}" class="v">{esc(item.text)}</text>{tip}</g>'
        )
    parts.append("</svg>")
    return "".join(parts)


def histogram(counts: Sequence[int], labels: Sequence[str], title: str, width: int = 560, height: int = 180) -> str:
    """Vertical bars of counts (e.g. tests per busy-% band), the count above each bar."""
    if not counts:
        return ""
    top, bottom, left = 16, 22, 8
    slot = (width - 2 * left) / len(counts)
    largest = max(counts) or 1
    usable = height - top - bottom
    parts = [f'<svg class="chart" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
             f'aria-label="{esc(title)}">']
    for k, (count, label) in enumerate(zip(counts, labels)):
        h = usable * count / largest
        x = left + k * slot
        parts.append(
            f'<g><rect class="kbar" x="{num(x + 3)}" y="{num(top + usable - h)}" width="{num(slot - 6)}" height="{num(h)}"/>'
            f'<text x="{num(x + slot / 2)}" y="{num(top + usable - h - 3)}" text-anchor="middle" class="v">{count}</text>'
            f'<text x="{num(x + slot / 2)}" y="{height - 6}" text-anchor="middle">{esc(label)}</text>'
            f"<title>{esc(label)}: {count} tests</title></g>"
        )
    parts.append(f'<line x1="{left}" x2="{width - left}" y1="{top + usable}" y2="{top + usable}" class="axis"/></svg>')
    return "".join(parts)


def sparkline(values: Sequence[Optional[float]], title: str, width: int = 90, height: int = 18,
              bad: bool = False) -> str:
    """A trend line of ``values`` (oldest first; None leaves a gap in x), its last point marked (red when
    ``bad``); colours inline, so it needs none of the page's CSS. "" with fewer than two values."""
    points = [(k, v) for k, v in enumerate(values) if v is not None]
    if len(points) < 2:
        return ""
    low, high = min(v for _, v in points), max(v for _, v in points)
    pad, step = 2.0, (width - 4.0) / max(len(values) - 1, 1)

    def y(value: float) -> float:
        return height / 2 if high == low else pad + (height - 2 * pad) * (high - value) / (high - low)

    line = " ".join(f"{num(pad + k * step)},{num(y(v))}" for k, v in points)
    k, last = points[-1]
    colour = "#e15759" if bad else "#4e79a7"
    return (f'<svg class="spark" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
            f'aria-label="{esc(title)}"><title>{esc(title)}</title>'
            f'<polyline points="{line}" fill="none" stroke="#4e79a7" stroke-width="1.2"/>'
            f'<circle cx="{num(pad + k * step)}" cy="{num(y(last))}" r="2" fill="{colour}"/></svg>')
