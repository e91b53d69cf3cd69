"""MkDocs hook: the reference pages are filled from the code at build time, so they cannot drift.

A page holds a marker where generated text goes (``mkdocs.yml`` names this file under ``hooks:``):

- ``<!-- gpuutil:options -->`` (options.md): every option and ini key, from the one table of
  options in ``pytest_gpuutil/options.py`` (``OPTIONS``, ``INI_ONLY``, ``TURNS_ON``);
- ``<!-- gpuutil:findings -->`` (findings.md): one section per rule of the registry
  (``pytest_gpuutil/analysis/rules.py``, ``RULES``), with every field a rule carries (fields this
  hook does not know are rendered generically: text as a paragraph, a table of named values as a
  table), and the page's own before/after example for the rule, written in the page between
  ``<!-- gpuutil:example RULE-ID -->`` and ``<!-- gpuutil:end -->``;
- ``<!-- gpuutil:cli -->`` (cli.md): ``gpuutil --help`` and each command's ``--help``, run at build
  time (the commands are read from the CLI's own usage text);
- ``<!-- gpuutil:layers -->`` (architecture.md): the package's layers, top first, from the
  import-linter contracts in ``pyproject.toml`` that ``lint-imports`` holds the code to, each
  folder or module with the first line of its docstring.

A rule without an example, an example for no rule, an unknown marker or a command whose
``--help`` fails stops the build with one line saying which.
"""
from __future__ import annotations

import ast
import dataclasses
import html
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterable, Mapping

MARKER = re.compile(r"<!-- gpuutil:([a-z]+) -->")
EXAMPLE = re.compile(r"<!-- gpuutil:example ([a-z0-9-]+) -->\n(.*?)<!-- gpuutil:end -->\n?", re.S)


class DocsError(Exception):
    """Something the generated pages cannot be built from (a PluginError under mkdocs)."""


# -- helpers ------------------------------------------------------------------------------------

def _prose(text: Any) -> str:
    """The code's text as Markdown prose: ``<machine id>`` stays text, not an HTML tag."""
    return html.escape(str(text), quote=False)


def _cell(text: Any) -> str:
    """Text for one cell of a Markdown table (pipes escaped, one line)."""
    return " ".join(_prose(text).split()).replace("|", "\\|")


def _sentence(text: str) -> str:
    """``text`` as a sentence: capitalised, with a full stop."""
    text = _prose(text).strip()
    return text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")


def _code(text: Any) -> str:
    return f"`{text}`"


def _label(name: str) -> str:
    return name.replace("_", " ").capitalize()


def _number(value: float) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


# -- options ------------------------------------------------------------------------------------

def _choices(parse: Any) -> tuple[str, ...]:
    """The values a parse function accepts, where it checks them against a tuple of its own module."""
    code = getattr(parse, "__code__", None)
    names = getattr(parse, "__globals__", {})
    for name in getattr(code, "co_names", ()):
        value = names.get(name)
        if isinstance(value, tuple) and value and all(isinstance(v, str) for v in value):
            return value
    return ()


def _default_text(spec: Any, module: Any) -> str:
    """The default as the option would be written (code), or "not set" (the help says what that means)."""
    value = spec.default
    if spec.kind == "flag":
        return "off" if not value else "on"
    if value is None or value == frozenset() or value == ():
        return "not set"
    if getattr(spec.parse, "__name__", "") == "on_off":
        return _code("on" if value else "off")
    if dataclasses.is_dataclass(value):
        return _code(" ".join(f"{f.name}={_number(getattr(value, f.name))}" for f in dataclasses.fields(value)))
    return _code(_number(value))


def _value_text(spec: Any) -> str:
    """What the option takes: its kind, its metavar, its choices, its parser's own words."""
    if spec.kind == "flag":
        return "a flag, no value (ini: `true` / `false`)"
    metavar = _code(spec.metavar) if spec.metavar else "a value"
    text = {
        "value": f"one value, {metavar}",
        "optional": f"an optional value, {metavar}: the bare option takes its default; write `{spec.flag}=VALUE`",
        "append": f"{metavar}, one per use, repeatable (ini: several, space-separated)",
    }.get(spec.kind, metavar)
    choices = _choices(spec.parse)
    if choices:
        text += "; one of " + ", ".join(_code(c) for c in choices)
    doc = (getattr(spec.parse, "__doc__", None) or "").strip().splitlines()
    if doc and not choices:
        text += f"; {_prose(doc[0].rstrip('.'))}"
    return text


