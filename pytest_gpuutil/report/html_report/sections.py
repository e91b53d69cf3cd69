"""The page's sections above the test table: the header and its cards, the baseline, the session and GPU charts."""
from __future__ import annotations

from collections import Counter
from typing import Any, Mapping, Optional, Sequence

from pytest_gpuutil.rundoc.metrics import finite_number as _finite
from pytest_gpuutil.rundoc.number_format import format_value
from pytest_gpuutil.report.html_report.comparison import BaselineView
from pytest_gpuutil.report.html_report.fields import as_map, as_text, categories_of, fixed
from pytest_gpuutil.report.html_report.svg import BarItem, Palette, esc, hbar_chart, histogram

#: Bands of the busy-% histogram
BUSY_BINS = 10


def totals_of(doc: Mapping[str, Any], tests: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The document's totals, filled in from the records where an older file lacks them."""
    measured = [t for t in tests if _finite(t.get("gpu_busy_ms")) is not None]
    gpu_ms = sum(_finite(t.get("gpu_busy_ms")) or 0.0 for t in measured)
    wall = sum(_finite(t.get("wall_ms")) or 0.0 for t in measured)
    capacity = sum((_finite(t.get("wall_ms")) or 0.0) * max(1, len(t.get("devices") or ())) for t in measured)
    derived = {
        "tests": len(tests),
        "profiled": len(measured),
        "with_gpu_work": sum(1 for t in measured if t.get("kernel_count") or t.get("gpu_busy_ms")),
        "gpu_busy_ms": gpu_ms,
        "profiled_wall_ms": wall,
        "busy_pct": 100.0 * gpu_ms / capacity if capacity > 0 else 0.0,
    }
    given = as_map(doc.get("totals"))
    return {**derived, **{k: v for k, v in given.items() if v is not None}}


def _card(value: str, label: str, sub: str = "", css: str = "") -> str:
    return (f'<div class="card {css}"><span>{esc(label)}</span><b>{esc(value)}</b>'
            f'{f"<small>{esc(sub)}</small>" if sub else ""}</div>')


def header(doc: Mapping[str, Any], tests: Sequence[Mapping[str, Any]], totals: Mapping[str, Any],
           baseline: Optional[BaselineView]) -> str:
    """The page's header: date, commit, machine, outcomes, and cards of the run's figures."""
    info = as_map(doc.get("machine_info"))
    model, count = info.get("gpu_model"), info.get("gpu_count")
    gpu = f"{count or 0} × {model}" if model else "no GPU"
    facts = [f"<b>{esc(gpu)}</b>"]
    for key, label in (("driver", "driver"), ("cuda", "CUDA"), ("torch", "torch"), ("python", "Python"), ("host", "host")):
        if info.get(key):
            facts.append(f"{label} {esc(info[key])}")
    created = as_text(doc.get("created")) or "unknown date"
    commit = as_text(info.get("git_commit"))
    sub = [esc(created.replace("T", " ")), f"commit <code>{esc(commit[:12])}</code>" if commit else "no git commit"]
    if info.get("argv"):
        sub.append(f"<code>pytest {esc(info['argv'])}</code>")
    if as_text(doc.get("unfinished")):  # a killed run read from its spool (gpuutil report RUN_DIR)
        sub.append(f'<b class="unfinished">{esc(as_text(doc.get("unfinished")))}</b>')
    outcomes = Counter(as_text(t.get("outcome")) or "unknown" for t in tests)
    outcome_text = ", ".join(f"{n} {o}" for o, n in sorted(outcomes.items(), key=lambda kv: (-kv[1], kv[0])))
    cards = [
        _card(f"{_finite(totals.get('busy_pct')) or 0.0:.1f}%", "session GPU busy", "GPU work ÷ profiled test time"),
        _card(f"{_finite(totals.get('gpu_busy_ms')) or 0.0:.3f} ms", "GPU time",
              f"in {(_finite(totals.get('profiled_wall_ms')) or 0.0) / 1000:.2f} s of profiled calls"),
        _card(str(totals.get("tests", len(tests))), "tests",
              f"{totals.get('profiled', 0)} profiled, {totals.get('with_gpu_work', 0)} with GPU work"),
    ]
    startup = _finite(totals.get("startup_s"))
    if startup is not None:
        cards.append(_card(f"{startup:.3f} s", "profiler start-up", "once, not charged to any test"))
    cost = _finite(totals.get("measure_ms"))
    if cost:
        share, test_s = _finite(totals.get("measure_share_pct")), _finite(totals.get("test_s"))
        cards.append(_card(f"{cost / 1000:.3f} s", "measurement cost",
                           f"{share:.1f}% of the {test_s:.2f} s the tests took, until this page was written"
                           if share is not None and test_s else "until this page was written"))
    if baseline is not None:
        bad = baseline.regressions
        cards.append(_card(str(len(bad)), "regressions",
                           f"in {len({r.test for r in bad})} of {baseline.compared} tests compared",
                           "bad" if bad else "good"))
    return (f'<header><h1>GPU utilization</h1><p class="sub">{" · ".join(sub)}</p>'
            f'<p class="machine">{" · ".join(facts)}</p><p class="sub">{esc(outcome_text)}</p>'
            f'<div class="cards">{"".join(cards)}</div></header>')


CMP_HEAD = ('<thead><tr><th>test</th><th>metric</th><th class="n">baseline</th><th class="n">now</th>'
            '<th class="n">change</th><th class="n">limit</th></tr></thead>')


def baseline_section(view: BaselineView) -> str:
    """Regressions as a table; the metrics within their limits are listed by the page's script on demand."""
    bad = view.regressions
    fine = len(view.rows) - len(bad)
    about = [f"baseline <code>{esc(view.label)}</code>"]
    if view.machine_id:
        about.append(f"machine {esc(view.machine_id)}")
    if view.created:
        about.append(f"saved {esc(view.created)}")
    about.append(f"limits <code>{esc(' '.join(view.limits))}</code>")
    counts = f"{view.compared} tests compared"
    if view.new_tests:
        counts += f", {view.new_tests} without a baseline record"
    if view.missing_tests:
        counts += f", {view.missing_tests} only in the baseline"
    verdict = (f'<p class="verdict bad">{len(bad)} regression(s) in {len({r.test for r in bad})} test(s)</p>' if bad
               else '<p class="verdict good">no regressions</p>')
    body = ""
    if bad:
        rows = "".join(
            f'<tr class="reg"><td class="t">{esc(r.test)}</td><td>{esc(r.metric)}<b class="badge">regression</b></td>'
            f'<td class="n">{format_value(r.baseline)}</td><td class="n">→ {format_value(r.current)}</td>'
            f'<td class="n">{esc(r.change_text)}</td><td class="n">{esc(r.limit_text)}</td></tr>'
            for r in bad
        )
        body = f'<table class="cmp">{CMP_HEAD}<tbody>{rows}</tbody></table>'
    if fine:
        body += (f'<details id="cmp-rest"><summary>{fine} compared metric(s) within their limits, closest to the '
                 f'limit first</summary><table class="cmp">{CMP_HEAD}<tbody></tbody></table></details>')
    return (f'<section id="baseline"><h2>Against the baseline</h2><p class="sub">{" · ".join(about)}</p>'
            f'{verdict}<p class="sub">{esc(counts)}</p>{body}</section>')


def session_charts(tests: Sequence[Mapping[str, Any]], totals: Mapping[str, Any], palette: Palette) -> str:
    """GPU time by category, the top tests by GPU time, the busy-% histogram (or a notice: no GPU work)."""
    by_category: dict[str, float] = {}
    for record in tests:
        for name, c in categories_of(record):
            by_category[name] = by_category.get(name, 0.0) + (_finite(c.get("time_us")) or 0.0) / 1000
    busy = _finite(totals.get("gpu_busy_ms")) or 0.0
    category_items = [
        BarItem(name, ms, f"{ms:.3f} ms" + (f" · {100 * ms / busy:.1f}% of busy" if busy else ""), palette.css_class(name))
        for name, ms in sorted(by_category.items(), key=lambda kv: -kv[1])
    ]
    working = [t for t in tests if (_finite(t.get("gpu_busy_ms")) or 0.0) > 0]
    top = sorted(working, key=lambda t: (-(_finite(t.get("gpu_busy_ms")) or 0.0), str(t.get("test"))))[:15]
    top_items = [
        BarItem(str(t["test"]).split("/")[-1], _finite(t.get("gpu_busy_ms")) or 0.0,
                f"{_finite(t.get('gpu_busy_ms')) or 0.0:.3f} ms · {fixed(t.get('busy_pct'), 1)}% busy",
                palette.css_class(categories_of(t)[0][0]) if categories_of(t) else "kbar", str(t["test"]))
        for t in top
    ]
    counts = [0] * BUSY_BINS
    for t in working:
        pct = min(max(_finite(t.get("busy_pct")) or 0.0, 0.0), 100.0)
        counts[min(int(pct // (100 / BUSY_BINS)), BUSY_BINS - 1)] += 1
    labels = [f"{k * 10}–{k * 10 + 10}" for k in range(BUSY_BINS)]
    figures = []
    if category_items:
        figures.append(f"<figure><figcaption>GPU time by category</figcaption>{hbar_chart(category_items, 'GPU time by category')}"
                       '<p class="note">Categories can overlap (communication beside compute), so they may add up to '
                       "more than the busy time.</p></figure>")
    if top_items:
        figures.append(f"<figure><figcaption>Top tests by GPU time</figcaption>"
                       f"{hbar_chart(top_items, 'Top tests by GPU time')}<p class=\"note\">Bar colour: the test's "
                       "largest category.</p></figure>")
    if working:
        figures.append(f"<figure><figcaption>Busy % distribution ({len(working)} tests with GPU work)</figcaption>"
                       f"{histogram(counts, labels, 'Busy % distribution')}</figure>")
    if not figures:
        return ('<section id="session"><h2>Session</h2><p class="notice">No GPU work was measured in this run '
                "(no CUDA device, or no test launched GPU work): the GPU fields are empty.</p></section>")
    return f'<section id="session"><h2>Session</h2><div class="charts">{"".join(figures)}</div></section>'


def gpu_section(doc: Mapping[str, Any], tests: Sequence[Mapping[str, Any]]) -> str:
    """Busy time per physical GPU and per worker; empty for a run on one GPU without workers."""
    gpus = [g for g in (doc.get("gpus") or ()) if isinstance(g, Mapping)]
    workers: dict[str, dict[str, Any]] = {}
    for t in tests:
        entry = workers.setdefault(as_text(t.get("worker")) or "main", {"ms": 0.0, "tests": 0, "gpus": set()})
        entry["ms"] += _finite(t.get("gpu_busy_ms")) or 0.0
        entry["tests"] += 1
        entry["gpus"].update(str(g) for g in as_map(t.get("gpu_busy_us_by_device")))
    if len(gpus) <= 1 and set(workers) <= {"main"}:
        return ""
    gpu_items = [
        BarItem(f"GPU {g.get('gpu')}", _finite(g.get("busy_ms")) or 0.0,
                f"{_finite(g.get('busy_ms')) or 0.0:.3f} ms · {g.get('tests', 0)} tests · "
                f"{', '.join(str(w) for w in g.get('workers') or ())}")
        for g in gpus
    ]
    worker_items = [
        BarItem(name, w["ms"], f"{w['ms']:.3f} ms · {w['tests']} tests"
                + (f" · GPU {', '.join(sorted(w['gpus']))}" if w["gpus"] else ""))
        for name, w in sorted(workers.items())
    ]
    figures = "".join(
        f"<figure><figcaption>{caption}</figcaption>{hbar_chart(items, caption, label_width=90)}</figure>"
        for caption, items in (("Busy time per physical GPU", gpu_items), ("Busy time per worker", worker_items)) if items
    )
    return f'<section id="gpus"><h2>GPUs and workers</h2><div class="charts">{figures}</div></section>'

