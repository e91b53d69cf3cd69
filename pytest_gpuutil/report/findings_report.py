"""The findings of a run: the session's ranking of fixes by the time they would save (terminal,
HTML, gpu_util.json's ``findings_summary``), and the findings grouped by rule (HTML).

Records keep their findings as plain mappings (gpu_util.json's shape); here they become
:class:`~pytest_gpuutil.analysis.finding_records.Finding` again. The ranking groups the reported findings by
rule and test file and sorts the groups by summed ``saving_ms``.
"""
from __future__ import annotations

from collections.abc import Mapping
from html import escape
from itertools import compress
from operator import attrgetter

from pytest_gpuutil.analysis.finding_records import DEFAULT_FLOOR, SEVERITIES, Finding, Floor, split_by_floor
from pytest_gpuutil.analysis.findings import (
    WORST_TESTS_KEPT,
    findings_summary,
    rank_fixes,
    records_findings_summary,
    worst_places,
    worst_tests,
)
from pytest_gpuutil.analysis.rules import RULES_BY_ID
from pytest_gpuutil.frozen import frozen
from pytest_gpuutil.report.tables import caption, common_prefix, shorten_test_ids, wrap

TYPE_CHECKING = False  # typing's, without importing typing at run time (gpuutil analyze's start-up)
if TYPE_CHECKING:
    from typing import Any, Iterable, Optional, Sequence

    from pytest_gpuutil.analysis.findings import Fix
    from pytest_gpuutil.records import TestRecord

#: tests listed under each rule in the HTML page's findings section
WORST_SHOWN = 3
SECTION = "findings: what to fix (pytest-gpuutil)"


@frozen
class RuleGroup:
    """One rule's findings in a run."""

    rule: str
    #: (test, finding), worst first (largest saving, then test name)
    tests: tuple[tuple[str, Finding], ...]

    @property
    def count(self) -> int:
        return len(self.tests)

    def by_severity(self) -> dict[str, int]:
        counts = {s: 0 for s in SEVERITIES}
        for _, finding in self.tests:
            counts[finding.severity] = counts.get(finding.severity, 0) + 1
        return {s: n for s, n in counts.items() if n}

    @property
    def saving_ms(self) -> float:
        return sum(f.saving_ms for _, f in self.tests)

    @property
    def fix(self) -> str:
        """The worst test's fix (a rule's fix may depend on the case, as gpu-idle's on where the idle time is)."""
        return self.tests[0][1].fix

    @property
    def title(self) -> str:
        rule = RULES_BY_ID.get(self.rule)
        return rule.title if rule is not None else ""


def group_findings(records: Iterable[TestRecord]) -> list[RuleGroup]:
    """The run's findings by rule, in the rules' order (unknown rules, from other versions, last)."""
    return group_pairs((r.test, r.findings) for r in records)


def group_pairs(pairs: Iterable[tuple[str, Optional[Sequence[Any]]]]) -> list[RuleGroup]:
    """:func:`group_findings` of (test, its findings as gpu_util.json holds them) pairs."""
    by_rule: dict[str, list[tuple[str, Finding]]] = {}
    for test, found in pairs:
        for item in found if isinstance(found, (list, tuple)) else ():
            if isinstance(item, Mapping):
                finding = Finding.from_dict(item)
                by_rule.setdefault(finding.rule, []).append((test, finding))
    order = {rule: i for i, rule in enumerate(RULES_BY_ID)}
    return [
        RuleGroup(rule, tuple(sorted(found, key=lambda tf: (-tf[1].saving_ms, -tf[1].impact_pct, tf[0]))))
        for rule, found in sorted(by_rule.items(), key=lambda kv: (order.get(kv[0], len(order)), kv[0]))
    ]


def looked_for(records: Sequence[TestRecord]) -> int:
    """How many tests had findings looked for (their records say so, with none or some)."""
    return sum(1 for r in records if r.findings is not None)


# -- the session's ranking ----------------------------------------------------------------------

