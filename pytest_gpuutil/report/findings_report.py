"""The findings of a run, grouped by rule: how many tests, how bad, the worst ones (terminal and HTML).

Records keep their findings as plain mappings (gpu_util.json's shape); here they become
:class:`~pytest_gpuutil.analysis.rules.Finding` again and are grouped in the rules' order.
"""
from __future__ import annotations

from dataclasses import dataclass
from html import escape
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Optional, Sequence

from pytest_gpuutil.analysis.rules import RULES_BY_ID, SEVERITIES, Finding
from pytest_gpuutil.report.tables import caption, common_prefix, shorten_test_ids, wrap

if TYPE_CHECKING:
    from pytest_gpuutil.records import TestRecord

#: tests listed under each rule in the terminal
WORST_SHOWN = 3
SECTION = "findings: what to fix (pytest-gpuutil)"


@dataclass(frozen=True)
class RuleGroup:
    """One rule's findings in a run."""

    rule: str
    #: (test, finding), worst first (highest impact, then test name)
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
        RuleGroup(rule, tuple(sorted(found, key=lambda tf: (-tf[1].impact_pct, tf[0]))))
        for rule, found in sorted(by_rule.items(), key=lambda kv: (order.get(kv[0], len(order)), kv[0]))
    ]


def looked_for(records: Sequence[TestRecord]) -> int:
    """How many tests had findings looked for (their records say so, with none or some)."""
    return sum(1 for r in records if r.findings is not None)


def finding_lines(records: Sequence[TestRecord], width: int = 120) -> list[str]:
    """The terminal's findings section, no line wider than ``width`` (no lines when findings were not
    looked for in any test): prose wrapped after its clauses; the start the listed test ids share
    printed once (a caption) and cut from them, the rest shortened where the parts differ."""
    checked = looked_for(records)
    if not checked:
        return []
    groups = group_findings(records)
    if not groups:
        return [f"no findings in {checked} tests"]
    tests_with = len({test for g in groups for test, _ in g.tests})
    lines = wrap(f"{tests_with} of {checked} tests have findings ({sum(g.count for g in groups)} in all; "
                 "each finding's evidence is in gpu_util.json and the HTML report)", width)
    shown = sorted({test for g in groups for test, _ in g.tests[:WORST_SHOWN]})
    prefix = common_prefix(shown)
    if prefix:
        lines.append(caption(prefix, width))
    short = dict(zip(shown, shorten_test_ids([t[len(prefix):] for t in shown], max(20, min(60, width - 8)))))
    for group in groups:
        severities = ", ".join(f"{n} {s}" for s, n in group.by_severity().items())
        lines += wrap(f"{group.rule}: {group.count} test{'s' if group.count != 1 else ''} ({severities}): "
                      f"fix: {group.fix}", width)
        for test, finding in group.tests[:WORST_SHOWN]:
            lines += wrap(f"    {short[test]}  [{finding.severity}] {finding.message}", width, indent="      ")
        if group.count > WORST_SHOWN:
            lines.append(f"    ... and {group.count - WORST_SHOWN} more")
    return lines


def esc(text: object) -> str:
    return escape(str(text), quote=True)


def findings_json(findings: Iterable[Finding]) -> list[dict[str, Any]]:
    return [f.to_dict() for f in findings]


def findings_section(tests: Sequence[Mapping[str, Any]]) -> str:
    """The HTML report's findings by rule ("" when findings were not looked for in any test)."""
    checked = [t for t in tests if isinstance(t.get("findings"), (list, tuple))]
    if not checked:
        return ""
    groups = group_pairs((str(t["test"]), t.get("findings")) for t in checked)
    if not groups:
        return (f'<section id="findings"><h2>Findings: what to fix</h2><p class="sub">No findings in the '
                f"{len(checked)} tests looked at.</p></section>")
    with_findings = len({test for g in groups for test, _ in g.tests})
    rows = []
    for group in groups:
        severities = " ".join(f'<span class="sev {esc(s)}">{n} {esc(s)}</span>' for s, n in group.by_severity().items())
        worst = "<br>".join(f'{esc(test)} <span class="note">({f.impact_pct:.0f}% of its window)</span>'
                            for test, f in group.tests[:WORST_SHOWN])
        more = f'<br><span class="note">and {group.count - WORST_SHOWN} more</span>' if group.count > WORST_SHOWN else ""
        rows.append(f'<tr><td><b>{esc(group.rule)}</b><br><span class="note">{esc(group.title)}</span></td>'
                    f'<td class="n">{group.count}</td><td>{severities}</td><td class="t">{worst}{more}</td>'
                    f"<td>{esc(group.fix)}</td></tr>")
    return (f'<section id="findings"><h2>Findings: what to fix</h2><p class="sub">{with_findings} of {len(checked)} '
            f"tests have findings · worst first, by the share of the test's window the problem takes · each test's "
            f"findings, with their evidence, are in its detail view (filter: with findings)</p>"
            f'<div class="scroll"><table><thead><tr><th>rule</th><th class="n">tests</th><th>severity</th>'
            f'<th>worst tests</th><th>fix (for the worst test)</th></tr></thead><tbody>{"".join(rows)}</tbody></table>'
            f"</div></section>")
