"""Command-line options and ini keys, declared once as data, resolved into frozen Settings.

Every option is also an ini key of the same name with dashes as underscores
(``--gpu-util-top`` ↔ ``gpu_util_top``); the command line wins over the ini file. The options
in TURNS_ON turn measuring on when given on the command line (not from the ini file).
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from pytest_gpuutil.capture.flush_policy import FlushPolicy
from pytest_gpuutil.option_types import (
    ALL_TIMELINES,
    baseline_spec,
    counter_mode,
    event_source,
    fail_expressions,
    findings_floor,
    flush_policy,
    gap_ms,
    non_negative_int,
    nonempty_name,
    on_off,
    plain_string,
    positive_int,
    rule_ids,
    sampling_interval_ms,
    table_list,
    timeline_count,
    trace_mode,
)


@dataclass(frozen=True)
class OptionSpec:
    """One option: its flag, its ini key (``dest``), its type and help."""

    flag: str
    help: str
    kind: str = "value"  # "flag" (store_true) | "value" | "optional" (nargs='?') | "append" (one per use, repeatable)
    parse: Callable[[str], Any] = plain_string
    default: Any = None
    metavar: Optional[str] = None

    @property
    def dest(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")

    @property
    def ini_type(self) -> str:
        return {"flag": "bool", "append": "args"}.get(self.kind, "string")


OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec("--gpu-util", "profile each test's call phase and report GPU utilization", kind="flag", default=False),
    OptionSpec("--gpu-util-cpu", "also record CPU activity (slower; profiles even without CUDA)", kind="flag", default=False),
    OptionSpec("--gpu-util-top", "tests listed in the summary, by GPU time (0 = all; default 10)", parse=non_negative_int, default=10, metavar="N"),
    OptionSpec("--gpu-util-dir", "output folder for CSV/JSON/traces (default .gpu_util)", default=".gpu_util", metavar="DIR"),
    OptionSpec("--gpu-util-traces", "write a gzip'd Chrome trace per test: none, failed or all (default none)", parse=trace_mode, default="none", metavar="MODE"),
    OptionSpec("--gpu-util-html", "write a self-contained HTML report to PATH (no value: DIR/report.html)", kind="optional", metavar="PATH"),
    OptionSpec("--gpu-util-tables", "metric tables to write, comma-separated (default: all registered)", parse=table_list, metavar="A,B"),
    OptionSpec("--gpu-util-save", "save this run as baseline NAME under DIR/baselines/<machine id>/", parse=nonempty_name, metavar="NAME"),
    OptionSpec("--gpu-util-autosave", "save this run as a timestamped baseline", kind="flag", default=False),
    OptionSpec("--gpu-util-compare", "compare with a baseline: NAME or PATH.json (no value, or a test path after it: the "
               "latest for this machine); 'history' (or a PATH.sqlite): each test with its last runs in the run history, "
               "a regression only outside their noise", kind="optional", parse=baseline_spec, metavar="NAME|PATH|history"),
    OptionSpec("--gpu-util-fail", "what counts as a regression, one expression per use (repeatable; a value may also hold "
               "several, comma-separated), e.g. --gpu-util-fail busy_pct:5 --gpu-util-fail gpu_busy_ms:10% "
               "--gpu-util-fail findings:0 (a finding the baseline did not have; findings.RULE:0 for one rule) "
               "(default busy_pct:5 mm_conv_pct:5 gpu_busy_ms:10%)", kind="append", parse=fail_expressions, metavar="EXPR"),
    OptionSpec("--gpu-util-compare-strict", "fail when there is no baseline to compare with", kind="flag", default=False),
    OptionSpec("--gpu-util-compare-any-machine", "compare even with a baseline from another GPU model", kind="flag", default=False),
    OptionSpec("--gpu-util-thresholds", "default @pytest.mark.gpu_util thresholds for all tests, e.g. 'min_busy_pct=20 max_kernel_count=5000'", metavar="K=V ..."),
    OptionSpec("--gpu-util-source", "where GPU work is read from: cupti (one capture for all tests, the default; falls "
               "back to torch when CUPTI cannot be used) or torch (a torch.profiler session per test, slower)",
               parse=event_source, default="cupti", metavar="SOURCE"),
    OptionSpec("--gpu-util-flush", "turn the capture into per-test records after N tests, S seconds or M MB of events, "
               "whichever comes first (default 'tests=1000 seconds=10 megabytes=64'); a crashed xdist worker loses "
               "at most the tests since its last flush", parse=flush_policy, default=FlushPolicy(), metavar="'tests=N seconds=S'"),
    OptionSpec("--gpu-util-memory", "GPU memory per test from PyTorch's allocator counters (peaks, what was left "
               "allocated, retries, out-of-memory errors): on (the default) or off (saves the two reads of the counters "
               "each test pays; memory limits are then not checked)", parse=on_off, default=True, metavar="on|off"),
    OptionSpec("--gpu-util-memory-history", "record every GPU allocation with its Python stack (slower): a test over "
               "a memory limit or out of memory then reports the allocations at its peak and saves a snapshot",
               kind="flag", default=False),
    OptionSpec("--gpu-util-history", "append this run to the SQLite run history at PATH (no value: DIR/history.sqlite); "
               "read by --gpu-util-compare history and gpuutil history", kind="optional", metavar="PATH"),
    OptionSpec("--gpu-util-history-runs", "with --gpu-util-compare history: each test's last N runs (default 5)",
               parse=positive_int, default=5, metavar="N"),
    OptionSpec("--gpu-util-counters", "hardware counters per test (SM, tensor, DRAM %, energy): auto (NVML GPM on Hopper and "
               "later, 100 ms samples; else CUPTI PM sampling; else energy only), cupti (PM sampling, every "
               "--gpu-util-counters-interval ms: short tests' own figures), gpm or off (the default for now)",
               parse=counter_mode, default="off", metavar="MODE"),
    OptionSpec("--gpu-util-counters-interval", "CUPTI PM sampling interval in ms (default 5; a test needs two intervals "
               "for its own figures)", parse=sampling_interval_ms, default=5.0, metavar="MS"),
    OptionSpec("--gpu-util-pin", "under pytest-xdist, pin worker i to GPU i mod count (sets CUDA_VISIBLE_DEVICES)", kind="flag", default=False),
    OptionSpec("--gpu-util-findings", "say what to fix in each test (pageable copies, host syncs, launch-bound loops, fp32 "
               "matmuls, an idle GPU, ...): on (the default) or off; off also stops recording the host's waits",
               parse=on_off, default=True, metavar="on|off"),
    OptionSpec("--gpu-util-findings-ignore", "findings rules to leave out, comma-separated, e.g. gpu-idle,memcpy-dominant",
               parse=rule_ids, default=frozenset(), metavar="RULE,RULE"),
    OptionSpec("--gpu-util-findings-floor", "report a finding only when its fix would save at least MS and PCT% of the "
               "test's time (default '1ms,2%'; 0: all); the others stay in gpu_util.json under below_floor",
               parse=findings_floor, metavar="'MSms,PCT%'"),
    OptionSpec("--gpu-util-children", "measure the GPU work of the processes tests start (subprocess, multiprocessing, "
               "torchrun; on, the default) or not (off: no spool, no child bootstrap, no injection library)",
               parse=on_off, default=True, metavar="on|off"),
    OptionSpec("--gpu-util-timelines", "which tests get a GPU timeline in the HTML report: N (the N worst: a third "
               "slowest, a third least busy, a third with the costliest findings; default 30), all, or off",
               parse=timeline_count, default=30, metavar="N|all|off"),
    OptionSpec("--gpu-util-timeline-gap", "the shortest idle gap a timeline shades and labels, in ms (default 0.1)",
               parse=gap_ms, default=0.1, metavar="MS"),
)

#: ini-only keys: (name, type, help)
INI_ONLY = (
    (
        "gpu_util_kernel_rules",
        "linelist",
        "kernel rules CATEGORY=REGEX, one per line, tried before the built-in ones (first match wins)",
    ),
)

GROUP = "gpuutil"
COMPARE_LATEST = "latest"


def add_options(parser: Any) -> None:
    """Register every option and ini key with pytest's parser."""
    group = parser.getgroup(GROUP, "GPU utilization (pytest-gpuutil)")
    for spec in OPTIONS:
        kwargs: dict[str, Any] = {"dest": spec.dest, "default": None, "help": spec.help.replace("%", "%%")}
        if spec.kind == "flag":
            kwargs["action"] = "store_true"
        else:
            kwargs["type"] = spec.parse
            kwargs["metavar"] = spec.metavar
            if spec.kind == "optional":
                kwargs.update(nargs="?", const=COMPARE_LATEST)
            elif spec.kind == "append":
                kwargs.update(action="append")
        group.addoption(spec.flag, **kwargs)
        parser.addini(spec.dest, spec.help, type=spec.ini_type, default=None)
    for name, ini_type, help_text in INI_ONLY:
        parser.addini(name, help_text, type=ini_type, default=[])