def options_markdown() -> str:
    """Every option and ini key of ``pytest_gpuutil/options.py``: a summary table, then a section each."""
    from pytest_gpuutil import options as module

    turns_on = set(getattr(module, "TURNS_ON", ()))
    lines = ["| option | ini key | default |", "|---|---|---|"]
    for spec in module.OPTIONS:
        lines.append(f"| [{_code(spec.flag)}](#{_slug(spec.flag)}) | {_code(spec.dest)} | "
                     f"{_cell(_default_text(spec, module))} |")
    for name, _ini_type, _help in module.INI_ONLY:
        lines.append(f"| (ini only) | [{_code(name)}](#{_slug(name)}) | not set |")
    lines.append("")
    for spec in module.OPTIONS:
        lines += [f"### {_code(spec.flag)} {{ #{_slug(spec.flag)} }}", "", _sentence(spec.help), "",
                  f"- **ini key:** {_code(spec.dest)} (ini type `{spec.ini_type}`)",
                  f"- **takes:** {_value_text(spec)}",
                  f"- **default:** {_default_text(spec, module)}"]
        if spec.flag in turns_on:
            lines.append("- **turns `--gpu-util` on** when given on the command line (its ini key does not)")
        lines.append("")
    for name, ini_type, help_text in module.INI_ONLY:
        lines += [f"### {_code(name)} (ini only) {{ #{_slug(name)} }}", "", _sentence(help_text),
                  "", f"- **ini type:** `{ini_type}`", "- **command line:** none (ini file only)", ""]
    return "\n".join(lines)


# -- findings -----------------------------------------------------------------------------------

#: Rule fields rendered by name; every other field is rendered by :func:`_generic_field`.
_RULE_FIELDS = ("id", "title", "fix", "limits", "superseded_by")


def _named_values_table(values: Mapping[str, Any], head: str) -> list[str]:
    """A table of named values: a Limit-like value (``text``/``value``, ``reason``, more fields) or plain."""
    rows = list(values.items())
    extra: list[str] = []
    for _, value in rows:
        for name in getattr(value, "_fields", ()):
            if name not in ("value", "unit", "reason") and name not in extra:
                extra.append(name)
    has_reason = any(hasattr(v, "reason") for _, v in rows)
    header = [head, "value"] + (["why"] if has_reason else []) + [_label(n).lower() for n in extra]
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, value in rows:
        shown = getattr(value, "text", None)
        if shown is None:
            shown = _number(getattr(value, "value", value))
        cells = [_code(name), _cell(shown)]
        if has_reason:
            cells.append(_cell(getattr(value, "reason", "")))
        cells += [_cell(getattr(value, n, "")) for n in extra]
        out.append("| " + " | ".join(cells) + " |")
    return out


def _generic_field(name: str, value: Any) -> list[str]:
    """A rule's field this hook does not know by name, rendered by its shape (callables are code: left out)."""
    if callable(value) or value is None or value == "" or value == () or value == {}:
        return []
    if isinstance(value, str):
        return [f"**{_label(name)}:** {_prose(value)}", ""]
    if isinstance(value, Mapping):
        return [f"**{_label(name)}**", "", *_named_values_table(value, "name"), ""]
    if isinstance(value, (tuple, list, frozenset, set)):
        return [f"**{_label(name)}:** " + ", ".join(_code(v) if isinstance(v, str) else _cell(v) for v in value), ""]
    return [f"**{_label(name)}:** {_cell(_number(value))}", ""]


def rule_markdown(rule: Any, example: str) -> str:
    """One rule's section: id, what it detects, the fix, its limits, what supersedes it, other fields, example."""
    lines = [f"## {_code(rule.id)} {{ #{rule.id} }}", "", f"**What it detects:** {_sentence(rule.title)}", "",
             f"**Fix:** {_sentence(rule.fix)}", ""]
    limits = getattr(rule, "limits", None) or {}
    if limits:
        lines += ["**Limits:**", "", *_named_values_table(limits, "limit"), ""]
    superseded = getattr(rule, "superseded_by", ()) or ()
    if superseded:
        lines += ["**Left out** when " + " or ".join(f"[{_code(r)}](#{r})" for r in superseded)
                  + " fired on the same test and names the same cause.", ""]
    for name in getattr(rule, "_fields", ()):
        if name not in _RULE_FIELDS:
            lines += _generic_field(name, getattr(rule, name))
    lines += [example.strip(), ""]
    return "\n".join(lines)


def findings_markdown(examples: Mapping[str, str]) -> str:
    """Every rule of the registry in report order, each with its example from ``examples``."""
    from pytest_gpuutil.analysis import rules as module
    from pytest_gpuutil.analysis.finding_records import LOW, SEVERITY_FROM

    ids = [rule.id for rule in module.RULES]
    missing = [rule_id for rule_id in ids if rule_id not in examples]
    unknown = sorted(set(examples) - set(ids))
    if missing:
        raise DocsError(f"findings.md: no before/after example for rule(s) {', '.join(missing)} "
                        "(add <!-- gpuutil:example RULE --> ... <!-- gpuutil:end --> to the page)")
    if unknown:
        raise DocsError(f"findings.md: example(s) for rule(s) not in the registry: {', '.join(unknown)}")
    parts = []
    levels = ", ".join(f"`{name}` from {_number(ms)} ms and {_number(pct)} %" for name, ms, pct in SEVERITY_FROM)
    parts.append(f"Severity goes by the estimated saving (`saving_ms`) and its share of the test's wall "
                 f"time: {levels}, else `{LOW}`.\n")
    parts += [rule_markdown(rule, examples[rule.id]) for rule in module.RULES]
    return "\n".join(parts)