#: ranking lines in the terminal (all with -v), worst tests shown (WORST_TESTS_KEPT with -v), and
#: the most lines the terminal's findings part takes without -v
TOP_SHOWN = 5
WORST_TESTS_SHOWN = 3
WORST_TESTS_VERBOSE = WORST_TESTS_KEPT
MOST_LINES = 12


def saving_text(ms: float) -> str:
    """A saving as the ranking prints it: 1.9 s, 55 ms, 3.2 ms, 0.4 ms."""
    if ms >= 1000:
        return f"{ms / 1000:.1f} s"
    return f"{ms:.0f} ms" if ms >= 10 else f"{ms:.1f} ms"


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def _fix_line(fix: Fix, width: int) -> str:
    """A ranking line: saving, action, the file, how many tests, and the largest finding's place.
    What does not fit goes in this order: the file's start, then the file (the place names its
    file then), then the place's start; its line number stays."""
    head = f"  {saving_text(fix.saving_ms):>7}  {fix.action}"
    count = f": {fix.tests} test{'s' if fix.tests != 1 else ''}"
    place = _fix_place_text(fix)
    scope_room = width - len(head) - len(" in ") - len(count) - len(place)
    if scope_room >= len(fix.scope):
        return head + " in " + fix.scope + count + place
    if scope_room >= MIN_SCOPE_COLUMNS or not fix.first_place:
        scope = _cut_start(fix.scope, max(MIN_SCOPE_COLUMNS, scope_room))
        return _fit(head + " in " + scope + count + place, width)
    room = width - len(head) - len(count) - len(", at ")  # the place alone, from its end
    return _fit(head + count + ", at " + _cut_start(fix.first_place, max(11, room)), width)  # 8 of the place at least


def _cut_start(text: str, width: int) -> str:
    """``text``, or "..." and its last ``width`` - 3 characters where it is longer than ``width``
    (a path cut from its start: the file name and line number stay)."""
    return text if len(text) <= width else "..." + text[-(width - 3):]


#: a ranking line keeps at least this much of its file's path (its end: the file name), else names
#: the file through its place alone
MIN_SCOPE_COLUMNS = 10


def _fix_place_text(fix: Fix) -> str:
    """", line 45" (the place is in the fix's file) or ", at path:line"; "" without a place."""
    place = fix.first_place
    if not place:
        return ""
    if place.startswith(fix.scope + ":"):
        return f", line {place[len(fix.scope) + 1:]}"
    return ", at " + place