class OptionError(Exception):
    """A bad option or ini value; the plugin turns it into pytest.UsageError."""


def is_test_path(text: str, invocation_dir: Path) -> bool:
    """True when a word after an option with an optional value is a test path, not the value.

    A node id (``::``), a ``.py`` file or an existing folder is a test path; anything else (a
    baseline name, a ``.json`` or ``.html`` path, whether or not it exists) is the option's value.
    """
    if not text or text.startswith("-"):
        return False
    return "::" in text or text.endswith(".py") or (invocation_dir / text).is_dir()


def keep_test_paths(args: Sequence[str], invocation_dir: Path) -> tuple[list[str], list[str]]:
    """The command line with every test path after an optional-value option kept a test path.

    argparse gives ``--gpu-util-compare tests/test_x.py`` the path as the option's value and cannot
    give it back, so the option is written ``--gpu-util-compare=latest`` there (no value) before
    pytest parses the line. Returns the new arguments and the test paths so kept. A second
    expression after ``--gpu-util-fail EXPR`` is an OptionError (see misplaced_expression).
    """
    optional = {spec.flag for spec in OPTIONS if spec.kind == "optional"}
    out, kept = list(args), []
    for index, arg in enumerate(out):
        if arg == "--":
            break
        following = out[index + 1] if index + 1 < len(out) else ""
        if arg in optional and is_test_path(following, invocation_dir):
            out[index] = f"{arg}={COMPARE_LATEST}"
            kept.append(following)
    for spec in OPTIONS:
        if spec.kind == "append":
            problem = misplaced_expression(out, spec.flag, invocation_dir)
            if problem:
                raise OptionError(problem)
    return out, kept


