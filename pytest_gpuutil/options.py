"""Command-line options and ini keys, declared once as data, resolved into frozen Settings.

Every option is also an ini key of the same name with dashes as underscores
(``--gpu-util-top`` ↔ ``gpu_util_top``); the command line wins over the ini file.
"""
from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from typing import Any, Callable, Optional

from pytest_gpuutil.capture.flush_policy import FlushPolicy

TRACE_MODES = ("none", "failed", "all")
SOURCES = ("cupti", "torch")


def non_negative_int(text: str) -> int:
    try:
        value = int(str(text).strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {value}")
    return value


def trace_mode(text: str) -> str:
    value = str(text).strip().lower()
    if value not in TRACE_MODES:
        raise argparse.ArgumentTypeError(f"expected one of {', '.join(TRACE_MODES)}, got {text!r}")
    return value


def event_source(text: str) -> str:
    value = str(text).strip().lower()
    if value not in SOURCES:
        raise argparse.ArgumentTypeError(f"expected one of {', '.join(SOURCES)}, got {text!r}")
    return value


def table_list(text: str) -> tuple[str, ...]:
    names = tuple(n for n in re.split(r"[,\s]+", str(text).strip()) if n)
    bad = [n for n in names if not re.fullmatch(r"[A-Za-z0-9_-]+", n)]
    if bad:
        raise argparse.ArgumentTypeError(f"invalid table name(s) {', '.join(map(repr, bad))}")
    return names


def nonempty_name(text: str) -> str:
    value = str(text).strip()
    if not value or not re.fullmatch(r"[A-Za-z0-9_.\-]+", value):
        raise argparse.ArgumentTypeError(f"expected a name of letters, digits, '_', '-', '.', got {text!r}")
    return value


def flush_policy(text: str) -> FlushPolicy:
    try:
        return FlushPolicy.parse(str(text), "expected tests=N seconds=S megabytes=M")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def plain_string(text: str) -> str:
    return str(text).strip()


@dataclass(frozen=True)
class OptionSpec:
    """One option: its flag, its ini key (``dest``), its type and help."""

    flag: str
    help: str
    kind: str = "value"  # "flag" (store_true) | "value" | "optional" (nargs='?') | "list" (nargs='+')
    parse: Callable[[str], Any] = plain_string
    default: Any = None
    metavar: Optional[str] = None

    @property
    def dest(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")

    @property
    def ini_type(self) -> str:
        return {"flag": "bool", "list": "args"}.get(self.kind, "string")


OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec("--gpu-util", "profile each test's call phase and report GPU utilization", kind="flag", default=False),
    OptionSpec("--gpu-util-cpu", "also record CPU activity (slower; profiles even without CUDA)", kind="flag", default=False),
    OptionSpec("--gpu-util-top", "tests listed in the summary, by GPU time (0 = all; default 10)", parse=non_negative_int, default=10, metavar="N"),
    OptionSpec("--gpu-util-dir", "output folder for CSV/JSON/traces (default .gpu_util)", default=".gpu_util", metavar="DIR"),
    OptionSpec("--gpu-util-traces", "write a gzip'd Chrome trace per test: none, failed or all (default none)", parse=trace_mode, default="none", metavar="MODE"),
    OptionSpec("--gpu-util-tables", "metric tables to write, comma-separated (default: all registered)", parse=table_list, metavar="A,B"),
    OptionSpec("--gpu-util-save", "save this run as baseline NAME under DIR/baselines/<machine id>/", parse=nonempty_name, metavar="NAME"),
    OptionSpec("--gpu-util-autosave", "save this run as a timestamped baseline", kind="flag", default=False),
    OptionSpec("--gpu-util-compare", "compare with a baseline: NAME or PATH (no value: the latest for this machine)", kind="optional", metavar="NAME|PATH"),
    OptionSpec("--gpu-util-fail", "what counts as a regression, e.g. busy_pct:5 gpu_busy_ms:10% (default busy_pct:5 mm_conv_pct:5 gpu_busy_ms:10%)", kind="list", metavar="EXPR"),
    OptionSpec("--gpu-util-compare-strict", "fail when there is no baseline to compare with", kind="flag", default=False),
    OptionSpec("--gpu-util-compare-any-machine", "compare even with a baseline from another GPU model", kind="flag", default=False),
    OptionSpec("--gpu-util-thresholds", "default @pytest.mark.gpu_util thresholds for all tests, e.g. 'min_busy_pct=20 max_kernel_count=5000'", metavar="K=V ..."),
    OptionSpec("--gpu-util-source", "where GPU work is read from: cupti (one capture for all tests, the default; falls "
               "back to torch when CUPTI cannot be used) or torch (a torch.profiler session per test, slower)",
               parse=event_source, default="cupti", metavar="SOURCE"),
    OptionSpec("--gpu-util-flush", "turn the capture into per-test records after N tests, S seconds or M MB of events, "
               "whichever comes first (default 'tests=100 seconds=10 megabytes=64'); a crashed xdist worker loses "
               "at most the tests since its last flush", parse=flush_policy, default=FlushPolicy(), metavar="'tests=N seconds=S'"),
    OptionSpec("--gpu-util-pin", "under pytest-xdist, pin worker i to GPU i mod count (sets CUDA_VISIBLE_DEVICES)", kind="flag", default=False),
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
            elif spec.kind == "list":
                kwargs.update(nargs="+", type=str)
        group.addoption(spec.flag, **kwargs)
        parser.addini(spec.dest, spec.help, type=spec.ini_type, default=None)
    for name, ini_type, help_text in INI_ONLY:
        parser.addini(name, help_text, type=ini_type, default=[])


class OptionError(Exception):
    """A bad option or ini value; the plugin turns it into pytest.UsageError."""


def resolve(spec: OptionSpec, cli_value: Any, ini_value: Any) -> Any:
    """The option's value: the command line if given, else the ini key, else the default."""
    if cli_value is not None and not (spec.kind == "flag" and cli_value is False):
        return cli_value
    if ini_value is None or ini_value == "" or ini_value == []:
        return spec.default
    if spec.kind == "flag":
        return bool(ini_value)
    if spec.kind == "list":
        return list(ini_value)
    try:
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


def read_settings(getoption: Callable[[str], Any], getini: Callable[[str], Any]) -> Settings:
    """Resolve every option from pytest's ``config.getoption`` / ``config.getini``."""
    values = {spec.dest: resolve(spec, getoption(spec.dest), getini(spec.dest)) for spec in OPTIONS}
    return Settings(
        enabled=values["gpu_util"],
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
    )