def finding_lines(records: Sequence[TestRecord], width: int = 120, verbose: bool = False,
                  floor: Optional[Floor] = None, summary: Any = ...) -> list[str]:
    """The terminal's findings part (no lines when findings were not looked for in any test): the
    counts, the session's ranking of fixes by summed saving (``TOP_SHOWN`` lines, all with -v) and
    the worst tests; at most ``MOST_LINES`` lines without -v, none wider than ``width``. ``summary``:
    the records' ``findings_summary`` where it was made already (gpu_util.json's), else made here."""
    if summary is ...:
        summary = records_findings_summary(records, floor)
    if summary is None:
        return []
    floor_text = f"{summary['floor']['ms']:g} ms and {summary['floor']['pct']:g} %"
    below = summary["below_floor"]
    below_text = f"; {below} under the floor in gpu_util.json" if below else ""
    if not summary["findings"]:
        return wrap(f"no findings worth {floor_text} of a test's time in {summary['tests']} tests{below_text}", width)
    lines = wrap(f"{summary['tests_with_findings']} of {summary['tests']} tests have findings worth {floor_text} "
                 f"of their time ({summary['findings']} in all{below_text})", width)
    with_findings = [(r.test, r.findings) for r in compress(records, map(attrgetter("findings"), records))]
    fixes = rank_fixes(with_findings)  # (the tests without findings add nothing to these)
    shown = fixes if verbose else fixes[:TOP_SHOWN]
    lines.append(_fit(f"top fixes for this run, by the time they would save (about {saving_text(summary['saving_ms'])} "
                      "in all):", width))
    lines += [_fix_line(fix, width) for fix in shown]
    if len(fixes) > len(shown):
        lines.append(f"  ... and {len(fixes) - len(shown)} more (-v; all in gpu_util.json findings_summary)")
    worst = worst_tests(with_findings)
    room = WORST_TESTS_VERBOSE if verbose else min(WORST_TESTS_SHOWN, MOST_LINES - len(lines) - 2)
    if room > 0 and worst:
        lines.append("worst tests (each finding's evidence: gpu_util.json, the HTML report):")
        kept = worst[:room]
        prefix = common_prefix([test for test, _, _ in kept]) if len(kept) > 1 else ""
        if prefix and (verbose or len(lines) + len(kept) + 1 <= MOST_LINES):
            lines.append(caption(prefix, width))
        else:
            prefix = ""
        rule_width = max(len(rule) for _, _, rule in kept)
        places = worst_places(kept_records(records, kept))
        place_room = max(len("  at ...:0000"), width - 13 - rule_width - MIN_ID_COLUMNS)
        shown = {test: _place_text(places.get(test, ""), place_room) for test, _, _ in kept}
        place_width = max(len(text) for text in shown.values())
        room_for_ids = max(MIN_ID_COLUMNS, width - 13 - rule_width - place_width)
        short = shorten_test_ids([test[len(prefix):] for test, _, _ in kept], room_for_ids)
        for (test, ms, rule), name in zip(kept, short):
            lines.append(f"  {saving_text(ms):>7}  {name}  {rule}{shown[test]}")
    return [_fit(line, width) for line in lines]


#: a worst test's first place is shown in at most this many columns (its end: the file and line)
PLACE_COLUMNS = 44
#: a worst test's line keeps at least this much of its test id
MIN_ID_COLUMNS = 20


def _place_text(place: str, room: int = PLACE_COLUMNS + 5) -> str:
    """"  at path:line" for a worst-test line ("" without a place), the path's start cut to fit
    ``room`` columns (and ``PLACE_COLUMNS`` for the place): the line number always stays."""
    if not place:
        return ""
    keep = max(len("...:0000"), min(PLACE_COLUMNS, room - len("  at ")))
    return "  at " + _cut_start(place, keep)


def kept_records(records: Sequence["TestRecord"], kept: Sequence[tuple[str, float, str]]) -> list[tuple[str, Any]]:
    """(test, findings) of the records of the ``kept`` worst tests."""
    wanted = {test for test, _, _ in kept}
    return [(r.test, r.findings) for r in records if r.test in wanted and r.findings is not None]


def trace_findings_text(findings: Optional[Sequence[Finding]], floor: Optional[Floor] = None) -> str:
    """The findings of one trace after its report, as ``gpuutil analyze`` prints them: each reported
    one with its saving and basis, those under the floor counted ("" when not looked for)."""
    if findings is None:
        return ""
    reported, below = split_by_floor(findings, floor or DEFAULT_FLOOR)
    under = f" ({len(below)} under the floor of {(floor or DEFAULT_FLOOR).text})" if below else ""
    if not reported:
        return f"\nfindings: none{under}"
    lines = ["", f"findings (what to fix, largest saving first){under}:"]
    for f in sorted(reported, key=lambda f: -f.saving_ms):
        lines.append(f"  {f.rule} [{f.severity}], saves about {saving_text(f.saving_ms)}: {f.message}")
        lines.append(f"      fix: {f.fix}")
        lines.append(f"      saving: {f.saving_basis}")
    return "\n".join(lines)


def esc(text: object) -> str:
    return escape(str(text), quote=True)


def findings_json(findings: Iterable[Finding]) -> list[dict[str, Any]]:
    return [f.to_dict() for f in findings]


