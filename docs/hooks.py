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
from typing import Any, Callable, Iterable, Mapping

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
                          env=env, timeout=120, check=False, cwd=Path(__file__).resolve().parents[1])
    if proc.returncode != 0 or not proc.stdout.strip():
        raise DocsError(f"cli.md: `gpuutil {' '.join(words)}` exited {proc.returncode}: {proc.stderr.strip()[-300:]}")
    return proc.stdout.rstrip()


#: the trace cli.md's example analyses (committed, so the example's figures are the code's, at build time)
ANALYZE_EXAMPLE = ("analyze", "tests/data/nccl_allreduce_rank0.json.gz", "--top", "3")


def analyze_markdown(lines: int = 21) -> str:
    """``gpuutil analyze`` on a committed trace, run now: its first ``lines`` lines."""
    out = _help(ANALYZE_EXAMPLE).splitlines()
    shown = out[:lines] + (["..."] if len(out) > lines else [])
    return "\n".join(["```text", f"$ gpuutil {' '.join(ANALYZE_EXAMPLE)}", *shown, "```"])


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


# -- measured figures (cost.md, trust.md, platforms.md) ----------------------------------------
#
# Every measured figure on a page comes from a committed file under benchmarks/results/, the newest
# of its kind: the run folder's date (``2026-11-27_h100``), then the file's own ``date``, then when git
# last committed it (a file not committed yet counts as newest), then its path.

RESULTS = ROOT / "benchmarks" / "results"
_RUN_DATE = re.compile(r"^(\d{4}-\d{2}-\d{2})")


def _git_time(path: Path) -> float:
    try:
        out = subprocess.run(["git", "log", "-1", "--format=%ct", "--", str(path)], cwd=ROOT, capture_output=True,
                             text=True, timeout=30, check=False).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return 0.0
    return float(out) if out else float("inf")  # not committed yet: the newest


def _run_date(path: Path, base: Path = RESULTS) -> str:
    """The date of the run folder ``path`` lies in (``2026-11-27_h100/...``), else ""."""
    try:
        parts = path.relative_to(base).parts[:1]
    except ValueError:  # a run not committed yet (render_sample.py on a fresh device run): any dated folder
        parts = path.parts
    for part in parts:
        match = _RUN_DATE.match(part)
        if match:
            return match.group(1)
    return ""


def newest(name: str | tuple[str, ...], results: Path | None = None, accept: Any = None) -> Path:
    """The newest results file called ``name`` (or any of the names: as device.sh writes it and as it was
    committed), ``accept(doc)`` false: skipped; by run date, then own date, then commit."""
    import json

    base = results or RESULTS
    names = (name,) if isinstance(name, str) else name
    found = []
    for path in (p for n in names for p in base.rglob(n)):
        try:
            doc = json.loads(path.read_text(encoding="utf-8")) if path.suffix == ".json" else None
        except ValueError:
            continue
        if accept is not None and not accept(doc):
            continue
        own = str(doc.get("date", "")) if isinstance(doc, dict) else ""
        found.append(((_run_date(path, base), own, _git_time(path), str(path)), path))
    if not found:
        raise DocsError(f"no results file {' or '.join(names)} under {base}")
    return max(found, key=lambda item: item[0])[1]


def _load(path: Path) -> dict[str, Any]:
    import json

    return json.loads(path.read_text(encoding="utf-8"))


def _where(path: Path) -> str:
    return _code(path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.name)


_ENV = re.compile(r"torch (\S+) cuda (\S+) (.+?)(?: x (\d+))?(?= (?:triton|python|pytest|cpus|numpy)\b|\s*$)")


def parse_env(line: str) -> dict[str, str] | None:
    """A device run's env.txt first line: torch, CUDA, the GPU and its count; None when it is not one."""
    match = _ENV.match(" ".join(line.split()))
    if not match:
        return None
    return {"torch": match.group(1), "cuda": match.group(2), "gpu": match.group(3), "count": match.group(4) or "1"}


def _env_of(path: Path) -> dict[str, str] | None:
    """The env.txt of the run ``path`` belongs to (its folder or one above, within benchmarks/results/)."""
    for folder in (path.parent, *path.parent.parents):
        env = folder / "env.txt"
        if env.is_file():
            return parse_env(env.read_text(encoding="utf-8").splitlines()[0])
        if folder in (RESULTS, ROOT):
            break
    return None


def _env_text(path: Path) -> str:
    env = _env_of(path)
    return f"{env['gpu']}, torch {env['torch']}, CUDA {env['cuda']}" if env else "not recorded"


