"""What a comparison covered, in words: how many baseline tests matched, and why the rest did not."""
from __future__ import annotations

from dataclasses import dataclass

from pytest_gpuutil.gates.matching import common_shift
from pytest_gpuutil.gates.regression import Comparison

#: what the docs tell users to write (the value of a path option as a word of its own moves the rootdir)
PATH_ADVICE = "write path options as --opt=PATH (as two words pytest takes PATH for a test path when choosing the rootdir)"


@dataclass(frozen=True)
class CoverageLine:
    """One line about the comparison's coverage; ``failed``: it is why the gate failed."""

    text: str
    failed: bool = False


def _example(ids: tuple[str, ...]) -> str:
    return f" (e.g. {ids[0]})" if ids else ""


def coverage_lines(comparison: Comparison) -> list[CoverageLine]:
    """Lines on matching: ids matched by a leading path, none matched, fewer matched than the baseline holds."""
    lines = []
    size = comparison.baseline_size
    if comparison.moved:
        lines.append(CoverageLine(
            f"matched {len(comparison.moved)} test(s) whose ids differ from the baseline's by a leading path "
            f"({common_shift(comparison.moved)}: the rootdir moved); {PATH_ADVICE}"))
    if comparison.matched_none:
        lines.append(CoverageLine(
            f"FAILED: none of this run's {len(comparison.new_tests)} test(s) matched the baseline's {size} "
            f"(this run: {comparison.new_tests[0]}; baseline: {comparison.missing_tests[0] if comparison.missing_tests else '?'}): "
            f"nothing was compared; {PATH_ADVICE}", failed=True))
        return lines
    if size and comparison.missing_tests:
        why = []
        if comparison.ambiguous:
            why.append(f"{len(comparison.ambiguous)} share a path suffix with several tests here{_example(comparison.ambiguous)}")
        plain = len(comparison.missing_tests) - len(comparison.ambiguous)
        if plain:
            renamed = f"; {len(comparison.new_tests)} test(s) here are not in the baseline" if comparison.new_tests else ""
            why.append(f"{plain} not run here (deselected, not collected, or renamed{renamed})"
                       f"{_example(tuple(t for t in comparison.missing_tests if t not in comparison.ambiguous))}")
        lines.append(CoverageLine(f"{len(comparison.compared)} of the baseline's {size} tests compared: " + "; ".join(why)))
    return lines