def findings_section(tests: Sequence[Mapping[str, Any]], summary: Optional[Mapping[str, Any]] = None) -> str:
    """The HTML report's findings: the session's ranking of fixes by saving, then the findings by
    rule ("" when findings were not looked for in any test). ``summary``: the run document's
    ``findings_summary`` (for its floor; made from the tests when absent)."""
    checked = [t for t in tests if isinstance(t.get("findings"), (list, tuple))]
    if not checked:
        return ""
    made = findings_summary(checked)
    floor = summary.get("floor") if isinstance(summary, Mapping) and isinstance(summary.get("floor"), Mapping) else None
    floor = floor or (made or {}).get("floor") or {}
    floor_text = f"{floor.get('ms', DEFAULT_FLOOR.ms):g} ms and {floor.get('pct', DEFAULT_FLOOR.pct):g} %"
    below = (made or {}).get("below_floor", 0)
    below_note = (f" · {below} finding{'s' if below != 1 else ''} under the floor (a saving under {floor_text} of "
                  "the test's time) are not shown: gpu_util.json keeps them under each test's below_floor") if below else ""
    groups = group_pairs((str(t["test"]), t.get("findings")) for t in checked)
    if not groups:
        return (f'<section id="findings"><h2>Findings: what to fix</h2><p class="sub">No findings worth {floor_text} '
                f"of a test's time in the {len(checked)} tests looked at{below_note}.</p></section>")
    with_findings = len({test for g in groups for test, _ in g.tests})
    fixes = rank_fixes((str(t["test"]), t.get("findings")) for t in checked)
    ranking = "".join(
        f'<tr><td class="n">{esc(saving_text(f.saving_ms))}</td><td>{esc(f.action)} in <b>{esc(f.scope)}</b></td>'
        f'<td class="n">{f.tests}</td><td>{esc(f.rule)}</td></tr>' for f in fixes)
    rows = []
    for group in groups:
        severities = " ".join(f'<span class="sev {esc(s)}">{n} {esc(s)}</span>' for s, n in group.by_severity().items())
        worst = "<br>".join(f'{esc(test)} <span class="note">(saves about {esc(saving_text(f.saving_ms))}: '
                            f"{esc(f.saving_basis)})</span>" for test, f in group.tests[:WORST_SHOWN])
        more = f'<br><span class="note">and {group.count - WORST_SHOWN} more</span>' if group.count > WORST_SHOWN else ""
        rule = RULES_BY_ID.get(group.rule)
        basis = f'<br><span class="note">saving: {esc(rule.saving)}</span>' if rule is not None and rule.saving else ""
        rows.append(f'<tr><td><b>{esc(group.rule)}</b><br><span class="note">{esc(group.title)}</span>{basis}</td>'
                    f'<td class="n">{group.count}</td><td class="n">{esc(saving_text(group.saving_ms))}</td>'
                    f'<td>{severities}</td><td class="t">{worst}{more}</td><td>{esc(group.fix)}</td></tr>')
    return (f'<section id="findings"><h2>Findings: what to fix</h2><p class="sub">{with_findings} of {len(checked)} '
            f"tests have findings worth {floor_text} of their time{below_note}</p>"
            f'<h3>Top fixes for this run</h3><p class="sub">by rule and test file, largest estimated saving first</p>'
            f'<div class="scroll"><table id="findings-ranking"><thead><tr><th class="n">saves about</th><th>fix</th>'
            f'<th class="n">tests</th><th>rule</th></tr></thead><tbody>{ranking}</tbody></table></div>'
            f'<h3>By rule</h3><p class="sub">worst first, by the time the fix would save · each test\'s findings, with '
            f"their evidence, are in its detail view (filter: with findings)</p>"
            f'<div class="scroll"><table><thead><tr><th>rule</th><th class="n">tests</th><th class="n">saves about</th>'
            f'<th>severity</th><th>worst tests</th><th>fix (for the worst test)</th></tr></thead><tbody>{"".join(rows)}'
            f"</tbody></table></div></section>")