_DRIVER = re.compile(r'Driver Version: ([0-9.]+)|"driver": "([0-9.]+)"')


def _drivers(run: Path) -> set[str]:
    """The NVIDIA driver versions a run folder recorded (nvidia-smi.txt, a file's machine info)."""
    found: set[str] = set()
    for path in [*run.rglob("nvidia-smi.txt"), *run.rglob("*.json")]:
        if path.stat().st_size < 5_000_000:
            for match in _DRIVER.finditer(path.read_text(encoding="utf-8", errors="replace")):
                found.add(match.group(1) or match.group(2))
    return found


def _fmt(value: Any, digits: int) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def _median_range(value: Any, digits: int) -> str:
    """A figure as ``median (low to high)``, from a number or a mapping: ``median`` (or ``value``) and
    ``range`` (or ``low``/``high``, ``min``/``max``), whichever shape the results file uses."""
    if not isinstance(value, Mapping):
        return _fmt(value, digits)
    median = value.get("median", value.get("value"))
    low, high = (value.get("range") or (None, None))[:2] if value.get("range") else (None, None)
    for lo_key, hi_key in (("low", "high"), ("min", "max")):
        if low is None and lo_key in value:
            low, high = value.get(lo_key), value.get(hi_key)
    text = _fmt(median, digits)
    return text + (f" ({_fmt(low, digits)} to {_fmt(high, digits)})" if low is not None and high is not None else "")


def _self_timed(doc: Mapping[str, Any], config: str) -> str | None:
    """A floor_probe.json configuration's self-timed µs a test as ``median (low to high)``; None: not run."""
    figure = ((doc.get("summary") or {}).get(config) or {}).get("self_per_test_us")
    return _median_range(figure, 1) if figure else None


def _probe_run(doc: Mapping[str, Any], path: Path) -> str:
    """Where and how a floor_probe.json was measured, as the pages say it."""
    return (f"{doc.get('gpu', 'unknown GPU')}, torch {doc.get('torch', '?')}, {str(doc.get('date', '?'))[:10]}, "
            f"{doc.get('rounds', '?')} interleaved rounds; file: {_where(path)}")


def _ran(*configs: str) -> Callable[[Any], bool]:
    """``newest``'s ``accept``: a floor_probe.json that ran every one of ``configs``."""
    return lambda doc: isinstance(doc, dict) and all(_self_timed(doc, config) for config in configs)


def floor_markdown(path: Path) -> str:
    """The floor under the per-test figures, from a ``floor_probe.json`` (benchmarks/checks/floor_probe.py):
    the bare floor, the columnar floor where the run had it, and ours, each as the run has them."""
    doc = _load(path)
    floor, floor_lean = _self_timed(doc, "floor_default"), _self_timed(doc, "floor_lean")
    columnar, columnar_lean = _self_timed(doc, "columnar_default"), _self_timed(doc, "columnar_lean")
    ours, ours_lean = _self_timed(doc, "default"), _self_timed(doc, "lean")
    text = (f"The floor under the per-test figures: a plugin that does nothing but the calls every measured test "
            f"needs inside its call (torch's synchronize and CUPTI's clock at both edges; with memory on, the "
            f"allocator's reset and its one read) costs **{floor or '—'} µs a test** self-timed"
            + (f", {floor_lean} without memory" if floor_lean else "") + ".")
    if columnar:
        text += (f" The least columnar plugin that still writes each test's record, spool line and CSV row "
                 f"(`benchmarks/checks/columnar_floor_plugin.py`: the same calls, then per flush of 100 tests one "
                 f"attribution and the files; no findings, idle gaps or unions) costs **{columnar} µs**"
                 + (f", {columnar_lean} without memory and findings" if columnar_lean else "") + ".")
    if ours:
        text += (" This plugin's default" + (" and lean configurations" if ours_lean else "")
                 + f": {ours}" + (f" and {ours_lean}" if ours_lean else "") + ", in the same rounds.")
    return text + f" ({_probe_run(doc, path)}.)"


def flush_markdown(path: Path) -> str:
    """What the flush policy's test count does to the per-test figures, from a ``floor_probe.json`` that ran
    ours with a flush every 100 tests (``default``) and every 1,000 (``default_f1000``)."""
    from pytest_gpuutil.capture.flush_policy import FlushPolicy

    doc = _load(path)
    lean, lean_f1000 = _self_timed(doc, "lean"), _self_timed(doc, "lean_f1000")
    policy = FlushPolicy()
    return (f"A flush's work is cold when it comes (the tests between flushes evict it), so its fixed part "
            f"dominates: the default configuration's self-timed cost was {_self_timed(doc, 'default') or '—'} µs a "
            f"test with a flush every 100 tests and **{_self_timed(doc, 'default_f1000') or '—'}** with one every "
            f"1,000" + (f"; lean {lean} against {lean_f1000}" if lean and lean_f1000 else "")
            + f" ({_probe_run(doc, path)}). `--gpu-util-flush` defaults to "
            f"`tests={policy.tests} seconds={policy.seconds:g} megabytes={policy.megabytes:g}`.")


