"""docs/hooks.py on its own (no mkdocs needed): what it renders from the code, and what stops a build."""
from __future__ import annotations

import importlib.util
from types import MappingProxyType
from typing import Any, Callable, Mapping, NamedTuple, Optional

import pytest

from pytest_gpuutil.analysis.finding_records import Limit
from pytest_gpuutil.analysis.rules import RULES
from pytest_gpuutil.options import OPTIONS
from tests.helpers.docs_site import DOCS


def load_hooks() -> Any:
    spec = importlib.util.spec_from_file_location("gpuutil_docs_hooks", DOCS / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


hooks = load_hooks()
EXAMPLES = {rule.id: "=== \"Before\"\n\n    x\n" for rule in RULES}


class FutureRule(NamedTuple):
    """A rule with fields the hook does not know by name (as the findings' saving estimates add)."""

    id: str
    title: str
    fix: str
    limits: Mapping[str, Limit]
    check: Callable[..., Any]
    superseded_by: tuple[str, ...] = ()
    superseded_when: Callable[..., bool] = lambda finding: True
    gate: Optional[Callable[..., bool]] = None
    saving: str = ""
    floors: Mapping[str, Limit] = MappingProxyType({})
    weight: float = 0.0


def test_a_rules_unknown_fields_are_rendered_by_their_shape():
    rule = FutureRule("pinned-copies", "copies <slow>", "pin them", MappingProxyType({"min_total_us": Limit(100, "µs", "small")}),
                      check=lambda *a: None, superseded_by=("gpu-idle",),
                      saving="the copies' time minus the same bytes at the pinned bandwidth",
                      floors=MappingProxyType({"min_saving_ms": Limit(1, "ms", "below 1 ms nobody acts")}), weight=0.5)
    text = hooks.rule_markdown(rule, "EXAMPLE")
    assert "## `pinned-copies` { #pinned-copies }" in text
    assert "Copies &lt;slow&gt;." in text and "**Fix:** Pin them." in text
    assert "| `min_total_us` | 100 µs | small |" in text
    assert "[`gpu-idle`](#gpu-idle)" in text
    assert "**Saving:** the copies' time minus the same bytes at the pinned bandwidth" in text
    assert "**Floors**" in text and "| `min_saving_ms` | 1 ms | below 1 ms nobody acts |" in text
    assert "**Weight:** 0.5" in text
    assert "lambda" not in text and "function" not in text  # callables are code, not documentation
    assert text.rstrip().endswith("EXAMPLE")


def test_every_registered_rule_and_option_is_rendered():
    findings = hooks.findings_markdown(EXAMPLES)
    assert [line.split("`")[1] for line in findings.splitlines() if line.startswith("## ")] == [r.id for r in RULES]
    options = hooks.options_markdown()
    for spec in OPTIONS:
        assert f"### `{spec.flag}`" in options and f"`{spec.dest}`" in options


def test_choices_and_defaults_come_from_the_option_table():
    options = hooks.options_markdown()
    traces = options.split("### `--gpu-util-traces`")[1].split("###")[0]
    assert "one of `none`, `failed`, `all`" in traces and "**default:** `none`" in traces
    flush = options.split("### `--gpu-util-flush`")[1].split("###")[0]
    assert "`tests=1000 seconds=10 megabytes=64`" in flush
    html = options.split("### `--gpu-util-html`")[1].split("###")[0]
    assert "turns `--gpu-util` on" in html


def test_a_rule_without_an_example_or_an_example_without_a_rule_stops_the_build():
    missing = dict(EXAMPLES)
    missing.pop(RULES[0].id)
    with pytest.raises(hooks.DocsError, match=f"no before/after example for rule\\(s\\) {RULES[0].id}"):
        hooks.findings_markdown(missing)
    with pytest.raises(hooks.DocsError, match="not in the registry: no-such-rule"):
        hooks.findings_markdown({**EXAMPLES, "no-such-rule": "x"})


def test_an_unknown_marker_stops_the_build():
    with pytest.raises(hooks.DocsError, match=r"page.md: unknown marker <!-- gpuutil:tables -->"):
        hooks.fill("# T\n\n<!-- gpuutil:tables -->\n", "page.md")
    assert hooks.fill("# T\n\nno marker\n") == "# T\n\nno marker\n"


def test_the_layers_table_is_the_import_linter_contract_top_first() -> None:
    from tests.helpers.versions import read_pyproject

    contracts = read_pyproject(DOCS.parent / "pyproject.toml")["tool"]["importlinter"]["contracts"]
    (layers,) = [c["layers"] for c in contracts if c["type"] == "layers"]
    table = hooks.layers_markdown()
    rows = [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| layer")]
    shown = [row.split("|")[2].strip().strip("`").rstrip("/").removesuffix(".py") for row in rows]
    assert shown == [name.strip() for layer in layers for name in layer.replace("|", ":").split(":")]
    assert "| 7 (independent) | `capture/` |" in table  # the sources, independent of each other
    assert all(row.split("|")[3].strip() for row in rows), "a folder or module without a docstring"
    assert "``" not in table and ":mod:" not in table