def misplaced_expression(args: Sequence[str], flag: str, cwd: Path) -> Optional[str]:
    """What is wrong when a fail expression follows ``FLAG EXPR`` as a word of its own, else None.

    ``FLAG`` takes one expression per use, so that word would be read as a test path (or a
    file name); a word that names something on disk is left alone.
    """
    for index, arg in enumerate(args):
        if arg == "--":
            break
        name, has_value, value = arg.partition("=")
        if name != flag or (not has_value and index + 1 >= len(args)):
            continue
        if not has_value:
            value = args[index + 1]
        stray_at = index + (1 if has_value else 2)
        stray = args[stray_at] if stray_at < len(args) else ""
        if _is_expression(stray) and not (cwd / stray).exists():
            return (
                f"{flag} takes one expression per use: {stray!r} after {flag} {value} would not be read as one; "
                f"write {flag} {value} {flag} {stray} (or {flag} {value},{stray})"
            )
    return None


def _is_expression(text: str) -> bool:
    """True for a word that parses as fail expressions (METRIC:N or METRIC:N%)."""
    if not text or text.startswith("-") or ":" not in text:
        return False
    try:
        fail_expressions(text)
    except argparse.ArgumentTypeError:
        return False
    return True


def resolve(spec: OptionSpec, cli_value: Any, ini_value: Any) -> Any:
    """The option's value: the command line if given, else the ini key, else the default."""
    if cli_value is not None and not (spec.kind == "flag" and cli_value is False):
        return cli_value
    if ini_value is None or ini_value == "" or ini_value == []:
        return spec.default
    if spec.kind == "flag":
        return bool(ini_value)
    try:
        if spec.kind == "append":
            return [spec.parse(value) for value in ini_value]
        return spec.parse(ini_value)
    except argparse.ArgumentTypeError as exc:
        raise OptionError(f"ini key {spec.dest} (option {spec.flag}): {exc}") from None


@dataclass(frozen=True)
class Settings:
    """Resolved options of one pytest run."""

    enabled: bool
    cpu_activity: bool
    top: int
    output_dir: str
    traces: str
    tables: Optional[tuple[str, ...]]
    save: Optional[str]
    autosave: bool
    compare: Optional[str]
    fail: tuple[str, ...]
    compare_strict: bool
    compare_any_machine: bool
    thresholds: Optional[str]
    pin: bool
    kernel_rules: tuple[str, ...]
    flush: FlushPolicy = FlushPolicy()
    source: str = "cupti"
    memory_history: bool = False
    #: GPU memory per test from the allocator's counters (--gpu-util-memory)
    memory: bool = True
    #: where to write the HTML report: None = no report, "" = <output_dir>/report.html
    html: Optional[str] = None
    #: what turned measuring on: "--gpu-util", another option (TURNS_ON), the ini key, or "" (off)
    enabled_by: str = ""
    #: the run history to append to: None = none, "" = <output_dir>/history.sqlite
    history: Optional[str] = None
    #: earlier runs a test is compared with under --gpu-util-compare history
    history_runs: int = 5
    #: look for findings in each test, leaving out these rules
    findings: bool = True
    findings_ignore: frozenset[str] = frozenset()
    #: the least saving a finding is reported with (None: the rules' DEFAULT_FLOOR)
    findings_floor: Optional[Any] = None
    #: hardware counters: "auto", "cupti", "gpm" or "off", and PM sampling's interval in ms
    counters: str = "off"
    counters_interval_ms: float = 5.0
    #: measure the GPU work of the processes tests start (--gpu-util-children)
    children: bool = True
    #: tests with a timeline in the HTML report: the N worst (0: none), or None: all
    timelines: Optional[int] = 30
    #: the shortest idle gap a timeline labels (ms)
    timeline_gap_ms: float = 0.1


