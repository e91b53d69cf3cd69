"""The page's comparison view: for each flagged test, why it regressed (gates/explain.py's explanation,
read from the run document's ``explanations``), with before/after bars per kernel and per category."""
from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from pytest_gpuutil.report.html_report.fields import as_map, as_text
from pytest_gpuutil.report.html_report.svg import esc

#: the bars' look, on the elements themselves (the page's stylesheet is report.css; this view adds none)
_BAR = "display:inline-block;height:.7em;min-width:1px;vertical-align:middle;background:"
_COLOURS = {"before": "#9aa4b1", "after": "#d9534f"}
_KERNEL_KINDS = ("new kernel", "kernel gone", "slower", "faster", "shift")
_BAR_PX = 240


def _number(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def _bars(title: str, rows: Sequence[tuple[str, float, float]]) -> str:
    """A table of before/after bars on one scale: name, then each run's bar and ms."""
    if not rows:
        return ""
    scale = max(max(a, b) for _, a, b in rows) or 1.0
    body = "".join(
        f'<tr class="why-row"><td>{esc(name)}</td>'
        f'<td><span class="why-bar before" style="{_BAR}{_COLOURS["before"]};width:{round(_BAR_PX * a / scale)}px"></span> '
        f'<span class="ms">{a:.2f} ms</span></td>'
        f'<td><span class="why-bar after" style="{_BAR}{_COLOURS["after"]};width:{round(_BAR_PX * b / scale)}px"></span> '
        f'<span class="ms">{b:.2f} ms</span></td></tr>'
        for name, a, b in rows)
    return (f'<table class="why-bars" data-kind="{esc(title)}"><thead><tr><th>{esc(title)}</th><th>baseline</th>'
            f"<th>now</th></tr></thead><tbody>{body}</tbody></table>")


def _one(test: str, why: Mapping[str, Any]) -> str:
    differences = [as_map(d) for d in why.get("differences") or () if isinstance(d, Mapping)]
    items = "".join(f"<li>{esc(as_text(d.get('text')))}</li>" for d in differences)
    kernels = [(as_text(d.get("name")), _number(d.get("before_ms")), _number(d.get("after_ms")))
               for d in differences if d.get("kind") in _KERNEL_KINDS]
    labels = [(as_text(r[0]), _number(r[1]), _number(r[2])) for r in why.get("by_label") or ()
              if isinstance(r, (list, tuple)) and len(r) == 3]
    gpu = why.get("gpu_ms") or (0, 0)
    return (f'<section class="why-test" data-test="{esc(test)}"><h3>{esc(test)}</h3>'
            f"<p>GPU {_number(gpu[0]):.2f} → {_number(gpu[1]):.2f} ms; "
            f"{_number(why.get('explained_pct')):.0f}% of the change explained by the differences below</p>"
            f"<ol>{items}</ol>{_bars('kernel', kernels)}{_bars('category', labels)}</section>")


def why_section(doc: Mapping[str, Any]) -> str:
    """The comparison view, or "" when no test was flagged (or the run was not compared)."""
    explanations = as_map(doc.get("explanations"))
    parts: Iterable[str] = (_one(test, as_map(why)) for test, why in sorted(explanations.items())
                            if isinstance(why, Mapping))
    body = "".join(parts)
    if not body:
        return ""
    return (f'<section class="why" id="why"><h2>Why tests regressed</h2>'
            f"<p>What changed in each flagged test's GPU work between the baseline and this run, largest first, "
            f"each with its share of the change.</p>{body}</section>")