#: the floor_probe.json the cost page compares: the floor and this plugin's default beside it
_with_ours = _ran("floor_default", "default")
#: the floor_probe.json that ran ours under both flush policies
_flush_policies = _ran("default", "default_f1000")


def cost_markdown(path: Path | None = None, floor: Path | None = None, flush: Path | None = None) -> str:
    """The cost model from the newest ``cost.json``: its provenance, one table, a worked example; and, on
    the page (no ``path`` given) or with ``floor``, the floor from the newest ``floor_probe.json`` that ran
    it beside ours, and with ``flush``, what the flush policy's test count does, from the newest that ran
    ours under both."""
    if path is None:
        path = newest("cost.json")
        try:
            floor = floor or newest("floor_probe.json", accept=_with_ours)
        except DocsError:
            floor = None
        try:
            flush = flush or newest("floor_probe.json", accept=_flush_policies)
        except DocsError:
            flush = None
    doc = _load(path)
    configs = doc["configs"]
    has_self = any("self_per_test_us" in c for c in configs.values())
    has_slope = any("slope_per_test_us" in c for c in configs.values())
    head = ["configuration", "start-up s", "µs per test", "µs per kernel"]
    head += ["plugin's own µs per test (self-timed)"] * has_self + ["µs per test, slope over suite sizes"] * has_slope
    lines = [f"Measured on an {doc.get('gpu', 'unknown GPU')} (torch {doc.get('torch', '?')}, Python "
             f"{doc.get('python', '?')}) on {doc.get('date', '?')}, {doc.get('rounds', '?')} interleaved rounds, "
             f"beyond a plain run; 95 % intervals in brackets (file: {_where(path)}).", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def ci(config: Mapping[str, Any], key: str, digits: int) -> str:
        low, high = (config.get("ci95") or {}).get(key) or (None, None)  # null: one suite, no interval
        text = _fmt(config.get(key), digits)
        return text + (f" ({_fmt(low, digits)} to {_fmt(high, digits)})" if low is not None else "")

    for name, config in configs.items():
        label = f"{name}: `pytest {' '.join(config.get('args', ()))}`"
        row = [label, ci(config, "startup_s", 3), ci(config, "per_test_us", 0), ci(config, "per_kernel_us", 2)]
        row += [_median_range(config.get("self_per_test_us"), 0) if config.get("self_per_test_us") else "—"] * has_self
        row += [_median_range(config.get("slope_per_test_us"), 0) if config.get("slope_per_test_us") else "—"] * has_slope
        lines.append("| " + " | ".join(_cell(c) for c in row) + " |")
    if "plain_per_test_us" in doc:
        row = ["plain pytest itself (its own time, not beyond plain), for scale", "—", _fmt(doc["plain_per_test_us"], 0),
               _fmt(doc.get("plain_per_kernel_us"), 2)] + ["—"] * (has_self + has_slope)
        lines.append("| " + " | ".join(row) + " |")
    thread = doc.get("counters_thread_pct_busy", doc.get("counters_thread_cpu_pct"))
    if thread is not None:
        source = "; ".join((doc.get("counters_busy") or {}).get("counters") or ())
        lines += ["", f"With the counters on, their sampling thread kept {_median_range(thread, 1)} % of one CPU core "
                      "busy while the tests ran" + (f" (`--gpu-util-counters=auto`: {_prose(source)})." if source else ".")]
    places = (doc.get("parts") or {}).get("places") or {}
    if places.get("sync_extra_us") is not None:
        lines += ["", f"Of the default's work, the findings' places: {_fmt(places['sync_extra_us'], 1)} µs more per "
                      f"synchronizing call and {_fmt(places.get('copy_extra_us'), 1)} µs more per copy (the frame "
                      f"reader), and the test thread's sampler {_fmt(places.get('sampler_core_pct'), 1)} % of one core "
                      f"at {_fmt(places.get('sampler_hz'), 0)} Hz while tests run."]
    default = configs.get("default") or next(iter(configs.values()))
    tests, kernels = 2000, 500_000
    startup = max(default["startup_s"], 0.0)  # a fit below zero is noise around none: counted as none
    extra = startup + tests * default["per_test_us"] / 1e6 + kernels * default["per_kernel_us"] / 1e6
    lines += ["", f"Worked example with the default configuration's figures: a suite of {tests:,} tests launching "
                  f"{kernels:,} kernels in all takes about {startup:.2f} + {tests:,} × "
                  f"{default['per_test_us']:.0f} µs + {kernels:,} × {default['per_kernel_us']:.2f} µs ≈ "
                  f"**{extra:.1f} s** longer than without the plugin."]
    if floor is not None:
        lines += ["", floor_markdown(floor)]
    if flush is not None:
        lines += ["", flush_markdown(flush)]
    return "\n".join(lines)


#: the duty-cycle truth: device.sh's duty step writes duty/ground_truth.json (ground_truth: the same and more)
DUTY_FILES = ("duty_ground_truth.json", "ground_truth.json")


def _has_duty_rows(doc: Any) -> bool:
    rows = ((doc or {}).get("duty") or {}).get("rows") if isinstance(doc, dict) else None
    return bool(rows) and all(r.get("ours_truth_window_pct") is not None and "truth_pct" in r for r in rows)


def _trust_rows() -> list[list[str]]:
    rows = []
    duty = newest(DUTY_FILES, accept=_has_duty_rows)
    table = _load(duty)["duty"]["rows"]
    errors = [r["ours_truth_window_pct"] - r["truth_pct"] for r in table if r.get("ours_truth_window_pct") is not None]
    rows.append(["busy %", f"`--gpu-util` against CUDA-event truth at {table[0]['duty_pct']:.0f} to "
                 f"{table[-1]['duty_pct']:.0f} % duty cycles: {min(errors):+.2f} to {max(errors):+.2f} points",
                 duty, "duty"])
    children = newest("children.json", accept=lambda d: isinstance(d, dict) and d.get("cases") and not d.get("two_gpu"))
    cases = _load(children)["cases"]
    errs = sorted(c["error_pct"] for c in cases if c.get("error_pct") is not None)
    worst = max((c for c in cases if c.get("error_pct") is not None), key=lambda c: abs(c["error_pct"]))
    rows.append(["child processes", f"{sum(bool(c.get('ok')) for c in cases)} of {len(cases)} cases within their "
                 f"own limits; GPU ms against the children's CUDA-event truth: median {errs[len(errs) // 2]:+.2f} %, "
                 f"{sum(abs(e) <= 1 for e in errs)} of {len(errs)} within 1 %, the farthest {worst['case']} "
                 f"({worst['error_pct']:+.2f} %, on purpose: its limit is the case's own)", children, "children"])
    memory = newest("memory_truth.json", accept=lambda d: isinstance(d, dict) and d.get("checks"))
    checks = _load(memory)["checks"]
    one_gib = next((c.get("seen") for c in checks if "1 GiB" in c.get("check", "")), None)
    rows.append(["GPU memory", f"{sum(bool(c.get('holds')) for c in checks)} of {len(checks)} checks hold"
                 + (f"; a 1 GiB tensor reads {one_gib:.1f} MiB peak" if isinstance(one_gib, (int, float)) else ""),
                 memory, "memory"])
    savings = newest(("findings_savings.json", "savings.json"), accept=lambda d: isinstance(d, dict) and d.get("estimates"))
    estimates = _load(savings)["estimates"]
    ratios = [e["ratio"] for e in estimates if e.get("ratio") is not None]
    rows.append(["findings' savings", f"each rule's estimated saving against the time its fix saved: "
                 f"{sum(bool(e.get('within_2x')) for e in estimates)} of {len(estimates)} rules within a factor "
                 f"of two (estimate / measured {min(ratios):.2f} to {max(ratios):.2f})", savings, "findings_savings"])
    hardware = newest("hardware.json", accept=lambda d: isinstance(d, dict) and d.get("checks") and d.get("agreement"))
    doc = _load(hardware)
    worst = max(abs(v["difference"]) for case in doc["agreement"].values() for v in case.values()
                if isinstance(v, Mapping) and v.get("difference") is not None)
    rows.append(["hardware counters", f"{sum(bool(c.get('holds', c.get('ok'))) for c in doc['checks'])} of "
                 f"{len(doc['checks'])} checks hold; CUPTI PM sampling and NVML GPM within {worst:.1f} points",
                 hardware, "hardware"])
    return [[what, figure, _env_text(path), _code(path.relative_to(RESULTS).as_posix()), f"`device.sh OUT {step}`"]
            for what, figure, path, step in rows]


def trust_markdown() -> str:
    """One table: each kind of figure against its ground truth, from the newest results file of each."""
    lines = ["| figure | checked against ground truth | GPU, torch, CUDA | file in benchmarks/results/ | re-measure |",
             "|---|---|---|---|---|"]
    lines += ["| " + " | ".join(_cell(c) if not c.startswith("`") else c for c in row) + " |" for row in _trust_rows()]
    return "\n".join(lines)


def platforms_markdown() -> str:
    """The GPUs, torch, CUDA and driver versions the committed results were measured on."""
    runs: dict[tuple[str, str, str], dict[str, Any]] = {}
    for env_file in sorted(RESULTS.rglob("env.txt")):
        env = parse_env(env_file.read_text(encoding="utf-8").splitlines()[0])
        if env is None:
            continue
        run = RESULTS / env_file.relative_to(RESULTS).parts[0]
        seen = runs.setdefault((env["gpu"], env["torch"], env["cuda"]), {"drivers": set(), "date": "", "counts": set()})
        seen["drivers"] |= _drivers(run)
        seen["counts"].add(env["count"])
        seen["date"] = max(seen["date"], _run_date(env_file))
    lines = ["| GPU | GPUs a host | torch | CUDA | driver | OS | newest run |", "|---|---|---|---|---|---|---|"]
    for (gpu, torch_v, cuda_v), seen in sorted(runs.items()):
        lines.append(f"| {gpu} | {', '.join(sorted(seen['counts']))} | {torch_v} | {cuda_v} | "
                     f"{', '.join(sorted(seen['drivers'])) or 'not recorded'} | Linux | {seen['date']} |")
    return "\n".join(lines)


# -- the main job's sample (README.md, getting-started.md) ----------------------------------------

SAMPLE_COMMAND = "pytest --gpu-util --gpu-util-html examples/"
SAMPLE_SECTION = "GPU utilization (pytest-gpuutil)"


def newest_sample(results: Path | None = None) -> Path:
    """The main job's newest 80-column log: a ``sample/`` folder's (device.sh's ``sample`` step) first."""
    base = results or RESULTS
    logs = sorted(base.rglob("examples_80.log"))
    if not logs:
        raise DocsError(f"no examples_80.log under {base}")
    from_step = [p for p in logs if p.parent.name == "sample"]
    pool = from_step or logs
    return max(pool, key=lambda p: (_run_date(p, base), _git_time(p), str(p)))


def sample_markdown(path: Path | None = None) -> str:
    """The GPU section of the main job's log as a text block, with where and on what it ran."""
    path = path or newest_sample()
    lines = path.read_text(encoding="utf-8").splitlines()
    start = next((i for i, line in enumerate(lines) if SAMPLE_SECTION in line), None)
    if start is None:
        raise DocsError(f"{path}: no '{SAMPLE_SECTION}' section in the log")
    env = _env_of(path)
    on = f"an {env['gpu']} (torch {env['torch']}, CUDA {env['cuda']})" if env else "a GPU"
    date = _run_date(path)
    head = (f"What the project's example suite printed on {on}" + (f" on {date}" if date else "")
            + f", in a terminal 80 columns wide ({_where(path)}):")
    return "\n".join([head, "", "```text", f"$ {SAMPLE_COMMAND}", *lines[start:], "```"])


def sample_block(markdown: str, path: Path | None = None) -> str:
    """``markdown`` with the text between ``<!-- sample:start -->`` and ``<!-- sample:end -->`` rendered anew."""
    begin, end = "<!-- sample:start -->", "<!-- sample:end -->"
    if markdown.count(begin) != 1 or markdown.count(end) != 1:
        raise DocsError("the sample block needs one <!-- sample:start --> and one <!-- sample:end -->")
    before, rest = markdown.split(begin)
    return before + begin + "\n" + sample_markdown(path) + "\n" + end + rest.split(end, 1)[1]


# -- the page ----------------------------------------------------------------------------------

def fill(markdown: str, page_name: str = "page") -> str:
    """``markdown`` with every ``gpuutil:`` marker replaced by its generated text."""
    examples = {m.group(1): m.group(2) for m in EXAMPLE.finditer(markdown)}
    if examples and "<!-- gpuutil:findings -->" not in markdown:
        raise DocsError(f"{page_name}: examples without a <!-- gpuutil:findings --> marker")
    markdown = EXAMPLE.sub("", markdown)
    makers = {"options": options_markdown, "findings": lambda: findings_markdown(examples), "cli": cli_markdown,
              "layers": layers_markdown, "cost": cost_markdown, "trust": trust_markdown,
              "platforms": platforms_markdown, "sample": sample_markdown, "analyze": analyze_markdown}

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