#: Options that turn measuring on when given on the command line, as --gpu-util does (their ini
#: keys do not: a key in an ini file would measure every run of the project without a word).
TURNS_ON = ("--gpu-util-html", "--gpu-util-save", "--gpu-util-autosave", "--gpu-util-compare", "--gpu-util-fail",
            "--gpu-util-history")
INI_TURNS_ON = "gpu_util = true in the ini file"


def turned_on_by(cli: dict[str, Any], ini_enabled: bool) -> str:
    """What turns measuring on (``cli``: each option's command-line value, None or False when not given)."""
    specs = {spec.flag: spec for spec in OPTIONS}
    for flag in ("--gpu-util", *TURNS_ON):
        if cli.get(specs[flag].dest) not in (None, False):
            return flag
    return INI_TURNS_ON if ini_enabled else ""


def read_settings(getoption: Callable[[str], Any], getini: Callable[[str], Any]) -> Settings:
    """Resolve every option from pytest's ``config.getoption`` / ``config.getini``."""
    cli = {spec.dest: getoption(spec.dest) for spec in OPTIONS}
    values = {spec.dest: resolve(spec, cli[spec.dest], getini(spec.dest)) for spec in OPTIONS}
    enabled_by = turned_on_by(cli, bool(values["gpu_util"]))
    if values["gpu_util_memory_history"] and not values["gpu_util_memory"]:
        raise OptionError("--gpu-util-memory-history reads the allocator's history at a test's memory figures: "
                          "it cannot go with --gpu-util-memory=off")
    return Settings(
        enabled=bool(enabled_by),
        enabled_by=enabled_by,
        cpu_activity=values["gpu_util_cpu"],
        top=values["gpu_util_top"],
        output_dir=values["gpu_util_dir"],
        traces=values["gpu_util_traces"],
        tables=values["gpu_util_tables"],
        save=values["gpu_util_save"],
        autosave=values["gpu_util_autosave"],
        compare=values["gpu_util_compare"],
        fail=tuple(values["gpu_util_fail"] or ()),
        compare_strict=values["gpu_util_compare_strict"],
        compare_any_machine=values["gpu_util_compare_any_machine"],
        thresholds=values["gpu_util_thresholds"],
        pin=values["gpu_util_pin"],
        kernel_rules=tuple(getini("gpu_util_kernel_rules") or ()),
        flush=values["gpu_util_flush"],
        source=values["gpu_util_source"],
        memory_history=values["gpu_util_memory_history"],
        memory=values["gpu_util_memory"],
        counters=values["gpu_util_counters"],
        counters_interval_ms=values["gpu_util_counters_interval"],
        html=None if values["gpu_util_html"] is None else "" if values["gpu_util_html"] == COMPARE_LATEST else values["gpu_util_html"],
        history=None if values["gpu_util_history"] is None else "" if values["gpu_util_history"] == COMPARE_LATEST
        else values["gpu_util_history"],
        history_runs=values["gpu_util_history_runs"],
        findings=values["gpu_util_findings"],
        findings_ignore=values["gpu_util_findings_ignore"],
        findings_floor=values["gpu_util_findings_floor"],
        children=values["gpu_util_children"],
        timelines=None if values["gpu_util_timelines"] == ALL_TIMELINES else values["gpu_util_timelines"],
        timeline_gap_ms=values["gpu_util_timeline_gap"],
    )

#: the gpu_util marker's line in `pytest --markers`
MARKER = (
    "gpu_util(min_busy_pct=None, min_mm_conv_pct=None, max_gpu_ms=None, max_kernel_count=None, max_memory=None, "
    "max_leak=None, min_sm_pct=None, min_tensor_pct=None, max_energy_j=None): fail the test when --gpu-util measures "
    "it below/above these limits (sizes like '2 GiB'; SM/tensor % and energy from the hardware counters)"
)