# -- the CLI ------------------------------------------------------------------------------------

def cli_commands() -> list[str]:
    """The ``gpuutil`` commands, in the order of the CLI's own usage text."""
    from pytest_gpuutil import cli

    found: list[str] = []
    in_commands = False
    for line in cli.USAGE.splitlines():
        if line.strip() == "commands:":
            in_commands = True
        elif in_commands and line.startswith("  ") and line.split():
            name = line.split()[0]
            if name not in found:
                found.append(name)
    if not found:
        raise DocsError("cli.md: no commands found in pytest_gpuutil.cli.USAGE")
    return found


def _help(words: Iterable[str]) -> str:
    env = dict(os.environ, COLUMNS="100")
    proc = subprocess.run([sys.executable, "-m", "pytest_gpuutil", *words], capture_output=True, text=True,
                          env=env, timeout=120, check=False)
    if proc.returncode != 0 or not proc.stdout.strip():
        raise DocsError(f"cli.md: `gpuutil {' '.join(words)}` exited {proc.returncode}: {proc.stderr.strip()[-300:]}")
    return proc.stdout.rstrip()


def cli_markdown() -> str:
    """``gpuutil --help``, then a section per command with its ``--help``, captured now."""
    out = ["```text", "$ gpuutil --help", _help(["--help"]), "```", ""]
    for command in cli_commands():
        out += [f"## `gpuutil {command}` {{ #{command} }}", "", "```text", f"$ gpuutil {command} --help",
                _help([command, "--help"]), "```", ""]
    return "\n".join(out)


# -- layers.md ----------------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[1]


def _contracts() -> list[dict[str, Any]]:
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        import tomli as tomllib  # type: ignore[no-redef]

    with open(ROOT / "pyproject.toml", "rb") as handle:
        return tomllib.load(handle)["tool"]["importlinter"]["contracts"]


def _first_line(name: str) -> str:
    """The first paragraph of a top-level module's or folder's docstring."""
    package = ROOT / "pytest_gpuutil"
    path = package / name / "__init__.py" if (package / name).is_dir() else package / f"{name}.py"
    if not path.exists():
        raise DocsError(f"pyproject.toml's layers name {name}, which is no module of pytest_gpuutil")
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    paragraph = " ".join(doc.strip().split("\n\n")[0].split())
    return re.sub(r":[a-z]+:`~?([^`]+)`", r"`\1`", paragraph.replace("``", "`"))


def layers_markdown() -> str:
    """The layers contract as a table, top first; the independence contracts under it."""
    contracts = _contracts()
    (layers,) = [c for c in contracts if c["type"] == "layers"]
    out = ["| layer | folder or module | what it holds |", "|---|---|---|"]
    for number, layer in enumerate(layers["layers"], start=1):
        independent = "|" in layer
        names = [n.strip() for n in layer.replace("|", ":").split(":")]
        for i, name in enumerate(names):
            shown = f"`{name}/`" if (ROOT / "pytest_gpuutil" / name).is_dir() else f"`{name}.py`"
            label = (f"{number}" + (" (independent)" if independent else "")) if i == 0 else ""
            out.append(f"| {label} | {shown} | {_cell(_first_line(name))} |")
    out.append("")
    for contract in contracts:
        if contract["type"] == "independence":
            modules = ", ".join(f"`{m.split('.', 1)[1]}/`" for m in contract["modules"])
            out.append(f"- independent of each other: {modules} ({_sentence(contract['name'])})")
    return "\n".join(out)


# -- the page ----------------------------------------------------------------------------------

def fill(markdown: str, page_name: str = "page") -> str:
    """``markdown`` with every ``gpuutil:`` marker replaced by its generated text."""
    examples = {m.group(1): m.group(2) for m in EXAMPLE.finditer(markdown)}
    if examples and "<!-- gpuutil:findings -->" not in markdown:
        raise DocsError(f"{page_name}: examples without a <!-- gpuutil:findings --> marker")
    markdown = EXAMPLE.sub("", markdown)
    makers = {"options": options_markdown, "findings": lambda: findings_markdown(examples), "cli": cli_markdown,
              "layers": layers_markdown}

    def replace(match: re.Match) -> str:
        name = match.group(1)
        if name not in makers:
            raise DocsError(f"{page_name}: unknown marker <!-- gpuutil:{name} --> (known: {', '.join(makers)})")
        return makers[name]()

    return MARKER.sub(replace, markdown)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any, **kwargs: Any) -> str:
    """MkDocs' hook: fill the page's markers (pages without one are left as they are)."""
    if "<!-- gpuutil:" not in markdown:
        return markdown
    try:
        return fill(markdown, page.file.src_uri)
    except DocsError as exc:
        from mkdocs.exceptions import PluginError

        raise PluginError(str(exc)) from None
